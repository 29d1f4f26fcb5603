//! `libsimnvml.so`'s topology queries on a simulated machine of 4 devices, loaded as programs load NVML:
//! devices 0-1 and 2-3 share a PCIe switch, the pairs sit on NUMA nodes 0 and 1 (see
//! `simgpu::topology`); then, in a child copy of this binary, the levels of an 8-device machine. One test in
//! its own binary: NVML reads `SIMGPU_*` once per process.

use libloading::Library;
use std::ffi::{c_uint, c_ulong};
use std::path::PathBuf;
use std::ptr::null_mut;
use tessera_ffi::nvml::*;

fn library_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(|deps| deps.parent()).unwrap().join("libsimnvml.so");
    assert!(path.is_file(), "{} is missing; run `cargo build --release -p simnvml` first", path.display());
    path
}

type Ancestor = unsafe extern "C" fn(NvmlDevice, NvmlDevice, *mut u32) -> NvmlReturn;
type Nearest = unsafe extern "C" fn(NvmlDevice, u32, *mut c_uint, *mut NvmlDevice) -> NvmlReturn;
type GpuSet = unsafe extern "C" fn(c_uint, *mut c_uint, *mut NvmlDevice) -> NvmlReturn;
type P2p = unsafe extern "C" fn(NvmlDevice, NvmlDevice, u32, *mut u32) -> NvmlReturn;
type Uint = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
type Affinity = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_ulong) -> NvmlReturn;
type Scoped = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_ulong, u32) -> NvmlReturn;

fn cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

const EIGHT: &str = "SIMNVML_TOPOLOGY_EIGHT";

/// In the child: an 8-device machine has two pairs per node, so `NVML_TOPOLOGY_NODE` appears.
fn eight_devices(lib: &Library) {
    // SAFETY: symbols read with their nvml.h signatures, called with NVML handles and valid pointers.
    unsafe {
        let by_index = *lib
            .get::<unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn>(b"nvmlDeviceGetHandleByIndex_v2")
            .unwrap();
        let ancestor = *lib.get::<Ancestor>(b"nvmlDeviceGetTopologyCommonAncestor").unwrap();
        let numa = *lib.get::<Uint>(b"nvmlDeviceGetNumaNodeId").unwrap();
        let h = |i| {
            let mut h = null_mut();
            assert_eq!(by_index(i, &mut h), NVML_SUCCESS);
            h
        };
        let level = |a, b| {
            let mut l = 99;
            assert_eq!(ancestor(h(a), h(b), &mut l), NVML_SUCCESS);
            l
        };
        assert_eq!(level(0, 1), NVML_TOPOLOGY_SINGLE);
        assert_eq!(level(0, 3), NVML_TOPOLOGY_NODE);
        assert_eq!(level(5, 6), NVML_TOPOLOGY_NODE);
        assert_eq!(level(3, 4), NVML_TOPOLOGY_SYSTEM);
        let nodes: Vec<c_uint> = (0..8)
            .map(|i| {
                let mut n = 9;
                assert_eq!(numa(h(i), &mut n), NVML_SUCCESS);
                n
            })
            .collect();
        assert_eq!(nodes, [0, 0, 0, 0, 1, 1, 1, 1]);
    }
}

