//! `cuGetExportTable`: the private tables NVIDIA's CUDA runtime (`libcudart`, also linked statically
//! into CuPy and others) asks the driver for by UUID. They are undocumented; what each entry takes and
//! does here is what public projects that run the runtime on other drivers (ZLUDA's dark-API
//! definitions) record, implemented over this driver's own calls. An unknown id is
//! `CUDA_ERROR_INVALID_VALUE`, as the real driver answers it.
//!
//! Each table is an array of pointers; where its first entry is not a function it is the table's size in
//! bytes. Entries the runtime is not known to call are null, as in those projects.
//!
//! | id | table | entries served |
//! | --- | --- | --- |
//! | `6bd5fb6c-5bf4-e74a-8987-d93912fd9df9` | runtime interface | 1, 6, 8: a module from a fatbin (the runtime's `__cudaRegisterFatBinary`); 2: a device's primary context; 7: nothing; 12: loads the JIT compilers (nothing to load) |
//! | `42d85a81-23f6-cb47-8298-f6e78a3aecdc` | tools thread-local storage | 1-3: the thread's tool state, zeroed (cuBLASLt calls 2) |
//! | `a094798c-2e74-2e74-93f2-0800200c0a66` | tools callback hooks | 2, 6: buffers the runtime writes tool hooks into |
//! | `c693336e-1121-df11-a8c3-68f355d89593` | context-local storage | 0: put a value under a key in a context (with a destructor called when the context goes), 1: delete, 2: get |
//! | `0ca50b8c-1004-929a-89a7-d0df10e77286` | context creation | 1: `cuCtxCreate_v2` |
//! | `195bcbf4-d67d-024a-acc5-1d29cea631ae` | heap access | 1, 2: not supported |
//! | `b10541e1-f7c7-c74a-9f64-f223be99f1e2` | extended device attributes | 5: not supported; 13: 0 |
//! | `d4082055-bde6-704b-8d34-ba123c66e1f2` | integrity check | 1: the runtime's check that the driver is one it trusts: an HMAC-MD2 of the versions, process, thread, these tables and the devices |
//! | `263e8860-7cd2-6143-92f6-bbd5006dfa7e` | context checks | 2: no flags set; 3: 0 |
//! | `21318c60-9714-3248-8ca6-41ff7324c8f2` | context ids | 4: a context's 64-bit id (cuBLASLt's heuristics key what they learn per context by it) |
//!
//! The context-ids table is in no public record: what is written here was observed by running cuBLASLt
//! 12.9 (PyTorch's) over this driver: it asks for the table once, calls entry 4 with the pointer entry 2
//! of the tools table gave it and an out-pointer, keys a per-context cache by the 64-bit value written
//! there, and gives up on every matrix multiplication (`CUBLAS_STATUS_NOT_SUPPORTED`) when the table is
//! missing. Entry 4's shape is `cuCtxGetId`'s; simgpu answers with that id.

use crate::context::{current, resolve};
use crate::driver::driver;
use crate::guard::{CuRes, entry};
use hmac::{Hmac, Mac};
use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use tessera_ffi::cuda::*;
use tessera_ffi::sys::{CUcontext, CUdevice, CUmodule};

/// A table: pointers the runtime reads.
#[repr(transparent)]
struct Table<const N: usize>([*const c_void; N]);

// SAFETY: the tables are immutable arrays of function addresses and sizes.
unsafe impl<const N: usize> Sync for Table<N> {}

/// A table's first entry when it is its size.
const fn size<const N: usize>() -> *const c_void {
    (N * size_of::<usize>()) as *const c_void
}
const NULL: *const c_void = std::ptr::null();

/// A context-local value's destructor: `(context, key, value)`.
type Destructor = Option<unsafe extern "C" fn(CUcontext, *mut c_void, *mut c_void)>;

/// Context-local storage: `(context, key)` to `(value, destructor)`.
pub type Storage = HashMap<(u64, usize), (usize, Destructor)>;

static RUNTIME: Table<13> = Table([
    size::<13>(),
    module_from_fatbin as *const c_void,
    primary_context as *const c_void,
    NULL,
    NULL,
    NULL,
    module_from_fatbin_ext as *const c_void,
    nothing as *const c_void,
    module_from_fatbin_header as *const c_void,
    NULL,
    NULL,
    NULL,
    load_compilers as *const c_void,
]);
static TOOLS_TLS: Table<4> = Table([
    size::<4>(),
    no_tools_state as *const c_void,
    no_tools_state as *const c_void,
    no_tools_state as *const c_void,
]);
static TOOLS_HOOKS: Table<7> =
    Table([size::<7>(), NULL, hooks_buffer as *const c_void, NULL, NULL, NULL, hooks_buffer_small as *const c_void]);
