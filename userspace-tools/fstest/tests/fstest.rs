//! Runs the binary end to end on scratch filesystems: tmpfs mounts of our own when root
//! (ENOSPC needs a small filesystem), else /dev/shm subdirectories; the checks that need root
//! (ENOSPC, ext4, the suite as another user) fail without it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch directory: its own tmpfs when root, else a /dev/shm subdirectory.
struct Scratch {
    dir: PathBuf,
    mounted: bool,
    image: Option<PathBuf>,
}

impl Scratch {
    fn new(tag: &str, size_mib: u64) -> Scratch {
        let dir = PathBuf::from(format!(
            "/tmp/fstest-it.{}.{}.{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Scratch {
            dir,
            mounted: false,
            image: None,
        };
        if is_root() {
            let st = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
                .arg(&s.dir)
                .status()
                .unwrap();
            assert!(st.success(), "mount tmpfs");
            s.mounted = true;
        } else {
            std::fs::remove_dir(&s.dir).unwrap();
            s.dir = PathBuf::from(format!(
                "/dev/shm/fstest-it.{}.{}.{tag}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&s.dir).unwrap();
        }
        s
    }

    /// An ext4 loop mount, when root and mkfs.ext4 exist.
    fn ext4(tag: &str, size_mib: u64) -> Option<Scratch> {
        if !is_root() || Command::new("mkfs.ext4").arg("-V").output().is_err() {
            return None;
        }
        let id = format!(
            "{}.{}.{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let img = PathBuf::from(format!("/tmp/fstest-it.{id}.img"));
        let dir = PathBuf::from(format!("/tmp/fstest-it.{id}"));
        std::fs::File::create(&img)
            .unwrap()
            .set_len(size_mib << 20)
            .unwrap();
        let ok = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img)
            .status()
            .ok()?
            .success();
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Scratch {
            dir,
            mounted: false,
            image: Some(img),
        };
        if !ok
            || !Command::new("mount")
                .args(["-o", "loop"])
                .arg(s.image.as_ref()?)
                .arg(&s.dir)
                .status()
                .ok()?
                .success()
        {
            return None;
        }
        s.mounted = true;
        Some(s)
    }
}

impl Scratch {
    /// Unmounts and mounts the loop image again (ext4 scratch only).
    fn remount(&self) {
        let img = self.image.as_ref().expect("image");
        assert!(Command::new("umount")
            .arg(&self.dir)
            .status()
            .unwrap()
            .success());
        assert!(Command::new("mount")
            .args(["-o", "loop"])
            .arg(img)
            .arg(&self.dir)
            .status()
            .unwrap()
            .success());
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
            let _ = std::fs::remove_dir(&self.dir);
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some(i) = &self.image {
            let _ = std::fs::remove_file(i);
        }
    }
}

struct Run {
    code: i32,
    out: String,
}

fn fstest(args: &[&str], dir: &Path) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrofs-fstest"));
    let mut it = args.iter();
    // First arg(s) up to "DIR" placeholder, then the directory, then the rest.
    for a in it.by_ref() {
        if *a == "DIR" {
            c.arg(dir);
            break;
        }
        c.arg(a);
    }
    c.args(it);
    let o = c.output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    }
}

/// Checks the output format and returns (passed, failed).
fn summary(r: &Run) -> (u64, u64) {
    let lines: Vec<&str> = r.out.lines().collect();
    for l in &lines[..lines.len() - 1] {
        assert!(
            l.starts_with("ok - ") || l.starts_with("FAIL - ") || l.starts_with("# "),
            "bad line {l:?}"
        );
    }
    let last = lines.last().expect("output");
    let (p, f) = last
        .split_once(" passed, ")
        .unwrap_or_else(|| panic!("last line {last:?}"));
    let f = f
        .strip_suffix(" failed")
        .unwrap_or_else(|| panic!("last line {last:?}"));
    let (p, f): (u64, u64) = (p.parse().unwrap(), f.parse().unwrap());
    assert_eq!(
        f,
        lines.iter().filter(|l| l.starts_with("FAIL - ")).count() as u64
    );
    (p, f)
}

fn assert_clean(r: &Run) -> u64 {
    let (p, f) = summary(r);
    assert_eq!(
        (f, r.code),
        (0, 0),
        "failures:\n{}",
        r.out
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    p
}

#[test]
fn posix_on_tmpfs() {
    let s = Scratch::new("posix", 256);
    let other = Scratch::new("other", 16);
    let r = fstest(
        &[
            "posix",
            "DIR",
            "--large-mib",
            "24",
            "--other-dir",
            other.dir.to_str().unwrap(),
        ],
        &s.dir,
    );
    let p = assert_clean(&r);
    assert!(p > 400, "only {p} checks passed");
    if is_root() {
        assert!(r
            .out
            .contains("ok - perms: unlink root's file in sticky dir\n"));
        assert!(r.out.contains("ok - rename: rename across filesystems\n"));
    }
    // The work directory is removed.
    assert_eq!(std::fs::read_dir(&s.dir).unwrap().count(), 0);
}

#[test]
fn posix_on_ext4() {
    let s = Scratch::ext4("posix-ext4", 512).expect("cannot run: needs root and mkfs.ext4");
    let r = fstest(
        &["posix", "DIR", "--large-mib", "8", "--drop-caches"],
        &s.dir,
    );
    assert_clean(&r);
}

#[test]
fn posix_only_selects_groups() {
    let s = Scratch::new("only", 64);
    let r = fstest(&["posix", "DIR", "--only", "rename,xattr"], &s.dir);
    assert_clean(&r);
    assert!(r.out.contains("ok - rename: "));
    assert!(!r.out.contains("ok - open: "));
}

#[test]
fn integrity_round_trip_and_detection() {
    let s = Scratch::new("integrity", 128);
    let w = fstest(
        &[
            "integrity",
            "write",
            "DIR",
            "--seed",
            "5",
            "--total-mib",
            "12",
        ],
        &s.dir,
    );
    assert_clean(&w);
    let v = fstest(
        &[
            "integrity",
            "verify",
            "DIR",
            "--seed",
            "5",
            "--total-mib",
            "12",
        ],
        &s.dir,
    );
    assert_eq!(assert_clean(&v), 7);
    // A second write of the same seed refuses to overwrite.
    let again = fstest(
        &[
            "integrity",
            "write",
            "DIR",
            "--seed",
            "5",
            "--total-mib",
            "12",
        ],
        &s.dir,
    );
    assert_eq!(again.code, 1);
    // Another seed verifies against nothing.
    let other = fstest(
        &[
            "integrity",
            "verify",
            "DIR",
            "--seed",
            "6",
            "--total-mib",
            "12",
        ],
        &s.dir,
    );
    assert_eq!(other.code, 1);
    // Flip one byte in the largest file: verify must name it.
    let root = s.dir.join("fstest-integrity.5");
    let mut biggest = (0u64, PathBuf::new());
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() && m.len() > biggest.0 {
                biggest = (m.len(), e.path());
            }
        }
    }
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&biggest.1)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, biggest.0 / 2).unwrap();
    b[0] ^= 0x40;
    f.write_all_at(&b, biggest.0 / 2).unwrap();
    drop(f);
    let v = fstest(
        &[
            "integrity",
            "verify",
            "DIR",
            "--seed",
            "5",
            "--total-mib",
            "12",
        ],
        &s.dir,
    );
    let (_, failed) = summary(&v);
    assert_eq!(v.code, 1);
    assert!(failed >= 1);
    assert!(
        v.out
            .contains(&format!("content differs at byte {}", biggest.0 / 2)),
        "{}",
        v.out
    );
    let c = fstest(&["integrity", "clean", "DIR", "--seed", "5"], &s.dir);
    assert_eq!(c.code, 0);
    assert!(!root.exists());
}

