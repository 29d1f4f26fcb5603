//! `tessera top`: a live view of every device and vGPU, read from the daemon's `stats` through its API
//! (`tessera-client`), in the terminal with ratatui; `--once` prints one frame as plain text, `--json` one
//! snapshot. What it shows is computed by pure functions ([`model`], [`render`]) of the polls kept in
//! [`history`]; [`terminal`] owns the screen.

mod history;
mod model;
mod render;
mod terminal;

use clap::Args;
use history::History;
use model::Sort;
use std::io::IsTerminal;
use std::time::Duration;
use tessera_client::Client;
use tessera_ffi::units::parse_duration_ns;
use tessera_host::paths::{self, PathError};

/// Shortest refresh interval (10 Hz).
const MIN_INTERVAL_MS: u64 = 100;
/// Longest refresh interval (2 Hz).
const MAX_INTERVAL_MS: u64 = 500;
/// How long a poll may wait for the daemon: a view that freezes longer says so instead.
const POLL_TIMEOUT: Duration = Duration::from_secs(2);
/// Width of `--once` when stdout is not a terminal: what the view is designed for.
const PLAIN_WIDTH: u16 = 80;

/// Arguments of `tessera top`.
#[derive(Args)]
pub struct TopArgs {
    /// Refresh interval, 100ms to 500ms (10 to 2 refreshes a second).
    #[arg(long, default_value = "500ms", value_name = "DURATION", value_parser = interval_value)]
    interval: u64,
    /// Print one frame as plain text and exit (after two polls an interval apart, for the rates).
    #[arg(long, conflicts_with = "json")]
    once: bool,
    /// Print one stats snapshot as JSON (the daemon's `stats` reply) and exit.
    #[arg(long)]
    json: bool,
}

/// Why `tessera top` failed or stopped short.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// `--interval` is not a duration.
    #[error(transparent)]
    Interval(tessera_ffi::units::UnitError),
    /// `--interval` is a duration outside [`MIN_INTERVAL_MS`]..=[`MAX_INTERVAL_MS`] (or not whole
    /// milliseconds).
    #[error("{0} is outside {MIN_INTERVAL_MS}ms-{MAX_INTERVAL_MS}ms (top refreshes 2 to 10 times a second)")]
    IntervalOutOfRange(String),
    /// The daemon's socket cannot be told (`TESSERA_SOCKET`).
    #[error(transparent)]
    Socket(#[from] PathError),
    /// The daemon did not answer a poll (the first one, or with `--once` the second).
    #[error(transparent)]
    Daemon(#[from] tessera_client::Error),
    /// The snapshot could not be printed as JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The live view asked for, but stdin or stdout is not a terminal.
    #[error("top needs a terminal; use --once (plain text) or --json for scripts")]
    NoTerminal,
    /// The stop signals' handler could not be installed.
    #[error(transparent)]
    Signals(#[from] crate::signals::SignalError),
    /// The terminal could not be put in raw mode on the alternate screen.
    #[error("cannot set up the terminal: {0}")]
    SetUp(#[source] std::io::Error),
    /// Drawing or reading keys failed while the view ran.
    #[error("terminal: {0}")]
    Terminal(#[source] std::io::Error),
}

/// A refresh interval in milliseconds, within [`MIN_INTERVAL_MS`]..=[`MAX_INTERVAL_MS`].
fn interval_value(text: &str) -> Result<u64, TopError> {
    let ns = parse_duration_ns(text).map_err(TopError::Interval)?;
    let ms = ns / 1_000_000;
    if ns % 1_000_000 != 0 || !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&ms) {
        return Err(TopError::IntervalOutOfRange(text.to_string()));
    }
    Ok(ms)
}

/// What the live view remembers: the polls, the sort, the selected vGPU and the last error.
pub struct App {
    history: History,
    sort: Sort,
    selected: Option<String>,
    error: Option<tessera_client::Error>,
    interval_ms: Option<u64>,
}

impl App {
    fn new(interval_ms: Option<u64>) -> App {
        App { history: History::default(), sort: Sort::default(), selected: None, error: None, interval_ms }
    }

    /// Polls the daemon once; a failure is kept to be shown (the last figures stay).
    fn poll(&mut self, client: &Client) {
        match client.stats(None) {
            Ok(stats) => {
                self.history.push(stats);
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
    }

    fn view(&self) -> render::View<'_> {
        render::View {
            history: &self.history,
            sort: self.sort,
            selected: self.selected.as_deref(),
            interval_ms: self.interval_ms,
            error: self.error.as_ref().map(|e| e.message.as_str()),
        }
    }

    /// Moves the selection `by` rows (down when positive) in the current order; from no selection, down
    /// selects the first row and up the last.
    fn select(&mut self, by: isize) {
        let names = render::order(&self.view());
        if names.is_empty() {
            self.selected = None;
            return;
        }
        let last = names.len() as isize - 1;
        let at = self.selected.as_ref().and_then(|s| names.iter().position(|n| n == s));
        let next = match at {
            Some(i) => (i as isize + by).clamp(0, last),
            None if by > 0 => 0,
            None => last,
        };
        self.selected = Some(names[next as usize].clone());
    }
}

/// Runs `tessera top`.
pub fn run(args: TopArgs) -> Result<(), TopError> {
    let client = Client::new(paths::socket()?).with_timeout(POLL_TIMEOUT);
    // The first poll decides: no daemon is an error before the screen is touched.
    let stats = client.stats(None)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    let stdout = std::io::stdout();
    if args.once {
        let mut app = App::new(None);
        app.history.push(stats);
        // A second poll an interval later gives the rates (launches/s, waiting) a frame shows.
        std::thread::sleep(Duration::from_millis(args.interval));
        app.poll(&client);
        if let Some(e) = app.error {
            return Err(e.into());
        }
        let width = if stdout.is_terminal() { terminal::width().unwrap_or(PLAIN_WIDTH) } else { PLAIN_WIDTH };
        print!("{}", render::plain(&app.view(), width.max(PLAIN_WIDTH)));
        return Ok(());
    }
    if !stdout.is_terminal() || !std::io::stdin().is_terminal() {
        return Err(TopError::NoTerminal);
    }
    let mut app = App::new(Some(args.interval));
    app.history.push(stats);
    terminal::live(&mut app, &client, Duration::from_millis(args.interval))
}

#[cfg(test)]
mod tests;
