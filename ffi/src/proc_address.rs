//! The real driver's `cuGetProcAddress` resolution rules, driven by the probed table in
//! `data/proc-address-table.tsv` (compiled in by `build.rs`).

/// One probed answer: requesting `base` with `flags` at a CUDA version >= `min_version` yields `symbol`
/// (unless a row with a higher `min_version` <= the requested version exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcAddressRow {
    /// Base name as a program asks for it, e.g. `cuMemAlloc`.
    pub base: &'static str,
    /// `CU_GET_PROC_ADDRESS_*` flags value of the request (0 default, 1 legacy stream, 2 per-thread).
    pub flags: u8,
    /// First CUDA version (1000*major + 10*minor) at which this answer is given.
    pub min_version: u32,
    /// Exported symbol the driver returns, e.g. `cuMemAlloc_v2`.
    pub symbol: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/proc_address_rows.rs"));

/// The CUDA version of the driver the table was probed on: its answers are authoritative for requests up to
/// this version; a newer driver may answer newer requests with variants the table does not know.
pub const PROBED_VERSION: u32 = 13000;

/// `CU_GET_PROC_ADDRESS_DEFAULT`.
pub const FLAG_DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`.
pub const FLAG_LEGACY_STREAM: u64 = 1;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const FLAG_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// `CU_GET_PROC_ADDRESS_SUCCESS`.
pub const STATUS_SUCCESS: i32 = 0;
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
pub const STATUS_SYMBOL_NOT_FOUND: i32 = 1;
/// `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`.
pub const STATUS_VERSION_NOT_SUFFICIENT: i32 = 2;

/// Why a lookup produced no symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// The base name is not one the driver knows.
    NotFound,
    /// The name exists, but only in versions newer than the one requested.
    VersionNotSufficient,
}

impl Unresolved {
    /// The `CUdriverProcAddressQueryResult` value for this outcome.
    pub fn status(self) -> i32 {
        match self {
            Unresolved::NotFound => STATUS_SYMBOL_NOT_FOUND,
            Unresolved::VersionNotSufficient => STATUS_VERSION_NOT_SUFFICIENT,
        }
    }
}

/// Maps a request's flags to the table's flag column. Only the per-thread bit changes the answer; any
/// other value resolves like the default, as the driver does.
fn flag_column(flags: u64) -> u8 {
    if flags & FLAG_PER_THREAD_DEFAULT_STREAM != 0 {
        2
    } else if flags & FLAG_LEGACY_STREAM != 0 {
        1
    } else {
        0
    }
}

/// All rows for one base name and flag column, newest first.
fn rows_for(base: &str, column: u8) -> &'static [ProcAddressRow] {
    let start = ROWS.partition_point(|r| (r.base, r.flags) < (base, column));
    let end = ROWS.partition_point(|r| (r.base, r.flags) <= (base, column));
    &ROWS[start..end]
}

/// Resolves `(base, cudaVersion, flags)` to the exported symbol the real driver would return.
pub fn resolve(base: &str, cuda_version: u32, flags: u64) -> Result<&'static str, Unresolved> {
    let rows = rows_for(base, flag_column(flags));
    if rows.is_empty() {
        return Err(Unresolved::NotFound);
    }
    rows.iter().find(|r| r.min_version <= cuda_version).map(|r| r.symbol).ok_or(Unresolved::VersionNotSufficient)
}

/// True when `symbol` is an exported name the real driver hands out.
pub fn is_exported(symbol: &str) -> bool {
    EXPORTED_SYMBOLS.binary_search(&symbol).is_ok()
}

/// Every base name whose answers include `symbol` (for example `cuMemAlloc_v2` -> `cuMemAlloc`).
pub fn bases_of(symbol: &str) -> impl Iterator<Item = &'static str> + '_ {
    let mut last = "";
    ROWS.iter().filter(move |r| r.symbol == symbol).filter_map(move |r| {
        if r.base == last {
            None
        } else {
            last = r.base;
            Some(r.base)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_issue_examples() {
        assert_eq!(resolve("cuCtxCreate", 3010, 0), Ok("cuCtxCreate"));
        assert_eq!(resolve("cuCtxCreate", 3020, 0), Ok("cuCtxCreate_v2"));
        assert_eq!(resolve("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(resolve("cuCtxCreate", 12050, 0), Ok("cuCtxCreate_v4"));
        assert_eq!(resolve("cuMemAlloc", 3020, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 12080, 2), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuStreamDestroy", 4000, 0), Ok("cuStreamDestroy_v2"));
        assert_eq!(resolve("cuEventElapsedTime", 12080, 0), Ok("cuEventElapsedTime_v2"));
        assert_eq!(resolve("cuEventElapsedTime", 12060, 0), Ok("cuEventElapsedTime"));
        assert_eq!(resolve("cuGetProcAddress", 12000, 0), Ok("cuGetProcAddress_v2"));
        assert_eq!(resolve("cuLaunchKernel", 7000, 2), Ok("cuLaunchKernel_ptsz"));
        assert_eq!(resolve("cuMemcpyHtoD", 7000, 2), Ok("cuMemcpyHtoD_v2_ptds"));
    }

    #[test]
    fn unknown_and_too_old() {
        assert_eq!(resolve("cuNoSuchThing", 12000, 0), Err(Unresolved::NotFound));
        assert_eq!(resolve("cuMemcpyBatchAsync", 12000, 0), Err(Unresolved::VersionNotSufficient));
    }

    #[test]
    fn unknown_flag_bits_resolve_like_default() {
        assert_eq!(resolve("cuLaunchKernel", 12000, 8), resolve("cuLaunchKernel", 12000, 0));
    }

    #[test]
    fn no_row_is_newer_than_the_probed_driver() {
        assert!(ROWS.iter().all(|r| r.min_version <= PROBED_VERSION));
        assert!(ROWS.iter().any(|r| r.min_version == PROBED_VERSION));
    }

    #[test]
    fn table_is_complete() {
        assert_eq!(ROWS.len(), 1690);
        assert!(is_exported("cuMemAlloc_v2"));
        assert!(!is_exported("cuMemAlloc_v9"));
        assert_eq!(bases_of("cuMemAlloc_v2").collect::<Vec<_>>(), vec!["cuMemAlloc"]);
    }
}