static CONTEXT_STORAGE: Table<4> =
    Table([storage_put as *const c_void, storage_delete as *const c_void, storage_get as *const c_void, NULL]);
static CONTEXT_CREATE: Table<2> = Table([size::<2>(), crate::context::cuCtxCreate_v2 as *const c_void]);
static HEAP: Table<3> = Table([size::<3>(), not_supported_3 as *const c_void, not_supported_2 as *const c_void]);
static DEVICE_EXTENDED: Table<26> = {
    let mut t = [NULL; 26];
    t[0] = size::<26>();
    t[5] = not_supported_4 as *const c_void;
    t[13] = device_flag as *const c_void;
    Table(t)
};
static INTEGRITY: Table<3> = Table([size::<3>(), integrity_check as *const c_void, NULL]);
static CONTEXT_CHECKS: Table<4> = Table([size::<4>(), NULL, context_check as *const c_void, zero as *const c_void]);
static CONTEXT_IDS: Table<5> = Table([size::<5>(), NULL, NULL, NULL, context_id as *const c_void]);

/// The tables by id (the UUID's 16 bytes, as `CUuuid` holds them).
fn table(id: &[u8; 16]) -> Option<*const c_void> {
    let uuid = |s: &str| -> [u8; 16] {
        let hex: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
        std::array::from_fn(|i| u8::from_str_radix(std::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap(), 16).unwrap())
    };
    let tables: [(&str, *const c_void); 10] = [
        ("6bd5fb6c-5bf4-e74a-8987-d93912fd9df9", RUNTIME.0.as_ptr().cast()),
        ("42d85a81-23f6-cb47-8298-f6e78a3aecdc", TOOLS_TLS.0.as_ptr().cast()),
        ("a094798c-2e74-2e74-93f2-0800200c0a66", TOOLS_HOOKS.0.as_ptr().cast()),
        ("c693336e-1121-df11-a8c3-68f355d89593", CONTEXT_STORAGE.0.as_ptr().cast()),
        ("0ca50b8c-1004-929a-89a7-d0df10e77286", CONTEXT_CREATE.0.as_ptr().cast()),
        ("195bcbf4-d67d-024a-acc5-1d29cea631ae", HEAP.0.as_ptr().cast()),
        ("b10541e1-f7c7-c74a-9f64-f223be99f1e2", DEVICE_EXTENDED.0.as_ptr().cast()),
        ("d4082055-bde6-704b-8d34-ba123c66e1f2", INTEGRITY.0.as_ptr().cast()),
        ("263e8860-7cd2-6143-92f6-bbd5006dfa7e", CONTEXT_CHECKS.0.as_ptr().cast()),
        ("21318c60-9714-3248-8ca6-41ff7324c8f2", CONTEXT_IDS.0.as_ptr().cast()),
    ];
    tables.iter().find(|(u, _)| uuid(u) == *id).map(|&(_, t)| t)
}

/// `cuGetExportTable`.
#[unsafe(no_mangle)]
pub extern "C" fn cuGetExportTable(out: *mut *const c_void, id: *const [u8; 16]) -> CuResult {
    entry(|| {
        let id = crate::guard::input(id)?;
        let found = table(&id);
        if crate::guard::tracing() {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            eprintln!("simgpu: cuGetExportTable({hex}): {}", if found.is_some() { "served" } else { "unknown id" });
        }
        let found = found.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        crate::guard::out(out, found)
    })
}

fn status(r: CuRes) -> CuResult {
    match r {
        Ok(()) => CUDA_SUCCESS,
        Err(e) => e,
    }
}

/// Runtime interface, 1: the module of a registered fatbin (nvcc's wrapper).
unsafe extern "C" fn module_from_fatbin(module: *mut CUmodule, wrapper: *const c_void) -> CuResult {
    crate::module::cuModuleLoadData(module, wrapper)
}

