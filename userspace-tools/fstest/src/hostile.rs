//! `ferrofs-fstest hostile DISK MTD MNT [--first K] [--count N] [--image-timeout S]`: mounts
//! hostile images one after another (`make hostile`, images from `ferrofs-hostile`).
//!
//! DISK holds the images (format of `ferrofs_tools::hostile::write_disk`: a header, the base
//! images, a table of (seed, base, patches, label), the patches). For each image: rebuild it
//! (base + patches), erase MTD (an mtdram of the images' geometry) and write it there, mount
//! ferrofs; a refusal must come with a ferrofs message in the kernel log; a mount must let us
//! walk the tree (stat, read every file, readlink, listxattr/getxattr: errors such as EIO are
//! expected on the damaged parts), write (create, write, fsync, rename, unlink, read back: what
//! was written and fsync'd without an error must read back intact), unmount, then mount the
//! result once more, walk it and unmount (keep working after a damaged mount). After each image
//! the kernel log is scanned for WARNING/BUG/Oops/KASAN reports. A watchdog reboots the guest when
//! one image takes longer than the image timeout (`HOSTILE-HANG` on the console); an oops panics
//! the guest (oops=panic). The host driver (tests/hostile/run-hostile.sh) sees the last
//! `hostile-image` line, counts the crash and resumes with the next image in a new guest.
//!
//! Per image one line `hostile-done I rejected|mounted ...`; last `N passed, N failed`.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sys::{self, Errno, Fd};

const MAGIC: &[u8; 8] = b"FFHOSTL1";
const HDR: usize = 4096;
const ENTRY: usize = 128;
const MAX_READ_PER_FILE: u64 = 4 << 20;
const MAX_ENTRIES: usize = 4000;
const MAX_DEPTH: usize = 24;

struct Opts {
    disk: String,
    mtd: String,
    mnt: String,
    first: u32,
    count: u32,
    timeout: u64,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut pos = Vec::new();
    let mut o = Opts { disk: String::new(), mtd: String::new(), mnt: String::new(), first: 0, count: u32::MAX, timeout: 120 };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let num = |v: Option<&String>| -> Result<u64, String> {
            v.and_then(|s| s.parse().ok()).ok_or_else(|| format!("{a} needs a number"))
        };
        match a.as_str() {
            "--first" => {
                o.first = num(args.get(i + 1))? as u32;
                i += 1;
            }
            "--count" => {
                o.count = num(args.get(i + 1))? as u32;
                i += 1;
            }
            "--image-timeout" => {
                o.timeout = num(args.get(i + 1))?;
                i += 1;
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            _ => pos.push(a.clone()),
        }
        i += 1;
    }
    if pos.len() != 3 {
        return Err("hostile wants DISK MTD MNT".into());
    }
    o.disk = pos[0].clone();
    o.mtd = pos[1].clone();
    o.mnt = pos[2].clone();
    Ok(o)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]])).unwrap_or(0)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | u64::from(u32_at(b, at + 4)) << 32
}

struct Disk {
    fd: Fd,
    bases: Vec<Vec<u8>>,
    table: Vec<u8>,
    count: u32,
    image_bytes: usize,
    seg_size: u32,
}

fn read_exact(fd: &Fd, off: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; len];
    let n = fd.pread_full(&mut b, off).map_err(|e| format!("read of the disk at {off}: {e}"))?;
    if n != len {
        return Err(format!("the disk ends at {} (wanted {len} bytes at {off})", off + n as u64));
    }
    Ok(b)
}

fn open_disk(path: &str) -> Result<Disk, String> {
    let fd = sys::open(path, libc::O_RDONLY, 0).map_err(|e| format!("open {path}: {e}"))?;
    let h = read_exact(&fd, 0, HDR)?;
    if &h[..8] != MAGIC || u32_at(&h, 8) != 1 {
        return Err(format!("{path} is not a hostile-image disk (no {} header)", String::from_utf8_lossy(MAGIC)));
    }
    let nb = u32_at(&h, 12) as usize;
    let count = u32_at(&h, 16);
    let image_bytes = u64_at(&h, 32) as usize;
    let table_off = u64_at(&h, 40);
    if nb == 0 || nb > 16 || image_bytes == 0 || image_bytes > 64 << 20 {
        return Err(format!("implausible disk header: {nb} bases of {image_bytes} bytes"));
    }
    let mut bases = Vec::new();
    for k in 0..nb {
        bases.push(read_exact(&fd, (HDR + k * image_bytes) as u64, image_bytes)?);
    }
    let table = read_exact(&fd, table_off, count as usize * ENTRY)?;
    Ok(Disk { fd, bases, table, count, image_bytes, seg_size: u32_at(&h, 20) })
}

