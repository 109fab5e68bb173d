//! `fsx` and `stress` end to end on the host: clean runs pass, and a disagreement planted behind
//! the checker's back (--inject-mismatch) is caught, so the checks can fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch directory under /tmp (removed on drop), or an ext4 loop mount of an image.
struct Scratch {
    dir: PathBuf,
    image: Option<PathBuf>,
    loopdev: Option<String>,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = PathBuf::from(format!(
            "/tmp/fstest-fsx.{}.{}.{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch {
            dir,
            image: None,
            loopdev: None,
        }
    }

    /// ext4 on a loop device of our own (not `mount -o loop`, whose device goes away at the
    /// first umount, so a remount could not find it).
    fn ext4(tag: &str) -> Option<Scratch> {
        if !is_root() || Command::new("mkfs.ext4").arg("-V").output().is_err() {
            return None;
        }
        let mut s = Scratch::new(tag);
        let img = s.dir.with_extension("img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        s.image = Some(img.clone());
        if !Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img)
            .status()
            .ok()?
            .success()
        {
            return None;
        }
        let o = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output()
            .ok()?;
        let dev = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !o.status.success() || dev.is_empty() {
            return None;
        }
        s.loopdev = Some(dev.clone());
        Command::new("mount")
            .arg(&dev)
            .arg(&s.dir)
            .status()
            .ok()?
            .success()
            .then_some(s)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(i) = &self.image {
            let _ = Command::new("umount").arg(&self.dir).status();
            if let Some(d) = &self.loopdev {
                let _ = Command::new("losetup").arg("-d").arg(d).status();
            }
            let _ = std::fs::remove_file(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Run {
    code: i32,
    out: String,
}

fn fstest(args: &[&str], dir: &Path) -> Run {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrofs-fstest"))
        .arg(args[0])
        .arg(dir)
        .args(&args[1..])
        .output()
        .unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    }
}

/// (passed, failed) from the last line, and the line starting with `prefix`.
fn parse(r: &Run, prefix: &str) -> (u64, u64, String) {
    let last = r.out.lines().last().unwrap_or("");
    let (p, f) = last
        .split_once(" passed, ")
        .unwrap_or_else(|| panic!("last line {last:?} in\n{}", r.out));
    let f = f.strip_suffix(" failed").expect("summary");
    let line = r
        .out
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line in\n{}", r.out))
        .to_string();
    for l in r.out.lines() {
        assert!(
            l.starts_with("ok - ")
                || l.starts_with("FAIL - ")
                || l.starts_with("# ")
                || l.starts_with(prefix)
                || l == last,
            "stray line {l:?}"
        );
    }
    (p.parse().unwrap(), f.parse().unwrap(), line)
}

#[test]
fn fsx_clean_run_passes_and_is_reproducible() {
    let s = Scratch::new("fsx");
    let args = [
        "fsx",
        "--ops",
        "3000",
        "--procs",
        "3",
        "--seed",
        "42",
        "--barrier-every",
        "400",
    ];
    let r = fstest(&args, &s.dir);
    let (p, f, line) = parse(&r, "fsx: ");
    assert_eq!((f, r.code), (0, 0), "{}", r.out);
    assert_eq!(p, 3);
    assert_eq!(line, "fsx: 3000 operations, 0 mismatches");
    // Same seed, same operations.
    let ops = |o: &str| {
        o.lines()
            .find(|l| l.starts_with("# operations:"))
            .unwrap()
            .to_string()
    };
    let r2 = fstest(&args, &s.dir);
    assert_eq!(ops(&r.out), ops(&r2.out));
    assert!(ops(&r.out).contains("mapwrite"));
}

#[test]
fn fsx_catches_a_file_that_disagrees_with_its_model() {
    let s = Scratch::new("fsx-inject");
    // Op 99 is followed by a whole-file comparison, so the planted byte cannot escape.
    let r = fstest(
        &[
            "fsx",
            "--ops",
            "1000",
            "--procs",
            "2",
            "--seed",
            "5",
            "--inject-mismatch",
            "99",
        ],
        &s.dir,
    );
    let (_, f, line) = parse(&r, "fsx: ");
    assert_eq!((f, r.code), (1, 1), "{}", r.out);
    assert!(line.ends_with(", 1 mismatches"), "{line}");
    assert!(r.out.contains("MISMATCH op 99"), "{}", r.out);
    assert!(r.out.contains("OFFSET      GOOD  BAD"), "{}", r.out);
    assert!(r.out.contains("LOG of the last"), "{}", r.out);
    // The bad file stays for inspection.
    assert!(s.dir.join("fsx-work/f0").exists());
}

#[test]
fn fsx_remounts_through_mount_2() {
    let s = Scratch::ext4("fsx-remount").expect("cannot run: needs root, mkfs.ext4 and loop devices");
    let src = s.loopdev.clone().expect("loop device");
    let rm = format!("{src}:ext4");
    let r = fstest(
        &[
            "fsx",
            "--ops",
            "2000",
            "--procs",
            "2",
            "--seed",
            "9",
            "--barrier-every",
            "300",
            "--remount",
            &rm,
        ],
        &s.dir,
    );
    let (p, f, line) = parse(&r, "fsx: ");
    assert_eq!((f, r.code), (0, 0), "{}", r.out);
    assert_eq!(line, "fsx: 2000 operations, 0 mismatches");
    // 1000 operations per process, a barrier every 300: three remounts, two processes.
    assert_eq!(p, 3 + 2, "{}", r.out);
    assert_eq!(r.out.matches("umount and mount").count(), 3);
    // A source that cannot be mounted fails the run instead of passing.
    let r = fstest(
        &[
            "fsx",
            "--ops",
            "400",
            "--procs",
            "1",
            "--barrier-every",
            "100",
            "--remount",
            "/dev/nonexistent:ext4",
        ],
        &s.dir,
    );
    assert_ne!(r.code, 0, "{}", r.out);
    // Put the filesystem back for the cleanup.
    let _ = Command::new("mount").arg(&src).arg(&s.dir).status();
}

#[test]
fn stress_clean_run_passes() {
    let s = Scratch::new("stress");
    let r = fstest(
        &["stress", "--seconds", "4", "--procs", "8", "--seed", "3"],
        &s.dir,
    );
    let (p, f, line) = parse(&r, "stress: ");
    assert_eq!((f, r.code), (0, 0), "{}", r.out);
    assert!(p >= 10, "{}", r.out);
    assert!(
        line.starts_with("stress: 4 seconds, 8 processes, 0 errors, 0 mismatches"),
        "{line}"
    );
    for role in [
        "renamer",
        "scanner",
        "mapper",
        "truncator",
        "unlinker",
        "linker",
        "owner",
    ] {
        assert!(
            r.out.contains(&format!("({role}): ")),
            "no {role} in\n{}",
            r.out
        );
    }
    assert!(!s.dir.join("stress-work").exists());
}

#[test]
fn stress_catches_a_vanished_entry() {
    let s = Scratch::new("stress-inject");
    let r = fstest(
        &[
            "stress",
            "--seconds",
            "2",
            "--procs",
            "2",
            "--inject-mismatch",
            "1",
        ],
        &s.dir,
    );
    let (_, f, line) = parse(&r, "stress: ");
    assert_ne!(r.code, 0, "{}", r.out);
    assert!(f >= 2, "{}", r.out);
    assert!(
        r.out.contains("stable entry stable.000 missing"),
        "{}",
        r.out
    );
    assert!(!line.ends_with(" 0 mismatches"), "{line}");
}
