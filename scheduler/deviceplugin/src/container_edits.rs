//! What a container of a vGPU (or of a whole GPU) is given, decided once here and handed out two ways:
//! as kubelet's `Allocate` answer ([`ContainerEdits::allocate_response`]) and as a CDI device
//! ([`crate::cdi`]), so the two can never disagree.
//!
//! - environment: `TESSERA_VGPU` (a vGPU only), `NVIDIA_VISIBLE_DEVICES`, `TESSERA_REGION`,
//!   `TESSERA_SOCKET`;
//! - mounts: the directory (or directories) holding the daemon's region and socket, at the same path as
//!   on the host, so the two variables name valid paths in the container; the shim, read-only; an
//!   `/etc/ld.so.preload` naming the shim, read-only;
//! - device nodes: `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools` and the GPU's `nvidia<minor>`, each only
//!   when it exists on the host (the runtime fails a container whose device node is missing; a machine
//!   without UVM tools, or a test machine, has fewer).
//!
//! The directory is mounted rather than the two files: the daemon makes a new socket file (and may make a
//! new region file) each time it starts, and a bind mount of a single file keeps the file it was made
//! with, so a container would be left talking to a dead socket after a daemon restart.

use crate::config::SHIM_IN_CONTAINER;
use crate::inventory::Gpu;
use crate::v1beta1::{ContainerAllocateResponse, DeviceSpec, Mount};
use std::path::{Path, PathBuf};

/// Where a container's `ld.so.preload` is mounted.
pub const PRELOAD_IN_CONTAINER: &str = "/etc/ld.so.preload";

/// Directories a container has of its own (or the host must keep to itself): a daemon file directly in
/// one of them cannot have its directory mounted into containers.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/dev/shm", "/etc", "/home", "/lib", "/lib64", "/mnt", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/run", "/var/tmp",
];

/// Why the daemon's files cannot be given to containers, or the `ld.so.preload` file cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum HostFilesError {
    /// The region or the socket is a relative path.
    #[error(
        "the daemon's {what} {} ({variable}) is not an absolute path; containers are given its directory at the \
         same path, so give an absolute one",
        .file.display()
    )]
    NotAbsolute {
        /// `region` or `socket`.
        what: &'static str,
        /// The variable that gives it: `TESSERA_REGION` or `TESSERA_SOCKET`.
        variable: &'static str,
        /// The path.
        file: PathBuf,
    },
    /// The region or the socket is directly in a directory containers have of their own.
    #[error(
        "the daemon's {what} {} ({variable}) is directly in {}, which containers have of their own; containers \
         are given the directory holding it, so put it in a directory of its own (the default is \
         /dev/shm/tessera-<uid>/)",
        .file.display(),
        .dir.display()
    )]
    InSystemDir {
        /// `region` or `socket`.
        what: &'static str,
        /// The variable that gives it: `TESSERA_REGION` or `TESSERA_SOCKET`.
        variable: &'static str,
        /// The path.
        file: PathBuf,
        /// The directory holding it.
        dir: PathBuf,
    },
    /// The device nodes' directory is a relative path.
    #[error("--dev-dir {}: give an absolute path", .0.display())]
    DevDirNotAbsolute(PathBuf),
    /// The `ld.so.preload` file (or its directory) cannot be written.
    #[error("cannot write {}: {source}", .file.display())]
    WritePreload {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The host files a container is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFiles {
    /// The daemon's region file.
    pub region: PathBuf,
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The shim.
    pub shim: PathBuf,
    /// The `ld.so.preload` file naming the shim at [`SHIM_IN_CONTAINER`] (see [`write_preload`]).
    pub preload: PathBuf,
    /// The directory holding the GPU device nodes (`/dev`).
    pub dev_dir: PathBuf,
}

impl HostFiles {
    /// Checks that the region's and socket's directories can be mounted into containers: absolute
    /// paths, not directly in a directory such as `/tmp` or `/dev/shm` that a container has of its own.
    pub fn check(&self) -> Result<(), HostFilesError> {
        for (what, variable, file) in
            [("region", "TESSERA_REGION", &self.region), ("socket", "TESSERA_SOCKET", &self.socket)]
        {
            if !file.is_absolute() {
                return Err(HostFilesError::NotAbsolute { what, variable, file: file.clone() });
            }
            let dir = parent(file);
            if SYSTEM_DIRS.iter().any(|s| Path::new(s) == dir) {
                return Err(HostFilesError::InSystemDir { what, variable, file: file.clone(), dir });
            }
        }
        if !self.dev_dir.is_absolute() {
            return Err(HostFilesError::DevDirNotAbsolute(self.dev_dir.clone()));
        }
        Ok(())
    }

    /// The directories to mount for the region and the socket: one when they share it (the default), the
    /// outer one when one holds the other, else both.
    pub fn daemon_dirs(&self) -> Vec<PathBuf> {
        let (a, b) = (parent(&self.region), parent(&self.socket));
        if b.starts_with(&a) {
            vec![a]
        } else if a.starts_with(&b) {
            vec![b]
        } else {
            vec![a, b]
        }
    }
}

/// The directory holding `file` (`/` for a file there; `.` for a bare relative name).
fn parent(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("/"),
    }
}

