//! `enospc DIR`: fill the filesystem to ENOSPC with files of mixed sizes, recording exactly what
//! each write() reported; the only error allowed anywhere is ENOSPC. Then delete half, keep
//! writing and deleting for a few rounds (again only ENOSPC), check that operations which free
//! space work on a full filesystem, and finally verify every surviving file byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libc::{ENOSPC, O_CREAT, O_EXCL, O_RDONLY, O_RDWR};

use crate::pattern::{self, Rng};
use crate::report::Report;
use crate::sys::{self, Errno};

const MIB: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct Opts {
    pub dir: PathBuf,
    pub seed: u64,
    /// Stop (and fail) when this much was written without reaching ENOSPC.
    pub max_mib: u64,
    /// Write-until-full / delete rounds after the first fill.
    pub rounds: u32,
    pub drop_caches: bool,
}

struct State {
    root: PathBuf,
    seed: u64,
    rng: Rng,
    /// Relative path -> size that write() reported as written.
    files: BTreeMap<String, u64>,
    next: u64,
    enospc: u64,
    /// Unexpected errors (anything but ENOSPC), with context.
    unexpected: Vec<String>,
    written: u64,
    max: u64,
}

impl State {
    fn size(&mut self) -> u64 {
        match self.rng.below(100) {
            0..=29 => self.rng.range(0, 4096),
            30..=59 => self.rng.range(4097, 64 * 1024),
            60..=89 => self.rng.range(64 * 1024, MIB),
            _ => self.rng.range(MIB, 8 * MIB),
        }
    }

    fn unexpected(&mut self, what: String) {
        if self.unexpected.len() < 1000 {
            self.unexpected.push(what);
        }
    }

    /// Creates and writes one file; returns whether it hit ENOSPC (or failed).
    fn write_one(&mut self, prefix: &str, buf: &mut [u8]) -> bool {
        let size = self.size();
        self.next += 1;
        let rel = format!("d{}/{prefix}{}", self.next % 16, self.next);
        let path = self.root.join(&rel);
        let fd = match sys::open(&path, O_CREAT | O_EXCL | O_RDWR, 0o644) {
            Ok(fd) => fd,
            Err(Errno(ENOSPC)) => {
                self.enospc += 1;
                return true;
            }
            Err(e) => {
                self.unexpected(format!("create {rel}: {e}"));
                return true;
            }
        };
        let key = pattern::key_for(self.seed, rel.as_bytes());
        let mut off = 0u64;
        let mut full = false;
        while off < size {
            let n = (64 * 1024 + self.rng.below(64 * 1024)).min(size - off) as usize;
            pattern::fill(key, off, &mut buf[..n]);
            match fd.pwrite(&buf[..n], off) {
                Ok(0) => {
                    self.unexpected(format!("write {rel} at {off}: returned 0"));
                    full = true;
                    break;
                }
                Ok(w) => off += w as u64,
                Err(Errno(ENOSPC)) => {
                    self.enospc += 1;
                    full = true;
                    break;
                }
                Err(Errno(libc::EINTR)) => {}
                Err(e) => {
                    self.unexpected(format!("write {rel} at {off}: {e}"));
                    full = true;
                    break;
                }
            }
        }
        self.written += off;
        match fd.close() {
            Ok(()) => {}
            Err(Errno(ENOSPC)) => {
                self.enospc += 1;
                full = true;
            }
            Err(e) => self.unexpected(format!("close {rel}: {e}")),
        }
        self.files.insert(rel, off);
        full
    }

    /// Writes files until `stop_after` consecutive files ran into ENOSPC; returns bytes written.
    fn fill(&mut self, prefix: &str, buf: &mut [u8]) -> u64 {
        let start = self.written;
        let mut consecutive = 0;
        while consecutive < 8 && self.written < self.max {
            if self.write_one(prefix, buf) {
                consecutive += 1;
            } else {
                consecutive = 0;
            }
        }
        self.written - start
    }

