//! A spinner on stderr, only when stderr is a terminal: "thinking…" while the model is
//! asked, the running command and its elapsed time while tools run.

use std::io::Write;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What the spinner shows; `None`: nothing.
pub type Label = Option<(String, Instant)>;

#[derive(Default)]
struct State {
    label: Label,
    /// A frame is on the screen and must be erased before anything else is written.
    drawn: bool,
}

pub struct Spinner {
    /// Drawing and erasing happen under this lock, so a frame never lands after the text that
    /// erased its predecessor. Never taken while holding stdout's or stderr's lock.
    state: Option<Arc<Mutex<State>>>,
}

/// The label is cut so a frame never wraps (a wrapped line cannot be erased with `\r`).
const LABEL_CHARS: usize = 60;

impl Spinner {
    pub fn new(enabled: bool) -> Self {
        if !enabled {
            return Self { state: None };
        }
        let state = Arc::new(Mutex::new(State::default()));
        let weak: Weak<Mutex<State>> = Arc::downgrade(&state);
        tokio::spawn(async move {
            const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
            let mut i = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(80)).await;
                // The renderer is gone: so is the spinner.
                let Some(state) = weak.upgrade() else { return };
                let Ok(mut state) = state.lock() else { return };
                let Some((label, since)) = &state.label else {
                    continue;
                };
                let secs = since.elapsed().as_secs();
                let elapsed = if secs >= 1 {
                    format!(" {secs}s")
                } else {
                    String::new()
                };
                let label: String = label.chars().take(LABEL_CHARS).collect();
                let mut err = crate::stop::stderr();
                let _ = write!(
                    err,
                    "\r\x1b[2m{} {label}{elapsed}\x1b[0m\x1b[K",
                    FRAMES[i % FRAMES.len()]
                );
                let _ = err.flush();
                state.drawn = true;
                i += 1;
            }
        });
        Self { state: Some(state) }
    }

    /// Shows `label` from now on (or nothing).
    pub fn set(&self, label: Label) {
        if let Some(Ok(mut state)) = self.state.as_ref().map(|s| s.lock()) {
            state.label = label;
        }
    }

    /// Stops drawing and erases the frame on screen, before the renderer writes.
    pub fn clear(&self) {
        if let Some(Ok(mut state)) = self.state.as_ref().map(|s| s.lock()) {
            state.label = None;
            if state.drawn {
                state.drawn = false;
                let mut err = crate::stop::stderr();
                let _ = write!(err, "\r\x1b[K");
                let _ = err.flush();
            }
        }
    }
}
