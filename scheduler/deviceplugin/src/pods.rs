//! Which pod container a vGPU is for. kubelet's `Allocate` names only device IDs, not the pod, so with
//! the Kubernetes API the plugin guesses it ([`pick`]): among the pods on this node that are `Pending`
//! and not being deleted, a container whose limit (or request) of the plugin's resource is exactly k, the
//! number of replicas asked for, and that has no vGPU yet; several such: the oldest pod (by
//! `creationTimestamp`, then namespace and name), its first such container. Limit: two pending pods asking
//! for the same k at once may be told apart wrongly (kubelet admits pods one by one, mostly oldest first,
//! but does not promise it), so each could get the other's sizing.
//!
//! The plugin remembers the pairing in [`Records`] (`pods.json` in its state directory, replaced
//! atomically), so a plugin restart keeps it, and the collector ([`fates`]) removes a vGPU as soon as its
//! pod is gone from the node or has ended, and keeps it while its pod lives (even a container that keeps
//! crashing and restarting).

use crate::gc::Fate;
use k8s_openapi::api::core::v1::{Container, Pod};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tessera_region::secure_fs::{SecureFsError, replace_atomically};

/// One container of one pod (the pod by UID: a pod made again under the same name is another pod).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {}/{} container {}", self.namespace, self.pod, self.container)
    }
}

/// The format of `pods.json`.
const FORMAT_VERSION: u32 = 1;

/// `pods.json` as stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    version: u32,
    vgpus: BTreeMap<String, PodRef>,
}

/// Why the records cannot be read or written; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The file exists but cannot be read.
    #[error("cannot read {}: {source}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON of the records' shape.
    #[error("{} is corrupt ({source}); remove it to start afresh", .file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What the parser found.
        source: serde_json::Error,
    },
    /// The file has a format version this plugin does not read.
    #[error(
        "{} has format version {version}, this plugin reads {FORMAT_VERSION}; remove it to start afresh",
        .file.display()
    )]
    Version {
        /// The file.
        file: PathBuf,
        /// Its format version.
        version: u32,
    },
    /// The file cannot be written (the error names it).
    #[error("cannot write the pod records {0}")]
    Write(#[source] SecureFsError),
}

/// Which pod container each vGPU of the plugin is for, kept in a file.
#[derive(Debug)]
pub struct Records {
    file: PathBuf,
    vgpus: BTreeMap<String, PodRef>,
}

/// The records shared by `Allocate` and the collector.
pub type SharedRecords = Arc<Mutex<Records>>;

impl Records {
    /// The records in `file` (none if it does not exist). A file that cannot be read or parsed is an error
    /// naming it.
    pub fn load(file: &Path) -> Result<Records, RecordsError> {
        let vgpus = match std::fs::read(file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(RecordsError::Read { file: file.to_path_buf(), source }),
            Ok(bytes) => {
                let stored: Stored = serde_json::from_slice(&bytes)
                    .map_err(|source| RecordsError::Corrupt { file: file.to_path_buf(), source })?;
                if stored.version != FORMAT_VERSION {
                    return Err(RecordsError::Version { file: file.to_path_buf(), version: stored.version });
                }
                stored.vgpus
            }
        };
        Ok(Records { file: file.to_path_buf(), vgpus })
    }

    /// Writes the records atomically ([`replace_atomically`]), so a crash leaves the old or the new
    /// records, never half of them.
    fn save(&self) -> Result<(), RecordsError> {
        let stored = Stored { version: FORMAT_VERSION, vgpus: self.vgpus.clone() };
        let text = serde_json::to_vec_pretty(&stored).expect("records serialize");
        replace_atomically(&self.file, 0o644, &text).map_err(RecordsError::Write)
    }

    /// The pod container of vGPU `name`.
    pub fn get(&self, name: &str) -> Option<&PodRef> {
        self.vgpus.get(name)
    }

    /// All records, by vGPU name.
    pub fn all(&self) -> &BTreeMap<String, PodRef> {
        &self.vgpus
    }

