//! The soft space on the in-memory device: allocation, pooling, compaction and swapping, checking every
//! byte.

use super::fake::{Fake, PAGE};
use super::space::Space;
use std::sync::Arc;
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN};

/// A backend shared between the space and the test, to look at the device from outside.
#[derive(Clone)]
struct Shared(Arc<Fake>);

impl std::ops::Deref for Shared {
    type Target = Fake;
    fn deref(&self) -> &Fake {
        &self.0
    }
}

macro_rules! delegate {
    ($($f:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {
        impl super::backend::Backend for Shared {
            $(fn $f(&self, $($a: $t),*) -> $r { self.0.$f($($a),*) })*
        }
    };
}

delegate! {
    granularity() -> crate::guard::Res<u64>;
    reserve(size: u64) -> crate::guard::Res<u64>;
    create(size: u64) -> crate::guard::Res<u64>;
    release(handle: u64) -> ();
    map(va: u64, size: u64, handle: u64, offset: u64) -> crate::guard::Res;
    unmap(va: u64, size: u64) -> ();
    to_host(dst: *mut u8, src: u64, len: u64) -> crate::guard::Res;
    to_device(dst: u64, src: *const u8, len: u64) -> crate::guard::Res;
    within_device(dst: u64, src: u64, len: u64) -> crate::guard::Res;
    synchronize() -> crate::guard::Res;
    mark() -> crate::guard::Res<u64>;
    wait(mark: u64) -> crate::guard::Res;
    host_alloc(len: u64) -> Option<*mut u8>;
    host_free(p: *mut u8, len: u64) -> ();
}

fn space(capacity: u64) -> (Space<Shared>, Shared) {
    let dev = Shared(Arc::new(Fake::new(capacity)));
    (Space::new(dev.clone(), 256 * PAGE, 8).unwrap(), dev)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
}

#[test]
fn allocations_are_distinct_and_answer_range_queries() {
    let (s, dev) = space(64 * PAGE);
    let small: Vec<u64> = (0..100).map(|_| s.alloc(1000).unwrap()).collect();
    let large = s.alloc(3 * PAGE + 5).unwrap();
    let mut all = small.clone();
    all.push(large);
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 101);
    assert!(small.iter().all(|p| p % 256 == 0) && large % PAGE == 0);
    assert_eq!(s.range(small[3] + 999), Some((small[3], 1000)));
    assert_eq!(s.range(small[3] + 1000), None, "past the block's requested size");
    assert_eq!(s.range(large + 3 * PAGE + 4), Some((large, 3 * PAGE + 5)));
    assert_eq!(s.range(large + 3 * PAGE + 5), None);
    dev.write(large + PAGE - 2, b"abcd");
    assert_eq!(dev.read(large + PAGE - 2, 4), b"abcd", "pages of one allocation are contiguous");
    assert_eq!(s.free(small[3] + 8), Err(CUDA_ERROR_INVALID_VALUE));
    assert_eq!(s.free(large + PAGE), Err(CUDA_ERROR_INVALID_VALUE));
    assert_eq!(s.free(small[3]), Ok(1000));
    assert_eq!(s.free(small[3]), Err(CUDA_ERROR_INVALID_VALUE), "double free");
    assert_eq!(s.free(large), Ok(3 * PAGE + 5));
    assert_eq!(s.free(1), Err(CUDA_ERROR_INVALID_VALUE));
}

#[test]
fn freed_pages_are_reused_before_new_chunks_are_created() {
    let (s, dev) = space(64 * PAGE);
    let a = s.alloc(2 * PAGE).unwrap();
    let held = dev.physical();
    assert_eq!(held, 8 * PAGE, "one chunk of eight pages");
    s.free(a).unwrap();
    let t = s.totals();
    assert_eq!((t.resident, t.pooled, t.fragmented), (0, 8 * PAGE, 0), "the empty chunk stays pooled");
    for _ in 0..4 {
        let b = s.alloc(2 * PAGE).unwrap();
        s.free(b).unwrap();
    }
    let keep: Vec<u64> = (0..4).map(|_| s.alloc(2 * PAGE).unwrap()).collect();
    assert_eq!(dev.physical(), held, "no chunk created while the pool had room");
    for p in keep {
        s.free(p).unwrap();
    }
}

#[test]
fn compaction_keeps_every_byte_at_its_address_and_returns_chunks() {
    let (s, dev) = space(64 * PAGE);
    let ptrs: Vec<u64> = (0..32).map(|_| s.alloc(PAGE).unwrap()).collect();
    let small: Vec<u64> = (0..50).map(|_| s.alloc(3000).unwrap()).collect();
    for (i, &p) in ptrs.iter().chain(&small).enumerate() {
        let len = if i < 32 { PAGE as usize } else { 3000 };
        dev.write(p, &pattern(i as u64, len));
    }
    // Free every other page: each chunk is left half full.
    for p in ptrs.iter().step_by(2) {
        s.free(*p).unwrap();
    }
    let before = s.totals();
    assert!(before.fragmented >= 16 * PAGE, "{before:?}");
    let expected = s.compactable();
    assert!(expected >= 16 * PAGE, "{expected}");
    let done = s.compact().unwrap();
    assert!(done.moved >= 8 && done.released >= 16 * PAGE, "{done:?}");
    let after = s.totals();
    assert_eq!(done.released, expected, "compactable() foretold it");
    assert_eq!(s.compactable(), 0, "nothing more to gain");
    assert_eq!(after.resident, before.resident);
    assert!(after.fragmented < PAGE * 8, "{after:?}");
    assert_eq!(dev.physical(), after.resident + after.pooled);
    for (i, &p) in ptrs.iter().chain(&small).enumerate() {
        if i < 32 && i % 2 == 0 {
            continue;
        }
        let len = if i < 32 { PAGE as usize } else { 3000 };
        assert_eq!(dev.read(p, len), pattern(i as u64, len), "allocation {i}");
    }
}

#[test]
fn eviction_and_restore_keep_every_byte_and_free_the_device() {
    let (s, dev) = space(64 * PAGE);
    let large = s.alloc(5 * PAGE + 100).unwrap();
    let small: Vec<u64> = (0..20).map(|_| s.alloc(700).unwrap()).collect();
    dev.write(large, &pattern(99, (5 * PAGE + 100) as usize));
    for (i, &p) in small.iter().enumerate() {
        dev.write(p, &pattern(i as u64, 700));
    }
    let copied = s.evict().unwrap();
    assert_eq!(copied, 7 * PAGE, "six large pages and one slab page");
    assert_eq!(dev.physical(), 0, "all device memory given back");
    assert_eq!(s.totals().swapped, 7 * PAGE);
    assert!(s.has_swapped());
    // Freeing and allocating while swapped out.
    s.free(small[0]).unwrap();
    let extra = s.alloc(PAGE).unwrap();
    dev.write(extra, &pattern(7, PAGE as usize));
    assert_eq!(s.restore().unwrap(), 7 * PAGE);
    assert!(!s.has_swapped());
    assert_eq!(dev.host_buffers(), 1, "the host buffer is kept for the next swap-out");
    s.evict().unwrap();
    assert_eq!(dev.host_buffers(), 1, "and reused by it");
    s.restore().unwrap();
    assert_eq!(dev.read(large, (5 * PAGE + 100) as usize), pattern(99, (5 * PAGE + 100) as usize));
    for (i, &p) in small.iter().enumerate().skip(1) {
        assert_eq!(dev.read(p, 700), pattern(i as u64, 700));
    }
    assert_eq!(dev.read(extra, PAGE as usize), pattern(7, PAGE as usize));
}

#[test]
fn a_failed_swap_out_copy_leaves_its_pages_and_later_ones_resident() {
    let (s, dev) = space(64 * PAGE);
    // 20 pages: batches of 8, 8 and 4; the second batch's copies fail.
    let blocks: Vec<u64> = (0..20).map(|_| s.alloc(PAGE).unwrap()).collect();
    for (i, &b) in blocks.iter().enumerate() {
        dev.write(b, &pattern(i as u64, PAGE as usize));
    }
    dev.fail_mark(1);
    assert_eq!(s.evict(), Err(CUDA_ERROR_UNKNOWN));
    assert_eq!(s.totals().swapped, 8 * PAGE, "only the first batch left the device");
    assert_eq!(dev.physical(), 16 * PAGE, "the emptied chunk was given back, the other two kept");
    assert_eq!(s.restore().unwrap(), 8 * PAGE);
    assert_eq!(s.evict().unwrap(), 20 * PAGE, "a later swap-out moves everything");
    assert_eq!(dev.physical(), 0);
    s.restore().unwrap();
    for (i, &b) in blocks.iter().enumerate() {
        assert_eq!(dev.read(b, PAGE as usize), pattern(i as u64, PAGE as usize), "block {i}");
    }
}

#[test]
fn a_full_device_restores_what_fits_and_the_rest_later() {
    let dev = Shared(Arc::new(Fake::new(10 * PAGE)));
    let s = Space::new(dev.clone(), 64 * PAGE, 4).unwrap();
    let ptrs: Vec<u64> = (0..8).map(|_| s.alloc(PAGE).unwrap()).collect();
    for (i, &p) in ptrs.iter().enumerate() {
        dev.write(p, &pattern(i as u64, PAGE as usize));
    }
    s.evict().unwrap();
    // Someone else takes most of the device.
    let other = super::backend::Backend::create(&*dev, 6 * PAGE).unwrap();
    assert_eq!(s.restore(), Err(CUDA_ERROR_OUT_OF_MEMORY));
    assert!(s.has_swapped());
    super::backend::Backend::release(&*dev, other);
    s.restore().unwrap();
    for (i, &p) in ptrs.iter().enumerate() {
        assert_eq!(dev.read(p, PAGE as usize), pattern(i as u64, PAGE as usize), "page {i}");
    }
    drop(s);
    assert_eq!(dev.physical(), 0, "a dropped space leaks nothing");
    assert_eq!(dev.host_buffers(), 0);
}

#[test]
fn empty_slabs_give_their_pages_back() {
    let (s, dev) = space(64 * PAGE);
    let ptrs: Vec<u64> = (0..1000).map(|_| s.alloc(512).unwrap()).collect();
    assert_eq!(s.totals().resident, 8 * PAGE, "1000 blocks of 512 bytes in 8 slab pages");
    for p in ptrs {
        s.free(p).unwrap();
    }
    assert_eq!(s.retire_empty_slabs(), 8);
    assert_eq!(s.totals().resident, 0);
    assert!(dev.physical() <= 8 * PAGE);
    let again = s.alloc(512).unwrap();
    assert_eq!(s.range(again), Some((again, 512)));
}

#[test]
fn failed_allocations_give_back_all_their_address_space() {
    let dev = Shared(Arc::new(Fake::new(3 * PAGE)));
    let s = Space::new(dev.clone(), 256 * PAGE, 8).unwrap();
    // More attempts than the space has pages: a page lost per attempt would exhaust it.
    for _ in 0..300 {
        assert_eq!(s.alloc(5 * PAGE), Err(CUDA_ERROR_OUT_OF_MEMORY));
    }
    assert_eq!(s.free_pages(), 256);
    let p = s.alloc(3 * PAGE).expect("the address space is intact");
    dev.write(p, &pattern(1, 3 * PAGE as usize));
    assert_eq!(dev.read(p, 3 * PAGE as usize), pattern(1, 3 * PAGE as usize));
}
