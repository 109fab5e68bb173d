//! fsck.ferrofs and ferrofs-dump: clean and unclean images, corruption of data records,
//! checkpoints and superblocks, read-only guarantees, dump output, usage errors.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::*;
use ferrofs_engine::format::{kind, Key, SB_SIZE};
use ferrofs_tools::dev::{open_existing, Dev, GeoHints};
use ferrofs_tools::layout::{read_checkpoints, scan_superblocks, CpSlot};
use ferrofs_tools::walk::{mount, resolve};

/// A small populated image; returns (tempdir, image, source dir).
fn small_image(args: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("dir/sub")).unwrap();
    fs::write(src.join("dir/data.bin"), prng_bytes(7, 50_000)).unwrap();
    fs::write(src.join("hello.txt"), b"hello, world\n").unwrap();
    symlink("dir/data.bin", src.join("link")).unwrap();
    fs::hard_link(src.join("hello.txt"), src.join("dir/sub/hello2")).unwrap();
    let img = t.path().join("fs.img");
    let mut a = vec![p(&img), "-q", "-r", p(&src)];
    a.extend_from_slice(args);
    run_ok(MKFS, &a);
    (t, img, src)
}

fn sb_of(img: &Path) -> ferrofs_engine::format::Superblock {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    scan_superblocks(dev.flash()).sb.unwrap().1
}

/// (segment, offset) of checkpoint slot `slot` of `area`.
fn cp_pos(sb: &ferrofs_engine::format::Superblock, area: usize, slot: u32) -> (u32, u64) {
    let off = u64::from(slot) * u64::from(sb.cp_slot_size);
    let ss = u64::from(sb.segment_size);
    (sb.cp_segs[area][(off / ss) as usize], off % ss)
}

