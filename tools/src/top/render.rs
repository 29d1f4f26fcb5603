//! Drawing `tessera top`'s frame with ratatui into a buffer of any size: a header line (vGPU and device
//! counts, the sort, the refresh interval, the last error), the device table, the vGPU table (the
//! selected row marked), the processes panel, and in the terminal a line of keys. `--once` draws the same
//! frame into a buffer as tall as its content and prints it as plain text.

use super::history::History;
use super::model::{self, Column, DEVICE_COLUMNS, PROCESS_COLUMNS, Sort, VGPU_COLUMNS};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, StatefulWidget, Table, TableState, Widget};

/// The mark of the selected vGPU row (its column is always kept, so that rows never shift).
const MARK: &str = ">";

/// Everything a frame shows.
pub struct View<'a> {
    /// The polls so far (the frame shows the latest).
    pub history: &'a History,
    /// The order of the vGPU rows.
    pub sort: Sort,
    /// The selected vGPU's name.
    pub selected: Option<&'a str>,
    /// The refresh interval, said in the header (`None`: a single frame).
    pub interval_ms: Option<u64>,
    /// Why the last poll failed, if it did (said on the last line, in place of the keys).
    pub error: Option<&'a str>,
}

/// The chosen columns of a table for `width` cells: the required ones, the optional ones in order while
/// they fit, and the column `grow` widened toward its longest cell with what is left. `lead` cells go to
/// a mark before the first column.
fn choose(columns: &[Column], rows: &[Vec<String>], width: u16, lead: u16, grow: usize) -> Vec<(usize, u16)> {
    let need =
        |cols: &[(usize, u16)]| cols.iter().map(|c| c.1).sum::<u16>() + cols.len().saturating_sub(1) as u16 + lead;
    let mut chosen: Vec<(usize, u16)> =
        columns.iter().enumerate().filter(|(_, c)| !c.optional).map(|(i, c)| (i, c.width)).collect();
    for (i, c) in columns.iter().enumerate().filter(|(_, c)| c.optional) {
        let mut with = chosen.clone();
        with.push((i, c.width));
        with.sort_unstable();
        if need(&with) <= width {
            chosen = with;
        }
    }
    let longest = rows.iter().filter_map(|r| r.get(grow)).map(|s| s.chars().count()).max().unwrap_or(0) as u16;
    let spare = width.saturating_sub(need(&chosen));
    if let Some(c) = chosen.iter_mut().find(|c| c.0 == grow) {
        c.1 += longest.saturating_sub(c.1).min(spare);
    }
    chosen
}

/// `text` cut to `width` characters, ending in `…` when cut.
fn fit(text: &str, width: u16) -> String {
    let width = width as usize;
    if text.chars().count() <= width {
        return text.to_string();
    }
    text.chars().take(width.saturating_sub(1)).chain(['…']).collect()
}

/// A table of `rows` in the `chosen` columns, cells aligned and cut to their widths; `style` colours a
/// cell given its column title and text.
fn table<'a>(
    columns: &[Column],
    chosen: &[(usize, u16)],
    rows: &[Vec<String>],
    style: impl Fn(&str, &str) -> Style,
) -> Table<'a> {
    let cell = |i: usize, w: u16, text: &str| {
        let text = fit(text, w);
        let text = if columns[i].right { format!("{text:>width$}", width = w as usize) } else { text };
        Cell::from(text.clone()).style(style(columns[i].title, &text))
    };
    let header = Row::new(chosen.iter().map(|&(i, w)| cell(i, w, columns[i].title)))
        .style(Style::new().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = rows.iter().map(|r| Row::new(chosen.iter().map(|&(i, w)| cell(i, w, &r[i])))).collect();
    Table::new(body, chosen.iter().map(|&(_, w)| Constraint::Length(w))).header(header).column_spacing(1)
}

/// The colour of a vGPU's state.
fn state_style(title: &str, text: &str) -> Style {
    match (title, text.trim()) {
        ("STATE", "suspended") => Style::new().fg(Color::Red),
        ("STATE", "capped") => Style::new().fg(Color::Yellow),
        ("STATE", "running") => Style::new().fg(Color::Green),
        _ => Style::new(),
    }
}

/// The frame's parts, computed once for drawing and for measuring.
#[derive(Default)]
struct Parts {
    header: String,
    devices: Vec<Vec<String>>,
    vgpus: Vec<Vec<String>>,
    names: Vec<String>,
    selected: Option<usize>,
    panel_title: String,
    processes: Vec<Vec<String>>,
    every: bool,
}

