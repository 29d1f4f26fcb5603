//! The simulated kernel's reactions, exercised by a real child process (`simsysfs-write`, one `open` +
//! one `write(2)` as the product does) under `LD_PRELOAD=libsimsysfs.so`.

use crate::common;

use std::os::unix::process::ExitStatusExt;

use common::{errno, exists, fresh_root, link, read, run_writer, write};
use simsysfs::{Fault, scenarios};

const GPU: &str = "0000:10:00.0";
const AUDIO: &str = "0000:10:00.1";
const UUID: &str = "4b20d080-1b54-4048-85b3-a6a62d165c01";
const UUID2: &str = "8f0c6a52-5f0e-4c8d-9a8f-2d1f0b7e3c11";

fn dev(addr: &str) -> String {
    format!("devices/pci0000:00/{addr}")
}

#[test]
fn unbind_removes_both_links_and_refuses_a_device_not_bound_to_that_driver() {
    let root = fresh_root("unbind");
    scenarios::two_gpus(&root).unwrap();
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/unbind", GPU), errno(libc::ENODEV));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", "0000:99:00.0"), errno(libc::ENODEV));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    assert!(!exists(&root, &format!("{}/driver", dev(GPU))));
    assert!(!exists(&root, &format!("bus/pci/drivers/nvidia/{GPU}")));
    assert!(exists(&root, "bus/pci/drivers/nvidia/0000:11:00.0"), "the other GPU stays bound");
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), errno(libc::ENODEV), "no longer bound");
}

#[test]
fn bind_needs_a_matching_unbound_device() {
    let root = fresh_root("bind");
    scenarios::two_gpus(&root).unwrap();
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/bind", GPU), errno(libc::EBUSY), "already bound");
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/bind", "0000:99:00.0"), errno(libc::ENODEV));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    // vfio-pci has no id table: without an override or new_id it does not match.
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/bind", GPU), errno(libc::ENODEV));
    assert_eq!(write(&root, &format!("{}/driver_override", dev(GPU)), "vfio-pci"), "ok 8");
    // An override naming another driver excludes the device's own driver too.
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/bind", GPU), errno(libc::ENODEV));
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/bind", &format!("{GPU}\\n")), "ok 13");
    assert_eq!(link(&root, &format!("{}/driver", dev(GPU))).as_deref(), Some("../../../bus/pci/drivers/vfio-pci"));
    assert_eq!(
        link(&root, &format!("bus/pci/drivers/vfio-pci/{GPU}")).as_deref(),
        Some("../../../../devices/pci0000:00/0000:10:00.0")
    );
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/bind", GPU), errno(libc::EBUSY));
}

#[test]
fn driver_override_stores_up_to_the_newline_and_clears_on_an_empty_value() {
    let root = fresh_root("override");
    scenarios::two_gpus(&root).unwrap();
    let attr = format!("bus/pci/devices/{GPU}/driver_override");
    assert_eq!(read(&root, &attr), "(null)\n");
    assert_eq!(write(&root, &attr, "vfio-pci\\nrest"), "ok 13");
    assert_eq!(read(&root, &attr), "vfio-pci\n");
    assert_eq!(write(&root, &attr, "\\n"), "ok 1");
    assert_eq!(read(&root, &attr), "(null)\n");
    assert_eq!(write(&root, &attr, "nouveau"), "ok 7");
    assert_eq!(write(&root, &attr, ""), "ok 0", "an empty write never reaches the store function");
    assert_eq!(read(&root, &attr), "nouveau\n");
    assert_eq!(write(&root, &attr, &"x".repeat(4095)), errno(libc::EINVAL));
    assert_eq!(read(&root, &attr), "nouveau\n");
}

#[test]
fn drivers_probe_binds_to_the_override_else_the_default_driver() {
    let root = fresh_root("probe");
    scenarios::two_gpus(&root).unwrap();
    let driver = format!("{}/driver", dev(GPU));
    assert_eq!(write(&root, "bus/pci/drivers_probe", "0000:99:00.0"), errno(libc::ENODEV));
    assert_eq!(write(&root, "bus/pci/drivers_probe", GPU), "ok 12", "a bound device is left alone");
    assert_eq!(link(&root, &driver).as_deref(), Some("../../../bus/pci/drivers/nvidia"));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    assert_eq!(write(&root, &format!("{}/driver_override", dev(GPU)), "vfio-pci\\n"), "ok 9");
    assert_eq!(write(&root, "bus/pci/drivers_probe", GPU), "ok 12");
    assert_eq!(link(&root, &driver).as_deref(), Some("../../../bus/pci/drivers/vfio-pci"));
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/unbind", GPU), "ok 12");
    assert_eq!(write(&root, &format!("{}/driver_override", dev(GPU)), "\\n"), "ok 1");
    assert_eq!(write(&root, "bus/pci/drivers_probe", GPU), "ok 12");
    assert_eq!(link(&root, &driver).as_deref(), Some("../../../bus/pci/drivers/nvidia"));
}

