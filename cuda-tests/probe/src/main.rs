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
    // A process its own user cannot inspect (as setuid and capability-raising programs are): its
    // `/proc/PID/maps` is then readable by root alone.
    if std::env::var_os("SIMGPU_PROBE_UNDUMPABLE").is_some() {
        // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes no pointers and affects only this process.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            eprintln!("simgpu-probe: cannot make this process non-dumpable: {}", std::io::Error::last_os_error());
            std::process::exit(2);
        }
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
