//! Thin OS helpers: statvfs, cache dropping, shell hooks, /proc/meminfo and /proc/slabinfo.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result};

/// Space figures of a mounted filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FsUsage {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
}

impl FsUsage {
    /// Used fraction, (total - free) / total; `None` when the filesystem reports no size.
    pub fn used_fraction(&self) -> Option<f64> {
        if self.total_bytes == 0 {
            None
        } else {
            Some(self.total_bytes.saturating_sub(self.free_bytes) as f64 / self.total_bytes as f64)
        }
    }
}

pub fn statvfs(path: &Path) -> Result<FsUsage> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::msg("path contains a NUL byte"))?;
    // SAFETY: `statvfs` is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated string and `st` a valid, writable `struct statvfs`.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).with_ctx(|| format!("statvfs {}", path.display()));
    }
    let unit = if st.f_frsize != 0 { st.f_frsize } else { st.f_bsize } as u64;
    Ok(FsUsage {
        total_bytes: (st.f_blocks as u64).saturating_mul(unit),
        free_bytes: (st.f_bfree as u64).saturating_mul(unit),
        avail_bytes: (st.f_bavail as u64).saturating_mul(unit),
    })
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub fn sync_all() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
}

/// The result of running a caller-given shell command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CmdRun {
    pub cmd: String,
    pub exit_code: Option<i32>,
    pub seconds: f64,
    pub ok: bool,
}

/// Runs `cmd` with `/bin/sh -c`, timing it; a spawn failure is an error, a non-zero exit is not.
pub fn run_shell(cmd: &str) -> Result<CmdRun> {
    let t = Instant::now();
    let status = Command::new("/bin/sh").arg("-c").arg(cmd).status().with_ctx(|| format!("running {cmd:?}"))?;
    Ok(CmdRun { cmd: cmd.to_string(), exit_code: status.code(), seconds: t.elapsed().as_secs_f64(), ok: status.success() })
}

/// Like [`run_shell`] but a failing command is an error.
pub fn run_shell_ok(cmd: &str) -> Result<CmdRun> {
    let r = run_shell(cmd)?;
    if !r.ok {
        crate::bail!("command {cmd:?} failed with exit code {:?}", r.exit_code);
    }
    Ok(r)
}

/// How the page cache was emptied between a write and a read phase.
pub fn drop_caches(remount_cmd: Option<&str>, enabled: bool) -> Result<String> {
    if let Some(cmd) = remount_cmd {
        sync_all();
        run_shell_ok(cmd)?;
        return Ok("remount".into());
    }
    if !enabled {
        return Ok("none (disabled)".into());
    }
    if !is_root() {
        return Ok("none (not root)".into());
    }
    sync_all();
    match std::fs::write("/proc/sys/vm/drop_caches", "3") {
        Ok(()) => Ok("drop_caches".into()),
        Err(e) => Ok(format!("none (drop_caches: {e})")),
    }
}

/// Numeric fields of /proc/meminfo in kB.
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// Bytes in use per slab cache from /proc/slabinfo (active_objs x objsize).
pub fn parse_slabinfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with("slabinfo") && !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 {
                return None;
            }
            let active: u64 = f[1].parse().ok()?;
            let objsize: u64 = f[3].parse().ok()?;
            Some((f[0].to_string(), active * objsize))
        })
        .collect()
}

pub fn read_meminfo() -> Option<BTreeMap<String, u64>> {
    std::fs::read_to_string("/proc/meminfo").ok().map(|t| parse_meminfo(&t))
}

pub fn read_slabinfo() -> Option<BTreeMap<String, u64>> {
    std::fs::read_to_string("/proc/slabinfo").ok().map(|t| parse_slabinfo(&t))
}

pub fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string())
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
}

/// fsync of a directory (makes creates/unlinks durable on filesystems that need it).
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let f = std::fs::File::open(dir).with_ctx(|| format!("opening directory {}", dir.display()))?;
    match f.sync_all() {
        // Some filesystems refuse fsync on directories; that is not an error of the benchmark.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
        r => r.with_ctx(|| format!("fsync directory {}", dir.display())),
    }
}

/// vm.dirty_bytes set for a while (write-back starts and writers are throttled once this much of
/// the page cache is dirty). The kernel keeps one of dirty_bytes and dirty_ratio non-zero: writing
/// one zeroes the other, so drop restores whichever was in force.
pub struct DirtyLimit {
    vm: PathBuf,
    old_bytes: u64,
    old_ratio: u64,
}

