//! The timeline of a vGPU: a ring of completion records in its live area, through which the shims tell
//! the daemon when each kernel of a managed vGPU ran (absolute start and end on `CLOCK_MONOTONIC`), so
//! that the daemon can charge every vGPU the device time its work took, exactly, from the device-wide
//! order of completions it assembles from the timelines of the device's vGPUs (see the scheduler's
//! `ledger`). One ring per vGPU, in the vGPU's own file: a process can publish only its own vGPU's work.
//!
//! Protocol (many writers, one reader):
//! - a writer claims index `i` with `head.fetch_add(1)`; its entry is `entries[i % RING]`. It takes the
//!   entry by a compare-and-swap of `seq` from an even value below `2i + 1` (published, or never used) to
//!   `2i + 1`, writes the fields, then publishes by storing `seq = 2i + 2`. An entry another writer still
//!   holds (odd `seq`, a writer of an earlier lap that stalled or died) or that a later lap has taken
//!   already is left alone: index `i` stays a gap and the writer claims a new index.
//! - the reader (the daemon's pacer for the vGPU's device) reads index `i` when its `seq` is `2i + 2`, and keeps
//!   the fields only if `seq` is unchanged after reading them (a seqlock): every field is written only by
//!   the entry's holder, between its odd and even `seq`, so a record read this way is never torn; and
//!   `seq` only grows, so a record is never read twice under two indices. A `seq` above `2i + 2` means the
//!   ring lapped the reader (the record is lost); below, the writer has not published yet, and an index
//!   that stays unpublished for [`ABANDONED_NS`] is skipped as a gap.
//! - the reader stores how far it has read in `tail`, and what it has charged up to in `charged_end_ns`,
//!   so that a daemon restarted on the same region continues where the last one stopped.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering, fence};

/// Records per vGPU.
pub const RING: usize = 1024;
/// How long an index may stay unpublished before the reader takes it for a gap (a writer claims and
/// publishes within a few instructions; only one that died, or was lapped, leaves an index for longer).
pub const ABANDONED_NS: u64 = 50_000_000;
/// Indices a writer tries before giving up (each failure leaves a gap).
const ATTEMPTS: usize = 4;

/// One completion record in the ring.
#[repr(C)]
pub struct Entry {
    /// `2i + 1` while the writer of index `i` fills the entry, `2i + 2` once it is published (0: never).
    pub seq: AtomicU64,
    /// When the kernel could start, monotonic ns: the later of its start event (when its stream reached
    /// it) and its submission.
    pub start_ns: AtomicU64,
    /// When it finished (its end event), monotonic ns.
    pub end_ns: AtomicU64,
    /// Tokens its launch took from the bucket (its estimate; 0 when the vGPU is not token-limited): the
    /// daemon gives them back when it charges the device time.
    pub charged: AtomicI64,
    /// What was launched (low 16 bits: 0 a kernel, 1 a graph) and how many launches the record covers
    /// (high 16 bits, less one: the launches of a batch measured as one span, see [`Record::launches`]).
    pub kind: AtomicU32,
    /// 0 when the span is the kernel's (see [`Record::bound_ns`]); otherwise the most it may be charged.
    /// Written as zero by shims before this field had a meaning (same layout version).
    pub bound_ns: AtomicU32,
}

/// The ring of one vGPU.
#[repr(C)]
pub struct Timeline {
    /// Next index a writer claims.
    pub head: AtomicU64,
    /// Next index the reader has not read yet.
    pub tail: AtomicU64,
    /// Reserved, zero.
    pub reserved: [u64; 2],
    /// The records, index `i` at `i % RING`.
    pub entries: [Entry; RING],
}

/// What one completion record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// When the kernel could start (monotonic ns; see [`Entry::start_ns`]).
    pub start_ns: u64,
    /// End of the kernel (monotonic ns).
    pub end_ns: u64,
    /// Tokens its launch took (0: not token-limited).
    pub charged: i64,
    /// What was launched (0: a kernel, 1: a graph).
    pub kind: u16,
    /// Launches the span covers (at least 1): launches of one stream that followed each other with the
    /// stream never idle in between, measured as one span (a batch), so that the daemon's estimate of one
    /// launch is the span's device time over this count.
    pub launches: u16,
    /// 0: the span holds only the kernel and its wait for the engine. Otherwise the launching thread was
    /// held up between submitting the launch and recording its end event (preempted, say), so the span
    /// may run on after the kernel ended (or start before it was submitted) by host time the kernel did
    /// not use: it is charged at most this many ns (its launch's estimate).
    pub bound_ns: u32,
}

/// What the reader finds at one index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The record published there.
    Ready(Record),
    /// Not published (yet).
    Pending,
    /// Overwritten by a later lap of the ring.
    Lost,
}

