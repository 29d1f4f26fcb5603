//! Finds a symbol in an already-loaded library by reading its ELF dynamic symbol table.
//!
//! The shim exports `dlsym` and `dlvsym`, so it cannot reach libc's own through the dynamic linker: any
//! reference it makes, versioned or not, binds to its own definitions first (an unversioned definition
//! satisfies a versioned reference). Reading libc's symbol table directly is the one way that cannot
//! recurse into the shim. The provider library (`libaccelerator_tessera.so`, through `tessera_host::dl`)
//! uses it too, to look NVML up without the shim's hooks when the shim is preloaded in its process.

use std::ffi::{CStr, c_char, c_int, c_void};

/// An `Elf64_Dyn` entry.
#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
/// Version index bit marking a hidden (non-default) version.
const VERSYM_HIDDEN: u16 = 0x8000;

struct Search<'a> {
    library: &'a str,
    symbol: &'a [u8],
    found: Option<usize>,
}

/// Tables of one loaded object, with addresses already relocated.
struct Tables {
    base: usize,
    symtab: usize,
    strtab: usize,
    versym: usize,
    count: usize,
}

/// True when `path`'s file name is `library` or a versioned form of it (`libc.so.6` for `libc.so`).
fn names(path: &str, library: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file == library || file.strip_prefix(library).is_some_and(|rest| rest.starts_with('.'))
}

/// Reads the dynamic section of an object.
///
/// # Safety
/// `info` must describe a loaded object (as `dl_iterate_phdr` provides).
unsafe fn tables(info: &libc::dl_phdr_info) -> Option<Tables> {
    let base = info.dlpi_addr as usize;
    // SAFETY: the loader provides `dlpi_phnum` program headers at `dlpi_phdr`.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let dynamic = phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC)?;
    // The loader relocates most entries in place; an entry still below the base is an offset.
    let fix = |v: u64| if (v as usize) < base { v as usize + base } else { v as usize };
    let (mut symtab, mut strtab, mut versym, mut hash, mut gnu_hash) = (0, 0, 0, 0, 0);
    let mut entry = (base + dynamic.p_vaddr as usize) as *const Dyn;
    loop {
        // SAFETY: the dynamic section is an array of entries ending with DT_NULL.
        let d = unsafe { &*entry };
        match d.tag {
            DT_NULL => break,
            DT_SYMTAB => symtab = fix(d.val),
            DT_STRTAB => strtab = fix(d.val),
            DT_VERSYM => versym = fix(d.val),
            DT_HASH => hash = fix(d.val),
            DT_GNU_HASH => gnu_hash = fix(d.val),
            _ => {}
        }
        // SAFETY: not past DT_NULL yet.
        entry = unsafe { entry.add(1) };
    }
    let count = if hash != 0 {
        // SAFETY: DT_HASH starts with nbucket, nchain; nchain is the symbol count.
        unsafe { *(hash as *const u32).add(1) as usize }
    } else if gnu_hash != 0 {
        // SAFETY: a valid GNU hash table of this object.
        unsafe { gnu_symbol_count(gnu_hash) }
    } else {
        return None;
    };
    (symtab != 0 && strtab != 0).then_some(Tables { base, symtab, strtab, versym, count })
}

/// Number of dynamic symbols described by a GNU hash table: one past the highest chain's end.
///
/// # Safety
/// `table` must be a loaded object's DT_GNU_HASH table.
unsafe fn gnu_symbol_count(table: usize) -> usize {
    let header = table as *const u32;
    // SAFETY: the header is nbuckets, symoffset, bloom_size, bloom_shift, then the bloom words (64-bit),
    // the buckets and the chains, all inside the table.
    unsafe {
        let (nbuckets, symoffset, bloom_size) = (*header as usize, *header.add(1) as usize, *header.add(2) as usize);
        let buckets = (table + 16 + bloom_size * 8) as *const u32;
        let chains = buckets.add(nbuckets);
        let mut last = (0..nbuckets).map(|b| *buckets.add(b) as usize).max().unwrap_or(0);
        if last < symoffset {
            return symoffset;
        }
        while *chains.add(last - symoffset) & 1 == 0 {
            last += 1;
        }
        last + 1
    }
}

unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the Search passed to dl_iterate_phdr below; `info` is valid during the callback.
    let (search, info) = unsafe { (&mut *(data as *mut Search), &*info) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: the loader's object names are NUL-terminated strings.
    let path = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
    if !names(&path, search.library) {
        return 0;
    }
    // SAFETY: `info` describes a loaded object.
    let Some(t) = (unsafe { tables(info) }) else { return 0 };
    for i in 0..t.count {
        // SAFETY: i < count, so within the symbol table; names are offsets into the string table.
        let (sym, hidden) = unsafe {
            let sym = &*(t.symtab as *const libc::Elf64_Sym).add(i);
            let hidden = t.versym != 0 && *(t.versym as *const u16).add(i) & VERSYM_HIDDEN != 0;
            (sym, hidden)
        };
        if sym.st_value == 0 || sym.st_shndx == 0 || hidden {
            continue;
        }
        // SAFETY: st_name indexes the NUL-terminated string table.
        let name = unsafe { CStr::from_ptr((t.strtab + sym.st_name as usize) as *const c_char) };
        if name.to_bytes() == search.symbol {
            search.found = Some(t.base + sym.st_value as usize);
            return 1;
        }
    }
    0
}

/// The default-version definition of `symbol` in the loaded library named `library` (e.g. `libc.so`).
pub fn lookup(library: &str, symbol: &str) -> Option<usize> {
    let mut search = Search { library, symbol: symbol.as_bytes(), found: None };
    // SAFETY: `visit` only reads loader-provided data and writes into `search`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_libc_functions() {
        let getpid = super::lookup("libc.so", "getpid").expect("libc getpid");
        assert_eq!(getpid, libc::getpid as *const () as usize);
        assert!(super::lookup("libc.so", "no_such_symbol_anywhere").is_none());
        assert!(super::names("/lib/x86_64-linux-gnu/libc.so.6", "libc.so"));
        assert!(!super::names("/lib/libcapture.so", "libc.so"));
    }
}
