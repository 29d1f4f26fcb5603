//! Fatbin containers: several builds of one module (cubins for some architectures, PTX for others)
//! in one image, as nvcc embeds them (`.nv_fatbin`) and the runtime registers them.
//!
//! Layout (as public tools that read them document it; all little-endian):
//! - a 16-byte header: magic `0xBA55ED50`, version 1 (`u16`), header size (`u16`, 16), then the size of
//!   the entries that follow (`u64`);
//! - entries one after another, each a header of `header_size` bytes (64, or more for newer
//!   architectures) then its payload: kind (`u16` at 0: 1 PTX, 2 ELF), header size (`u32` at 4), payload
//!   size padded to 8 bytes (`u64` at 8), compressed size (`u32` at 16; 0 when the payload is stored as
//!   is), architecture (`u32` at 28, `10 * major + minor`), flags (`u64` at 40: `0x2000` LZ4-compressed,
//!   `0x8000` Zstandard-compressed), size once decompressed (`u64` at 56; 0 when stored as is). The
//!   payload is the compressed size's bytes of a compressed entry, else the padded size's (a cubin's own
//!   header gives its length, PTX text ends at its NUL). The next entry starts after the header and the
//!   larger of the two sizes.
//!
//! nvcc also emits a 24-byte wrapper that points at the container (`__fatBinC_Wrapper_t`: magic
//! `0x466243B1`, version, the container's address, then a pointer whose meaning the version gives: 1, a
//! file name offline tools use; 2, for programs built with `-rdc`, a NULL-terminated array of the
//! relocatable fatbins the container was device-linked from), which is what `__cudaRegisterFatBinary`
//! receives and `cuModuleLoadFatBinary` may be given (the simulated driver reads it: `simcuda`'s
//! `module.rs`).

use super::{Capability, ImageError, Module, cubin, from_ptx};
use std::borrow::Cow;

/// A container's magic.
pub const MAGIC: u32 = 0xBA55_ED50;
/// The wrapper's magic.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// A container's header size.
pub const HEADER: usize = 16;
/// An entry's least header size.
const ENTRY_HEADER: usize = 64;
/// Entry kinds.
const KIND_PTX: u16 = 1;
const KIND_ELF: u16 = 2;
/// Entry flags: the payload's compression.
const LZ4: u64 = 0x2000;
const ZSTD: u64 = 0x8000;
/// The most a payload may decompress to (a larger size in a header is damage, not a module).
const MAX_DECOMPRESSED: u64 = 1 << 30;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// PTX text, compiled for the device when chosen.
    Ptx,
    /// A cubin.
    Elf,
    /// Something else (skipped).
    Other(u16),
}

/// One entry of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatEntry<'a> {
    /// What it holds.
    pub kind: EntryKind,
    /// The architecture it was built for, `10 * major + minor`.
    pub sm: u32,
    /// Its flags (compression).
    pub flags: u64,
    /// Its payload as stored.
    pub payload: &'a [u8],
    /// The payload's size once decompressed.
    pub decompressed: u64,
}

fn invalid(what: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("not a valid fatbin: {what}"))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The bytes a container spans, from its 16-byte header: how much to read of one passed by pointer.
pub fn extent(head: &[u8]) -> Option<usize> {
    (head.len() >= HEADER && u32_at(head, 0) == MAGIC)
        .then(|| usize::try_from(u64_at(head, 8)).ok()?.checked_add(u16_at(head, 6) as usize))
        .flatten()
}

