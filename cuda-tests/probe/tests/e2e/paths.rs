//! Interception on every path a program reaches the driver by, each proven by a real C process under the
//! shim on the simulated driver (programs in `cuda-tests/c/`, compiled against NVIDIA's `cuda.h`):
//!
//! - direct linking, in a normal and a per-thread-default-stream build;
//! - `dlopen` + `dlsym`/`dlvsym` on the driver's handle, `RTLD_DEFAULT` and `RTLD_NEXT`, with every other
//!   lookup (libc's, a preloaded malloc interposer's `RTLD_NEXT`) untouched;
//! - `cuGetProcAddress`, `_v2` and `_v2_ptsz` for every row of the real driver's probed table;
//! - how the shim finds the real driver and NVML (`TESSERA_REAL_LIBCUDA`/`TESSERA_REAL_LIBNVML`).
//!
//! "Intercepted" is observed without relying on what a hook does: the address a path yields belongs to
//! `libtessera.so` and is its export of exactly the expected name (`dladdr`), calls through it show up in
//! the shim's trace log, and names the shim does not hook still resolve to the simulated driver. The
//! memory figures are checked for consistency with the quota, whether or not quotas are enforced yet.

use crate::common;

use common::cprog::{
    CBuild, Facts, Symbols, cuda_include_dir, cuda13_include_dir, direct_program, direct_program_for, dynamic_symbols,
    proc_address_table, shim_hooks,
};
use common::{GIB, Sim, build_dir, shim_path};
use std::collections::BTreeSet;

/// The quota every run under the shim is given.
const QUOTA: u64 = GIB;

/// A machine whose programs run under the shim with a quota and the shim's trace log.
fn under_shim(tag: &str) -> Sim {
    Sim::shimmed(tag).with("TESSERA_MEMORY_LIMIT", &QUOTA.to_string()).with("TESSERA_LOG", "trace")
}

/// `object:symbol` for `name` where it must resolve: the shim's export when the shim hooks it, else the
/// simulated library's.
fn resolved(name: &str, hooks: &BTreeSet<String>, library: &str) -> String {
    if hooks.contains(name) { format!("libtessera.so:{name}") } else { format!("{library}:{name}") }
}

/// See [`common::cprog::assert_quota_view`].
fn assert_quota_view(total: u64, device: u64, over_quota_alloc: Option<i64>) {
    common::cprog::assert_quota_view(QUOTA, total, device, over_quota_alloc)
}

/// Runs a direct-linking build with and without the shim; `called` are the stream-ordered entry points the
/// build must import (legacy or per-thread names); `allocation` and `launch` are hooked, `other` is not.
fn direct_linking(per_thread: bool, called: &[&str], allocation: &str, launch: &str, other: &str) {
    direct_linking_of(12, per_thread, called, allocation, launch, other)
}

/// [`direct_linking`] of a build against the `cuda.h` of CUDA `major`.
fn direct_linking_of(major: u32, per_thread: bool, called: &[&str], allocation: &str, launch: &str, other: &str) {
    let exe = direct_program_for(major, per_thread);
    let imports = dynamic_symbols(&exe, Symbols::Undefined);
    for name in called {
        assert!(imports.contains(*name), "the build must call {name}; it imports {imports:?}");
    }
    let per_thread_imports: Vec<&String> =
        imports.iter().filter(|s| s.ends_with("_ptsz") || s.ends_with("_ptds")).collect();
    assert_eq!(per_thread, !per_thread_imports.is_empty(), "per-thread imports: {per_thread_imports:?}");
    let hooks = shim_hooks();

    let shim = Facts::ok(under_shim("direct").command_for(&exe, &[&QUOTA.to_string()]));
    assert_eq!(shim.get("vector_add"), "ok");
    let mut hooked = 0;
    for (name, place) in shim.with_prefix("address.") {
        assert_eq!(place, resolved(name, &hooks, "libsimcuda.so"), "{name} under the shim");
        if hooks.contains(name) {
            hooked += 1;
            // The call itself went through the shim's entry point.
            assert!(
                shim.stderr.contains(&format!("trace: call {name}\n")),
                "no call of {name} in the shim's log:\n{}",
                shim.stderr
            );
        }
    }
    assert!(hooked >= 9, "{hooked} of the program's functions are hooked");
    assert_eq!(shim.get(&format!("address.{allocation}")), format!("libtessera.so:{allocation}"));
    assert_eq!(shim.get(&format!("address.{launch}")), format!("libtessera.so:{launch}"));
    assert_eq!(shim.get(&format!("address.{other}")), format!("libsimcuda.so:{other}"));
    assert_eq!(shim.get("proc_address.cuMemAllocAsync"), format!("libtessera.so:{allocation}"));
    assert_eq!(shim.get("proc_address.cuLaunchKernel"), format!("libtessera.so:{launch}"));
    let device = shim.num("device_total") as u64;
    assert_quota_view(shim.num("mem_total") as u64, device, Some(shim.num("over_quota_alloc")));

    let plain = Facts::ok(Sim::new("direct-plain").without_shim().command_for(&exe, &[]));
    assert_eq!(plain.get("vector_add"), "ok");
    for (name, place) in plain.with_prefix("address.") {
        assert_eq!(place, format!("libsimcuda.so:{name}"), "{name} without the shim");
    }
    assert!(!plain.stderr.contains("tessera"), "{}", plain.stderr);
}