struct Entry {
    seed: u64,
    label: String,
    image: Vec<u8>,
}

fn image(d: &Disk, i: u32) -> Result<Entry, String> {
    let e = &d.table[i as usize * ENTRY..(i as usize + 1) * ENTRY];
    let seed = u64_at(e, 0);
    let base = u32_at(e, 8) as usize;
    let plen = u32_at(e, 12) as usize;
    let poff = u64_at(e, 16);
    let l = &e[24..];
    let label = String::from_utf8_lossy(&l[..l.iter().position(|&c| c == 0).unwrap_or(l.len())]).into_owned();
    let mut img = d.bases.get(base).ok_or_else(|| format!("image {i}: no base {base}"))?.clone();
    let p = read_exact(&d.fd, poff, plen)?;
    let mut at = 0;
    while at + 8 <= p.len() {
        let o = u32_at(&p, at) as usize;
        let n = u32_at(&p, at + 4) as usize;
        let src = p.get(at + 8..at + 8 + n).ok_or_else(|| format!("image {i}: truncated patch"))?;
        img.get_mut(o..o + n).ok_or_else(|| format!("image {i}: patch beyond the image"))?.copy_from_slice(src);
        at += 8 + n;
    }
    Ok(Entry { seed, label, image: img })
}

fn mtd_info(fd: &Fd) -> Result<sys::MtdInfoUser, String> {
    sys::mtd_info(fd).map_err(|e| format!("MEMGETINFO: {e}"))
}

fn load(fd: &Fd, img: &[u8]) -> Result<(), String> {
    sys::mtd_erase(fd, 0, img.len() as u32).map_err(|e| format!("MEMERASE: {e}"))?;
    fd.pwrite_all(img, 0).map_err(|(n, e)| format!("writing the image to the MTD: {e} after {n} bytes"))
}

/// The kernel log since the last call (non-blocking /dev/kmsg reader).
struct Kmsg(Option<Fd>);

impl Kmsg {
    fn open() -> Kmsg {
        let fd = sys::open("/dev/kmsg", libc::O_RDONLY | libc::O_NONBLOCK, 0).ok();
        if let Some(f) = &fd {
            let _ = f.lseek(0, libc::SEEK_END);
        }
        Kmsg(fd)
    }
    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let Some(fd) = &self.0 else { return out };
        let mut buf = vec![0u8; 8192];
        loop {
            match fd.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let s = String::from_utf8_lossy(&buf[..n]);
                    let msg = s.split_once(';').map(|(_, m)| m).unwrap_or(&s);
                    out.push(msg.lines().next().unwrap_or("").to_string());
                }
                Err(Errno(libc::EPIPE)) => continue, // overwritten records: go on
                Err(_) => break,
            }
        }
        out
    }
}

const PROBLEMS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "Oops",
    "kernel BUG",
    "KASAN",
    "KFENCE",
    "UBSAN",
    "Call Trace",
    "general protection",
    "list_add corruption",
    "list_del corruption",
    "possible circular locking",
    "possible recursive locking",
    "inconsistent lock state",
    "blocked for more than",
    "soft lockup",
    "panic",
];

#[derive(Default)]
struct Tally {
    tried: u32,
    rejected: u32,
    mounted: u32,
    failed: u32,
    remounted: u32,
    remount_refused: u32,
    errnos: BTreeMap<String, u64>,
    files: u64,
    bytes: u64,
}

impl Tally {
    fn errno(&mut self, what: &str, e: Errno) {
        *self.errnos.entry(format!("{what}:{e}")).or_default() += 1;
    }
}

struct Walk<'a> {
    t: &'a mut Tally,
    seen: HashSet<(u64, u64)>,
    entries: usize,
    errors: u64,
    buf: Vec<u8>,
}

