//! `enospc DIR`: fill the filesystem to ENOSPC with files of mixed sizes, recording exactly what
//! each write() reported; the only error allowed anywhere is ENOSPC. Then delete half, keep
//! writing and deleting for a few rounds (again only ENOSPC), check that operations which free
//! space work on a full filesystem, and finally verify every surviving file byte for byte.
//! Stores through a shared mapping are checked too: on the full filesystem a store into a new
//! page must die with SIGBUS (ferrofs budgets in `page_mkwrite`, as UBIFS) instead of being
//! lost silently at write-back, the pages stored before it must survive fsync, and once space
//! is freed stores work again.

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
    // The sparse file the mmap checks store into (made before the fill: creating it would fail
    // on the full filesystem).
    let mm = MmFile::create(r, root, o.seed, (MM_LEN).min(total / 2 / PAGE * PAGE));

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

    let mut mm_done = 0u64;
    if let Some(mm) = &mm {
        // A store into a new page of a mapping on the full filesystem: SIGBUS, not a silent loss.
        match mm.store(0, mm.pages) {
            Ok((n, sig)) => {
                r.note(format!("mmap on the full filesystem: {n} of {} pages stored before the store failed", mm.pages));
                r.check("mmap store on a full filesystem gets SIGBUS", sig == libc::SIGBUS, "SIGBUS", sig_name(sig));
                mm_done = n;
                r.ok("fsync of the mapped file after the SIGBUS", mm.fd.fsync());
                check_res(r, "pages stored before the SIGBUS read back", mm.verify(mm_done));
            }
            Err(e) => r.fail("mmap store on a full filesystem", "a child that stores", e),
        }
    }

    // Overwrites in place on the full filesystem (a database or log rewriting its own pages):
    // they add nothing, so they must succeed and survive write-back; growth must still get a
    // clean ENOSPC that loses nothing.
    overwrite_when_full(r, &mut s, o, &mut buf);

    // A truncate down into a dirty block that is not on flash yet, on a full filesystem.
    truncate_dirty_when_full(r, &mut s, &mut buf);

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
    if let Some(mm) = mm {
        // With space again, stores through the mapping work again.
        let to = (mm_done + MM_AGAIN).min(mm.pages);
        match mm.store(mm_done, to) {
            Ok((n, sig)) => {
                r.check("mmap stores work again after deleting", sig == 0 && n == to, format!("{to} pages, no signal"), format!("{n} pages, {}", sig_name(sig)));
                r.ok("fsync of the mapped file", mm.fd.fsync());
                if o.drop_caches {
                    sys::drop_caches();
                }
                check_res(r, "every page stored through the mapping reads back", mm.verify(n));
            }
            Err(e) => r.fail("mmap stores after deleting", "a child that stores", e),
        }
        let path = root.join(MM_NAME);
        drop(mm);
        r.ok("remove the mapped file", sys::unlink(path));
    }

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

/// Bytes of the files' whole blocks the overwrite check rewrites at once (capped at an eighth of
/// the filesystem): enough dirty folios that write-back meets them all on the full volume.
const OVER_MAX: u64 = 32 * MIB;

