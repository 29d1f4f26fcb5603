//! Cubins: the ELF objects `ptxas`, nvJitLink and NVRTC produce (`e_machine` 190, `EM_CUDA`).
//!
//! What the simulated driver reads of one (layouts observed on `ptxas` 12.9 output; nothing here
//! interprets machine code):
//! - the architecture, from `e_flags`: for ELF ABI version 7 (up to `sm_90`) the SM number is bits
//!   0-7 and bit 11 marks an architecture-specific build (`sm_90a`); for ABI version 8 (`sm_100` and
//!   later) the SM number is bits 8-15 and bit 3 marks it;
//! - kernels: `STT_FUNC` symbols with the entry mark in `st_other` (`0x10`), each with a
//!   `.nv.info.<name>` section of attribute records, among them one `KPARAM_INFO` (attribute `0x17`) per
//!   parameter: ordinal, offset in the parameter buffer and size;
//! - globals: `STT_OBJECT` symbols in `.nv.global` (zero-filled), `.nv.global.init` and the user
//!   constant banks `.nv.constant<N>` (their initial bytes are the section's), never the per-kernel
//!   parameter banks (`.nv.constant0.<kernel>`).

use super::{Arch, Entry, Global, ImageError, Module, Param};
use object::LittleEndian;
use object::elf::{EM_CUDA, FileHeader64, SHT_NOBITS, STT_FUNC, STT_OBJECT};
use object::read::elf::{FileHeader, SectionHeader, Sym};

/// `st_other` mark of a kernel entry point.
const STO_ENTRY: u8 = 0x10;
/// `.nv.info` attribute record formats (`EIFMT_*`): no value, byte, half-word, sized value.
const FMT_SVAL: u8 = 4;
/// `.nv.info` attribute: one kernel parameter (`EIATTR_KPARAM_INFO`).
const KPARAM_INFO: u8 = 0x17;

/// A parsed cubin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cubin {
    /// What it was built for.
    pub arch: Arch,
    /// Its kernels and globals.
    pub module: Module,
}

fn invalid(what: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("not a valid cubin: {what}"))
}

/// The bytes an ELF image spans, from its header alone (the section and program header tables'
/// ends, which tools write last): how much to read of an image passed by pointer. `None` when `head`
/// (at least 64 bytes) is no 64-bit little-endian ELF header.
pub fn extent(head: &[u8]) -> Option<usize> {
    let header = FileHeader64::<LittleEndian>::parse(head).ok()?;
    let e = LittleEndian;
    let sections = header.e_shoff(e) as usize + header.e_shnum(e) as usize * header.e_shentsize(e) as usize;
    let programs = header.e_phoff(e) as usize + header.e_phnum(e) as usize * header.e_phentsize(e) as usize;
    Some(sections.max(programs).max(size_of::<FileHeader64<LittleEndian>>()))
}

/// The end of the last section's bytes in `image` (which may lie past [`extent`]'s estimate).
pub fn sections_end(image: &[u8]) -> Option<usize> {
    let header = FileHeader64::<LittleEndian>::parse(image).ok()?;
    let sections = header.sections(LittleEndian, image).ok()?;
    let ends = sections.iter().filter(|s| s.sh_type(LittleEndian) != SHT_NOBITS);
    ends.map(|s| (s.sh_offset(LittleEndian) + s.sh_size(LittleEndian)) as usize).max()
}

/// The architecture `e_flags` names, by the layout of ELF ABI version `abi`.
fn arch(abi: u8, flags: u32) -> Arch {
    match abi {
        ..=7 => Arch { sm: flags & 0xff, specific: flags & 0x800 != 0 },
        _ => Arch { sm: (flags >> 8) & 0xff, specific: flags & 0x8 != 0 },
    }
}

