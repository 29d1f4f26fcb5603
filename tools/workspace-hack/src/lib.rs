//! Empty: this crate exists for its `Cargo.toml`, which makes `cargo build --workspace` switch on the
//! dependency features the tests' dev-dependencies switch on, so that the build and the test build share
//! one compilation of every dependency (see the manifest).
