//! `simgpu-probe SCENARIO [--option value ...]`: a CUDA test client for the simulated driver (or any
//! `libcuda.so.1` the loader finds). Each scenario exercises one area of the driver API, through cudarc's
//! safe API where it offers the operation and its `sys`/`result` layers elsewhere, and prints one JSON
//! object with what it measured. A failure prints `{"error": ..., "cuda_error": code}` instead, explains
//! itself on stderr and exits with status 1.

mod args;
mod dl;
mod fail;
mod ptx;
mod report;
mod scenarios;

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((name, rest)) = argv.split_first() else {
        eprintln!("{}", scenarios::usage());
        std::process::exit(2);
    };
    if name == "--help" || name == "-h" || name == "help" {
        println!("{}", scenarios::usage());
        return;
    }
    match scenarios::run(name, rest) {
        Ok(value) => report::emit(name, value),
        Err(failure) => {
            eprintln!("simgpu-probe {name}: {}", failure.message);
            report::emit_failure(name, &failure);
            std::process::exit(1);
        }
    }
}
