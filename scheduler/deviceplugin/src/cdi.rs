//! CDI (Container Device Interface) specs of Tessera's devices: kind `tessera.io/vgpu`, one device per
//! vGPU (named as the vGPU) and, for `tessera cdi generate`, per GPU (named `gpu<ordinal>` and by its
//! UUID). Each device's `containerEdits` are [`crate::container_edits`]'s, the same a container gets from
//! kubelet's `Allocate`. A runtime applies them when a container names `tessera.io/vgpu=<device>`.
//!
//! The JSON shape follows the CDI project's schema, vendored in `cdi-schema/` and checked by the tests.

use crate::container_edits::{ContainerEdits, HostFiles, for_container};
use crate::inventory::Gpu;
use serde::Serialize;
use std::path::{Path, PathBuf};
use tessera_region::secure_fs::{SecureFsError, replace_atomically};

/// The CDI version the specs declare. Only features of 0.3.0 are used (env, mounts, device nodes with a
/// host path); 0.8.0 is the current version runtimes of the last years read.
pub const CDI_VERSION: &str = "0.8.0";
/// The kind of Tessera's CDI devices (`vendor/class`).
pub const KIND: &str = "tessera.io/vgpu";

/// A CDI spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The CDI version.
    pub cdi_version: String,
    /// [`KIND`].
    pub kind: String,
    /// The devices.
    pub devices: Vec<Device>,
}

/// One CDI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Its name within the kind.
    pub name: String,
    /// What a container naming it gets.
    pub container_edits: Edits,
}

/// CDI container edits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    /// `NAME=value` strings.
    pub env: Vec<String>,
    /// Device nodes.
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts.
    pub mounts: Vec<CdiMount>,
}

/// A CDI device node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Its path in the container.
    pub path: String,
    /// Its path on the host.
    pub host_path: String,
    /// cgroup access: read and write.
    pub permissions: String,
}

/// A CDI mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// The host path.
    pub host_path: String,
    /// The container path.
    pub container_path: String,
    /// OCI mount options: a bind mount, read-only or read-write.
    pub options: Vec<String>,
}

impl From<&ContainerEdits> for Edits {
    fn from(e: &ContainerEdits) -> Edits {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        Edits {
            env: e.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            device_nodes: e
                .device_nodes
                .iter()
                .map(|n| DeviceNode { path: n.container.clone(), host_path: text(&n.host), permissions: "rw".into() })
                .collect(),
            mounts: e
                .mounts
                .iter()
                .map(|m| CdiMount {
                    host_path: text(&m.host),
                    container_path: m.container.clone(),
                    options: ["bind", if m.read_only { "ro" } else { "rw" }, "nosuid", "nodev"]
                        .map(String::from)
                        .to_vec(),
                })
                .collect(),
        }
    }
}

/// The fully-qualified CDI name of device `name`: `tessera.io/vgpu=<name>`.
pub fn qualified(name: &str) -> String {
    format!("{KIND}={name}")
}

/// True when `name` is a CDI device name: letters, digits, `-`, `_`, `.`, `:`, starting and ending with a
/// letter or digit. (Most vGPU names are; one such as `_tmp` cannot be a CDI device.)
pub fn valid_device_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.:".contains(c))
}

/// A vGPU as the spec needs it: its name and its device ordinal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpuRef {
    /// The vGPU's name.
    pub name: String,
    /// Its device's ordinal.
    pub device: u32,
}