fn valid_slots(img: &Path) -> Vec<(usize, u32, u64)> {
    let mut dev = open_existing(img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    read_checkpoints(dev.flash(), &sb)
        .into_iter()
        .filter_map(|e| match e.state {
            CpSlot::Valid(h, _) => Some((e.area, e.slot, h.seq)),
            _ => None,
        })
        .collect()
}

#[test]
fn fsck_clean_image_exit_0_with_summary() {
    let (_t, img, _) = small_image(&[]);
    let r = run(FSCK, &[p(&img)]);
    assert_eq!(r.code, 0, "{}", r.all());
    for want in ["superblock:", "checkpoint: sequence", "segments (at the checkpoint)", "free", "inodes", "directories", "files", "clean"] {
        assert!(r.stdout.contains(want), "summary lacks {want:?}:\n{}", r.stdout);
    }
    // verbose lists every path
    let v = run(FSCK, &["-v", p(&img)]);
    assert_eq!(v.code, 0);
    assert!(v.stdout.contains("/dir/sub/hello2"), "{}", v.stdout);
    // fsck(8) compatibility flags are accepted
    assert_eq!(run(FSCK, &["-a", p(&img)]).code, 0);
    assert_eq!(run(FSCK, &["-p", "-f", p(&img)]).code, 0);
    assert_eq!(run(FSCK, &["-y", p(&img)]).code, 0);
}

#[test]
fn fsck_n_never_writes_even_when_recovery_is_needed() {
    let (_t, img, _) = small_image(&[]);
    // clean image: -n and a plain check both leave it untouched
    let before = fs::read(&img).unwrap();
    assert_eq!(run(FSCK, &["-n", p(&img)]).code, 0);
    assert_eq!(fs::read(&img).unwrap(), before, "-n changed a clean image");
    assert_eq!(run(FSCK, &[p(&img)]).code, 0);
    assert_eq!(fs::read(&img).unwrap(), before, "a clean check changed the image");

    // an unclean image: records written and fsynced after the last checkpoint, no unmount
    let dev = open_existing(&img, &GeoHints::default(), false).unwrap();
    let mut fs = mount(dev, false).map_err(|(e, _)| e).unwrap();
    let now = ferrofs_tools::util::now();
    let args = ferrofs_engine::CreateArgs { mode: libc::S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let i = fs.create(1, b"after_checkpoint", &args, now).unwrap();
    fs.write(i.ino, 0, b"written after the checkpoint", now).unwrap();
    fs.fsync(i.ino).unwrap();
    let mut dev: Dev = fs.into_flash();
    dev.persist(&img).unwrap();

    let before = fs::read(&img).unwrap();
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(r.stdout.contains("would be replayed"), "{}", r.stdout);
    assert_eq!(fs::read(&img).unwrap(), before, "-n changed an unclean image");
    // a raw image opened with -n is opened read-only as well
    let r = run(FSCK, &[p(&img)]);
    assert_eq!(r.code, 1, "recovery should report 'errors corrected':\n{}", r.all());
    assert!(r.stdout.contains("recovered"), "{}", r.stdout);
    assert_ne!(fs::read(&img).unwrap(), before);
    let r = run(FSCK, &[p(&img)]);
    assert_eq!(r.code, 0, "{}", r.all());
    let mut fs = mount_ro(&img);
    let f = resolve(&mut fs, b"after_checkpoint").unwrap();
    assert_eq!(ferrofs_tools::walk::read_all(&mut fs, f.ino, f.size).unwrap(), b"written after the checkpoint");
}

#[test]
fn fsck_n_on_raw_image_is_byte_identical() {
    let (_t, img, _) = small_image(&["--raw", "--size", "16M"]);
    let before = fs::read(&img).unwrap();
    assert_eq!(run(FSCK, &["-n", p(&img)]).code, 0);
    assert_eq!(run_ok(DUMP, &[p(&img), "-a"]).code, 0);
    assert_eq!(fs::read(&img).unwrap(), before);
}

#[test]
fn fsck_detects_a_corrupt_data_record() {
    let (_t, img, src) = small_image(&[]);
    let mut fs = mount_ro(&img);
    let ino = resolve(&mut fs, b"dir/data.bin").unwrap().ino;
    drop(fs);
    let loc = locate(&img, Key::new(ino, kind::DATA, 3));
    flip(&img, loc.seg, u64::from(loc.off) + 48 + 100, 0x40);
    let before = fs::read(&img).unwrap();
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains("problem:"), "{}", r.stderr);
    assert!(r.stderr.contains("CRC") || r.stderr.contains("read error"), "{}", r.stderr);
    assert!(r.stdout.contains("left uncorrected"), "{}", r.stdout);
    assert_eq!(fs::read(&img).unwrap(), before, "-n changed a corrupt image");
    // without -n: still 4 (nothing this version can repair), image untouched
    assert_eq!(run(FSCK, &[p(&img)]).code, 4);
    assert_eq!(fs::read(&img).unwrap(), before);
    // dump --cat reports the damage instead of returning wrong bytes
    let d = run(DUMP, &[p(&img), "--cat", "/dir/data.bin"]);
    assert_eq!(d.code, 1, "{}", d.stderr);
    assert!(d.stderr.contains("error:"), "{}", d.stderr);
    // other files are still readable
    let d = run_ok(DUMP, &[p(&img), "--cat", "hello.txt"]);
    assert_eq!(d.raw_stdout, fs::read(src.join("hello.txt")).unwrap());
}

#[test]
fn fsck_detects_a_corrupt_older_checkpoint() {
    let (_t, img, _) = small_image(&[]);
    let sb = sb_of(&img);
    let slots = valid_slots(&img);
    // an area holding two valid checkpoints: damage the older one (not a torn last write)
    let area = (0..2).find(|a| slots.iter().filter(|s| s.0 == *a).count() >= 2).expect("an area with 2 checkpoints");
    let slot = slots.iter().filter(|s| s.0 == area).map(|s| s.1).min().unwrap();
    let (seg, off) = cp_pos(&sb, area, slot);
    flip(&img, seg, off + 20, 0x01);
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains("checkpoint area"), "{}", r.stderr);
    assert!(r.stderr.contains("CRC mismatch"), "{}", r.stderr);
    let d = run_ok(DUMP, &[p(&img), "--checkpoints"]);
    assert!(d.stdout.contains("INVALID: CRC mismatch"), "{}", d.stdout);
    assert!(d.stdout.contains("<- in use"), "{}", d.stdout);
}

