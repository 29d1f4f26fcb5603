//! Gives the simulated cuBLAS the soname of NVIDIA's (`libcublas.so.12`), so programs linked against it
//! find the simulator under that name.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublas.so.12");
}
