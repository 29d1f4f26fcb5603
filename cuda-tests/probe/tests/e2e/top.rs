//! `tessera top` end to end, against a real daemon with two vGPUs and a load in one: under a real tmux
//! (a private server, an 80×24 window) the live view shows both vGPUs, updates, changes its sort on `s`,
//! shows the loaded vGPU's process when it is selected with Down, and on `q` exits with the terminal
//! restored (main screen, cooked mode, cursor shown). `--once` prints the same columns as plain text,
//! `--json` the daemon's stats; without a daemon it says how to start one and fails, without hanging.

use crate::common;

use common::tessera::{Machine, tessera};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_client::{Stats, VgpuSpec};

/// Longest wait for anything the view should show (a loaded two-core host, a poll every 200 ms).
const WAIT: Duration = Duration::from_secs(40);

/// A private tmux server (`tmux -L NAME`), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(tag: &str) -> Tmux {
        let apt = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/apt-once.sh");
        let status = Command::new(&apt).arg("tmux:tmux").status().expect("run tools/apt-once.sh");
        assert!(status.success(), "tools/apt-once.sh tmux:tmux failed: tmux is needed");
        Tmux { socket: format!("tessera-test-{}-{tag}", std::process::id()) }
    }

    /// Runs `tmux -L SOCKET ARGS`, failing the test unless it succeeds; returns its stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("run tmux");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's screen as text.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits until the screen satisfies `ok`; returns it.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "the screen never showed {what}:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").arg("-L").arg(&self.socket).arg("kill-server").output();
    }
}

/// The row of vGPU `name` on `screen` (its first word after the selection mark).
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.trim_start_matches(['>', ' ']).split_whitespace().next() == Some(name))
}