/// A bind mount of a host file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditMount {
    /// The path on the host.
    pub host: PathBuf,
    /// The path in the container.
    pub container: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// A device node given to the container, read and write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditNode {
    /// The node on the host.
    pub host: PathBuf,
    /// Its path in the container (`/dev/...`).
    pub container: String,
}

/// Everything a container is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEdits {
    /// Environment variables, in order.
    pub env: Vec<(String, String)>,
    /// Bind mounts.
    pub mounts: Vec<EditMount>,
    /// Device nodes.
    pub device_nodes: Vec<EditNode>,
}

/// The device nodes a container of a GPU with minor number `minor` needs, those of them that exist in
/// `dev_dir`; each at `/dev/<name>` in the container.
pub fn device_nodes(dev_dir: &Path, minor: u32) -> Vec<EditNode> {
    ["nvidiactl".to_string(), "nvidia-uvm".into(), "nvidia-uvm-tools".into(), format!("nvidia{minor}")]
        .into_iter()
        .map(|name| EditNode { host: dev_dir.join(&name), container: format!("/dev/{name}") })
        .filter(|node| node.host.exists())
        .collect()
}

/// What a container on `gpu` is given: of vGPU `vgpu` (joined by its processes), or, without one, of the
/// GPU itself (the shim is loaded but holds the processes to nothing until they name a vGPU).
pub fn for_container(files: &HostFiles, gpu: &Gpu, vgpu: Option<&str>) -> ContainerEdits {
    let text = |p: &Path| p.to_string_lossy().into_owned();
    let mut env = Vec::with_capacity(4);
    if let Some(name) = vgpu {
        env.push(("TESSERA_VGPU".to_string(), name.to_string()));
    }
    env.push(("NVIDIA_VISIBLE_DEVICES".into(), gpu.key.clone()));
    env.push(("TESSERA_REGION".into(), text(&files.region)));
    env.push(("TESSERA_SOCKET".into(), text(&files.socket)));
    let mut mounts: Vec<EditMount> = files
        .daemon_dirs()
        .into_iter()
        .map(|dir| EditMount { container: text(&dir), host: dir, read_only: false })
        .collect();
    mounts.push(EditMount { host: files.shim.clone(), container: SHIM_IN_CONTAINER.into(), read_only: true });
    mounts.push(EditMount { host: files.preload.clone(), container: PRELOAD_IN_CONTAINER.into(), read_only: true });
    ContainerEdits { env, mounts, device_nodes: device_nodes(&files.dev_dir, gpu.minor) }
}

impl ContainerEdits {
    /// The edits as kubelet's answer for one container (without CDI device names).
    pub fn allocate_response(&self) -> ContainerAllocateResponse {
        ContainerAllocateResponse {
            envs: self.env.iter().cloned().collect(),
            mounts: self
                .mounts
                .iter()
                .map(|m| Mount {
                    container_path: m.container.clone(),
                    host_path: m.host.to_string_lossy().into_owned(),
                    read_only: m.read_only,
                })
                .collect(),
            devices: self
                .device_nodes
                .iter()
                .map(|n| DeviceSpec {
                    container_path: n.container.clone(),
                    host_path: n.host.to_string_lossy().into_owned(),
                    permissions: "rw".into(),
                })
                .collect(),
            annotations: Default::default(),
            cdi_devices: Vec::new(),
        }
    }
}

/// The `ld.so.preload` a container gets: the shim at its container path.
pub fn preload_contents() -> String {
    format!("{SHIM_IN_CONTAINER}\n")
}

