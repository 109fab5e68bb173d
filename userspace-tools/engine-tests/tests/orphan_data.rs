//! Data of a file whose creation never reached the medium (the hot head is written out before
//! the metadata head): recovery must drop it instead of indexing records of a missing inode;
//! and a completed fsync of a new file makes the file (inode, entry, parent) reachable.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, MountOptions, ROOT_INO};
use ferrofs_engine_tests::*;

fn args() -> CreateArgs {
    CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }
}

#[test]
fn recovery_drops_data_of_an_inode_whose_creation_was_lost() {
    let mut fs = fresh(32 * 1024, 64, 512);
    fs.sync().unwrap();
    let f = fs.create(ROOT_INO, b"new", &args(), ts(1)).unwrap();
    let mut d = vec![0u8; 20_000];
    Rng::new(3).fill(&mut d);
    // long write: the hot head reaches the medium, the create stays in the meta buffer
    fs.write(f.ino, 0, &d, ts(1)).unwrap();
    let mut fs = crash_remount(fs);
    assert!(fs.lookup(ROOT_INO, b"new").is_err());
    assert!(fs.getattr(f.ino).is_err());
    assert!(fs.dropped_records() > 0, "the orphaned data records were not counted");
    assert_consistent(&mut fs);
    // nothing leaks: the space of the dropped records is reclaimable, the fs keeps working
    let g = fs.create(ROOT_INO, b"later", &args(), ts(2)).unwrap();
    fs.write(g.ino, 0, &d, ts(2)).unwrap();
    let mut fs = remount(fs);
    assert_eq!(fs.dropped_records(), 0);
    assert_eq!(fs.getattr(g.ino).unwrap().size, 20_000);
    assert_consistent(&mut fs);
}

/// Cut power at every flash operation of `create; write; fsync` of a file in a new directory:
/// before fsync returns the file is either absent or (after the fsync) complete; the index never
/// holds records of a missing inode. After fsync returned, a crash keeps the file.
#[test]
fn fsync_of_a_new_file_makes_it_reachable_at_every_cut() {
    let base = {
        let mut fs = fresh(32 * 1024, 64, 512);
        fs.sync().unwrap();
        fs.unmount().map_err(|e| e.0).unwrap()
    };
    let mut d = vec![0u8; 13_000];
    Rng::new(5).fill(&mut d);
    let opts = MountOptions::default();
    let mut cut = 0u64;
    let mut checked = 0;
    loop {
        let mut fs = Fs::mount(base.clone(), opts).map_err(|e| e.0).unwrap();
        fs.flash().cut_in = Some(cut);
        let r = (|| {
            let dir = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0, ts(1))?;
            let f = fs.create(dir.ino, b"f", &args(), ts(1))?;
            fs.write(f.ino, 0, &d, ts(1))?;
            fs.fsync(f.ino)
        })();
        let completed = r.is_ok();
        let dead = fs.flash().dead;
        let mut flash = fs.into_flash();
        flash.power_on();
        let mut fs = Fs::mount(flash, opts).map_err(|e| e.0).unwrap();
        assert_consistent(&mut fs);
        let found = fs.lookup(ROOT_INO, b"d").and_then(|dir| fs.lookup(dir.ino, b"f"));
        if completed {
            let f = found.unwrap_or_else(|e| panic!("cut {cut}: fsync'd file lost: {e:?}"));
            assert_eq!(f.size, d.len() as u64, "cut {cut}");
            let mut got = vec![0u8; d.len()];
            assert_eq!(fs.read(f.ino, 0, &mut got).unwrap(), d.len());
            assert!(got == d, "cut {cut}: fsync'd data differs");
        } else if let Ok(f) = found {
            // the create made it; the data is a prefix of the write (each block old or new)
            assert!(f.size <= d.len() as u64, "cut {cut}");
        }
        checked += 1;
        if !dead {
            break;
        }
        cut += 1;
    }
    assert!(checked > 5, "only {checked} cut points");
}
