//! The tools at device scale: RAM does not grow with the device (simulator images are worked on
//! in place, not loaded), and progress is shown on a terminal only.

mod common;

use std::fs;
use std::process::Command;

use common::*;

fn small_tree(dir: &std::path::Path) {
    fs::create_dir_all(dir.join("a/b")).unwrap();
    for i in 0..200 {
        fs::write(dir.join(format!("a/f{i}")), prng_bytes(i, 1000 + 37 * i as usize)).unwrap();
    }
    fs::write(dir.join("a/b/big"), prng_bytes(99, 3 << 20)).unwrap();
}

/// Peak RSS (KiB) of the largest child this process waited for.
fn children_max_rss_kib() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    assert_eq!(r, 0);
    ru.ru_maxrss
}

/// A 2 GiB block-device simulator image (sparse: only what is written takes disk space):
/// mkfs -r, fsck -n, fsck -y and ferrofs-dump each stay far below the device size in RAM (they
/// used to load the whole image).
#[test]
fn ram_does_not_grow_with_the_device() {
    let t = tmp();
    let src = t.path().join("src");
    small_tree(&src);
    let img = t.path().join("big.img");
    run_ok(MKFS, &[p(&img), "-q", "--block", "--size", "2G", "--au", "1M", "-r", p(&src)]);
    assert!(fs::metadata(&img).unwrap().len() > 2 << 30);
    run_ok(FSCK, &["-n", p(&img)]);
    run_ok(FSCK, &["-y", p(&img)]);
    run_ok(DUMP, &[p(&img), "--cat", "/a/b/big"]);
    let rss = children_max_rss_kib();
    eprintln!("largest tool RSS on a 2 GiB image: {rss} KiB");
    assert!(rss < 200 * 1024, "a tool used {rss} KiB on a 2 GiB image");
}

const PHRASES: [&str; 3] = ["copying", "checking the index", "walking the tree"];

/// Not on a terminal (a pipe, as here): no progress output at all.
#[test]
fn no_progress_output_when_not_a_terminal() {
    let t = tmp();
    let src = t.path().join("src");
    small_tree(&src);
    let img = t.path().join("fs.img");
    let m = run_ok(MKFS, &[p(&img), "-r", p(&src)]);
    let f = run_ok(FSCK, &["-n", p(&img)]);
    for r in [&m, &f] {
        for ph in PHRASES {
            assert!(!r.all().contains(ph), "progress '{ph}' printed into a pipe:\n{}", r.all());
        }
        assert!(!r.all().contains('\r') && !r.all().contains('\u{1b}'), "terminal control output into a pipe:\n{}", r.all());
    }
}

/// On a terminal (script(1) gives the tools a pseudo-terminal): mkfs -r shows its copy, fsck
/// its index check and tree walk.
#[test]
fn progress_on_a_terminal() {
    assert!(Command::new("script").arg("--version").output().is_ok(), "script(1) (util-linux) is needed for this test");
    let t = tmp();
    let src = t.path().join("src");
    small_tree(&src);
    let img = t.path().join("fs.img");
    let tty = |cmd: String| {
        let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let m = tty(format!("{MKFS} {} -r {}", p(&img), p(&src)));
    assert!(m.contains("copying"), "no progress from mkfs -r on a terminal:\n{m}");
    let f = tty(format!("{FSCK} -n {}", p(&img)));
    assert!(f.contains("checking the index") && f.contains("walking the tree"), "no progress from fsck on a terminal:\n{f}");
}
