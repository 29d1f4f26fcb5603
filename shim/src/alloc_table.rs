//! What each live allocation was charged, so that its free gives back exactly that: a lock-free map from
//! a key (device pointer, array, VMM handle or mapping address) to its device, bytes and owner.
//!
//! Open addressing over a fixed array of atomics. A key hashes to a window of [`WINDOW`] consecutive
//! slots; an insert claims the window's first empty or tombstoned slot with one CAS, a look-up scans the
//! window and stops at the first empty slot (slots never return to empty, so nothing lies beyond it).
//! A slot's life is `EMPTY → BUSY → FULL → BUSY → TOMB → BUSY → FULL ...`: `BUSY` belongs to the one
//! thread that won the CAS while it writes or removes, and the `Release` store of `FULL` publishes the
//! fields. Only when a window has no free slot does an entry go to a mutex-protected overflow map, which
//! look-ups consult only while it is non-empty. Inserting, taking and counting references therefore take
//! no lock, make no system call and allocate nothing as long as the table is not full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What a key names; keys of different kinds never collide.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Linear memory: `cuMemAlloc`, pitched, managed and stream-ordered allocations.
    Linear = 1,
    /// A CUDA array.
    Array = 2,
    /// A mipmapped array.
    Mipmap = 3,
    /// A VMM physical allocation (`cuMemCreate` handle).
    Physical = 4,
    /// A VMM mapping, keyed by address; its owner is the physical handle.
    Mapping = 5,
}

/// What one allocation was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Device ordinal charged.
    pub device: u32,
    /// Bytes charged (for a mapping: the bytes it maps, nothing charged).
    pub bytes: u64,
    /// The context that owns the allocation, or for a mapping the physical handle it maps.
    pub owner: u64,
    /// References keeping it alive (a VMM handle: itself, its retains and its mappings); 1 otherwise.
    pub refs: u32,
}

impl Entry {
    /// An entry with one reference.
    pub fn new(device: u32, bytes: u64, owner: u64) -> Entry {
        Entry { device, bytes, owner, refs: 1 }
    }
}

/// Slots scanned per key.
pub const WINDOW: usize = 64;

const EMPTY: u32 = 0;
const BUSY: u32 = 1;
const FULL: u32 = 2;
const TOMB: u32 = 3;

struct Slot {
    state: AtomicU32,
    kind: AtomicU32,
    key: AtomicU64,
    device: AtomicU32,
    refs: AtomicU32,
    bytes: AtomicU64,
    owner: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(EMPTY),
            kind: AtomicU32::new(0),
            key: AtomicU64::new(0),
            device: AtomicU32::new(0),
            refs: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            owner: AtomicU64::new(0),
        }
    }

    /// True when the slot (read after an `Acquire` load of `FULL`) holds `(kind, key)`.
    fn holds(&self, kind: Kind, key: u64) -> bool {
        self.kind.load(Ordering::Relaxed) == kind as u32 && self.key.load(Ordering::Relaxed) == key
    }

    fn entry(&self) -> Entry {
        Entry {
            device: self.device.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            owner: self.owner.load(Ordering::Relaxed),
            refs: self.refs.load(Ordering::Relaxed),
        }
    }

    /// Claims a `FULL` slot holding `(kind, key)` for removal; on success the caller owns it (`BUSY`).
    fn claim(&self, kind: Kind, key: u64) -> bool {
        if self.state.compare_exchange(FULL, BUSY, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        // Between the caller's check and the CAS the slot may have been emptied and refilled.
        if self.holds(kind, key) {
            true
        } else {
            self.state.store(FULL, Ordering::Release);
            false
        }
    }

    /// Reads and frees a slot the caller owns.
    fn remove(&self) -> Entry {
        let e = self.entry();
        self.state.store(TOMB, Ordering::Release);
        e
    }
}

/// The map; `N` slots, a power of two of at least [`WINDOW`].
pub struct AllocTable<const N: usize> {
    slots: [Slot; N],
    overflow: Mutex<Option<HashMap<(u32, u64), Entry>>>,
    overflowed: AtomicUsize,
}

impl<const N: usize> Default for AllocTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> AllocTable<N> {
    /// An empty table (all zero, so a `static` one lives in `.bss` and costs nothing until used).
    pub const fn new() -> Self {
        const { assert!(N.is_power_of_two() && N >= WINDOW) };
        AllocTable { slots: [const { Slot::new() }; N], overflow: Mutex::new(None), overflowed: AtomicUsize::new(0) }
    }

