//! Module images as a real driver takes them: PTX text, cubins (CUDA ELF objects) and fatbin containers
//! (what nvcc embeds and the runtime registers), with the driver's compatibility rule deciding which
//! part of a fatbin a device runs (see [`load`]).
//!
//! Nothing here executes device code: a module's kernels are known by name and parameter layout, its
//! globals by name, size and initial bytes. Which kernels the engine computes is `crate::kernels`' job.

pub mod cubin;
pub mod fatbin;

use crate::ptx;

/// A compute capability, `(major, minor)`: `(9, 0)` for an H100.
pub type Capability = (u32, u32);

/// One kernel parameter: where it lies in the parameter buffer, and its size, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Offset in the parameter buffer.
    pub offset: u32,
    /// Size.
    pub size: u32,
}

/// A kernel entry point of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name, as `cuModuleGetFunction` looks it up.
    pub name: String,
    /// Its parameters in order (a cubin's `.nv.info`, a PTX entry's `.param` list); `None` when the
    /// image does not say.
    pub params: Option<Vec<Param>>,
}

/// A module-scope variable (`__device__` or `__constant__`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// Its name, as `cuModuleGetGlobal` looks it up.
    pub name: String,
    /// Its size in bytes.
    pub size: usize,
    /// Its initial bytes (fewer than `size`, or none: the rest is zero).
    pub init: Vec<u8>,
}

/// What a module image holds, once the part the device runs is chosen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Module {
    /// Kernel entry points, in image order.
    pub entries: Vec<Entry>,
    /// Module-scope variables.
    pub globals: Vec<Global>,
}

impl Module {
    /// Adds `more`'s kernels and globals, as a linker joins objects: a name defined in both is refused
    /// (`CUDA_ERROR_INVALID_IMAGE`), and nothing is added then.
    pub fn merge(&mut self, more: Module) -> Result<(), ImageError> {
        let taken =
            |name: &str| self.entries.iter().any(|e| e.name == name) || self.globals.iter().any(|g| g.name == name);
        if let Some(twice) =
            more.entries.iter().map(|e| &e.name).chain(more.globals.iter().map(|g| &g.name)).find(|n| taken(n))
        {
            return Err(ImageError::Invalid(format!("{twice} is defined twice")));
        }
        self.entries.extend(more.entries);
        self.globals.extend(more.globals);
        Ok(())
    }
}

/// Why an image cannot be loaded, as the driver's result codes say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// Well formed, but nothing in it runs on the device (`CUDA_ERROR_NO_BINARY_FOR_GPU`).
    NoBinaryForGpu,
    /// Not an image, or a damaged one (`CUDA_ERROR_INVALID_IMAGE`); says what is wrong.
    Invalid(String),
    /// Text that is not PTX (`CUDA_ERROR_INVALID_IMAGE` too).
    NotPtx,
}

/// The kinds of image, told by their first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An ELF object (`\x7fELF`).
    Cubin,
    /// A fatbin container (magic `0xBA55ED50`).
    Fatbin,
    /// The wrapper nvcc emits around a fatbin (magic `0x466243B1`), pointing at it.
    Wrapper,
    /// Anything else: PTX text, or not an image.
    Text,
}

/// The kind of the image starting with `head` (at least 4 bytes for a binary to be told).
pub fn kind(head: &[u8]) -> Kind {
    match head.get(..4) {
        Some(b"\x7fELF") => Kind::Cubin,
        Some(m) if m == fatbin::MAGIC.to_le_bytes() => Kind::Fatbin,
        Some(m) if m == fatbin::WRAPPER_MAGIC.to_le_bytes() => Kind::Wrapper,
        _ => Kind::Text,
    }
}

/// Loads `image` (PTX text, a cubin or a fatbin) for a device of capability `cc`: a cubin must run on
/// it, and of a fatbin the best part that does is taken (see [`fatbin::choose`]).
pub fn load(image: &[u8], cc: Capability) -> Result<Module, ImageError> {
    match kind(image) {
        Kind::Cubin => {
            let cubin = cubin::parse(image)?;
            if !cubin.arch.runs_on(cc) {
                return Err(ImageError::NoBinaryForGpu);
            }
            Ok(cubin.module)
        }
        Kind::Fatbin => fatbin::choose(&fatbin::entries(image)?, cc),
        Kind::Wrapper => Err(ImageError::Invalid("a fatbin wrapper is passed by pointer, not as data".into())),
        Kind::Text => from_ptx(image),
    }
}

/// A PTX module's entries and globals.
pub(crate) fn from_ptx(text: &[u8]) -> Result<Module, ImageError> {
    let parsed = ptx::parse(text).map_err(|_| ImageError::NotPtx)?;
    Ok(Module {
        entries: parsed
            .entries
            .into_iter()
            .map(|name| {
                let params = ptx::entry_params(text, &name)
                    .map(|list| list.into_iter().map(|(offset, size)| Param { offset, size }).collect());
                Entry { name, params }
            })
            .collect(),
        globals: parsed.globals.into_iter().map(|g| Global { name: g.name, size: g.size, init: Vec::new() }).collect(),
    })
}

/// The architecture a cubin was built for: `sm_90` is `{ sm: 90, specific: false }`, `sm_90a` the same
/// with `specific`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    /// `10 * major + minor`.
    pub sm: u32,
    /// Built with architecture-specific features (`sm_90a`): runs on that exact capability only.
    pub specific: bool,
}

impl Arch {
    /// The driver's rule: an `sm_XY` cubin runs on capability `X.Z` for every `Z >= Y` (binary
    /// compatibility within a major version), an `sm_XYa` cubin on `X.Y` alone.
    pub fn runs_on(self, (major, minor): Capability) -> bool {
        let (x, y) = (self.sm / 10, self.sm % 10);
        x == major && if self.specific { y == minor } else { y <= minor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compatibility_rule_is_the_drivers() {
        let sm = |sm, specific| Arch { sm, specific };
        assert!(sm(80, false).runs_on((8, 0)) && sm(80, false).runs_on((8, 6)) && sm(80, false).runs_on((8, 9)));
        assert!(!sm(86, false).runs_on((8, 0)), "a newer minor needs a newer device");
        assert!(!sm(80, false).runs_on((9, 0)), "no binary compatibility across major versions");
        assert!(sm(90, true).runs_on((9, 0)) && !sm(86, true).runs_on((8, 9)));
        assert!(!sm(100, true).runs_on((10, 3)) && sm(100, false).runs_on((10, 3)));
    }

    #[test]
    fn kinds_are_told_by_their_magic() {
        assert_eq!(kind(b"\x7fELF\x02"), Kind::Cubin);
        assert_eq!(kind(&[0x50, 0xed, 0x55, 0xba, 1, 0]), Kind::Fatbin);
        assert_eq!(kind(&[0xb1, 0x43, 0x62, 0x46]), Kind::Wrapper);
        assert_eq!(kind(b".version 8.0"), Kind::Text);
        assert_eq!(kind(b""), Kind::Text);
    }
}
