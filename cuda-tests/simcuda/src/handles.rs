//! Opaque handles: every CUDA object is handed out as a number that looks up an `Arc` in a registry, so a
//! stale or forged handle is an error code rather than a dangling pointer.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_ffi::cuda::CuResult;

/// Objects of one kind, keyed by handle value.
pub struct Registry<T> {
    items: Mutex<HashMap<u64, Arc<T>>>,
    next: AtomicU64,
    tag: u64,
    invalid: CuResult,
}

impl<T> Registry<T> {
    /// A registry whose handles carry `tag` in their high bits and whose lookups fail with `invalid`.
    pub fn new(tag: u16, invalid: CuResult) -> Self {
        Registry { items: Mutex::new(HashMap::new()), next: AtomicU64::new(1), tag: (tag as u64) << 40, invalid }
    }

    /// Registers `item`, returning its handle value (never 0, 1 or 2, which CUDA reserves for streams).
    pub fn insert(&self, item: Arc<T>) -> u64 {
        self.insert_with(|_| item)
    }

    /// Registers the object `make` builds from the handle it will have.
    pub fn insert_with(&self, make: impl FnOnce(u64) -> Arc<T>) -> u64 {
        let h = self.tag | (self.next.fetch_add(1, Ordering::Relaxed) << 4);
        self.items.lock().insert(h, make(h));
        h
    }

    /// The object behind `handle`.
    pub fn get(&self, handle: u64) -> Result<Arc<T>, CuResult> {
        self.items.lock().get(&handle).cloned().ok_or(self.invalid)
    }

    /// Unregisters `handle`, returning its object.
    pub fn remove(&self, handle: u64) -> Result<Arc<T>, CuResult> {
        self.items.lock().remove(&handle).ok_or(self.invalid)
    }

    /// Every registered object with its handle.
    pub fn all(&self) -> Vec<(u64, Arc<T>)> {
        self.items.lock().iter().map(|(h, v)| (*h, v.clone())).collect()
    }
}

impl<T> Registry<T> {
    /// Registers `item` again under a handle it had before (for `cuMemRetainAllocationHandle`).
    pub fn reinsert(&self, handle: u64, item: Arc<T>) {
        self.items.lock().insert(handle, item);
    }
}
