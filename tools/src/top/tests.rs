//! The frame drawn from figures: what an 80×24 terminal shows, sorting, selection, keys, `--once`.

use super::terminal::{Flow, key};
use super::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tessera_client::{Achieved, DeviceStats, MemoryStats, Mode, Priority, ProcessStats, Stats, VgpuStats};

const GIB: u64 = 1 << 30;

fn vgpu(name: &str, share: u32, achieved: f64, used_gib: u64, launches: u64) -> VgpuStats {
    VgpuStats {
        name: name.into(),
        share,
        achieved: Achieved { last_1s_pct: achieved, last_10s_pct: achieved - 1.0 },
        launches,
        memory: MemoryStats { quota: 8 * GIB, used: used_gib * GIB, ..MemoryStats::default() },
        ..VgpuStats::default()
    }
}

/// Three vGPUs on one device at `at_s` seconds; `launches` scales their counters.
fn stats(at_s: u64, launches: u64) -> Stats {
    let mut inference = vgpu("inference", 50, 41.0, 6, 400 * launches);
    inference.priority = Priority::High;
    inference.processes =
        vec![ProcessStats { pid: 4242, soft: false, used: 6 * GIB, command: "python3".into(), snapshotted: false }];
    let mut training = vgpu("training", 30, 47.0, 3, 500 * launches);
    training.mode = Mode::Soft;
    training.memory.resident = 2 * GIB;
    training.memory.swapped = GIB;
    training.processes =
        vec![ProcessStats { pid: 777, soft: true, used: 3 * GIB, command: "train".into(), snapshotted: false }];
    let mut notebook = vgpu("notebook", 20, 12.0, 1, 100 * launches);
    notebook.cap = true;
    notebook.wait_ns = 10_000_000 * launches;
    notebook.processes =
        vec![ProcessStats { pid: 31337, soft: false, used: GIB, command: String::new(), snapshotted: false }];
    let device = DeviceStats {
        device: 0,
        name: "NVIDIA H100 80GB HBM3".into(),
        memory_total: 80 * GIB,
        memory_used: 10 * GIB,
        share_configured: 100,
        busy: Achieved { last_1s_pct: 99.0, last_10s_pct: 98.0 },
        power_watts: Some(312.4),
        vgpus: vec!["inference".into(), "training".into(), "notebook".into()],
        ..DeviceStats::default()
    };
    Stats { at_ns: at_s * 1_000_000_000, vgpus: vec![inference, training, notebook], devices: vec![device] }
}

/// An app after two polls a second apart.
fn app() -> App {
    let mut app = App::new(Some(500));
    app.history.push(stats(1, 1));
    app.history.push(stats(2, 2));
    app
}

/// The frame of `app` on a `width`×`height` terminal, as text.
fn frame(app: &App, width: u16, height: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    term.draw(|f| render::draw(&app.view(), f.area(), f.buffer_mut())).unwrap();
    render::text(term.backend().buffer())
}

/// The line of `text` whose first word (after the selection mark) is `name`.
fn line<'a>(text: &'a str, name: &str) -> &'a str {
    let first = |l: &&str| l.trim_start_matches('>').split_whitespace().next() == Some(name);
    text.lines().find(first).unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
}

fn press(app: &mut App, code: KeyCode) -> Flow {
    key(app, KeyEvent::new(code, KeyModifiers::NONE))
}

