//! Lifecycle checks (the ferrofs-lifecycle guest suite): operations that must not write to a
//! read-only or frozen filesystem, FIFREEZE/FITHAW, the `trusted.*` listxattr filter for
//! unprivileged users, and how long an unmount takes.
//!
//! ```text
//! ferrofs-fstest lifecycle quiet DIR [--ro] [--wait-ms N]   reads, fsync/fdatasync/syncfs of
//!        read-only descriptors, (--ro) every mutation fails with EROFS; then waits N ms
//! ferrofs-fstest lifecycle freeze DIR | thaw DIR             FIFREEZE / FITHAW
//! ferrofs-fstest lifecycle xattr-visibility DIR              trusted.* hidden from uid 65534
//! ferrofs-fstest lifecycle umount-timed DIR --source MTD [--rounds R] [--wait-ms N] [--max-ms M]
//! ferrofs-fstest lifecycle attr-race DIR [--rounds R]        chmod racing write_inode (below)
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::report::Report;
use crate::sys::{self, Errno};

const FIFREEZE: libc::c_ulong = 0xC004_5877;
const FITHAW: libc::c_ulong = 0xC004_5878;
const NOBODY: u32 = 65534;

struct Opts {
    sub: String,
    dir: PathBuf,
    ro: bool,
    wait_ms: u64,
    max_ms: u64,
    source: Option<String>,
    rounds: u64,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { sub: String::new(), dir: PathBuf::new(), ro: false, wait_ms: 0, max_ms: 500, source: None, rounds: 1 };
    let mut pos = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let (k, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a, None),
        };
        match k {
            "--ro" => o.ro = true,
            "--wait-ms" | "--max-ms" | "--rounds" | "--source" => {
                let v = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i).cloned().ok_or(format!("{k} needs a value"))?
                    }
                };
                if k == "--source" {
                    o.source = Some(v);
                    i += 1;
                    continue;
                }
                let n: u64 = v.parse().map_err(|_| format!("{k}: not a number: {v}"))?;
                match k {
                    "--wait-ms" => o.wait_ms = n,
                    "--rounds" => o.rounds = n.max(1),
                    _ => o.max_ms = n,
                }
            }
            _ if k.starts_with("--") => return Err(format!("unknown option {k}")),
            _ => pos.push(a.to_string()),
        }
        i += 1;
    }
    if pos.len() != 2 {
        return Err("lifecycle SUBCOMMAND DIR".into());
    }
    o.sub = pos[0].clone();
    o.dir = PathBuf::from(&pos[1]);
    Ok(o)
}

/// Entry point for `ferrofs-fstest lifecycle ...`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ferrofs-fstest lifecycle: {e}");
            return 2;
        }
    };
    match o.sub.as_str() {
        "quiet" => quiet(&o),
        "freeze" | "thaw" => match ioctl_dir(&o.dir, if o.sub == "freeze" { FIFREEZE } else { FITHAW }) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("ferrofs-fstest lifecycle {}: {e}", o.sub);
                1
            }
        },
        "xattr-visibility" => xattr_visibility(&o.dir),
        "umount-timed" => umount_timed(&o),
        "attr-race" => attr_race(&o),
        other => {
            eprintln!("ferrofs-fstest lifecycle: unknown subcommand {other}");
            2
        }
    }
}

