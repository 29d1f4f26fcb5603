//! Mediated devices: creating one (a UUID written to its type's `create`) and removing one (`1` written to
//! `bus/mdev/devices/<uuid>/remove`), refused while a driver holds it. The mdevs Tessera creates are
//! recorded in its state directory, so `reconcile` removes only its own.

use crate::discover;
use crate::state::{MdevRecord, State};
use crate::sysfs::{self, Sysfs};
use crate::{Error, ErrorCode, names};
use std::collections::HashSet;
use tessera_client::devices::Mdev;

/// The UUIDs of the mdevs Tessera recorded as its own.
pub fn created(state: &State) -> Result<HashSet<String>, Error> {
    Ok(state.records()?.into_iter().map(|r| r.uuid).collect())
}

/// Every mdev, marked with whether Tessera created it.
pub fn list(sys: &Sysfs, state: &State) -> Result<Vec<Mdev>, Error> {
    Ok(discover::mdevs(sys, &created(state)?))
}

/// Creates an mdev of `type_id` on `parent` with `uuid` (a random one when `None`), records it, and
/// returns it.
pub fn create(sys: &Sysfs, state: &State, parent: &str, type_id: &str, uuid: Option<&str>) -> Result<Mdev, Error> {
    let parent = names::pci_address(parent)?;
    let uuid = match uuid {
        Some(u) => names::mdev_uuid(u)?,
        None => names::random_uuid()?,
    };
    if !sys.pci_device(&parent).exists() {
        return Err(Error::new(ErrorCode::NotFound, format!("no PCI device {parent}")));
    }
    let types = discover::mdev_types(sys, &parent);
    let Some(ty) = types.iter().find(|t| t.type_id == type_id) else {
        let known: Vec<&str> = types.iter().map(|t| t.type_id.as_str()).collect();
        let offered =
            if known.is_empty() { "it offers none".to_string() } else { format!("it offers {}", known.join(", ")) };
        return Err(Error::new(ErrorCode::NotFound, format!("{parent} has no mdev type \"{type_id}\" ({offered})")));
    };
    if ty.available_instances == 0 {
        return Err(Error::new(
            ErrorCode::ResourceExhausted,
            format!("mdev type {type_id} on {parent} has no instance available"),
        ));
    }
    let create = sys.pci_device(&parent).join("mdev_supported_types").join(type_id).join("create");
    if !sysfs::writable(&create) {
        return Err(Error::new(
            ErrorCode::PermissionDenied,
            format!("needs root: {} is not writable by this process; nothing done", create.display()),
        ));
    }
    if std::fs::symlink_metadata(sys.path("bus/mdev/devices").join(&uuid)).is_ok() {
        return Err(Error::new(ErrorCode::AlreadyExists, format!("an mdev {uuid} exists already; nothing done")));
    }
    // Recorded before the kernel makes it: a daemon killed in between leaves a record that `reconcile`
    // settles (dropped if the mdev never came, the mdev removed if nothing uses it), never an mdev nobody
    // knows Tessera made.
    let mut records = state.records()?;
    records.push(MdevRecord { uuid: uuid.clone(), parent: parent.clone(), type_id: type_id.into() });
    state.save_records(&records)?;
    if let Err(e) = sysfs::write_attr(&create, &uuid) {
        records.pop();
        let kept = match state.save_records(&records) {
            Ok(()) => String::new(),
            Err(r) => format!(" (its record stays until `tessera devices reconcile` drops it: {r})"),
        };
        return Err(Error::new(e.code, format!("{e}{kept}")));
    }
    Ok(Mdev { uuid, parent, type_id: type_id.into(), in_use: false, tessera_created: true })
}

/// The `remove` attribute of mdev `uuid`.
fn remove_path(sys: &Sysfs, uuid: &str) -> std::path::PathBuf {
    sys.path("bus/mdev/devices").join(uuid).join("remove")
}

/// Removes mdev `uuid` unless a driver holds it (a virtual machine uses it), and drops its record.
pub fn remove(sys: &Sysfs, state: &State, uuid: &str) -> Result<(), Error> {
    let uuid = names::mdev_uuid(uuid)?;
    let dir = sys.path("bus/mdev/devices").join(&uuid);
    if std::fs::symlink_metadata(&dir).is_err() {
        return Err(Error::new(ErrorCode::NotFound, format!("no mdev {uuid}")));
    }
    if let Some(driver) = sysfs::link_name(&dir.join("driver")) {
        return Err(Error::new(
            ErrorCode::InUse,
            format!("mdev {uuid} is in use (bound to driver {driver}: a virtual machine holds it); stop it first"),
        ));
    }
    let remove = remove_path(sys, &uuid);
    if !sysfs::writable(&remove) {
        return Err(Error::new(
            ErrorCode::PermissionDenied,
            format!("needs root: {} is not writable by this process; nothing done", remove.display()),
        ));
    }
    sysfs::write_attr(&remove, "1")?;
    forget(state, &uuid)
}

/// Drops the record of mdev `uuid`, if there is one.
pub fn forget(state: &State, uuid: &str) -> Result<(), Error> {
    let mut records = state.records()?;
    let before = records.len();
    records.retain(|r| r.uuid != uuid);
    if records.len() != before {
        state.save_records(&records)?;
    }
    Ok(())
}