/// Parses a cubin: its architecture, kernels (with their parameter layout) and globals.
pub fn parse(image: &[u8]) -> Result<Cubin, ImageError> {
    let e = LittleEndian;
    let header = FileHeader64::<LittleEndian>::parse(image).map_err(invalid)?;
    if header.e_machine(e) != EM_CUDA {
        return Err(invalid(format_args!("e_machine {} is not EM_CUDA ({EM_CUDA})", header.e_machine(e))));
    }
    let arch = arch(header.e_ident().abi_version, header.e_flags(e));
    let sections = header.sections(e, image).map_err(invalid)?;
    let symbols = sections.symbols(e, image, object::elf::SHT_SYMTAB).map_err(invalid)?;
    let section_name = |index: usize| -> Option<&[u8]> {
        let section = sections.section(object::SectionIndex(index)).ok()?;
        sections.section_name(e, section).ok()
    };
    let mut module = Module::default();
    for symbol in symbols.iter() {
        let name = || symbols.symbol_name(e, symbol).map(|n| String::from_utf8_lossy(n).into_owned());
        let index = symbol.st_shndx(e) as usize;
        match symbol.st_type() {
            STT_FUNC if symbol.st_other() & STO_ENTRY != 0 => {
                let name = name().map_err(invalid)?;
                let info = sections
                    .iter()
                    .find(|s| sections.section_name(e, s).is_ok_and(|n| n == format!(".nv.info.{name}").as_bytes()));
                let params = info.and_then(|s| s.data(e, image).ok()).map(kernel_params);
                module.entries.push(Entry { name, params });
            }
            STT_OBJECT if index != 0 => {
                let Some(section_name) = section_name(index) else { continue };
                let global = section_name == b".nv.global" || section_name.starts_with(b".nv.global.");
                let bank = section_name.strip_prefix(b".nv.constant");
                let user_bank = bank.is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit));
                if !(global || user_bank) {
                    continue;
                }
                let section = sections.section(object::SectionIndex(index)).map_err(invalid)?;
                let (start, size) = (symbol.st_value(e) as usize, symbol.st_size(e) as usize);
                let init = match section.data(e, image) {
                    Ok(data) if section.sh_type(e) != SHT_NOBITS => {
                        data.get(start..start + size).ok_or_else(|| invalid("a global lies outside its section"))?
                    }
                    _ => &[],
                };
                module.globals.push(Global { name: name().map_err(invalid)?, size, init: init.to_vec() });
            }
            _ => {}
        }
    }
    Ok(Cubin { arch, module })
}

