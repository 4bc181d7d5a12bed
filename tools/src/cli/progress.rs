//! A progress line for long operations (consuming many records, dumping
//! large files, resetting many partitions): redrawn in place on stderr at
//! most a few times a second when stderr is a terminal, and silent when it
//! is not, so piped and scripted runs see only their output.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws no more often than this.
const REDRAW_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct Progress {
    label: String,
    enabled: bool,
    last_drawn: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// A progress line shown only when stderr is a terminal.
    pub fn new(label: &str) -> Progress {
        Progress::with_terminal(label, std::io::stderr().is_terminal())
    }

    /// A progress line shown when `enabled` (tests, `new`, and callers that
    /// show it on a narrower condition).
    pub fn with_terminal(label: &str, enabled: bool) -> Progress {
        Progress {
            label: label.to_owned(),
            enabled,
            last_drawn: None,
            drawn: false,
        }
    }

    /// Shows `done` (of `total` when known), if it is time to redraw.
    pub fn update(&mut self, done: u64, total: Option<u64>) {
        if !self.due() {
            return;
        }
        match total {
            Some(total) => self.draw(&format!("{done}/{total}")),
            None => self.draw(&done.to_string()),
        }
    }

    /// Shows `done` of `total` bytes, with the percentage, if it is time to
    /// redraw.
    pub fn update_bytes(&mut self, done: u64, total: u64) {
        if self.due() {
            let percent = done.saturating_mul(100) / total.max(1);
            self.draw(&format!("{percent}% ({done} of {total} bytes)"));
        }
    }

    /// Whether the line is shown and was last drawn long enough ago.
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if !self.enabled
            || self
                .last_drawn
                .is_some_and(|last| now.duration_since(last) < REDRAW_EVERY)
        {
            return false;
        }
        self.last_drawn = Some(now);
        true
    }

    /// Redraws the line as the label and `counts`.
    fn draw(&mut self, counts: &str) {
        self.drawn = true;
        let line = format!("\r{}: {counts}", self.label);
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(line.as_bytes());
        let _ = stderr.write_all(b"\x1b[K");
        let _ = stderr.flush();
    }

    /// Clears the line, so the output that follows starts clean.
    pub fn finish(&mut self) {
        if self.drawn {
            let _ = std::io::stderr().write_all(b"\r\x1b[K");
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
