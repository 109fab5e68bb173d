//! A monomorphized instance of the engine for the no-panic check (see check.sh).
#![no_std]
#![forbid(unsafe_code)]
extern crate alloc;
#[path = "../../../src/engine/mod.rs"]
pub mod engine;
use engine::*;
use engine::error::Error;

pub struct V<T>(alloc::vec::Vec<T>);
impl<T> FallibleVec<T> for V<T> {
    fn new() -> Self { V(alloc::vec::Vec::new()) }
    fn try_push(&mut self, v: T) -> core::result::Result<(), Error> {
        self.0.try_reserve(1).map_err(|_| Error::NoMem)?;
        if self.0.len() < self.0.capacity() { self.0.push(v); Ok(()) } else { Err(Error::NoMem) }
    }
    fn pop(&mut self) -> Option<T> { self.0.pop() }
    fn len(&self) -> usize { self.0.len() }
    fn as_slice(&self) -> &[T] { &self.0 }
    fn as_mut_slice(&mut self) -> &mut [T] { &mut self.0 }
}
pub struct Pl;
impl Platform for Pl { type Vec<T> = V<T>; }

pub struct D;
impl Flash for D {
    fn geometry(&self) -> Geometry { Geometry { kind: FlashKind::Nand, segment_size: 65536, segment_count: 64, write_unit: 2048, preferred_write: 2048 } }
    fn read(&mut self, _s: u32, _o: u32, _b: &mut [u8]) -> core::result::Result<ReadStatus, FlashError> { Err(FlashError::Io) }
    fn write(&mut self, _s: u32, _o: u32, _b: &[u8]) -> core::result::Result<(), FlashError> { Err(FlashError::Io) }
    fn erase(&mut self, _s: u32) -> core::result::Result<(), FlashError> { Err(FlashError::Io) }
    fn is_bad(&mut self, _s: u32) -> core::result::Result<bool, FlashError> { Ok(false) }
    fn mark_bad(&mut self, _s: u32) -> core::result::Result<(), FlashError> { Ok(()) }
    fn flush(&mut self) -> core::result::Result<(), FlashError> { Ok(()) }
}

#[inline(never)]
pub fn exercise(mut e: Engine<Pl, D>, b: &mut [u8], n: &[u8], t: Timespec) -> u64 {
    let mut r = 0u64;
    r += e.lookup(1, n).map(|i| i.ino).unwrap_or(0);
    r += e.getattr(2).map(|i| i.size).unwrap_or(0);
    let _ = e.setattr(2, &SetAttr::default(), t);
    let _ = e.create(1, n, &CreateArgs::default(), t);
    let _ = e.mkdir(1, n, 0, 0, 0, t);
    let _ = e.symlink(1, n, n, 0, 0, t);
    let _ = e.link(2, 1, n, t);
    let _ = e.unlink(1, n, t);
    let _ = e.rmdir(1, n, t);
    let _ = e.rename(1, n, 1, n, 0, t);
    r += e.readlink(2, b).unwrap_or(0) as u64;
    r += e.read(2, 5, b).unwrap_or(0) as u64;
    r += e.write(2, 5, n, t).unwrap_or(0) as u64;
    let _ = e.readdir(1, 0, &mut |x, _, _, _| x.len() > 3);
    r += e.getxattr(2, n, b).unwrap_or(0) as u64;
    let _ = e.setxattr(2, n, n, 0, t);
    r += e.listxattr(2, b).unwrap_or(0) as u64;
    let _ = e.removexattr(2, n, t);
    let _ = e.setattr_xattrs(2, &[XattrChange { name: n, value: Some(n) }, XattrChange { name: n, value: None }], &SetAttr::default(), t);
    let _ = e.fsync(2);
    let _ = e.evict(2);
    let _ = e.gc_step(true);
    let _ = e.check();
    let _ = e.fsck();
    let _ = e.repair(RepairLevel::All, t, &mut |x, _| matches!(x, Repair::Reconnect(_)));
    r += e.statfs().blocks + e.stats().erases;
    let _ = e.sync();
    let _ = e.unmount();
    r
}
#[inline(never)]
pub fn mnt(d: D) -> Option<Engine<Pl, D>> { Engine::<Pl, D>::mount(d, MountOptions::default()).ok() }
#[inline(never)]
pub fn fmt(d: D, t: Timespec) -> bool { Engine::<Pl, D>::format(d, &FormatOptions::default(), t).is_ok() }
