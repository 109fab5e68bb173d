//! Cargo cannot build a binary whose name contains a dot (rustc rejects `mkfs.ferrofs` as a
//! crate name), so the binaries are built as `mkfs-ferrofs` and `fsck-ferrofs` and this script
//! puts `mkfs.ferrofs` and `fsck.ferrofs` symlinks next to them in the profile directory
//! (`target/[TRIPLE/]PROFILE/`). Install with `install -m755 .../mkfs-ferrofs /sbin/mkfs.ferrofs`
//! or copy the symlinks with `cp -L`. Failures here are ignored: the binaries still build.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else { return };
    // OUT_DIR = <profile dir>/build/<pkg>-<hash>/out
    let Some(profile) = out.ancestors().nth(3).map(PathBuf::from) else { return };
    if !profile.join("build").is_dir() {
        return;
    }
    for (link, bin) in [("mkfs.ferrofs", "mkfs-ferrofs"), ("fsck.ferrofs", "fsck-ferrofs")] {
        let l = profile.join(link);
        if std::fs::symlink_metadata(&l).is_ok() {
            continue;
        }
        #[cfg(unix)]
        let _ = std::os::unix::fs::symlink(bin, &l);
    }
}
