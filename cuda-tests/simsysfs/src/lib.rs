//! A simulated sysfs and a simulated kernel reacting to writes into it, so the product's real
//! sysfs-writing code (one `open(O_WRONLY)` + one `write(2)`) can be tested without root or hardware.
//!
//! Tests build a tree with [`SimSysfs`] (or a ready-made host from [`scenarios`]) in a directory they own,
//! then run the product with `LD_PRELOAD=`[`preload_library()`] and `SIMSYSFS_ROOT` (and the product's
//! `TESSERA_SYSFS_ROOT`) set to that directory. The preload library turns each `write(2)` to a kernel
//! attribute under the root into a call to [`kernel::store`]; reads and `readlink` see the plain files.
//!
//! Simulated, as Linux behaves (`drivers/base/bus.c`, `drivers/pci/pci-driver.c`, `pci-sysfs.c`,
//! `drivers/vfio/mdev/mdev_sysfs.c`, `mdev_core.c`):
//! - the layout: `devices/pci0000:00/<addr>/` with `vendor`, `device`, `class`, `subsystem_*`,
//!   `numa_node`, `driver_override` (`(null)`), relative `iommu_group`, `driver`, `physfn`/`virtfnN`
//!   links, `bus/pci/{devices,drivers}`, `kernel/iommu_groups/N/devices`, mdev types and devices,
//!   `class/mdev_bus`, `bus/mdev/devices`; attribute modes 0200 (write-only), 0444, 0644;
//! - `bind` (ENODEV: no such device or the driver does not match it, checked first; EBUSY: already
//!   bound, as kernels since 5.13 answer), `unbind` (ENODEV unless bound to that driver), `new_id`
//!   (EINVAL, EEXIST; binds unbound matching devices), `drivers_probe` (ENODEV; binds to the override,
//!   else the default driver, else the first registered driver that matches), `driver_override` (up to
//!   the first newline; empty clears; EINVAL from a page on), mdev `create` (EINVAL, EEXIST, EUSERS) and
//!   `remove` (EINVAL unless a number; `0` is a no-op and any other number removes, as `kstrtoul` +
//!   `remove_store` do, where the contract said "EINVAL for another value"); device names are
//!   matched as `sysfs_streq` does (a trailing newline is fine); an empty write returns 0 untouched;
//! - faults injected with [`SimSysfs::inject`]: an errno, or SIGKILL of the writer (a crash midway).
//!
//! Not simulated, or simulated differently:
//! - an mdev in use: Linux's `remove` blocks until the VFIO user closes the device; the simulator
//!   answers EBUSY at once, and "in use" means the mdev has a `driver` link
//!   ([`SimSysfs::set_mdev_in_use`]);
//! - writes to read-only attributes: Linux refuses the `open` for writing (EACCES, even for root); the
//!   simulator cannot see `open`, so root's `open` succeeds and the `write` fails with EACCES;
//! - `sriov_numvfs` writes (creating/destroying VFs) answer EOPNOTSUPP; `remove_id`, `rescan`, `remove`
//!   of PCI devices, uevents, `power/`, `subsystem` links and bridges between host and device are absent;
//! - which driver wins a probe is decided by the device's default driver (then the skeleton's driver
//!   order), not by module load order; `vfio-pci` has no id table of its own (no `ids=` option);
//! - `/dev/vfio/N` group nodes, `iommu_groups/N/type` and `reserved_regions` are absent;
//! - vendor-driver policy on mdev types (e.g. one vGPU per SR-IOV VF making the other types of that VF
//!   show 0) is not modelled: each type counts its own `available_instances`;
//! - only `write(2)` is interposed (not `pwrite`, `writev`, or raw syscalls): the product writes with
//!   `File::write`, which is `write(2)`;
//! - the simulator's own state (`.simsysfs/`: default drivers, dynamic ids, faults, a lock serialising
//!   writers like the kernel's device lock) lives under the root and is left out of [`SimSysfs::listing`].

pub mod faults;
pub mod kernel;
pub mod layout;
pub mod scenarios;
mod spec;
mod tree;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub use faults::Fault;
pub use spec::{MdevTypeSpec, PciSpec};
pub use tree::{SimSysfs, valid_address};