/// The overwrite checks of a full filesystem: (1) every whole block of the biggest files
/// (`OVER_MAX` at most) rewritten with other bytes through the page cache, all dirty at once,
/// plus a small unaligned overwrite inside a block, then syncfs, caches dropped, and every byte
/// read back (a write-back that failed for lack of space would leave the old bytes or an error);
/// (2) an O_DIRECT overwrite, read back; (3) the original bytes written back the same way
/// with fsync per file (so the later checks see the files as recorded); (4) appending to a
/// file gets ENOSPC (after at most a few blocks: the budget's last crumbs) and the file keeps
/// its size and bytes.
fn overwrite_when_full(r: &mut Report, s: &mut State, o: &Opts, buf: &mut [u8]) {
    let total = sys::statfs(&s.root).map(|st| st.f_blocks as u64 * st.f_bsize as u64).unwrap_or(0);
    let cap = OVER_MAX.min(total / 8);
    let mut by_size: Vec<(String, u64)> = s.files.iter().map(|(k, &v)| (k.clone(), v)).filter(|(_, v)| *v >= 2 * PAGE).collect();
    by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut sum = 0u64;
    for (rel, size) in by_size {
        if sum >= cap {
            break;
        }
        let len = (size / PAGE * PAGE).min(cap - sum) / PAGE * PAGE;
        if len == 0 {
            continue;
        }
        sum += len;
        chosen.push((rel, size, len));
    }
    r.note(format!("overwrite on the full filesystem: {} files, {sum} bytes, {} available", chosen.len(), avail(&s.root)));
    if chosen.is_empty() {
        r.fail("overwrite on a full filesystem", "files to overwrite", "none of 8 KiB or more");
        return;
    }
    let other = |rel: &str| pattern::key_for(s.seed ^ 0x0F_E7_A1, rel.as_bytes());
    // (1) buffered, all dirty at once, one syncfs
    let mut errs = Vec::new();
    let mut fds = Vec::new();
    for (rel, _, len) in &chosen {
        let fd = match sys::open(s.root.join(rel), O_RDWR, 0) {
            Ok(fd) => fd,
            Err(e) => {
                errs.push(format!("open {rel}: {e}"));
                continue;
            }
        };
        let key = other(rel);
        let mut off = 0u64;
        while off < *len {
            let n = (*len - off).min(buf.len() as u64) as usize;
            pattern::fill(key, off, &mut buf[..n]);
            if let Err((done, e)) = fd.pwrite_all(&buf[..n], off) {
                errs.push(format!("pwrite {rel} at {}: {e}", off + done as u64));
                break;
            }
            off += n as u64;
        }
        fds.push((rel.clone(), fd));
    }
    // a small overwrite inside a block (read-modify-write of the folio)
    let (srel, _, slen) = &chosen[0];
    let small_off = (*slen).min(8 * PAGE) - PAGE + 1000;
    let small = [0xA5u8; 100];
    if let Some((_, fd)) = fds.first() {
        if let Err((_, e)) = fd.pwrite_all(&small, small_off) {
            errs.push(format!("pwrite {srel} 100 bytes at {small_off}: {e}"));
        }
    }
    r.check("buffered overwrites of whole blocks on a full filesystem succeed", errs.is_empty(), "no error", errs.first().cloned().unwrap_or_default());
    r.ok("syncfs after the overwrites on a full filesystem", sys::syncfs_path(&s.root));
    drop(fds);
    sys::drop_caches();
    let mut bad = Vec::new();
    let mut scratch = Vec::new();
    for (rel, size, len) in &chosen {
        let res = (|| -> Result<(), String> {
            let fd = sys::open(s.root.join(rel), O_RDONLY, 0).map_err(|e| format!("open: {e}"))?;
            let mut off = 0u64;
            while off < *size {
                let n = (*size - off).min(buf.len() as u64) as usize;
                let got = fd.pread_full(&mut buf[..n], off).map_err(|e| format!("read at {off}: {e}"))?;
                if got != n {
                    return Err(format!("short read at {off}: {got} of {n}"));
                }
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    let at = off + i as u64;
                    if rel == srel && at >= small_off && at < small_off + small.len() as u64 {
                        if *b != 0xA5 {
                            return Err(format!("byte {at}: {b:#x}, the small overwrite wrote 0xa5"));
                        }
                        *b = pattern::byte_at(if at < *len { other(rel) } else { pattern::key_for(s.seed, rel.as_bytes()) }, at);
                    }
                }
                let (a, b) = (off.min(*len), (off + n as u64).min(*len));
                if a < b {
                    if let Some(x) = pattern::first_mismatch(other(rel), a, &buf[..(b - a) as usize], &mut scratch) {
                        return Err(format!("overwritten byte {x} differs"));
                    }
                }
                if off + n as u64 > *len {
                    let from = (*len).max(off);
                    let k = (from - off) as usize;
                    if let Some(x) = pattern::first_mismatch(pattern::key_for(s.seed, rel.as_bytes()), from, &buf[k..n], &mut scratch) {
                        return Err(format!("byte {x} past the overwrite differs"));
                    }
                }
                off += n as u64;
            }
            Ok(())
        })();
        if let Err(m) = res {
            bad.push(format!("{rel}: {m}"));
        }
    }
    r.check("overwritten files read back after syncfs and a cache drop", bad.is_empty(), "all match", bad.first().cloned().unwrap_or_default());

    // (2) O_DIRECT over the start of the first file (the module serves it through the cache)
    let (drel, _, dlen) = &chosen[0];
    let dn = (*dlen).min(256 * 1024) as usize;
    let mut ab = sys::AlignedBuf::new(dn);
    pattern::fill(pattern::key_for(s.seed, drel.as_bytes()), 0, ab.get_mut());
    let dres = sys::open(s.root.join(drel), O_RDWR | libc::O_DIRECT, 0).and_then(|fd| {
        let n = fd.pwrite(ab.get(), 0)?;
        fd.fsync()?;
        Ok(n)
    });
    r.check("O_DIRECT overwrite on a full filesystem", matches!(dres, Ok(n) if n == dn), format!("{dn} bytes"), format!("{dres:?}"));

    // (3) the original bytes back, fsync per file
    let mut errs = Vec::new();
    for (rel, _, len) in &chosen {
        let end = (*len).max(if rel == srel { small_off + small.len() as u64 } else { 0 });
        let res = write_pattern(&s.root, s.seed, rel, end, buf);
        if let Err(m) = res {
            errs.push(format!("{rel}: {m}"));
        }
    }
    r.check("rewriting the original bytes (fsync per file) on a full filesystem", errs.is_empty(), "no error", errs.first().cloned().unwrap_or_default());

    // (4) growth: ENOSPC, nothing lost
    let (arel, asize) = (chosen[0].0.clone(), chosen[0].1);
    let key = pattern::key_for(s.seed, arel.as_bytes());
    let mut grown = 0u64;
    let mut err = None;
    if let Ok(fd) = sys::open(s.root.join(&arel), O_RDWR, 0) {
        while grown < 4 * MIB {
            let off = asize + grown;
            pattern::fill(key, off, &mut buf[..64 * 1024]);
            match fd.pwrite(&buf[..64 * 1024], off) {
                Ok(0) => break,
                Ok(n) => grown += n as u64,
                Err(Errno(libc::EINTR)) => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let _ = fd.fsync();
    }
    r.note(format!("append on the full filesystem: {grown} bytes before {err:?}"));
    r.check("append on a full filesystem gets ENOSPC", err == Some(Errno(ENOSPC)) && grown < MIB, "ENOSPC within 1 MiB", format!("{err:?} after {grown} bytes"));
    s.files.insert(arel, asize + grown);
    let _ = sys::syncfs_path(&s.root);
    if o.drop_caches {
        sys::drop_caches();
    }
    check_sizes(r, s, "after the overwrites and the append: every file's size is what write() reported");

    // stores through a shared mapping on the full filesystem: in place they succeed, growth
    // gets SIGBUS
    mmap_when_full(r, s, buf);

    // (5) an overwrite in place left dirty over a block that truncate then shortens, and the
    // size grown back: write-back must not find the block grown past what the flash holds (the
    // kernel writes the new EOF folio back before the cut). The file ends with that block or
    // a short one, so the cut frees less than what writing the block anew would cost.
    let pick = s.files.iter().map(|(k, &v)| (k.clone(), v)).find(|(_, v)| *v >= 2 * PAGE && *v % PAGE <= 2000);
    let Some((trel, tsize)) = pick else {
        r.note("no file ends in a short enough block for the truncate check");
        return;
    };
    let b = tsize / PAGE - 1;
    let tkey = other(&trel);
    let mut page = vec![0u8; PAGE as usize];
    pattern::fill(tkey, b * PAGE, &mut page);
    let res = sys::open(s.root.join(&trel), O_RDWR, 0).and_then(|fd| {
        let n = fd.pwrite(&page, b * PAGE)?;
        if n != page.len() {
            return Err(Errno(libc::EIO));
        }
        fd.ftruncate(b * PAGE + 100)?;
        fd.ftruncate((b + 1) * PAGE)
    });
    r.check("overwrite in place, truncate into the block, grow back on a full filesystem", res.is_ok(), "no error", format!("{res:?}"));
    r.ok("syncfs after the truncate of an overwritten block", sys::syncfs_path(&s.root));
    sys::drop_caches();
    let key = pattern::key_for(s.seed, trel.as_bytes());
    let res = (|| -> Result<(), String> {
        let fd = sys::open(s.root.join(&trel), O_RDONLY, 0).map_err(|e| format!("open: {e}"))?;
        let mut all = vec![0u8; ((b + 1) * PAGE) as usize];
        let n = fd.pread_full(&mut all, 0).map_err(|e| format!("read: {e}"))?;
        let mut extra = [0u8; 1];
        if n != all.len() || fd.pread_full(&mut extra, all.len() as u64).map_err(|e| format!("read: {e}"))? != 0 {
            return Err(format!("size is not {}", all.len()));
        }
        let mut scratch = Vec::new();
        let bs = (b * PAGE) as usize;
        if let Some(x) = pattern::first_mismatch(key, 0, &all[..bs], &mut scratch) {
            return Err(format!("byte {x} before the block differs"));
        }
        if all[bs..bs + 100] != page[..100] {
            return Err("the overwritten bytes below the cut differ".into());
        }
        if all[bs + 100..].iter().any(|&c| c != 0) {
            return Err("bytes past the cut are not zero".into());
        }
        Ok(())
    })();
    check_res(r, "the truncated overwrite reads back (new bytes below the cut, zeros above)", res);
    // it no longer follows the pattern: out of the final verification
    if sys::unlink(s.root.join(&trel)).is_ok() {
        s.files.remove(&trel);
    }
}

/// In a child process: map `fd` (`len` bytes) shared and store `pages[k].1` at page
/// `pages[k].0`, in order, then msync. Returns how many stores were done when the child ended
/// and the signal that ended it (0: it stored them all and msync succeeded).
fn mmap_child(fd: &sys::Fd, len: usize, pages: &[(u64, Vec<u8>)]) -> Result<(usize, i32), String> {
    let (n, sig) = in_child(0, |progress| match sys::Mmap::new(fd, len, true, true) {
        Ok(mut m) => {
            for (k, (p, data)) in pages.iter().enumerate() {
                m.write_at((p * PAGE) as usize, data);
                progress(k as u64 + 1);
            }
            if m.msync().is_ok() {
                0
            } else {
                3
            }
        }
        Err(_) => 2,
    })?;
    Ok((n as usize, sig))
}

/// Run `body` in a forked child (a store through a mapping may kill it with SIGBUS) with a
/// progress counter shared with this process, starting at `start`; `body`'s result is the
/// child's exit code. Returns the counter's last value and the signal that ended the child
/// (0: it exited with code 0); an error if it exited with another code.
fn in_child(start: u64, body: impl FnOnce(&dyn Fn(u64)) -> i32) -> Result<(u64, i32), String> {
    // SAFETY: a fresh anonymous shared mapping for the child's progress counter.
    let cnt = unsafe { libc::mmap(std::ptr::null_mut(), 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1, 0) };
    if cnt == libc::MAP_FAILED {
        return Err(format!("mmap counter: {}", Errno::last()));
    }
    let cnt = cnt as *mut u64;
    // SAFETY: `cnt` is 8 mapped bytes.
    unsafe { cnt.write_volatile(start) };
    // SAFETY: single-threaded program; the child only runs `body` and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        crate::report::reset_fatal_signal_handler();
        // SAFETY: `cnt` is 8 mapped bytes, shared with the parent.
        let code = body(&|v| unsafe { cnt.write_volatile(v) });
        // SAFETY: exiting the child without unwinding (its mappings die with it).
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        // SAFETY: unmapping the counter (no child).
        unsafe { libc::munmap(cnt.cast(), 8) };
        return Err(format!("fork: {}", Errno::last()));
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let w = unsafe { libc::waitpid(pid, &mut status, 0) };
    // SAFETY: `cnt` is 8 mapped bytes; the child is gone.
    let n = unsafe { cnt.read_volatile() };
    // SAFETY: unmapping the counter.
    unsafe { libc::munmap(cnt.cast(), 8) };
    if w != pid {
        return Err(format!("waitpid: {}", Errno::last()));
    }
    if libc::WIFSIGNALED(status) {
        Ok((n, libc::WTERMSIG(status)))
    } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok((n, 0))
    } else {
        Err(format!("the child failed (status {status:#x}, progress {n})"))
    }
}

