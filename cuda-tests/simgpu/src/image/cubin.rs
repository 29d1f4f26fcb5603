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
    fn what_is_no_cubin_is_an_invalid_image() {
        assert!(matches!(parse(b"\x7fELF\x02\x01\x01"), Err(ImageError::Invalid(_))));
        assert_eq!(extent(b"short"), None);
    }
}