/// The spec of `vgpus` (each on the GPU of its ordinal among `gpus`) and, when `whole_gpus`, of every GPU
/// as well (as `gpu<ordinal>` and as its UUID). Returns the spec and what was left out, one line each: a
/// vGPU whose name cannot be a CDI device name or whose GPU is unknown, and a GPU name a vGPU already has
/// (the vGPU keeps it: two devices of one name would make the runtime refuse the whole spec).
pub fn spec(files: &HostFiles, gpus: &[Gpu], vgpus: &[VgpuRef], whole_gpus: bool) -> (Spec, Vec<String>) {
    let mut devices: Vec<Device> = Vec::new();
    let mut left_out = Vec::new();
    let mut add = |name: &str, edits: &ContainerEdits, left_out: &mut Vec<String>| {
        if devices.iter().any(|d| d.name == name) {
            left_out.push(format!("GPU name {name} is a vGPU's already; the GPU is not listed under it"));
        } else {
            devices.push(Device { name: name.to_string(), container_edits: edits.into() });
        }
    };
    for v in vgpus {
        let Some(gpu) = gpus.iter().find(|g| g.ordinal == v.device) else {
            left_out.push(format!("vGPU {}: its device {} is not among the GPUs", v.name, v.device));
            continue;
        };
        if !valid_device_name(&v.name) {
            left_out.push(format!(
                "vGPU {}: not a CDI device name (letters, digits, '-', '_', '.', starting and ending with a letter \
                 or digit)",
                v.name
            ));
            continue;
        }
        add(&v.name, &for_container(files, gpu, Some(&v.name)), &mut left_out);
    }
    if whole_gpus {
        for gpu in gpus {
            let edits = for_container(files, gpu, None);
            add(&format!("gpu{}", gpu.ordinal), &edits, &mut left_out);
            if valid_device_name(&gpu.key) && gpu.key != format!("gpu{}", gpu.ordinal) {
                add(&gpu.key, &edits, &mut left_out);
            }
        }
    }
    (Spec { cdi_version: CDI_VERSION.into(), kind: KIND.into(), devices }, left_out)
}

impl Spec {
    /// The spec as pretty-printed JSON, ending with a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a spec always serialises");
        text.push('\n');
        text
    }
}

/// Why a spec file cannot be written ([`write_atomic`]).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The path is a directory.
    #[error("{} is a directory; give a file name, e.g. {}", .0.display(), .0.join("tessera.json").display())]
    IsDirectory(PathBuf),
    /// The path has no file name (`/`, `..`).
    #[error("{}: give a file name", .0.display())]
    NoFileName(PathBuf),
    /// Writing it failed (the error names the file).
    #[error("cannot write the CDI spec {0}")]
    Write(#[source] SecureFsError),
}

