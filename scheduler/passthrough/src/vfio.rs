//! Moving a GPU's whole IOMMU group to `vfio-pci` and back, with the kernel's sequences:
//! bind = the address to `drivers/<current>/unbind`, `vfio-pci` to `driver_override`, the address to
//! `drivers/vfio-pci/bind`; unbind = clear `driver_override`, the address to `drivers/vfio-pci/unbind`,
//! then to `drivers_probe` (the kernel binds the function's own driver again).
//!
//! Nothing is half done: a preflight checks every member is a known device and every attribute the
//! sequence (and its undoing) writes is writable before anything is written; the members' bindings are
//! journalled ([`crate::state`]) before the first write; a failure midway puts every member back as it
//! was, and a writer killed midway is undone by [`crate::reconcile`].

use crate::discover::{self, VFIO_DRIVER};
use crate::state::{Binding, FORMAT, Journal, State};
use crate::sysfs::{self, Sysfs};
use crate::{Error, ErrorCode, names};
use std::path::PathBuf;
use tessera_client::devices::BindReport;

/// The IOMMU group of the device at `address` (checked, normalised) and every member's binding now.
pub fn group_of(sys: &Sysfs, address: &str) -> Result<(u32, Vec<Binding>), Error> {
    let address = names::pci_address(address)?;
    if !sys.pci_device(&address).exists() {
        return Err(Error::new(
            ErrorCode::NotFound,
            format!("no PCI device {address} (nothing at {})", sys.pci_device(&address).display()),
        ));
    }
    let group = discover::iommu_group(sys, &address).ok_or_else(|| {
        Error::new(
            ErrorCode::Invalid,
            format!(
                "{address} has no IOMMU group: the IOMMU is off, so it cannot be given to a virtual machine (boot \
                 with intel_iommu=on or amd_iommu=on)"
            ),
        )
    })?;
    let members = discover::group_members(sys, group);
    let mut bindings = Vec::new();
    for member in &members {
        // A member Tessera cannot read is one it cannot put back: the whole group is refused.
        if discover::function(sys, &Default::default(), member).is_none() {
            return Err(Error::new(
                ErrorCode::Invalid,
                format!(
                    "IOMMU group {group} of {address} lists {member}, which is not a readable PCI device; nothing done"
                ),
            ));
        }
        bindings.push(Binding {
            address: member.clone(),
            driver: discover::driver(sys, member),
            driver_override: discover::driver_override(sys, member),
        });
    }
    if !members.contains(&address) {
        return Err(Error::new(
            ErrorCode::Invalid,
            format!("IOMMU group {group} does not list {address} among its devices; nothing done"),
        ));
    }
    Ok((group, bindings))
}

/// One write of a sequence.
type Step = (PathBuf, String);

/// Binds every function of `address`'s IOMMU group to `vfio-pci`.
pub fn bind(sys: &Sysfs, state: &State, address: &str) -> Result<BindReport, Error> {
    let (group, before) = group_of(sys, address)?;
    let mut steps: Vec<Step> = Vec::new();
    let mut undo: Vec<PathBuf> = Vec::new();
    for m in before.iter().filter(|m| m.driver.as_deref() != Some(VFIO_DRIVER)) {
        let dev = sys.pci_device(&m.address);
        if let Some(driver) = &m.driver {
            steps.push((sys.pci_driver(driver).join("unbind"), m.address.clone()));
            undo.push(sys.pci_driver(driver).join("bind"));
        }
        steps.push((dev.join("driver_override"), VFIO_DRIVER.into()));
        steps.push((sys.pci_driver(VFIO_DRIVER).join("bind"), m.address.clone()));
    }
    undo.push(sys.pci_driver(VFIO_DRIVER).join("unbind"));
    if !sys.pci_driver(VFIO_DRIVER).is_dir() {
        return Err(Error::new(
            ErrorCode::Unavailable,
            format!(
                "the vfio-pci driver is not loaded ({} is missing): modprobe vfio-pci",
                sys.pci_driver(VFIO_DRIVER).display()
            ),
        ));
    }
    carry_out(sys, state, "bind-vfio", group, before, steps, undo)
}

