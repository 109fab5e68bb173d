//! Range deletions across the runs `idx_del_range` takes its keys in (32 keys per leaf walk):
//! truncating files of block counts around the run size, then unlinking and evicting them,
//! removes exactly their keys (the blocks kept read back, a neighbouring file is untouched),
//! before and after a remount and after a crash.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, SetAttr, ROOT_INO};
use ferrofs_engine_tests::*;

const BS: usize = 4096;

fn block(ino: u64, i: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (j, x) in b.iter_mut().enumerate() {
        *x = (ino as usize * 31 + i as usize * 7 + j) as u8;
    }
    b
}

fn check_file(fs: &mut Fs, ino: u64, blocks: u64) {
    let a = fs.getattr(ino).expect("getattr");
    assert_eq!(a.size, blocks * BS as u64, "size of {ino}");
    let mut buf = vec![0u8; BS];
    for i in 0..blocks {
        let n = fs.read(ino, i * BS as u64, &mut buf).expect("read");
        assert_eq!(n, BS);
        assert!(buf == block(ino, i), "block {i} of inode {ino}");
    }
}

#[test]
fn truncate_and_unlink_around_the_run_size() {
    let args = CreateArgs { mode: S_IFREG | 0o644, ..Default::default() };
    for &(n, keep) in &[(1u64, 0u64), (31, 0), (32, 0), (33, 0), (33, 1), (64, 0), (65, 0), (65, 32), (97, 31), (130, 2)] {
        let mut fs = fresh(128 * 1024, 256, 2048);
        let a = fs.create(ROOT_INO, b"a", &args, ts(1)).unwrap().ino;
        let b = fs.create(ROOT_INO, b"b", &args, ts(1)).unwrap().ino;
        for i in 0..n {
            fs.write(a, i * BS as u64, &block(a, i), ts(1)).unwrap();
        }
        for i in 0..3 {
            fs.write(b, i * BS as u64, &block(b, i), ts(1)).unwrap();
        }
        fs.setattr(a, &SetAttr { size: Some(keep * BS as u64), ..Default::default() }, ts(2)).unwrap();
        check_file(&mut fs, a, keep);
        check_file(&mut fs, b, 3);
        // the file grows back over the truncated range with a hole, not with old blocks
        fs.setattr(a, &SetAttr { size: Some(n * BS as u64), ..Default::default() }, ts(3)).unwrap();
        let mut buf = vec![1u8; BS];
        for i in keep..n {
            assert_eq!(fs.read(a, i * BS as u64, &mut buf).unwrap(), BS);
            assert!(buf.iter().all(|&x| x == 0), "block {i} of {n} after truncating to {keep}: old data");
        }
        fs.setattr(a, &SetAttr { size: Some(keep * BS as u64), ..Default::default() }, ts(4)).unwrap();
        assert_consistent(&mut fs);
        fs.sync().unwrap();
        let mut fs = remount(fs);
        check_file(&mut fs, a, keep);
        check_file(&mut fs, b, 3);
        // refill, then unlink and evict: the inode's whole key range goes
        for i in keep..n {
            fs.write(a, i * BS as u64, &block(a, i), ts(5)).unwrap();
        }
        fs.unlink(ROOT_INO, b"a", ts(6)).unwrap();
        fs.evict(a).unwrap();
        assert!(fs.getattr(a).is_err(), "inode {a} still there after evict ({n} blocks)");
        check_file(&mut fs, b, 3);
        assert_consistent(&mut fs);
        fs.sync().unwrap();
        let mut fs = crash_remount(fs);
        assert!(fs.getattr(a).is_err());
        check_file(&mut fs, b, 3);
        assert_consistent(&mut fs);
    }
}
