//! What a new user meets first, each answered plainly: `tessera cdi generate --output spec.json` (a bare
//! file name) writes the file in the current directory and succeeds; a quota smaller than one context's
//! footprint is refused naming the footprint, for `create` and `set`; and a daemon that is not root,
//! asked to give a vGPU to another user, says it must run as root to do that.

use crate::common;

use common::Guarded;
use common::tessera::{Machine, UserHome};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

#[test]
fn cdi_generate_writes_a_bare_file_name_in_the_current_directory() {
    let mut m = Machine::new("new-cdi-bare", "small");
    m.start();
    m.ok(&["vgpu", "create", "team", "--device", "0", "--memory", "256MiB", "--share", "10"]);
    let dev = m.file("dev");
    std::fs::create_dir_all(&dev).unwrap();
    for node in ["nvidiactl", "nvidia0"] {
        std::fs::write(dev.join(node), b"").unwrap();
    }
    let here = m.file("here");
    std::fs::create_dir_all(&here).unwrap();
    let out = m
        .command(&["cdi", "generate", "--dev-dir", dev.to_str().unwrap(), "--output", "spec.json"])
        .current_dir(&here)
        .output()
        .expect("run tessera cdi generate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("wrote spec.json"), "{:?}: {stderr}", out.status);
    let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(here.join("spec.json")).unwrap()).unwrap();
    assert!(spec["devices"].as_array().is_some_and(|d| d.iter().any(|d| d["name"] == "team")), "{spec}");
    let listing: Vec<_> = std::fs::read_dir(&here).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listing, ["spec.json"], "no temporary file is left behind");
}

#[test]
fn a_quota_below_one_context_is_refused_naming_the_footprint() {
    let mut m = Machine::new("new-footprint", "small");
    m.start();
    let e = m.fails(1, &["vgpu", "create", "tiny", "--device", "0", "--memory", "1KiB", "--share", "10"]);
    assert!(e.contains("1.0 KiB") && e.contains("below one CUDA context's footprint (64.0 MiB"), "{e}");
    m.ok(&["vgpu", "create", "team", "--device", "0", "--memory", "256MiB", "--share", "10"]);
    let e = m.fails(1, &["vgpu", "set", "team", "--memory", "1KiB"]);
    assert!(e.contains("below one CUDA context's footprint (64.0 MiB"), "{e}");
    let list = m.list();
    let vgpus = list.as_array().expect("a list");
    assert_eq!(vgpus.len(), 1, "nothing created: {list}");
    assert_eq!(vgpus[0]["memory"].as_u64(), Some(256 << 20), "nothing changed: {list}");
}

#[test]
fn a_daemon_that_is_not_root_says_it_must_be_to_give_a_vgpu_to_another_user() {
    let owner = common::user("tessera-nu-owner");
    let other = common::user("tessera-nu-other");
    let m = Machine::new("new-user-nonroot", "small");
    // The daemon's files in a directory of its user's own.
    let home = UserHome::new(&m, owner);
    let command = |args: &[&str]| {
        let mut cmd = m.command(args);
        home.apply(&mut cmd);
        cmd
    };
    let mut daemon = command(&["daemon"]);
    daemon.uid(owner.0).gid(owner.1).stderr(Stdio::piped());
    let mut daemon = Guarded::spawn(&mut daemon).expect("spawn tessera daemon");
    // The client runs as root, which the daemon's socket lets in too.
    common::wait_until_answering(&mut daemon, || command(&["vgpu", "list"]).output().unwrap().status.success());
    let to = |uid: u32| {
        let uid = uid.to_string();
        command(&["vgpu", "create", "v", "--device", "0", "--memory", "256MiB", "--share", "10", "--user", &uid])
            .output()
            .unwrap()
    };
    let out = to(other.0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("uid {}", other.0))
            && stderr.contains("the daemon must run as root to give a vGPU to another user"),
        "{stderr}"
    );
    // Its own user it may give one to.
    let out = to(owner.0);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