impl DirtyLimit {
    pub fn set(bytes: u64) -> Result<Self> {
        Self::set_in(Path::new("/proc/sys/vm"), bytes)
    }

    /// The same on another directory of `dirty_bytes` / `dirty_ratio` files (tests).
    pub fn set_in(vm: &Path, bytes: u64) -> Result<Self> {
        let read = |name: &str| -> Result<u64> {
            let p = vm.join(name);
            let t = std::fs::read_to_string(&p).with_ctx(|| format!("reading {}", p.display()))?;
            t.trim().parse().map_err(|_| Error::msg(format!("{}: not a number: {:?}", p.display(), t.trim())))
        };
        let (old_bytes, old_ratio) = (read("dirty_bytes")?, read("dirty_ratio")?);
        let p = vm.join("dirty_bytes");
        std::fs::write(&p, bytes.to_string()).with_ctx(|| format!("setting {} to {bytes} (needs root)", p.display()))?;
        let guard = DirtyLimit { vm: vm.to_path_buf(), old_bytes, old_ratio };
        let now = read("dirty_bytes")?;
        if now != bytes {
            crate::bail!("{} reads {now} after writing {bytes}", p.display());
        }
        Ok(guard)
    }
}

impl Drop for DirtyLimit {
    fn drop(&mut self) {
        let (name, v) = if self.old_bytes > 0 { ("dirty_bytes", self.old_bytes) } else { ("dirty_ratio", self.old_ratio) };
        let p = self.vm.join(name);
        if let Err(e) = std::fs::write(&p, v.to_string()) {
            eprintln!("ferrofs-bench: restoring {} to {v} failed: {e}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_limit_is_set_and_restored() {
        let d = tempfile::tempdir().unwrap();
        let put = |n: &str, v: &str| std::fs::write(d.path().join(n), v).unwrap();
        let get = |n: &str| std::fs::read_to_string(d.path().join(n)).unwrap();
        // The kernel's default: a ratio in force, dirty_bytes 0.
        put("dirty_bytes", "0\n");
        put("dirty_ratio", "20\n");
        {
            let _g = DirtyLimit::set_in(d.path(), 4 << 20).unwrap();
            assert_eq!(get("dirty_bytes"), "4194304");
            put("dirty_ratio", "0"); // what the kernel does on that write
        }
        assert_eq!(get("dirty_ratio"), "20", "the ratio in force before is back");
        // A byte limit in force before comes back as it was.
        put("dirty_bytes", "1000000");
        drop(DirtyLimit::set_in(d.path(), 4096).unwrap());
        assert_eq!(get("dirty_bytes"), "1000000");
        // Unreadable settings are errors, not guesses.
        put("dirty_ratio", "x");
        assert!(DirtyLimit::set_in(d.path(), 4096).is_err());
        assert!(DirtyLimit::set_in(&d.path().join("none"), 4096).is_err());
    }

    #[test]
    fn meminfo() {
        let m = parse_meminfo("MemTotal:       16384 kB\nMemFree:  1000 kB\nSlab: 77 kB\nHugePages_Total: 0\nbroken\n");
        assert_eq!(m["MemTotal"], 16384);
        assert_eq!(m["Slab"], 77);
        assert_eq!(m["HugePages_Total"], 0);
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn slabinfo() {
        let t = "slabinfo - version: 2.1\n# name <active_objs> <num_objs> <objsize> ...\nferrofs_inode 10 20 512 8 1 : tunables 0 0 0\nkmalloc-64 100 128 64 64 1\nbad\n";
        let m = parse_slabinfo(t);
        assert_eq!(m["ferrofs_inode"], 5120);
        assert_eq!(m["kmalloc-64"], 6400);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn statvfs_and_shell() {
        let d = tempfile::tempdir().unwrap();
        let u = statvfs(d.path()).unwrap();
        assert!(u.total_bytes > 0);
        assert!(u.used_fraction().unwrap() <= 1.0);
        assert!(statvfs(Path::new("/nonexistent/dir")).is_err());
        assert!(run_shell("true").unwrap().ok);
        let r = run_shell("exit 3").unwrap();
        assert_eq!(r.exit_code, Some(3));
        assert!(run_shell_ok("exit 3").is_err());
        assert_eq!(FsUsage { total_bytes: 0, free_bytes: 0, avail_bytes: 0 }.used_fraction(), None);
    }
}
