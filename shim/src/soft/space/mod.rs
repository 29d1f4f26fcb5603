//! One device's soft address space in one process: a reservation cut into pages of the device's
//! granularity, a page table saying for every page what it serves (nothing, a slab of small blocks, part
//! of a large allocation) and where its data is (nowhere yet, a slot of a physical chunk, host memory),
//! and the chunks themselves, which hold [`Space::chunk_pages`] pages each.
//!
//! Freed pages leave their slot to the chunk, and chunks with free slots are filled, densest first,
//! before a new chunk is created; a chunk with no page left stays pooled (up to [`POOL_KEEP`] of them)
//! for the next allocation. Everything but the slab fast path ([`super::slab`]) runs under the space's
//! lock. Moving data ([`Space::compact`], [`Space::evict`]) must run between kernels: the caller stops
//! the program's launches and copies and waits for the device first.

use super::backend::Backend;
use super::slab::{MAX_CLASSES, Slab, block_size, class_of};
use crate::guard::Res;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicPtr, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};

mod moving;

/// Empty chunks kept for reuse; more are given back to the device at once.
pub const POOL_KEEP: usize = 2;

/// What a page serves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Use {
    Free,
    Slab,
    Large,
}

/// Where a page's data is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    /// Not backed (a free page).
    Nowhere,
    /// Slot `slot` of chunk `chunk`.
    Device { chunk: usize, slot: usize },
    /// Host buffer `buf`, at `offset`.
    Host { buf: usize, offset: u64 },
}

#[derive(Clone, Copy)]
struct Page {
    use_: Use,
    place: Place,
}

/// A physical chunk: `owner[slot]` is the page in each slot.
struct Chunk {
    handle: u64,
    owner: Vec<Option<usize>>,
}

impl Chunk {
    fn used(&self) -> usize {
        self.owner.iter().filter(|o| o.is_some()).count()
    }

    fn free_slot(&self) -> Option<usize> {
        self.owner.iter().position(Option::is_none)
    }
}

/// Host memory holding swapped-out pages (`pages` of them still).
struct HostBuf {
    ptr: usize,
    len: u64,
    pages: usize,
}

/// Host memory kept for the next swap-out once its pages are back: copying into memory already touched
/// runs at the copy engine's speed, first-touching a new buffer at a fraction of it.
#[derive(Clone, Copy)]
struct Spare {
    ptr: usize,
    len: u64,
}

/// A large allocation: whole pages from its head page.
#[derive(Clone, Copy)]
struct Large {
    size: u64,
    pages: usize,
}

/// Byte counts of a space (see `tessera_region::SoftStats`).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Totals {
    /// Device memory holding live pages.
    pub resident: u64,
    /// Device memory held in free slots.
    pub pooled: u64,
    /// The part of `pooled` in chunks that also hold live pages.
    pub fragmented: u64,
    /// Live pages in host memory.
    pub swapped: u64,
}

struct Inner {
    table: Vec<Page>,
    /// Free runs of pages: first page → length.
    runs: BTreeMap<usize, usize>,
    large: BTreeMap<usize, Large>,
    chunks: Vec<Option<Chunk>>,
    hosts: Vec<Option<HostBuf>>,
    spare: Option<Spare>,
    /// Active slabs of each class.
    slabs: Vec<Vec<&'static Slab>>,
    /// Retired slabs of each class, for reuse (slab records are never freed: lock-free readers may still
    /// hold one).
    spare_slabs: Vec<Vec<&'static Slab>>,
}

/// One device's soft address space.
pub struct Space<B: Backend> {
    backend: B,
    base: u64,
    page: u64,
    pages: usize,
    chunk_pages: usize,
    /// The slab serving each page, for lock-free frees.
    slab_of: Box<[AtomicPtr<Slab>]>,
    /// The slab each class takes blocks from first.
    current: [AtomicPtr<Slab>; MAX_CLASSES],
    inner: Mutex<Inner>,
}

/// What `compact` did.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// Pages whose data moved.
    pub moved: usize,
    /// Device memory given back.
    pub released: u64,
}