#[test]
fn direct_linking_calls_land_in_the_shim() {
    let called = ["cuMemAllocAsync", "cuMemFreeAsync", "cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoH_v2"];
    direct_linking(
        false,
        &[&called[..], &["cuStreamSynchronize", "cuLaunchKernel", "cuMemAlloc_v2"]].concat(),
        "cuMemAllocAsync",
        "cuLaunchKernel",
        "cuStreamSynchronize",
    );
}

#[test]
fn per_thread_default_stream_build_calls_ptsz_entry_points_that_land_in_the_shim() {
    let called = [
        "cuMemAllocAsync_ptsz",
        "cuMemFreeAsync_ptsz",
        "cuMemcpyHtoD_v2_ptds",
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuMemcpyDtoH_v2_ptds",
        "cuStreamSynchronize_ptsz",
        "cuLaunchKernel_ptsz",
        "cuMemAlloc_v2",
    ];
    direct_linking(true, &called, "cuMemAllocAsync_ptsz", "cuLaunchKernel_ptsz", "cuStreamSynchronize_ptsz");
}

#[test]
fn cuda_13_builds_call_cuda_13_names_that_land_in_the_shim_on_a_12_and_a_13_driver() {
    // CUDA 13's cuda.h maps cuCtxCreate to cuCtxCreate_v4 (12's to _v2); the rest of what direct.c calls
    // keeps its CUDA 12 names.
    let called = ["cuCtxCreate_v4", "cuMemAllocAsync", "cuMemAlloc_v2", "cuLaunchKernel", "cuStreamSynchronize"];
    direct_linking_of(13, false, &called, "cuMemAllocAsync", "cuLaunchKernel", "cuStreamSynchronize");
    let ptsz = ["cuCtxCreate_v4", "cuMemAllocAsync_ptsz", "cuLaunchKernel_ptsz", "cuStreamSynchronize_ptsz"];
    direct_linking_of(13, true, &ptsz, "cuMemAllocAsync_ptsz", "cuLaunchKernel_ptsz", "cuStreamSynchronize_ptsz");
    // On a driver that says it is CUDA 13.0, and on one that says 12.8: asked for CUDA 13.0's entry
    // points, that one answers CUDA_ERROR_INVALID_VALUE (1), as NVIDIA documents, shim or not.
    let exe = direct_program_for(13, false);
    let on = |driver: &str| {
        let sim = under_shim(&format!("direct13-on-{driver}")).with("SIMGPU_DRIVER_VERSION", driver);
        Facts::run(sim.command_for(&exe, &[&QUOTA.to_string()]))
    };
    let new = on("13000").succeeded();
    assert_eq!((new.get("driver_version"), new.get("cuda_version")), ("13000", "13000"));
    assert_eq!(new.get("address.cuCtxCreate_v4"), "libtessera.so:cuCtxCreate_v4");
    let old = on("12080");
    assert!(!old.success, "{}", old.stdout);
    let refused = "cuGetProcAddress_v2(symbol, &pfn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) = 1";
    assert_eq!(old.get("error"), refused, "{}", old.stdout);
}

/// Whether `export` is `base` or a version or per-thread form of it (`base_v2`, `base_ptsz`,
/// `base_v2_ptds`).
fn is_form_of(export: &str, base: &str) -> bool {
    let Some(rest) = export.strip_prefix(base) else { return false };
    let rest = rest.strip_prefix("_v").map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
    matches!(rest, "" | "_ptsz" | "_ptds")
}

