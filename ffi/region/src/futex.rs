//! Futex wait and wake on a 32-bit word, private memory or a shared mapping alike (the shared form works
//! across processes). Both shared files use it: the simulated GPU's engine queue and Tessera's region
//! (`Sched::epoch`, `DeviceSched::demand`).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Spurious wake-ups are possible; callers re-check.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; FUTEX_WAIT (shared, not PRIVATE)
    // only reads it and compares it with `expected`. The timeout is relative and lives on our stack.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec);
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of [`wait_until`] deadlines (the same for every process of
/// the machine).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into our timespec; CLOCK_MONOTONIC exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps while `*word == expected`, until `deadline_ns` on [`monotonic_ns`]'s clock at the latest: an
/// absolute deadline, so a loop waking at fixed deadlines does not drift. Spurious wake-ups are possible;
/// callers re-check.
pub fn wait_until(word: &AtomicU32, expected: u32, deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; FUTEX_WAIT_BITSET (shared) only
    // reads it and compares it with `expected`; its timeout is an absolute CLOCK_MONOTONIC time on our
    // stack; the unused second address is NULL and the bitset matches every waker.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        );
    }
}

/// Most words [`wait_any_until`] watches (the kernel's limit).
pub const MAX_WATCHED: usize = 128;

/// `struct futex_waitv` of `<linux/futex.h>`.
#[repr(C)]
struct WaitV {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// Sleeps until one of `words` (at most [`MAX_WATCHED`]; each with the value it is expected to hold) no
/// longer holds its value or is woken, or until `deadline_ns` on [`monotonic_ns`]'s clock (`futex_waitv`,
/// Linux 5.16). On an older kernel it sleeps at most a millisecond instead: callers re-check anyway.
pub fn wait_any_until(words: &[(&AtomicU32, u32)], deadline_ns: u64) {
    /// `FUTEX2_SIZE_U32`: a 32-bit word, shared between processes.
    const SIZE_U32: u32 = 2;
    let watched: Vec<WaitV> = words
        .iter()
        .take(MAX_WATCHED)
        .map(|(w, v)| WaitV { val: *v as u64, uaddr: w.as_ptr() as u64, flags: SIZE_U32, reserved: 0 })
        .collect();
    if watched.is_empty() {
        return sleep_until(deadline_ns);
    }
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `watched` describes valid, aligned u32 words that outlive the call (the kernel only reads and
    // compares them); the timeout is an absolute CLOCK_MONOTONIC time on our stack.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            watched.as_ptr(),
            watched.len() as libc::c_uint,
            0 as libc::c_uint,
            &ts as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
        sleep_until(deadline_ns.min(monotonic_ns() + 1_000_000));
    }
}

/// Sleeps until `deadline_ns` on [`monotonic_ns`]'s clock (absolute, so a loop sleeping to fixed deadlines
/// does not drift).
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: clock_nanosleep reads an absolute CLOCK_MONOTONIC time from our stack; the remainder pointer
    // may be NULL with TIMER_ABSTIME. Returning early on a signal is harmless: callers re-check the time.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Wakes every waiter on `word`, in any process.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; it does not dereference beyond validity checks.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn an_absolute_deadline_ends_the_wait_and_a_wake_ends_it_sooner() {
        let word: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
        let start = monotonic_ns();
        wait_until(word, 0, start + 5_000_000);
        assert!(monotonic_ns() - start >= 5_000_000, "slept until the deadline");
        let start = monotonic_ns();
        sleep_until(start + 3_000_000);
        assert!(monotonic_ns() - start >= 3_000_000, "slept until the deadline");
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            word.store(1, Ordering::SeqCst);
            wake_all(word);
        });
        let start = monotonic_ns();
        while word.load(Ordering::SeqCst) == 0 {
            wait_until(word, 0, start + 10_000_000_000);
        }
        assert!(monotonic_ns() - start < 5_000_000_000, "woken long before the deadline");
        waker.join().unwrap();
    }

    #[test]
    fn waiting_on_several_words_ends_at_the_deadline_or_when_any_is_woken() {
        let words: &'static [AtomicU32; 3] =
            Box::leak(Box::new([AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)]));
        let start = monotonic_ns();
        wait_any_until(&[(&words[0], 0), (&words[1], 0)], start + 5_000_000);
        assert!(monotonic_ns() - start >= 5_000_000, "slept until the deadline");
        let start = monotonic_ns();
        wait_any_until(&[(&words[0], 0), (&words[2], 7)], start + 5_000_000_000);
        assert!(monotonic_ns() - start < 1_000_000_000, "a word that changed ends the wait at once");
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            words[1].store(1, Ordering::SeqCst);
            wake_all(&words[1]);
        });
        let start = monotonic_ns();
        while words[1].load(Ordering::SeqCst) == 0 {
            wait_any_until(&[(&words[0], 0), (&words[1], 0)], start + 10_000_000_000);
        }
        assert!(monotonic_ns() - start < 5_000_000_000, "woken long before the deadline");
        waker.join().unwrap();
    }

    #[test]
    fn a_changed_word_returns_at_once_and_a_wake_ends_the_wait() {
        let word: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(1)));
        let t = Instant::now();
        wait(word, 0, Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(1), "the word was not 0: no sleep");
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            word.store(2, Ordering::SeqCst);
            wake_all(word);
        });
        let t = Instant::now();
        while word.load(Ordering::SeqCst) == 1 {
            wait(word, 1, Duration::from_secs(5));
        }
        assert!(t.elapsed() < Duration::from_secs(2));
        waker.join().unwrap();
    }
}
