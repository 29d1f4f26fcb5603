//! Opening, claiming and joining the region file, end to end in one process.

use super::attach::*;
use super::claim::ClaimError;
use super::file::*;
use super::layout::*;
use super::open::*;
use super::secure_fs::{FileProblem, SecureFsError, euid};
use super::settings::*;
use std::sync::atomic::Ordering;

fn temp(tag: &str) -> String {
    let p = std::env::temp_dir().join(format!("tessera-region-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p.to_string_lossy().into_owned()
}

fn limits(bytes: u64) -> Limits {
    [bytes; MAX_DEVICES]
}

#[test]
fn creates_joins_and_shares_one_vgpu() {
    let path = temp("share");
    let a = attach(&path, "team", Some(&limits(1 << 30))).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), LAYOUT_SIZE as u64);
    let b = attach(&path, "team", None).unwrap();
    assert_eq!(a.vgpu_index, b.vgpu_index);
    assert_ne!(a.me_index, b.me_index);
    assert_eq!(b.vgpu.config.limit[3].load(Ordering::Relaxed), 1 << 30, "adopted");
    let c = attach_with_share(&path, "other", None, true).unwrap();
    assert_ne!(c.vgpu_index, a.vgpu_index);
    assert_eq!(c.vgpu.config.limit[0].load(Ordering::Relaxed), UNLIMITED, "a share, no memory quota");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn conflicting_limit_is_refused_while_the_vgpu_is_in_use() {
    let path = temp("conflict");
    let _a = attach(&path, "team", Some(&limits(1 << 30))).unwrap();
    let e = attach(&path, "team", Some(&limits(2 << 30))).err().unwrap();
    assert!(matches!(&e, AttachError::QuotaConflict { holders: 1, quota, .. } if **quota == limits(1 << 30)), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("conflicts") && e.contains(&path) && e.contains("1.0 GiB"), "{e}");
    attach(&path, "team", Some(&limits(1 << 30))).unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_managed_vgpu_keeps_its_limit_and_its_slot() {
    let path = temp("managed");
    let file = RegionFile::open(&path).unwrap();
    let name = encode_name("svc").unwrap();
    let index = {
        let locked = file.lock().unwrap();
        let i = locked.claim_slot(&name).unwrap();
        let v = &locked.region().vgpus[i];
        set_limits(v, &limits(1 << 30));
        v.config.flags.store(flags::MANAGED, Ordering::Release);
        locked.file().map_live(i, Some(uid())).unwrap();
        i
    };
    // The daemon and the joining process share the live state; the configuration is the daemon's.
    file.region().vgpus[index].live.sched.tokens.store(77, Ordering::Release);
    // Nobody attached, yet another limit is refused and none adopts the daemon's.
    let e = attach(&path, "svc", Some(&limits(2 << 30))).err().unwrap();
    assert!(matches!(e, AttachError::ManagedQuota { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("set by the Tessera daemon") && e.contains("tessera vgpu set svc"), "{e}");
    let a = attach(&path, "svc", None).unwrap();
    assert_eq!((a.vgpu_index as usize, a.vgpu.config.limit[0].load(Ordering::Relaxed)), (index, 1 << 30));
    assert_eq!(a.vgpu.live.sched.tokens.load(Ordering::Acquire), 77);
    a.me.used[0].store(5, Ordering::Release);
    assert_eq!(file.region().vgpus[index].live.procs[a.me_index.unwrap()].used[0].load(Ordering::Acquire), 5);
    assert!(read_only(&a.vgpu.config) && !read_only(&a.vgpu.live), "only the live area is writable");
    attach(&path, "svc", Some(&limits(1 << 30))).unwrap();
    // Every other slot taken by idle unmanaged vGPUs: a new name reuses one of those, never the managed one.
    for n in 0..MAX_VGPUS - 1 {
        let locked = file.lock().unwrap();
        locked.claim_slot(&encode_name(&format!("idle{n}")).unwrap()).unwrap();
    }
    let locked = file.lock().unwrap();
    let reused = locked.claim_slot(&encode_name("late").unwrap()).unwrap();
    assert_ne!(reused, index);
    assert_eq!(locked.find(&name), Some(index));
    drop(locked);
    // A live file of another slot, or no vGPU file at all, is refused by name.
    std::fs::rename(live_path(&path, index), live_path(&path, 60)).unwrap();
    let e = attach(&path, "svc", None).err().unwrap();
    let missing = matches!(&e, AttachError::Live { source, .. } if source.is_not_found());
    assert!(missing, "{e:?}");
    let e = e.to_string();
    assert!(e.contains(&live_path(&path, index)) && e.contains("cannot open"), "{e}");
    std::fs::copy(live_path(&path, 60), live_path(&path, index)).unwrap();
    std::fs::copy(live_path(&path, 60), live_path(&path, 61)).unwrap();
    let e = file.map_live(61, None).unwrap_err();
    let mismatch =
        matches!(e, RegionError::Open(OpenError::LiveMismatch { slot, expected: 61, .. }) if slot as usize == index);
    assert!(mismatch, "{e:?}");
    assert!(e.to_string().contains("of slot"));
    file.unmap_live(index).unwrap();
    assert!(std::fs::metadata(live_path(&path, index)).is_err(), "removed with its vGPU");
    for f in [path.clone(), live_path(&path, 60), live_path(&path, 61)] {
        std::fs::remove_file(f).unwrap();
    }
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Whether the page holding `x` is mapped without write permission (from /proc/self/maps).
fn read_only<T>(x: &T) -> bool {
    let at = std::ptr::from_ref(x) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|l| {
        let mut parts = l.split_whitespace();
        let range = parts.next().unwrap();
        let perms = parts.next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
        (a..b).contains(&at) && perms.starts_with("r-")
    })
}

#[test]
fn while_a_daemon_lives_unknown_names_are_refused() {
    let path = temp("daemon");
    let file = RegionFile::open(&path).unwrap();
    let d = &file.region().daemon;
    d.pid.store(std::process::id(), Ordering::Release);
    d.heartbeat_ns.store(crate::futex::monotonic_ns(), Ordering::Release);
    let e = attach(&path, "nosuch", None).err().unwrap();
    assert!(matches!(&e, AttachError::NotFound { daemon, .. } if *daemon == std::process::id()), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("no vGPU \"nosuch\"") && e.contains("tessera vgpu create nosuch"), "{e}");
    // A silent daemon is gone: processes may create vGPUs again.
    d.heartbeat_ns.store(crate::futex::monotonic_ns().saturating_sub(DAEMON_SILENCE_NS), Ordering::Release);
    attach(&path, "nosuch", Some(&limits(1 << 30))).unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn without_a_daemon_a_process_with_no_limit_cannot_set_up_a_vgpu() {
    let path = temp("nolimit");
    let e = attach(&path, "typo", None).err().unwrap();
    assert!(matches!(&e, AttachError::Unlimited { name, .. } if name == "typo"), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("\"typo\"") && e.contains(&path), "{e}");
    assert!(e.contains("tessera vgpu create typo") && e.contains("TESSERA_MEMORY_LIMIT"), "{e}");
    assert!(e.contains("TESSERA_COMPUTE_SHARE"), "{e}");
    let file = RegionFile::open(&path).unwrap();
    assert_eq!(file.lock().unwrap().find(&encode_name("typo").unwrap()), None, "no slot was made");
    // Left behind by a process that had a limit and is gone: still no way in without one.
    let gone = attach(&path, "left", Some(&limits(1 << 30))).unwrap();
    gone.me.set_owner(0, 0);
    assert!(attach(&path, "left", None).err().unwrap().to_string().contains("tessera vgpu create left"));
    attach_with_share(&path, "left", None, true).unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn foreign_and_truncated_files_are_refused_by_name() {
    let path = temp("foreign");
    std::fs::write(&path, b"not a region").unwrap();
    let e = attach(&path, "x", None).err().unwrap().to_string();
    assert!(e.contains(&path) && e.contains("truncated"), "{e}");
    std::fs::write(&path, vec![0xAB; LAYOUT_SIZE]).unwrap();
    let e = attach(&path, "x", None).err().unwrap().to_string();
    assert!(e.contains(&path) && e.contains(&format!("not a version-{VERSION}")), "{e}");
    std::fs::remove_file(&path).unwrap();
    let e = attach("/nonexistent-dir/region", "x", None).err().unwrap().to_string();
    assert!(e.contains("/nonexistent-dir/region"), "{e}");
}

#[test]
fn flags_are_read_without_joining_or_creating() {
    let path = temp("peek");
    let e = vgpu_flags(&path, "svc").unwrap_err();
    let missing = matches!(&e, RegionError::Io { op: "cannot open", source, .. } if source.kind() == std::io::ErrorKind::NotFound);
    assert!(missing, "{e:?}");
    assert!(e.to_string().contains(&path));
    assert!(std::fs::metadata(&path).is_err(), "never created by a reader");
    let file = RegionFile::open(&path).unwrap();
    {
        let locked = file.lock().unwrap();
        let i = locked.claim_slot(&encode_name("svc").unwrap()).unwrap();
        locked.region().vgpus[i].config.flags.store(flags::MANAGED | flags::TENSOR_CORES_OFF, Ordering::Release);
    }
    assert_eq!(vgpu_flags(&path, "svc").unwrap(), Some(flags::MANAGED | flags::TENSOR_CORES_OFF));
    assert_eq!(vgpu_flags(&path, "other").unwrap(), None);
    let v = &file.region().vgpus;
    assert!(v.iter().all(|v| v.live.procs.iter().all(|p| p.word() == 0)), "nothing joined");
    drop(file);
    std::fs::write(&path, b"not a region").unwrap();
    let e = vgpu_flags(&path, "svc").unwrap_err();
    assert!(matches!(e, RegionError::PeekSize { len: 12, .. }), "{e:?}");
    assert!(e.to_string().contains("bytes"));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_joining_process_takes_the_mode_of_the_moment_and_the_current_requests() {
    let path = temp("soft");
    let file = RegionFile::open(&path).unwrap();
    let index = file.lock().unwrap().claim_slot(&encode_name("svc").unwrap()).unwrap();
    let v = &file.region().vgpus[index];
    let hard = attach(&path, "svc", Some(&limits(1 << 30))).unwrap();
    v.config.flags.store(flags::SOFT, Ordering::Release);
    v.live.pager.request(crate::PagerRequest::Evict);
    v.live.pager.request(crate::PagerRequest::Defrag);
    v.live.pager.request(crate::PagerRequest::Defrag);
    let soft = attach(&path, "svc", None).unwrap();
    assert!(!hard.me.is_soft() && soft.me.is_soft(), "the mode is read once, when joining");
    assert_eq!(
        (soft.me.soft.evicted_seq.load(Ordering::Relaxed), soft.me.soft.defragged_seq.load(Ordering::Relaxed)),
        (1, 2)
    );
    assert_eq!(v.lagging(crate::PagerRequest::Defrag, 2).next(), None);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn limits_are_described_for_people() {
    assert_eq!(describe(&limits(UNLIMITED)), "no limit");
    assert_eq!(describe(&limits(512 << 20)), "512.0 MiB on every device");
    let mut l = limits(UNLIMITED);
    l[0] = 1 << 30;
    assert_eq!(describe(&l), "0=1.0 GiB (no limit elsewhere)");
}

#[test]
fn a_daemon_is_gone_only_when_it_cleared_its_pid_or_this_namespace_has_no_such_process() {
    // SAFETY: the daemon's record is integers and atomics, valid when zero.
    let d: Box<Daemon> = unsafe { Box::new_zeroed().assume_init() };
    assert!(daemon_gone(&d), "no pid recorded");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    d.pid.store(dead, Ordering::Relaxed);
    d.pid_ns.store(super::pid_ns::own(), Ordering::Relaxed);
    assert!(daemon_gone(&d), "its pid names no process of our namespace");
    d.pid_ns.store(0, Ordering::Relaxed);
    assert!(daemon_gone(&d), "an unknown namespace is taken for ours");
    d.pid_ns.store(super::pid_ns::own().wrapping_add(1), Ordering::Relaxed);
    assert!(!daemon_gone(&d), "a daemon of another namespace cannot be looked up by pid");
    d.pid.store(std::process::id(), Ordering::Relaxed);
    d.pid_ns.store(super::pid_ns::own(), Ordering::Relaxed);
    assert!(!daemon_gone(&d));
}

#[test]
fn a_managed_vgpus_name_and_settings_are_in_its_configuration_file_alone() {
    let path = temp("conf");
    let daemon = RegionFile::open_as(&path, Access::Daemon).unwrap();
    let name = encode_name("hidden-one").unwrap();
    let index = {
        let locked = daemon.lock().unwrap();
        let i = locked.claim_slot_with(&name, |i| locked.file().map_conf(i, None)).unwrap().unwrap();
        let v = &locked.region().vgpus[i];
        set_limits(v, &limits(3 << 30));
        v.config.flags.store(flags::MANAGED, Ordering::Release);
        locked.file().map_live(i, Some(uid())).unwrap();
        i
    };
    // The region file itself: the slot is hidden, its name nowhere.
    let bytes = std::fs::read(&path).unwrap();
    assert!(!bytes.windows(name.len()).any(|w| w == name), "the name is in the region file");
    let conf = super::conf::conf_path(&path, index);
    assert!(std::fs::read(&conf).unwrap().windows(10).any(|w| w == b"hidden-one"));
    // A process that may read the configuration file finds the vGPU, with its settings, and joins it.
    let joined = attach(&path, "hidden-one", None).unwrap();
    assert_eq!(joined.vgpu_index as usize, index);
    assert_eq!(joined.vgpu.config.limit[0].load(Ordering::Relaxed), 3 << 30);
    assert_eq!(vgpu_flags(&path, "hidden-one").unwrap(), Some(flags::MANAGED));
    // Removed: the file goes, the slot is free in the region again, and a peer opened before sees that.
    let peer = RegionFile::open(&path).unwrap();
    assert!(peer.lock().unwrap().find(&name).is_some());
    {
        let locked = daemon.lock().unwrap();
        locked.free_slot(index);
        locked.file().unmap_live(index).unwrap();
        locked.file().unmap_conf(index, false).unwrap();
    }
    assert!(std::fs::metadata(&conf).is_err(), "its configuration file is removed");
    peer.refresh_confs();
    assert_eq!(peer.lock().unwrap().find(&name), None);
    assert_eq!(peer.region().vgpus[index].state(), state::FREE);
    // The slot serves an ordinary vGPU of the peers again, writable in the peer's mapping.
    let locked = peer.lock().unwrap();
    let plain = locked.claim_slot(&encode_name("plain").unwrap()).unwrap();
    set_limits(&locked.region().vgpus[plain], &limits(1 << 30));
    assert_eq!(plain, index, "the first free slot");
    drop(locked);
    drop(daemon);
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(lock_path(&path));
}

/// Each way a region file is refused is a variant a program can match, with the data it needs, and the
/// message people read is the one it always was.
#[test]
fn refusals_are_variants_a_caller_can_match() {
    // Too small: truncated, or not a region at all.
    let path = temp("typed-small");
    std::fs::write(&path, vec![7u8; 100]).unwrap();
    let e = RegionFile::open(&path).err().unwrap();
    assert!(matches!(&e, RegionError::WrongSize { path: p, len: 100 } if *p == path), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "region file {path} has 100 bytes, a version-{VERSION} Tessera region has {LAYOUT_SIZE}: it is truncated, \
             foreign or from another Tessera version; remove it (no Tessera program may be running) or set \
             TESSERA_REGION"
        )
    );
    let e = attach(&path, "x", None).err().unwrap();
    assert!(matches!(e, AttachError::Region(RegionError::WrongSize { len: 100, .. })), "{e:?}");

    // A foreign magic, and Tessera's magic with another version: two variants, one message.
    let header_at = std::mem::offset_of!(Region, head) + std::mem::offset_of!(Head, header);
    let mut bytes = vec![0u8; LAYOUT_SIZE];
    bytes[header_at..header_at + 8].copy_from_slice(&0xfeed_u64.to_le_bytes());
    bytes[header_at + 8..header_at + 12].copy_from_slice(&VERSION.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let e = RegionFile::open(&path).err().unwrap();
    let foreign = matches!(e, RegionError::Open(OpenError::BadMagic { magic: 0xfeed, version: VERSION, .. }));
    assert!(foreign, "{e:?}");
    assert!(e.to_string().contains(&format!("is not a version-{VERSION} Tessera region (magic 0xfeed")), "{e}");
    bytes[header_at..header_at + 8].copy_from_slice(&MAGIC.to_le_bytes());
    bytes[header_at + 8..header_at + 12].copy_from_slice(&(VERSION - 1).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let e = attach(&path, "x", None).err().unwrap();
    let old = AttachError::Region(RegionError::Open(OpenError::UnsupportedVersion {
        path: path.clone(),
        magic: MAGIC,
        version: VERSION - 1,
    }));
    assert_eq!(e.to_string(), old.to_string());
    assert!(
        matches!(&e, AttachError::Region(RegionError::Open(OpenError::UnsupportedVersion { version, .. }))
        if *version == VERSION - 1),
        "{e:?}"
    );
    assert!(e.to_string().contains(&format!("(magic {MAGIC:#x}, version {})", VERSION - 1)), "{e}");
    std::fs::remove_file(&path).unwrap();

    // A symbolic link, and another user's file (root may give files away; others cannot, so only the link
    // is checked then).
    let link = temp("typed-link");
    let real = temp("typed-real");
    RegionFile::open(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let e = RegionFile::open(&link).err().unwrap();
    assert!(matches!(&e, RegionError::Open(OpenError::RegionSymlink { path }) if *path == link), "{e:?}");
    std::fs::remove_file(&link).unwrap();
    if euid() == 0 {
        std::os::unix::fs::chown(&real, Some(65534), None).unwrap();
        let e = RegionFile::open(&real).err().unwrap();
        let theirs = FileProblem::Owner { owner: 65534, expected: 0 };
        assert!(
            matches!(&e, RegionError::Open(OpenError::RegionPlanted { problem, .. }) if *problem == theirs),
            "{e:?}"
        );
        assert!(e.to_string().contains("belongs to uid 65534"), "{e}");
    }
    std::fs::remove_file(&real).unwrap();
    let _ = std::fs::remove_file(lock_path(&real));

    // Not a vGPU name, a name there is no slot for, and the reasons of the claim kept apart.
    let path = temp("typed-names");
    let e = attach(&path, "", None).err().unwrap();
    assert!(matches!(&e, AttachError::BadName { name } if name.is_empty()), "{e:?}");
    assert_eq!(e.to_string(), "\"\" is not a vGPU name");
    let file = RegionFile::open(&path).unwrap();
    {
        let locked = file.lock().unwrap();
        for n in 0..MAX_VGPUS {
            let i = locked.claim_slot(&encode_name(&format!("v{n}")).unwrap()).unwrap();
            locked.region().vgpus[i].config.flags.store(flags::MANAGED, Ordering::Release);
        }
    }
    let e = attach(&path, "one-more", Some(&limits(1 << 20))).err().unwrap();
    assert!(matches!(&e, AttachError::NoFreeSlot { name, .. } if name == "one-more"), "{e:?}");
    let full = ClaimError::NoProcessSlot { name: "v0".into() };
    assert_eq!(full.to_string(), format!("all {PROCS_PER_VGPU} process slots of vGPU \"v0\" are in use"));
    drop(file);
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(lock_path(&path));

    // A directory others may write, not sticky: refused with its mode, whoever asks.
    let dir = std::env::temp_dir().join(format!("tessera-region-test-{}-typed-dir", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let inside = dir.join("r.region").to_string_lossy().into_owned();
    let e = RegionFile::open(&inside).err().unwrap();
    assert!(matches!(&e, RegionError::Dir { source: SecureFsError::DirWritable { mode: 0o777, .. }, .. }), "{e:?}");
    assert!(e.to_string().starts_with(&format!("region file {inside}: directory ")), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
