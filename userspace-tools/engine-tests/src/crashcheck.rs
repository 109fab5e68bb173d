//! The crash oracle shared by the crash enumerations (`crash_enum.rs`, `crash_ace.rs`).
//!
//! A workload's states are snapshots ([`Snap`]) of an uninterrupted run after each operation.
//! After a cut, with `done` operations completed, the recovered state must be:
//! - one of the states since the last completed persistence point (fsync, fdatasync or sync:
//!   the engine's `fsync` writes out every head and flushes the device, so every operation
//!   completed before it is durable, design.md "Checkpoint and recovery") up to the state after
//!   the interrupted operation, compared in full: names, inode numbers (link identity), mode,
//!   uid, gid, nlink, size, the three times, rdev, flags, generation, content and xattrs;
//! - or, where operation k is a data write, the state before it with the write partly done as
//!   the log allows ([`partial_content`]): each 4 KiB block of the write wholly old or wholly
//!   new, the new blocks a prefix of the write's blocks (the log is replayed as a prefix), and
//!   the inode either the old one or one written after the blocks it covers: a size beyond the
//!   old one only over new blocks (the size follows the data), with the new times.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, Engine, Error, MountOptions, Platform, ROOT_INO};

use crate::snapshot::{diff, snapshot, Obj, Snap};
use crate::{Fs, RamFlash};

/// File data block size.
pub const BS: u64 = 4096;

/// A data write a cut may leave partly done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteShape {
    /// The inode written.
    pub ino: u64,
    /// First byte written.
    pub off: u64,
    /// End of the bytes written (exclusive, > `off`).
    pub end: u64,
    /// The engine's `write`: a long write may write an inode record covering the blocks written
    /// so far (before a checkpoint or when it ran short of free segments). `write_blocks`
    /// writes one inode record after all its blocks.
    pub intermediate: bool,
}

/// Which inode versions a file content `got` is consistent with, for a write of shape `w`
/// that turned `old` into `new`: `(old_inode, new_inode)`. The content must consist of a prefix
/// of the write's blocks new (each block whole), the rest old; with the old inode its length is
/// the old size; with a new inode (the final one, or for `write` an intermediate one covering
/// the first `j` blocks of the prefix) its length is the old size or the end of the bytes that
/// inode covers, whichever is larger.
pub fn partial_content(old: &[u8], new: &[u8], got: &[u8], w: &WriteShape) -> (bool, bool) {
    let so = old.len() as u64;
    let sg = got.len() as u64;
    if w.end <= w.off {
        return (got == old, got == new);
    }
    let b0 = w.off / BS;
    let nblocks = (w.end - 1) / BS - b0 + 1;
    let mut old_ok = false;
    let mut new_ok = false;
    for p in 0..=nblocks {
        // the content with the first p blocks of the write new
        let cand = |i: u64| -> Option<u8> {
            let b = i / BS;
            if b >= b0 && b < b0 + p {
                new.get(i as usize).copied()
            } else if i < so {
                old.get(i as usize).copied()
            } else {
                Some(0)
            }
        };
        let matches = |len: u64| sg == len && (0..len).all(|i| cand(i) == got.get(i as usize).copied());
        if !old_ok && matches(so) {
            old_ok = true;
        }
        let versions = if w.intermediate { 1..=p } else if p == nblocks { nblocks..=nblocks } else { 1..=0 };
        for j in versions {
            if new_ok {
                break;
            }
            let covered = w.end.min((b0 + j) * BS);
            if matches(so.max(covered)) {
                new_ok = true;
            }
        }
    }
    (old_ok, new_ok)
}

/// Whether `got` is `before` with the write `w` (which led to `after`) partly done.
pub fn partial_state(before: &Snap, after: &Snap, got: &Snap, w: &WriteShape) -> bool {
    if got.names != before.names || got.objs.len() != before.objs.len() {
        return false;
    }
    for (ino, g) in &got.objs {
        let Some(b) = before.objs.get(ino) else { return false };
        if *ino != w.ino {
            if g != b {
                return false;
            }
            continue;
        }
        let Some(a) = after.objs.get(ino) else { return false };
        if g.xattrs != b.xattrs {
            return false;
        }
        let (old_ok, new_ok) = partial_content(&b.data, &a.data, &g.data, w);
        let same_but_size = |x: &Obj| {
            let mut i = x.inode;
            i.size = g.inode.size;
            i == g.inode
        };
        let ok = (old_ok && g.inode == b.inode) || (new_ok && same_but_size(a) && g.inode.size == g.data.len() as u64);
        if !ok {
            return false;
        }
    }
    true
}

