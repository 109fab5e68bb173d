//! fsck after power cuts: an image cut at any point of a workload must check clean (possibly
//! with a torn-checkpoint warning), fsck without -n recovers it (exit 0 or 1), and a second
//! check is clean. This guards against fsck reporting the normal leftovers of a power cut
//! (torn last checkpoint, log after the checkpoint, orphans) as damage.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use ferrofs_engine::{CreateArgs, SetAttr, Timespec};
use ferrofs_flashsim::AnySim;
use ferrofs_tools::dev::Dev;
use ferrofs_tools::walk::mount;

fn workload(dev: Dev) -> Dev {
    let now = Timespec { sec: 1_700_000_000, nsec: 0 };
    let mut fs = match mount(dev, false) {
        Ok(f) => f,
        Err((_, d)) => return d,
    };
    let r = (|| -> Result<(), ferrofs_engine::Error> {
        let args = CreateArgs { mode: libc::S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
        let d = fs.mkdir(1, b"work", 0o755, 0, 0, now)?;
        for i in 0..6u64 {
            let name = format!("f{i}");
            let f = fs.create(d.ino, name.as_bytes(), &args, now)?;
            fs.write(f.ino, 0, &prng_bytes(i, 10_000 + 3000 * i as usize), now)?;
            if i % 2 == 0 {
                fs.fsync(f.ino)?;
            }
            fs.setxattr(f.ino, b"user.i", name.as_bytes(), 0, now)?;
        }
        fs.sync()?;
        fs.unlink(d.ino, b"f1", now)?;
        fs.rename(d.ino, b"f2", 1, b"moved", 0, now)?;
        let f = fs.lookup(d.ino, b"f3")?;
        fs.setattr(f.ino, &SetAttr { size: Some(100), ..SetAttr::default() }, now)?;
        fs.write(f.ino, 50_000, b"beyond a hole", now)?;
        fs.fsync(f.ino)?;
        let g = fs.create(1, b"late", &args, now)?;
        fs.write(g.ino, 0, &prng_bytes(99, 70_000), now)?;
        fs.fsync(g.ino)?;
        Ok(())
    })();
    match r {
        Ok(()) => match fs.unmount() {
            Ok(d) => d,
            Err((_, d)) => d,
        },
        Err(_) => fs.into_flash(),
    }
}

fn sim_ops(dev: &Dev) -> u64 {
    match dev {
        Dev::Sim(AnySim::Nand(s)) => s.ops_since_power_on(),
        Dev::Sim(AnySim::Block(s)) => s.ops_since_power_on(),
        _ => 0,
    }
}

fn reboot(dev: &mut Dev) {
    match dev {
        Dev::Sim(AnySim::Nand(s)) => s.reboot(),
        Dev::Sim(AnySim::Block(s)) => s.reboot(),
        _ => {}
    }
}

fn cut_after(dev: &mut Dev, n: u64) {
    match dev {
        Dev::Sim(AnySim::Nand(s)) => s.cut_after(n),
        Dev::Sim(AnySim::Block(s)) => s.cut_after(n),
        _ => {}
    }
}

fn check_after_cut(img: &Path, label: &str) {
    let before = fs::read(img).unwrap();
    let r = run(FSCK, &["-n", p(img)]);
    assert_eq!(fs::read(img).unwrap(), before, "{label}: -n wrote");
    assert_eq!(r.code, 0, "{label}: fsck -n after a power cut:\n{}", r.all());
    let r = run(FSCK, &[p(img)]);
    assert!(r.code == 0 || r.code == 1, "{label}: fsck after a power cut exit {}:\n{}", r.code, r.all());
    let r = run(FSCK, &[p(img)]);
    assert_eq!(r.code, 0, "{label}: second fsck:\n{}", r.all());
}

fn power_cut_points(mkfs_args: &[&str]) {
    let t = tmp();
    let img = t.path().join("base.img");
    let mut a = vec![p(&img), "-q"];
    a.extend_from_slice(mkfs_args);
    run_ok(MKFS, &a);
    // dry run: count the operations of the workload
    let mut dev = Dev::Sim(AnySim::load(&img).unwrap());
    reboot(&mut dev);
    let start = sim_ops(&dev);
    let dev = workload(dev);
    let n = sim_ops(&dev).saturating_sub(start);
    assert!(n > 10, "workload too short ({n} operations)");
    let work = t.path().join("cut.img");
    let step = (n / 40).max(1);
    let mut tried = 0;
    for cut in (1..=n).step_by(step as usize) {
        let mut dev = Dev::Sim(AnySim::load(&img).unwrap());
        reboot(&mut dev);
        cut_after(&mut dev, cut);
        let mut dev = workload(dev);
        reboot(&mut dev);
        dev.persist(&work).unwrap();
        check_after_cut(&work, &format!("cut after {cut} of {n} operations"));
        tried += 1;
    }
    eprintln!("{mkfs_args:?}: checked {tried} power-cut points of {n}");
}

#[test]
fn fsck_after_power_cuts_on_nand_is_clean_and_recovers() {
    power_cut_points(&["--size", "16M", "--erase", "64k"]);
}

#[test]
fn fsck_after_power_cuts_on_block_is_clean_and_recovers() {
    power_cut_points(&["--block", "--size", "16M", "--au", "256k"]);
}