#[test]
fn new_id_adds_a_dynamic_id_and_binds_unbound_matching_devices() {
    let root = fresh_root("newid");
    scenarios::two_gpus(&root).unwrap();
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/new_id", "10de"), errno(libc::EINVAL));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/new_id", "10de 2330 10de 16c1 30200"), errno(libc::EEXIST));
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/new_id", "0x10de 2330\\n"), "ok 12");
    assert_eq!(link(&root, &format!("{}/driver", dev(GPU))).as_deref(), Some("../../../bus/pci/drivers/vfio-pci"));
    assert_eq!(
        link(&root, &format!("{}/driver", dev("0000:11:00.0"))).as_deref(),
        Some("../../../bus/pci/drivers/nvidia"),
        "a bound device is not taken"
    );
}

#[test]
fn vfio_round_trip_of_a_gpu_and_its_audio_function_restores_the_tree() {
    let root = fresh_root("roundtrip");
    let sys = scenarios::gpu_with_audio(&root).unwrap();
    let before = sys.listing();
    // Bind the whole IOMMU group, with the kernel sequence of issue 18.
    for (addr, current) in [(GPU, "nvidia"), (AUDIO, "snd_hda_intel")] {
        assert_eq!(write(&root, &format!("bus/pci/drivers/{current}/unbind"), addr), "ok 12");
        assert_eq!(write(&root, &format!("bus/pci/devices/{addr}/driver_override"), "vfio-pci"), "ok 8");
        assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/bind", addr), "ok 12");
        assert_eq!(link(&root, &format!("{}/driver", dev(addr))).as_deref(), Some("../../../bus/pci/drivers/vfio-pci"));
    }
    assert_ne!(sys.listing(), before);
    for addr in [GPU, AUDIO] {
        assert_eq!(write(&root, &format!("bus/pci/devices/{addr}/driver_override"), "\\n"), "ok 1");
        assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/unbind", addr), "ok 12");
        assert_eq!(write(&root, "bus/pci/drivers_probe", addr), "ok 12");
    }
    assert_eq!(sys.listing(), before);
}

#[test]
fn mdev_create_makes_the_device_and_lowers_available_instances() {
    let root = fresh_root("mdev-create");
    scenarios::sriov_gpu(&root).unwrap();
    let vf = scenarios::SRIOV_VFS[0];
    let ty = format!("{}/mdev_supported_types/nvidia-471", dev(vf));
    let create = format!("{ty}/create");
    assert_eq!(write(&root, &create, "not-a-uuid-at-all-not-a-uuid-at-all"), errno(libc::EINVAL));
    assert_eq!(write(&root, &create, &format!("{UUID}xx")), errno(libc::EINVAL), "too long");
    assert_eq!(write(&root, &create, &UUID[..35]), errno(libc::EINVAL), "too short");
    assert_eq!(write(&root, &create, &format!("{}\\n", UUID.to_uppercase())), "ok 37");
    let mdev = format!("{}/{UUID}", dev(vf));
    assert_eq!(link(&root, &format!("{mdev}/mdev_type")).as_deref(), Some("../mdev_supported_types/nvidia-471"));
    assert!(exists(&root, &format!("{mdev}/remove")));
    assert_eq!(
        link(&root, &format!("bus/mdev/devices/{UUID}")).as_deref(),
        Some(format!("../../../devices/pci0000:00/{vf}/{UUID}").as_str())
    );
    assert_eq!(link(&root, &format!("{ty}/devices/{UUID}")).as_deref(), Some(format!("../../../{UUID}").as_str()));
    assert_eq!(read(&root, &format!("{ty}/available_instances")), "0\n");
    assert_eq!(write(&root, &create, UUID2), errno(libc::EUSERS));
    let other = format!("{}/mdev_supported_types/nvidia-471/create", dev(scenarios::SRIOV_VFS[1]));
    assert_eq!(write(&root, &other, UUID), errno(libc::EEXIST), "a UUID is unique across parents");
    assert_eq!(write(&root, &other, UUID2), "ok 36");
}

