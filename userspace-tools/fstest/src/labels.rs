//! Security labels on new inodes (the ferrofs-ifmeta guest suite, on a kernel with Smack): a
//! filesystem must call `security_inode_init_security` when it creates an inode and store the
//! LSM's attribute as a `security.*` xattr, or every file it holds is unlabelled after the next
//! mount. Smack is the test kernels' LSM because it labels without a policy: a new inode gets
//! its creator's label as `security.SMACK64`, and a task without CAP_MAC_OVERRIDE may not
//! touch an object whose label differs from its own (unless the object is `_`).
//!
//! ```text
//! ferrofs-fstest labels run DIR      create every kind of inode under a label, check them, then
//!                                    DIR/labels-persist: labelled files, fsync'd
//! ferrofs-fstest labels verify DIR   DIR/labels-persist after a remount or a power cut
//! ```
//!
//! Runs as root (CAP_MAC_ADMIN, to change its own label); the enforcement checks fork children
//! as uid 1000, which have no capabilities and keep the parent's label. Without Smack the run
//! fails: the checks cannot say anything there.

use std::path::{Path, PathBuf};

use libc::{O_RDONLY, O_RDWR, O_TMPFILE, O_WRONLY, S_IFIFO};

use crate::report::Report;
use crate::ifmeta::{access_as, enter};
use crate::sys::{self, must, R};

const SMACK: &str = "security.SMACK64";
/// The label the suite creates files under (any label that no rule grants `_` access to).
const LABEL: &str = "ferrofs-lbl";
/// A label set explicitly with setxattr.
const OTHER: &str = "ferrofs-set";
const PROC_LABEL: &str = "/proc/self/attr/smack/current";
const U1: u32 = 1000;

/// Entry point for `ferrofs-fstest labels ...`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    // umask 0: the files are mode 0666, so only Smack can refuse the uid-1000 children
    let (run, mut r) = match enter("labels", args, 0) {
        Ok(v) => v,
        Err(status) => return status,
    };
    let own = match task_label() {
        Ok(l) => l,
        Err(e) => {
            r.fail("Smack is the active LSM (reading /proc/self/attr/smack/current)", "a label", e);
            return r.finish();
        }
    };
    let dir = PathBuf::from(".");
    if run {
        let base = dir.join("labels");
        r.group("setup", |r| {
            r.ok("mkdir labels", sys::mkdir(&base, 0o777));
            r.eq("the suite's own label (Smack's floor)", "_", own.as_str());
        });
        r.group("labels-new-inodes", |r| new_inodes(r, &base, &own));
        r.group("labels-set", |r| set_explicit(r, &base));
        r.group("labels-persist-setup", |r| persist_setup(r, &dir.join("labels-persist"), &own));
    }
    r.group("labels-persist", |r| persist_check(r, &dir.join("labels-persist"), &own));
    r.finish()
}

fn task_label() -> Result<String, String> {
    let v = sys::read_file(PROC_LABEL).map_err(|e| format!("{PROC_LABEL}: {e} (no Smack in this kernel?)"))?;
    let s = String::from_utf8_lossy(&v);
    Ok(s.trim_end_matches(['\0', '\n']).to_string())
}

fn set_task_label(l: &str) -> R<()> {
    let fd = sys::open(PROC_LABEL, O_WRONLY, 0)?;
    fd.write(l.as_bytes()).map(|_| ())
}