/// Overwrite bytes `0..end` of the existing file `rel` with its pattern (write(2) through
/// `buf`, in pieces of its size) and fsync it.
fn write_pattern(root: &Path, seed: u64, rel: &str, end: u64, buf: &mut [u8]) -> Result<(), String> {
    let key = pattern::key_for(seed, rel.as_bytes());
    let fd = sys::open(root.join(rel), O_RDWR, 0).map_err(|e| format!("open: {e}"))?;
    let mut off = 0u64;
    while off < end {
        let n = (end - off).min(buf.len() as u64) as usize;
        pattern::fill(key, off, &mut buf[..n]);
        fd.pwrite_all(&buf[..n], off).map_err(|(d, e)| format!("pwrite at {}: {e}", off + d as u64))?;
        off += n as u64;
    }
    fd.fsync().map_err(|e| format!("fsync: {e}"))
}

/// Read all of `rel` and compare it with `want` (its whole expected content).
fn read_matches(root: &Path, rel: &str, want: &[u8]) -> Result<(), String> {
    let fd = sys::open(root.join(rel), O_RDONLY, 0).map_err(|e| format!("open: {e}"))?;
    let mut got = vec![0u8; want.len() + 1];
    let n = fd.pread_full(&mut got, 0).map_err(|e| format!("read: {e}"))?;
    if n != want.len() {
        return Err(format!("size {n}, want {}", want.len()));
    }
    match got[..n].iter().zip(want).position(|(a, b)| a != b) {
        Some(at) => Err(format!("byte {at} differs")),
        None => Ok(()),
    }
}