/// Writes `text` to `file` atomically (the project's one way: [`replace_atomically`]), so a runtime
/// reading the directory sees the old spec or the new one, never a part; its temporary file does not end
/// in `.json`, so runtimes watching the directory ignore it. The file is readable by all (runtimes read
/// it as root; its contents are no secret).
pub fn write_atomic(file: &Path, text: &str) -> Result<(), WriteError> {
    if file.is_dir() {
        return Err(WriteError::IsDirectory(file.to_path_buf()));
    }
    if file.file_name().is_none() {
        return Err(WriteError::NoFileName(file.to_path_buf()));
    }
    replace_atomically(file, 0o644, text.as_bytes()).map_err(WriteError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(ordinal: u32, key: &str) -> Gpu {
        Gpu {
            ordinal,
            key: key.into(),
            memory_total: 1 << 30,
            minor: ordinal,
            numa_node: None,
            bus_id: None,
            healthy: true,
        }
    }

    fn files() -> HostFiles {
        HostFiles {
            region: "/run/tessera/tessera.region".into(),
            socket: "/run/tessera/tessera.sock".into(),
            shim: "/usr/lib/tessera/libtessera.so".into(),
            preload: "/var/lib/tessera/ld.so.preload".into(),
            dev_dir: "/nonexistent-dev".into(),
        }
    }

    fn vgpu(name: &str, device: u32) -> VgpuRef {
        VgpuRef { name: name.into(), device }
    }

    #[test]
    fn device_names() {
        for good in ["k8s-0-1", "a", "GPU-fef8089b-4820", "x.y_z:1", "0"] {
            assert!(valid_device_name(good), "{good}");
        }
        for bad in ["", "_tmp", "a-", ".a", "a/b", "a=b", "a b"] {
            assert!(!valid_device_name(bad), "{bad}");
        }
        assert_eq!(qualified("k8s-0-1"), "tessera.io/vgpu=k8s-0-1");
    }

    #[test]
    fn one_device_per_vgpu_and_per_gpu_name_with_the_same_edits_as_allocate() {
        let gpus = [gpu(0, "GPU-a"), gpu(1, "GPU-b")];
        let vgpus = [vgpu("team", 1), vgpu("_odd", 0), vgpu("gpu0", 0), vgpu("lost", 7)];
        let (s, left_out) = spec(&files(), &gpus, &vgpus, true);
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["team", "gpu0", "GPU-a", "gpu1", "GPU-b"]);
        assert_eq!(left_out.len(), 3, "{left_out:?}");
        assert!(left_out[0].contains("_odd") && left_out[1].contains("device 7") && left_out[2].contains("gpu0"));
        let team = &s.devices[0].container_edits;
        assert_eq!(*team, Edits::from(&for_container(&files(), &gpus[1], Some("team"))));
        assert!(team.env.contains(&"TESSERA_VGPU=team".to_string()));
        assert!(team.env.contains(&"NVIDIA_VISIBLE_DEVICES=GPU-b".to_string()));
        assert_eq!(team.mounts[0].host_path, "/run/tessera");
        assert_eq!(team.mounts[0].options, ["bind", "rw", "nosuid", "nodev"]);
        assert_eq!(team.mounts[1].options[1], "ro");
        let whole = &s.devices[4].container_edits;
        assert!(whole.env.iter().all(|e| !e.starts_with("TESSERA_VGPU=")), "{whole:?}");
        let (only_vgpus, _) = spec(&files(), &gpus, &vgpus[..1], false);
        assert_eq!(only_vgpus.devices.len(), 1);
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!((json["cdiVersion"].as_str(), json["kind"].as_str()), (Some(CDI_VERSION), Some(KIND)));
        assert!(json["devices"][0]["containerEdits"]["deviceNodes"].is_array());
    }

    #[test]
    fn specs_follow_the_cdi_schema_and_broken_ones_are_refused() {
        use crate::cdi_validator::check;
        let dev = std::env::temp_dir().join(format!("tessera-cdi-dev-{}", std::process::id()));
        std::fs::create_dir_all(&dev).unwrap();
        for name in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"] {
            std::fs::write(dev.join(name), b"").unwrap();
        }
        let files = HostFiles { dev_dir: dev.clone(), ..files() };
        let (s, _) = spec(&files, &[gpu(0, "GPU-a"), gpu(1, "GPU-b")], &[vgpu("k8s-1-0", 1), vgpu("team", 0)], true);
        assert!(s.devices.iter().all(|d| d.container_edits.device_nodes.len() == 3), "{s:?}");
        let good: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        check(&good).unwrap_or_else(|e| panic!("the spec does not follow the schema:\n{e}\n{good:#}"));
        let _ = std::fs::remove_dir_all(&dev);

        // The check really refuses: each break alone makes it fail, naming where.
        let broken = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut doc = good.clone();
            edit(&mut doc);
            check(&doc).expect_err(&format!("a broken spec passed: {doc:#}"))
        };
        let says = broken(&|d| d.as_object_mut().unwrap().remove("kind").map(drop).unwrap());
        assert!(says.contains("kind"), "{says}");
        assert!(broken(&|d| d["cdiVersion"] = 8.into()).contains("/cdiVersion"));
        let says = broken(&|d| d["devices"][0].as_object_mut().unwrap().remove("containerEdits").map(drop).unwrap());
        assert!(says.contains("containerEdits"), "{says}");
        let says = broken(&|d| {
            d["devices"][1]["containerEdits"]["mounts"][0].as_object_mut().unwrap().remove("hostPath");
        });
        assert!(says.contains("/devices/1/containerEdits/mounts/0"), "{says}");
        assert!(
            broken(&|d| d["devices"][0]["containerEdits"]["deviceNodes"][0]["major"] = "195".into())
                .contains("deviceNodes/0/major")
        );
        assert!(broken(&|d| d["devices"][0]["containerEdits"]["env"][0] = "NOVALUE".into()).contains("NAME=value"));
    }

    #[test]
    fn specs_are_written_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tessera-cdi-write-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tessera.json");
        write_atomic(&file, "one\n").unwrap();
        write_atomic(&file, "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two\n");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["tessera.json"], "no temporary file is left");
        assert!(write_atomic(&dir, "x").unwrap_err().to_string().contains("is a directory"));
        let e = write_atomic(&dir.join("missing/tessera.json"), "x").unwrap_err().to_string();
        assert!(e.contains("cannot write") && e.contains("missing/tessera.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