#[test]
fn enospc_on_small_tmpfs() {
    assert!(is_root(), "cannot run: needs root to mount a small tmpfs");
    let s = Scratch::new("enospc", 48);
    let r = fstest(&["enospc", "DIR", "--seed", "3", "--rounds", "3"], &s.dir);
    let p = assert_clean(&r);
    assert!(p >= 18);
    assert!(r.out.contains("ok - enospc: filling reaches ENOSPC\n"));
}

#[test]
fn enospc_on_small_ext4() {
    let s = Scratch::ext4("enospc-ext4", 64).expect("cannot run: needs root and mkfs.ext4");
    let r = fstest(&["enospc", "DIR", "--rounds", "2"], &s.dir);
    assert_clean(&r);
}

#[test]
fn enospc_without_enospc_fails() {
    // --max-mib below the free space: the fill stops without ENOSPC, which must be a failure.
    let s = Scratch::new("enospc-max", 64);
    let r = fstest(
        &["enospc", "DIR", "--max-mib", "4", "--rounds", "1"],
        &s.dir,
    );
    assert_eq!(r.code, 1);
    assert!(
        r.out.contains("FAIL - enospc: filling reaches ENOSPC"),
        "{}",
        r.out
    );
}

#[test]
fn usage_errors_exit_2() {
    let s = Scratch::new("usage", 8);
    for args in [
        &["bogus"][..],
        &["posix"],
        &["posix", "DIR", "--nope"],
        &["integrity", "write", "DIR"],
        &["enospc", "DIR", "--total-mib", "1"],
    ] {
        let r = fstest(args, &s.dir);
        assert_eq!(r.code, 2, "{args:?}: {}", r.out);
    }
    assert_eq!(fstest(&["help"], &s.dir).code, 0);
}

