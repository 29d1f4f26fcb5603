//! PyTorch, unmodified (issue 31), through `tools/test-apps.sh` only (its CUDA 12 build is a 4 GB
//! download; the suite lists these tests as ignored, with that reason): on the simulated driver and under
//! the shim, `torch.cuda.is_available()`, the device's properties, `mem_get_info` equal to the quota, a
//! 1 GiB tensor, the caching allocator refusing past the quota with `torch.OutOfMemoryError` (by its
//! default, VMM (`expandable_segments`) and pool (`cudaMallocAsync`) paths), a CUDA graph captured and
//! replayed, 50 training steps of a small MLP, and two training loops in vGPUs of 30% and 70% getting
//! 30/70 of the engine within 2 points.

use crate::common::{Sim, apps};

#[test]
#[ignore = "PyTorch is a 4 GB download: tools/test-apps.sh runs these tests"]
fn torch_sees_the_device_and_the_quota_as_its_memory() {
    let facts = apps::run(&Sim::new("torch-device"), "torch", "torch_app.py", "device");
    assert_eq!(facts.get("available"), "True", "{}", facts.stderr);
    assert_eq!(facts.get("count"), "1");
    assert_eq!(facts.get("capability"), "9.0");
    let shimmed = Sim::shimmed("torch-quota").with("TESSERA_MEMORY_LIMIT", "2GiB");
    assert_eq!(apps::run(&shimmed, "torch", "torch_app.py", "device").get("total"), (2u64 << 30).to_string());
}

#[test]
#[ignore = "PyTorch is a 4 GB download: tools/test-apps.sh runs these tests"]
fn the_caching_allocator_refuses_past_the_quota_on_every_path() {
    for conf in ["", "expandable_segments:True", "backend:cudaMallocAsync"] {
        let sim =
            Sim::shimmed("torch-memory").with("TESSERA_MEMORY_LIMIT", "2GiB").with("PYTORCH_CUDA_ALLOC_CONF", conf);
        let facts = apps::run(&sim, "torch", "torch_app.py", "memory");
        assert_eq!(facts.get("one_gib"), "ok", "{conf:?}");
        assert_eq!(facts.get("past_total"), "refused", "{conf:?}: {}", facts.stdout);
    }
}

#[test]
#[ignore = "PyTorch is a 4 GB download: tools/test-apps.sh runs these tests"]
fn a_cuda_graph_is_captured_and_replayed() {
    let sim = Sim::shimmed("torch-graph").with("TESSERA_MEMORY_LIMIT", "4GiB");
    assert_eq!(apps::run(&sim, "torch", "torch_app.py", "graph").get("graph"), "ok");
}

#[test]
#[ignore = "PyTorch is a 4 GB download: tools/test-apps.sh runs these tests"]
fn a_training_loop_runs_50_steps() {
    let sim = Sim::shimmed("torch-train").with("TESSERA_MEMORY_LIMIT", "4GiB");
    assert_eq!(apps::run(&sim, "torch", "torch_app.py", "train").get("steps"), "50");
}

#[test]
#[ignore = "PyTorch is a 4 GB download: tools/test-apps.sh runs these tests"]
fn two_training_loops_in_vgpus_of_30_and_70_percent_get_30_and_70_percent_of_the_engine() {
    let split = apps::split_30_70("torch-shares", "torch", "torch_app.py", &["train", "10"], "*=200us");
    assert!((split - 0.30).abs() <= 0.02, "a got {split:.3} of the engine time, not 0.30 within 0.02");
}
