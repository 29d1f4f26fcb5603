//! What a compute capability says about a device beyond the driver's attributes: the number formats it
//! computes in (BEP-1000's `precision_support`) and its tensor cores per SM. The tables are NVIDIA's
//! architecture facts, documented in docs/api.md (`tessera info --json`); nothing here reads the device.
//!
//! - `native`: the hardware computes in the format (ALU instructions or tensor-core MMA);
//! - `emulated`: CUDA handles the format as storage only (`cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`,
//!   `cuda_fp4.h` convert it in software, or sub-byte integers are unpacked) and arithmetic runs in a wider
//!   format;
//! - `none`: no CUDA path at all (TF32 is a tensor-core mode of FP32 data, not a storage format).

/// The formats BEP-1000 names, in the order the document lists them.
pub const FORMATS: [&str; 9] = ["FP64", "FP32", "TF32", "BF16", "FP16", "FP8", "INT8", "INT4", "FP4"];

/// A compute capability as `(major, minor)`.
pub type Cc = (i32, i32);

/// Support of `format` (one of [`FORMATS`]) on compute capability `cc`: `native`, `emulated` or `none`.
pub fn support(format: &str, cc: Cc) -> &'static str {
    let at_least = |v: Cc| cc >= v;
    let (native, otherwise) = match format {
        // Every CUDA GPU has FP32 and FP64 units (FP64 at a lower rate on consumer parts).
        "FP64" | "FP32" => (true, "native"),
        // Ampere's tensor cores introduced TF32.
        "TF32" => (at_least((8, 0)), "none"),
        // BF16 arithmetic and tensor cores arrived with Ampere.
        "BF16" => (at_least((8, 0)), "emulated"),
        // Half-precision arithmetic instructions from 5.3 (tensor cores from 7.0).
        "FP16" => (at_least((5, 3)), "emulated"),
        // E4M3/E5M2 tensor cores: Ada (8.9), Hopper (9.0), Blackwell.
        "FP8" => (at_least((8, 9)), "emulated"),
        // dp4a from 6.1, INT8 tensor cores from 7.2.
        "INT8" => (at_least((6, 1)), "emulated"),
        // INT4 tensor-core MMA on Turing, Ampere and Ada; Hopper and Blackwell dropped it.
        "INT4" => (at_least((7, 5)) && cc < (9, 0), "emulated"),
        // NVFP4/MXFP4 tensor cores: Blackwell (10.x, 12.x).
        "FP4" => (at_least((10, 0)), "emulated"),
        _ => (false, "none"),
    };
    if native { "native" } else { otherwise }
}

/// Tensor cores per SM of compute capability `cc`: 8 on Volta and Turing, 4 from Ampere on, none before
/// Volta.
pub fn tensor_cores_per_sm(cc: Cc) -> u32 {
    match cc {
        (7, _) => 8,
        (major, _) if major >= 8 => 4,
        _ => 0,
    }
}

/// CUDA cores (FP32 lanes) per SM of compute capability `cc`, NVIDIA's per-architecture figure: 64 on
/// Pascal GP100, Volta, Turing, A100 and Hopper; 128 on Pascal GP10x, GA10x, Ada and Blackwell. `None`
/// for older or unknown architectures.
pub fn cuda_cores_per_sm(cc: Cc) -> Option<u32> {
    match cc {
        (6, 0) | (7, _) | (8, 0) | (9, 0) => Some(64),
        (6, _) | (8, _) | (10, _) | (11, _) | (12, _) => Some(128),
        _ => None,
    }
}