/// The states a workload passed through, and what a cut may leave of each operation.
#[derive(Clone, Debug, Default)]
pub struct Oracle {
    /// `states[k]`: the state after `k` operations of an uninterrupted run.
    pub states: Vec<Snap>,
    /// Per operation: the data write a cut inside it (or a lost cached write after it) may
    /// leave partly done.
    pub partial: Vec<Option<WriteShape>>,
    /// Per operation: a persistence point (fsync, fdatasync, sync).
    pub persists: Vec<bool>,
}

impl Oracle {
    /// The index of the first state that must survive a cut after `done` completed operations.
    pub fn durable(&self, done: usize) -> usize {
        self.persists[..done].iter().rposition(|&p| p).map_or(0, |p| p + 1)
    }

    /// Check a state recovered after a cut that came after `done` completed operations (inside
    /// operation `done`, if there is one). Returns the index of a matching state (`k`: after k
    /// operations, the k-th maybe partly done).
    pub fn check(&self, done: usize, got: &Snap) -> Result<usize, String> {
        let lo = self.durable(done);
        let hi = (done + 1).min(self.states.len() - 1);
        for k in (lo..=hi).rev() {
            if self.states[k] == *got {
                return Ok(k);
            }
            if k > 0 {
                if let Some(w) = &self.partial[k - 1] {
                    if partial_state(&self.states[k - 1], &self.states[k], got, w) {
                        return Ok(k);
                    }
                }
            }
        }
        let near = (lo..=hi).min_by_key(|&k| diff(&self.states[k], got).len()).unwrap_or(done);
        Err(format!(
            "the state matches none of the states {lo}..={hi} (durable from {lo}); against state {near}: {:?}",
            diff(&self.states[near], got)
        ))
    }
}

/// How a cut medium is checked.
#[derive(Clone, Debug)]
pub struct CutCheck<'a> {
    /// Mount options of every mount.
    pub opts: MountOptions,
    /// The states of the workload.
    pub oracle: &'a Oracle,
    /// Also cut the first mount after the cut (its orphan reclaim, the closing of the tails a
    /// cut left, the new heads, its first checkpoint) after each of its device operations in
    /// turn; the mount after that must show the same state as an uninterrupted recovery.
    pub recovery_cuts: bool,
}

/// Mount `f` after a cut, check it (fsck clean, no more segments open than the limit, a state
/// the oracle accepts after `done` completed operations), keep writing (a new file with an
/// xattr, fsync, a crash, a mount, then a clean unmount and mount: all of it intact, fsck
/// clean) and, when asked, cut the recovery too. Returns the number of cut points checked: 1
/// plus the recovery cuts.
pub fn check_after_cut(cc: &CutCheck<'_>, mut f: RamFlash, done: usize) -> Result<u64, String> {
    f.power_on();
    let (recovered, _) = recover(cc, f.clone(), done, true)?;
    let mut checked = 1;
    if cc.recovery_cuts {
        for n in 0.. {
            let mut g = f.clone();
            g.cut_in = Some(n);
            g.tear = n % 2 == 1;
            let g = match Fs::mount(g, cc.opts) {
                Ok(fs) => {
                    let g = fs.into_flash();
                    if !g.dead {
                        // the recovery took fewer device operations: every cut in it was tried
                        break;
                    }
                    g
                }
                Err((e, g)) if !g.dead => return Err(format!("recovery cut {n}: the mount failed without a cut: {e:?}")),
                Err((_, g)) => g,
            };
            let mut g = g;
            g.power_on();
            let (again, _) = recover(cc, g, done, n % 4 == 0).map_err(|e| format!("after a cut in the recovery at {n}: {e}"))?;
            if again != recovered {
                return Err(format!("after a cut in the recovery at {n}: the state differs from the uninterrupted recovery: {:?}", diff(&recovered, &again)));
            }
            checked += 1;
            assert!(n < 100_000, "the recovery was never cut");
        }
    }
    Ok(checked)
}

/// One mount after a cut and its checks; with `keep_writing`, the writes after it.
fn recover(cc: &CutCheck<'_>, f: RamFlash, done: usize, keep_writing: bool) -> Result<(Snap, usize), String> {
    let mut fs = Fs::mount(f, cc.opts).map_err(|(e, _)| format!("mount failed: {e:?}"))?;
    if fs.is_failed() || fs.is_read_only() {
        return Err(format!("mounted read-only (failed: {:?})", fs.failure()));
    }
    let (limit, _) = fs.open_segment_limit();
    if limit != 0 && fs.stats().max_open_segments > u64::from(limit) {
        return Err(format!("the mount had {} segments open (limit {limit})", fs.stats().max_open_segments));
    }
    fsck_clean(&mut fs)?;
    let got = snapshot(&mut fs)?;
    let k = cc.oracle.check(done, &got).map_err(|e| format!("after {done} operations: {e}"))?;
    if keep_writing {
        self::keep_writing(cc, fs).map_err(|e| format!("writing on after the recovery (state {k}): {e}"))?;
    }
    Ok((got, k))
}

