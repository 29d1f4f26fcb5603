//! Moving a space's data between kernels: compaction (live pages out of the sparsest chunks into the
//! free slots of denser ones, empty chunks given back) and swapping every page to host memory and back.

use super::{Compacted, HostBuf, Inner, Place, Space, Spare};
use crate::guard::Res;
use crate::soft::backend::Backend;
use tessera_ffi::cuda::CUDA_ERROR_OUT_OF_MEMORY;

/// Pages a swap-out copies between two marks: the device copies one batch while the pager unmaps the
/// batch before it.
const EVICT_BATCH: usize = 8;

impl<B: Backend> Space<B> {
    /// Device memory [`Space::compact`] would give back now (without moving anything): the chunks it
    /// could empty, sparsest first, into the free slots of the others, and the empty chunks.
    pub fn compactable(&self) -> u64 {
        let inner = self.lock();
        let mut chunks: Vec<(usize, usize)> =
            inner.chunks.iter().flatten().map(|c| (c.used(), c.owner.len())).collect();
        chunks.sort_unstable();
        let mut room: usize = chunks.iter().map(|&(u, n)| n - u).sum();
        let mut released = 0;
        for &(_, slots) in &chunks {
            // Emptying it takes `used` free slots of the others, and its own `slots - used` go with it.
            if room < slots {
                break;
            }
            room -= slots;
            released += slots as u64 * self.page;
        }
        released
    }

    /// Moves live pages out of the sparsest chunks into the free slots of denser ones, and gives every
    /// chunk left empty back to the device. Every address stays valid: a page's data is copied to its new
    /// slot through a scratch mapping, then the page is remapped onto that slot. Run between kernels.
    pub fn compact(&self) -> Res<Compacted> {
        self.retire_empty_slabs();
        let mut inner = self.lock();
        let mut done = Compacted { moved: 0, released: self.trim(&mut inner, 0) };
        loop {
            let mut live: Vec<(usize, usize)> =
                inner.chunks.iter().enumerate().filter_map(|(i, c)| c.as_ref().map(|c| (c.used(), i))).collect();
            live.sort_unstable();
            let Some(&(used, source)) = live.first() else { break };
            let room: usize =
                live[1..].iter().map(|&(u, i)| inner.chunks[i].as_ref().map_or(0, |c| c.owner.len() - u)).sum();
            if used == 0 || room < used {
                break;
            }
            let pages: Vec<usize> =
                inner.chunks[source].as_ref().map_or(vec![], |c| c.owner.iter().flatten().copied().collect());
            for page in pages {
                let target = live[1..]
                    .iter()
                    .rev()
                    .find_map(|&(_, i)| inner.chunks[i].as_ref().and_then(|c| c.free_slot()).map(|s| (i, s)));
                let Some((chunk, slot)) = target else { break };
                self.move_page(&mut inner, page, chunk, slot)?;
                done.moved += 1;
            }
            done.released += self.trim(&mut inner, 0);
        }
        Ok(done)
    }

    /// Copies page `page`'s data into `slot` of `chunk` and remaps the page there.
    fn move_page(&self, inner: &mut Inner, page: usize, chunk: usize, slot: usize) -> Res {
        let Place::Device { chunk: from_chunk, slot: from_slot } = inner.table[page].place else {
            return Ok(());
        };
        let handle = inner.chunks[chunk].as_ref().map_or(0, |c| c.handle);
        let (va, scratch, offset) = (self.va(page), self.scratch(), slot as u64 * self.page);
        self.backend.map(scratch, self.page, handle, offset)?;
        let copied = self.backend.within_device(scratch, va, self.page);
        self.backend.unmap(scratch, self.page);
        copied?;
        self.backend.unmap(va, self.page);
        if let Err(e) = self.backend.map(va, self.page, handle, offset) {
            // Put the page back where its data still is.
            let old = inner.chunks[from_chunk].as_ref().map_or(0, |c| c.handle);
            self.backend.map(va, self.page, old, from_slot as u64 * self.page)?;
            return Err(e);
        }
        if let Some(c) = inner.chunks[from_chunk].as_mut() {
            c.owner[from_slot] = None;
        }
        if let Some(c) = inner.chunks[chunk].as_mut() {
            c.owner[slot] = Some(page);
        }
        inner.table[page].place = Place::Device { chunk, slot };
        Ok(())
    }