    /// Index of the first slot of `(kind, key)`'s window (Fibonacci hashing: keys are aligned addresses).
    fn home(kind: Kind, key: u64) -> usize {
        let h = (key ^ ((kind as u64) << 59)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - N.trailing_zeros())) as usize
    }

    fn window(&self, kind: Kind, key: u64) -> impl Iterator<Item = &Slot> {
        let home = Self::home(kind, key);
        (0..WINDOW).map(move |i| &self.slots[(home + i) & (N - 1)])
    }

    /// The `FULL` slot holding `(kind, key)`, if it is in the array.
    fn find(&self, kind: Kind, key: u64) -> Option<&Slot> {
        for s in self.window(kind, key) {
            match s.state.load(Ordering::Acquire) {
                EMPTY => return None,
                FULL if s.holds(kind, key) => return Some(s),
                _ => {}
            }
        }
        None
    }

    fn with_overflow<R>(&self, f: impl FnOnce(&mut HashMap<(u32, u64), Entry>) -> R) -> R {
        let mut guard = self.overflow.lock().unwrap_or_else(|p| p.into_inner());
        let map = guard.get_or_insert_with(HashMap::new);
        let r = f(map);
        self.overflowed.store(map.len(), Ordering::Release);
        r
    }

    fn overflow_in_use(&self) -> bool {
        self.overflowed.load(Ordering::Acquire) > 0
    }

    /// Records `(kind, key)`; the key must not be live already (the driver never hands out a live one).
    pub fn insert(&self, kind: Kind, key: u64, e: Entry) {
        for s in self.window(kind, key) {
            let state = s.state.load(Ordering::Relaxed);
            if (state == EMPTY || state == TOMB)
                && s.state.compare_exchange(state, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                s.kind.store(kind as u32, Ordering::Relaxed);
                s.key.store(key, Ordering::Relaxed);
                s.device.store(e.device, Ordering::Relaxed);
                s.refs.store(e.refs, Ordering::Relaxed);
                s.bytes.store(e.bytes, Ordering::Relaxed);
                s.owner.store(e.owner, Ordering::Relaxed);
                s.state.store(FULL, Ordering::Release);
                return;
            }
        }
        self.with_overflow(|m| m.insert((kind as u32, key), e));
    }

    /// Removes `(kind, key)` and returns what it was charged, whatever its reference count.
    pub fn take(&self, kind: Kind, key: u64) -> Option<Entry> {
        for s in self.window(kind, key) {
            match s.state.load(Ordering::Acquire) {
                EMPTY => break,
                FULL if s.holds(kind, key) && s.claim(kind, key) => return Some(s.remove()),
                _ => {}
            }
        }
        if self.overflow_in_use() { self.with_overflow(|m| m.remove(&(kind as u32, key))) } else { None }
    }

    /// Adds a reference to `(kind, key)`; false when it is not recorded.
    pub fn retain(&self, kind: Kind, key: u64) -> bool {
        if let Some(s) = self.find(kind, key) {
            s.refs.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        self.overflow_in_use() && self.with_overflow(|m| m.get_mut(&(kind as u32, key)).map(|e| e.refs += 1).is_some())
    }

    /// Drops a reference to `(kind, key)`: `None` when it is not recorded, `Some(None)` while references
    /// remain, `Some(Some(entry))` when that was the last one and the entry is removed.
    pub fn release(&self, kind: Kind, key: u64) -> Option<Option<Entry>> {
        if let Some(s) = self.find(kind, key) {
            let before = s.refs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1)).ok()?;
            if before > 1 {
                return Some(None);
            }
            // The last reference: the claim only has to wait out threads that briefly own the slot to
            // re-check it. If the entry vanished meanwhile, someone took it outright (a program error).
            loop {
                if s.claim(kind, key) {
                    return Some(Some(s.remove()));
                }
                match s.state.load(Ordering::Acquire) {
                    BUSY => std::hint::spin_loop(),
                    FULL if s.holds(kind, key) => {}
                    _ => return None,
                }
            }
        }
        if !self.overflow_in_use() {
            return None;
        }
        self.with_overflow(|m| {
            let e = m.get_mut(&(kind as u32, key))?;
            e.refs = e.refs.saturating_sub(1);
            Some(if e.refs == 0 { m.remove(&(kind as u32, key)) } else { None })
        })
    }

    /// Removes every entry of one of `kinds` owned by `owner`, handing each to `f` (a destroyed context's
    /// allocations). Scans the whole table: for context teardown, never on an allocation path.
    pub fn drain_owned(&self, owner: u64, kinds: &[Kind], mut f: impl FnMut(Kind, u64, Entry)) {
        for s in &self.slots {
            if s.state.load(Ordering::Acquire) != FULL || s.owner.load(Ordering::Relaxed) != owner {
                continue;
            }
            let (kind, key) = (s.kind.load(Ordering::Relaxed), s.key.load(Ordering::Relaxed));
            let Some(&k) = kinds.iter().find(|k| **k as u32 == kind) else { continue };
            if !s.claim(k, key) {
                continue;
            }
            if s.owner.load(Ordering::Relaxed) == owner {
                f(k, key, s.remove());
            } else {
                // Refilled with another owner's entry between the check and the claim: leave it.
                s.state.store(FULL, Ordering::Release);
            }
        }
        if self.overflow_in_use() {
            let drained: Vec<((u32, u64), Entry)> = self.with_overflow(|m| {
                let keys: Vec<(u32, u64)> = m
                    .iter()
                    .filter(|(k, e)| e.owner == owner && kinds.iter().any(|x| *x as u32 == k.0))
                    .map(|(k, _)| *k)
                    .collect();
                keys.into_iter().filter_map(|k| m.remove(&k).map(|e| (k, e))).collect()
            });
            for ((kind, key), e) in drained {
                if let Some(&k) = kinds.iter().find(|k| **k as u32 == kind) {
                    f(k, key, e);
                }
            }
        }
    }

    /// Live entries (a snapshot, for tests).
    #[cfg(test)]
    pub fn live(&self) -> usize {
        let in_array = self.slots.iter().filter(|s| s.state.load(Ordering::Acquire) == FULL).count();
        in_array + self.overflowed.load(Ordering::Acquire)
    }
}