/// Writes `module` as a cubin for `arch` (ELF ABI 7 `e_flags` below `sm_100`, 8 from it): what the JIT
/// linker (`cuLinkComplete`) hands back. Each kernel is an entry symbol over an empty `.text.<name>` with
/// its parameters in `.nv.info.<name>`; globals lie in `.nv.global.init` with their initial bytes. The
/// simulated driver loads it as any other cubin; there is no machine code in it.
pub fn write(module: &Module, arch: Arch) -> Vec<u8> {
    use object::write::elf::{FileHeader, SectionHeader, Sym, Writer};
    const SHT_CUDA_INFO: u32 = 0x7000_0000;
    let (abi, flags) = match arch.sm {
        ..100 => (7, arch.sm | 0x500 | (arch.sm << 16) | if arch.specific { 0x800 } else { 0 }),
        _ => (8, (arch.sm << 8) | 0x600_0002 | if arch.specific { 0x8 } else { 0 }),
    };
    let text_names: Vec<String> = module.entries.iter().map(|e| format!(".text.{}", e.name)).collect();
    let info_names: Vec<String> = module.entries.iter().map(|e| format!(".nv.info.{}", e.name)).collect();
    let infos: Vec<Vec<u8>> = module.entries.iter().map(|e| info_records(e.params.as_deref().unwrap_or(&[]))).collect();
    let mut globals = Vec::new();
    let mut global_at = Vec::new();
    for g in &module.globals {
        let at = globals.len().next_multiple_of(8);
        globals.resize(at, 0);
        global_at.push(at as u64);
        globals.extend_from_slice(&g.init[..g.init.len().min(g.size)]);
        globals.resize(at + g.size, 0);
    }

    let mut out = Vec::new();
    let mut w = Writer::new(object::Endianness::Little, true, &mut out);
    w.reserve_file_header();
    w.reserve_null_section_index();
    let text: Vec<_> =
        text_names.iter().map(|n| (w.add_section_name(n.as_bytes()), w.reserve_section_index())).collect();
    let info: Vec<_> =
        info_names.iter().map(|n| (w.add_section_name(n.as_bytes()), w.reserve_section_index())).collect();
    let global_section = (w.add_section_name(b".nv.global.init"), w.reserve_section_index());
    w.reserve_shstrtab_section_index();
    w.reserve_strtab_section_index();
    let symtab = w.reserve_symtab_section_index();
    w.reserve_null_symbol_index();
    let global_syms: Vec<_> =
        module.globals.iter().map(|g| (w.add_string(g.name.as_bytes()), w.reserve_symbol_index(None))).collect();
    let locals = 1 + global_syms.len() as u32;
    let entry_syms: Vec<_> =
        module.entries.iter().map(|e| (w.add_string(e.name.as_bytes()), w.reserve_symbol_index(None))).collect();
    let text_at: Vec<usize> = text.iter().map(|_| w.reserve(16, 128)).collect();
    let info_at: Vec<usize> = infos.iter().map(|i| w.reserve(i.len(), 4)).collect();
    let globals_at = w.reserve(globals.len(), 8);
    w.reserve_shstrtab();
    w.reserve_strtab();
    w.reserve_symtab();
    w.reserve_section_headers();

    let header = FileHeader {
        os_abi: if abi == 7 { 0x33 } else { 0x41 },
        abi_version: abi,
        e_type: object::elf::ET_EXEC,
        e_machine: EM_CUDA,
        e_entry: 0,
        e_flags: flags,
    };
    w.write_file_header(&header).expect("an ELF header fits");
    for _ in &text {
        w.write_align(128);
        w.write(&[0; 16]);
    }
    for i in &infos {
        w.write_align(4);
        w.write(i);
    }
    w.write_align(8);
    w.write(&globals);
    w.write_shstrtab();
    w.write_strtab();
    w.write_null_symbol();
    let sym = |name, section, st_info, st_other, st_value, st_size| Sym {
        name: Some(name),
        section: Some(section),
        st_info,
        st_other,
        st_shndx: 0,
        st_value,
        st_size,
    };
    for ((name, _), (g, at)) in global_syms.iter().zip(module.globals.iter().zip(&global_at)) {
        w.write_symbol(&sym(*name, global_section.1, STT_OBJECT, 0, *at, g.size as u64));
    }
    for ((name, _), (_, section)) in entry_syms.iter().zip(&text) {
        let st_info = (object::elf::STB_GLOBAL << 4) | STT_FUNC;
        w.write_symbol(&sym(*name, *section, st_info, STO_ENTRY, 0, 16));
    }
    w.write_null_section_header();
    let section = |name, sh_type, sh_flags, sh_offset, sh_size, sh_link, sh_info, sh_addralign| SectionHeader {
        name: Some(name),
        sh_type,
        sh_flags,
        sh_addr: 0,
        sh_offset,
        sh_size,
        sh_link,
        sh_info,
        sh_addralign,
        sh_entsize: 0,
    };
    let alloc_exec = u64::from(object::elf::SHF_ALLOC | object::elf::SHF_EXECINSTR);
    for ((name, _), at) in text.iter().zip(&text_at) {
        w.write_section_header(&section(*name, object::elf::SHT_PROGBITS, alloc_exec, *at as u64, 16, 0, 0, 128));
    }
    for (((name, _), at), ((_, text_index), i)) in info.iter().zip(&info_at).zip(text.iter().zip(&infos)) {
        let link = symtab.0;
        let header = section(*name, SHT_CUDA_INFO, 0, *at as u64, i.len() as u64, link, text_index.0, 4);
        w.write_section_header(&header);
    }
    let write_alloc = u64::from(object::elf::SHF_ALLOC | object::elf::SHF_WRITE);
    let (name, _) = global_section;
    let globals_header =
        section(name, object::elf::SHT_PROGBITS, write_alloc, globals_at as u64, globals.len() as u64, 0, 0, 8);
    w.write_section_header(&globals_header);
    w.write_shstrtab_section_header();
    w.write_strtab_section_header();
    w.write_symtab_section_header(locals);
    out
}

/// `.nv.info.<kernel>` records for `params`: one `KPARAM_INFO` each, as ptxas writes them.
fn info_records(params: &[Param]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ordinal, p) in params.iter().enumerate().rev() {
        out.extend_from_slice(&[FMT_SVAL, KPARAM_INFO, 12, 0, 0, 0, 0, 0]);
        out.extend_from_slice(&(ordinal as u16).to_le_bytes());
        out.extend_from_slice(&(p.offset as u16).to_le_bytes());
        out.extend_from_slice(&((p.size << 18) | 0xf000).to_le_bytes());
    }
    out
}

