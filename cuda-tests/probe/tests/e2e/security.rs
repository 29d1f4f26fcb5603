//! Files created safely (issue 13): another user can neither plant the daemon's region, a vGPU's file or
//! the daemon's lock and profit from it, nor squat the default directory; a zeroed region, a symbolic
//! link and another user's region or vGPU file are refused by name. Each attack runs as a second user,
//! created here when missing (these tests run as root, as CI does).

use crate::common;

use common::tessera::{Machine, mode};
use common::{Guarded, u64_at};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_region::open::live_path;
use tessera_region::{AREA, LAYOUT_SIZE, LIVE_MAGIC};

/// The attacker: a user of its own, so that nothing else on the machine runs as it.
const ATTACKER: &str = "tessera-test-b";
/// The user whose default directory the squatting test uses.
const OWNER: &str = "tessera-test-a";
/// A third user, `nobody`.
const NOBODY: u32 = 65534;

/// A directory outside the machine's (a user's default one), removed when dropped, even by a failing test.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory of the machine's, mode 1777 like `/dev/shm` (any user may add files, none replace another's).
fn shared_dir(m: &Machine) -> PathBuf {
    let dir = m.file("shm");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

/// A process of user `who` that creates `path` (mode 0666, holding `content`), flocks it if `lock`, says
/// `ready`, and keeps it open: on each stdin line it writes 0xff over `AREA` bytes of it through the
/// descriptor it holds and says `wrote`.
fn plant(who: (u32, u32), path: &Path, content: &str, lock: bool) -> Guarded {
    let script = r#"
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
os.fchmod(fd, 0o666)
os.write(fd, sys.argv[2].encode())
if sys.argv[3] == "lock":
    fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
for line in sys.stdin:
    os.pwrite(fd, b"\xff" * int(sys.argv[4]), 0)
    print("wrote", flush=True)
"#;
    let how = if lock { "lock" } else { "hold" };
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, path.to_str().unwrap(), content, how, &AREA.to_string()])
        .uid(who.0)
        .gid(who.1)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Guarded::spawn(&mut cmd).expect("python3");
    assert_eq!(say(&mut child, None), "ready", "the attacker could not plant {}", path.display());
    child
}

/// Sends `line` (if any) to a planting process and returns the line it answers.
fn say(child: &mut Child, line: Option<&str>) -> String {
    if let Some(l) = line {
        writeln!(child.stdin.as_mut().unwrap(), "{l}").unwrap();
    }
    let mut answer = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut answer).unwrap();
    answer.trim().to_string()
}

/// Runs `cmd` (a daemon that must not start) and returns its stderr; a daemon still running after 10 s
/// started, and fails the test.
fn refused(cmd: &mut Command) -> String {
    let mut child = Guarded::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::piped())).expect("spawn tessera daemon");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let out = child.into_child().wait_with_output().unwrap();
            panic!("the daemon started: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.into_child().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_region_planted_by_another_user_is_refused_and_gains_it_nothing() {
    let attacker = common::user(ATTACKER);
    let m = Machine::new("sec-region", "small");
    let region = shared_dir(&m).join("tessera.region");
    let mut planter = plant(attacker, &region, "", false);
    let e = refused(m.command(&["daemon"]).env("TESSERA_REGION", &region));
    assert!(e.contains(region.to_str().unwrap()) && e.contains(&format!("belongs to uid {}", attacker.0)), "{e}");
    assert!(e.contains(ATTACKER) && e.contains("TESSERA_REGION"), "names its owner and the remedy: {e}");
    // Nothing was written where the attacker can reach it, and nothing was started.
    assert_eq!(std::fs::metadata(&region).unwrap().len(), 0);
    assert!(!m.socket().exists());
    drop(planter.stdin.take());
    planter.wait().unwrap();
}