/// Gives every function of `address`'s IOMMU group bound to `vfio-pci` back to its own driver.
pub fn unbind(sys: &Sysfs, state: &State, address: &str) -> Result<BindReport, Error> {
    let (group, before) = group_of(sys, address)?;
    let address = names::pci_address(address)?;
    let on_vfio =
        |m: &Binding| m.driver.as_deref() == Some(VFIO_DRIVER) || m.driver_override.as_deref() == Some(VFIO_DRIVER);
    if !before.iter().any(|m| m.address == address && on_vfio(m)) {
        return Err(Error::new(ErrorCode::Invalid, format!("{address} is not bound to vfio-pci; nothing to unbind")));
    }
    let mut steps: Vec<Step> = Vec::new();
    for m in before.iter().filter(|m| on_vfio(m)) {
        steps.push((sys.pci_device(&m.address).join("driver_override"), "\n".into()));
        if m.driver.as_deref() == Some(VFIO_DRIVER) {
            steps.push((sys.pci_driver(VFIO_DRIVER).join("unbind"), m.address.clone()));
        }
        steps.push((sys.path("bus/pci/drivers_probe"), m.address.clone()));
    }
    let undo = vec![sys.pci_driver(VFIO_DRIVER).join("bind")];
    carry_out(sys, state, "unbind-vfio", group, before, steps, undo)
}

/// Checks, journals and makes `steps`; on a failure puts `before` back.
fn carry_out(
    sys: &Sysfs,
    state: &State,
    op: &str,
    group: u32,
    before: Vec<Binding>,
    steps: Vec<Step>,
    undo: Vec<PathBuf>,
) -> Result<BindReport, Error> {
    preflight(steps.iter().map(|(p, _)| p).chain(&undo))?;
    if !steps.is_empty() {
        state.begin(&Journal { version: FORMAT, op: op.into(), group, members: before.clone() })?;
        for (path, value) in &steps {
            if let Err(e) = sysfs::write_attr(path, value) {
                let problems = restore(sys, &before);
                let ended = state.end();
                let outcome = match (problems.is_empty(), ended) {
                    (true, Ok(())) => "every function of the group was put back as it was".to_string(),
                    (true, Err(j)) => format!("every function was put back, but {j}"),
                    (false, _) => format!(
                        "putting the group back failed too ({}); the journal is kept for `tessera devices reconcile`",
                        problems.join("; ")
                    ),
                };
                return Err(Error::new(e.code, format!("{op} of IOMMU group {group}: {e}; {outcome}")));
            }
        }
        state.end()?;
    }
    let moved = before
        .into_iter()
        .map(|m| {
            let after = discover::driver(sys, &m.address);
            (m.address, m.driver, after)
        })
        .collect();
    Ok(BindReport { iommu_group: group, moved })
}

/// Refuses, before anything is written, when an attribute to write is missing or not writable by this
/// process.
fn preflight<'a>(paths: impl Iterator<Item = &'a PathBuf>) -> Result<(), Error> {
    for path in paths {
        if !path.exists() {
            return Err(Error::new(
                ErrorCode::Unavailable,
                format!("{} does not exist (is the driver loaded?); nothing done", path.display()),
            ));
        }
        if !sysfs::writable(path) {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "needs root: {} is not writable by uid {} (run the Tessera daemon as root to move devices); \
                     nothing done",
                    path.display(),
                    tessera_region::secure_fs::euid()
                ),
            ));
        }
    }
    Ok(())
}