#[test]
fn mdev_remove_deletes_it_unless_in_use_and_restores_the_tree() {
    let root = fresh_root("mdev-remove");
    let sys = scenarios::sriov_gpu(&root).unwrap();
    let vf = scenarios::SRIOV_VFS[2];
    let create = format!("{}/mdev_supported_types/nvidia-474/create", dev(vf));
    let before = sys.listing();
    assert_eq!(write(&root, &create, UUID), "ok 36");
    let remove = format!("bus/mdev/devices/{UUID}/remove");
    assert_eq!(write(&root, &remove, "yes"), errno(libc::EINVAL));
    assert_eq!(write(&root, &remove, "0"), "ok 1", "0 is accepted and does nothing");
    assert!(exists(&root, &format!("bus/mdev/devices/{UUID}")));
    sys.set_mdev_in_use(UUID, true).unwrap();
    assert_eq!(write(&root, &remove, "1"), errno(libc::EBUSY));
    assert!(exists(&root, &format!("bus/mdev/devices/{UUID}")));
    assert_eq!(
        link(&root, &format!("{}/{UUID}/driver", dev(vf))).as_deref(),
        Some("../../../../bus/mdev/drivers/vfio_mdev")
    );
    assert!(root.join(format!("bus/mdev/devices/{UUID}/driver/{UUID}/remove")).is_file(), "links resolve");
    sys.set_mdev_in_use(UUID, false).unwrap();
    assert_eq!(write(&root, &remove, "1\\n"), "ok 2");
    assert!(!exists(&root, &format!("bus/mdev/devices/{UUID}")));
    assert!(!exists(&root, &format!("{}/{UUID}", dev(vf))));
    assert_eq!(sys.listing(), before, "create + remove leaves the tree as it was");
}