    /// Records that vGPU `name` is for `pod` (replacing what it was for).
    pub fn insert(&mut self, name: &str, pod: PodRef) -> Result<(), RecordsError> {
        self.vgpus.insert(name.to_string(), pod);
        self.save()
    }

    /// Forgets the vGPUs `names` (those not recorded are skipped; the file is written only on a change).
    pub fn forget<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) -> Result<(), RecordsError> {
        let before = self.vgpus.len();
        for name in names {
            self.vgpus.remove(name);
        }
        if self.vgpus.len() == before { Ok(()) } else { self.save() }
    }
}

/// How many of `resource` container `c` asks for (its limit, else its request), if a whole number.
fn asks_for(c: &Container, resource: &str) -> Option<u64> {
    let resources = c.resources.as_ref()?;
    let amount = resources.limits.as_ref().and_then(|l| l.get(resource));
    let amount = amount.or_else(|| resources.requests.as_ref().and_then(|r| r.get(resource)))?;
    crate::sizing::count(&amount.0).ok()
}

/// The reference to container `c` of `pod`.
fn reference(pod: &Pod, c: &Container) -> PodRef {
    let m = &pod.metadata;
    PodRef {
        uid: m.uid.clone().unwrap_or_default(),
        namespace: m.namespace.clone().unwrap_or_default(),
        pod: m.name.clone().unwrap_or_default(),
        container: c.name.clone(),
    }
}

/// Whether `pod` is waiting to start: phase `Pending` (or no status yet) and not being deleted.
fn pending(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && matches!(phase, None | Some("Pending"))
}

/// The container a request for `k` replicas of `resource` is most likely for (see the module's rule),
/// with its pod; none of `taken` (containers that have a vGPU already).
pub fn pick<'a>(pods: &'a [Pod], resource: &str, k: u64, taken: &[&PodRef]) -> Option<(&'a Pod, &'a Container)> {
    let mut candidates: Vec<&Pod> = pods.iter().filter(|p| pending(p) && p.metadata.uid.is_some()).collect();
    candidates.sort_by(|a, b| {
        let key = |p: &'a Pod| {
            let m = &p.metadata;
            (m.creation_timestamp.as_ref().map(|t| t.0), m.namespace.as_deref(), m.name.as_deref())
        };
        key(a).cmp(&key(b))
    });
    candidates.into_iter().find_map(|pod| {
        let spec = pod.spec.as_ref()?;
        // Init containers start first, so kubelet allocates for them first.
        let containers = spec.init_containers.iter().flatten().chain(spec.containers.iter());
        containers
            .filter(|c| asks_for(c, resource) == Some(k))
            .find(|c| !taken.contains(&&reference(pod, c)))
            .map(|c| (pod, c))
    })
}

/// [`pick`]'s choice as a reference, with the container's limits and the pod's annotations (as text, for
/// [`crate::sizing::Sizing::of`]).
pub fn describe(pod: &Pod, c: &Container) -> (PodRef, BTreeMap<String, String>, BTreeMap<String, String>) {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    let limits = limits.iter().flat_map(|l| l.iter()).map(|(k, v)| (k.clone(), v.0.clone())).collect();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    (reference(pod, c), limits, annotations)
}

