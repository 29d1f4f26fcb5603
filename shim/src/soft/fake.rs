//! An in-memory device for testing soft spaces: physical memory is host vectors, mappings a table, and
//! copies go through that table, so a wrong remapping shows up as wrong data.

use super::backend::Backend;
use crate::guard::Res;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tessera_ffi::cuda::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN};

/// Page size of the fake device.
pub const PAGE: u64 = 64 << 10;

#[derive(Default)]
struct State {
    next_va: u64,
    next_handle: u64,
    phys: HashMap<u64, Vec<u8>>,
    /// Mapped page → (handle, offset).
    maps: BTreeMap<u64, (u64, u64)>,
    hosts: usize,
    /// Marks handed out.
    marks: u64,
    /// The mark whose wait fails, if any.
    failing_mark: Option<u64>,
}

/// The fake device, with a capacity.
pub struct Fake {
    capacity: u64,
    state: Mutex<State>,
}

impl Fake {
    /// A device of `capacity` bytes.
    pub fn new(capacity: u64) -> Fake {
        Fake { capacity, state: Mutex::new(State { next_va: 1 << 40, ..State::default() }) }
    }

    /// Makes the wait for mark number `n` (from 0, counting every mark handed out) fail, as a copy
    /// that failed on the device would.
    pub fn fail_mark(&self, n: u64) {
        self.state.lock().unwrap().failing_mark = Some(n);
    }

    /// Physical bytes created and not released.
    pub fn physical(&self) -> u64 {
        self.state.lock().unwrap().phys.values().map(|v| v.len() as u64).sum()
    }

    /// Host buffers not freed.
    pub fn host_buffers(&self) -> usize {
        self.state.lock().unwrap().hosts
    }

    /// Writes `data` at device address `va`.
    pub fn write(&self, va: u64, data: &[u8]) {
        self.to_device(va, data.as_ptr(), data.len() as u64).unwrap();
    }

    /// Reads `len` bytes at device address `va`.
    pub fn read(&self, va: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.to_host(v.as_mut_ptr(), va, len as u64).unwrap();
        v
    }

    /// Calls `f` on each mapped piece of `[va, va + len)` with (handle, offset in it, bytes, offset in range).
    fn walk(&self, va: u64, len: u64, mut f: impl FnMut(&mut Vec<u8>, usize, usize, usize)) -> Res {
        let mut s = self.state.lock().unwrap();
        let mut done = 0u64;
        while done < len {
            let at = va + done;
            let page = at - at % PAGE;
            let (handle, offset) = *s.maps.get(&page).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let n = (PAGE - at % PAGE).min(len - done);
            let mem = s.phys.get_mut(&handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            f(mem, (offset + at % PAGE) as usize, n as usize, done as usize);
            done += n;
        }
        Ok(())
    }
}

impl Backend for Fake {
    fn granularity(&self) -> Res<u64> {
        Ok(PAGE)
    }

    fn reserve(&self, size: u64) -> Res<u64> {
        let mut s = self.state.lock().unwrap();
        let va = s.next_va;
        s.next_va += size.next_multiple_of(PAGE) + PAGE;
        Ok(va)
    }

    fn create(&self, size: u64) -> Res<u64> {
        if self.physical() + size > self.capacity {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let mut s = self.state.lock().unwrap();
        s.next_handle += 1;
        let h = s.next_handle;
        s.phys.insert(h, vec![0xee; size as usize]);
        Ok(h)
    }

    fn release(&self, handle: u64) {
        let mut s = self.state.lock().unwrap();
        assert!(!s.maps.values().any(|(h, _)| *h == handle), "released while mapped");
        s.phys.remove(&handle).expect("released twice");
    }

    fn map(&self, va: u64, size: u64, handle: u64, offset: u64) -> Res {
        let mut s = self.state.lock().unwrap();
        assert!(s.phys.get(&handle).is_some_and(|m| offset + size <= m.len() as u64));
        for k in 0..size / PAGE {
            let prev = s.maps.insert(va + k * PAGE, (handle, offset + k * PAGE));
            assert!(prev.is_none(), "mapped over a mapping");
        }
        Ok(())
    }

    fn unmap(&self, va: u64, size: u64) {
        let mut s = self.state.lock().unwrap();
        for k in 0..size / PAGE {
            s.maps.remove(&(va + k * PAGE)).expect("unmapped a hole");
        }
    }

    fn to_host(&self, dst: *mut u8, src: u64, len: u64) -> Res {
        self.walk(src, len, |mem, at, n, done| {
            // SAFETY: the caller's buffer holds `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(mem[at..at + n].as_ptr(), dst.add(done), n) }
        })
    }

    fn to_device(&self, dst: u64, src: *const u8, len: u64) -> Res {
        self.walk(dst, len, |mem, at, n, done| {
            // SAFETY: the caller's buffer holds `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.add(done), mem[at..at + n].as_mut_ptr(), n) }
        })
    }

    fn within_device(&self, dst: u64, src: u64, len: u64) -> Res {
        let mut tmp = vec![0u8; len as usize];
        self.to_host(tmp.as_mut_ptr(), src, len)?;
        self.to_device(dst, tmp.as_ptr(), len)
    }

    fn synchronize(&self) -> Res {
        Ok(())
    }

    fn mark(&self) -> Res<u64> {
        let mut st = self.state.lock().unwrap();
        st.marks += 1;
        Ok(st.marks - 1)
    }

    fn wait(&self, mark: u64) -> Res {
        if self.state.lock().unwrap().failing_mark == Some(mark) { Err(CUDA_ERROR_UNKNOWN) } else { Ok(()) }
    }

    fn host_alloc(&self, len: u64) -> Option<*mut u8> {
        self.state.lock().unwrap().hosts += 1;
        Some(Box::leak(vec![0u8; len as usize].into_boxed_slice()).as_mut_ptr())
    }

    fn host_free(&self, p: *mut u8, len: u64) {
        self.state.lock().unwrap().hosts -= 1;
        // SAFETY: `p` came from `host_alloc(len)`, a leaked boxed slice of that length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len as usize)) });
    }
}
