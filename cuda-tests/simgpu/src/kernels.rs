//! The built-in kernels, recognized by entry name, and what running one does to the engine and memory.

/// A kernel the simulator knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `spin(u64 nanoseconds)`: occupies the engine for that long.
    Spin,
    /// `spin_stamp(u64 nanoseconds, u64* out)`: as `Spin`, then writes its start and end (the engine's
    /// clock, as `%globaltimer` on a GPU) to `out[0]` and `out[1]`.
    SpinStamp,
    /// `fill_u32(u32* dst, u32 value, u64 n)`.
    FillU32,
    /// `vector_add_f32(const float* a, const float* b, float* c, u64 n)`.
    VectorAddF32,
    /// `saxpy_f32(float a, const float* x, float* y, u64 n)`.
    SaxpyF32,
}

impl Builtin {
    /// The built-in with this entry name, if any.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "spin" => Builtin::Spin,
            "spin_stamp" => Builtin::SpinStamp,
            "fill_u32" => Builtin::FillU32,
            "vector_add_f32" => Builtin::VectorAddF32,
            "saxpy_f32" => Builtin::SaxpyF32,
            _ => return None,
        })
    }

    /// Size in bytes of each parameter, in order.
    pub fn param_sizes(self) -> &'static [usize] {
        match self {
            Builtin::Spin => &[8],
            Builtin::SpinStamp => &[8, 8],
            Builtin::FillU32 => &[8, 4, 8],
            Builtin::VectorAddF32 => &[8, 8, 8, 8],
            Builtin::SaxpyF32 => &[4, 8, 8, 8],
        }
    }
}

/// A decoded launch, ready to run on the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// Occupy the engine for this long and touch nothing.
    Sleep(u64),
    /// Occupy the engine for `ns`, then write the kernel's start and end on the engine's clock to the
    /// two `u64` at `out` (the engine does, as only it knows them).
    StampedSleep {
        /// How long.
        ns: u64,
        /// Device address of the two `u64` written.
        out: u64,
    },
    /// A kernel the simulator cannot compute (not a built-in): occupies the engine for `ns`, counted in
    /// the device's `uncomputed` and named in the engine trace; with `SIMGPU_UNKNOWN_KERNELS=poison`, the
    /// memory its pointer arguments reach (`poison`) is overwritten with all-ones bytes (a NaN in every
    /// floating-point width) so that code reading its results fails loudly.
    Uncomputed {
        /// The kernel's name.
        name: std::sync::Arc<str>,
        /// How long it occupies the engine.
        ns: u64,
        /// Device ranges `(address, bytes)` overwritten.
        poison: Vec<(u64, u64)>,
    },
    /// `dst[i] = value` for `n` elements.
    FillU32 {
        /// Device address of the `u32` array written.
        dst: u64,
        /// What every element becomes.
        value: u32,
        /// Elements written.
        n: u64,
    },
    /// `c[i] = a[i] + b[i]`.
    VectorAddF32 {
        /// Device address of the first `f32` input.
        a: u64,
        /// Device address of the second `f32` input.
        b: u64,
        /// Device address of the `f32` output.
        c: u64,
        /// Elements added.
        n: u64,
    },
    /// `y[i] = a * x[i] + y[i]`.
    SaxpyF32 {
        /// The scale (a value, not an address).
        a: f32,
        /// Device address of the `f32` input.
        x: u64,
        /// Device address of the `f32` array added to and written.
        y: u64,
        /// Elements computed.
        n: u64,
    },
}

/// The byte poisoned outputs are filled with: all-ones is a NaN as `f16`, `f32` and `f64` (and -1 as an
/// integer).
pub const POISON: u8 = 0xff;

fn u64_at(p: &[u8]) -> u64 {
    u64::from_ne_bytes(p[..8].try_into().expect("8-byte parameter"))
}

fn u32_at(p: &[u8]) -> u32 {
    u32::from_ne_bytes(p[..4].try_into().expect("4-byte parameter"))
}