/// The functions `cuda.h` in `include` declares, each with the name a program compiled against it
/// calls (the header's `#define cuX cuX_vN` applied).
fn declared_names(include: &std::path::Path) -> Vec<(String, String)> {
    let header = std::fs::read_to_string(include.join("cuda.h")).expect("read cuda.h");
    let mut defines = std::collections::BTreeMap::new();
    for line in header.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // `#define cuX cuX_v2`, or `#define cuX __CUDA_API_PTDS(cuX_v2)` (the name itself in a build
        // without CUDA_API_PER_THREAD_DEFAULT_STREAM).
        if let ["#define", from, to] = words[..] {
            let to = ["__CUDA_API_PTDS(", "__CUDA_API_PTSZ("]
                .iter()
                .find_map(|m| to.strip_prefix(m).and_then(|t| t.strip_suffix(')')))
                .unwrap_or(to);
            if from.starts_with("cu") && to.starts_with(from) {
                defines.insert(from.to_string(), to.to_string());
            }
        }
    }
    let mut names: Vec<(String, String)> = header
        .split("CUresult CUDAAPI ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .filter(|name| name.starts_with("cu") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|name| (name.to_string(), defines.get(name).cloned().unwrap_or_else(|| name.to_string())))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_function_of_cuda_12_and_13_headers_is_in_the_table_and_hooked_families_are_hooked_in_that_form() {
    let table: BTreeSet<&str> = tessera_ffi::proc_address::ROWS.iter().map(|r| r.symbol).collect();
    let hooks = shim_hooks();
    // A family the shim hooks: the base name, or any version or per-thread form of it.
    let family_hooked = |base: &str| hooks.iter().any(|h| is_form_of(h, base));
    for (major, include) in [(12, cuda_include_dir()), (13, cuda13_include_dir())] {
        let names = declared_names(&include);
        assert!(names.len() > 400, "CUDA {major}'s cuda.h declares {} functions", names.len());
        let missing: Vec<&str> =
            names.iter().map(|(_, called)| called.as_str()).filter(|c| !table.contains(c)).collect();
        assert!(missing.is_empty(), "CUDA {major} programs call what the table lacks: {missing:?}");
        let unhooked: Vec<&str> = names
            .iter()
            .filter(|(base, called)| family_hooked(base) && !hooks.contains(called.as_str()))
            .map(|(_, called)| called.as_str())
            .collect();
        assert!(
            unhooked.is_empty(),
            "CUDA {major} programs call these unhooked forms of hooked families: {unhooked:?}"
        );
    }
}

/// Driver names looked up by `dl_paths`: hooked and not, legacy and per-thread.
const DRIVER_NAMES: &[&str] = &[
    "cuInit",
    "cuMemAlloc_v2",
    "cuMemGetInfo_v2",
    "cuMemAllocAsync",
    "cuMemAllocAsync_ptsz",
    "cuCtxCreate_v4",
    "cuGetProcAddress",
    "cuGetProcAddress_v2",
    "cuGetProcAddress_v2_ptsz",
    "cuMemAlloc",
    "cuDeviceGet",
    "cuDriverGetVersion",
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuStreamSynchronize",
    "cuStreamSynchronize_ptsz",
    "cuMemcpyHtoD_v2_ptds",
];
/// NVML names looked up by `dl_paths`.
const NVML_NAMES: &[&str] = &[
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlInit_v2",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
];
/// Every lookup path `dl_paths` reports.
const PATHS: &[&str] = &["handle", "default", "next", "vsym", "vsym_default", "vsym_next"];

/// `dl_paths`'s arguments: the driver and NVML by the names programs open them by, with their names.
fn dl_paths_args() -> Vec<&'static str> {
    [&["libcuda.so.1"][..], DRIVER_NAMES, &["libnvidia-ml.so.1"], NVML_NAMES].concat()
}