/// What becomes of each recorded vGPU given the pods now on the node: removed if its pod is not there (by
/// UID) or has phase `Succeeded` or `Failed`, kept otherwise, however its containers fare.
pub fn fates(records: &BTreeMap<String, PodRef>, pods: &[Pod]) -> HashMap<String, Fate> {
    let phases: HashMap<&str, Option<&str>> = pods
        .iter()
        .filter_map(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            Some((p.metadata.uid.as_deref()?, phase))
        })
        .collect();
    records
        .iter()
        .map(|(name, r)| {
            let fate = match phases.get(r.uid.as_str()) {
                None => Fate::Remove(format!("{r} is gone from the node")),
                Some(Some(phase @ ("Succeeded" | "Failed"))) => Fate::Remove(format!("{r} has ended ({phase})")),
                Some(_) => Fate::Keep,
            };
            (name.clone(), fate)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from its JSON form (as the API sends it).
    fn pod(uid: &str, created: &str, phase: &str, containers: &[(&str, u32)]) -> Pod {
        let containers: Vec<_> = containers
            .iter()
            .map(|(name, k)| {
                serde_json::json!({"name": name, "resources": {"limits": {"tessera.io/vgpu": k.to_string()}}})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid, "creationTimestamp": created},
            "spec": {"containers": containers},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn the_oldest_pending_container_asking_for_k_without_a_vgpu_is_picked() {
        let pods = [
            pod("new", "2026-11-28T10:00:02Z", "Pending", &[("a", 2)]),
            pod("old", "2026-11-28T10:00:01Z", "Pending", &[("x", 1), ("a", 2), ("b", 2)]),
            pod("running", "2026-11-28T09:00:00Z", "Running", &[("a", 2)]),
        ];
        let names = |picked: Option<(&Pod, &Container)>| picked.map(|(p, c)| (reference(p, c).uid, c.name.clone()));
        let r = "tessera.io/vgpu";
        assert_eq!(names(pick(&pods, r, 2, &[])), Some(("old".into(), "a".into())));
        assert_eq!(names(pick(&pods, r, 1, &[])), Some(("old".into(), "x".into())));
        let a = reference(&pods[1], &pods[1].spec.as_ref().unwrap().containers[1]);
        let b = reference(&pods[1], &pods[1].spec.as_ref().unwrap().containers[2]);
        assert_eq!(names(pick(&pods, r, 2, &[&a])), Some(("old".into(), "b".into())));
        assert_eq!(names(pick(&pods, r, 2, &[&a, &b])), Some(("new".into(), "a".into())));
        assert_eq!(names(pick(&pods, r, 3, &[])), None, "no container asks for 3");
        assert_eq!(names(pick(&pods, "example.com/gpu", 2, &[])), None);
    }

    #[test]
    fn recorded_vgpus_go_with_their_pods() {
        let pods = [
            pod("up", "2026-11-28T10:00:00Z", "Running", &[("a", 1)]),
            pod("done", "2026-11-28T10:00:00Z", "Succeeded", &[("a", 1)]),
            pod("bad", "2026-11-28T10:00:00Z", "Failed", &[("a", 1)]),
            pod("wait", "2026-11-28T10:00:00Z", "Pending", &[("a", 1)]),
        ];
        let rec = |uid: &str| PodRef { uid: uid.into(), namespace: "d".into(), pod: "p".into(), container: "a".into() };
        let records: BTreeMap<String, PodRef> =
            ["up", "done", "bad", "wait", "gone"].iter().map(|u| (format!("k8s-{u}"), rec(u))).collect();
        let f = fates(&records, &pods);
        assert_eq!(f["k8s-up"], Fate::Keep);
        assert_eq!(f["k8s-wait"], Fate::Keep);
        assert!(matches!(&f["k8s-done"], Fate::Remove(m) if m.contains("Succeeded")));
        assert!(matches!(&f["k8s-bad"], Fate::Remove(m) if m.contains("Failed")));
        assert!(matches!(&f["k8s-gone"], Fate::Remove(m) if m.contains("gone")));
    }

    #[test]
    fn records_survive_a_restart_and_a_corrupt_file_is_named() {
        let dir = std::env::temp_dir().join(format!("tessera-pods-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pods.json");
        let _ = std::fs::remove_file(&file);
        let mut r = Records::load(&file).unwrap();
        let one = PodRef { uid: "u".into(), namespace: "n".into(), pod: "p".into(), container: "c".into() };
        r.insert("k8s-0-1", one.clone()).unwrap();
        r.insert("k8s-0-2", one.clone()).unwrap();
        r.forget(["k8s-0-2", "k8s-9-9"]).unwrap();
        let again = Records::load(&file).unwrap();
        assert_eq!(again.all().len(), 1);
        assert_eq!(again.get("k8s-0-1"), Some(&one));
        std::fs::write(&file, b"{not json").unwrap();
        let e = Records::load(&file).unwrap_err().to_string();
        assert!(e.contains("pods.json is corrupt"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
