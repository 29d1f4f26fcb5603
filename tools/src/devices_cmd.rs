//! `tessera devices ...` and `tessera mdev ...`: the host's GPUs for virtual machines, through the daemon's
//! API (`TESSERA_SOCKET`): listing them with the mode each is in, binding a GPU's IOMMU group to `vfio-pci`
//! and back, mdev types, mdevs, and reconciling. Addresses and UUIDs are checked here first (a malformed
//! one is a usage error, status 2); the daemon checks the rest (status 1).

use clap::{Args, Subcommand};
use tessera_client::{BindReport, Client, Gpu, Mdev, MdevType, PciFunction, ReconcileReport};
use tessera_host::paths::{self, PathError};
use tessera_passthrough::names;

/// Why `tessera devices ...` or `tessera mdev ...` failed (a malformed address or UUID is refused by clap
/// with [`names`]' error before this).
#[derive(Debug, thiserror::Error)]
pub enum DevicesError {
    /// The daemon's socket cannot be told (`TESSERA_SOCKET`).
    #[error(transparent)]
    Socket(#[from] PathError),
    /// The daemon refused the request, or could not be reached.
    #[error(transparent)]
    Daemon(#[from] tessera_client::Error),
    /// The reply could not be printed as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// `tessera devices`: the listing, or one of its subcommands.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DevicesArgs {
    /// Print JSON (an array of objects) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Option<DevicesCommand>,
}

/// Subcommands of `tessera devices`.
#[derive(Subcommand)]
pub enum DevicesCommand {
    /// Bind the GPU's whole IOMMU group to vfio-pci, for a virtual machine (refused while Tessera's
    /// tenants use a GPU of the group; needs root).
    BindVfio {
        /// The GPU's PCI address (`0000:10:00.0`).
        #[arg(value_parser = address_value)]
        address: String,
    },
    /// Give the GPU's IOMMU group back from vfio-pci to its own drivers.
    UnbindVfio {
        /// The GPU's PCI address.
        #[arg(value_parser = address_value)]
        address: String,
    },
    /// Undo an interrupted bind, remove unused mdevs Tessera created, drop records of vanished ones.
    Reconcile,
}

/// Subcommands of `tessera mdev`.
#[derive(Subcommand)]
pub enum MdevCommand {
    /// Every mdev type the host's devices offer, with free instances.
    Types {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Every mdev.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create an mdev (recorded as Tessera's: `tessera devices reconcile` removes it once unused).
    Create {
        /// Its parent device's PCI address.
        #[arg(long, value_parser = address_value)]
        parent: String,
        /// Its type (`tessera mdev types` lists them).
        #[arg(long = "type")]
        type_id: String,
        /// Its UUID (a random one when absent).
        #[arg(long, value_parser = uuid_value)]
        uuid: Option<String>,
    },
    /// Remove an mdev (refused while a virtual machine uses it).
    Rm {
        /// Its UUID.
        #[arg(value_parser = uuid_value)]
        uuid: String,
    },
}

/// A PCI address, in the form sysfs names it ([`names::pci_address`]; its error says what one looks like).
fn address_value(text: &str) -> Result<String, tessera_client::Error> {
    names::pci_address(text)
}

/// An mdev UUID, in the form the kernel shows ([`names::mdev_uuid`]).
fn uuid_value(text: &str) -> Result<String, tessera_client::Error> {
    names::mdev_uuid(text)
}

/// `value` as pretty JSON, with a final newline.
fn json<T: serde::Serialize>(value: &T) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

/// Runs `tessera devices ...`.
pub fn run_devices(args: DevicesArgs) -> Result<(), DevicesError> {
    let client = Client::new(paths::socket()?);
    let out = match args.command {
        None if args.json => json(&client.devices()?)?,
        None => table(&client.devices()?),
        Some(DevicesCommand::BindVfio { address }) => moved(&client.vfio(&address, true)?, "bound to vfio-pci"),
        Some(DevicesCommand::UnbindVfio { address }) => moved(&client.vfio(&address, false)?, "given back"),
        Some(DevicesCommand::Reconcile) => reconciled(&client.reconcile()?),
    };
    print!("{out}");
    Ok(())
}

/// Runs `tessera mdev ...`.
pub fn run_mdev(command: MdevCommand) -> Result<(), DevicesError> {
    let client = Client::new(paths::socket()?);
    let out = match command {
        MdevCommand::Types { json: true } => json(&client.mdev_types()?)?,
        MdevCommand::Types { json: false } => types_table(&client.mdev_types()?),
        MdevCommand::List { json: true } => json(&client.mdev_list()?)?,
        MdevCommand::List { json: false } => mdevs_table(&client.mdev_list()?),
        MdevCommand::Create { parent, type_id, uuid } => {
            let m = client.mdev_create(&parent, &type_id, uuid.as_deref())?;
            format!("created mdev {} ({} on {})\n", m.uuid, m.type_id, m.parent)
        }
        MdevCommand::Rm { uuid } => {
            client.mdev_remove(&uuid)?;
            format!("mdev {uuid} removed\n")
        }
    };
    print!("{out}");
    Ok(())
}

/// `10de:1eb8 NVIDIA Corporation TU104GL [Tesla T4]`.
fn ids(f: &PciFunction) -> String {
    let names: Vec<&str> = [f.vendor_name.as_deref(), f.device_name.as_deref()].into_iter().flatten().collect();
    format!("{:04x}:{:04x} {}", f.vendor, f.device, names.join(" ")).trim_end().to_string()
}

/// The listing as a table, a line per GPU.
fn table(gpus: &[Gpu]) -> String {
    if gpus.is_empty() {
        return "no GPUs found in sysfs (TESSERA_SYSFS_ROOT names another tree than /sys?)\n".into();
    }
    let dash = || "-".to_string();
    let mut rows = vec![
        ["ADDRESS", "IDS", "DRIVER", "NUMA", "IOMMU GROUP", "SR-IOV", "MDEV TYPES (FREE)", "MODE"].map(String::from),
    ];
    for g in gpus {
        let f = &g.function;
        let group = match f.iommu_group {
            Some(n) => {
                let members: Vec<String> = g
                    .group
                    .iter()
                    .map(|m| format!("{} ({})", m.address, m.driver.as_deref().unwrap_or("no driver")))
                    .collect();
                format!("{n}: {}", members.join(", "))
            }
            None => "none (IOMMU off)".into(),
        };
        let sriov = match (&g.physfn, g.vfs.len()) {
            (Some(pf), _) => format!("VF of {pf}"),
            (None, 0) => dash(),
            (None, n) => format!("PF, {n} VF(s)"),
        };
        let types = if g.mdev_types.is_empty() {
            dash()
        } else {
            g.mdev_types
                .iter()
                .map(|t| format!("{} ({})", t.type_id, t.available_instances))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mode = match &g.mode_detail {
            Some(d) => format!("{} ({d})", g.mode.as_str()),
            None => g.mode.as_str().to_string(),
        };
        rows.push([
            f.address.clone(),
            ids(f),
            f.driver.clone().unwrap_or_else(dash),
            f.numa_node.map_or_else(dash, |n| n.to_string()),
            group,
            sriov,
            types,
            mode,
        ]);
    }
    render(&rows)
}

/// Rows padded into columns.
fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

fn types_table(types: &[MdevType]) -> String {
    if types.is_empty() {
        return "no mdev types: no device offers mediated devices\n".into();
    }
    let mut rows = vec![["PARENT", "TYPE", "NAME", "FREE", "API", "DESCRIPTION"].map(String::from)];
    for t in types {
        rows.push([
            t.parent.clone(),
            t.type_id.clone(),
            t.name.clone(),
            t.available_instances.to_string(),
            t.device_api.clone(),
            t.description.clone(),
        ]);
    }
    render(&rows)
}

fn mdevs_table(mdevs: &[Mdev]) -> String {
    if mdevs.is_empty() {
        return "no mdevs; create one with `tessera mdev create --parent ADDR --type TYPE`\n".into();
    }
    let mut rows = vec![["UUID", "PARENT", "TYPE", "IN USE", "CREATED BY"].map(String::from)];
    for m in mdevs {
        rows.push([
            m.uuid.clone(),
            m.parent.clone(),
            m.type_id.clone(),
            if m.in_use { "yes" } else { "no" }.into(),
            if m.tessera_created { "tessera" } else { "other" }.into(),
        ]);
    }
    render(&rows)
}

fn moved(report: &BindReport, what: &str) -> String {
    let mut out = format!("IOMMU group {} {what}:\n", report.iommu_group);
    for (address, before, after) in &report.moved {
        let d = |d: &Option<String>| d.clone().unwrap_or_else(|| "no driver".into());
        out += &format!("  {address}: {} -> {}\n", d(before), d(after));
    }
    out
}

fn reconciled(r: &ReconcileReport) -> String {
    if r.is_empty() {
        return "nothing to reconcile\n".into();
    }
    let mut out = String::new();
    for (what, list) in [
        ("rolled back an interrupted bind of", &r.rolled_back),
        ("removed orphan mdev(s)", &r.orphans_removed),
        ("dropped records of vanished mdev(s)", &r.records_dropped),
        ("could not", &r.problems),
    ] {
        if !list.is_empty() {
            out += &format!("{what}: {}\n", list.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Top,
    }

    #[derive(Subcommand)]
    enum Top {
        Devices(DevicesArgs),
        Mdev {
            #[command(subcommand)]
            command: MdevCommand,
        },
    }

    #[test]
    fn addresses_and_uuids_are_checked_before_the_daemon_sees_them() {
        let parse =
            |args: &[&str]| Cli::try_parse_from(["tessera"].iter().chain(args)).map(|_| ()).map_err(|e| e.to_string());
        assert!(parse(&["devices", "bind-vfio", "10:00.0"]).is_ok());
        assert!(parse(&["devices", "--json"]).is_ok());
        let e = parse(&["devices", "bind-vfio", "10:00"]).unwrap_err();
        assert!(e.contains("is not a PCI address"), "{e}");
        let e = parse(&["mdev", "rm", "not-a-uuid"]).unwrap_err();
        assert!(e.contains("is not a UUID"), "{e}");
        assert!(parse(&["mdev", "create", "--parent", "0000:41:00.4", "--type", "nvidia-63"]).is_ok());
        assert!(parse(&["mdev", "create", "--parent", "x", "--type", "nvidia-63"]).is_err());
    }

    #[test]
    fn the_table_shows_group_members_sriov_types_and_mode() {
        let f = |a: &str, d: &str| PciFunction {
            address: a.into(),
            vendor: 0x10de,
            device: 0x1eb8,
            driver: Some(d.into()),
            iommu_group: Some(7),
            numa_node: Some(0),
            ..PciFunction::default()
        };
        let gpu = Gpu {
            function: PciFunction { device_name: Some("TU104GL [Tesla T4]".into()), ..f("0000:10:00.0", "nvidia") },
            group: vec![f("0000:10:00.0", "nvidia"), f("0000:10:00.1", "snd_hda_intel")],
            mode: tessera_client::DeviceMode::TesseraShared,
            mode_detail: Some("Tessera device 0; vGPU(s) a".into()),
            vfs: vec!["0000:10:00.4".into()],
            ..Gpu::default()
        };
        let t = table(&[gpu]);
        for want in [
            "0000:10:00.0",
            "10de:1eb8 TU104GL [Tesla T4]",
            "7: 0000:10:00.0 (nvidia), 0000:10:00.1 (snd_hda_intel)",
            "PF, 1 VF(s)",
            "tessera-shared (Tessera device 0; vGPU(s) a)",
        ] {
            assert!(t.contains(want), "{want:?} in\n{t}");
        }
    }
}
