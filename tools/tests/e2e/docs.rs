//! The documentation's commands are run by tests: every command line in a ```` ```sh ```` block of README.md
//! and docs/**/*.md is either run here, in a sandbox of its own (simulated GPU, private daemon files in a
//! temporary directory), or written verbatim in a test source that runs it. Other code blocks carry a tag
//! saying what they are (`text`, `json`, `yaml`, `c`, ...), so a command cannot hide in an untagged block.
//! The convention is in docs/development.md. Also checked: the README's length and line width, no line in a
//! code block that reads like a Markdown heading, and every relative link (file and anchor) resolves.
//!
//! Needs the release build of the workspace (the simulated driver beside `tessera`), as `tools/test-all.sh`
//! makes first.

use crate::common::repo;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Commands this test runs itself, in this order, in one shell: a sandbox with `tessera` on `PATH` (also as
/// `./target/release/tessera`), the simulated GPU unless the machine has a driver, and the daemon's region,
/// socket and state in a temporary directory. A command ending in `&` runs in the background (the daemon);
/// the next command waits for its socket. Each must exit with status 0.
const RUN_HERE: &[&str] = &[
    "tessera --help",
    "tessera vgpu --help",
    "tessera info",
    "tessera info --json",
    "tessera simgpu env",
    "eval \"$(tessera simgpu env)\"",
    "tessera run --memory 8GiB -- python3 -c 'import ctypes; print(ctypes.CDLL(\"libcuda.so.1\").cuInit(0))'",
    "./target/release/tessera run --memory 8GiB -- python3 -c 'import ctypes; print(ctypes.CDLL(\"libcuda.so.1\").cuInit(0))'",
    "tessera daemon &",
    "tessera vgpu create team-a --device 0 --memory 8GiB --share 30",
    "tessera vgpu create batch --device 0 --memory 20GiB --share 50 --priority low --tensor-cores off",
    "tessera vgpu create notebooks --device 0 --memory 40GiB --share 10 --mode soft",
    "tessera vgpu list",
    "tessera vgpu show team-a --json",
    "tessera vgpu set team-a --share 40 --memory 10GiB",
    "tessera vgpu suspend batch",
    "tessera vgpu resume batch",
    "tessera vgpu snapshot batch",
    "tessera vgpu resume batch",
    "tessera vgpu defrag notebooks",
    "tessera vgpu swap-out notebooks",
    "tessera top --once",
    "tessera vgpu rm batch",
];

/// Commands a test source runs: (command as the docs show it, the file that runs it, relative to the
/// clone). The file must contain the command's text (`./target/release/tessera` written as `tessera`:
/// tests run the built binary), so deleting it from the test fails this one.
const RUN_BY: &[(&str, &str)] = &[
    // The suite's own build step.
    ("cargo build --workspace --release", "tools/test-all.sh"),
    // CI's entry point runs the whole suite.
    ("./tools/test-all.sh", ".ci/run"),
    // The demo end to end on the simulated GPU (a shorter run of the same command).
    ("./target/release/tessera demo", "cuda-tests/probe/tests/e2e/demo.rs"),
];

/// Fence tags that would hold shell commands outside the checked `sh` blocks.
const REFUSED_TAGS: &[&str] = &["bash", "shell", "console", "shell-session", "zsh", "shellsession"];

/// README.md and every Markdown file under docs/, relative to the clone, sorted.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = repo();
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files.sort();
    files.into_iter().map(|p| p.strip_prefix(&root).unwrap().to_path_buf()).collect()
}

/// One command of a ```` ```sh ```` block: where it is and what it says.
struct DocCommand {
    doc: PathBuf,
    line: usize,
    text: String,
}

/// A fenced code block: its tag, the line of its opening fence (1-based) and its lines with their numbers.
struct Block {
    tag: String,
    line: usize,
    lines: Vec<(usize, String)>,
}

/// The fenced code blocks of `text`; an unclosed block is an error.
fn blocks(doc: &Path, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => out.push(block),
                None => open = Some(Block { tag: rest.trim().to_string(), line: i + 1, lines: Vec::new() }),
            }
        } else if let Some(block) = open.as_mut() {
            block.lines.push((i + 1, line.to_string()));
        }
    }
    if let Some(block) = open {
        panic!("{}:{}: a code block is never closed", doc.display(), block.line);
    }
    out
}

