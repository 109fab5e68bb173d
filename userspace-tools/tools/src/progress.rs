//! Progress of long runs (`mkfs -r`, `fsck`) on a terminal: drawn on stderr when it is a
//! terminal, nothing at all otherwise (pipes, logs, tests).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar or spinner, or nothing when stderr is not a terminal (or `quiet`).
pub struct Progress(Option<ProgressBar>);

impl Progress {
    fn make(quiet: bool, f: impl FnOnce() -> ProgressBar) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        Progress(Some(f()))
    }

    /// A bar over `total` bytes, with a message.
    pub fn bytes(quiet: bool, total: u64, msg: &str) -> Self {
        let msg = msg.to_string();
        Self::make(quiet, || {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ({elapsed}, eta {eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.set_message(msg);
            b
        })
    }

    /// A bar over `total` things, with a message.
    pub fn count(quiet: bool, total: u64, msg: &str) -> Self {
        let msg = msg.to_string();
        Self::make(quiet, || {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {human_pos}/{human_len} ({elapsed}, eta {eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            b.set_message(msg);
            b
        })
    }

    /// A spinner counting things, redrawn while the caller works.
    pub fn spinner(quiet: bool, msg: &str) -> Self {
        Self::spin(quiet, msg, "{spinner} {msg} {human_pos} ({elapsed})")
    }

    /// A spinner for a phase that counts nothing (a mount).
    pub fn phase(quiet: bool, msg: &str) -> Self {
        Self::spin(quiet, msg, "{spinner} {msg} ({elapsed})")
    }

    fn spin(quiet: bool, msg: &str, template: &str) -> Self {
        let msg = msg.to_string();
        Self::make(quiet, || {
            let b = ProgressBar::new_spinner();
            b.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
            b.set_message(msg);
            b.enable_steady_tick(Duration::from_millis(120));
            b
        })
    }

    /// Set the position.
    pub fn set(&self, pos: u64) {
        if let Some(b) = &self.0 {
            b.set_position(pos);
        }
    }

    /// Set the message.
    pub fn message(&self, msg: String) {
        if let Some(b) = &self.0 {
            b.set_message(msg);
        }
    }

    /// Run `f` (which prints) with the bar hidden.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.0 {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Remove it from the terminal.
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