/// Stores through a shared mapping on the full filesystem. (1) Pages of whole blocks already on
/// flash (an overwrite in place, which needs no space) of the biggest file: every store must
/// succeed (ferrofs's `page_mkwrite` admits such a folio without a budget, as `write_begin`
/// does; before, the first store got SIGBUS), msync must write them, and after a cache drop
/// the file must hold them. (2) Stores into the short EOF page of files (its block record is
/// not a whole block: rewriting it needs new space): SIGBUS by the third file at the latest
/// (the budget's crumbs may admit one), and every file reads back as it was or with the stored
/// page, its size unchanged. The files are put back to their recorded bytes after.
fn mmap_when_full(r: &mut Report, s: &State, buf: &mut [u8]) {
    let other = |rel: &str| pattern::key_for(s.seed ^ 0x00AA_55F0, rel.as_bytes());
    // (1) in place
    let big = s.files.iter().map(|(k, &v)| (k.clone(), v)).filter(|(_, v)| *v >= 2 * PAGE).max_by_key(|(k, v)| (*v, std::cmp::Reverse(k.clone())));
    let Some((rel, size)) = big else {
        r.note("no file of two pages or more for the mmap checks");
        return;
    };
    let npages = (size / PAGE).min(256);
    let key = pattern::key_for(s.seed, rel.as_bytes());
    let mut want = vec![0u8; size as usize];
    pattern::fill(key, 0, &mut want);
    let pages: Vec<(u64, Vec<u8>)> = (0..npages)
        .map(|p| {
            let mut d = vec![0u8; PAGE as usize];
            pattern::fill(other(&rel), p * PAGE, &mut d);
            (p, d)
        })
        .collect();
    let res = sys::open(s.root.join(&rel), O_RDWR, 0).map_err(|e| format!("open: {e}")).and_then(|fd| mmap_child(&fd, size as usize, &pages));
    r.note(format!("mmap in place on the full filesystem: {rel}, {npages} pages, {} available: {res:?}", avail(&s.root)));
    r.check(
        "mmap stores into whole on-flash blocks on a full filesystem succeed (msync)",
        matches!(res, Ok((n, 0)) if n == pages.len()),
        format!("{} stores, no signal", pages.len()),
        match &res {
            Ok((n, sig)) => format!("{n} stores, {}", sig_name(*sig)),
            Err(e) => e.clone(),
        },
    );
    sys::drop_caches();
    let stored = match res {
        Ok((n, _)) => n,
        Err(_) => 0,
    };
    for (p, d) in pages.iter().take(stored) {
        want[(p * PAGE) as usize..((p + 1) * PAGE) as usize].copy_from_slice(d);
    }
    check_res(r, "the pages stored in place read back after msync and a cache drop", read_matches(&s.root, &rel, &want));
    // back to the recorded bytes (an overwrite in place through write(2))
    let res = write_pattern(&s.root, s.seed, &rel, npages * PAGE, buf);
    r.check("rewriting the mapped pages' original bytes on a full filesystem", res.is_ok(), "no error", format!("{res:?}"));

    // (2) growth: the short EOF page of up to three files
    let eofs: Vec<(String, u64)> = s.files.iter().map(|(k, &v)| (k.clone(), v)).filter(|(k, v)| *v > PAGE && *v % PAGE != 0 && *k != rel).take(3).collect();
    if eofs.is_empty() {
        r.note("no file ends in a short block for the mmap growth check");
        return;
    }
    let mut sigbus = false;
    let mut outcome = Vec::new();
    let mut bad = Vec::new();
    for (erel, esize) in &eofs {
        let last = esize / PAGE;
        let mut d = vec![0u8; (esize % PAGE) as usize];
        pattern::fill(other(erel), last * PAGE, &mut d);
        let res = sys::open(s.root.join(erel), O_RDWR, 0).map_err(|e| format!("open: {e}")).and_then(|fd| {
            let res = mmap_child(&fd, *esize as usize, &[(last, d.clone())]);
            let _ = fd.fsync();
            res
        });
        outcome.push(format!("{erel}: {res:?}"));
        let stored = matches!(res, Ok((1, 0)));
        sigbus |= matches!(res, Ok((_, libc::SIGBUS)));
        sys::drop_caches();
        let mut want = vec![0u8; *esize as usize];
        pattern::fill(pattern::key_for(s.seed, erel.as_bytes()), 0, &mut want);
        let plain = read_matches(&s.root, erel, &want);
        want[(last * PAGE) as usize..].copy_from_slice(&d);
        let with = read_matches(&s.root, erel, &want);
        match (stored, plain, with) {
            (true, _, Ok(())) | (false, Ok(()), _) => {}
            (true, _, Err(e)) => bad.push(format!("{erel} (stored): {e}")),
            (false, Err(e), _) => bad.push(format!("{erel} (not stored): {e}")),
        }
        if stored {
            let res = write_pattern(&s.root, s.seed, erel, *esize, buf);
            if res.is_err() {
                bad.push(format!("{erel}: restoring: {res:?}"));
            }
        }
        if sigbus {
            break;
        }
    }
    r.note(format!("mmap stores into short EOF pages on the full filesystem: {}", outcome.join("; ")));
    if is_ferrofs(&s.root) {
        // ferrofs rewrites a short block as a new record: the store needs space
        r.check("an mmap store that needs new space on a full filesystem gets SIGBUS", sigbus, "SIGBUS", outcome.last().cloned().unwrap_or_default());
    } else {
        r.note("not ferrofs: a store into an allocated EOF block may need no space, SIGBUS not required");
    }
    r.check("files stored into through a mapping on a full filesystem read back intact", bad.is_empty(), "old bytes, or the stored page", bad.first().cloned().unwrap_or_default());
}