/// Puts every function back to its binding in `before` (its driver and `driver_override`); returns what
/// could not be done. Functions already as they were are left alone, so it can be run again.
pub fn restore(sys: &Sysfs, before: &[Binding]) -> Vec<String> {
    let mut problems = Vec::new();
    for m in before {
        let mut step = |path: PathBuf, value: &str| {
            if let Err(e) = sysfs::write_attr(&path, value) {
                problems.push(format!("{}: {e}", m.address));
            }
        };
        let now = discover::driver(sys, &m.address);
        if now != m.driver
            && let Some(current) = &now
        {
            step(sys.pci_driver(current).join("unbind"), &m.address);
        }
        if discover::driver_override(sys, &m.address) != m.driver_override {
            let value = m.driver_override.clone().unwrap_or_else(|| "\n".into());
            step(sys.pci_device(&m.address).join("driver_override"), &value);
        }
        if discover::driver(sys, &m.address) != m.driver
            && let Some(previous) = &m.driver
        {
            step(sys.pci_driver(previous).join("bind"), &m.address);
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::tests::Tree;

    #[test]
    fn groups_are_read_whole_and_unknown_devices_or_members_refused() {
        let t = Tree::new("vfio-group");
        t.add("0000:10:00.0", 0x10de, 0x1eb8, 0x030200, 7, Some("nvidia"));
        t.add("0000:10:00.1", 0x10de, 0x10f8, 0x040300, 7, None);
        let sys = t.sys();
        let (group, members) = group_of(&sys, "10:00.0").unwrap();
        assert_eq!(group, 7);
        assert_eq!(
            members,
            [
                Binding { address: "0000:10:00.0".into(), driver: Some("nvidia".into()), driver_override: None },
                Binding { address: "0000:10:00.1".into(), driver: None, driver_override: None },
            ]
        );
        assert_eq!(group_of(&sys, "0000:99:00.0").unwrap_err().code, ErrorCode::NotFound);
        assert_eq!(group_of(&sys, "nonsense").unwrap_err().code, ErrorCode::Invalid);
        // A member the group lists but sysfs does not show: the whole group is refused.
        std::os::unix::fs::symlink(
            "../../../../devices/pci0000:00/0000:10:00.2",
            t.root.join("kernel/iommu_groups/7/devices/0000:10:00.2"),
        )
        .unwrap();
        let e = group_of(&sys, "0000:10:00.0").unwrap_err();
        assert!(e.message.contains("0000:10:00.2") && e.message.contains("nothing done"), "{e}");
        // No IOMMU group: the IOMMU is off.
        std::fs::remove_file(t.root.join("devices/pci0000:00/0000:10:00.0/iommu_group")).unwrap();
        assert!(group_of(&sys, "0000:10:00.0").unwrap_err().message.contains("IOMMU is off"));
    }

    #[test]
    fn a_missing_attribute_stops_the_bind_before_any_write_and_no_journal_is_left() {
        let t = Tree::new("vfio-preflight");
        t.add("0000:10:00.0", 0x10de, 0x1eb8, 0x030200, 7, Some("nvidia"));
        std::fs::remove_file(t.root.join("bus/pci/drivers/vfio-pci/unbind")).unwrap();
        let state_dir = t.root.join("state");
        let state = State::open(&state_dir).unwrap();
        let override_file = t.root.join("devices/pci0000:00/0000:10:00.0/driver_override");
        let e = bind(&t.sys(), &state, "0000:10:00.0").unwrap_err();
        assert!(e.message.contains("vfio-pci/unbind") && e.message.contains("nothing done"), "{e}");
        assert_eq!(std::fs::read_to_string(&override_file).unwrap(), "(null)\n", "nothing written");
        assert_eq!(std::fs::read_to_string(t.root.join("bus/pci/drivers/nvidia/unbind")).unwrap(), "");
        assert_eq!(state.journal().unwrap(), None);
        std::fs::remove_dir_all(t.root.join("bus/pci/drivers/vfio-pci")).unwrap();
        let e = bind(&t.sys(), &state, "0000:10:00.0").unwrap_err();
        assert!(e.message.contains("modprobe vfio-pci"), "{e}");
    }
}