/// Capacity of the process-wide table before entries spill into the locked overflow map.
pub const CAPACITY: usize = 1 << 15;

/// The process's table.
pub static TABLE: AllocTable<CAPACITY> = AllocTable::new();

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn insert_take_and_kinds_are_separate() {
        let t = AllocTable::<64>::new();
        t.insert(Kind::Linear, 0x7f00_0000_1000, Entry::new(0, 100, 7));
        t.insert(Kind::Array, 0x7f00_0000_1000, Entry::new(1, 200, 7));
        assert_eq!(t.live(), 2);
        assert_eq!(t.take(Kind::Mipmap, 0x7f00_0000_1000), None);
        assert_eq!(t.take(Kind::Array, 0x7f00_0000_1000), Some(Entry::new(1, 200, 7)));
        assert_eq!(t.take(Kind::Linear, 0x7f00_0000_1000), Some(Entry::new(0, 100, 7)));
        assert_eq!(t.take(Kind::Linear, 0x7f00_0000_1000), None, "taken once");
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn full_windows_spill_into_the_overflow_map_and_back() {
        let t = AllocTable::<64>::new();
        for k in 1..=200u64 {
            t.insert(Kind::Linear, k << 12, Entry::new(0, k, 0));
        }
        assert_eq!(t.live(), 200);
        assert!(t.overflow_in_use());
        for k in (1..=200u64).rev() {
            assert_eq!(t.take(Kind::Linear, k << 12).map(|e| e.bytes), Some(k));
        }
        assert_eq!(t.live(), 0);
        assert!(!t.overflow_in_use());
        // Tombstones are reused.
        for k in 1..=64u64 {
            t.insert(Kind::Linear, k << 20, Entry::new(0, k, 0));
        }
        assert!(!t.overflow_in_use());
    }

    #[test]
    fn references_keep_an_entry_until_the_last_release() {
        let t = AllocTable::<64>::new();
        t.insert(Kind::Physical, 5, Entry::new(0, 1 << 21, 0));
        assert!(t.retain(Kind::Physical, 5));
        assert!(t.retain(Kind::Physical, 5));
        assert!(!t.retain(Kind::Physical, 6));
        assert_eq!(t.release(Kind::Physical, 5), Some(None));
        assert_eq!(t.release(Kind::Physical, 5), Some(None));
        assert_eq!(t.release(Kind::Physical, 5).flatten().map(|e| e.bytes), Some(1 << 21));
        assert_eq!(t.release(Kind::Physical, 5), None);
    }

    #[test]
    fn drain_owned_takes_only_that_owner() {
        let t = AllocTable::<64>::new();
        for k in 1..=100u64 {
            t.insert(Kind::Linear, k << 12, Entry::new(0, 1, k % 2));
        }
        t.insert(Kind::Physical, 1 << 12, Entry::new(0, 1, 1));
        let mut drained = 0;
        t.drain_owned(1, &[Kind::Linear, Kind::Array], |k, key, e| {
            assert_eq!((k, e.owner), (Kind::Linear, 1));
            assert_eq!((key >> 12) % 2, 1);
            drained += 1;
        });
        assert_eq!(drained, 50);
        assert_eq!(t.live(), 51, "the other owner's entries and the physical handle stay");
    }

    #[test]
    fn concurrent_inserts_and_takes_lose_nothing() {
        let t = Arc::new(AllocTable::<1024>::new());
        let threads: Vec<_> = (0..8u64)
            .map(|id| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let mut taken = 0u64;
                    for round in 0..2000u64 {
                        let key = ((id << 32) | round) << 8;
                        t.insert(Kind::Linear, key, Entry::new(id as u32, round + 1, id));
                        if round % 3 != 0 {
                            let e = t.take(Kind::Linear, key).expect("own key present");
                            assert_eq!((e.device, e.bytes), (id as u32, round + 1));
                            taken += 1;
                        }
                    }
                    for round in (0..2000u64).filter(|r| r % 3 == 0) {
                        assert!(t.take(Kind::Linear, ((id << 32) | round) << 8).is_some());
                        taken += 1;
                    }
                    taken
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(total, 8 * 2000);
        assert_eq!(t.live(), 0);
    }
}
