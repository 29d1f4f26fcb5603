//! Sub-allocation of small blocks: a slab is one page of a soft space cut into equal blocks of one size
//! class (a power of two from [`MIN_BLOCK`] to half a page). Taking and giving back a block is lock-free:
//! a compare-and-swap on the slab's bitmap, no system call, no heap allocation. Creating and retiring
//! slabs is the space's slow path, under its lock.
//!
//! A slab's `tag` says which page and class it serves and whether it is active. A slab being retired is
//! first tagged as retiring and only then checked for taken blocks, while a block taker checks the tag
//! again after its claim: with sequentially consistent operations one of the two always sees the other,
//! so a block is never handed out of a page that is going away.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// Smallest block (and the alignment of every block): what `cuMemAlloc` guarantees.
pub const MIN_BLOCK: u64 = 256;
/// Number of size classes a space may have (pages up to 2^(8+MAX_CLASSES) bytes).
pub const MAX_CLASSES: usize = 24;

/// The size class serving `size` bytes with pages of `page` bytes; `None` when it takes whole pages.
pub fn class_of(size: u64, page: u64) -> Option<usize> {
    let block = size.max(MIN_BLOCK).checked_next_power_of_two()?;
    (block <= page / 2).then(|| (block.trailing_zeros() - MIN_BLOCK.trailing_zeros()) as usize)
}

/// Block size of class `class`.
pub fn block_size(class: usize) -> u64 {
    MIN_BLOCK << class
}

const ACTIVE: u64 = 1;
const RETIRING: u64 = 2;

fn tag(page: usize, class: usize, state: u64) -> u64 {
    (page as u64) << 16 | (class as u64) << 8 | state
}

/// One page cut into blocks of one class.
pub struct Slab {
    tag: AtomicU64,
    class: usize,
    blocks: usize,
    /// One bit per block, set while taken (bits past `blocks` are always set).
    taken: Box<[AtomicU64]>,
    /// Requested size of each taken block, for address-range queries.
    sizes: Box<[AtomicU32]>,
    /// Word to start looking for a free block at.
    hint: AtomicU32,
}

impl Slab {
    /// An inactive slab for class `class` with pages of `page` bytes.
    pub fn new(class: usize, page: u64) -> Slab {
        let blocks = (page / block_size(class)) as usize;
        let words = blocks.div_ceil(64);
        let s = Slab {
            tag: AtomicU64::new(0),
            class,
            blocks,
            taken: (0..words).map(|_| AtomicU64::new(0)).collect(),
            sizes: (0..blocks).map(|_| AtomicU32::new(0)).collect(),
            hint: AtomicU32::new(0),
        };
        s.reset();
        s
    }

    fn reset(&self) {
        for w in self.taken.iter() {
            w.store(0, SeqCst);
        }
        if !self.blocks.is_multiple_of(64) {
            self.taken[self.blocks / 64].store(!0u64 << (self.blocks % 64), SeqCst);
        }
    }

    /// The slab's class.
    pub fn class(&self) -> usize {
        self.class
    }

    /// Puts the (empty) slab in service for page `page`.
    pub fn activate(&self, page: usize) {
        self.reset();
        self.tag.store(tag(page, self.class, ACTIVE), SeqCst);
    }

    /// The page an active or retiring slab serves.
    pub fn page(&self) -> usize {
        (self.tag.load(SeqCst) >> 16) as usize
    }