#[test]
fn dlsym_and_dlvsym_return_the_shim_for_hooked_names_and_pass_everything_else_through() {
    let exe = CBuild::program("dl_paths.c").build();
    let hooks = shim_hooks();
    let args = dl_paths_args();
    let shim = Facts::ok(under_shim("dlsym").command_for(&exe, &args));
    let plain = Facts::ok(Sim::new("dlsym-plain").without_shim().command_for(&exe, &args));

    let libraries =
        DRIVER_NAMES.iter().map(|n| (*n, "libsimcuda.so")).chain(NVML_NAMES.iter().map(|n| (*n, "libsimnvml.so")));
    let (mut hooked, mut passed) = (0, 0);
    for (name, library) in libraries {
        assert_eq!(plain.get(&format!("handle.{name}")), format!("{library}:{name}"), "without the shim");
        for path in PATHS {
            let key = format!("{path}.{name}");
            if hooks.contains(name) {
                assert_eq!(shim.get(&key), format!("libtessera.so:{name}"), "{key} under the shim");
            } else {
                assert_eq!(shim.get(&key), plain.get(&key), "{key}: a name the shim does not hook must pass through");
            }
        }
        if hooks.contains(name) { hooked += 1 } else { passed += 1 }
    }
    assert!(hooked >= 8 && passed >= 8, "{hooked} hooked and {passed} other names: the test needs both");

    // Calls through every path reach the real functions; the hooked ones through the shim.
    for (api, traced) in
        [("cuMemGetInfo_v2", "cuMemGetInfo_v2"), ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo")]
    {
        let device: u64 = plain.get(&format!("call.{api}.handle")).split(' ').nth(1).unwrap().parse().unwrap();
        for path in PATHS {
            let call = shim.get(&format!("call.{api}.{path}"));
            let (code, total) = call.split_once(' ').unwrap();
            assert_eq!(code, "0", "{api} through {path}: {call}");
            assert_quota_view(total.parse().unwrap(), device, None);
        }
        assert!(shim.stderr.contains(&format!("trace: call {traced}\n")), "{}", shim.stderr);
    }

    // libc's lookups are answered exactly as without the shim, failures included.
    for (key, value) in plain.with_prefix("libc.") {
        assert_eq!(shim.get(&format!("libc.{key}")), value, "libc.{key}");
    }
    assert_eq!(shim.get("libc.next.malloc"), "libc.so.6:malloc");
    assert_eq!(shim.get("libc.vsym_next.malloc"), "libc.so.6:malloc");
    assert!(shim.get("libc.vsym_default.memcpy").starts_with("libc.so.6:"));
    assert_eq!(shim.get("libc.missing"), "null dlerror-set");
}

#[test]
fn rtld_next_from_a_preloaded_malloc_interposer_still_finds_libcs_malloc() {
    let exe = CBuild::program("dl_paths.c").build();
    let interposer = CBuild::library("interposer.c").build();
    let shim = shim_path();
    // The interposer after the shim is the telling order: were its RTLD_NEXT lookup resolved against the
    // shim (the caller of libc's dlsym if the shim called rather than jumped), "next" would be the
    // interposer's own malloc, and every allocation would recurse.
    for preload in
        [format!("{} {}", shim.display(), interposer.display()), format!("{} {}", interposer.display(), shim.display())]
    {
        let sim = Sim::new("interposer").with("LD_PRELOAD", &preload);
        let facts = Facts::ok(sim.command_for(&exe, &["libcuda.so.1", "cuMemAlloc_v2", "cuDeviceGet"]));
        assert_eq!(facts.get("interposer.next.malloc"), "libc.so.6:malloc", "LD_PRELOAD={preload}");
        assert!(facts.num("interposer.calls") > 0, "the interposer must be the process's malloc");
        assert_eq!(facts.get("libc.next.malloc"), "libinterposer.so:malloc", "the program's next malloc");
        assert_eq!(facts.get("handle.cuMemAlloc_v2"), "libtessera.so:cuMemAlloc_v2");
        assert_eq!(facts.get("handle.cuDeviceGet"), "libsimcuda.so:cuDeviceGet");
        assert_eq!(facts.get("call.cuMemGetInfo_v2.handle").split(' ').next(), Some("0"));
    }
}

/// Requests whose answers the issue spells out, and what they must be under the shim.
const QUERIES: &[(&str, &str)] = &[
    ("cuMemAllocAsync:12000:2", "libtessera.so:cuMemAllocAsync_ptsz"),
    ("cuMemAllocAsync:12000:0", "libtessera.so:cuMemAllocAsync"),
    ("cuMemAllocAsync:12000:1", "libtessera.so:cuMemAllocAsync"),
    ("cuGetProcAddress:12000:0", "libtessera.so:cuGetProcAddress_v2"),
    ("cuGetProcAddress:11030:0", "libtessera.so:cuGetProcAddress"),
    ("cuCtxCreate:11040:0", "libtessera.so:cuCtxCreate_v3"),
    ("cuCtxCreate:12050:0", "libtessera.so:cuCtxCreate_v4"),
    ("cuMemAlloc:3020:2", "libtessera.so:cuMemAlloc_v2"),
    ("cuMemGetInfo:12000:0", "libtessera.so:cuMemGetInfo_v2"),
    ("cuLaunchKernel:12000:2", "libtessera.so:cuLaunchKernel_ptsz"),
    ("cuStreamSynchronize:12000:2", "libsimcuda.so:cuStreamSynchronize_ptsz"),
    ("cuMemcpyHtoD:12000:2", "libtessera.so:cuMemcpyHtoD_v2_ptds"),
    ("cuMemAlloc:2000:0", "libsimcuda.so:cuMemAlloc"),
];

#[test]
fn cu_get_proc_address_answers_every_table_row_with_the_shims_entry_where_hooked() {
    let exe = CBuild::program("proc_address.c").build();
    let table = proc_address_table();
    let shim_arg = shim_path();
    let mut args = vec![table.to_str().unwrap(), shim_arg.to_str().unwrap()];
    args.extend(QUERIES.iter().map(|(q, _)| *q));
    let shim = Facts::ok(under_shim("procaddress").command_for(&exe, &args));
    args[1] = "-";
    let plain = Facts::ok(Sim::new("procaddress-plain").without_shim().command_for(&exe, &args));

    let rows = tessera_ffi::proc_address::ROWS.len() as i64;
    for facts in [&shim, &plain] {
        assert_eq!(facts.num("rows"), rows);
        assert_eq!(facts.num("mismatches"), 0, "{}", facts.all("mismatch").join("\n"));
        assert_eq!((facts.num("v2_ok"), facts.num("v1_ok")), (rows, rows));
        assert!(facts.num("ptsz_checked") > 1000);
        assert_eq!(facts.num("ptsz_ok"), facts.num("ptsz_checked"));
        assert_eq!(facts.num("latest_ok"), facts.num("latest_checked"));
        assert_eq!(facts.num("old_ok"), facts.num("old_checked"));
        assert!(facts.num("old_checked") > 1000);
    }
    for lookup in ["cuGetProcAddress", "cuGetProcAddress_v2", "cuGetProcAddress_v2_ptsz"] {
        assert_eq!(shim.get(&format!("lookup.{lookup}")), format!("libtessera.so:{lookup}"));
        assert_eq!(plain.get(&format!("lookup.{lookup}")), format!("libsimcuda.so:{lookup}"));
    }

    // Every hook the driver can hand out is handed out as the shim's, and nothing else is.
    let handed_out: BTreeSet<String> = shim.all("hooked").into_iter().map(String::from).collect();
    let expected: BTreeSet<String> =
        shim_hooks().into_iter().filter(|h| tessera_ffi::proc_address::is_exported(h)).collect();
    assert_eq!(handed_out, expected);
    assert!(plain.all("hooked").is_empty());

    for (query, answer) in QUERIES {
        assert_eq!(shim.get(&format!("query.{query}")), format!("0 0 {answer}"), "{query}");
    }

    // Lookups that find nothing, and argument errors, are the driver's answers unchanged.
    for (case, value) in plain.with_prefix("case.") {
        let under = shim.get(&format!("case.{case}"));
        if case == "no_status_pointer" {
            assert_eq!(under, "0 -1 libtessera.so:cuMemAlloc_v2");
        } else {
            assert_eq!(under, value, "case {case}");
        }
    }
    assert_eq!(shim.get("case.unknown_symbol"), "0 1 null");
    assert_eq!(shim.get("case.unknown_symbol_ptsz"), "0 1 null");
    assert_eq!(shim.get("case.version_not_sufficient"), "0 2 null");
    for case in [
        "version_above_driver",
        "version_above_driver_v1",
        "version_above_driver_ptsz",
        "version_zero",
        "null_symbol",
        "null_pfn",
    ] {
        assert!(shim.get(&format!("case.{case}")).starts_with("1 "), "{case}: CUDA_ERROR_INVALID_VALUE expected");
    }

    // The per-thread entry points handed out work, through the shim.
    for call in ["cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz", "cuStreamSynchronize_ptsz"] {
        assert_eq!(shim.get(&format!("call.{call}")), "0", "{call}");
    }
    for traced in ["cuGetProcAddress_v2", "cuMemAllocAsync_ptsz", "cuMemFreeAsync_ptsz"] {
        assert!(shim.stderr.contains(&format!("trace: call {traced}\n")), "{traced}:\n{}", shim.stderr);
    }
}

/// Copies of the simulated driver and NVML under other names, in a folder not on the loader's path.
fn library_copies() -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = build_dir().join("c-tests/real-libraries");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = |from: &str, to: &str| {
        let path = dir.join(to);
        let tmp = dir.join(format!(".{to}.{}", std::process::id()));
        std::fs::copy(build_dir().join(from), &tmp).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    };
    (copy("libsimcuda.so", "libcuda-elsewhere.so"), copy("libsimnvml.so", "libnvidia-ml-elsewhere.so"))
}