/// A truncate down of a file whose new EOF block is dirty and not on flash yet (budgeted, so
/// not an overwrite in place), on a full filesystem, must succeed: it frees space. The file
/// (`trunc.dat`, made in room freed by deleting a file) gets one block written back with
/// sync_file_range and a short second one left dirty; the filesystem is then filled to
/// ENOSPC with empty files and small xattrs (which do not write dirty data back); the file is
/// truncated into its dirty block. Before ferrofs kept the inode record's charge for the
/// folios a range-limited write-back left dirty and stopped writing a budgeted EOF folio back
/// before the cut, that write-back found no budget for its inode record: ENOSPC.
fn truncate_dirty_when_full(r: &mut Report, s: &mut State, buf: &mut [u8]) {
    let victim = s.files.iter().filter(|(_, &v)| v >= 64 * 1024).min_by_key(|(k, &v)| (v, (*k).clone())).map(|(k, _)| k.clone());
    let Some(victim) = victim else {
        r.note("no file of 64 KiB or more to make room for the truncate check");
        return;
    };
    if let Err(e) = sys::unlink(s.root.join(&victim)) {
        s.unexpected(format!("unlink {victim}: {e}"));
        return;
    }
    s.files.remove(&victim);
    let _ = sys::syncfs_path(&s.root);
    let name = "trunc.dat";
    let path = s.root.join(name);
    let len = PAGE + 3000;
    let key = pattern::key_for(s.seed, name.as_bytes());
    pattern::fill(key, 0, &mut buf[..len as usize]);
    let made = sys::open(&path, O_CREAT | O_EXCL | O_RDWR, 0o644).and_then(|fd| {
        fd.pwrite_all(&buf[..len as usize], 0).map_err(|(_, e)| e)?;
        // SAFETY: a plain syscall on our open descriptor.
        let rc = unsafe {
            libc::sync_file_range(fd.raw(), 0, PAGE as i64, libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER)
        };
        if rc != 0 {
            return Err(Errno::last());
        }
        Ok(fd)
    });
    let Some(fd) = r.ok("write a file with a dirty short last block in freed room", made) else {
        return;
    };
    // fill what is left with metadata (no data write-back on its ENOSPC)
    let mut pads = Vec::new();
    let mut last_err = None;
    for (xlen, max) in [(2000usize, 4096), (200, 4096), (0, 8192)] {
        for _ in 0..max {
            let p = s.root.join(format!("pad{}", pads.len()));
            match sys::open(&p, O_CREAT | O_EXCL | O_RDWR, 0o644) {
                Ok(_) => pads.push(p.clone()),
                Err(e) => {
                    last_err = Some(e);
                    break;
                }
            }
            if xlen > 0 {
                if let Err(e) = sys::setxattr(&p, "user.pad", &vec![0x5Au8; xlen], 0, false) {
                    last_err = Some(e);
                    break;
                }
            }
        }
    }
    r.note(format!("truncate check: {} pad files, then {last_err:?}, {} available", pads.len(), avail(&s.root)));
    if is_ferrofs(&s.root) {
        r.check("filling the freed room with metadata reaches ENOSPC", last_err == Some(Errno(ENOSPC)), "ENOSPC", format!("{last_err:?}"));
    } else {
        r.note("not ferrofs: metadata need not fill the freed room");
    }
    let cut = PAGE + 100;
    let res = fd.ftruncate(cut);
    r.check("truncate down into a dirty block not on flash, on a full filesystem", res.is_ok(), "no error", format!("{res:?}"));
    let want_len = if res.is_ok() { cut } else { len };
    r.ok("syncfs after the truncate into a dirty block", sys::syncfs_path(&s.root));
    drop(fd);
    sys::drop_caches();
    check_res(r, "the truncated file reads back (its bytes below the cut)", read_matches(&s.root, name, &buf[..want_len as usize]));
    for p in &pads {
        if let Err(e) = sys::unlink(p) {
            s.unexpected(format!("unlink {}: {e}", p.display()));
        }
    }
    if let Err(e) = sys::unlink(&path) {
        s.unexpected(format!("unlink {name}: {e}"));
    }
    check_unexpected(r, s, "the truncate check's files delete");
}

