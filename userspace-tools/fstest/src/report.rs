//! Check bookkeeping and output: `ok - NAME`, `FAIL - NAME (expected X, got Y)`,
//! `ok - NAME # SKIP why`, and last `N passed, N failed`.

use std::cell::RefCell;
use std::fmt::{Debug, Display};
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

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
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{loc}")));
    }));
}

// Mirrors of the counters and the current group name for the fatal-signal handler, which may
// only use async-signal-safe operations (atomics, write, _exit).
static G_PASSED: AtomicU64 = AtomicU64::new(0);
static G_FAILED: AtomicU64 = AtomicU64::new(0);
static G_NAME: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];
static G_NAME_LEN: AtomicUsize = AtomicUsize::new(0);

fn set_group_name(name: &str) {
    let b = name.as_bytes();
    let n = b.len().min(G_NAME.len());
    for (slot, &c) in G_NAME.iter().zip(&b[..n]) {
        slot.store(c, Ordering::Relaxed);
    }
    G_NAME_LEN.store(n, Ordering::Release);
}

struct SigBuf {
    b: [u8; 256],
    n: usize,
}

impl SigBuf {
    fn push(&mut self, s: &[u8]) {
        for &c in s {
            if self.n < self.b.len() {
                self.b[self.n] = c;
                self.n += 1;
            }
        }
    }
    fn num(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push(&d[i..]);
    }
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let mut b = SigBuf { b: [0; 256], n: 0 };
    b.push(b"FAIL - ");
    let len = G_NAME_LEN.load(Ordering::Acquire);
    for slot in &G_NAME[..len] {
        let c = slot.load(Ordering::Relaxed);
        b.push(&[c]);
    }
    b.push(b": process killed during the group (expected no crash, got signal ");
    b.num(sig as u64);
    b.push(match sig {
        libc::SIGBUS => b" SIGBUS)\n",
        libc::SIGSEGV => b" SIGSEGV)\n",
        libc::SIGABRT => b" SIGABRT)\n",
        _ => b")\n",
    });
    b.num(G_PASSED.load(Ordering::Relaxed));
    b.push(b" passed, ");
    b.num(G_FAILED.load(Ordering::Relaxed) + 1);
    b.push(b" failed\n");
    // SAFETY: write and _exit are async-signal-safe; the buffer is on our stack.
    unsafe {
        libc::write(1, b.b.as_ptr().cast(), b.n);
        libc::_exit(1);
    }
}

/// Turns SIGBUS/SIGSEGV/SIGFPE/SIGILL/SIGABRT (e.g. SIGBUS from an mmap of a file whose size
/// is wrong) into one FAIL line naming the running group plus the summary line, so the output
/// protocol holds even when the process dies.
pub fn install_fatal_signal_handler() {
    for sig in [
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
    ] {
        // SAFETY: installing a handler that only uses async-signal-safe calls.
        unsafe { libc::signal(sig, on_fatal_signal as *const () as libc::sighandler_t) };
    }
}

/// Restores default handling (for forked children, whose output is not the protocol).
pub fn reset_fatal_signal_handler() {
    for sig in [
        libc::SIGBUS,
        libc::SIGSEGV,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
    ] {
        // SAFETY: restoring the default disposition.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
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

/// Long values (sets, buffers) are cut so that one FAIL stays one readable line.
fn clip(s: String) -> String {
    const MAX: usize = 300;
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} chars)", &s[..end], s.len())
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
        G_PASSED.fetch_add(1, Ordering::Relaxed);
        if !self.quiet {
            out(&format!("ok - {}{}", self.prefix, name));
        }
    }

    pub fn fail(&mut self, name: &str, expected: impl Display, got: impl Display) {
        self.failed += 1;
        G_FAILED.fetch_add(1, Ordering::Relaxed);
        out(&format!(
            "FAIL - {}{} (expected {}, got {})",
            self.prefix,
            name,
            clip(expected.to_string()),
            clip(got.to_string())
        ));
    }

    pub fn skip(&mut self, name: &str, why: impl Display) {
        self.skipped += 1;
        out(&format!("ok - {}{} # SKIP {}", self.prefix, name, why));
    }

    /// Informational line (not a check).
    pub fn note(&self, msg: impl Display) {
        out(&format!("# {}{}", self.prefix, msg));
    }

    pub fn check(
        &mut self,
        name: &str,
        cond: bool,
        expected: impl Display,
        got: impl Display,
    ) -> bool {
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
        let exp = errnos
            .iter()
            .map(|&e| Errno(e).to_string())
            .collect::<Vec<_>>()
            .join(" or ");
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
        set_group_name(name);
        let t0 = std::time::Instant::now();
        let r = panic::catch_unwind(AssertUnwindSafe(|| f(&mut *self)));
        if r.is_err() {
            let msg = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "panic".into());
            self.fail(
                "group ran to completion",
                "no panic",
                format!("panic: {msg}"),
            );
        }
        self.note(format!("done in {:.2} s", t0.elapsed().as_secs_f64()));
        self.prefix = saved;
        set_group_name(saved_name(&self.prefix));
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

fn saved_name(prefix: &str) -> &str {
    prefix.strip_suffix(": ").unwrap_or(prefix)
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