/// Runtime interface, 6: as 1, with arguments the runtime passes empty.
unsafe extern "C" fn module_from_fatbin_ext(
    module: *mut CUmodule,
    wrapper: *const c_void,
    a: *mut c_void,
    b: *mut c_void,
    c: c_uint,
) -> CuResult {
    if !a.is_null() || !b.is_null() || c != 0 {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    crate::module::cuModuleLoadData(module, wrapper)
}

/// Runtime interface, 8: as 6, given the container rather than the wrapper, module second.
unsafe extern "C" fn module_from_fatbin_header(
    header: *const c_void,
    module: *mut CUmodule,
    a: *mut c_void,
    b: *mut c_void,
    c: c_uint,
) -> CuResult {
    // SAFETY: forwarded as the runtime passed them.
    unsafe { module_from_fatbin_ext(module, header, a, b, c) }
}

/// Tools thread-local storage, 1-3: called with one out-pointer by cuBLASLt (slot 2) before it reports
/// to profiling tools: the calling thread's tool state, zeroed (no tool attached). It fails the call
/// when told there is none, so each thread gets a zeroed block of its own, kept for the thread's life.
unsafe extern "C" fn no_tools_state(state: *mut *mut c_void) -> CuResult {
    thread_local! {
        static STATE: std::cell::Cell<*mut c_void> = const { std::cell::Cell::new(std::ptr::null_mut()) };
    }
    let block = STATE.with(|s| {
        if s.get().is_null() {
            s.set(Box::into_raw(Box::new([0u64; 512])).cast());
        }
        s.get()
    });
    status(crate::guard::out(state, block))
}

/// Runtime interface, 2: device `dev`'s primary context (retained).
unsafe extern "C" fn primary_context(ctx: *mut CUcontext, dev: CUdevice) -> CuResult {
    crate::context::cuDevicePrimaryCtxRetain(ctx, dev)
}

/// Runtime interface, 7: called with one argument; nothing to do.
unsafe extern "C" fn nothing(_: usize) {}

/// Runtime interface, 12: loads the PTX compiler and NVVM (nothing to load: PTX is read, not compiled).
unsafe extern "C" fn load_compilers() -> CuResult {
    CUDA_SUCCESS
}

/// Buffers the runtime's tool hooks are written into, and their sizes in 32-bit words.
static HOOKS: parking_lot::Mutex<([u32; 1024], [u32; 14])> = parking_lot::Mutex::new(([0; 1024], [0; 14]));

/// Tools callback hooks, 2: the large buffer and its size.
unsafe extern "C" fn hooks_buffer(ptr: *mut *mut c_void, size: *mut usize) {
    let mut hooks = HOOKS.lock();
    // SAFETY: the runtime passes two writable out-pointers; the buffer is static and never moves.
    unsafe {
        *ptr = hooks.0.as_mut_ptr().cast();
        *size = hooks.0.len();
    }
}

/// Tools callback hooks, 6: the small buffer and its size.
unsafe extern "C" fn hooks_buffer_small(ptr: *mut *mut c_void, size: *mut usize) {
    let mut hooks = HOOKS.lock();
    // SAFETY: as above.
    unsafe {
        *ptr = hooks.1.as_mut_ptr().cast();
        *size = hooks.1.len();
    }
}

/// The context `ctx` names, the current one for null.
fn context_of(ctx: CUcontext) -> CuRes<u64> {
    Ok(if ctx.is_null() { current()?.handle() } else { resolve(ctx)?.handle() })
}

/// Context-local storage, 0: stores `value` under `key` in `ctx`; `destructor` is called when the
/// context is destroyed or reset.
unsafe extern "C" fn storage_put(
    ctx: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    destructor: Destructor,
) -> CuResult {
    status((|| {
        let handle = context_of(ctx)?;
        driver()?.context_storage.lock().insert((handle, key as usize), (value as usize, destructor));
        Ok(())
    })())
}

/// Context-local storage, 1: removes `key` from `ctx`.
unsafe extern "C" fn storage_delete(ctx: CUcontext, key: *mut c_void) -> CuResult {
    status((|| {
        let handle = context_of(ctx)?;
        driver()?.context_storage.lock().remove(&(handle, key as usize));
        Ok(())
    })())
}

/// Context-local storage, 2: the value under `key` in `ctx`; `CUDA_ERROR_INVALID_HANDLE` when none.
unsafe extern "C" fn storage_get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CuResult {
    status((|| {
        let handle = context_of(ctx)?;
        let stored = driver()?.context_storage.lock().get(&(handle, key as usize)).map(|v| v.0);
        crate::guard::out(value, stored.ok_or(CUDA_ERROR_INVALID_HANDLE)? as *mut c_void)
    })())
}

/// Calls the destructors of context `ctx`'s stored values and forgets them (the context goes).
pub fn context_gone(ctx: u64) {
    let Ok(d) = driver() else { return };
    let mut gone = Vec::new();
    d.context_storage.lock().retain(|&(c, key), &mut (value, destructor)| {
        if c == ctx {
            gone.push((key, value, destructor));
        }
        c != ctx
    });
    for (key, value, destructor) in gone {
        if let Some(f) = destructor {
            // SAFETY: the runtime registered this destructor for this value; called once, as the driver does.
            unsafe { f(ctx as CUcontext, key as *mut c_void, value as *mut c_void) };
        }
    }
}

unsafe extern "C" fn not_supported_2(_: *const c_void, _: *mut usize) -> CuResult {
    CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn not_supported_3(_: *mut *const c_void, _: usize, _: usize) -> CuResult {
    CUDA_ERROR_NOT_SUPPORTED
}
unsafe extern "C" fn not_supported_4(_: CUdevice, _: c_uint, _: c_int, _: *mut [usize; 2]) -> CuResult {
    CUDA_ERROR_NOT_SUPPORTED
}

/// Extended device attributes, 13: a flag of the device, 0 on the GPUs it was observed on.
unsafe extern "C" fn device_flag(result: *mut u8, _dev: CUdevice) -> CuResult {
    status(crate::guard::out(result, 0u8))
}

/// Context checks, 2: no flag set.
unsafe extern "C" fn context_check(_ctx: CUcontext, flags: *mut u32, _other: *mut *const c_void) -> CuResult {
    status(crate::guard::out(flags, 0u32))
}

/// Context checks, 3.
unsafe extern "C" fn zero() -> u32 {
    0
}

/// Context ids, 4: the id of context `ctx` (as `cuCtxGetId` gives it); what cuBLASLt passes is the
/// pointer the tools table gave the thread, not a context, and stands for the current one.
unsafe extern "C" fn context_id(ctx: CUcontext, id: *mut u64) -> CuResult {
    status((|| {
        let ctx = match driver()?.contexts.get(ctx as u64) {
            Ok(ctx) => ctx,
            Err(_) => current()?,
        };
        crate::guard::out(id, ctx.handle())
    })())
}

/// The integrity check's key (16 bytes, MD2's block).
const INTEGRITY_KEY: [u8; 16] =
    [0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f];

/// Integrity check, 1: the runtime (of `version`, e.g. 12082) challenges the driver with the time; the
/// answer is an HMAC-MD2 of the driver's version, the runtime's, this process and thread, the addresses
/// of this table, of the runtime interface table and of this function, the time, then each device's UUID
/// and PCI domain, bus and device, which the runtime computes too. Runtimes whose version ends in 0 or 1
/// expect fixed answers.
unsafe extern "C" fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> CuResult {
    status((|| {
        let answer = match version % 10 {
            0 => [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            1 => [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
            _ => integrity_answer(version, unix_seconds)?,
        };
        crate::guard::out(result, answer)
    })())
}

fn integrity_answer(version: u32, unix_seconds: u64) -> CuRes<[u64; 2]> {
    let d = driver()?;
    let mut message = Vec::with_capacity(48 + 28 * d.visible.len());
    let driver_version = d.config.driver_version;
    // SAFETY: pthread_self has no preconditions.
    let thread = unsafe { libc::pthread_self() } as u32;
    for word in [driver_version, version, std::process::id(), thread] {
        message.extend_from_slice(&word.to_ne_bytes());
    }
    for address in [RUNTIME.0.as_ptr() as usize, INTEGRITY.0.as_ptr() as usize, INTEGRITY.0[1] as usize] {
        message.extend_from_slice(&address.to_ne_bytes());
    }
    message.extend_from_slice(&unix_seconds.to_ne_bytes());
    // As `cuDeviceGetUuid` and the PCI domain, bus and device attributes report each device.
    for device in &d.visible {
        message.extend_from_slice(&device.uuid());
        for v in [0, device.config.pci_bus() as i32, 0] {
            message.extend_from_slice(&v.to_ne_bytes());
        }
    }
    let mut mac = Hmac::<md2::Md2>::new_from_slice(&INTEGRITY_KEY).map_err(|_| CUDA_ERROR_UNKNOWN)?;
    mac.update(&message);
    let digest = mac.finalize().into_bytes();
    let word = |i: usize| u64::from_ne_bytes(digest[i..i + 8].try_into().expect("8 bytes"));
    Ok([word(0), word(8)])
}