/// `line` without a trailing `# comment` (a `#` after whitespace, outside quotes).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double, mut prev_space) = (false, false, true);
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return line[..i].trim_end(),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line.trim_end()
}

/// The command lines of an `sh` block: `\` continuations joined, comment and blank lines skipped.
fn commands(doc: &Path, block: &Block) -> Vec<DocCommand> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (number, line) in &block.lines {
        let line = line.trim();
        if pending.is_none() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        let (start, mut text) = pending.take().unwrap_or((*number, String::new()));
        let stripped = strip_comment(line);
        match stripped.strip_suffix('\\') {
            Some(head) => {
                text.push_str(head.trim_end());
                text.push(' ');
                pending = Some((start, text));
            }
            None => {
                text.push_str(stripped);
                out.push(DocCommand { doc: doc.to_path_buf(), line: start, text: text.trim().to_string() });
            }
        }
    }
    if let Some((start, _)) = pending {
        panic!("{}:{start}: a command ends with `\\` and nothing follows", doc.display());
    }
    out
}

/// Every command of every `sh` block of the docs, after checking the blocks' tags and contents.
fn doc_commands() -> Vec<DocCommand> {
    let root = repo();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for doc in doc_files() {
        let text = std::fs::read_to_string(root.join(&doc)).unwrap();
        for block in blocks(&doc, &text) {
            let at = format!("{}:{}", doc.display(), block.line);
            if block.tag.is_empty() {
                problems.push(format!("{at}: a code block without a tag (```sh for commands, ```text for output)"));
            } else if REFUSED_TAGS.contains(&block.tag.as_str()) {
                problems.push(format!("{at}: ```{} block: commands go in ```sh, output in ```text", block.tag));
            }
            for (number, line) in &block.lines {
                let hashes = line.trim_start().chars().take_while(|&c| c == '#').count();
                if (1..=6).contains(&hashes) && line.trim_start()[hashes..].starts_with(' ') {
                    problems.push(format!("{}:{number}: a code line that reads as a heading: {line}", doc.display()));
                }
            }
            if block.tag == "sh" {
                out.extend(commands(&doc, &block));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "documentation blocks break the convention (docs/development.md):\n{}",
        problems.join("\n")
    );
    out
}

#[test]
fn every_documented_command_is_run_by_a_test() {
    let root = repo();
    let commands = doc_commands();
    let run_by: BTreeMap<&str, &str> = RUN_BY.iter().copied().collect();
    let mut missing = Vec::new();
    for c in &commands {
        if !RUN_HERE.contains(&c.text.as_str()) && !run_by.contains_key(c.text.as_str()) {
            missing.push(format!("{}:{}: `{}`", c.doc.display(), c.line, c.text));
        }
    }
    assert!(
        missing.is_empty(),
        "commands shown in ```sh blocks that no test runs (add them to RUN_HERE or RUN_BY in tools/tests/e2e/docs.rs, \
         or show them in a ```text block marked as not run by the suite):\n{}",
        missing.join("\n")
    );
    // No stale entry: each one is a command the docs show.
    let shown: BTreeSet<&str> = commands.iter().map(|c| c.text.as_str()).collect();
    for entry in RUN_HERE.iter().chain(RUN_BY.iter().map(|(c, _)| c)) {
        assert!(shown.contains(entry), "tools/tests/e2e/docs.rs lists `{entry}`, which no ```sh block shows any more");
    }
    for (command, file) in RUN_BY {
        let source = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("read {file}: {e}"));
        let text = command.strip_prefix("./target/release/").unwrap_or(command);
        assert!(source.contains(text), "{file} no longer runs `{text}`, which the docs show: run it there or drop it");
    }
}

#[test]
fn the_commands_run_here_succeed() {
    let dir = std::env::temp_dir().join(format!("tessera-docs-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "target/release", "run", "state"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let tessera = env!("CARGO_BIN_EXE_tessera");
    std::os::unix::fs::symlink(tessera, dir.join("bin/tessera")).unwrap();
    std::os::unix::fs::symlink(tessera, dir.join("target/release/tessera")).unwrap();

    // One shell runs them all in order, so that `eval` and the background daemon work as they do for a reader;
    // each failure names its command by index.
    let mut script = String::from("trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n");
    for (i, command) in RUN_HERE.iter().enumerate() {
        script.push_str(&format!("echo '>>> {i}'\n{command}\n"));
        if command.ends_with('&') {
            script.push_str("for _ in $(seq 200); do [ -S \"$TESSERA_SOCKET\" ] && break; sleep 0.05; done\n");
        } else {
            script.push_str(&format!("s=$?; [ $s -eq 0 ] || {{ echo '!!! {i}' $s; exit 1; }}\n"));
        }
    }
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(&script).current_dir(&dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (key, _) in std::env::vars() {
        if key.starts_with("TESSERA_") || key.starts_with("SIMGPU_") || key == "LD_PRELOAD" {
            cmd.env_remove(key);
        }
    }
    cmd.env("PATH", path)
        .env("HOME", &dir)
        .env("SIMGPU_STATE", dir.join("simgpu.state"))
        .env("TESSERA_REGION", dir.join("run/tessera.region"))
        .env("TESSERA_SOCKET", dir.join("run/tessera.sock"))
        .env("TESSERA_STATE_DIR", dir.join("state"));
    let started = Instant::now();
    let child = cmd.spawn().expect("run bash");
    let out = wait_at_most(child, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let failed = stdout.lines().find_map(|l| l.strip_prefix("!!! ")).and_then(|l| l.split(' ').next());
        let which = failed.and_then(|i| i.parse::<usize>().ok()).map(|i| RUN_HERE[i]).unwrap_or("(none: timed out?)");
        panic!("documented command failed: `{which}` ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    }
    // What a reader is told to expect.
    assert!(stdout.lines().any(|l| l.trim() == "0"), "cuInit under `tessera run` did not print 0:\n{stdout}");
    assert!(started.elapsed() < Duration::from_secs(60), "the documented commands took {:?}", started.elapsed());
}

/// Waits for `child`, killing it after `limit`.
fn wait_at_most(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait for bash").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect bash's output")
}

#[test]
fn tessera_help_says_what_it_is_and_describes_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).arg("--help").output().expect("run tessera --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("share one NVIDIA GPU between unmodified CUDA programs"), "{help}");
    let section = help.split("Commands:").nth(1).expect("a Commands: section").split("\n\n").next().unwrap();
    let entries: Vec<&str> = section.lines().filter(|l| !l.trim().is_empty()).collect();
    for name in
        ["demo", "daemon", "vgpu", "devices", "mdev", "top", "info", "run", "k8s", "cdi", "simgpu", "completions"]
    {
        let entry = entries.iter().find(|l| l.split_whitespace().next() == Some(name));
        let entry = entry.unwrap_or_else(|| panic!("`tessera --help` does not list {name}:\n{help}"));
        assert!(entry.split_whitespace().count() > 2, "{name} has no description in `tessera --help`: {entry}");
    }
}

#[test]
fn the_readme_is_short_and_every_relative_link_resolves() {
    let root = repo();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.lines().count() <= 300, "README.md has {} lines (at most 300)", readme.lines().count());
    for (i, line) in readme.lines().enumerate() {
        assert!(line.chars().count() <= 120, "README.md:{}: {} characters (at most 120)", i + 1, line.chars().count());
    }
    let mut broken = Vec::new();
    for doc in doc_files() {
        let text = std::fs::read_to_string(root.join(&doc)).unwrap();
        for (number, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() { root.join(&doc) } else { root.join(doc.parent().unwrap()).join(file) };
            if !path.exists() {
                broken.push(format!("{}:{number}: {target}: no such file", doc.display()));
            } else if !anchor.is_empty() && path.extension().is_some_and(|e| e == "md") {
                let target_text = std::fs::read_to_string(&path).unwrap();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{}:{number}: {target}: no such heading", doc.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The targets of the Markdown links `[..](target)` outside code blocks, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            out.push((i + 1, tail[..end].to_string()));
            rest = &tail[end..];
        }
    }
    out
}

/// The anchors GitHub gives the headings of `text`: lower case, punctuation dropped, spaces as `-`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if in_code || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.insert(slug);
    }
    out
}