#[test]
fn panics_and_crashes_keep_the_protocol() {
    let s = Scratch::new("selftest", 8);
    let r = fstest(&["selftest"], &s.dir);
    assert_eq!(summary(&r), (1, 1));
    assert!(r.out.contains("FAIL - panics: group ran to completion (expected no panic, got panic: deliberate panic"), "{}", r.out);
    let r = fstest(&["selftest", "crash"], &s.dir);
    assert_eq!(r.code, 1);
    assert_eq!(summary(&r), (1, 2));
    assert!(r.out.contains("FAIL - crashes: process killed during the group (expected no crash, got signal 7 SIGBUS)"), "{}", r.out);
}

#[test]
fn integrity_survives_remount_on_ext4() {
    let s = Scratch::ext4("integrity-ext4", 128).expect("cannot run: needs root and mkfs.ext4");
    assert_clean(&fstest(
        &[
            "integrity",
            "write",
            "DIR",
            "--seed",
            "11",
            "--total-mib",
            "16",
        ],
        &s.dir,
    ));
    s.remount();
    assert_eq!(
        assert_clean(&fstest(
            &[
                "integrity",
                "verify",
                "DIR",
                "--seed",
                "11",
                "--total-mib",
                "16"
            ],
            &s.dir
        )),
        7
    );
}

/// The ifmeta checks hold on ext4 (the trusted peer: ACLs and inode flags as ferrofs must
/// serve them), across a remount.
#[test]
fn ifmeta_on_ext4() {
    let s = Scratch::ext4("ifmeta-ext4", 64).expect("cannot run: needs root and mkfs.ext4");
    assert!(assert_clean(&fstest(&["ifmeta", "run", "DIR"], &s.dir)) > 150);
    s.remount();
    assert!(assert_clean(&fstest(&["ifmeta", "verify", "DIR"], &s.dir)) >= 20);
}

#[test]
fn posix_as_non_root() {
    assert!(is_root(), "cannot run: needs root to run the suite as uid 65534");
    use std::os::unix::process::CommandExt;
    let s = Scratch::new("nonroot", 128);
    let d = s.dir.join("nobody");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    // uid 65534 may not be able to reach the checkout (a clone under /root or in a mktemp -d
    // directory is mode 700: CI's was, and the exec failed with EACCES), so it runs a copy of
    // the binary from the scratch tmpfs, with its working directory there too.
    let exe = s.dir.join("ferrofs-fstest");
    std::fs::copy(env!("CARGO_BIN_EXE_ferrofs-fstest"), &exe).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let o = Command::new(&exe)
        .args(["posix"])
        .arg(&d)
        .args(["--large-mib", "2", "--bigdir", "500"])
        .current_dir(&d)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} as uid 65534: {e}", exe.display()));
    let r = Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
    };
    assert_clean(&r);
    assert!(r
        .out
        .contains("ok - perms: EACCES/EPERM as uid 65534 # SKIP not root"));
    assert!(r
        .out
        .contains("ok - mknod: mknod char 1:3 without CAP_MKNOD\n"));
}