impl<B: Backend> Space<B> {
    /// Reserves `bytes` of address space (rounded to pages, plus one scratch page) on `backend`, with
    /// chunks of `chunk_pages` pages (at most 64).
    pub fn new(backend: B, bytes: u64, chunk_pages: usize) -> Res<Space<B>> {
        let page = backend.granularity()?;
        let pages = bytes.div_ceil(page) as usize;
        let base = backend.reserve((pages as u64 + 1) * page)?;
        let inner = Inner {
            table: vec![Page { use_: Use::Free, place: Place::Nowhere }; pages],
            runs: BTreeMap::from([(0, pages)]),
            large: BTreeMap::new(),
            chunks: Vec::new(),
            hosts: Vec::new(),
            spare: None,
            slabs: vec![Vec::new(); MAX_CLASSES],
            spare_slabs: vec![Vec::new(); MAX_CLASSES],
        };
        Ok(Space {
            backend,
            base,
            page,
            pages,
            chunk_pages: chunk_pages.clamp(1, 64),
            slab_of: (0..pages).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            current: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            inner: Mutex::new(inner),
        })
    }

    /// Page size.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    /// Bytes of one physical chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_pages as u64 * self.page
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Whether `va` lies in this space.
    pub fn contains(&self, va: u64) -> bool {
        va >= self.base && va < self.base + self.pages as u64 * self.page
    }

    fn va(&self, page: usize) -> u64 {
        self.base + page as u64 * self.page
    }

