//! The applications of issue 31 (numba-cuda, CuPy) under the shim, in every pass of the suite (the
//! transparency pass, which reruns the files that make bare machines, has nothing to add here): a 2 GiB
//! quota is the device's size to each and refuses a 3 GiB array, and two numba programs in vGPUs of 30% and
//! 70% get 30/70 of the engine within a point (engine trace).

use crate::common::{Sim, apps};

const OUT_OF_MEMORY: &str = "2";

#[test]
fn a_quota_is_the_device_to_numba_and_refuses_what_exceeds_it() {
    let sim = Sim::shimmed("numba-quota").with("TESSERA_MEMORY_LIMIT", "2GiB");
    let facts = apps::run(&sim, "numba", "numba_app.py", "quota");
    assert_eq!(facts.get("total"), (2u64 << 30).to_string());
    assert_eq!(facts.get("one_gib"), "ok");
    assert_eq!(facts.get("three_gib"), format!("refused {OUT_OF_MEMORY}"), "{}", facts.stdout);
}

#[test]
fn two_numba_programs_in_vgpus_of_30_and_70_percent_get_30_and_70_percent_of_the_engine() {
    let split = apps::split_30_70("numba-shares", "numba", "numba_app.py", &["saturate", "8"], "*add*=1ms");
    assert!((split - 0.30).abs() <= 0.01, "a got {split:.3} of the engine time, not 0.30 within 0.01");
}

#[test]
fn a_quota_is_the_memory_cupy_sees_and_refuses_what_exceeds_it() {
    let sim = Sim::shimmed("cupy-quota").with("TESSERA_MEMORY_LIMIT", "2GiB");
    let facts = apps::run(&sim, "cupy", "cupy_app.py", "memory");
    assert_eq!(facts.get("count"), "1");
    assert_eq!(facts.get("total"), (2u64 << 30).to_string());
    assert_eq!(facts.get("one_gib"), "ok");
    assert_eq!(facts.get("three_gib"), "refused", "{}", facts.stdout);
}