/// The entries of the container `image` (and of any containers following it, which nvlink writes one
/// after another).
pub fn entries(image: &[u8]) -> Result<Vec<FatEntry<'_>>, ImageError> {
    let mut found = Vec::new();
    let mut rest = image;
    while rest.len() >= HEADER && u32_at(rest, 0) == MAGIC {
        if u16_at(rest, 4) != 1 {
            return Err(invalid(format_args!("version {} (this reads version 1)", u16_at(rest, 4))));
        }
        let header = u16_at(rest, 6) as usize;
        let end = extent(rest).filter(|&end| header >= HEADER && end <= rest.len()).ok_or_else(|| {
            invalid(format_args!("the header says {} bytes, the image has {}", extent(rest).unwrap_or(0), rest.len()))
        })?;
        let mut at = header;
        while at + ENTRY_HEADER <= end {
            let e = &rest[at..end];
            let header_size = u32_at(e, 4) as usize;
            let flags = u64_at(e, 40);
            let padded = usize::try_from(u64_at(e, 8)).unwrap_or(usize::MAX);
            // nvcc writes 0 as the compressed size of an entry stored as is.
            let stored = if flags & (LZ4 | ZSTD) != 0 { u32_at(e, 16) as usize } else { padded };
            let span = header_size.checked_add(padded.max(stored));
            let Some(span) = span.filter(|&s| header_size >= ENTRY_HEADER && s <= e.len()) else {
                return Err(invalid(format_args!("an entry at byte {at} runs past the container")));
            };
            let kind = match u16_at(e, 0) {
                KIND_PTX => EntryKind::Ptx,
                KIND_ELF => EntryKind::Elf,
                other => EntryKind::Other(other),
            };
            let payload = &e[header_size..header_size + stored];
            found.push(FatEntry { kind, sm: u32_at(e, 28), flags, payload, decompressed: u64_at(e, 56) });
            at += span;
        }
        rest = &rest[end..];
    }
    if found.is_empty() && !image.starts_with(&MAGIC.to_le_bytes()) {
        return Err(invalid("no container header"));
    }
    Ok(found)
}

impl FatEntry<'_> {
    /// The payload, decompressed if it is stored compressed.
    pub fn contents(&self) -> Result<Cow<'_, [u8]>, ImageError> {
        if self.flags & (LZ4 | ZSTD) == 0 {
            return Ok(Cow::Borrowed(self.payload));
        }
        if self.decompressed > MAX_DECOMPRESSED {
            return Err(invalid(format_args!("an entry claims {} bytes decompressed", self.decompressed)));
        }
        let out = if self.flags & LZ4 != 0 {
            lz4_flex::block::decompress(self.payload, self.decompressed as usize)
                .map_err(|e| invalid(format_args!("an LZ4 entry does not decompress ({e})")))?
        } else {
            let mut out = Vec::with_capacity(self.decompressed as usize);
            let mut decoder = ruzstd::decoding::StreamingDecoder::new(self.payload)
                .map_err(|e| invalid(format_args!("a Zstandard entry does not decompress ({e})")))?;
            std::io::Read::read_to_end(&mut decoder, &mut out)
                .map_err(|e| invalid(format_args!("a Zstandard entry does not decompress ({e})")))?;
            out
        };
        Ok(Cow::Owned(out))
    }
}

/// How [`container`] stores a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// As is.
    None,
    /// LZ4 block format.
    Lz4,
    /// A Zstandard frame.
    Zstd,
}

/// One part of a container [`container`] writes.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// PTX or a cubin.
    pub kind: EntryKind,
    /// Its architecture, `10 * major + minor`.
    pub sm: u32,
    /// How it is stored.
    pub compression: Compression,
    /// Its contents (uncompressed).
    pub contents: &'a [u8],
}