impl Timeline {
    /// Publishes `r` (lock-free, no system call); false when no entry could be taken in [`ATTEMPTS`]
    /// tries (writers of earlier laps hold them), and the record is dropped.
    pub fn publish(&self, r: &Record) -> bool {
        (0..ATTEMPTS).any(|_| {
            let i = self.head.fetch_add(1, Ordering::AcqRel);
            let e = &self.entries[(i % RING as u64) as usize];
            let claim = 2 * i + 1;
            let cur = e.seq.load(Ordering::Acquire);
            if cur & 1 != 0 || cur >= claim {
                return false;
            }
            if e.seq.compare_exchange(cur, claim, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                return false;
            }
            // The odd `seq` is visible before any field: a reader that sees a new field sees it changed.
            fence(Ordering::Release);
            e.start_ns.store(r.start_ns, Ordering::Relaxed);
            e.end_ns.store(r.end_ns, Ordering::Relaxed);
            e.charged.store(r.charged, Ordering::Relaxed);
            e.kind.store(u32::from(r.kind) | u32::from(r.launches.max(1) - 1) << 16, Ordering::Relaxed);
            e.bound_ns.store(r.bound_ns, Ordering::Relaxed);
            e.seq.store(claim + 1, Ordering::Release);
            true
        })
    }

    /// Reads index `i` (see the module documentation).
    pub fn read(&self, i: u64) -> Slot {
        let e = &self.entries[(i % RING as u64) as usize];
        let want = 2 * i + 2;
        let before = e.seq.load(Ordering::Acquire);
        if before < want {
            return Slot::Pending;
        }
        if before > want {
            return Slot::Lost;
        }
        let kind = e.kind.load(Ordering::Relaxed);
        let r = Record {
            start_ns: e.start_ns.load(Ordering::Relaxed),
            end_ns: e.end_ns.load(Ordering::Relaxed),
            charged: e.charged.load(Ordering::Relaxed),
            kind: kind as u16,
            launches: (kind >> 16) as u16 + 1,
            bound_ns: e.bound_ns.load(Ordering::Relaxed),
        };
        // Orders the field loads before the second look at `seq`: a field a later writer wrote means `seq`
        // has changed by then.
        fence(Ordering::Acquire);
        if e.seq.load(Ordering::Relaxed) != want { Slot::Lost } else { Slot::Ready(r) }
    }
}

impl From<&Record> for tessera_policy::ledger::Kernel {
    /// What the daemon's ledger charges of a published record.
    fn from(r: &Record) -> Self {
        Self { start_ns: r.start_ns, end_ns: r.end_ns, charged: r.charged, bound_ns: r.bound_ns }
    }
}

/// The single reader of one [`Timeline`]: where it is, and since when the index it waits at has been
/// pending.
#[derive(Debug, Default)]
pub struct Reader {
    next: u64,
    /// (index, first seen pending at) of the index the reader stopped at.
    stalled: Option<(u64, u64)>,
    /// Records lost so far (overwritten, or indices skipped as gaps).
    pub lost: u64,
}

impl Reader {
    /// A reader continuing where the last one stopped (the ring's `tail`).
    pub fn resume(t: &Timeline) -> Reader {
        Reader { next: t.tail.load(Ordering::Acquire), stalled: None, lost: 0 }
    }

