//! The few cuBLAS values the tensor-core policy needs (`cublas_api.h`, cuBLAS 12), as plain integers,
//! and the variable NVIDIA's libraries read to turn TF32 off.
//!
//! A vGPU with tensor cores off (`tessera_region::flags::TENSOR_CORES_OFF`) has its processes run with
//! [`TF32_OVERRIDE`] set, and every math mode they give `cublasSetMathMode` passed through [`pedantic`].

/// `cublasStatus_t` as the C ABI carries it.
pub type CublasStatus = u32;

/// `CUBLAS_STATUS_SUCCESS`.
pub const CUBLAS_STATUS_SUCCESS: CublasStatus = 0;
/// `CUBLAS_STATUS_NOT_INITIALIZED`: the library (or the CUDA runtime under it) could not be initialized.
pub const CUBLAS_STATUS_NOT_INITIALIZED: CublasStatus = 1;
/// `CUBLAS_STATUS_NOT_SUPPORTED`: the functionality is not supported.
pub const CUBLAS_STATUS_NOT_SUPPORTED: CublasStatus = 15;

/// `cublasMath_t` as the C ABI carries it.
pub type CublasMath = u32;

/// `CUBLAS_DEFAULT_MATH`.
pub const CUBLAS_DEFAULT_MATH: CublasMath = 0;
/// `CUBLAS_TENSOR_OP_MATH` (deprecated): tensor cores allowed, precision reduced.
pub const CUBLAS_TENSOR_OP_MATH: CublasMath = 1;
/// `CUBLAS_PEDANTIC_MATH`: the prescribed precision, no tensor cores.
pub const CUBLAS_PEDANTIC_MATH: CublasMath = 2;
/// `CUBLAS_TF32_TENSOR_OP_MATH`: single precision computed in TF32 on tensor cores.
pub const CUBLAS_TF32_TENSOR_OP_MATH: CublasMath = 3;
/// `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`: a flag bit, combined with a mode.
pub const CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: CublasMath = 16;

/// `(variable, value)` that makes cuBLAS and cuDNN compute single precision without TF32. They read it
/// when they initialize, so it must be in the environment before they load.
pub const TF32_OVERRIDE: (&str, &str) = ("NVIDIA_TF32_OVERRIDE", "0");

/// `mode` with tensor cores off: the tensor-op modes become [`CUBLAS_PEDANTIC_MATH`], keeping the
/// [`CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`] bit; every other mode is returned unchanged (the
/// real library judges values it does not know).
pub fn pedantic(mode: CublasMath) -> CublasMath {
    let flag = mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    match mode & !CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION {
        CUBLAS_TENSOR_OP_MATH | CUBLAS_TF32_TENSOR_OP_MATH => CUBLAS_PEDANTIC_MATH | flag,
        _ => mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_op_modes_become_pedantic_keeping_the_flag() {
        let flag = CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
        for (mode, expected) in [
            (CUBLAS_DEFAULT_MATH, CUBLAS_DEFAULT_MATH),
            (CUBLAS_TENSOR_OP_MATH, CUBLAS_PEDANTIC_MATH),
            (CUBLAS_PEDANTIC_MATH, CUBLAS_PEDANTIC_MATH),
            (CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_PEDANTIC_MATH),
            (CUBLAS_DEFAULT_MATH | flag, CUBLAS_DEFAULT_MATH | flag),
            (CUBLAS_TENSOR_OP_MATH | flag, CUBLAS_PEDANTIC_MATH | flag),
            (CUBLAS_TF32_TENSOR_OP_MATH | flag, CUBLAS_PEDANTIC_MATH | flag),
            (CUBLAS_PEDANTIC_MATH | flag, CUBLAS_PEDANTIC_MATH | flag),
            (7, 7),
            (u32::MAX, u32::MAX),
        ] {
            assert_eq!(pedantic(mode), expected, "mode {mode}");
        }
    }
}
