//! Module images as real programs hand them to the driver (issue 31): cubins built by NVIDIA's `ptxas`
//! from the test kernels, and fatbin containers of such cubins and PTX, loaded by every module call of
//! `cuda-tests/c/images.c` on simulated devices of compute capability 9.0 (`h100`), 8.0 (`a100`) and 8.6
//! (`small`). The driver's rules hold: an `sm_XY` cubin runs on `X.Z` for `Z >= Y`, an `sm_XYa` one on
//! `X.Y` alone, a fatbin gives the device its best cubin, else its PTX; nothing that fits is
//! `CUDA_ERROR_NO_BINARY_FOR_GPU` (209) and a damaged image `CUDA_ERROR_INVALID_IMAGE` (200). A kernel
//! loaded from a cubin reports its parameters (`cuFuncGetParamInfo`) and computes. The JIT linker
//! (`cuLinkCreate` ... `cuLinkComplete`) links PTX, cubins and fatbins into a cubin those calls load.

use crate::common::cprog::{CBuild, Facts, assemble, workspace};
use crate::common::{Sim, build_dir};
use simgpu::image::fatbin::{Compression, EntryKind, Part, container};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const NO_BINARY_FOR_GPU: &str = "209";
const INVALID_IMAGE: &str = "200";

/// The test kernels (four entries, among them `vector_add_f32`) and the product's `spin` module (one).
fn kernels_ptx() -> PathBuf {
    workspace().join("cuda-tests/kernels/kernels.ptx")
}
fn spin_ptx() -> PathBuf {
    workspace().join("tools/kernels/spin.ptx")
}

/// `module` assembled by ptxas for `arch`.
fn cubin(module: &Path, arch: &str) -> Vec<u8> {
    assemble(module, arch).unwrap_or_else(|e| panic!("{e}"))
}

fn program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| CBuild::program("images.c").link_driver().build())
}

/// Loads `image` with `call` on a simulated device of profile `device`.
fn load(tag: &str, device: &str, image: &[u8], call: &str) -> Facts {
    let file = build_dir().join(format!("images-{tag}-{}.bin", std::process::id()));
    std::fs::write(&file, image).expect("write the image");
    let sim = Sim::new(&format!("images-{tag}")).with("SIMGPU_DEVICES", device);
    let facts = Facts::ok(sim.command_for(program(), &[file.to_str().unwrap(), call]));
    let _ = std::fs::remove_file(&file);
    facts
}

/// Asserts the module loaded from `image` is the test kernels, with `vector_add_f32`'s four 8-byte
/// parameters one after another, and computing.
fn assert_kernels(facts: &Facts, what: &str) {
    assert_eq!(facts.get("load"), "0", "{what}: {}", facts.stdout);
    assert_eq!(facts.get("kernels"), "4", "{what}");
    assert_kernels_computing(facts);
}

#[test]
fn cubins_load_where_the_driver_runs_them_and_nowhere_else() {
    let kernels = kernels_ptx();
    for (device, arch, runs) in [
        ("h100", "sm_90", true),
        ("h100", "sm_90a", true),
        ("h100", "sm_80", false),
        ("h100", "sm_86", false),
        ("a100", "sm_80", true),
        ("a100", "sm_86", false),
        ("a100", "sm_90", false),
        ("small", "sm_80", true),
        ("small", "sm_86", true),
        ("small", "sm_90a", false),
    ] {
        let facts = load(&format!("{device}-{arch}"), device, &cubin(&kernels, arch), "data");
        match runs {
            true => assert_kernels(&facts, &format!("{arch} on {device}")),
            false => assert_eq!(facts.get("load"), NO_BINARY_FOR_GPU, "{arch} on {device}"),
        }
    }
    let sm90 = cubin(&kernels, "sm_90");
    for call in ["dataex", "file", "library"] {
        assert_kernels(&load(&format!("call-{call}"), "h100", &sm90, call), call);
    }
}

#[test]
fn a_fatbin_gives_each_device_its_best_part() {
    let (kernels, spin) = (kernels_ptx(), spin_ptx());
    let ptx = std::fs::read(&kernels).expect("read kernels.ptx");
    let (spin80, kernels90, kernels86) = (cubin(&spin, "sm_80"), cubin(&kernels, "sm_90"), cubin(&kernels, "sm_86"));
    let part = |kind, sm, compression, contents| Part { kind, sm, compression, contents };
    // Three builds, told apart by their kernels: sm_80 has `spin` and `spin_stamp` alone.
    let mixed = container(&[
        part(EntryKind::Elf, 80, Compression::None, &spin80),
        part(EntryKind::Elf, 90, Compression::Lz4, &kernels90),
        part(EntryKind::Ptx, 80, Compression::Zstd, &ptx),
    ]);
    for call in ["data", "fatbinary", "wrapped", "library", "file"] {
        assert_kernels(&load(&format!("mixed-h100-{call}"), "h100", &mixed, call), &format!("sm_90 by {call}"));
    }
    for device in ["a100", "small"] {
        let facts = load(&format!("mixed-{device}"), device, &mixed, "data");
        assert_eq!((facts.get("load"), facts.get("kernels")), ("0", "2"), "sm_80's cubin on {device}");
    }
    // PTX alone: compiled for any device at or above its architecture.
    let ptx_only = container(&[part(EntryKind::Ptx, 80, Compression::Lz4, &ptx)]);
    assert_kernels(&load("ptx-small", "small", &ptx_only, "data"), "PTX on 8.6");
    let ptx90 = container(&[part(EntryKind::Ptx, 90, Compression::None, &ptx)]);
    assert_eq!(load("ptx90-a100", "a100", &ptx90, "data").get("load"), NO_BINARY_FOR_GPU);
    // A cubin of a newer minor version than the device: nothing fits.
    let only86 = container(&[part(EntryKind::Elf, 86, Compression::Zstd, &kernels86)]);
    assert_eq!(load("86-a100", "a100", &only86, "data").get("load"), NO_BINARY_FOR_GPU);
    assert_kernels(&load("86-small", "small", &only86, "data"), "sm_86 on 8.6");
}

