//! `setattr_xattrs`: xattr changes and attribute changes in one atomic group, as POSIX ACLs need
//! them (an ACL and the mode bits it implies; the kernel layer's src/acl.rs). A power cut at
//! every device operation of the call and of the fsync after it leaves all of it or none of it;
//! a refused call leaves nothing done and the engine writable.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Error, SetAttr, XattrChange, ROOT_INO};
use ferrofs_engine_tests::*;

const ACL: &[u8] = b"system.posix_acl_access";
const OTHER: &[u8] = b"user.other";
const ADDED: &[u8] = b"user.added";

/// A formatted medium with file `f` (mode 0640, gid 6) holding ACL = "old-acl" and OTHER = "x".
fn template() -> (RamFlash, u64) {
    let mut fs = fresh(32 * 1024, 48, 512);
    let f = fs.create(ROOT_INO, b"f", &CreateArgs { mode: S_IFREG | 0o640, uid: 5, gid: 6, rdev: 0 }, ts(1)).unwrap();
    fs.setxattr(f.ino, ACL, b"old-acl", 0, ts(1)).unwrap();
    fs.setxattr(f.ino, OTHER, b"x", 0, ts(1)).unwrap();
    (fs.unmount().map_err(|e| e.0).unwrap(), f.ino)
}

fn get(fs: &mut Fs, ino: u64, name: &[u8]) -> Option<Vec<u8>> {
    let mut b = [0u8; 8192];
    match fs.getxattr(ino, name, &mut b) {
        Ok(n) => Some(b[..n].to_vec()),
        Err(Error::NoData) => None,
        Err(e) => panic!("getxattr {}: {e:?}", String::from_utf8_lossy(name)),
    }
}

type State = (u32, u32, Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);

fn state(fs: &mut Fs, ino: u64) -> State {
    let i = fs.getattr(ino).unwrap();
    (i.mode & 0o7777, i.gid, get(fs, ino, ACL), get(fs, ino, OTHER), get(fs, ino, ADDED))
}

fn old() -> State {
    (0o640, 6, Some(b"old-acl".to_vec()), Some(b"x".to_vec()), None)
}

/// The new values span many 512-byte write units, so that cuts fall inside the group.
static NEW_ACL: [u8; 5000] = [0xA5; 5000];
static NEW_ADDED: [u8; 3000] = [0x5A; 3000];

fn new() -> State {
    (0o600, 9, Some(NEW_ACL.to_vec()), None, Some(NEW_ADDED.to_vec()))
}

const CHANGES: [XattrChange<'static>; 3] = [
    XattrChange { name: ACL, value: Some(&NEW_ACL) },
    XattrChange { name: OTHER, value: None },
    XattrChange { name: ADDED, value: Some(&NEW_ADDED) },
];

fn attrs() -> SetAttr {
    SetAttr { mode: Some(0o600), gid: Some(9), ..Default::default() }
}

#[test]
fn all_or_nothing_at_every_cut() {
    let (tpl, ino) = template();
    let (mut seen_old, mut seen_new) = (false, false);
    for n in 1.. {
        assert!(n < 10_000, "the call and its fsync were never completed");
        let mut fs = Fs::mount(tpl.clone(), Default::default()).map_err(|e| e.0).unwrap();
        fs.flash().cut_in = Some(n);
        let r = fs.setattr_xattrs(ino, &CHANGES, &attrs(), ts(2)).and_then(|_| fs.fsync(ino));
        let cut = fs.flash().dead;
        assert!(r.is_ok() || cut, "cut {n}: failed without a power cut: {r:?}");
        let mut f = fs.into_flash();
        f.power_on();
        let mut fs = Fs::mount(f, Default::default()).map_err(|e| e.0).unwrap();
        assert_consistent(&mut fs);
        let s = state(&mut fs, ino);
        if s == old() {
            seen_old = true;
        } else if s == new() {
            seen_new = true;
        } else {
            panic!("cut {n}: half an atomic group: mode {:o} gid {} ACL {:?} bytes, OTHER {:?}, ADDED {:?} bytes", s.0, s.1, s.2.map(|v| v.len()), s.3, s.4.map(|v| v.len()));
        }
        if !cut {
            // the fsync returned: the whole change is durable
            assert_eq!(s, new(), "cut {n}: fsync'd change lost");
            break;
        }
    }
    assert!(seen_old && seen_new, "the cuts never fell on both sides (old {seen_old}, new {seen_new})");
}

#[test]
fn refused_calls_leave_nothing_done() {
    let (tpl, ino) = template();
    let mut fs = Fs::mount(tpl, Default::default()).map_err(|e| e.0).unwrap();
    let grow = SetAttr { size: Some(10), ..attrs() };
    assert_eq!(fs.setattr_xattrs(ino, &CHANGES, &grow, ts(2)).err(), Some(Error::Invalid));
    let long = [0u8; 256];
    let bad_name = [CHANGES[0], XattrChange { name: &long, value: Some(b"v") }];
    assert_eq!(fs.setattr_xattrs(ino, &bad_name, &attrs(), ts(2)).err(), Some(Error::Range));
    let big = vec![7u8; fs.xattr_value_max() + 1];
    let too_big = [CHANGES[0], XattrChange { name: ADDED, value: Some(big.as_slice()) }];
    assert_eq!(fs.setattr_xattrs(ino, &too_big, &attrs(), ts(2)).err(), Some(Error::Range));
    assert_eq!(fs.setattr_xattrs(999_999, &CHANGES, &attrs(), ts(2)).err(), Some(Error::NotFound));
    assert_eq!(state(&mut fs, ino), old());
    // still writable, and the change itself works, survives a remount, and sets ctime
    let i = fs.setattr_xattrs(ino, &CHANGES, &attrs(), ts(3)).unwrap();
    assert_eq!(i.ctime, ts(3));
    assert_eq!(state(&mut fs, ino), new());
    // removing an absent attribute is no error; attributes alone change too
    let again = [XattrChange { name: OTHER, value: None }];
    fs.setattr_xattrs(ino, &again, &SetAttr { mode: Some(0o604), ..Default::default() }, ts(4)).unwrap();
    let mut fs = remount(fs);
    let mut want = new();
    want.0 = 0o604;
    assert_eq!(state(&mut fs, ino), want);
    assert_eq!(fs.getattr(ino).unwrap().ctime, ts(4));
    assert_consistent(&mut fs);
}