#[test]
fn an_80_by_24_frame_shows_every_device_and_vgpu_with_its_figures() {
    let app = app();
    let text = frame(&app, 80, 24);
    assert!(text.starts_with("tessera top  3 vGPUs on 1 device  sort: name  every 500 ms"), "{text}");
    let words = |l: &str| l.trim_start_matches('>').split_whitespace().map(String::from).collect::<Vec<_>>();
    // The header names every required column, STATE (the last) in full.
    assert_eq!(
        words(line(&text, "NAME")),
        ["NAME", "SHARE", "NOW", "10S", "TREND", "TOKENS", "LNCH/S", "WAIT", "MEMORY", "PRIO", "STATE"]
    );
    // inference: 400 launches in the second between the polls; its history has two polls.
    assert_eq!(
        words(line(&text, "inference")),
        ["inference", "50%", "41%", "40%", "▄▄", "0.0ms", "400", "0%", "6.0G/8.0G", "high", "running"]
    );
    let notebook = words(line(&text, "notebook"));
    assert_eq!(notebook[1..3], ["20%", "cap"]);
    assert_eq!(notebook[notebook.len() - 3..], ["1.0G/8.0G", "norm", "capped"], "it waited 1% of the second");
    assert!(line(&text, "training").contains("47%"), "{text}");
    let device = words(line(&text, "0"));
    assert_eq!(device[1..3], ["NVIDIA", "H100"]);
    assert_eq!(device[device.len() - 8..], ["99%", "98%", "10G/80G", "100%", "-", "312W", "-", "3"]);
    assert!(text.contains("PROCESSES of every vGPU"), "{text}");
    for pid in ["4242", "777", "31337"] {
        assert!(text.contains(pid), "every process is listed while none is selected:\n{text}");
    }
    assert!(text.lines().last().unwrap().contains("q quit"), "the keys on the last line:\n{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80));
}

#[test]
fn a_wider_terminal_shows_more_columns_and_whole_names() {
    let mut app = app();
    let mut s = stats(3, 3);
    s.vgpus[0].name = "inference-large-model".into();
    app.history.push(s);
    let narrow = frame(&app, 80, 24);
    assert!(narrow.contains("inferenc…"), "{narrow}");
    let wide = frame(&app, 140, 30);
    let header = line(&wide, "NAME");
    for column in ["DEV", "RESIDENT", "SWAPPED", "PROCS"] {
        assert!(header.contains(column), "{wide}");
    }
    assert!(wide.contains("inference-large-model"), "{wide}");
    assert!(line(&wide, "training").contains("2.0G") && line(&wide, "training").contains("1.0G"), "{wide}");
}

#[test]
fn s_cycles_the_sort_and_the_rows_follow() {
    let mut app = app();
    let order = |app: &App| {
        let text = frame(app, 80, 24);
        let names = ["inference", "training", "notebook"];
        let mut rows: Vec<(usize, &str)> = names
            .iter()
            .map(|n| (text.lines().position(|l| l.trim_start_matches(['>', ' ']).starts_with(n)).unwrap(), *n))
            .collect();
        rows.sort();
        (rows.into_iter().map(|(_, n)| n).collect::<Vec<_>>(), text)
    };
    assert_eq!(order(&app).0, ["inference", "notebook", "training"]);
    assert_eq!(press(&mut app, KeyCode::Char('s')), Flow::Continue);
    let (rows, text) = order(&app);
    assert_eq!(rows, ["training", "inference", "notebook"], "by achieved share");
    assert!(text.contains("sort: achieved"), "{text}");
    press(&mut app, KeyCode::Char('s'));
    assert_eq!(order(&app).0, ["inference", "training", "notebook"], "by configured share");
    press(&mut app, KeyCode::Char('s'));
    assert_eq!(order(&app).0, ["inference", "training", "notebook"], "by memory used");
    press(&mut app, KeyCode::Char('s'));
    assert_eq!(order(&app).0, ["training", "inference", "notebook"], "by launches per second");
    press(&mut app, KeyCode::Char('s'));
    assert_eq!(order(&app).0[0], "notebook", "by waiting");
    press(&mut app, KeyCode::Char('s'));
    assert!(frame(&app, 80, 24).contains("sort: name"));
}

#[test]
fn arrows_select_a_vgpu_and_the_panel_shows_its_processes() {
    let mut app = app();
    press(&mut app, KeyCode::Down);
    let text = frame(&app, 80, 24);
    assert!(line(&text, "inference").starts_with('>'), "down selects the first row:\n{text}");
    assert!(text.contains("PROCESSES of inference: 6.0G of 8.0G in use"), "{text}");
    let pid = line(&text, "4242");
    assert!(pid.contains("python3") && pid.contains("hard"), "{text}");
    assert!(!text.contains("31337"), "only the selected vGPU's processes:\n{text}");
    press(&mut app, KeyCode::Down);
    let text = frame(&app, 80, 24);
    assert!(line(&text, "31337").contains('?'), "a process whose command is unknown:\n{text}");
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Down);
    let text = frame(&app, 80, 24);
    assert!(text.contains("PROCESSES of training: 3.0G of 8.0G in use, 2.0G resident, 1.0G swapped"), "{text}");
    // The selection follows the vGPU when the order changes.
    press(&mut app, KeyCode::Char('s'));
    assert!(line(&frame(&app, 80, 24), "training").starts_with('>'));
    press(&mut app, KeyCode::Up);
    assert_eq!(app.selected.as_deref(), Some("training"), "training is first by achieved share");
}