#[test]
fn concurrent_creates_of_one_uuid_leave_exactly_one_mdev() {
    let root = fresh_root("mdev-race");
    scenarios::sriov_gpu(&root).unwrap();
    // Eight writers at once, two per VF: the kernel's lock lets exactly one UUID creation through.
    let children: Vec<_> = (0..8)
        .map(|i| {
            let vf = scenarios::SRIOV_VFS[i % 4];
            let create = root.join(format!("{}/mdev_supported_types/nvidia-471/create", dev(vf)));
            std::process::Command::new(env!("CARGO_BIN_EXE_simsysfs-write"))
                .arg(create)
                .arg(UUID)
                .env("LD_PRELOAD", simsysfs::preload_library())
                .env("SIMSYSFS_ROOT", &root)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let answers: Vec<String> = children
        .into_iter()
        .map(|c| String::from_utf8_lossy(&c.wait_with_output().unwrap().stdout).trim().to_string())
        .collect();
    assert_eq!(answers.iter().filter(|a| *a == "ok 36").count(), 1, "{answers:?}");
    assert!(answers.iter().all(|a| a == "ok 36" || *a == errno(libc::EEXIST)), "{answers:?}");
    let free: usize = scenarios::SRIOV_VFS
        .iter()
        .map(|vf| read(&root, &format!("{}/mdev_supported_types/nvidia-471/available_instances", dev(vf))))
        .filter(|n| n == "1\n")
        .count();
    assert_eq!(free, 3, "only the winner's VF lost its instance");
}

#[test]
fn an_injected_errno_fails_one_write_and_is_then_gone() {
    let root = fresh_root("fault-errno");
    let sys = scenarios::two_gpus(&root).unwrap();
    // Injected through the bus link; the write below goes through it too, both resolve to the device.
    sys.inject(&format!("bus/pci/devices/{GPU}/driver_override"), Fault::Errno(libc::EIO)).unwrap();
    sys.inject(&format!("bus/pci/devices/{GPU}/driver_override"), Fault::Errno(libc::ENOMEM)).unwrap();
    let before = sys.listing();
    let attr = format!("{}/driver_override", dev(GPU));
    assert_eq!(
        write(&root, "bus/pci/drivers/nvidia/bind", "0000:11:00.0"),
        errno(libc::EBUSY),
        "other files unaffected"
    );
    assert_eq!(write(&root, &attr, "vfio-pci"), errno(libc::EIO));
    assert_eq!(write(&root, &attr, "vfio-pci"), errno(libc::ENOMEM));
    assert_eq!(sys.listing(), before, "a failed write changes nothing");
    assert_eq!(write(&root, &attr, "vfio-pci"), "ok 8");
    assert_eq!(read(&root, &attr), "vfio-pci\n");
}

#[test]
fn an_injected_kill_kills_the_writer_at_that_write() {
    let root = fresh_root("fault-kill");
    let sys = scenarios::two_gpus(&root).unwrap();
    sys.inject("bus/pci/drivers/vfio-pci/bind", Fault::Kill).unwrap();
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    assert_eq!(write(&root, &format!("{}/driver_override", dev(GPU)), "vfio-pci"), "ok 8");
    let before = sys.listing();
    let out = run_writer(Some(&root), &root.join("bus/pci/drivers/vfio-pci/bind"), GPU, None);
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    assert_eq!(sys.listing(), before, "the killed write had no effect");
    assert_eq!(write(&root, "bus/pci/drivers/vfio-pci/bind", GPU), "ok 12", "the fault was used up");
}

#[test]
fn a_fault_can_name_an_mdev_before_it_exists() {
    let root = fresh_root("fault-mdev");
    let sys = scenarios::sriov_gpu(&root).unwrap();
    let remove = format!("bus/mdev/devices/{UUID}/remove");
    sys.inject(&remove, Fault::Errno(libc::EIO)).unwrap();
    let create = format!("{}/mdev_supported_types/nvidia-472/create", dev(scenarios::SRIOV_VFS[3]));
    assert_eq!(write(&root, &create, UUID), "ok 36", "a fault on another attribute does not fire");
    assert_eq!(write(&root, &remove, "1"), errno(libc::EIO));
    assert!(exists(&root, &format!("bus/mdev/devices/{UUID}")));
    assert_eq!(write(&root, &remove, "1"), "ok 1");
    assert!(sys.inject("../outside", Fault::Kill).is_err(), "a path leaving the root is refused");
    assert!(sys.inject("bus/pci/drivers_probe", Fault::Errno(0)).is_err(), "errno 0 is no fault");
}

#[test]
fn a_non_root_writer_gets_eacces_from_open() {
    let root = fresh_root("nonroot");
    let sys = scenarios::two_gpus(&root).unwrap();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test runs as root (as CI does) to drop to uid 65534");
    let before = sys.listing();
    for rel in ["bus/pci/drivers/nvidia/unbind".to_string(), format!("{}/driver_override", dev(GPU))] {
        let out = run_writer(Some(&root), &root.join(&rel), GPU, Some(65534));
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("errno {} open", libc::EACCES), "{rel}");
    }
    assert_eq!(sys.listing(), before);
}

#[test]
fn other_files_are_written_normally() {
    let root = fresh_root("others");
    let sys = scenarios::two_gpus(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "").unwrap();
    assert_eq!(write(&root, "notes.txt", "hello"), "ok 5");
    assert_eq!(read(&root, "notes.txt"), "hello");
    let outside = fresh_root("others-outside").join("bind");
    std::fs::write(&outside, "").unwrap();
    let out = run_writer(Some(&root), &outside, GPU, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 12");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), GPU);
    // A read-only attribute: Linux refuses at open; here the write is refused with the same errno.
    assert_eq!(write(&root, &format!("{}/vendor", dev(GPU)), "0x8086"), errno(libc::EACCES));
    assert_eq!(read(&root, &format!("{}/vendor", dev(GPU))), "0x10de\n");
    // Without SIMSYSFS_ROOT the library is inactive: the attribute file is just a file.
    let before = sys.listing();
    let out = run_writer(None, &root.join("bus/pci/drivers/nvidia/unbind"), GPU, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 12");
    assert_eq!(read(&root, "bus/pci/drivers/nvidia/unbind"), GPU);
    assert_ne!(sys.listing(), before);
    assert!(exists(&root, &format!("{}/driver", dev(GPU))), "no kernel reaction");
}

#[test]
fn shell_redirection_reaches_the_kernel_too() {
    let root = fresh_root("shell");
    scenarios::two_gpus(&root).unwrap();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s' {GPU} > {}/bus/pci/drivers/nvidia/unbind", root.display()))
        .env("LD_PRELOAD", simsysfs::preload_library())
        .env("SIMSYSFS_ROOT", &root)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(!exists(&root, &format!("{}/driver", dev(GPU))));
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s' {GPU} > {}/bus/pci/drivers/nvidia/unbind", root.display()))
        .env("LD_PRELOAD", simsysfs::preload_library())
        .env("SIMSYSFS_ROOT", &root)
        .output()
        .unwrap();
    // dash's printf names no errno ("I/O error"); that the redirected write failed is the point.
    assert!(!out.status.success(), "the shell sees the kernel's ENODEV: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("printf"), "{out:?}");
}

#[test]
fn a_tree_without_the_state_folder_still_reacts() {
    let root = fresh_root("no-state");
    scenarios::two_gpus(&root).unwrap();
    // A tree copied or laid out by hand has no `.simsysfs`: the kernel makes it on the first write.
    std::fs::remove_dir_all(root.join(".simsysfs")).unwrap();
    assert_eq!(write(&root, "bus/pci/drivers/nvidia/unbind", GPU), "ok 12");
    assert!(!exists(&root, &format!("{}/driver", dev(GPU))));
    // Without its default-driver record, drivers_probe takes the first registered driver that matches.
    assert_eq!(write(&root, "bus/pci/drivers_probe", GPU), "ok 12");
    assert_eq!(link(&root, &format!("{}/driver", dev(GPU))).as_deref(), Some("../../../bus/pci/drivers/nvidia"));
}