/// Peak dense FP16 operations per SM per clock of compute capability `cc`, the figure behind
/// `maxTflops` of the provider library (documented in docs/hypervisors.md, "For cluster hypervisors"): tensor-core
/// FP16 with FP32 accumulation where the architecture has tensor cores, the FP16/FP32 ALUs before.
///
/// | compute capability | architecture | ops/SM/clock | check: SMs × boost clock × ops |
/// |---|---|---|---|
/// | < 7.0 | Pascal and older | 256 | P100: 56 × 1.48 GHz × 256 = 21 TFLOPS |
/// | 7.0, 7.2 | Volta | 1024 | V100 SXM2: 80 × 1.53 × 1024 = 125 |
/// | 7.5 | Turing | 512 | T4: 40 × 1.59 × 512 = 32.6 (65 with FP16 accumulation) |
/// | 8.0 | Ampere A100 | 2048 | A100: 108 × 1.41 × 2048 = 312 |
/// | 8.6, 8.7, 8.9 | Ampere GA10x, Ada | 1024 | L40S: 142 × 2.52 × 1024 = 366 |
/// | 9.0 | Hopper | 4096 | H100 SXM: 132 × 1.83 × 4096 = 989 |
/// | 10.x | Blackwell datacenter | 8192 | B200: 148 × 1.86 × 8192 = 2255 |
/// | 12.x and later | Blackwell consumer | 1024 | RTX 5090: 170 × 2.41 × 1024 = 420 |
pub fn fp16_ops_per_sm_per_clock(cc: Cc) -> u32 {
    match cc {
        (major, _) if major < 7 => 256,
        (7, 5) => 512,
        (7, _) => 1024,
        (8, 0) => 2048,
        (8, _) => 1024,
        (9, _) => 4096,
        (10, _) | (11, _) => 8192,
        _ => 1024,
    }
}

/// Peak dense FP16 TFLOPS of a device with `sms` SMs of compute capability `cc` at `clock_mhz`.
pub fn peak_tflops(cc: Cc, sms: u32, clock_mhz: u32) -> f64 {
    f64::from(sms) * f64::from(clock_mhz) * 1e6 * f64::from(fp16_ops_per_sm_per_clock(cc)) / 1e12
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cc: Cc) -> Vec<&'static str> {
        FORMATS.iter().map(|f| support(f, cc)).collect()
    }

    #[test]
    fn the_documented_table() {
        // FP64 FP32 TF32 BF16 FP16 FP8 INT8 INT4 FP4
        let n = "native";
        let e = "emulated";
        assert_eq!(row((7, 0)), [n, n, "none", e, n, e, n, e, e]);
        assert_eq!(row((7, 5)), [n, n, "none", e, n, e, n, n, e]);
        assert_eq!(row((8, 0)), [n, n, n, n, n, e, n, n, e]);
        assert_eq!(row((8, 6)), [n, n, n, n, n, e, n, n, e]);
        assert_eq!(row((8, 9)), [n, n, n, n, n, n, n, n, e]);
        assert_eq!(row((9, 0)), [n, n, n, n, n, n, n, e, e]);
        assert_eq!(row((10, 0)), [n, n, n, n, n, n, n, e, n]);
        assert_eq!(row((12, 0)), [n, n, n, n, n, n, n, e, n]);
        assert_eq!(row((6, 0)), [n, n, "none", e, n, e, e, e, e]);
        assert_eq!(support("FP12", (9, 0)), "none");
    }

    #[test]
    fn tensor_cores_match_the_published_totals() {
        // H100 SXM: 528 tensor cores on 132 SMs; A100: 432 on 108; V100: 640 on 80; RTX 2080 Ti: 544 on 68.
        assert_eq!(132 * tensor_cores_per_sm((9, 0)), 528);
        assert_eq!(108 * tensor_cores_per_sm((8, 0)), 432);
        assert_eq!(80 * tensor_cores_per_sm((7, 0)), 640);
        assert_eq!(68 * tensor_cores_per_sm((7, 5)), 544);
        assert_eq!(tensor_cores_per_sm((6, 1)), 0);
    }

    #[test]
    fn peak_tflops_match_the_published_figures() {
        // A100 SXM 312, H100 SXM 989 (dense FP16 tensor), within rounding of the boost clock.
        assert!((peak_tflops((8, 0), 108, 1410) - 312.0).abs() < 1.0);
        assert!((peak_tflops((9, 0), 132, 1830) - 989.0).abs() < 2.0);
        assert!((peak_tflops((7, 0), 80, 1530) - 125.0).abs() < 1.0);
        assert_eq!(peak_tflops((8, 6), 0, 1500), 0.0);
    }
}