    /// Deletes every `k`-th recorded file (starting at `phase`); unlink must never fail.
    fn delete_some(&mut self, k: usize, phase: usize) -> usize {
        let victims: Vec<String> = self
            .files
            .keys()
            .skip(phase)
            .step_by(k.max(1))
            .cloned()
            .collect();
        for v in &victims {
            if let Err(e) = sys::unlink(self.root.join(v)) {
                self.unexpected(format!("unlink {v}: {e}"));
            }
            self.files.remove(v);
        }
        victims.len()
    }
}

pub fn run(o: &Opts) -> i32 {
    let mut r = Report::new();
    let root = o.dir.join(format!("fstest-enospc.{}", std::process::id()));
    r.group("enospc", |r| body(r, o, &root));
    r.group("cleanup", |r| {
        let res = std::fs::remove_dir_all(&root).map_err(|e| Errno(e.raw_os_error().unwrap_or(0)));
        r.ok("remove work directory", res);
    });
    r.finish()
}

fn avail(p: &Path) -> u64 {
    sys::avail_bytes(p).unwrap_or(0)
}

fn body(r: &mut Report, o: &Opts, root: &Path) {
    let total = sys::statfs(&o.dir)
        .map(|s| s.f_blocks as u64 * s.f_bsize as u64)
        .unwrap_or(0);
    let avail0 = avail(&o.dir);
    r.note(format!("filesystem: {total} bytes, {avail0} available"));
    if r.ok("create work directory", sys::mkdir(root, 0o755))
        .is_none()
    {
        return;
    }
    for i in 0..16 {
        sys::must(sys::mkdir(root.join(format!("d{i}")), 0o755), "mkdir");
    }
    let mut s = State {
        root: root.to_path_buf(),
        seed: o.seed,
        rng: Rng::new(o.seed ^ 0x00E3_050C),
        files: BTreeMap::new(),
        next: 0,
        enospc: 0,
        unexpected: Vec::new(),
        written: 0,
        max: o.max_mib.saturating_mul(MIB),
    };
    let mut buf = vec![0u8; 128 * 1024];

    // Phase 1: fill.
    let w = s.fill("f", &mut buf);
    r.note(format!(
        "fill: {} files, {w} bytes, {} ENOSPC errors",
        s.files.len(),
        s.enospc
    ));
    r.check(
        "filling reaches ENOSPC",
        s.enospc > 0,
        "ENOSPC",
        format!("none after {w} bytes (--max-mib {})", o.max_mib),
    );
    let a = avail(root);
    r.check(
        "statfs available space near zero when full",
        a <= total / 20 + 8 * MIB,
        format!("<= {}", total / 20 + 8 * MIB),
        a,
    );
    check_unexpected(r, &mut s, "fill: no error other than ENOSPC");
    r.ok("syncfs on a full filesystem", sys::syncfs_path(root));
    check_sizes(r, &s, "fill: every file's size is what write() reported");

    // Operations that free space must work on a full filesystem.
    if let Some((big, size)) = s
        .files
        .iter()
        .max_by_key(|(_, &v)| v)
        .map(|(k, &v)| (k.clone(), v))
    {
        let half = size / 2;
        let res = sys::truncate(root.join(&big), half);
        if r.ok("truncate (shrink) on a full filesystem", res)
            .is_some()
        {
            s.files.insert(big, half);
        }
    }
    let before = s.files.len();
    let deleted = s.delete_some(2, 0);
    check_unexpected(
        r,
        &mut s,
        &format!("delete half ({deleted} of {before} files) on a full filesystem"),
    );
    r.ok("syncfs after deleting", sys::syncfs_path(root));
    let a2 = avail(root);
    r.check(
        "available space grows after deleting",
        a2 > a,
        format!("> {a}"),
        a2,
    );

    // Phase 2: keep writing and deleting.
    for round in 1..=o.rounds {
        let w = s.fill(&format!("r{round}_"), &mut buf);
        r.check(
            &format!("round {round}: writing resumes after deletions"),
            w > 0,
            "> 0 bytes",
            w,
        );
        let n = s.delete_some(3, round as usize % 3);
        r.note(format!(
            "round {round}: wrote {w} bytes, deleted {n} files, {} files remain",
            s.files.len()
        ));
        check_unexpected(
            r,
            &mut s,
            &format!("round {round}: no error other than ENOSPC"),
        );
    }
    r.note(format!(
        "total: {} bytes written, {} ENOSPC errors",
        s.written, s.enospc
    ));

    // Phase 3: verify survivors.
    let _ = sys::syncfs_path(root);
    if o.drop_caches {
        sys::drop_caches();
    }
    check_sizes(
        r,
        &s,
        "every surviving file's size is what write() reported",
    );
    let mut bad = Vec::new();
    let mut rbuf = vec![0u8; MIB as usize];
    let mut scratch = Vec::new();
    let mut bytes = 0u64;
    for (rel, &size) in &s.files {
        let key = pattern::key_for(s.seed, rel.as_bytes());
        let res = (|| -> Result<(), String> {
            let fd = sys::open(root.join(rel), O_RDONLY, 0).map_err(|e| format!("open: {e}"))?;
            let mut off = 0u64;
            loop {
                let n = fd
                    .pread_full(&mut rbuf, off)
                    .map_err(|e| format!("read at {off}: {e}"))?;
                if let Some(at) = pattern::first_mismatch(key, off, &rbuf[..n], &mut scratch) {
                    return Err(format!("differs at byte {at}"));
                }
                off += n as u64;
                if n < rbuf.len() {
                    break;
                }
            }
            if off != size {
                return Err(format!("read {off} bytes, want {size}"));
            }
            Ok(())
        })();
        match res {
            Ok(()) => bytes += size,
            Err(m) => bad.push(format!("{rel}: {m}")),
        }
    }
    for b in bad.iter().take(20) {
        r.note(b);
    }
    r.check(
        &format!(
            "{} surviving files ({bytes} bytes) verify byte for byte",
            s.files.len()
        ),
        bad.is_empty(),
        "all match",
        format!(
            "{} differ, first: {}",
            bad.len(),
            bad.first().cloned().unwrap_or_default()
        ),
    );

    // Everything deleted: the space comes back.
    let n = s.files.len();
    s.delete_some(1, 0);
    for i in 0..16 {
        if let Err(e) = sys::rmdir(root.join(format!("d{i}"))) {
            s.unexpected(format!("rmdir d{i}: {e}"));
        }
    }
    check_unexpected(r, &mut s, &format!("delete all {n} remaining files"));
    let _ = sys::syncfs_path(&o.dir);
    let a3 = avail(&o.dir);
    let slack = (total / 50).max(2 * MIB);
    r.check(
        "available space returns after deleting everything",
        a3 + slack >= avail0,
        format!(">= {} - {slack}", avail0),
        a3,
    );
}

fn check_unexpected(r: &mut Report, s: &mut State, name: &str) {
    if s.unexpected.is_empty() {
        r.pass(name);
    } else {
        for u in s.unexpected.iter().take(20) {
            r.note(u);
        }
        r.fail(
            name,
            "only ENOSPC",
            format!(
                "{} other errors, first: {}",
                s.unexpected.len(),
                s.unexpected[0]
            ),
        );
        s.unexpected.clear();
    }
}

fn check_sizes(r: &mut Report, s: &State, name: &str) {
    let mut bad = Vec::new();
    for (rel, &size) in &s.files {
        match sys::lstat(s.root.join(rel)) {
            Ok(st) if st.st_size as u64 == size => {}
            Ok(st) => bad.push(format!(
                "{rel}: size {}, write() reported {size}",
                st.st_size
            )),
            Err(e) => bad.push(format!("{rel}: {e}")),
        }
    }
    for b in bad.iter().take(10) {
        r.note(b);
    }
    r.check(
        name,
        bad.is_empty(),
        format!("{} files with recorded sizes", s.files.len()),
        format!("{} differ", bad.len()),
    );
}