    /// Takes a free block, recording `size`; its index, or `None` when the slab is full or not active.
    pub fn take(&self, size: u64) -> Option<usize> {
        let before = self.tag.load(SeqCst);
        if before & 0xff != ACTIVE {
            return None;
        }
        let words = self.taken.len();
        let start = self.hint.load(SeqCst) as usize % words;
        for k in 0..words {
            let i = (start + k) % words;
            let mut w = self.taken[i].load(SeqCst);
            while w != !0 {
                let bit = (!w).trailing_zeros();
                match self.taken[i].compare_exchange_weak(w, w | 1 << bit, SeqCst, SeqCst) {
                    Ok(_) => {
                        if self.tag.load(SeqCst) != before {
                            self.taken[i].fetch_and(!(1 << bit), SeqCst);
                            return None;
                        }
                        let index = i * 64 + bit as usize;
                        self.sizes[index].store(size as u32, SeqCst);
                        self.hint.store(i as u32, SeqCst);
                        return Some(index);
                    }
                    Err(now) => w = now,
                }
            }
        }
        None
    }

    /// Gives block `index` back; false when it was not taken (a double or stray free).
    pub fn give_back(&self, index: usize) -> bool {
        if index >= self.blocks {
            return false;
        }
        let bit = 1u64 << (index % 64);
        self.taken[index / 64].fetch_and(!bit, SeqCst) & bit != 0
    }

    /// Requested size of taken block `index`, or `None` when it is free.
    pub fn size_of(&self, index: usize) -> Option<u64> {
        let taken = index < self.blocks && self.taken[index / 64].load(SeqCst) & 1 << (index % 64) != 0;
        taken.then(|| self.sizes[index].load(SeqCst) as u64)
    }

    /// Blocks taken.
    pub fn used(&self) -> usize {
        let all: u32 = self.taken.iter().map(|w| w.load(SeqCst).count_ones()).sum();
        all as usize - (self.taken.len() * 64 - self.blocks)
    }

    /// Stops the slab serving blocks if none is taken; true when it did (the page may then go).
    pub fn retire_if_empty(&self) -> bool {
        let t = self.tag.load(SeqCst);
        if t & 0xff != ACTIVE {
            return false;
        }
        let retiring = (t & !0xff) | RETIRING;
        if self.tag.compare_exchange(t, retiring, SeqCst, SeqCst).is_err() {
            return false;
        }
        if self.used() == 0 {
            self.tag.store(0, SeqCst);
            return true;
        }
        self.tag.store(t, SeqCst);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 2 << 20;

    #[test]
    fn classes_are_powers_of_two_up_to_half_a_page() {
        assert_eq!(class_of(1, PAGE), Some(0));
        assert_eq!(class_of(256, PAGE), Some(0));
        assert_eq!(class_of(257, PAGE), Some(1));
        assert_eq!(class_of(1 << 20, PAGE), Some(12));
        assert_eq!(class_of((1 << 20) + 1, PAGE), None);
        assert_eq!(class_of(u64::MAX, PAGE), None);
        assert_eq!(block_size(12), 1 << 20);
    }

    #[test]
    fn blocks_are_taken_once_and_given_back_once() {
        let s = Slab::new(class_of(600, PAGE).unwrap(), PAGE);
        assert_eq!(s.take(600), None, "inactive slabs hand out nothing");
        s.activate(7);
        assert_eq!(s.page(), 7);
        let blocks = (PAGE / 1024) as usize;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..blocks {
            assert!(seen.insert(s.take(600).unwrap()));
        }
        assert_eq!(s.take(600), None, "full");
        assert_eq!(s.used(), blocks);
        assert_eq!(s.size_of(3), Some(600));
        assert!(s.give_back(3));
        assert!(!s.give_back(3), "double free");
        assert!(!s.give_back(blocks), "out of range");
        assert_eq!(s.size_of(3), None);
        assert!(!s.retire_if_empty(), "blocks still taken");
        assert_eq!(s.take(10), Some(3));
        for i in 0..blocks {
            s.give_back(i);
        }
        assert!(s.retire_if_empty());
        assert_eq!(s.take(10), None, "retired slabs hand out nothing");
    }

    #[test]
    fn concurrent_takers_never_share_a_block() {
        let s = std::sync::Arc::new(Slab::new(0, PAGE));
        s.activate(0);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || (0..1000).filter_map(|_| s.take(1)).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<usize> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(n, 4000);
    }
}
