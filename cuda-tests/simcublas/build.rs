fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublas.so.12");
}