#[test]
fn damaged_images_are_invalid_images() {
    let ptx = std::fs::read(kernels_ptx()).expect("read kernels.ptx");
    // An ELF object that is no cubin: this very program.
    let host_elf = std::fs::read(program()).expect("read the test program");
    assert_eq!(load("x86", "h100", &host_elf, "file").get("load"), INVALID_IMAGE);
    // A container cut short (read from a file, whose length the driver knows).
    let whole = container(&[Part { kind: EntryKind::Ptx, sm: 80, compression: Compression::Lz4, contents: &ptx }]);
    assert_eq!(load("cut", "h100", &whole[..whole.len() - 64], "file").get("load"), INVALID_IMAGE);
    // A compressed payload that does not decompress.
    let mut garbled = whole.clone();
    let payload = simgpu::image::fatbin::HEADER + 64;
    garbled[payload..payload + 32].fill(0xff);
    assert_eq!(load("garbled", "h100", &garbled, "data").get("load"), INVALID_IMAGE);
}

/// Links `inputs` (`(type, bytes)`) with the driver's JIT linker on a device of profile `device`, then
/// loads the result.
fn link(tag: &str, device: &str, inputs: &[(&str, &[u8])]) -> Facts {
    let files: Vec<PathBuf> = (0..inputs.len())
        .map(|i| build_dir().join(format!("images-link-{tag}-{i}-{}.bin", std::process::id())))
        .collect();
    let mut args = vec!["link".to_string()];
    for ((kind, bytes), file) in inputs.iter().zip(&files) {
        std::fs::write(file, bytes).expect("write a link input");
        args.push(format!("{kind}:{}", file.display()));
    }
    let sim = Sim::new(&format!("images-link-{tag}")).with("SIMGPU_DEVICES", device);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let facts = Facts::ok(sim.command_for(program(), &args));
    for file in files {
        let _ = std::fs::remove_file(file);
    }
    facts
}

#[test]
fn the_jit_linker_links_ptx_cubins_and_fatbins_into_an_image_the_driver_loads() {
    let (kernels, spin) = (kernels_ptx(), spin_ptx());
    let ptx = std::fs::read(&kernels).expect("read kernels.ptx");
    let spin90 = cubin(&spin, "sm_90");
    // PTX and a cubin: six kernels in one image (kernels.ptx's four, spin and spin_stamp),
    // vector_add_f32 with its parameters and computing.
    let facts = link("ptx-cubin", "h100", &[("ptx", &ptx), ("cubin", &spin90)]);
    assert_eq!((facts.all("add"), facts.get("complete")), (vec!["0", "0"], "0"), "{}", facts.stdout);
    assert_eq!(facts.get("kernels"), "6");
    assert_kernels_computing(&facts);
    // A fatbin gives the device its part; a cubin for another device is refused as the loader refuses it.
    let fat = container(&[Part { kind: EntryKind::Elf, sm: 90, compression: Compression::Lz4, contents: &spin90 }]);
    let facts = link("fatbin", "h100", &[("fatbin", &fat), ("ptx", &ptx)]);
    assert_eq!(facts.get("kernels"), "6");
    let facts = link("wrong-arch", "a100", &[("cubin", &spin90)]);
    assert_eq!(facts.all("add"), [NO_BINARY_FOR_GPU]);
    // The same kernel twice, data of another type than given, and NVVM IR (needs nvJitLink) are refused.
    assert_eq!(link("twice", "h100", &[("ptx", &ptx), ("ptx", &ptx)]).all("add"), ["0", INVALID_IMAGE]);
    assert_eq!(link("mistyped", "h100", &[("cubin", &ptx)]).all("add"), [INVALID_IMAGE]);
    assert_eq!(link("nvvm", "h100", &[("nvvm", &ptx)]).all("add"), ["801"]);
}

/// `vector_add_f32` reported its parameters and added two vectors.
fn assert_kernels_computing(facts: &Facts) {
    assert_eq!(facts.all("param"), ["0 0 8", "1 8 8", "2 16 8", "3 24 8"]);
    assert_eq!(facts.get("sum"), "ok");
}