impl Call {
    /// Decodes a built-in's parameters (each already copied out of the launch, sized per
    /// [`Builtin::param_sizes`]).
    pub fn decode(builtin: Builtin, params: &[Vec<u8>]) -> Call {
        let p = |i: usize| params[i].as_slice();
        match builtin {
            Builtin::Spin => Call::Sleep(u64_at(p(0))),
            Builtin::SpinStamp => Call::StampedSleep { ns: u64_at(p(0)), out: u64_at(p(1)) },
            Builtin::FillU32 => Call::FillU32 { dst: u64_at(p(0)), value: u32_at(p(1)), n: u64_at(p(2)) },
            Builtin::VectorAddF32 => {
                Call::VectorAddF32 { a: u64_at(p(0)), b: u64_at(p(1)), c: u64_at(p(2)), n: u64_at(p(3)) }
            }
            Builtin::SaxpyF32 => {
                Call::SaxpyF32 { a: f32::from_bits(u32_at(p(0))), x: u64_at(p(1)), y: u64_at(p(2)), n: u64_at(p(3)) }
            }
        }
    }

    /// Device ranges `(address, bytes, written)` the call touches, for validation before it runs.
    pub fn ranges(&self) -> Vec<(u64, u64, bool)> {
        let f = |n: u64| n.saturating_mul(4);
        match *self {
            Call::Sleep(_) => vec![],
            Call::StampedSleep { out, .. } => vec![(out, 16, true)],
            Call::Uncomputed { ref poison, .. } => poison.iter().map(|&(a, n)| (a, n, true)).collect(),
            Call::FillU32 { dst, n, .. } => vec![(dst, f(n), true)],
            Call::VectorAddF32 { a, b, c, n } => vec![(a, f(n), false), (b, f(n), false), (c, f(n), true)],
            Call::SaxpyF32 { x, y, n, .. } => vec![(x, f(n), false), (y, f(n), true)],
        }
    }

    /// Does the call's work on the calling thread (which holds the engine); `Sleep` and `StampedSleep`
    /// are timed (and stamped) by the engine.
    ///
    /// # Safety
    /// Every range in [`Call::ranges`] must be mapped, writable where marked, and stay so during the call.
    pub unsafe fn run(&self) {
        match *self {
            Call::Sleep(_) | Call::StampedSleep { .. } => {}
            Call::Uncomputed { ref poison, .. } => {
                for &(addr, n) in poison {
                    // SAFETY: the caller guarantees each range is mapped and writable.
                    unsafe { std::ptr::write_bytes(addr as *mut u8, POISON, n as usize) };
                }
            }
            Call::FillU32 { dst, value, n } => {
                // SAFETY: the caller guarantees dst..dst+4n is mapped and writable.
                let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut u32, n as usize) };
                d.fill(value);
            }
            Call::VectorAddF32 { a, b, c, n } => {
                for i in 0..n as usize {
                    // SAFETY: in-bounds of the validated ranges; unaligned-safe reads since device
                    // pointers may be offset arbitrarily by the program.
                    unsafe {
                        let x = (a as *const f32).add(i).read_unaligned();
                        let y = (b as *const f32).add(i).read_unaligned();
                        (c as *mut f32).add(i).write_unaligned(x + y);
                    }
                }
            }
            Call::SaxpyF32 { a, x, y, n } => {
                for i in 0..n as usize {
                    // SAFETY: as above.
                    unsafe {
                        let xv = (x as *const f32).add(i).read_unaligned();
                        let yp = (y as *mut f32).add(i);
                        yp.write_unaligned(a * xv + yp.read_unaligned());
                    }
                }
            }
        }
    }
}

/// Sleeps until `deadline_ns` on the shared monotonic clock without burning a core. The thread's timer
/// slack is lowered so the wake-up is as prompt as the host allows.
pub fn sleep_until(deadline_ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK with a plain integer only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: absolute sleep on CLOCK_MONOTONIC with a valid timespec; no remaining-time output needed.
        let r = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if r != libc::EINTR {
            break;
        }
    }
}