#[test]
fn fsck_with_every_checkpoint_destroyed_exits_4() {
    let (_t, img, _) = small_image(&[]);
    let sb = sb_of(&img);
    for (area, slot, _) in valid_slots(&img) {
        let (seg, off) = cp_pos(&sb, area, slot);
        flip(&img, seg, off + 30, 0xff);
    }
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains("no valid checkpoint"), "{}", r.stderr);
    assert!(r.stderr.contains("cannot be mounted"), "{}", r.stderr);
    let d = run(DUMP, &[p(&img), "--ls", "/"]);
    assert_eq!(d.code, 4, "{}", d.all());
    // the structural dump still works
    let d = run_ok(DUMP, &[p(&img)]);
    assert!(d.stdout.contains("no valid checkpoint"), "{}", d.stdout);
}

#[test]
fn fsck_detects_superblock_damage() {
    let (_t, img, _) = small_image(&[]);
    let sb = sb_of(&img);
    // one copy: the other one is used, the damage is reported
    flip(&img, sb.sb_segs[0], 60, 0x10);
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains("superblock copy in segment"), "{}", r.stderr);
    let d = run_ok(DUMP, &[p(&img), "-s"]);
    assert!(d.stdout.contains("DAMAGED"), "{}", d.stdout);
    // both copies: not recognisable any more
    flip(&img, sb.sb_segs[1], 60, 0x10);
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 8, "{}", r.all());
    assert!(r.stderr.contains("no valid ferrofs superblock"), "{}", r.stderr);
    let d = run(DUMP, &[p(&img)]);
    assert_eq!(d.code, 8, "{}", d.all());
}