/// A kernel's parameters from its `.nv.info.<name>` records, ordered by ordinal.
fn kernel_params(info: &[u8]) -> Vec<Param> {
    let mut params: Vec<(u16, Param)> = Vec::new();
    let mut at = 0;
    while at + 4 <= info.len() {
        let (format, attribute) = (info[at], info[at + 1]);
        if format != FMT_SVAL {
            // Every other format is one 4-byte record.
            at += 4;
            continue;
        }
        let size = u16::from_le_bytes([info[at + 2], info[at + 3]]) as usize;
        let Some(value) = info.get(at + 4..at + 4 + size) else { break };
        if attribute == KPARAM_INFO && size >= 12 {
            // index (4 bytes), ordinal (2), offset (2), then a word whose bits 18-31 are the size.
            let ordinal = u16::from_le_bytes([value[4], value[5]]);
            let offset = u16::from_le_bytes([value[6], value[7]]) as u32;
            let word = u32::from_le_bytes([value[8], value[9], value[10], value[11]]);
            params.push((ordinal, Param { offset, size: (word >> 18) & 0x3fff }));
        }
        at += 4 + size;
    }
    params.sort_by_key(|(ordinal, _)| *ordinal);
    params.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e_flags_by_abi_version() {
        // As ptxas 12.9 writes them.
        assert_eq!(arch(7, 0x50_055a), Arch { sm: 90, specific: false });
        assert_eq!(arch(7, 0x50_0d5a), Arch { sm: 90, specific: true });
        assert_eq!(arch(7, 0x50_0559), Arch { sm: 89, specific: false });
        assert_eq!(arch(8, 0x600_6402), Arch { sm: 100, specific: false });
        assert_eq!(arch(8, 0x600_640a), Arch { sm: 100, specific: true });
        assert_eq!(arch(8, 0x600_7802), Arch { sm: 120, specific: false });
    }

    #[test]
    fn parameters_come_from_kparam_info_records_by_ordinal() {
        // The records ptxas wrote for `vadd(.param .u64 a, .param .u64 b, .param .u32 n)`, with
        // other attributes around them.
        let info = [
            "04370400",
            "81000000",
            "0417",
            "0c00",
            "000000000200100000f01100",
            "0417",
            "0c00",
            "000000000100080000f02100",
            "0417",
            "0c00",
            "000000000000000000f02100",
            "03500000",
            "031bff00",
        ]
        .concat();
        let bytes: Vec<u8> =
            (0..info.len()).step_by(2).map(|i| u8::from_str_radix(&info[i..i + 2], 16).unwrap()).collect();
        assert_eq!(
            kernel_params(&bytes),
            vec![Param { offset: 0, size: 8 }, Param { offset: 8, size: 8 }, Param { offset: 16, size: 4 }]
        );
    }

    #[test]
    fn a_written_cubin_reads_back() {
        let module = Module {
            entries: vec![
                Entry {
                    name: "vector_add_f32".into(),
                    params: Some(vec![Param { offset: 0, size: 8 }, Param { offset: 8, size: 4 }]),
                },
                Entry { name: "spin".into(), params: Some(vec![]) },
            ],
            globals: vec![Global { name: "table".into(), size: 12, init: vec![1, 2, 3] }],
        };
        for arch in
            [Arch { sm: 90, specific: false }, Arch { sm: 90, specific: true }, Arch { sm: 120, specific: false }]
        {
            let image = write(&module, arch);
            let back = parse(&image).unwrap();
            assert_eq!(back.arch, arch);
            let mut expected = module.clone();
            expected.globals[0].init = vec![1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            assert_eq!(back.module, expected);
            assert_eq!(extent(&image).unwrap().max(sections_end(&image).unwrap()), image.len());
        }
    }

    #[test]
    fn what_is_no_cubin_is_an_invalid_image() {
        assert!(matches!(parse(b"\x7fELF\x02\x01\x01"), Err(ImageError::Invalid(_))));
        assert_eq!(extent(b"short"), None);
    }
}
