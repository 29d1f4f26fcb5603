//! Other local users (issue 29, point 6): a user who can open a file can `flock` it, so no lock that the
//! daemon or a tenant's `cuInit` waits for may be on a file another user can open, and the region (every
//! vGPU's name and settings) may be read only by the users whose tenants map it. Each user here is a real
//! one, created when missing (these tests run as root, as CI does).

use crate::common;

use common::tessera::Machine;
use common::u64_at;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_region::conf::conf_path;
use tessera_region::open::{live_path, lock_path};

/// The attacker, a user with a vGPU of its own.
const ATTACKER: &str = "tessera-test-b";
/// Another tenant, with a vGPU of its own.
const TENANT: &str = "tessera-test-c";
/// A user with no vGPU: `nobody`.
const NOBODY: (u32, u32) = (65534, 65534);

/// The files of `m`'s daemon another user could try to open: the region, the daemon's lock, the slots'
/// lock and the first four vGPUs' live files.
fn daemon_files(m: &Machine) -> Vec<PathBuf> {
    let region = m.region().to_string_lossy().into_owned();
    let mut files = vec![m.region(), PathBuf::from(format!("{region}.lock")), PathBuf::from(lock_path(&region))];
    files.extend((0..4).map(|i| PathBuf::from(live_path(&region, i))));
    files
}

/// A process of user `who` that opens each of `paths` it can and holds `flock(LOCK_EX)` on it (or a shared
/// lock where another holds it exclusively) until its stdin closes; with what it got for each: `locked`,
/// `shared` or the errno's name.
fn lock_as(who: (u32, u32), paths: &[PathBuf]) -> (common::Guarded, Vec<String>) {
    let script = r#"
import errno, fcntl, os, sys
held = []
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
        continue
    held.append(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("locked", flush=True)
    except OSError:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        print("shared", flush=True)
sys.stdin.read()
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).args(paths).uid(who.0).gid(who.1).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = common::Guarded::spawn(&mut cmd).expect("python3");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let got = paths
        .iter()
        .map(|_| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim().to_string()
        })
        .collect();
    (child, got)
}

/// Runs `mem-info` in vGPU `vgpu` as `who` (its simulated GPU state in `gpu`): whether it succeeded, the
/// total it saw, its stderr and how long it took.
fn tenant_as(m: &Machine, gpu: &Path, who: (u32, u32), vgpu: &str) -> (bool, u64, String, Duration) {
    let mut cmd = m.tenant(vgpu, &["mem-info"]);
    cmd.env("SIMGPU_STATE", gpu.join(format!("{}.state", who.0))).uid(who.0).gid(who.1);
    let t = Instant::now();
    let run = common::finished(cmd.output().expect("run a tenant"));
    let total = if run.success { u64_at(&run.json, "total") } else { 0 };
    (run.success, total, run.stderr, t.elapsed())
}

/// A directory every user may write, for the simulated GPU's state of tenants of other users (a real
/// driver needs no such file).
fn gpu_dir(m: &Machine) -> PathBuf {
    let gpu = m.file("tenant-gpu");
    std::fs::create_dir(&gpu).unwrap();
    std::fs::set_permissions(&gpu, std::fs::Permissions::from_mode(0o777)).unwrap();
    gpu
}

#[test]
fn another_users_locks_hold_up_neither_the_daemon_nor_any_tenant() {
    let (attacker, tenant) = (common::user(ATTACKER), common::user(TENANT));
    assert_ne!(attacker.0, tenant.0, "two users");
    let mut m = Machine::new("hostile-locks", "small");
    m.start();
    let gpu = gpu_dir(&m);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "256MiB", "--share", "20", "--user", ATTACKER]);
    m.ok(&["vgpu", "create", "c", "--device", "0", "--memory", "256MiB", "--share", "20", "--user", TENANT]);
    m.ok(&["vgpu", "create", "r", "--device", "0", "--memory", "256MiB", "--share", "20"]);
    // The attacker locks whatever of the daemon's it can open: the region (its tenants read it) and its
    // own vGPU's file. The daemon's and the slots' locks and the other vGPUs' files it cannot even open.
    let files = daemon_files(&m);
    let (mut attack, got) = lock_as(attacker, &files);
    eprintln!("the attacker got {got:?} for {files:?}");
    // Meanwhile the owner creates and removes vGPUs at once, and new tenants of the owner and of another
    // user start at once.
    let t = Instant::now();
    m.ok(&["vgpu", "create", "x", "--device", "0", "--memory", "512MiB", "--share", "20"]);
    let created = t.elapsed();
    let (ok, total, stderr, owners) = tenant_as(&m, &gpu, (0, 0), "x");
    assert!(ok && total == 512 << 20, "the owner's tenant: {stderr}");
    let (ok, total, stderr, others) = tenant_as(&m, &gpu, tenant, "c");
    assert!(ok && total == 256 << 20, "another user's tenant: {stderr}");
    let t = Instant::now();
    m.ok(&["vgpu", "rm", "x"]);
    let removed = t.elapsed();
    drop(attack.stdin.take());
    attack.wait().unwrap();
    eprintln!("with the attacker's locks held: create {created:?}, rm {removed:?}, tenants {owners:?} and {others:?}");
    assert_eq!(got, ["locked", "EACCES", "EACCES", "locked", "EACCES", "EACCES", "ENOENT"], "{files:?}");
    assert!(created < Duration::from_secs(2) && removed < Duration::from_secs(2), "{created:?} {removed:?}");
    assert!(owners < Duration::from_secs(8) && others < Duration::from_secs(8), "{owners:?} {others:?}");
}