#[test]
fn the_real_libraries_come_from_tessera_real_variables_and_never_the_shim() {
    let exe = CBuild::program("dl_paths.c").build();

    // Default: libcuda.so.1 and libnvidia-ml.so.1 as the loader finds them.
    let facts = Facts::ok(Sim::shimmed("real-default").with("TESSERA_LOG", "info").command_for(&exe, &dl_paths_args()));
    for (requested, file) in [("libcuda.so.1", "libcuda.so.1"), ("libnvidia-ml.so.1", "libnvidia-ml.so.1")] {
        let line = format!("real library for {requested:?}: {}/{file}", common::library_folder().display());
        assert!(facts.stderr.contains(&line), "expected {line:?} in:\n{}", facts.stderr);
    }

    // TESSERA_REAL_*: libraries the loader cannot find by name, opened by the program by the same path.
    let (cuda, nvml) = library_copies();
    let (cuda, nvml) = (cuda.to_str().unwrap(), nvml.to_str().unwrap());
    let sim = Sim::shimmed("real-variables")
        .with("TESSERA_LOG", "info")
        .with("TESSERA_REAL_LIBCUDA", cuda)
        .with("TESSERA_REAL_LIBNVML", nvml)
        .with("LD_LIBRARY_PATH", "");
    let facts =
        Facts::ok(sim.command_for(
            &exe,
            &[cuda, "cuMemGetInfo_v2", "cuDeviceGet", nvml, "nvmlDeviceGetMemoryInfo", "nvmlInit_v2"],
        ));
    for path in [cuda, nvml] {
        assert!(facts.stderr.contains(&format!("real library for {path:?}: {path}")), "{path}:\n{}", facts.stderr);
    }
    assert_eq!(facts.get("handle.cuMemGetInfo_v2"), "libtessera.so:cuMemGetInfo_v2");
    assert_eq!(facts.get("handle.cuDeviceGet"), "libcuda-elsewhere.so:cuDeviceGet");
    assert_eq!(facts.get("handle.nvmlDeviceGetMemoryInfo"), "libtessera.so:nvmlDeviceGetMemoryInfo");
    for path in PATHS {
        for api in ["cuMemGetInfo_v2", "nvmlDeviceGetMemoryInfo"] {
            assert_eq!(facts.get(&format!("call.{api}.{path}")).split(' ').next(), Some("0"), "{api} through {path}");
        }
    }

    // Pointed at the shim itself, the shim refuses it, says so, and the calls fail instead of recursing.
    let shim = shim_path();
    let shim = shim.to_str().unwrap();
    let sim = Sim::shimmed("real-is-shim").with("TESSERA_REAL_LIBNVML", shim);
    let facts = Facts::ok(sim.command_for(&exe, &["libnvidia-ml.so.1", "nvmlDeviceGetMemoryInfo"]));
    assert!(facts.stderr.contains("is not the real library"), "{}", facts.stderr);
    let call = facts.get("call.nvmlDeviceGetMemoryInfo.default");
    assert!(!call.starts_with("0 "), "through the shim with no real NVML: {call}");
    let sim = Sim::shimmed("real-is-shim").with("TESSERA_REAL_LIBCUDA", shim);
    let run = Facts::run(sim.command_for(direct_program(false), &[]));
    // Its first intercepted call (cuGetProcAddress, then cuInit) fails: the program stops there.
    assert!(!run.success && run.opt("error").is_some(), "{}", run.stdout);
    assert!(run.stderr.contains("is not the real library"), "{}", run.stderr);
}
