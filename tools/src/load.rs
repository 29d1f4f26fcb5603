//! `tessera load` (hidden from `--help`): the workload `tessera demo` runs in each vGPU, a CUDA program
//! that exists wherever `tessera` does. Run under the shim (`tessera run --vgpu NAME -- tessera load`), it
//! holds some device memory (plus, optionally, a spike every other second), then launches `spin` kernels
//! back to back, or in bursts with pauses, until its time is up or SIGTERM/SIGINT stops it. It prints
//! nothing on stdout; errors go to stderr with status 1.

mod gpu;

use crate::driver::DriverError;
use crate::signals;
use clap::Args;
use gpu::Gpu;
use std::time::{Duration, Instant};
use tessera_ffi::units::{parse_duration_ns, parse_size};

/// Arguments of `tessera load`.
#[derive(Args, Debug)]
pub struct LoadArgs {
    /// How long to launch kernels, at most.
    #[arg(long, default_value = "10", value_parser = seconds_value)]
    seconds: f64,
    /// Device time of each `spin` kernel (500us, 1ms, ...).
    #[arg(long, default_value = "1ms", value_parser = parse_duration_ns)]
    kernel: u64,
    /// Most kernels queued at once. With one, a launch waits only for the scheduler (the vGPU's window
    /// lets about one millisecond of work queue anyway), so its time waited is the scheduler's doing.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    depth: u32,
    /// Device memory held throughout (8GiB, 512MiB, ...).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    memory: u64,
    /// Device memory held on top during every other second, as a training step's activations.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    spike: u64,
    /// Bursty: launch for this long, then pause (without it, launch without pauses).
    #[arg(long, value_parser = parse_duration_ns)]
    burst: Option<u64>,
    /// The pause between bursts.
    #[arg(long, default_value = "300ms", value_parser = parse_duration_ns)]
    pause: u64,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    device: i32,
}

/// Why the load failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `--seconds` is not a positive number.
    #[error("{0:?} is not a positive number of seconds")]
    Seconds(String),
    /// The stop signals' handler could not be installed.
    #[error(transparent)]
    Signals(#[from] signals::SignalError),
    /// The driver does not load, or a call of the load's failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// A positive number of seconds.
fn seconds_value(text: &str) -> Result<f64, LoadError> {
    match text.trim().parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        _ => Err(LoadError::Seconds(text.to_string())),
    }
}

/// When bursty, how much of the pause that `elapsed` falls in is left; `None` while launching.
fn pause_left(elapsed: Duration, burst: Option<Duration>, pause: Duration) -> Option<Duration> {
    let burst = burst?;
    let period = (burst + pause).as_nanos().max(1);
    let into = Duration::from_nanos((elapsed.as_nanos() % period) as u64);
    (into >= burst).then(|| burst + pause - into)
}

/// True during the seconds the spike is held (the odd ones).
fn spike_due(elapsed: Duration) -> bool {
    elapsed.as_secs() % 2 == 1
}

/// Runs the load.
pub fn run(args: LoadArgs) -> Result<(), LoadError> {
    signals::install()?;
    Ok(drive(&args)?)
}

/// The load itself, once the signals are handled.
fn drive(args: &LoadArgs) -> Result<(), DriverError> {
    let mut gpu = Gpu::open(args.device, args.depth as usize)?;
    let mut held = gpu.allocate(args.memory)?;
    let mut spike = Vec::new();
    let (burst, pause) = (args.burst.map(Duration::from_nanos), Duration::from_nanos(args.pause));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    while !signals::stop_requested() {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let elapsed = now - start;
        match (args.spike > 0 && spike_due(elapsed), spike.is_empty()) {
            (true, true) => spike = gpu.allocate(args.spike)?,
            (false, false) => gpu.free(&mut spike)?,
            _ => {}
        }
        if let Some(left) = pause_left(elapsed, burst, pause) {
            gpu.finish()?;
            signals::sleep(left.min(end - now));
            continue;
        }
        gpu.spin(args.kernel)?;
    }
    gpu.finish()?;
    gpu.free(&mut spike)?;
    gpu.free(&mut held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_alternate_with_pauses() {
        let ms = Duration::from_millis;
        let (burst, pause) = (Some(ms(200)), ms(300));
        assert_eq!(pause_left(ms(0), burst, pause), None);
        assert_eq!(pause_left(ms(199), burst, pause), None);
        assert_eq!(pause_left(ms(200), burst, pause), Some(ms(300)));
        assert_eq!(pause_left(ms(450), burst, pause), Some(ms(50)));
        assert_eq!(pause_left(ms(500), burst, pause), None);
        assert_eq!(pause_left(ms(5_250), burst, pause), Some(ms(250)));
        assert_eq!(pause_left(ms(250), None, pause), None, "not bursty");
        assert!(!spike_due(ms(999)) && spike_due(ms(1_000)) && !spike_due(ms(2_000)));
        assert_eq!(seconds_value("2.5").ok(), Some(2.5));
        assert!(seconds_value("0").is_err() && seconds_value("-1").is_err() && seconds_value("x").is_err());
    }
}