#[test]
fn a_vgpu_file_planted_for_another_tenant_is_refused_and_cannot_reach_it() {
    let attacker = common::user(ATTACKER);
    let mut m = Machine::new("sec-live", "small");
    let region = shared_dir(&m).join("tessera.region");
    m.configure(|sim| sim.with("TESSERA_REGION", region.to_str().unwrap()));
    m.start();
    let live = PathBuf::from(live_path(region.to_str().unwrap(), 0));
    let mut planter = plant(attacker, &live, "", false);
    let e = m.fails(1, &["vgpu", "create", "victim", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    assert!(e.contains(live.to_str().unwrap()) && e.contains(&format!("belongs to uid {}", attacker.0)), "{e}");
    assert!(m.list().as_array().unwrap().is_empty(), "nothing was created: {}", m.list());
    // Removed by root, the file is made anew: the descriptor the attacker holds reaches nothing of it.
    std::fs::remove_file(&live).unwrap();
    m.ok(&["vgpu", "create", "victim", "--device", "0", "--memory", "1GiB", "--share", "50"]);
    assert_eq!(say(&mut planter, Some("write")), "wrote");
    let bytes = std::fs::read(&live).unwrap();
    assert_eq!(&bytes[..8], &LIVE_MAGIC.to_le_bytes(), "the vGPU's file is intact");
    let meta = std::fs::metadata(&live).unwrap();
    assert_eq!((meta.uid(), meta.nlink(), mode(&live)), (0, 1, 0o600));
    // The victim runs: alone on the device with a 50% share, it may use all of it (a measured share).
    let turn = common::timing_turn();
    let out = m.tenant("victim", &["saturate", "--ns", "500us", "--seconds", "1", "--depth", "4"]).output().unwrap();
    let run = common::finished(out);
    assert!(run.success, "{}\n{}", run.json, run.stderr);
    let busy = u64_at(&run.json, "engine_ns") as f64 / u64_at(&run.json, "wall_ns") as f64;
    drop(turn);
    assert!(busy > 0.25, "the victim is held back: {}", run.json);
    drop(planter.stdin.take());
    planter.wait().unwrap();
}

#[test]
fn a_lock_held_by_another_user_is_refused_without_its_pid() {
    let attacker = common::user(ATTACKER);
    let m = Machine::new("sec-lock", "small");
    let region = shared_dir(&m).join("tessera.region");
    let lock = PathBuf::from(format!("{}.lock", region.display()));
    let mut planter = plant(attacker, &lock, "1\n", true);
    let e = refused(m.command(&["daemon"]).env("TESSERA_REGION", &region));
    assert!(e.contains(lock.to_str().unwrap()) && e.contains(ATTACKER), "names the file and its owner: {e}");
    assert!(!e.contains("pid 1") && !e.contains("already running"), "repeats what the attacker wrote: {e}");
    drop(planter.stdin.take());
    planter.wait().unwrap();
    // In the daemon's own directory (the machine's, root's, 0755) nobody else can create the lock at all.
    assert_eq!(common::try_as(attacker, "create", &[&m.dir]), ["EACCES"]);
}

#[test]
fn the_default_directory_is_the_users_own_and_cannot_be_squatted() {
    let owner = common::user(OWNER);
    let dir = PathBuf::from(format!("/dev/shm/tessera-{}", owner.0));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = Removed(dir.clone());
    let m = Machine::new("sec-default", "small");
    let state = m.file("state-a");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(owner.0), Some(owner.1)).unwrap();
    let as_owner = |args: &[&str]| {
        let mut cmd = m.command(args);
        cmd.env_remove("TESSERA_REGION").env_remove("TESSERA_SOCKET").env("TESSERA_STATE_DIR", &state);
        cmd.env("SIMGPU_STATE", state.join("simgpu.state")).uid(owner.0).gid(owner.1);
        cmd
    };
    // Squatted by another user: refused, naming the directory and its owner.
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = refused(&mut as_owner(&["daemon"]));
    assert!(e.contains(dir.to_str().unwrap()) && e.contains("nobody"), "{e}");
    std::fs::remove_dir(&dir).unwrap();
    // Free: the daemon makes it, 0711, and keeps its region, lock and socket there.
    let mut daemon = Guarded::spawn(as_owner(&["daemon"]).stderr(Stdio::piped())).expect("spawn tessera daemon");
    common::wait_until_answering(&mut daemon, || as_owner(&["vgpu", "list"]).output().unwrap().status.success());
    let meta = std::fs::symlink_metadata(&dir).unwrap();
    let names = ["tessera.region", "tessera.region.lock", "tessera.sock"];
    let present: Vec<bool> = names.iter().map(|n| dir.join(n).exists()).collect();
    let region = dir.join("tessera.region");
    let nobody = (NOBODY, NOBODY);
    let (reach, list, create) = (
        common::try_as(nobody, "ro", &[&region]),
        common::try_as(nobody, "list", &[&dir]),
        common::try_as(nobody, "create", &[&dir]),
    );
    drop(daemon);
    assert_eq!((meta.uid(), meta.mode() & 0o7777, meta.is_dir()), (owner.0, 0o711, true));
    assert_eq!(present, [true; 3], "{names:?} in {}", dir.display());
    // Another user, with no vGPU of its own, can neither read the region (its vGPUs' names and settings),
    // nor list nor add anything.
    assert_eq!((reach, list, create), (vec!["EACCES".to_string()], vec!["EACCES".into()], vec!["EACCES".into()]));
}

#[test]
fn zeroed_and_linked_regions_are_refused_by_name() {
    let m = Machine::new("sec-zero", "small");
    let region = m.region();
    std::fs::write(&region, vec![0u8; LAYOUT_SIZE]).unwrap();
    let e = refused(&mut m.command(&["daemon"]));
    assert!(e.contains(region.to_str().unwrap()) && e.contains("all zeros") && e.contains("remove it"), "{e}");
    assert!(std::fs::read(&region).unwrap().iter().all(|&b| b == 0), "left as it was");
    // A symbolic link to a region, or a directory that is one, is never followed.
    std::fs::remove_file(&region).unwrap();
    tessera_region::file::RegionFile::open(m.file("real.region").to_str().unwrap()).unwrap();
    std::os::unix::fs::symlink(m.file("real.region"), &region).unwrap();
    let e = refused(&mut m.command(&["daemon"]));
    assert!(e.contains(region.to_str().unwrap()) && e.contains("symbolic link"), "{e}");
    let linked = m.file("linked-dir");
    std::os::unix::fs::symlink(&m.dir, &linked).unwrap();
    let e = refused(m.command(&["daemon"]).env("TESSERA_REGION", linked.join("other.region")));
    assert!(e.contains(linked.to_str().unwrap()) && e.contains("symbolic link"), "{e}");
}

#[test]
fn the_shim_refuses_a_region_or_vgpu_file_of_another_user() {
    let attacker = common::user(ATTACKER);
    let mut m = Machine::new("sec-shim", "small");
    m.start();
    m.ok(&["vgpu", "create", "mine", "--device", "0", "--memory", "256MiB", "--share", "40", "--user", "nobody"]);
    let live = PathBuf::from(live_path(m.region().to_str().unwrap(), 0));
    // The simulated GPU's own state must be the tenants' to write (a real driver needs no such file).
    let gpu = m.file("tenant-gpu");
    std::fs::create_dir(&gpu).unwrap();
    std::fs::set_permissions(&gpu, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tenant = |who: (u32, u32), region: Option<&Path>| {
        let mut c = m.tenant("mine", &["mem-info"]);
        c.env("SIMGPU_STATE", gpu.join(format!("{}.state", who.0))).uid(who.0).gid(who.1);
        if let Some(r) = region {
            c.env("TESSERA_REGION", r);
        } else {
            c.env_remove("TESSERA_REGION");
        }
        common::finished(c.output().expect("run a tenant"))
    };
    let nobody = (NOBODY, NOBODY);
    let joined = tenant(nobody, Some(&m.region()));
    assert!(joined.success && u64_at(&joined.json, "total") == 256 << 20, "{}\n{}", joined.json, joined.stderr);
    // Its vGPU file given to another user, even writable by all: refused, naming it and its owner.
    std::os::unix::fs::chown(&live, Some(attacker.0), None).unwrap();
    std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o666)).unwrap();
    let run = tenant(nobody, Some(&m.region()));
    let owned = format!("belongs to uid {} ({ATTACKER})", attacker.0);
    assert!(
        !run.success && run.stderr.contains(live.to_str().unwrap()) && run.stderr.contains(&owned),
        "{}",
        run.stderr
    );
    // Its own, but writable by all: refused too.
    std::os::unix::fs::chown(&live, Some(NOBODY), None).unwrap();
    let run = tenant(nobody, Some(&m.region()));
    assert!(!run.success && run.stderr.contains("mode 0666"), "{}", run.stderr);
    // At the default path, in the user's own directory, a region of another user (not root) is refused.
    let dir = PathBuf::from(format!("/dev/shm/tessera-{}", attacker.0));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = Removed(dir.clone());
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::os::unix::fs::chown(&dir, Some(attacker.0), Some(attacker.1)).unwrap();
    let planted = dir.join("tessera.region");
    std::fs::copy(m.region(), &planted).unwrap();
    std::os::unix::fs::chown(&planted, Some(NOBODY), None).unwrap();
    // Readable by all, as whoever plants a region makes it (the daemon's own lets only its tenants read).
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = tenant(attacker, None);
    let owned = "belongs to uid 65534 (nobody), neither this user nor root";
    assert!(
        !run.success && run.stderr.contains(planted.to_str().unwrap()) && run.stderr.contains(owned),
        "{}",
        run.stderr
    );
}