    /// Appends every record published since the last call to `out`, in index order, stopping at the
    /// first index still unpublished (unless it has been for [`ABANDONED_NS`] at `now_ns`); then stores
    /// the new position in `tail`.
    pub fn read(&mut self, t: &Timeline, now_ns: u64, out: &mut Vec<Record>) {
        let head = t.head.load(Ordering::Acquire);
        if self.next > head {
            // The ring started over (its vGPU was created anew in the slot).
            self.next = t.tail.load(Ordering::Acquire).min(head);
            self.stalled = None;
        }
        if head.saturating_sub(self.next) > RING as u64 {
            self.lost += head - RING as u64 - self.next;
            self.next = head - RING as u64;
        }
        while self.next < head {
            match t.read(self.next) {
                Slot::Ready(r) => out.push(r),
                Slot::Lost => self.lost += 1,
                Slot::Pending => match self.stalled {
                    Some((i, since)) if i == self.next && now_ns.saturating_sub(since) >= ABANDONED_NS => {
                        self.lost += 1;
                    }
                    Some((i, _)) if i == self.next => break,
                    _ => {
                        self.stalled = Some((self.next, now_ns));
                        break;
                    }
                },
            }
            self.next += 1;
        }
        t.tail.store(self.next, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn timeline() -> &'static Timeline {
        // SAFETY: the structures are integers and atomics, valid when zero.
        Box::leak(unsafe { Box::<Timeline>::new_zeroed().assume_init() })
    }

    fn rec(n: u64, kind: u16) -> Record {
        Record { start_ns: n, end_ns: n * 3 + 1, charged: -(n as i64), kind, launches: 1, bound_ns: n as u32 }
    }

    /// Whether `r` is a record [`rec`] could have made (fields consistent with each other).
    fn whole(r: &Record) -> bool {
        r.end_ns == r.start_ns * 3 + 1 && r.charged == -(r.start_ns as i64)
    }

    #[test]
    fn records_are_read_in_order_once() {
        let t = timeline();
        let mut reader = Reader::resume(t);
        let mut out = Vec::new();
        reader.read(t, 0, &mut out);
        assert!(out.is_empty());
        for n in 1..=3 {
            assert!(t.publish(&rec(n, 7)));
        }
        reader.read(t, 0, &mut out);
        reader.read(t, 0, &mut out);
        assert_eq!(out, [rec(1, 7), rec(2, 7), rec(3, 7)]);
        assert_eq!(t.tail.load(Ordering::Relaxed), 3);
        // A new reader (a restarted daemon) continues at the tail.
        assert!(t.publish(&rec(4, 1)));
        let mut again = Vec::new();
        Reader::resume(t).read(t, 0, &mut again);
        assert_eq!(again, [rec(4, 1)]);
        // A batch's launch count travels with its kind.
        let batch = Record { launches: 32, ..rec(5, 1) };
        assert!(t.publish(&batch));
        let mut batches = Vec::new();
        Reader::resume(t).read(t, 0, &mut batches);
        assert_eq!(batches, [batch]);
    }

    #[test]
    fn the_ring_wraps_around_and_a_lapped_reader_loses_only_the_overwritten() {
        let t = timeline();
        let mut reader = Reader::resume(t);
        let mut out = Vec::new();
        for lap in 0..3u64 {
            for n in 0..RING as u64 {
                assert!(t.publish(&rec(lap * RING as u64 + n + 1, 0)));
            }
            reader.read(t, 0, &mut out);
        }
        assert_eq!(out.len(), 3 * RING);
        assert!(out.iter().enumerate().all(|(k, r)| r.start_ns == k as u64 + 1));
        // Lapped: RING + 10 records since the last read, the oldest 10 are gone.
        out.clear();
        for n in 0..(RING + 10) as u64 {
            assert!(t.publish(&rec(n + 1, 0)));
        }
        reader.read(t, 0, &mut out);
        assert_eq!((out.len(), reader.lost), (RING, 10));
        assert_eq!(out[0].start_ns, 11);
    }

    #[test]
    fn an_unpublished_index_holds_the_reader_until_it_is_abandoned() {
        let t = timeline();
        let mut reader = Reader::resume(t);
        // A writer claimed index 0 and never published; index 1 is published.
        t.head.store(1, Ordering::Relaxed);
        t.entries[0].seq.store(1, Ordering::Relaxed);
        assert!(t.publish(&rec(5, 2)));
        let mut out = Vec::new();
        reader.read(t, 1_000, &mut out);
        reader.read(t, 1_000 + ABANDONED_NS - 1, &mut out);
        assert!(out.is_empty(), "waits for the writer");
        reader.read(t, 1_000 + ABANDONED_NS, &mut out);
        assert_eq!((out.as_slice(), reader.lost), ([rec(5, 2)].as_slice(), 1));
        // The next lap's writer of that entry finds it held and moves on to a fresh index.
        t.head.store(RING as u64, Ordering::Relaxed);
        assert!(t.publish(&rec(6, 2)));
        assert_eq!(t.head.load(Ordering::Relaxed), RING as u64 + 2, "index RING was skipped");
        assert_eq!(t.read(RING as u64), Slot::Pending);
        assert_eq!(t.read(RING as u64 + 1), Slot::Ready(rec(6, 2)));
    }

    #[test]
    fn concurrent_writers_and_a_reader_never_see_torn_or_duplicate_records() {
        const WRITERS: u64 = 4;
        const EACH: u64 = 20_000;
        let t = timeline();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                std::thread::spawn(move || {
                    let mut dropped = 0;
                    for n in 0..EACH {
                        if !t.publish(&rec(w * EACH + n + 1, w as u16)) {
                            dropped += 1;
                        }
                    }
                    dropped
                })
            })
            .collect();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut reader = Reader::resume(t);
                let mut out = Vec::new();
                let mut now = 0;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    reader.read(t, now, &mut out);
                    now += 1_000;
                    if finished {
                        // Anything still pending now was abandoned for good: skip it, gap by gap.
                        while reader.next < t.head.load(Ordering::Acquire) {
                            now += ABANDONED_NS;
                            reader.read(t, now, &mut out);
                        }
                        return (out, reader.lost);
                    }
                    std::thread::yield_now();
                }
            })
        };
        let dropped: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let (out, lost) = reader.join().unwrap();
        assert!(out.iter().all(whole), "a torn record was read");
        let distinct: HashSet<u64> = out.iter().map(|r| r.start_ns).collect();
        assert_eq!(distinct.len(), out.len(), "a record was read twice");
        assert!(out.iter().all(|r| r.kind as u64 == (r.start_ns - 1) / EACH), "a record under the wrong writer");
        // Each writer's records arrive in its own order.
        for w in 0..WRITERS as u32 {
            let mine: Vec<u64> = out.iter().filter(|r| u32::from(r.kind) == w).map(|r| r.start_ns).collect();
            assert!(mine.windows(2).all(|p| p[0] < p[1]), "writer {w}'s records out of order");
        }
        assert_eq!(t.head.load(Ordering::Relaxed), out.len() as u64 + lost, "every index read or counted lost");
        assert!(out.len() as u64 + dropped <= WRITERS * EACH);

        eprintln!("{} read, {lost} lost, {dropped} dropped", out.len());
    }
}