impl Walk<'_> {
    fn xattrs(&mut self, path: &str) {
        match sys::listxattr_sized(path, 65536, true) {
            Ok((_, names)) => {
                for n in names {
                    if let Err(e) = sys::getxattr_sized(path, &n, 65536, true) {
                        self.errors += 1;
                        self.t.errno("getxattr", e);
                    }
                }
            }
            Err(e) => {
                self.errors += 1;
                self.t.errno("listxattr", e);
            }
        }
    }

    fn file(&mut self, path: &str, size: u64) {
        let fd = match sys::open(path, libc::O_RDONLY | libc::O_NOFOLLOW, 0) {
            Ok(f) => f,
            Err(e) => {
                self.errors += 1;
                self.t.errno("open", e);
                return;
            }
        };
        self.t.files += 1;
        let mut off = 0u64;
        while off < MAX_READ_PER_FILE {
            match fd.pread(&mut self.buf, off) {
                Ok(0) => break,
                Ok(n) => {
                    off += n as u64;
                    self.t.bytes += n as u64;
                }
                Err(e) => {
                    self.errors += 1;
                    self.t.errno("read", e);
                    // skip the damaged block and go on
                    off = (off / 4096 + 1) * 4096;
                    if off >= size {
                        break;
                    }
                }
            }
        }
        for o in [size.saturating_sub(1), size / 2, size.saturating_sub(5000), size.saturating_add(10)] {
            let mut b = [0u8; 512];
            if let Err(e) = fd.pread(&mut b, o) {
                self.errors += 1;
                self.t.errno("read", e);
            }
        }
        let mut b = [0u8; 16];
        let _ = fd.lseek(0, libc::SEEK_DATA);
        let _ = fd.lseek(0, libc::SEEK_HOLE);
        let _ = fd.read(&mut b);
    }

    fn dir(&mut self, path: &str, depth: usize) {
        let fd = match sys::open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(f) => f,
            Err(e) => {
                self.errors += 1;
                self.t.errno("opendir", e);
                return;
            }
        };
        let mut names = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match fd.getdents(&mut buf) {
                Ok(v) if v.is_empty() => break,
                Ok(v) => {
                    for d in v {
                        if d.name != b"." && d.name != b".." {
                            names.push(d.name);
                        }
                    }
                    if names.len() > MAX_ENTRIES {
                        break;
                    }
                }
                Err(e) => {
                    self.errors += 1;
                    self.t.errno("getdents", e);
                    break;
                }
            }
        }
        drop(fd);
        for n in names {
            if self.entries >= MAX_ENTRIES {
                return;
            }
            self.entries += 1;
            let p = format!("{path}/{}", String::from_utf8_lossy(&n));
            if n.contains(&b'/') || p.len() > 3000 {
                self.errors += 1;
                self.t.errno("name", Errno(libc::EINVAL));
                continue;
            }
            let st = match sys::lstat(&p) {
                Ok(s) => s,
                Err(e) => {
                    self.errors += 1;
                    self.t.errno("lstat", e);
                    continue;
                }
            };
            self.xattrs(&p);
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR if depth < MAX_DEPTH && self.seen.insert((st.st_dev as u64, st.st_ino as u64)) => {
                    self.dir(&p, depth + 1);
                }
                libc::S_IFLNK => {
                    if let Err(e) = sys::readlink(&p) {
                        self.errors += 1;
                        self.t.errno("readlink", e);
                    }
                }
                libc::S_IFREG => self.file(&p, st.st_size as u64),
                _ => {}
            }
        }
    }
}

