//! The live view's screen: raw mode and the alternate screen while it runs, restored on every way out
//! (return, error, signal, and a panic, through a hook that restores before the panic is reported), the
//! keys, and the loop that polls the daemon every interval and redraws only what changed (ratatui keeps
//! the previous frame and writes the difference: no flicker).

use super::{App, TopError};
use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use std::time::{Duration, Instant};
use tessera_client::Client;

/// Longest wait for a key before looking at signals again.
const KEY_WAIT: Duration = Duration::from_millis(50);

/// The terminal's width, if it tells.
pub fn width() -> Option<u16> {
    terminal::size().ok().map(|(w, _)| w)
}

/// Puts the terminal back as it was: cooked mode, the main screen, a visible cursor.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(std::io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
}

/// Has a panic call `restore` first (a message printed in raw mode on the alternate screen would be lost,
/// and the shell left unusable), then report as before.
pub fn restore_on_panic(restore: fn()) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
}

/// Restores the terminal when dropped.
struct Screen;

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// What a key does.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep going (redraw).
    Continue,
    /// Quit.
    Quit,
}

/// Applies `key` to `app`: `q`, Esc and Ctrl-C quit, `s` cycles the sort, Up/Down move the selection.
pub fn key(app: &mut App, key: KeyEvent) -> Flow {
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Flow::Quit,
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => return Flow::Quit,
        KeyCode::Char('s') | KeyCode::Char('S') => app.sort = app.sort.next(),
        KeyCode::Down => app.select(1),
        KeyCode::Up => app.select(-1),
        _ => {}
    }
    Flow::Continue
}

/// Runs the live view until a key or a signal says to stop.
pub fn live(app: &mut App, client: &Client, interval: Duration) -> Result<(), TopError> {
    crate::signals::install()?;
    restore_on_panic(restore);
    let screen = Screen;
    terminal::enable_raw_mode().map_err(TopError::SetUp)?;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen, cursor::Hide).map_err(TopError::SetUp)?;
    let mut term =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout())).map_err(TopError::SetUp)?;
    let result = run_loop(&mut term, app, client, interval);
    drop(term);
    drop(screen);
    result
}

/// Polls, draws and reads keys until a key or a signal says to stop.
fn run_loop(term: &mut DefaultTerminal, app: &mut App, client: &Client, interval: Duration) -> Result<(), TopError> {
    let io = TopError::Terminal;
    let mut next_poll = Instant::now() + interval;
    let mut dirty = true;
    while !crate::signals::stop_requested() {
        if dirty {
            term.draw(|f| super::render::draw(&app.view(), f.area(), f.buffer_mut())).map_err(io)?;
            dirty = false;
        }
        let wait = next_poll.saturating_duration_since(Instant::now()).min(KEY_WAIT);
        if event::poll(wait).map_err(io)? {
            match event::read().map_err(io)? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    if key(app, k) == Flow::Quit {
                        return Ok(());
                    }
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        let now = Instant::now();
        if now >= next_poll {
            app.poll(client);
            dirty = true;
            // Behind (a slow daemon): the next poll an interval from now, not a burst to catch up.
            next_poll = if next_poll + interval <= now { now + interval } else { next_poll + interval };
        }
    }
    Ok(())
}