/// New work after a recovery: a file with data and an xattr, a directory, fsync; then a crash
/// (the write cache loses nothing an fsync covered) and a clean unmount, each followed by a
/// mount that must show exactly the state after the fsync and pass fsck.
fn keep_writing(cc: &CutCheck<'_>, mut fs: Fs) -> Result<(), String> {
    let now = crate::ts(900);
    let e = |what: &'static str| move |e: Error| format!("{what}: {e:?}");
    let c = fs.create(ROOT_INO, b"after-cut", &CreateArgs { mode: S_IFREG | 0o600, uid: 7, gid: 8, rdev: 0 }, now).map_err(e("create"))?;
    fs.write(c.ino, 0, &vec![0xA5; 6000], now).map_err(e("write"))?;
    fs.setxattr(c.ino, b"user.after", b"cut", 0, now).map_err(e("setxattr"))?;
    fs.mkdir(ROOT_INO, b"after-dir", 0o750, 0, 0, now).map_err(e("mkdir"))?;
    fs.fsync(c.ino).map_err(e("fsync"))?;
    let live = snapshot(&mut fs)?;
    let mut f = fs.into_flash();
    f.power_cut();
    f.power_on();
    let mut fs = Fs::mount(f, cc.opts).map_err(|(e, _)| format!("mount after the fsync and a crash: {e:?}"))?;
    expect_state(&mut fs, &live).map_err(|e| format!("after the fsync and a crash: {e}"))?;
    let mut fs = clean_remount(fs, cc.opts)?;
    expect_state(&mut fs, &live).map_err(|e| format!("after a clean unmount: {e}"))
}

/// Fsck must find nothing.
pub fn fsck_clean<P: Platform>(fs: &mut Engine<P, RamFlash>) -> Result<(), String> {
    let r = fs.fsck().map_err(|e| format!("fsck failed: {e:?}"))?;
    if r.problems != 0 {
        return Err(format!("fsck: {r:?}"));
    }
    Ok(())
}

/// The whole visible state must be `want`.
pub fn expect_state<P: Platform>(fs: &mut Engine<P, RamFlash>, want: &Snap) -> Result<(), String> {
    let got = snapshot(fs)?;
    if got != *want {
        return Err(format!("{:?}", diff(want, &got)));
    }
    Ok(())
}

/// Unmount cleanly, mount again (on the standard platform) and check it with fsck.
pub fn clean_remount<P: Platform>(fs: Engine<P, RamFlash>, opts: MountOptions) -> Result<Fs, String> {
    let f = fs.unmount().map_err(|(e, _)| format!("unmount: {e:?}"))?;
    let mut fs = Fs::mount(f, opts).map_err(|(e, _)| format!("mount after a clean unmount: {e:?}"))?;
    fsck_clean(&mut fs).map_err(|e| format!("after a clean unmount: {e}"))?;
    Ok(fs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(off: u64, end: u64, intermediate: bool) -> WriteShape {
        WriteShape { ino: 1, off, end, intermediate }
    }

    #[test]
    fn a_new_size_needs_every_written_block_new() {
        let old = vec![1u8; 5000];
        let mut new = old.clone();
        new.resize(12000, 0);
        new[5000..12000].fill(2);
        let w = shape(5000, 12000, false);
        // size new, data lost: what the old rule accepted
        let mut zeros = old.clone();
        zeros.resize(12000, 0);
        assert_eq!(partial_content(&old, &new, &zeros, &w), (false, false));
        assert_eq!(partial_content(&old, &new, &new, &w), (false, true));
        assert_eq!(partial_content(&old, &new, &old, &w), (true, false));
        // write_blocks: no intermediate size
        let mut half = new.clone();
        half.truncate(8192);
        assert_eq!(partial_content(&old, &new, &half, &w), (false, false));
        // write: an intermediate inode covering the first two blocks
        assert_eq!(partial_content(&old, &new, &half, &shape(5000, 12000, true)), (false, true));
    }

    #[test]
    fn blocks_are_atomic_and_a_prefix() {
        let old = vec![1u8; 12288];
        let mut new = old.clone();
        new[100..12000].fill(2);
        let w = shape(100, 12000, false);
        // first block new, the rest old: fine with the old inode
        let mut g = old.clone();
        g[100..4096].fill(2);
        assert_eq!(partial_content(&old, &new, &g, &w), (true, false));
        // half a block: never
        let mut g = old.clone();
        g[100..2048].fill(2);
        assert_eq!(partial_content(&old, &new, &g, &w), (false, false));
        // the second block without the first: not a prefix
        let mut g = old.clone();
        g[4096..8192].fill(2);
        assert_eq!(partial_content(&old, &new, &g, &w), (false, false));
    }
}