#[test]
fn q_esc_and_ctrl_c_quit() {
    let mut app = app();
    assert_eq!(press(&mut app, KeyCode::Char('q')), Flow::Quit);
    assert_eq!(press(&mut app, KeyCode::Esc), Flow::Quit);
    assert_eq!(key(&mut app, KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Flow::Quit);
    assert_eq!(press(&mut app, KeyCode::Char('c')), Flow::Continue);
}

#[test]
fn once_prints_the_same_columns_as_plain_text() {
    let mut app = App::new(None);
    app.history.push(stats(1, 1));
    let text = render::plain(&app.view(), 80);
    assert!(!text.contains('\x1b'));
    assert!(text.starts_with("tessera top  3 vGPUs on 1 device  sort: name\n"), "{text}");
    let live = frame(&self::app(), 80, 24);
    assert_eq!(line(&text, "NAME"), line(&live, "NAME"), "the same columns");
    assert_eq!(line(&text, "inference").split_whitespace().nth(7), Some("-"), "one poll: no launch rate");
    assert!(text.contains("31337") && !text.contains("q quit"), "{text}");
    assert_eq!(text.lines().count() as u16, render::height(&app.view()), "every row shown:\n{text}");
    // Many processes: all of them in the plain frame, a third of the screen in the terminal.
    let mut many = stats(1, 1);
    many.vgpus[0].processes = (0..20).map(|pid| ProcessStats { pid: 1000 + pid, ..ProcessStats::default() }).collect();
    app.history.push(many);
    let text = render::plain(&app.view(), 80);
    assert!(text.contains("1019") && text.contains("31337"), "{text}");
    let mut live = App::new(Some(500));
    live.history = std::mem::take(&mut app.history);
    let screen = frame(&live, 80, 24);
    assert!(screen.contains("1000") && !screen.contains("1019"), "{screen}");
    assert!(line(&screen, "notebook").contains("20%"), "the vGPU table keeps its rows:\n{screen}");
}

#[test]
fn no_vgpus_and_a_failing_daemon_are_said() {
    let mut app = App::new(Some(200));
    app.history.push(Stats { at_ns: 1, vgpus: vec![], devices: stats(1, 1).devices });
    app.error = Some(tessera_client::Error::new(tessera_client::ErrorCode::Unavailable, "no daemon listens on /x"));
    let text = frame(&app, 80, 24);
    assert!(text.lines().last().unwrap().contains("daemon: no daemon listens on /x"), "{text}");
    assert!(text.contains("no vGPUs; create one with `tessera vgpu create`"), "{text}");
    press(&mut app, KeyCode::Down);
    assert_eq!(app.selected, None);
}

#[test]
fn the_interval_is_checked() {
    assert_eq!(interval_value("500ms").ok(), Some(500));
    assert_eq!(interval_value("100ms").ok(), Some(100));
    assert_eq!(interval_value("0.25s").ok(), Some(250));
    for bad in ["1s", "50ms", "0", "fast"] {
        assert!(interval_value(bad).is_err(), "{bad}");
    }
    assert!(interval_value("1s").unwrap_err().to_string().contains("outside 100ms-500ms"));
}

#[test]
fn a_panic_restores_the_terminal_before_it_is_reported() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static RESTORED: AtomicBool = AtomicBool::new(false);
    static SEEN_RESTORED: AtomicBool = AtomicBool::new(false);
    // The report (the hook before ours) sees the terminal already restored.
    let original = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| SEEN_RESTORED.store(RESTORED.load(Ordering::SeqCst), Ordering::SeqCst)));
    super::terminal::restore_on_panic(|| RESTORED.store(true, Ordering::SeqCst));
    let caught = std::panic::catch_unwind(|| panic!("a bug in the view"));
    let _ = std::panic::take_hook();
    std::panic::set_hook(original);
    assert!(caught.is_err());
    assert!(RESTORED.load(Ordering::SeqCst) && SEEN_RESTORED.load(Ordering::SeqCst));
}
