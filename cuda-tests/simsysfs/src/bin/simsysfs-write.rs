//! `simsysfs-write PATH VALUE`: opens PATH write-only (no create, no truncate, as the product does), makes
//! ONE `write(2)` of VALUE, and prints `ok N` (bytes written) or `errno E` (the error, with the step that
//! failed: `open` or `write`). Test helper for the simulated kernel; exits 0 either way, 2 on bad usage.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, value] = args.as_slice() else {
        eprintln!("usage: simsysfs-write PATH VALUE");
        std::process::exit(2);
    };
    let value = value.replace("\\n", "\n");
    let mut file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) => {
            println!("errno {} open", e.raw_os_error().unwrap_or(0));
            return;
        }
    };
    match file.write(value.as_bytes()) {
        Ok(n) => println!("ok {n}"),
        Err(e) => println!("errno {} write", e.raw_os_error().unwrap_or(0)),
    }
}