#[test]
fn a_socket_of_another_user_is_never_taken_for_the_daemons() {
    let attacker = common::user(ATTACKER);
    let mut m = Machine::new("sec-socket", "small");
    let socket = shared_dir(&m).join("tessera.sock");
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen()
print("ready", flush=True)
sys.stdin.read()
"#;
    let mut listener = Command::new("python3");
    listener.args(["-c", script, socket.to_str().unwrap()]).uid(attacker.0).gid(attacker.1);
    let mut listener = Guarded::spawn(listener.stdin(Stdio::piped()).stdout(Stdio::piped())).expect("python3");
    assert_eq!(say(&mut listener, None), "ready");
    // In a shared directory it is refused by name and owner, neither connected to nor removed.
    let e = refused(m.command(&["daemon"]).env("TESSERA_SOCKET", &socket));
    assert!(e.contains(socket.to_str().unwrap()) && e.contains(ATTACKER), "{e}");
    assert!(!e.contains("already running"), "{e}");
    drop(listener.stdin.take());
    listener.wait().unwrap();
    // In the daemon's own directory only a leftover can be another user's: it is replaced.
    std::fs::rename(&socket, m.socket()).unwrap();
    m.start();
    assert_eq!(std::fs::symlink_metadata(m.socket()).unwrap().uid(), 0);
}