#[test]
fn raw_image_with_first_superblock_damaged_still_opens() {
    let (_t, img, _) = small_image(&["--raw", "--size", "16M"]);
    let sb = sb_of(&img);
    let mut b = fs::read(&img).unwrap();
    b[70] ^= 0x08; // inside the first superblock copy at offset 0
    fs::write(&img, &b).unwrap();
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains(&format!("superblock copy in segment {}", sb.sb_segs[0])), "{}", r.stderr);
    // the geometry can also be given explicitly
    let r = run(FSCK, &["-n", "--unit", "2k", "--au", "128k", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    // and files are still readable
    let d = run_ok(DUMP, &[p(&img), "--cat", "hello.txt"]);
    assert_eq!(d.raw_stdout, b"hello, world\n");
    let _ = SB_SIZE;
}

#[test]
fn not_a_ferrofs_or_missing_device_exits_8() {
    let t = tmp();
    let garbage = t.path().join("garbage.img");
    fs::write(&garbage, prng_bytes(1, 1 << 20)).unwrap();
    let empty = t.path().join("empty.img");
    fs::write(&empty, b"").unwrap();
    let missing = t.path().join("missing.img");
    for (path, msg) in [
        (&garbage, "not a ferrofs"),
        (&empty, "not a ferrofs"),
        (&missing, "cannot open"),
        (&t.path().to_path_buf(), "is a directory"),
    ] {
        for bin in [FSCK, DUMP] {
            let r = run(bin, &[p(path)]);
            assert_eq!(r.code, 8, "{bin} {}: {}", path.display(), r.all());
            assert!(r.stderr.contains("error:") && r.stderr.contains(msg), "{bin}: {}", r.stderr);
        }
    }
    // a truncated simulator image
    let (_t2, img, _) = small_image(&[]);
    let b = fs::read(&img).unwrap();
    fs::write(&img, &b[..b.len() / 2]).unwrap();
    let r = run(FSCK, &[p(&img)]);
    assert_eq!(r.code, 8, "{}", r.all());
    assert!(r.stderr.contains("cannot load"), "{}", r.stderr);
}

#[test]
fn random_corruption_never_panics() {
    let (t, img, _) = small_image(&["--size", "8M", "--erase", "64k"]);
    let pristine = fs::read(&img).unwrap();
    let data_off = sim_data_offset(&img) as usize;
    // the used part of the device: the first 40 segments of 64 KiB
    let used = 40 * 65536;
    let work = t.path().join("work.img");
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut codes = std::collections::BTreeMap::new();
    for round in 0..40 {
        let mut b = pristine.clone();
        let flips = 1 + rnd() % 64;
        for _ in 0..flips {
            let i = data_off + (rnd() % used) as usize;
            b[i] ^= 1 << (rnd() % 8);
        }
        if round % 10 == 9 {
            // a burst of garbage over a whole region
            let start = data_off + (rnd() % used) as usize;
            for k in 0..4096 {
                b[start + k] = rnd() as u8;
            }
        }
        fs::write(&work, &b).unwrap();
        let r = run(FSCK, &["-n", p(&work)]);
        assert!([0, 4, 8].contains(&r.code), "fsck exit {}:\n{}", r.code, r.all());
        if r.code != 0 {
            assert!(r.stderr.contains("problem:") || r.stderr.contains("error:"), "{}", r.stderr);
        }
        *codes.entry(r.code).or_insert(0) += 1;
        for args in [&["-a"][..], &["--ls", "/dir"][..], &["--cat", "/dir/data.bin"][..], &["-i", "2"][..]] {
            let mut a = vec![p(&work)];
            a.extend_from_slice(args);
            let d = run(DUMP, &a);
            assert!([0, 1, 4, 8].contains(&d.code), "dump {args:?} exit {}:\n{}", d.code, d.all());
        }
        assert_eq!(fs::read(&work).unwrap(), b, "fsck -n or dump wrote to the image");
    }
    eprintln!("fsck exit codes over 40 corrupted images: {codes:?}");
}

#[test]
fn dump_shows_expected_fields() {
    let (_t, img, src) = small_image(&[]);
    let d = run_ok(DUMP, &[p(&img)]);
    for want in [
        "superblock (segment 0)",
        "magic           FFSB",
        "version         1",
        "segment_count   512",
        "write_unit      2048",
        "serial          0x",
        "cp_area_A",
        "copy in segment 1: valid",
        "checkpoints (",
        "<- in use",
        "head 1 (meta)",
        "segment table (checkpoint seq",
    ] {
        assert!(d.stdout.contains(want), "dump lacks {want:?}:\n{}", d.stdout);
    }
    let s = run_ok(DUMP, &[p(&img), "--segments"]);
    assert!(s.stdout.contains("state") && s.stdout.contains("erases") && s.stdout.contains("meta"), "{}", s.stdout);
    assert!(s.stdout.lines().count() > 512, "one line per segment");
    // an inode: attributes and its records
    let mut fs = mount_ro(&img);
    let i = resolve(&mut fs, b"dir/data.bin").unwrap();
    drop(fs);
    let d = run_ok(DUMP, &[p(&img), "--inode", &i.ino.to_string()]);
    for want in ["mode       100644", "size       50000", "INODE", "DATA", "live", "records of inode"] {
        assert!(d.stdout.contains(want), "inode dump lacks {want:?}:\n{}", d.stdout);
    }
    // a segment's records
    let loc = locate(&img, Key::new(i.ino, kind::INODE, 0));
    let d = run_ok(DUMP, &[p(&img), "--segment", &loc.seg.to_string()]);
    assert!(d.stdout.contains("SEGHDR") && d.stdout.contains("INODE"), "{}", d.stdout);
    // ls and cat
    let d = run_ok(DUMP, &[p(&img), "--ls", "/"]);
    assert!(d.stdout.contains("hello.txt") && d.stdout.contains("link -> dir/data.bin"), "{}", d.stdout);
    assert!(d.stdout.contains("drwx"), "{}", d.stdout);
    let d = run_ok(DUMP, &[p(&img), "--ls", "/dir/sub"]);
    assert!(d.stdout.contains("hello2"), "{}", d.stdout);
    let d = run_ok(DUMP, &[p(&img), "--cat", "/dir/data.bin"]);
    assert_eq!(d.raw_stdout, fs::read(src.join("dir/data.bin")).unwrap());
    // errors
    let d = run(DUMP, &[p(&img), "--cat", "/dir"]);
    assert_eq!(d.code, 1);
    assert!(d.stderr.contains("not a regular file"), "{}", d.stderr);
    let d = run(DUMP, &[p(&img), "--ls", "/nope"]);
    assert_eq!(d.code, 1);
    assert!(d.stderr.contains("no such file"), "{}", d.stderr);
    let d = run(DUMP, &[p(&img), "--inode", "999999"]);
    assert_eq!(d.code, 1);
    assert!(d.stdout.contains("does not exist"), "{}", d.stdout);
    let d = run(DUMP, &[p(&img), "--segment", "100000"]);
    assert_eq!(d.code, 1);
}

#[test]
fn bad_arguments_exit_16_with_usage() {
    let t = tmp();
    let img = t.path().join("x.img");
    for (bin, args) in [
        (FSCK, vec![]),
        (FSCK, vec!["--bogus", "x"]),
        (FSCK, vec!["a", "b"]),
        (FSCK, vec!["--unit", "12q", "x"]),
        (MKFS, vec![]),
        (MKFS, vec!["--bogus", p(&img)]),
        (MKFS, vec![p(&img), "--size", "lots"]),
        (MKFS, vec![p(&img), "--nand", "1,2,3", "--size", "1M"]),
        (DUMP, vec![]),
        (DUMP, vec![p(&img), "--inode", "abc"]),
    ] {
        let r = run(bin, &args);
        assert_eq!(r.code, 16, "{bin} {args:?}: {}", r.all());
        assert!(r.stderr.contains("Usage:") || r.stderr.contains("usage"), "{bin} {args:?}: {}", r.stderr);
    }
    for bin in [FSCK, MKFS, DUMP] {
        let r = run(bin, &["--help"]);
        assert_eq!(r.code, 0);
        assert!(r.stdout.contains("Usage:"), "{}", r.stdout);
    }
}

#[test]
fn fsck_detects_a_damaged_segment_header() {
    let (_t, img, _) = small_image(&[]);
    let mut dev = open_existing(&img, &GeoHints::default(), true).unwrap();
    let (_, sb) = scan_superblocks(dev.flash()).sb.unwrap();
    let cps = read_checkpoints(dev.flash(), &sb);
    let (_, _, segs) = ferrofs_tools::layout::newest_valid(&cps).unwrap();
    let seg = segs
        .iter()
        .position(|s| {
            (s.state == ferrofs_engine::format::segstate::FULL || s.state == ferrofs_engine::format::segstate::OPEN)
                && s.live > 0
        })
        .expect("a segment in use") as u32;
    drop(dev);
    flip(&img, seg, 12, 0x02);
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 4, "{}", r.all());
    assert!(r.stderr.contains(&format!("segment {seg} (")), "{}", r.stderr);
    assert!(r.stderr.contains("no valid segment header"), "{}", r.stderr);
}

