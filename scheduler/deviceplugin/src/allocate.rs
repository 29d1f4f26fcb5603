//! `Allocate` for one container: which GPU and replicas its device IDs name ([`plan`]), the vGPU that
//! gets k/N of that GPU ([`spec_for`]); what the container is given to join it is
//! [`crate::container_edits`]'s.

use crate::inventory::{Gpu, parse_replica_id};
use crate::sizing::Sizing;
use tessera_client::VgpuSpec;

/// The replicas of one GPU a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The GPU.
    pub gpu: Gpu,
    /// The replica indices, sorted.
    pub replicas: Vec<u32>,
}

/// Why a request cannot be served: the caller's mistake (gRPC `InvalidArgument`) or a GPU that cannot
/// take it now (`FailedPrecondition`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The request names devices that are not, or not together, a valid allocation.
    Invalid(String),
    /// The GPU is unhealthy.
    Unavailable(String),
}

/// The GPU and replicas `ids` name: all replicas of one known GPU, each once, each below `replicas`.
pub fn plan(ids: &[String], gpus: &[Gpu], replicas: u32) -> Result<Plan, Refusal> {
    let invalid = |m: String| Err(Refusal::Invalid(m));
    if ids.is_empty() {
        return invalid("the container asks for no device".into());
    }
    let mut gpu: Option<&Gpu> = None;
    let mut indices = Vec::with_capacity(ids.len());
    for id in ids {
        let Some((key, index)) = parse_replica_id(id) else {
            return invalid(format!("unknown device id {id:?}: not a replica id <GPU>-<i> of this plugin"));
        };
        let Some(found) = gpus.iter().find(|g| g.key == key) else {
            return invalid(format!("unknown device id {id:?}: no GPU {key} on this node"));
        };
        if index >= replicas {
            return invalid(format!("unknown device id {id:?}: GPU {key} has replicas 0 to {}", replicas - 1));
        }
        match gpu {
            Some(g) if g.key != found.key => {
                return invalid(format!(
                    "device ids {ids:?} are replicas of several GPUs ({} and {}); a container's replicas must be \
                     of one GPU",
                    g.key, found.key
                ));
            }
            _ => gpu = Some(found),
        }
        if indices.contains(&index) {
            return invalid(format!("device id {id:?} is asked for twice"));
        }
        indices.push(index);
    }
    let gpu = gpu.expect("ids is not empty").clone();
    if !gpu.healthy {
        return Err(Refusal::Unavailable(format!(
            "GPU {} is unhealthy (NVML lost it, or the daemon does not report it)",
            gpu.key
        )));
    }
    indices.sort_unstable();
    Ok(Plan { gpu, replicas: indices })
}

/// The vGPU's name for `plan`: `k8s-<ordinal>-<first replica>`. Replicas are held by one container at a
/// time, so while the plan's replicas are allocated no other vGPU has this name.
pub fn vgpu_name(plan: &Plan) -> String {
    format!("k8s-{}-{}", plan.gpu.ordinal, plan.replicas[0])
}

/// The names a vGPU of an earlier container holding any of `plan`'s replicas may have: kubelet hands out
/// only free replicas, so such a vGPU is left over from a container that has ended.
pub fn stale_names(plan: &Plan) -> Vec<String> {
    plan.replicas.iter().map(|i| format!("k8s-{}-{i}", plan.gpu.ordinal)).collect()
}

/// The vGPU for `plan` with N = `replicas`: the memory and share `sizing` gives, else k/N of the device's
/// memory and of its time (rounded down, so N containers of one replica each fit).
pub fn spec_for(plan: &Plan, replicas: u32, sizing: &Sizing) -> VgpuSpec {
    let k = plan.replicas.len() as u64;
    let n = u64::from(replicas);
    let memory = sizing.memory.unwrap_or(plan.gpu.memory_total / n * k);
    let share = sizing.share.unwrap_or((100 * k / n) as u32);
    VgpuSpec::new(&vgpu_name(plan), plan.gpu.ordinal, memory, share)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(key: &str, ordinal: u32) -> Gpu {
        let memory_total = 10 << 30;
        Gpu { ordinal, key: key.into(), memory_total, minor: ordinal, numa_node: None, bus_id: None, healthy: true }
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plans_take_replicas_of_one_known_gpu() {
        let gpus = [gpu("GPU-a", 0), gpu("GPU-b", 1)];
        let p = plan(&ids(&["GPU-b-7", "GPU-b-2"]), &gpus, 10).unwrap();
        assert_eq!((p.gpu.ordinal, p.replicas.clone()), (1, vec![2, 7]));
        assert_eq!(vgpu_name(&p), "k8s-1-2");
        assert_eq!(stale_names(&p), ["k8s-1-2", "k8s-1-7"]);
        let spec = spec_for(&p, 10, &Sizing::default());
        assert_eq!((spec.device, spec.share, spec.memory), (1, 20, (10u64 << 30) / 10 * 2));
        assert_eq!(spec_for(&p, 3, &Sizing::default()).share, 66, "shares round down so every replica fits");
        let sized = spec_for(&p, 10, &Sizing { memory: Some(3 << 30), share: Some(45) });
        assert_eq!((sized.share, sized.memory), (45, 3 << 30));
        let half = spec_for(&p, 10, &Sizing { memory: None, share: Some(45) });
        assert_eq!((half.share, half.memory), (45, (10u64 << 30) / 10 * 2), "what sizing leaves out stays k/N");

        for (bad, says) in [
            (&[][..], "no device"),
            (&["GPU-c-1"][..], "no GPU GPU-c"),
            (&["GPU-a-10"][..], "replicas 0 to 9"),
            (&["GPU-a-1", "GPU-b-2"][..], "several GPUs"),
            (&["GPU-a-1", "GPU-a-1"][..], "twice"),
            (&["nonsense"][..], "not a replica id"),
        ] {
            match plan(&ids(bad), &gpus, 10) {
                Err(Refusal::Invalid(m)) => assert!(m.contains(says), "{bad:?}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let sick = [Gpu { healthy: false, ..gpu("GPU-a", 0) }];
        assert!(matches!(plan(&ids(&["GPU-a-0"]), &sick, 10), Err(Refusal::Unavailable(_))));
    }
}