/// The Smack label of `p` (not following a symlink), as a string.
fn label(p: &Path) -> R<String> {
    sys::getxattr_sized(p, SMACK, 256, true).map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Create every kind of inode ferrofs makes (file, directory, symlink, FIFO, hard link,
/// O_TMPFILE linked in) under `LABEL`, each labelled with it; the label of the creator at the
/// time counts, not the directory's.
fn new_inodes(r: &mut Report, base: &Path, own: &str) {
    let before = base.join("floor");
    must(sys::write_file(&before, b"floor", 0o666), "create labels/floor");
    r.eq("a file created under the floor label is labelled _", Ok(own.to_string()), label(&before));
    let names = sys::listxattr_sized(&before, 4096, true).map(|(_, v)| v);
    r.eq("listxattr lists security.SMACK64", Ok(true), names.map(|v| v.iter().any(|n| n == SMACK)));

    if r.ok(&format!("take the label {LABEL}"), set_task_label(LABEL)).is_none() {
        return;
    }
    r.eq("the task's label changed", Ok(LABEL.to_string()), task_label());
    let f = base.join("file");
    let d = base.join("dir");
    let inner = d.join("inner");
    let sl = base.join("symlink");
    let fifo = base.join("fifo");
    let tmp = base.join("tmpfile");
    r.ok("create a file", sys::write_file(&f, b"file", 0o666));
    r.ok("mkdir", sys::mkdir(&d, 0o777));
    r.ok("create a file in the new directory", sys::write_file(&inner, b"inner", 0o666));
    r.ok("symlink", sys::symlink(b"file", &sl));
    r.ok("mknod a FIFO", sys::mknod(&fifo, S_IFIFO | 0o666, 0));
    let linked = sys::open(base, O_TMPFILE | O_RDWR, 0o666).and_then(|fd| {
        fd.write(b"tmpfile")?;
        sys::linkat_empty(&fd, &tmp)
    });
    r.ok("O_TMPFILE, written, then linked in", linked);
    // back to the floor before anything else: the checks below read as `_`
    r.ok("take the floor label back", set_task_label(own));
    for (what, p) in [("file", &f), ("directory", &d), ("file in it", &inner), ("symlink", &sl), ("FIFO", &fifo), ("O_TMPFILE file", &tmp)] {
        r.eq(&format!("new {what} labelled {LABEL}"), Ok(LABEL.to_string()), label(p));
    }
    let hard = base.join("hardlink");
    r.ok("hard link to the labelled file", sys::link(&f, &hard));
    r.eq("a hard link is the same inode: same label", Ok(LABEL.to_string()), label(&hard));
    r.eq("the floor file kept its label", Ok(own.to_string()), label(&before));
    // Smack enforces what ferrofs stored: a capability-less task labelled `_` may open the
    // `_` file but not the one labelled LABEL, whatever its mode bits (0666 both)
    r.eq("uid 1000 (label _) may write and read the _ file", vec![0, 0], access_as(U1, &before));
    r.eq(&format!("uid 1000 (label _) may not open the {LABEL} file"), vec![libc::EACCES, libc::EACCES], access_as(U1, &f));
}

/// A label set by root with setxattr replaces the creator's and is enforced; an invalid one is
/// refused by Smack before ferrofs stores anything. (getxattr of `security.SMACK64` answers from
/// Smack's in-core label; what ferrofs stored is read back by `verify` on a fresh mount.)
fn set_explicit(r: &mut Report, base: &Path) {
    let f = base.join("set");
    must(sys::write_file(&f, b"set", 0o666), "create labels/set");
    r.ok(&format!("setxattr {SMACK} {OTHER}"), sys::setxattr(&f, SMACK, OTHER.as_bytes(), 0, false));
    r.eq("getxattr gives it back", Ok(OTHER.to_string()), label(&f));
    r.eq(&format!("uid 1000 (label _) may not open the {OTHER} file"), vec![libc::EACCES, libc::EACCES], access_as(U1, &f));
    r.err("an invalid label (starting with a slash) is refused: EINVAL", sys::setxattr(&f, SMACK, b"/x", 0, false), libc::EINVAL);
    r.eq("the refused label changed nothing", Ok(OTHER.to_string()), label(&f));
}

/// DIR/labels-persist: labelled inodes, fsync'd, for `verify` after a remount or a power cut.
fn persist_setup(r: &mut Report, p: &Path, own: &str) {
    must(sys::mkdir(p, 0o777), "mkdir labels-persist");
    must(sys::write_file(p.join("floor"), b"floor", 0o666), "create labels-persist/floor");
    if r.ok(&format!("take the label {LABEL}"), set_task_label(LABEL)).is_none() {
        return;
    }
    r.ok("create labels-persist/file", sys::write_file(p.join("file"), b"file", 0o666));
    r.ok("mkdir labels-persist/dir", sys::mkdir(p.join("dir"), 0o777));
    r.ok("symlink labels-persist/symlink", sys::symlink(b"file", p.join("symlink")));
    r.ok("take the floor label back", set_task_label(own));
    must(sys::write_file(p.join("set"), b"set", 0o666), "create labels-persist/set");
    r.ok(&format!("labels-persist/set: setxattr {OTHER}"), sys::setxattr(p.join("set"), SMACK, OTHER.as_bytes(), 0, false));
    for q in ["floor", "file", "dir", "set", "."] {
        let q = p.join(q);
        let flags = if q.is_dir() { O_RDONLY | libc::O_DIRECTORY } else { O_RDONLY };
        r.ok(&format!("fsync {}", q.display()), sys::open(&q, flags, 0).and_then(|fd| fd.fsync()));
    }
    // the symlink has no descriptor to fsync: syncfs covers it
    r.ok("syncfs", sys::syncfs_path(p));
}

/// The labels read back from flash: each inode is new to this mount, so Smack takes its label
/// from the xattr ferrofs stored (`smack_d_instantiate`), and enforces it.
fn persist_check(r: &mut Report, p: &Path, own: &str) {
    r.eq("labels-persist/floor: label _", Ok(own.to_string()), label(&p.join("floor")));
    for q in ["file", "dir", "symlink"] {
        r.eq(&format!("labels-persist/{q}: label {LABEL}"), Ok(LABEL.to_string()), label(&p.join(q)));
    }
    r.eq(&format!("labels-persist/set: label {OTHER}"), Ok(OTHER.to_string()), label(&p.join("set")));
    r.eq("labels-persist/file: content", Ok(b"file".to_vec()), sys::read_file(p.join("file")));
    r.eq("uid 1000 (label _) may open labels-persist/floor", vec![0, 0], access_as(U1, &p.join("floor")));
    r.eq(&format!("uid 1000 (label _) may not open labels-persist/file ({LABEL} from flash)"), vec![libc::EACCES, libc::EACCES], access_as(U1, &p.join("file")));
    r.eq(&format!("uid 1000 (label _) may not open labels-persist/set ({OTHER} from flash)"), vec![libc::EACCES, libc::EACCES], access_as(U1, &p.join("set")));
}