/// A container of `parts` in the layout described above, as nvcc's `fatbinary` lays one out (tests
/// build the images real programs register with it).
pub fn container(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for part in parts {
        let (payload, flags) = match part.compression {
            Compression::None => (part.contents.to_vec(), 0),
            Compression::Lz4 => (lz4_flex::block::compress(part.contents), LZ4),
            Compression::Zstd => {
                (ruzstd::encoding::compress_to_vec(part.contents, ruzstd::encoding::CompressionLevel::Fastest), ZSTD)
            }
        };
        let kind = match part.kind {
            EntryKind::Ptx => KIND_PTX,
            EntryKind::Elf => KIND_ELF,
            EntryKind::Other(k) => k,
        };
        let padded = payload.len().next_multiple_of(8);
        let (compressed, decompressed) = if flags == 0 { (0, 0) } else { (payload.len(), part.contents.len()) };
        let mut h = [0u8; ENTRY_HEADER];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        h[4..8].copy_from_slice(&(ENTRY_HEADER as u32).to_le_bytes());
        h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
        h[16..20].copy_from_slice(&(compressed as u32).to_le_bytes());
        h[28..32].copy_from_slice(&part.sm.to_le_bytes());
        h[40..48].copy_from_slice(&(flags | 0x11).to_le_bytes());
        h[56..64].copy_from_slice(&(decompressed as u64).to_le_bytes());
        body.extend_from_slice(&h);
        body.extend_from_slice(&payload);
        body.resize(body.len() + padded - payload.len(), 0);
    }
    let mut out = MAGIC.to_le_bytes().to_vec();
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&(HEADER as u16).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The module a device of capability `cc` runs from `entries`, as the driver chooses it: the cubin
/// of the highest architecture that runs on the device (see [`super::Arch::runs_on`]); else the PTX of
/// the highest virtual architecture not above the device's, compiled for it; else
/// [`ImageError::NoBinaryForGpu`].
pub fn choose(entries: &[FatEntry<'_>], cc: Capability) -> Result<Module, ImageError> {
    let device = cc.0 * 10 + cc.1;
    let mut cubins: Vec<&FatEntry> =
        entries.iter().filter(|e| e.kind == EntryKind::Elf && e.sm / 10 == cc.0 && e.sm <= device).collect();
    cubins.sort_by_key(|e| std::cmp::Reverse(e.sm));
    for entry in cubins {
        let parsed = cubin::parse(&entry.contents()?)?;
        if parsed.arch.runs_on(cc) {
            return Ok(parsed.module);
        }
    }
    let ptx = entries.iter().filter(|e| e.kind == EntryKind::Ptx && e.sm <= device).max_by_key(|e| e.sm);
    match ptx {
        Some(entry) => from_ptx(&entry.contents()?),
        None => Err(ImageError::NoBinaryForGpu),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container with one entry whose header says what the arguments say, whatever its payload.
    fn raw(kind: u16, flags: u64, payload: &[u8], decompressed: u64) -> Vec<u8> {
        let mut image = container(&[Part {
            kind: EntryKind::Other(kind),
            sm: 80,
            compression: Compression::None,
            contents: payload,
        }]);
        image[HEADER + 16..HEADER + 20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        image[HEADER + 40..HEADER + 48].copy_from_slice(&flags.to_le_bytes());
        image[HEADER + 56..HEADER + 64].copy_from_slice(&decompressed.to_le_bytes());
        image
    }

    fn ptx(sm: u32, compression: Compression, contents: &[u8]) -> Part<'_> {
        Part { kind: EntryKind::Ptx, sm, compression, contents }
    }

    /// The test kernels (PTX text), registered in the containers below as built for `compute_80`.
    const PTX_80: &[u8] = include_bytes!("../../../kernels/kernels.ptx");

    #[test]
    fn ptx_is_chosen_when_no_cubin_fits_and_refused_above_the_device() {
        let image = container(&[ptx(80, Compression::None, PTX_80)]);
        assert_eq!(extent(&image), Some(image.len()));
        assert_eq!(choose(&entries(&image).unwrap(), (9, 0)).unwrap().entries[1].name, "vector_add_f32");
        assert_eq!(choose(&entries(&image).unwrap(), (8, 0)).unwrap().entries[1].name, "vector_add_f32");
        assert_eq!(choose(&entries(&image).unwrap(), (7, 5)), Err(ImageError::NoBinaryForGpu));
    }

    #[test]
    fn compressed_entries_are_read_and_damage_is_an_invalid_image() {
        for compression in [Compression::Lz4, Compression::Zstd] {
            let image = container(&[ptx(80, compression, PTX_80)]);
            assert_eq!(entries(&image).unwrap()[0].contents().unwrap(), PTX_80, "{compression:?}");
        }
        let image = container(&[ptx(80, Compression::Lz4, PTX_80)]);
        let mut cut = image.clone();
        cut.truncate(image.len() - 8);
        assert!(matches!(entries(&cut), Err(ImageError::Invalid(_))));
        let garbage = raw(KIND_PTX, LZ4, b"\xff\xff\xff", 100);
        assert!(matches!(entries(&garbage).unwrap()[0].contents(), Err(ImageError::Invalid(_))));
        let huge = raw(KIND_PTX, ZSTD, b"x", u64::MAX);
        assert!(matches!(entries(&huge).unwrap()[0].contents(), Err(ImageError::Invalid(_))));
    }
}