/// Writes on the mounted image; returns an error description for a real failure (data that was
/// written without an error reads back wrong, or an unexpected errno class).
fn write_phase(t: &mut Tally, mnt: &str, i: u32) -> Result<String, String> {
    let f = format!("{mnt}/.hostile-w{i}");
    let data: Vec<u8> = (0..48 * 1024u32).map(|k| (k.wrapping_mul(31) ^ i) as u8).collect();
    let mut res = String::from("ok");
    let mut note = |t: &mut Tally, what: &str, e: Errno| {
        t.errno(what, e);
        if res == "ok" {
            res = format!("{what}:{e}");
        }
    };
    let written = (|| -> Result<(), (&'static str, Errno)> {
        let fd = sys::open(&f, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644).map_err(|e| ("create", e))?;
        fd.pwrite_all(&data, 0).map_err(|(_, e)| ("write", e))?;
        fd.fsync().map_err(|e| ("fsync", e))?;
        fd.close().map_err(|e| ("close", e))
    })();
    let ok = match written {
        Ok(()) => true,
        Err((w, e)) => {
            note(t, w, e);
            false
        }
    };
    let d = format!("{mnt}/.hostile-d{i}");
    match sys::mkdir(&d, 0o755) {
        Ok(()) => {
            let g = format!("{d}/g");
            if let Err(e) = sys::write_file(&g, b"second file", 0o600) {
                note(t, "write2", e);
            }
            if let Err(e) = sys::rename(&g, format!("{d}/h")) {
                note(t, "rename", e);
            }
            if let Err(e) = sys::unlink(format!("{d}/h")) {
                note(t, "unlink", e);
            }
            if let Err(e) = sys::rmdir(&d) {
                note(t, "rmdir", e);
            }
        }
        Err(e) => note(t, "mkdir", e),
    }
    if ok {
        match sys::read_file(&f) {
            Ok(b) if b == data => {}
            Ok(b) => {
                return Err(format!(
                    "a file written and fsync'd without an error reads back wrong ({} bytes, expected {})",
                    b.len(),
                    data.len()
                ))
            }
            Err(e) => note(t, "readback", e),
        }
        if let Err(e) = sys::unlink(&f) {
            note(t, "unlink", e);
        }
    }
    let _ = sys::statfs(mnt);
    Ok(res)
}

fn mount(src: &str, mnt: &str) -> Result<(), Errno> {
    let s = sys::cpath(src)?;
    let m = sys::cpath(mnt)?;
    let fstype = c"ferrofs";
    // SAFETY: NUL-terminated strings; no data.
    let r = unsafe { libc::mount(s.as_ptr(), m.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn umount(mnt: &str, flags: libc::c_int) -> Result<(), Errno> {
    let m = sys::cpath(mnt)?;
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::umount2(m.as_ptr(), flags) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

fn say(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

/// Runs the command; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ferrofs-fstest hostile: {e}\nusage: ferrofs-fstest hostile DISK MTD MNT [--first K] [--count N] [--image-timeout S]");
            return 2;
        }
    };
    match run(&o) {
        Ok(code) => code,
        Err(e) => {
            say(&format!("FAIL - hostile setup: {e}"));
            say("0 passed, 1 failed");
            1
        }
    }
}

fn run(o: &Opts) -> Result<i32, String> {
    let disk = open_disk(&o.disk)?;
    let mtd = sys::open(&o.mtd, libc::O_RDWR, 0).map_err(|e| format!("open {}: {e}", o.mtd))?;
    let info = mtd_info(&mtd)?;
    if info.size as usize != disk.image_bytes || info.erasesize != disk.seg_size {
        return Err(format!(
            "{} is {} bytes with {}-byte erase blocks; the images want {} and {}",
            o.mtd, info.size, info.erasesize, disk.image_bytes, disk.seg_size
        ));
    }
    let src = o.mtd.trim_start_matches("/dev/").to_string();
    let kmsg = Kmsg::open();
    if kmsg.0.is_none() {
        return Err("cannot read /dev/kmsg (needed to check refusals and WARNs)".into());
    }
    // watchdog: one image must not take longer than the timeout
    let progress = Arc::new(AtomicU64::new(u64::MAX));
    let started = Arc::new(AtomicU64::new(0));
    {
        let (p, s, limit) = (progress.clone(), started.clone(), o.timeout);
        let t0 = Instant::now();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let img = p.load(Ordering::SeqCst);
            if img == u64::MAX {
                continue;
            }
            let since = t0.elapsed().as_secs().saturating_sub(s.load(Ordering::SeqCst));
            if since > limit {
                say(&format!("HOSTILE-HANG image {img}: no progress for {since}s; rebooting the guest"));
                // SAFETY: reboot(2) with a valid command; the guest ends here on purpose.
                unsafe { libc::reboot(libc::RB_AUTOBOOT) };
            }
        });
        let t0s = t0;
        // helper closure to mark the start of an image
        let mark = move |i: Option<u32>| {
            started.store(t0s.elapsed().as_secs(), Ordering::SeqCst);
            progress.store(i.map_or(u64::MAX, u64::from), Ordering::SeqCst);
        };
        run_images(o, &disk, &mtd, &src, &kmsg, &mark)
    }
}