    fn scratch(&self) -> u64 {
        self.va(self.pages)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `size` bytes (not 0); the address.
    pub fn alloc(&self, size: u64) -> Res<u64> {
        match class_of(size, self.page) {
            Some(class) => self.fast_small(class, size).map_or_else(|| self.slow_small(class, size), Ok),
            None => self.alloc_large(size),
        }
    }

    fn block_va(&self, slab: &Slab, index: usize) -> u64 {
        self.va(slab.page()) + index as u64 * block_size(slab.class())
    }

    /// The lock-free path: a block of the class's current slab.
    fn fast_small(&self, class: usize, size: u64) -> Option<u64> {
        // SAFETY: slab records are leaked, never freed, so any pointer ever published stays valid.
        let slab = unsafe { self.current[class].load(SeqCst).as_ref() }?;
        let index = slab.take(size)?;
        Some(self.block_va(slab, index))
    }

    fn slow_small(&self, class: usize, size: u64) -> Res<u64> {
        let mut inner = self.lock();
        for &slab in &inner.slabs[class] {
            if let Some(index) = slab.take(size) {
                self.current[class].store(slab as *const Slab as *mut Slab, SeqCst);
                return Ok(self.block_va(slab, index));
            }
        }
        let page = self.new_pages(&mut inner, 1, Use::Slab)?;
        let slab: &'static Slab =
            inner.spare_slabs[class].pop().unwrap_or_else(|| Box::leak(Box::new(Slab::new(class, self.page))));
        slab.activate(page);
        self.slab_of[page].store(slab as *const Slab as *mut Slab, SeqCst);
        inner.slabs[class].push(slab);
        self.current[class].store(slab as *const Slab as *mut Slab, SeqCst);
        let index = slab.take(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        Ok(self.block_va(slab, index))
    }

    fn alloc_large(&self, size: u64) -> Res<u64> {
        let n = usize::try_from(size.div_ceil(self.page)).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        let mut inner = self.lock();
        let head = self.new_pages(&mut inner, n, Use::Large)?;
        inner.large.insert(head, Large { size, pages: n });
        Ok(self.va(head))
    }

    /// Takes `n` contiguous free pages and backs them; the first page's index.
    fn new_pages(&self, inner: &mut Inner, n: usize, use_: Use) -> Res<usize> {
        let (&start, &len) = inner.runs.iter().find(|(_, l)| **l >= n).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        inner.runs.remove(&start);
        if len > n {
            inner.runs.insert(start + n, len - n);
        }
        for i in 0..n {
            inner.table[start + i].use_ = use_;
            if let Err(e) = self.back(inner, start + i) {
                // Every page of the run goes back, backed or not yet.
                for j in 0..n {
                    self.drop_page(inner, start + j);
                }
                return Err(e);
            }
        }
        Ok(start)
    }

    /// A free slot: in the densest chunk that has one, else in a new chunk.
    fn take_slot(&self, inner: &mut Inner) -> Res<(usize, usize)> {
        let best = inner
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().and_then(|c| c.free_slot().map(|s| (c.used(), i, s))))
            .max_by_key(|&(used, i, _)| (used, usize::MAX - i));
        if let Some((_, chunk, slot)) = best {
            return Ok((chunk, slot));
        }
        // A whole chunk, or at least one page when the device is nearly full.
        let (handle, slots) = match self.backend.create(self.chunk_pages as u64 * self.page) {
            Ok(h) => (h, self.chunk_pages),
            Err(e) if self.chunk_pages > 1 && e == CUDA_ERROR_OUT_OF_MEMORY => (self.backend.create(self.page)?, 1),
            Err(e) => return Err(e),
        };
        let chunk = Chunk { handle, owner: vec![None; slots] };
        let id = match inner.chunks.iter().position(Option::is_none) {
            Some(i) => {
                inner.chunks[i] = Some(chunk);
                i
            }
            None => {
                inner.chunks.push(Some(chunk));
                inner.chunks.len() - 1
            }
        };
        Ok((id, 0))
    }

    /// Backs page `page` with a slot and maps it.
    fn back(&self, inner: &mut Inner, page: usize) -> Res {
        let (chunk, slot) = self.take_slot(inner)?;
        let handle = inner.chunks[chunk].as_ref().map_or(0, |c| c.handle);
        if let Err(e) = self.backend.map(self.va(page), self.page, handle, slot as u64 * self.page) {
            self.trim(inner, POOL_KEEP);
            return Err(e);
        }
        if let Some(c) = inner.chunks[chunk].as_mut() {
            c.owner[slot] = Some(page);
        }
        inner.table[page].place = Place::Device { chunk, slot };
        Ok(())
    }

    /// Unmaps page `page` if it is on the device and frees its chunk slot; its place becomes nowhere.
    fn unmap_page(&self, inner: &mut Inner, page: usize) {
        if let Place::Device { chunk, slot } = inner.table[page].place {
            self.backend.unmap(self.va(page), self.page);
            if let Some(c) = inner.chunks[chunk].as_mut() {
                c.owner[slot] = None;
            }
            inner.table[page].place = Place::Nowhere;
        }
    }

    /// Unbacks page `page` (its data is lost) and returns it to the free runs.
    fn drop_page(&self, inner: &mut Inner, page: usize) {
        match inner.table[page].place {
            Place::Device { .. } => self.unmap_page(inner, page),
            Place::Host { buf, .. } => self.unref_host(inner, buf),
            Place::Nowhere => {}
        }
        inner.table[page] = Page { use_: Use::Free, place: Place::Nowhere };
        let mut start = page;
        let mut len = 1;
        if let Some((&s, &l)) = inner.runs.range(..page).next_back()
            && s + l == page
        {
            inner.runs.remove(&s);
            start = s;
            len += l;
        }
        if let Some(l) = inner.runs.remove(&(page + 1)) {
            len += l;
        }
        inner.runs.insert(start, len);
        self.trim(inner, POOL_KEEP);
    }

    fn unref_host(&self, inner: &mut Inner, buf: usize) {
        let done = inner.hosts[buf].as_mut().is_some_and(|h| {
            h.pages -= 1;
            h.pages == 0
        });
        if done && let Some(h) = inner.hosts[buf].take() {
            self.keep_spare(inner, Spare { ptr: h.ptr, len: h.len });
        }
    }

    /// Keeps the larger of `spare` and the current spare buffer, freeing the other.
    fn keep_spare(&self, inner: &mut Inner, spare: Spare) {
        let (keep, free) = match inner.spare {
            Some(old) if old.len >= spare.len => (old, Some(spare)),
            old => (spare, old),
        };
        inner.spare = Some(keep);
        if let Some(f) = free {
            self.backend.host_free(f.ptr as *mut u8, f.len);
        }
    }

    /// Gives empty chunks back to the device, keeping `keep` of them.
    fn trim(&self, inner: &mut Inner, keep: usize) -> u64 {
        let mut kept = 0;
        let mut released = 0;
        for c in inner.chunks.iter_mut() {
            if c.as_ref().is_some_and(|c| c.used() == 0) {
                if kept < keep {
                    kept += 1;
                } else if let Some(c) = c.take() {
                    released += c.owner.len() as u64 * self.page;
                    self.backend.release(c.handle);
                }
            }
        }
        released
    }

    /// Frees the allocation at `va`; the size it was made with. `Err(INVALID_VALUE)` for an address no
    /// allocation starts at.
    pub fn free(&self, va: u64) -> Res<u64> {
        if !self.contains(va) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let page = ((va - self.base) / self.page) as usize;
        // SAFETY: slab records are never freed.
        if let Some(slab) = unsafe { self.slab_of[page].load(SeqCst).as_ref() } {
            let block = block_size(slab.class());
            let offset = va - self.va(page);
            let index = (offset / block) as usize;
            if !offset.is_multiple_of(block) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            let size = slab.size_of(index).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            return if slab.give_back(index) { Ok(size) } else { Err(CUDA_ERROR_INVALID_VALUE) };
        }
        let mut inner = self.lock();
        if va != self.va(page) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let large = inner.large.remove(&page).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        for p in page..page + large.pages {
            self.drop_page(&mut inner, p);
        }
        Ok(large.size)
    }

    /// The allocation containing `va`: its start and size.
    pub fn range(&self, va: u64) -> Option<(u64, u64)> {
        if !self.contains(va) {
            return None;
        }
        let page = ((va - self.base) / self.page) as usize;
        // SAFETY: slab records are never freed.
        if let Some(slab) = unsafe { self.slab_of[page].load(SeqCst).as_ref() } {
            let block = block_size(slab.class());
            let index = ((va - self.va(page)) / block) as usize;
            let size = slab.size_of(index)?;
            let start = self.va(page) + index as u64 * block;
            return (va < start + size.max(1)).then_some((start, size));
        }
        let inner = self.lock();
        let (&head, large) = inner.large.range(..=page).next_back()?;
        let start = self.va(head);
        (va < start + large.size).then_some((start, large.size))
    }

    /// Retires slabs with no block taken, giving their pages back; how many.
    pub fn retire_empty_slabs(&self) -> usize {
        let mut inner = self.lock();
        let mut retired = 0;
        for class in 0..MAX_CLASSES {
            let mut i = 0;
            while i < inner.slabs[class].len() {
                let slab = inner.slabs[class][i];
                let page = slab.page();
                if slab.retire_if_empty() {
                    let ptr = slab as *const Slab as *mut Slab;
                    let _ = self.current[class].compare_exchange(ptr, std::ptr::null_mut(), SeqCst, SeqCst);
                    self.slab_of[page].store(std::ptr::null_mut(), SeqCst);
                    inner.slabs[class].swap_remove(i);
                    inner.spare_slabs[class].push(slab);
                    self.drop_page(&mut inner, page);
                    retired += 1;
                } else {
                    i += 1;
                }
            }
        }
        retired
    }

    /// Byte counts.
    pub fn totals(&self) -> Totals {
        let inner = self.lock();
        let mut t = Totals::default();
        for c in inner.chunks.iter().flatten() {
            let used = c.used() as u64 * self.page;
            let free = (c.owner.len() as u64) * self.page - used;
            t.resident += used;
            t.pooled += free;
            if used > 0 {
                t.fragmented += free;
            }
        }
        t.swapped = inner.hosts.iter().flatten().map(|h| h.pages as u64).sum::<u64>() * self.page;
        t
    }

    /// Pages of address space not in use.
    #[cfg(test)]
    pub fn free_pages(&self) -> usize {
        self.lock().runs.values().sum()
    }

    /// Whether any page is in host memory.
    pub fn has_swapped(&self) -> bool {
        self.lock().hosts.iter().flatten().any(|h| h.pages > 0)
    }
}

impl<B: Backend> Drop for Space<B> {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for (page, p) in inner.table.iter().enumerate() {
            if let Place::Device { .. } = p.place {
                self.backend.unmap(self.base + page as u64 * self.page, self.page);
            }
        }
        for c in inner.chunks.iter().flatten() {
            self.backend.release(c.handle);
        }
        for (ptr, len) in
            inner.hosts.iter().flatten().map(|h| (h.ptr, h.len)).chain(inner.spare.map(|s| (s.ptr, s.len)))
        {
            self.backend.host_free(ptr as *mut u8, len);
        }
    }
}