fn ioctl_dir(dir: &Path, req: libc::c_ulong) -> Result<(), Errno> {
    let fd = sys::open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut arg: libc::c_int = 0;
    // SAFETY: FIFREEZE/FITHAW take an int argument (ignored); `fd` is open.
    let r = unsafe { libc::ioctl(fd.raw(), req as _, &mut arg) };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The regular files directly in `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok()).filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false)).map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn quiet(o: &Opts) -> i32 {
    let mut r = Report::new();
    let fs = files(&o.dir);
    r.check("there are files to read", !fs.is_empty(), "some", fs.len());
    for (i, f) in fs.iter().enumerate() {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let Some(fd) = r.ok(&format!("open {name} read-only"), sys::open(f, libc::O_RDONLY, 0)) else {
            continue;
        };
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            match fd.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e) => {
                    r.fail(&format!("read {name}"), "data", e);
                    break;
                }
            }
        }
        let _ = total;
        // fsync and fdatasync of a read-only descriptor are allowed; on a read-only or frozen
        // filesystem they must succeed without writing anything.
        r.ok(&format!("fsync {name}"), fd.fsync());
        r.ok(&format!("fdatasync {name}"), fd.fdatasync());
        if i == 0 {
            r.ok("syncfs", fd.syncfs());
        }
        if o.ro {
            r.err(&format!("open {name} for writing: EROFS"), sys::open(f, libc::O_WRONLY, 0), libc::EROFS);
            r.err(&format!("setxattr on {name}: EROFS"), sys::setxattr(f, "user.ro", b"x", 0, false), libc::EROFS);
            r.err(&format!("utimensat on {name}: EROFS"), sys::utimens(f, None, false), libc::EROFS);
        }
    }
    if o.ro {
        r.err("create: EROFS", sys::open(o.dir.join("new-file"), libc::O_CREAT | libc::O_WRONLY, 0o644), libc::EROFS);
        r.err("mkdir: EROFS", sys::mkdir(o.dir.join("new-dir"), 0o755), libc::EROFS);
        if let Some(f) = fs.first() {
            r.err("unlink: EROFS", sys::unlink(f), libc::EROFS);
        }
    }
    std::thread::sleep(Duration::from_millis(o.wait_ms));
    r.finish()
}

fn xattr_visibility(dir: &Path) -> i32 {
    let mut r = Report::new();
    if !sys::is_root() {
        r.fail("runs as root", "uid 0", "another uid");
        return r.finish();
    }
    // uid 65534 must be able to look the file up
    r.ok("chmod 0755 the directory", sys::chmod(dir, 0o755));
    let f = dir.join("xattr-visibility");
    r.ok("create the file", sys::write_file(&f, b"x", 0o644));
    r.ok("chmod 0644 the file", sys::chmod(&f, 0o644));
    r.ok("setxattr user.visible", sys::setxattr(&f, "user.visible", b"u", 0, false));
    r.ok("setxattr trusted.hidden", sys::setxattr(&f, "trusted.hidden", b"t", 0, false));
    match sys::listxattr(&f) {
        Ok(names) => {
            r.check("root lists user.visible", names.iter().any(|n| n == "user.visible"), "listed", format!("{names:?}"));
            r.check("root lists trusted.hidden", names.iter().any(|n| n == "trusted.hidden"), "listed", format!("{names:?}"));
        }
        Err(e) => r.fail("listxattr as root", "names", e),
    }
    // As uid/gid 65534 in a child; it reports "SIZE\nNAME\nNAME..." through a pipe.
    let mut p = [0 as libc::c_int; 2];
    // SAFETY: `p` has room for two descriptors.
    if unsafe { libc::pipe(p.as_mut_ptr()) } != 0 {
        r.fail("pipe", "ok", Errno::last());
        return r.finish();
    }
    // SAFETY: single-threaded program; the child only makes syscalls and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        crate::report::reset_fatal_signal_handler();
        // Work from inside the directory (the guest's / may not be searchable by others).
        let cd = sys::cpath(dir).map(|c| {
            // SAFETY: `c` is NUL-terminated.
            unsafe { libc::chdir(c.as_ptr()) == 0 }
        });
        let f = PathBuf::from("xattr-visibility");
        // SAFETY: dropping privileges in the child.
        let ok = cd == Ok(true)
            && unsafe { libc::setgroups(0, std::ptr::null()) == 0 && libc::setgid(NOBODY) == 0 && libc::setuid(NOBODY) == 0 };
        let msg = if !ok {
            "ERR chdir/setuid".to_string()
        } else {
            let size = sys::listxattr_sized(&f, 0, false).map(|(n, _)| n as i64).unwrap_or(-1);
            let (len, names) = sys::listxattr_sized(&f, 65536, false).unwrap_or((0, vec!["ERR".into()]));
            let get = match sys::getxattr(&f, "trusted.hidden") {
                Ok(_) => "readable".to_string(),
                Err(e) => e.to_string(),
            };
            format!("{size} {len}\n{get}\n{}", names.join("\n"))
        };
        // SAFETY: writing our buffer to the pipe, then exiting without unwinding.
        unsafe {
            libc::write(p[1], msg.as_ptr().cast(), msg.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(p[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(p[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: reaping our child; closing the read end.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        libc::close(p[0]);
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let mut lines = text.lines();
    let sizes = lines.next().unwrap_or("").to_string();
    let get = lines.next().unwrap_or("").to_string();
    let names: Vec<&str> = lines.collect();
    r.check("uid 65534 lists user.visible", names.contains(&"user.visible"), "listed", &text);
    r.check("uid 65534 does not see trusted.hidden", !names.iter().any(|n| n.starts_with("trusted.")), "hidden", &text);
    let mut it = sizes.split(' ').map(|s| s.parse::<i64>().unwrap_or(-2));
    let (q, l) = (it.next().unwrap_or(-2), it.next().unwrap_or(-3));
    r.check("uid 65534: the size query matches the list", q >= 0 && q == l, "equal sizes", &sizes);
    r.check("uid 65534: getxattr trusted.* is refused", get != "readable", "an error", &get);
    r.finish()
}

/// Mount `--source` on DIR (ferrofs), wait `--wait-ms`, time the unmount; `--rounds` times.
/// The fastest unmount must take at most `--max-ms` (the fastest, so that a host stall in one
/// round does not fail the check; an unmount that waits for the background thread's sleep is
/// slow in every round).
fn umount_timed(o: &Opts) -> i32 {
    let mut r = Report::new();
    let Some(src) = o.source.as_deref() else {
        r.fail("--source", "an MTD name", "none");
        return r.finish();
    };
    let (Ok(c), Ok(s), Ok(t)) = (sys::cpath(&o.dir), std::ffi::CString::new(src), std::ffi::CString::new("ferrofs")) else {
        r.fail("arguments", "paths", "NUL bytes");
        return r.finish();
    };
    let mut best = u64::MAX;
    for round in 1..=o.rounds {
        // SAFETY: NUL-terminated strings; no mount data.
        if unsafe { libc::mount(s.as_ptr(), c.as_ptr(), t.as_ptr(), 0, std::ptr::null()) } != 0 {
            r.fail(&format!("mount {src} (round {round})"), "success", Errno::last());
            return r.finish();
        }
        std::thread::sleep(Duration::from_millis(o.wait_ms));
        let t0 = Instant::now();
        // SAFETY: `c` is NUL-terminated.
        let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
        let ms = t0.elapsed().as_millis() as u64;
        if rc != 0 {
            r.fail(&format!("umount (round {round})"), "success", Errno::last());
            return r.finish();
        }
        r.note(format!("round {round}: umount took {ms} ms"));
        best = best.min(ms);
    }
    r.check(&format!("the fastest of {} unmounts within {} ms", o.rounds, o.max_ms), best <= o.max_ms, format!("<= {} ms", o.max_ms), format!("{best} ms"));
    r.finish()
}

/// chmod racing the write-back of the same inode's attributes: one thread chmods a file through
/// many modes while another keeps dirtying the inode (a write updates its mtime) and writing it
/// back (syncfs: `write_inode`). A `write_inode` that copied the attributes before the chmod
/// but stored them after it would leave the engine with an older mode and a clean inode; the
/// mode is then read back from the engine (caches dropped: the inode is evicted and read again)
/// and must be the last one set. R rounds (default 1), each of at least 200 chmods and lasting
/// until 3 write-backs ran (at most 30 s).
fn attr_race(o: &Opts) -> i32 {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let mut r = Report::new();
    let path = o.dir.join("attr-race");
    let rounds = o.rounds.max(1);
    let mut stale = 0u64;
    let mut syncs_total = 0u64;
    let mut chmods_total = 0u64;
    for round in 0..rounds {
        let Some(fd) = r.ok("create attr-race", sys::open(&path, libc::O_RDWR | libc::O_CREAT, 0o644)) else {
            return r.finish();
        };
        let stop = Arc::new(AtomicBool::new(false));
        let syncs = Arc::new(AtomicU64::new(0));
        let writer = {
            let (stop, syncs, path) = (stop.clone(), syncs.clone(), path.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let fd = sys::open(&path, libc::O_RDWR, 0).map_err(|e| format!("open: {e}"))?;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    fd.pwrite(&i.to_le_bytes(), 0).map_err(|e| format!("pwrite: {e}"))?;
                    fd.syncfs().map_err(|e| format!("syncfs: {e}"))?;
                    syncs.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok(())
            })
        };
        let mut last = 0u32;
        let mut err = None;
        // at least 200 chmods, and on until the writer wrote the inode back 3 times (a syncfs
        // is a checkpoint, far slower than a chmod), at most 30 s
        let t0 = Instant::now();
        let mut i = 0u32;
        while i < 200 || (syncs.load(Ordering::Relaxed) < 3 && t0.elapsed() < Duration::from_secs(30)) {
            i += 1;
            // consecutive modes differ (steps of 37 modulo 0o400), all readable by the owner
            last = 0o400 | ((i.wrapping_mul(37).wrapping_add(round as u32)) % 0o400);
            if let Err(e) = fd.fchmod(last) {
                err = Some(e);
                break;
            }
        }
        chmods_total += u64::from(i);
        stop.store(true, Ordering::Relaxed);
        let wr = writer.join().unwrap_or_else(|_| Err("writer thread panicked".into()));
        syncs_total += syncs.load(Ordering::Relaxed);
        if let Some(e) = err {
            r.fail(&format!("fchmod (round {round})"), "success", e);
            return r.finish();
        }
        if let Err(e) = wr {
            r.fail(&format!("writer (round {round})"), "success", e);
            return r.finish();
        }
        drop(fd);
        if !sys::drop_caches() {
            r.fail("drop caches", "dropped", "not root or no /proc");
            return r.finish();
        }
        match sys::stat(&path) {
            Ok(st) => {
                let got = st.st_mode & 0o7777;
                if got != last {
                    stale += 1;
                    r.fail(&format!("mode after round {round} read back"), format!("{last:o}"), format!("{got:o}"));
                }
            }
            Err(e) => {
                r.fail(&format!("stat (round {round})"), "success", e);
                return r.finish();
            }
        }
    }
    r.note(format!("{rounds} rounds: {chmods_total} chmods against {syncs_total} write+syncfs"));
    r.check(&format!("the last chmod of each of {rounds} rounds survives write-back"), stale == 0, "0 stale", format!("{stale} stale"));
    r.check("write-back ran during the chmods (3 per round)", syncs_total >= 3 * rounds, format!(">= {} syncfs", 3 * rounds), syncs_total);
    r.finish()
}