fn run_images(o: &Opts, disk: &Disk, mtd: &Fd, src: &str, kmsg: &Kmsg, mark: &dyn Fn(Option<u32>)) -> Result<i32, String> {
    let mut t = Tally::default();
    let end = o.first.saturating_add(o.count).min(disk.count);
    let t0 = Instant::now();
    for i in o.first..end {
        let e = image(disk, i)?;
        mark(Some(i));
        say(&format!("hostile-image {i} seed {:#018x} {}", e.seed, e.label));
        let _ = kmsg.lines();
        load(mtd, &e.image)?;
        t.tried += 1;
        let mut fail: Option<String> = None;
        let outcome = match mount(src, &o.mnt) {
            Err(err) => {
                t.rejected += 1;
                let log = kmsg.lines();
                let msg = log.iter().find(|l| l.contains("ferrofs")).cloned();
                match msg {
                    Some(m) => format!("rejected {err}: {m}"),
                    None => {
                        fail = Some(format!("mount refused ({err}) without a ferrofs message in the kernel log"));
                        format!("rejected {err} silently")
                    }
                }
            }
            Ok(()) => {
                t.mounted += 1;
                let mut w = Walk { t: &mut t, seen: HashSet::new(), entries: 0, errors: 0, buf: vec![0u8; 64 * 1024] };
                w.dir(&o.mnt, 0);
                let (entries, errors) = (w.entries, w.errors);
                let wr = match write_phase(&mut t, &o.mnt, i) {
                    Ok(s) => s,
                    Err(m) => {
                        fail = Some(m);
                        "readback-mismatch".into()
                    }
                };
                let um = match umount(&o.mnt, 0) {
                    Ok(()) => "ok".to_string(),
                    Err(err) => {
                        let r = umount(&o.mnt, libc::MNT_DETACH);
                        fail = Some(format!("umount failed: {err} (lazy umount: {r:?})"));
                        format!("{err}")
                    }
                };
                // keep working: the same filesystem again, after what this mount wrote
                let again = if um == "ok" {
                    match mount(src, &o.mnt) {
                        Ok(()) => {
                            let mut w =
                                Walk { t: &mut t, seen: HashSet::new(), entries: 0, errors: 0, buf: vec![0u8; 64 * 1024] };
                            w.dir(&o.mnt, 0);
                            let (n2, e2) = (w.entries, w.errors);
                            t.remounted += 1;
                            if let Err(err) = umount(&o.mnt, 0) {
                                let r = umount(&o.mnt, libc::MNT_DETACH);
                                fail = Some(format!("umount after the remount failed: {err} (lazy umount: {r:?})"));
                            }
                            format!("entries={n2} errors={e2}")
                        }
                        Err(err) => {
                            t.remount_refused += 1;
                            format!("refused:{err}")
                        }
                    }
                } else {
                    "skipped".into()
                };
                format!("mounted entries={entries} errors={errors} write={wr} umount={um} remount={again}")
            }
        };
        for l in kmsg.lines() {
            if PROBLEMS.iter().any(|p| l.contains(p)) {
                say(&format!("hostile-problem {i}: {l}"));
                fail.get_or_insert_with(|| format!("kernel report: {l}"));
            }
        }
        if let Some(f) = &fail {
            t.failed += 1;
            say(&format!("FAIL - image {i} seed {:#018x} {}: {f}", e.seed, e.label));
        }
        say(&format!("hostile-done {i} {outcome}"));
        if umount(&o.mnt, 0).is_ok() {
            // a mount left behind by an earlier failure
            say(&format!("FAIL - image {i}: {} was still mounted", o.mnt));
            t.failed += 1;
        }
    }
    mark(None);
    let errs: Vec<String> = t.errnos.iter().map(|(k, v)| format!("{k}={v}")).collect();
    say(&format!("hostile errnos: {}", if errs.is_empty() { "none".into() } else { errs.join(" ") }));
    say(&format!(
        "hostile-guest: images {}..{}: {} tried, {} rejected, {} mounted ({} remounted, {} refused on remount), {} failed; {} files, {} bytes read in {:.1}s",
        o.first,
        end,
        t.tried,
        t.rejected,
        t.mounted,
        t.remounted,
        t.remount_refused,
        t.failed,
        t.files,
        t.bytes,
        t0.elapsed().as_secs_f64()
    ));
    say("hostile-guest-end");
    say(&format!("{} passed, {} failed", t.tried - t.failed, t.failed));
    Ok(if t.failed == 0 { 0 } else { 1 })
}