/// The parts of `view`'s frame: only a header until the first poll.
fn parts(view: &View) -> Parts {
    let Some(stats) = view.history.latest() else {
        let error = view.error.map_or(String::new(), |e| format!(": {e}"));
        return Parts { header: format!("tessera top: waiting for the daemon{error}"), ..Parts::default() };
    };
    let vgpus = model::sorted(stats, view.history, view.sort);
    let selected = view.selected.and_then(|name| vgpus.iter().position(|v| v.name == name));
    let (panel_title, processes) = model::processes(&vgpus, selected.map(|i| vgpus[i]));
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mut header = format!(
        "tessera top  {} on {}  sort: {}",
        plural(stats.vgpus.len(), "vGPU"),
        plural(stats.devices.len(), "device"),
        view.sort.label()
    );
    if let Some(ms) = view.interval_ms {
        header += &format!("  every {ms} ms");
    }
    Parts {
        header,
        devices: stats.devices.iter().map(model::device_cells).collect(),
        vgpus: vgpus.iter().map(|v| model::vgpu_cells(v, view.history)).collect(),
        names: vgpus.iter().map(|v| v.name.clone()).collect(),
        selected,
        panel_title,
        processes,
        every: view.interval_ms.is_some(),
    }
}

/// The height that shows every row of `p` (no key line).
fn full_height(p: &Parts) -> u16 {
    (1 + 1 + p.devices.len() + 1 + 1 + p.vgpus.len() + 1 + 2 + p.processes.len()) as u16
}

/// The height that shows every row of the frame (no key line): what `--once` prints.
pub fn height(view: &View) -> u16 {
    full_height(&parts(view))
}

/// The names of the vGPU rows in their order (for moving the selection).
pub fn order(view: &View) -> Vec<String> {
    parts(view).names
}

/// Draws the frame into `area` of `buf`.
pub fn draw(view: &View, area: Rect, buf: &mut Buffer) {
    let p = parts(view);
    let keys = u16::from(p.every);
    let full = 2 + p.processes.len() as u16;
    // Everything fits (always so for `--once`): the whole panel; else a third of the screen at most.
    let panel = if area.height >= full_height(&p) + keys { full } else { full.min((area.height / 3).max(3)) };
    let [top, devices, _, vgpus, _, processes, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1 + p.devices.len() as u16),
        Constraint::Length(1),
        Constraint::Min(2),
        Constraint::Length(1),
        Constraint::Length(panel),
        Constraint::Length(keys),
    ])
    .areas(area);
    let bold = Style::new().add_modifier(Modifier::BOLD);
    Paragraph::new(p.header.as_str()).style(bold).render(top, buf);
    if p.names.is_empty() && p.devices.is_empty() {
        return;
    }
    let lead = MARK.chars().count() as u16;
    let chosen = choose(&DEVICE_COLUMNS, &p.devices, area.width.saturating_sub(lead), 0, 1);
    let devices = Rect { x: devices.x + lead, width: devices.width.saturating_sub(lead), ..devices };
    Widget::render(table(&DEVICE_COLUMNS, &chosen, &p.devices, |_, _| Style::new()), devices, buf);

    let chosen = choose(&VGPU_COLUMNS, &p.vgpus, area.width, lead, 0);
    let t = table(&VGPU_COLUMNS, &chosen, &p.vgpus, state_style)
        .highlight_symbol(MARK)
        .highlight_spacing(HighlightSpacing::Always)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    if p.names.is_empty() {
        Paragraph::new(" no vGPUs; create one with `tessera vgpu create`").render(vgpus, buf);
    } else {
        StatefulWidget::render(t, vgpus, buf, &mut TableState::default().with_selected(p.selected));
    }

    let [title, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(processes);
    Paragraph::new(fit(&p.panel_title, area.width)).style(bold).render(title, buf);
    let all = p.selected.is_none();
    let columns: &[Column] = if all { &PROCESS_COLUMNS } else { &PROCESS_COLUMNS[1..] };
    let grow = if all { 2 } else { 1 };
    let rest = Rect { x: rest.x + lead, width: rest.width.saturating_sub(lead), ..rest };
    if p.processes.is_empty() {
        if all {
            Paragraph::new("no process is attached").render(rest, buf);
        }
    } else {
        let chosen = choose(columns, &p.processes, rest.width, 0, grow);
        Widget::render(table(columns, &chosen, &p.processes, |_, _| Style::new()), rest, buf);
    }
    if let (Some(e), true) = (view.error, keys > 0) {
        let line = format!(" daemon: {e} (q quits)");
        Paragraph::new(fit(&line, area.width)).style(bold.fg(Color::Red)).render(footer, buf);
    } else if keys > 0 {
        let line = Line::from(vec![
            Span::styled(" q", bold),
            Span::raw(" quit  "),
            Span::styled("s", bold),
            Span::raw(" sort  "),
            Span::styled("↑/↓", bold),
            Span::raw(" select a vGPU"),
        ]);
        Paragraph::new(line).render(footer, buf);
    }
}

/// The frame as plain text (no escape codes), `width` columns wide and as tall as its content, without
/// trailing blanks.
pub fn plain(view: &View, width: u16) -> String {
    let area = Rect::new(0, 0, width, height(view));
    let mut buf = Buffer::empty(area);
    draw(view, area, &mut buf);
    text(&buf)
}

/// The text of a buffer, line by line, without trailing blanks or blank last lines.
pub fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut lines: Vec<String> = (area.top()..area.bottom())
        .map(|y| {
            let line: String = (area.left()..area.right()).map(|x| buf[(x, y)].symbol()).collect();
            line.trim_end().to_string()
        })
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.into_iter().map(|l| l + "\n").collect()
}