/// A report written into a pipe whose reader is gone (`ferrofs-dump IMG | head -1`) ends the
/// tool quietly by SIGPIPE, as it ends C tools; before, `println!` panicked on EPIPE (exit 101).
#[test]
fn dump_and_fsck_into_a_closed_pipe_do_not_panic() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let (_t, img, _src) = small_image(&[]);
    for (bin, args) in [(DUMP, vec![p(&img)]), (FSCK, vec!["-n", "-v", p(&img)])] {
        let mut child = Command::new(bin).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // the reader goes away before the tool has opened the image, so its first line meets EPIPE
        drop(child.stdout.take());
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let st = child.wait().unwrap();
        assert!(!err.contains("panicked"), "{bin} panicked on a closed pipe: {err}");
        assert_eq!(st.signal(), Some(13), "{bin} was not ended by SIGPIPE: {st:?} {err}");
    }
}

/// A segment table larger than a segment (here 4096 segments of 16 KiB: a 72 KiB table): the
/// checkpoint's SEGTAB records run through the meta head's reserved successor into segments
/// the captured table records as free, and the head ends in one of them. That is sound (the
/// mount treats the heads' segments as in use) and fsck must call it clean (it reported "log
/// head 1 is in segment N which is free" on every `mkfs -r` of a 1 GiB NAND image).
#[test]
fn fsck_clean_when_the_segment_table_spans_segments() {
    let t = tmp();
    let src = t.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..40 {
        fs::write(src.join(format!("d/f{i}")), prng_bytes(i, 3000 + 100 * i as usize)).unwrap();
    }
    let img = t.path().join("fs.img");
    run_ok(MKFS, &[p(&img), "-q", "--size", "64M", "--page", "512", "--erase", "16k", "-r", p(&src)]);
    let r = run(FSCK, &["-n", p(&img)]);
    assert_eq!(r.code, 0, "{}", r.all());
    // and after a mount that writes (new heads, two checkpoints)
    let r = run(FSCK, &["-y", p(&img)]);
    assert_eq!(r.code, 0, "{}", r.all());
}
