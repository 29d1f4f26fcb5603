//! Gives the simulated NVML the soname of NVIDIA's (`libnvidia-ml.so.1`), so programs and the shim
//! load the simulator under that name.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