#[test]
fn four_device_topology() {
    if std::env::var_os(EIGHT).is_some() {
        // SAFETY: the simulated NVML; its initializers only set up Rust statics.
        let lib = unsafe { Library::new(library_path()) }.unwrap();
        // SAFETY: nvmlInit_v2 takes nothing.
        let init = unsafe { (*lib.get::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlInit_v2").unwrap())() };
        assert_eq!(init, NVML_SUCCESS);
        return eight_devices(&lib);
    }
    let state = std::env::temp_dir().join(format!("simnvml-topology-{}.state", std::process::id()));
    // SAFETY: the only test of this binary, run before anything reads the environment.
    unsafe {
        std::env::set_var("SIMGPU_DEVICES", "small,small,small,small");
        std::env::set_var("SIMGPU_STATE", &state);
    }
    // SAFETY: the simulated NVML; its initializers only set up Rust statics.
    let lib = unsafe { Library::new(library_path()) }.unwrap();
    // SAFETY: each symbol is read with its nvml.h signature and called with NVML handles and valid (or
    // deliberately NULL) pointers.
    unsafe {
        let init = *lib.get::<unsafe extern "C" fn() -> NvmlReturn>(b"nvmlInit_v2").unwrap();
        let by_index = *lib
            .get::<unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn>(b"nvmlDeviceGetHandleByIndex_v2")
            .unwrap();
        let ancestor = *lib.get::<Ancestor>(b"nvmlDeviceGetTopologyCommonAncestor").unwrap();
        let nearest = *lib.get::<Nearest>(b"nvmlDeviceGetTopologyNearestGpus").unwrap();
        let gpu_set = *lib.get::<GpuSet>(b"nvmlSystemGetTopologyGpuSet").unwrap();
        let p2p = *lib.get::<P2p>(b"nvmlDeviceGetP2PStatus").unwrap();
        let numa = *lib.get::<Uint>(b"nvmlDeviceGetNumaNodeId").unwrap();
        let cpu_affinity = *lib.get::<Affinity>(b"nvmlDeviceGetCpuAffinity").unwrap();
        let cpu_scoped = *lib.get::<Scoped>(b"nvmlDeviceGetCpuAffinityWithinScope").unwrap();
        let memory_affinity = *lib.get::<Scoped>(b"nvmlDeviceGetMemoryAffinity").unwrap();
        let nvlink = *lib
            .get::<unsafe extern "C" fn(NvmlDevice, c_uint, *mut u32) -> NvmlReturn>(b"nvmlDeviceGetNvLinkState")
            .unwrap();
        assert_eq!(init(), NVML_SUCCESS);
        let d: Vec<NvmlDevice> = (0..4)
            .map(|i| {
                let mut h = null_mut();
                assert_eq!(by_index(i, &mut h), NVML_SUCCESS);
                h
            })
            .collect();

        // The level matrix: INTERNAL on the diagonal, SINGLE within a pair, SYSTEM across the nodes.
        let (i, s, y) = (NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SINGLE, NVML_TOPOLOGY_SYSTEM);
        let want = [[i, s, y, y], [s, i, y, y], [y, y, i, s], [y, y, s, i]];
        for (a, row) in want.iter().enumerate() {
            for (b, &level) in row.iter().enumerate() {
                let mut got = 99;
                assert_eq!(ancestor(d[a], d[b], &mut got), NVML_SUCCESS);
                assert_eq!(got, level, "devices {a} and {b}");
            }
        }
        let mut got = 0;
        assert_eq!(ancestor(d[0], d[1], null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(ancestor(d[0], null_mut(), &mut got), NVML_ERROR_INVALID_ARGUMENT);

        // Nearest GPUs: the count first (count 0), then the handles; closer levels are included.
        let mut count = 0;
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_SINGLE, &mut count, null_mut()), NVML_SUCCESS);
        assert_eq!(count, 1);
        let mut found = [null_mut(); 4];
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_SINGLE, &mut count, found.as_mut_ptr()), NVML_SUCCESS);
        assert_eq!((count, found[0]), (1, d[1]));
        count = 0;
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_NODE, &mut count, null_mut()), NVML_SUCCESS);
        assert_eq!(count, 1, "no other switch on node 0");
        count = 4;
        assert_eq!(nearest(d[2], NVML_TOPOLOGY_SYSTEM, &mut count, found.as_mut_ptr()), NVML_SUCCESS);
        assert_eq!(&found[..count as usize], &[d[0], d[1], d[3]]);
        count = 0;
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_INTERNAL, &mut count, null_mut()), NVML_SUCCESS);
        assert_eq!(count, 0);
        assert_eq!(nearest(d[0], 15, &mut count, null_mut()), NVML_ERROR_INVALID_ARGUMENT, "no such level");
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_SINGLE, null_mut(), null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        count = 2;
        assert_eq!(nearest(d[0], NVML_TOPOLOGY_SINGLE, &mut count, null_mut()), NVML_ERROR_INVALID_ARGUMENT);

        // NUMA nodes, and affinity consistent with them.
        let nodes: Vec<c_uint> = d
            .iter()
            .map(|&h| {
                let mut n = 9;
                assert_eq!(numa(h, &mut n), NVML_SUCCESS);
                n
            })
            .collect();
        assert_eq!(nodes, [0, 0, 1, 1]);
        let host = cpus();
        let node_cpus = |node: usize| -> Vec<usize> {
            if host < 2 { (0..host).collect() } else { (node * host / 2..(node + 1) * host / 2).collect() }
        };
        for (o, &h) in d.iter().enumerate() {
            let mut mask: [c_ulong; 4] = [!0; 4];
            assert_eq!(cpu_affinity(h, 4, mask.as_mut_ptr()), NVML_SUCCESS);
            let set: Vec<usize> = (0..256).filter(|c| mask[c / 64] & (1 << (c % 64)) != 0).collect();
            assert_eq!(set, node_cpus(nodes[o] as usize), "device {o}");
            let mut scoped: [c_ulong; 4] = [0; 4];
            assert_eq!(cpu_scoped(h, 4, scoped.as_mut_ptr(), NVML_AFFINITY_SCOPE_SOCKET), NVML_SUCCESS);
            assert_eq!(scoped, mask);
            let mut node_mask: c_ulong = 0;
            assert_eq!(memory_affinity(h, 1, &mut node_mask, NVML_AFFINITY_SCOPE_NODE), NVML_SUCCESS);
            assert_eq!(node_mask, 1 << nodes[o]);
            // The GPU set of the node's first CPU holds this device.
            let cpu = node_cpus(nodes[o] as usize)[0] as c_uint;
            count = 4;
            assert_eq!(gpu_set(cpu, &mut count, found.as_mut_ptr()), NVML_SUCCESS);
            assert!(found[..count as usize].contains(&h), "cpu {cpu} and device {o}");
        }
        let mut mask: c_ulong = 0;
        assert_eq!(cpu_affinity(d[0], 0, &mut mask), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(cpu_affinity(d[0], 1, null_mut()), NVML_ERROR_INVALID_ARGUMENT);
        assert_eq!(cpu_scoped(d[0], 1, &mut mask, 2), NVML_ERROR_INVALID_ARGUMENT, "no such scope");
        count = 0;
        assert_eq!(gpu_set(host as c_uint, &mut count, null_mut()), NVML_ERROR_INVALID_ARGUMENT, "no such CPU");
        if host >= 2 {
            count = 0;
            assert_eq!(gpu_set(0, &mut count, null_mut()), NVML_SUCCESS);
            assert_eq!(count, 2, "CPU 0 is node 0's: devices 0 and 1");
        }

        // Peer to peer over PCIe within a node; never over NVLink, which the simulated devices lack.
        let mut status = 99;
        assert_eq!(p2p(d[0], d[1], NVML_P2P_CAPS_INDEX_READ, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_P2P_STATUS_OK);
        assert_eq!(p2p(d[0], d[2], NVML_P2P_CAPS_INDEX_WRITE, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED);
        assert_eq!(p2p(d[0], d[1], NVML_P2P_CAPS_INDEX_NVLINK, &mut status), NVML_SUCCESS);
        assert_eq!(status, NVML_P2P_STATUS_NOT_SUPPORTED);
        assert_eq!(p2p(d[0], d[1], NVML_P2P_CAPS_INDEX_UNKNOWN, &mut status), NVML_ERROR_INVALID_ARGUMENT);
        let mut active = 0;
        assert_eq!(nvlink(d[0], 0, &mut active), NVML_ERROR_NOT_SUPPORTED);
    }
    let _ = std::fs::remove_file(&state);
    let _ = std::fs::remove_file(state.with_extension("state.mig"));

    let eight = std::env::temp_dir().join(format!("simnvml-topology-8-{}.state", std::process::id()));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["four_device_topology", "--exact", "--nocapture", "--test-threads=1"])
        .env(EIGHT, "1")
        .env("SIMGPU_DEVICES", "small,small,small,small,small,small,small,small")
        .env("SIMGPU_STATE", &eight)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&eight);
    let _ = std::fs::remove_file(eight.with_extension("state.mig"));
    assert!(
        out.status.success(),
        "8-device machine\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child ran the 8-device checks");
}
