//! Check bookkeeping and output: `ok - NAME`, `FAIL - NAME (expected X, got Y)`,
//! `ok - NAME # SKIP why`, and last `N passed, N failed`.

use std::cell::RefCell;
use std::fmt::{Debug, Display};
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};

use crate::sys::{Errno, R};

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs a panic hook that records the message instead of printing a backtrace, so a panic in
/// a check becomes one FAIL line.
pub fn install_panic_hook() {
    panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "panic".to_string()
        };
        let loc = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{loc}")));
    }));
}

#[derive(Debug, Default)]
pub struct Report {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    prefix: String,
    /// When set, passing checks are counted but not printed.
    pub quiet: bool,
}

fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

impl Report {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn pass(&mut self, name: &str) {
        self.passed += 1;
        if !self.quiet {
            out(&format!("ok - {}{}", self.prefix, name));
        }
    }

    pub fn fail(&mut self, name: &str, expected: impl Display, got: impl Display) {
        self.failed += 1;
        out(&format!("FAIL - {}{} (expected {}, got {})", self.prefix, name, expected, got));
    }

    pub fn skip(&mut self, name: &str, why: impl Display) {
        self.skipped += 1;
        out(&format!("ok - {}{} # SKIP {}", self.prefix, name, why));
    }

    /// Informational line (not a check).
    pub fn note(&self, msg: impl Display) {
        out(&format!("# {}{}", self.prefix, msg));
    }

    pub fn check(&mut self, name: &str, cond: bool, expected: impl Display, got: impl Display) -> bool {
        if cond {
            self.pass(name);
        } else {
            self.fail(name, expected, got);
        }
        cond
    }

    pub fn eq<T: PartialEq + Debug>(&mut self, name: &str, expected: T, got: T) -> bool {
        if expected == got {
            self.pass(name);
            true
        } else {
            self.fail(name, format!("{expected:?}"), format!("{got:?}"));
            false
        }
    }

    /// Expects success; returns the value.
    pub fn ok<T>(&mut self, name: &str, r: R<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.pass(name);
                Some(v)
            }
            Err(e) => {
                self.fail(name, "success", e);
                None
            }
        }
    }

    /// Expects failure with `errno`.
    pub fn err<T>(&mut self, name: &str, r: R<T>, errno: i32) -> bool {
        self.err_any(name, r, &[errno])
    }

    /// Expects failure with one of `errnos` (the first is the one named as expected).
    pub fn err_any<T>(&mut self, name: &str, r: R<T>, errnos: &[i32]) -> bool {
        let exp = errnos.iter().map(|&e| Errno(e).to_string()).collect::<Vec<_>>().join(" or ");
        match r {
            Ok(_) => {
                self.fail(name, exp, "success");
                false
            }
            Err(e) if errnos.contains(&e.0) => {
                self.pass(name);
                true
            }
            Err(e) => {
                self.fail(name, exp, e);
                false
            }
        }
    }

    /// Runs a group of checks with a name prefix; a panic inside becomes one failure and the
    /// remaining groups still run.
    pub fn group(&mut self, name: &str, f: impl FnOnce(&mut Report)) {
        let saved = std::mem::replace(&mut self.prefix, format!("{name}: "));
        let r = panic::catch_unwind(AssertUnwindSafe(|| f(&mut *self)));
        if r.is_err() {
            let msg = LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "panic".into());
            self.fail("group ran to completion", "no panic", format!("panic: {msg}"));
        }
        self.prefix = saved;
    }

    /// Prints the summary lines and returns the process exit code.
    pub fn finish(&self) -> i32 {
        if self.skipped > 0 {
            out(&format!("# {} skipped", self.skipped));
        }
        out(&format!("{} passed, {} failed", self.passed, self.failed));
        if self.failed == 0 {
            0
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_panics() {
        install_panic_hook();
        let mut r = Report::new();
        r.check("a", true, 1, 1);
        r.eq("b", 1, 2);
        r.err("c", Err::<(), _>(Errno(libc::ENOENT)), libc::ENOENT);
        r.err("d", Ok::<(), Errno>(()), libc::ENOENT);
        r.skip("e", "why");
        r.group("g", |r| {
            r.pass("inside");
            let v: Vec<u8> = Vec::new();
            let _ = v[3];
        });
        r.group("h", |r| r.pass("after a panicking group"));
        assert_eq!((r.passed, r.failed, r.skipped), (4, 3, 1));
        assert_eq!(r.finish(), 1);
        let _ = panic::take_hook();
    }
}