/// Whether `p` is on ferrofs (statfs f_type: the superblock magic), whose budget rules the
/// SIGBUS and metadata-fill expectations above assume.
fn is_ferrofs(p: &Path) -> bool {
    sys::statfs(p).map(|st| st.f_type as i64 == 0x4253_4646).unwrap_or(false)
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

const PAGE: u64 = 4096;
/// Size of the sparse file stores go into through a shared mapping (capped at half the
/// filesystem).
const MM_LEN: u64 = 32 * MIB;
/// Pages stored again once space is freed.
const MM_AGAIN: u64 = 256;
const MM_NAME: &str = "mmap.dat";

fn sig_name(sig: i32) -> String {
    match sig {
        0 => "no signal (every store succeeded)".into(),
        libc::SIGBUS => "SIGBUS".into(),
        s => format!("signal {s}"),
    }
}

/// The file of the mmap checks: `pages` pages, sparse at first.
struct MmFile {
    fd: sys::Fd,
    pages: u64,
    key: u64,
}

impl MmFile {
    fn create(r: &mut Report, root: &Path, seed: u64, len: u64) -> Option<MmFile> {
        let fd = r.ok("create the file to map", sys::open(root.join(MM_NAME), O_CREAT | O_EXCL | O_RDWR, 0o644))?;
        r.ok("size the file to map (sparse)", fd.ftruncate(len))?;
        Some(MmFile { fd, pages: len / PAGE, key: pattern::key_for(seed, MM_NAME.as_bytes()) })
    }

    /// In a child process, map the file shared and store the pattern into pages `from..to`,
    /// one page at a time. Returns how many pages (from 0) are stored when the child ended,
    /// and the signal that ended it (0: it exited after storing them all).
    fn store(&self, from: u64, to: u64) -> Result<(u64, i32), String> {
        let len = (self.pages * PAGE) as usize;
        in_child(from, |progress| match sys::Mmap::new(&self.fd, len, true, true) {
            Ok(mut m) => {
                let mut page = vec![0u8; PAGE as usize];
                for p in from..to {
                    pattern::fill(self.key, p * PAGE, &mut page);
                    m.write_at((p * PAGE) as usize, &page);
                    progress(p + 1);
                }
                0
            }
            Err(_) => 2,
        })
    }

    /// Check pages `0..n` against the pattern.
    fn verify(&self, n: u64) -> Result<(), String> {
        let mut buf = vec![0u8; (PAGE * 64) as usize];
        let mut scratch = Vec::new();
        let mut off = 0u64;
        let end = n * PAGE;
        while off < end {
            let want = (end - off).min(buf.len() as u64) as usize;
            let got = self.fd.pread_full(&mut buf[..want], off).map_err(|e| format!("read at {off}: {e}"))?;
            if got != want {
                return Err(format!("short read at {off}: {got} of {want}"));
            }
            if let Some(at) = pattern::first_mismatch(self.key, off, &buf[..want], &mut scratch) {
                return Err(format!("differs at byte {at}"));
            }
            off += want as u64;
        }
        Ok(())
    }
}

fn check_res(r: &mut Report, name: &str, res: Result<(), String>) {
    match res {
        Ok(()) => r.pass(name),
        Err(e) => r.fail(name, "match", e),
    }
}