/// Environment variable naming the simulated sysfs root the preload library acts on.
pub const ROOT_ENV: &str = "SIMSYSFS_ROOT";
/// File name of the built preload library.
pub const PRELOAD_FILE: &str = "libsimsysfs.so";

/// What the simulated kernel does with one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// The file is no kernel attribute: the write goes to the real file.
    NotAttribute,
    /// The write succeeds with its full count.
    Done,
    /// The write fails with this errno.
    Failed(kernel::Errno),
    /// An injected fault: the writer is to be killed with SIGKILL now.
    Kill,
}

/// Handles a write of `data` to the file at `rel` (relative to `root`; both resolved, no links): queued
/// faults first, then the attribute's effect. Writers are serialised by a lock file under the root.
pub fn on_write(root: &Path, rel: &Path, data: &[u8]) -> Reaction {
    let Some(attr) = kernel::Attribute::classify(rel) else {
        return Reaction::NotAttribute;
    };
    if data.is_empty() {
        // sysfs returns 0 for an empty write before any store function runs.
        return Reaction::Done;
    }
    let state = root.join(layout::STATE_DIR);
    let open_lock = || fs::OpenOptions::new().create(true).truncate(false).write(true).open(state.join("lock"));
    // A tree laid out without `SimSysfs::new` has no state folder yet.
    let lock = open_lock().or_else(|_| fs::create_dir_all(&state).and_then(|_| open_lock()));
    let Ok(lock) = lock else {
        return Reaction::Failed(libc::EIO);
    };
    // SAFETY: flock on a descriptor we own for the duration of the call; it is released when `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Reaction::Failed(libc::EIO);
    }
    match faults::take(root, &rel.to_string_lossy()) {
        Ok(Some(Fault::Kill)) => return Reaction::Kill,
        Ok(Some(Fault::Errno(e))) => return Reaction::Failed(e),
        Ok(None) => {}
        Err(_) => return Reaction::Failed(libc::EIO),
    }
    match kernel::store(root, &attr, data) {
        Ok(()) => Reaction::Done,
        Err(e) => Reaction::Failed(e),
    }
}

/// The built preload library `libsimsysfs.so`, found where `simgpu_host::libdir::find_build_dir` finds the
/// simulated driver (beside the test binary or its parent, or `TESSERA_LIB_DIR`). Panics with the build
/// command when it is missing (never a silent skip).
pub fn preload_library() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut candidates: Vec<PathBuf> = simgpu_host::libdir::find_build_dir(&exe).into_iter().collect();
    // Without the simulated driver built (only `-p simsysfs-preload`), look where cargo puts it anyway.
    candidates.extend(exe.ancestors().skip(1).take(2).map(Path::to_path_buf));
    let found = candidates.iter().map(|d| d.join(PRELOAD_FILE)).find(|l| l.is_file());
    let lib = found.unwrap_or_else(|| {
        panic!(
            "{PRELOAD_FILE} not found in {candidates:?}; run `cargo build --release -p simsysfs-preload` \
             (or the whole workspace) before the tests"
        )
    });
    // `cargo test -p simsysfs` rebuilds the kernel into the test binary but not into the preload library:
    // a library older than the sources would test yesterday's kernel.
    let built = fs::metadata(&lib).and_then(|m| m.modified()).expect("preload library mtime");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some((_, newer)) = newest_source(&[src.join("src"), src.join("preload/src")]).filter(|(t, _)| *t > built) {
        panic!(
            "{} is older than {}; rebuild it with `cargo build --release -p simsysfs-preload`",
            lib.display(),
            newer.display()
        );
    }
    lib
}

/// The most recently modified file under `dirs`, with its time (`bin/` left out: the helper binaries are
/// not part of the library, and cargo does not relink it when they change).
fn newest_source(dirs: &[PathBuf]) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().filter_map(Result::ok) {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if entry.file_name() != "bin" {
                    stack.push(entry.path());
                }
            } else if let Ok(t) = meta.modified()
                && newest.as_ref().is_none_or(|(n, _)| t > *n)
            {
                newest = Some((t, entry.path()));
            }
        }
    }
    newest
}

/// A small `pci.ids` (our own entries for the scenarios' ids) to give as `TESSERA_PCI_IDS`.
pub fn pci_ids_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/pci.ids")
}