    /// Copies every resident page to host memory and gives all device memory back; the bytes copied.
    /// Run between kernels. On a failure, the pages not moved before it stay resident, untouched.
    pub fn evict(&self) -> Res<u64> {
        self.retire_empty_slabs();
        let mut inner = self.lock();
        let resident: Vec<usize> =
            (0..self.pages).filter(|&p| matches!(inner.table[p].place, Place::Device { .. })).collect();
        if resident.is_empty() {
            self.trim(&mut inner, 0);
            return Ok(0);
        }
        let needed = resident.len() as u64 * self.page;
        let (ptr, len) = match inner.spare.take() {
            Some(s) if s.len >= needed => (s.ptr as *mut u8, s.len),
            other => {
                // Too small: freed before a larger one is taken.
                if let Some(s) = other {
                    self.backend.host_free(s.ptr as *mut u8, s.len);
                }
                (self.backend.host_alloc(needed).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?, needed)
            }
        };
        let buf = match inner.hosts.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                inner.hosts.push(None);
                inner.hosts.len() - 1
            }
        };
        inner.hosts[buf] = Some(HostBuf { ptr: ptr as usize, len, pages: 0 });
        // Copies are queued in batches, each followed by a mark. A batch's pages are unmapped once its
        // mark is reached, while the device copies the next batches. From the first failure on, pages
        // stay resident, untouched.
        let batches: Vec<&[usize]> = resident.chunks(EVICT_BATCH).collect();
        let mut marks = Vec::with_capacity(batches.len());
        let mut result = Ok(());
        for (b, pages) in batches.iter().enumerate() {
            let queued = pages.iter().enumerate().try_for_each(|(i, &page)| {
                let at = (b * EVICT_BATCH + i) * self.page as usize;
                // SAFETY: `ptr` holds `len >= needed` bytes, and `at + page` is at most `needed`.
                self.backend.to_host(unsafe { ptr.add(at) }, self.va(page), self.page)
            });
            match queued.and_then(|()| self.backend.mark()) {
                Ok(m) => marks.push(m),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let mut moved = 0;
        for (b, mark) in marks.into_iter().enumerate() {
            // Every mark is waited for, also after a failure: each must be let go of.
            let reached = self.backend.wait(mark);
            if result.is_err() || reached.is_err() {
                result = result.and(reached);
                continue;
            }
            for (i, &page) in batches[b].iter().enumerate() {
                self.unmap_page(&mut inner, page);
                inner.table[page].place = Place::Host { buf, offset: ((b * EVICT_BATCH + i) as u64) * self.page };
            }
            moved += batches[b].len();
            self.trim(&mut inner, 0);
        }
        if result.is_err() {
            // Copies queued after the last mark may still be writing into the buffer.
            let _ = self.backend.synchronize();
        }
        if let Some(h) = inner.hosts[buf].as_mut() {
            h.pages = moved;
        }
        if moved == 0 {
            inner.hosts[buf] = None;
            self.keep_spare(&mut inner, Spare { ptr: ptr as usize, len });
        }
        self.trim(&mut inner, 0);
        result.map(|()| moved as u64 * self.page)
    }

    /// Brings swapped pages back to the device; the bytes copied. Stops at the first failure (typically
    /// out of memory), leaving the rest in host memory: call again once memory is free. The copies are
    /// queued, so the device copies one page while the next is being mapped; a page's host copy is let go
    /// only once every queued copy has completed.
    pub fn restore(&self) -> Res<u64> {
        let mut inner = self.lock();
        let mut queued = Vec::new();
        let mut result = Ok(());
        for page in 0..self.pages {
            let Place::Host { buf, offset } = inner.table[page].place else { continue };
            let ptr = inner.hosts[buf].as_ref().map_or(0, |h| h.ptr);
            inner.table[page].place = Place::Nowhere;
            let back = self.back(&mut inner, page).and_then(|()| {
                let src = (ptr + offset as usize) as *const u8;
                self.backend.to_device(self.va(page), src, self.page)
            });
            if let Err(e) = back {
                self.unmap_page(&mut inner, page);
                inner.table[page].place = Place::Host { buf, offset };
                result = Err(e);
                break;
            }
            queued.push((page, buf, offset));
        }
        if let Err(e) = self.backend.synchronize() {
            for &(page, buf, offset) in &queued {
                self.unmap_page(&mut inner, page);
                inner.table[page].place = Place::Host { buf, offset };
            }
            return Err(e);
        }
        for &(_, buf, _) in &queued {
            self.unref_host(&mut inner, buf);
        }
        result.map(|()| queued.len() as u64 * self.page)
    }
}