/// Writes `files.preload` (creating its directory) unless it already says [`preload_contents`].
pub fn write_preload(files: &HostFiles) -> Result<(), HostFilesError> {
    let file = &files.preload;
    if std::fs::read_to_string(file).is_ok_and(|now| now == preload_contents()) {
        return Ok(());
    }
    let dir = parent(file);
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(file, preload_contents()))
        .map_err(|source| HostFilesError::WritePreload { file: file.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> HostFiles {
        HostFiles {
            region: "/dev/shm/tessera-0/tessera.region".into(),
            socket: "/dev/shm/tessera-0/tessera.sock".into(),
            shim: "/usr/lib/tessera/libtessera.so".into(),
            preload: "/var/lib/tessera/ld.so.preload".into(),
            dev_dir: dir.into(),
        }
    }

    fn gpu(minor: u32) -> Gpu {
        Gpu {
            ordinal: 1,
            key: "GPU-b".into(),
            memory_total: 1 << 30,
            minor,
            numa_node: None,
            bus_id: None,
            healthy: true,
        }
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-edits-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_daemons_directory_is_mounted_and_the_variables_name_files_in_it() {
        let f = files(Path::new("/nonexistent-dev"));
        let e = for_container(&f, &gpu(3), Some("k8s-1-0"));
        let env: Vec<(&str, &str)> = e.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            env,
            [
                ("TESSERA_VGPU", "k8s-1-0"),
                ("NVIDIA_VISIBLE_DEVICES", "GPU-b"),
                ("TESSERA_REGION", "/dev/shm/tessera-0/tessera.region"),
                ("TESSERA_SOCKET", "/dev/shm/tessera-0/tessera.sock"),
            ]
        );
        let dir = &e.mounts[0];
        assert_eq!(
            (dir.host.to_str(), dir.container.as_str(), dir.read_only),
            (Some("/dev/shm/tessera-0"), "/dev/shm/tessera-0", false)
        );
        for (_, path) in &env[2..] {
            assert!(Path::new(path).starts_with(&dir.container), "{path} is not in a mounted directory");
        }
        assert_eq!(e.mounts[1].container, SHIM_IN_CONTAINER);
        assert_eq!(e.mounts[2].container, PRELOAD_IN_CONTAINER);
        assert!(e.mounts[1].read_only && e.mounts[2].read_only);
        assert!(e.device_nodes.is_empty(), "no node exists in {:?}", f.dev_dir);
        assert!(for_container(&f, &gpu(3), None).env.iter().all(|(k, _)| k != "TESSERA_VGPU"));

        let r = e.allocate_response();
        assert_eq!(r.envs["TESSERA_VGPU"], "k8s-1-0");
        assert_eq!(r.mounts.len(), 3);
        assert!(r.cdi_devices.is_empty());
    }

    #[test]
    fn region_and_socket_in_two_places_get_two_mounts_or_the_outer_one() {
        let mut f = files(Path::new("/dev"));
        f.socket = "/run/tessera/tessera.sock".into();
        assert_eq!(f.daemon_dirs(), [PathBuf::from("/dev/shm/tessera-0"), "/run/tessera".into()]);
        f.socket = "/dev/shm/tessera-0/sub/tessera.sock".into();
        assert_eq!(f.daemon_dirs(), [PathBuf::from("/dev/shm/tessera-0")]);
        f.region = "/dev/shm/tessera-0/sub/deeper/tessera.region".into();
        assert_eq!(f.daemon_dirs(), [PathBuf::from("/dev/shm/tessera-0/sub")]);
    }

    #[test]
    fn daemon_files_whose_directory_cannot_be_mounted_are_refused() {
        files(Path::new("/dev")).check().unwrap();
        for (region, says) in [
            ("tessera.region", "not an absolute path"),
            ("/dev/shm/tessera.region", "directly in /dev/shm"),
            ("/tmp/tessera.region", "directly in /tmp"),
            ("/tessera.region", "directly in /,"),
        ] {
            let f = HostFiles { region: region.into(), ..files(Path::new("/dev")) };
            let e = f.check().expect_err(region).to_string();
            assert!(e.contains(says) && e.contains("TESSERA_REGION"), "{region}: {e}");
        }
        let f = HostFiles { socket: "/var/run/tessera.sock".into(), ..files(Path::new("/dev")) };
        assert!(f.check().unwrap_err().to_string().contains("TESSERA_SOCKET"));
        assert!(files(Path::new("dev")).check().unwrap_err().to_string().contains("--dev-dir"));
    }

    #[test]
    fn only_device_nodes_that_exist_on_the_host_are_given() {
        let dev = temp_dir("nodes");
        for name in ["nvidiactl", "nvidia-uvm", "nvidia0", "nvidia3"] {
            std::fs::write(dev.join(name), b"").unwrap();
        }
        let names = |minor| device_nodes(&dev, minor).into_iter().map(|n| (n.container, n.host)).collect::<Vec<_>>();
        assert_eq!(
            names(3),
            [
                ("/dev/nvidiactl".to_string(), dev.join("nvidiactl")),
                ("/dev/nvidia-uvm".into(), dev.join("nvidia-uvm")),
                ("/dev/nvidia3".into(), dev.join("nvidia3")),
            ]
        );
        assert_eq!(names(1).len(), 2, "no nvidia1 on this host");
        std::fs::write(dev.join("nvidia-uvm-tools"), b"").unwrap();
        assert!(names(3).iter().any(|(c, _)| c == "/dev/nvidia-uvm-tools"));
        let r = for_container(&files(&dev), &gpu(0), Some("v")).allocate_response();
        assert_eq!(r.devices.len(), 4);
        assert!(r.devices.iter().all(|d| d.permissions == "rw" && d.host_path.starts_with(dev.to_str().unwrap())));
        let _ = std::fs::remove_dir_all(&dev);
    }

    #[test]
    fn the_preload_file_is_written_once_naming_the_shim() {
        let dir = temp_dir("preload");
        let f = HostFiles { preload: dir.join("state/ld.so.preload"), ..files(Path::new("/dev")) };
        write_preload(&f).unwrap();
        assert_eq!(std::fs::read_to_string(&f.preload).unwrap(), format!("{SHIM_IN_CONTAINER}\n"));
        write_preload(&f).unwrap();
        let bad = HostFiles { preload: "/proc/nonexistent/ld.so.preload".into(), ..f };
        assert!(write_preload(&bad).unwrap_err().to_string().contains("cannot write /proc/nonexistent/ld.so.preload"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