/// A machine with vGPUs `alpha` (idle) and `beta` running a saturating load; returns the load's pid.
fn machine_with_load(tag: &str) -> (Machine, common::Guarded, u32) {
    let mut m = Machine::new(tag, "small");
    m.start();
    let client = m.client();
    client.create(VgpuSpec::new("alpha", 0, 1 << 30, 40)).unwrap();
    client.create(VgpuSpec::new("beta", 0, 1 << 30, 50)).unwrap();
    let load = m.saturate("beta", "120", None);
    let pid = load.id();
    let deadline = Instant::now() + WAIT;
    loop {
        let stats = client.stats(Some("beta")).unwrap();
        if stats.vgpus[0].launches > 0 && stats.vgpus[0].processes.iter().any(|p| p.pid == pid) {
            break;
        }
        assert!(Instant::now() < deadline, "the load never launched: {stats:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (m, load, pid)
}

/// A shell script running `tessera top ARGS` in the machine's environment, then saying how it exited and
/// whether the terminal is back in cooked mode, and staying (so that the pane can be read).
fn script(m: &Machine, args: &str) -> PathBuf {
    let cmd = m.command(&[]);
    let mut text = String::from("#!/bin/sh\n");
    for (k, v) in cmd.get_envs() {
        text += &match v {
            Some(v) => format!("export {}='{}'\n", k.to_string_lossy(), v.to_string_lossy()),
            None => format!("unset {}\n", k.to_string_lossy()),
        };
    }
    text += &format!(
        "{} top {args}\necho \"top exited: $?\"\ncase \"$(stty -a)\" in *-icanon*) echo 'terminal: raw';; *) echo 'terminal: cooked';; esac\nexec sleep 300\n",
        tessera().display()
    );
    let path = m.file("top.sh");
    std::fs::write(&path, text).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

#[test]
fn top_under_tmux_shows_updates_sorts_selects_and_quits() {
    let (m, _load, pid) = machine_with_load("top-tmux");
    let tmux = Tmux::new("top");
    let script = script(&m, "--interval 200ms");
    tmux.run(&["new-session", "-d", "-s", "top", "-x", "80", "-y", "24", &script.to_string_lossy()]);

    let first = tmux.wait_for("both vGPUs", |s| row(s, "alpha").is_some() && row(s, "beta").is_some());
    assert!(first.contains("sort: name"), "{first}");
    assert!(first.lines().next().unwrap().starts_with("tessera top  2 vGPUs on 1 device"), "{first}");
    assert_eq!(tmux.run(&["display", "-p", "-t", "top", "#{alternate_on}"]).trim(), "1", "the alternate screen");
    // The loaded vGPU's row changes from poll to poll (its launch rate, its share, its trend).
    let before = row(&first, "beta").unwrap().to_string();
    tmux.wait_for("beta's row updated", |s| row(s, "beta").is_some_and(|r| r != before));

    tmux.run(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("the sort by achieved share", |s| s.contains("sort: achieved"));
    // beta, the busy one, is first by achieved share: Down selects it and the panel shows its process.
    tmux.run(&["send-keys", "-t", "top", "Down"]);
    let pid = pid.to_string();
    let selected = tmux.wait_for("beta's process", |s| {
        s.contains("PROCESSES of beta") && s.lines().any(|l| l.split_whitespace().next() == Some(pid.as_str()))
    });
    let line = selected.lines().find(|l| l.split_whitespace().next() == Some(pid.as_str())).unwrap();
    assert!(line.contains("simgpu-probe"), "the process's command:\n{selected}");
    assert!(row(&selected, "beta").unwrap().starts_with('>'), "beta is marked:\n{selected}");

    tmux.run(&["send-keys", "-t", "top", "q"]);
    let after = tmux.wait_for("top's exit", |s| s.contains("terminal: "));
    assert!(after.contains("top exited: 0"), "{after}");
    assert!(after.contains("terminal: cooked"), "raw mode is off again:\n{after}");
    assert!(row(&after, "alpha").is_none(), "the main screen is back:\n{after}");
    let flags = tmux.run(&["display", "-p", "-t", "top", "#{alternate_on} #{cursor_flag}"]);
    assert_eq!(flags.trim(), "0 1", "main screen, cursor shown");
}

#[test]
fn once_and_json_print_one_frame_and_one_snapshot() {
    let (m, _load, pid) = machine_with_load("top-once");
    let once = m.ok(&["top", "--once"]);
    assert!(!once.contains('\x1b'), "plain text:\n{once}");
    assert!(once.starts_with("tessera top  2 vGPUs on 1 device  sort: name\n"), "{once}");
    let header = row(&once, "NAME").unwrap_or_else(|| panic!("no vGPU table:\n{once}"));
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        ["NAME", "SHARE", "NOW", "10S", "TREND", "TOKENS", "LNCH/S", "WAIT", "MEMORY", "PRIO", "STATE"],
        "the live view's 80-column set:\n{once}"
    );
    assert!(row(&once, "alpha").unwrap().contains("40%"), "{once}");
    assert!(row(&once, "beta").unwrap().contains("50%"), "{once}");
    assert!(once.lines().any(|l| l.contains(&pid.to_string()) && l.contains("beta")), "{once}");
    assert!(once.lines().all(|l| l.chars().count() <= 80), "{once}");

    let json: Stats = serde_json::from_str(&m.ok(&["top", "--json"])).expect("--json prints the stats");
    let names: Vec<&str> = json.vgpus.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(json.vgpus[1].launches > 0 && json.devices.len() == 1, "{json:?}");

    let stderr = m.fails(1, &["top"]);
    assert!(stderr.contains("needs a terminal") && stderr.contains("--once"), "{stderr}");
    let stderr = m.fails(2, &["top", "--interval", "2s"]);
    assert!(stderr.contains("outside 100ms-500ms"), "{stderr}");
    let stderr = m.fails(2, &["top", "--once", "--json"]);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn without_a_daemon_top_says_how_to_start_one() {
    let m = Machine::new("top-nodaemon", "small");
    for args in [&["top"][..], &["top", "--once"], &["top", "--json"]] {
        let start = Instant::now();
        let stderr = m.fails(1, args);
        assert!(stderr.contains("no Tessera daemon") && stderr.contains("tessera daemon"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(start.elapsed() < WAIT, "{args:?} took {:?}", start.elapsed());
    }
}

#[test]
fn help_advertises_only_commands_that_exist() {
    let m = Machine::new("top-help", "small");
    let help = m.ok(&["--help"]);
    let commands: Vec<&str> = help
        .split_once("Commands:")
        .expect("a command list")
        .1
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&c| c != "help")
        .collect();
    assert!(commands.contains(&"top"), "{help}");
    for c in commands {
        let out = m.tessera(&[c, "--help"]);
        assert!(out.status.success(), "`tessera {c} --help` fails: {}", String::from_utf8_lossy(&out.stderr));
    }
}