#[test]
fn no_user_reads_what_is_not_its_own() {
    let (attacker, tenant) = (common::user(ATTACKER), common::user(TENANT));
    let mut m = Machine::new("hostile-reads", "small");
    m.start();
    let gpu = gpu_dir(&m);
    m.ok(&["vgpu", "create", "b", "--device", "0", "--memory", "256MiB", "--share", "20", "--user", ATTACKER]);
    m.ok(&["vgpu", "create", "owner-secret", "--device", "0", "--memory", "256MiB", "--share", "20"]);
    m.ok(&[
        "vgpu",
        "create",
        "tenant-secret",
        "--device",
        "0",
        "--memory",
        "256MiB",
        "--share",
        "20",
        "--user",
        TENANT,
    ]);
    let files = daemon_files(&m);
    let region = m.region().to_string_lossy().into_owned();
    let confs: Vec<PathBuf> = (0..3).map(|i| PathBuf::from(conf_path(&region, i))).collect();
    let state = m.file("state/vgpus.json");
    let mut all = files.clone();
    all.extend(confs.iter().cloned());
    all.push(state.clone());
    // A user with no vGPU reads none of it: not the region, not a vGPU's settings or state.
    let nobody = common::try_as(NOBODY, "ro", &all);
    let none = ["EACCES", "EACCES", "EACCES", "EACCES", "EACCES", "EACCES", "ENOENT", "EACCES", "EACCES", "EACCES"];
    assert_eq!(nobody, [&none[..], &["EACCES"]].concat(), "{all:?}");
    // The user of a vGPU reads the region its tenants map, its own vGPU's settings and state, no other.
    let own = common::try_as(attacker, "ro", &all);
    let mine = ["ok", "EACCES", "EACCES", "ok", "EACCES", "EACCES", "ENOENT", "ok", "EACCES", "EACCES", "EACCES"];
    assert_eq!(own, mine, "{all:?}");
    // And the region it may read holds no other vGPU's name: they are in the files it may not read.
    assert_eq!(holds_as(attacker, &m.region(), &["owner-secret", "tenant-secret"]), [false, false]);
    assert_eq!(holds_as(attacker, &confs[0], &["b"]), [true], "its own vGPU's name it reads");
    let (ok, total, stderr, _) = tenant_as(&m, &gpu, attacker, "b");
    assert!(ok && total == 256 << 20, "{stderr}");
    let (ok, total, stderr, _) = tenant_as(&m, &gpu, tenant, "tenant-secret");
    assert!(ok && total == 256 << 20, "another user's tenant: {stderr}");
    // A restarted daemon lets it read the region and its settings again, still no one else's; once its
    // vGPU is removed, it reads nothing.
    m.stop_daemon();
    m.start();
    assert_eq!(common::try_as(attacker, "ro", &[&files[0], &confs[0], &confs[2]]), ["ok", "ok", "EACCES"]);
    assert_eq!(holds_as(attacker, &m.region(), &["owner-secret", "tenant-secret"]), [false, false]);
    assert_eq!(common::try_as(NOBODY, "ro", &files[..1]), ["EACCES"]);
    m.ok(&["vgpu", "rm", "b"]);
    assert_eq!(common::try_as(attacker, "ro", &[&files[0], &confs[0]]), ["EACCES", "ENOENT"]);
    let owners = m.show("owner-secret");
    assert_eq!(u64_at(&owners, "memory"), 256 << 20, "the others are as they were: {owners}");
}

/// Whether the file at `path`, read as user `who`, holds each of `needles` (as bytes).
fn holds_as(who: (u32, u32), path: &Path, needles: &[&str]) -> Vec<bool> {
    let script = "import sys\ndata = open(sys.argv[1], 'rb').read()\nfor n in sys.argv[2:]: print(n.encode() in data)";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script]).arg(path).args(needles).uid(who.0).gid(who.1);
    let out = cmd.output().expect("python3");
    assert!(out.status.success(), "reading {path:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l == "True").collect()
}
