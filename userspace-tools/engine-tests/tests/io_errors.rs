//! Errors that say nothing about the medium (`FlashError::Io`: a transient -ETIMEDOUT, -ENOMEM or
//! -EINTR from the MTD driver, or -EROFS from a read-only MTD) must fail the operation and stop
//! the engine writing (fail-stop) without retiring any segment; media errors (`WriteFailed`,
//! `EraseFailed`) retire the segment and the engine keeps serving. Also the fault counters.

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{CreateArgs, Engine, Error, Flash, FlashError, Geometry, MountOptions, ReadStatus, ROOT_INO};
use ferrofs_engine_tests::{mkfs, ts, RamFlash, Rng};

/// A `RamFlash` whose writes or erases return `FlashError::Io` on demand, counting `mark_bad`.
struct Flaky {
    inner: RamFlash,
    /// Fail this many upcoming writes (from the next one on) with `Io`.
    fail_writes: u32,
    /// Fail this many upcoming erases with `Io`.
    fail_erases: u32,
    /// Every erase fails with `Io` (a read-only device).
    erases_always_fail: bool,
    /// Every write fails with `Io` (a read-only device).
    writes_always_fail: bool,
    /// Segments whose reads report corrected bit-flips.
    corrected: Vec<u32>,
    mark_bad_calls: Vec<u32>,
    io_errors_returned: u32,
}

impl Flaky {
    fn new() -> Self {
        Flaky {
            inner: RamFlash::new_nand(16 * 2048, 96, 2048),
            fail_writes: 0,
            fail_erases: 0,
            erases_always_fail: false,
            writes_always_fail: false,
            corrected: Vec::new(),
            mark_bad_calls: Vec::new(),
            io_errors_returned: 0,
        }
    }
}

impl Flash for Flaky {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        let r = self.inner.read(seg, offset, buf)?;
        if self.corrected.contains(&seg) {
            return Ok(ReadStatus::Corrected);
        }
        Ok(r)
    }
    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        if self.writes_always_fail || self.fail_writes > 0 {
            self.fail_writes = self.fail_writes.saturating_sub(1);
            self.io_errors_returned += 1;
            return Err(FlashError::Io);
        }
        self.inner.write(seg, offset, buf)
    }
    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        if self.erases_always_fail || self.fail_erases > 0 {
            self.fail_erases = self.fail_erases.saturating_sub(1);
            self.io_errors_returned += 1;
            return Err(FlashError::Io);
        }
        self.inner.erase(seg)
    }
    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        self.inner.is_bad(seg)
    }
    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        self.mark_bad_calls.push(seg);
        self.inner.mark_bad(seg)
    }
    fn flush(&mut self) -> Result<(), FlashError> {
        self.inner.flush()
    }
    fn discard_hint(&mut self, seg: u32) {
        self.inner.discard_hint(seg)
    }
}

type E = Engine<StdPlatform, Flaky>;

fn opts() -> MountOptions {
    MountOptions { cache_nodes: 24, ..Default::default() }
}

fn fresh() -> E {
    let f = mkfs(Flaky::new(), &Default::default(), ts(0)).map_err(|e| e.0).expect("format");
    E::mount(f, opts()).map_err(|e| e.0).expect("mount")
}

fn new_file(fs: &mut E, name: &str) -> u64 {
    fs.create(ROOT_INO, name.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(1)).unwrap().ino
}

/// Write `data` at the end of the file in 4 KiB calls until a call fails; returns the error.
fn write_until_error(fs: &mut E, ino: u64, data: &[u8], rounds: usize) -> Option<Error> {
    for i in 0..rounds {
        if let Err(e) = fs.write(ino, (i * data.len()) as u64, data, ts(2)).and_then(|_| fs.fsync(ino)) {
            return Some(e);
        }
    }
    None
}

fn check_file(fs: &mut E, ino: u64, want: &[u8]) {
    let mut b = vec![0u8; want.len()];
    assert_eq!(fs.read(ino, 0, &mut b).unwrap(), want.len());
    assert!(b == want, "file content differs");
}

fn free_segments(fs: &E) -> u64 {
    fs.stats().free_segments
}

#[test]
fn transient_erase_error_fails_the_operation_and_retires_nothing() {
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    let mut rng = Rng::new(3);
    let mut kept = vec![0u8; 20_000];
    rng.fill(&mut kept);
    fs.write(a, 0, &kept, ts(2)).unwrap();
    fs.fsync(a).unwrap();
    let free_before = free_segments(&fs);
    // the next erase (when a head opens its next segment) fails once with a non-media error
    fs.flash().fail_erases = 1;
    let b = new_file(&mut fs, "b");
    let chunk = vec![7u8; 4096];
    let err = write_until_error(&mut fs, b, &chunk, 200);
    assert_eq!(fs.flash().io_errors_returned, 1, "the injected erase error was reached");
    assert_eq!(err, Some(Error::Io), "the operation that hit the erase error fails with EIO");
    assert!(fs.flash().mark_bad_calls.is_empty(), "no block marked bad: {:?}", fs.flash().mark_bad_calls);
    assert_eq!(fs.stats().retired, 0, "nothing retired: {:?}", fs.stats());
    assert!(fs.is_failed(), "fail-stop after an unexplained erase error");
    assert_eq!(fs.write(a, 0, b"x", ts(3)).unwrap_err(), Error::ReadOnly);
    let faults = fs.fault_stats();
    assert_eq!((faults.io_errors, faults.erase_failures), (1, 0), "{faults:?}");
    // the segment whose erase failed was not leaked as reserved
    assert!(free_segments(&fs) + 2 >= free_before, "free segments {} -> {}", free_before, free_segments(&fs));
    // after a remount (the error is gone) everything fsync'd is there and nothing is bad
    let f = fs.into_flash();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    check_file(&mut fs, a, &kept);
    assert!(fs.flash().mark_bad_calls.is_empty());
    assert!((0..96).all(|s| !fs.flash().inner.is_bad(s).unwrap()), "no bad block on the medium");
    ferrofs_engine_tests::assert_fsck(&mut fs);
    // and it writes again
    let c = new_file(&mut fs, "c");
    assert_eq!(write_until_error(&mut fs, c, &chunk, 40), None);
}

#[test]
fn read_only_device_erases_retire_nothing() {
    // -EROFS on every erase and write (an MTD without MTD_WRITEABLE mounted read-write):
    // the first failure stops the engine; no segment is marked bad, none is consumed.
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    fs.write(a, 0, &[5u8; 10_000], ts(2)).unwrap();
    fs.fsync(a).unwrap();
    fs.flash().erases_always_fail = true;
    fs.flash().writes_always_fail = true;
    let err = write_until_error(&mut fs, a, &[9u8; 4096], 400);
    assert!(matches!(err, Some(Error::Io)), "{err:?}");
    assert!(fs.is_failed());
    assert!(fs.flash().mark_bad_calls.is_empty(), "{:?}", fs.flash().mark_bad_calls);
    assert!(fs.flash().io_errors_returned <= 2, "it stopped at the first error: {}", fs.flash().io_errors_returned);
    assert_eq!(fs.stats().retired, 0);
    let mut f = fs.into_flash();
    f.erases_always_fail = false;
    f.writes_always_fail = false;
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    check_file(&mut fs, a, &[5u8; 10_000]);
    ferrofs_engine_tests::assert_fsck(&mut fs);
}

#[test]
fn transient_program_error_is_fail_stop_without_retiring() {
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    fs.write(a, 0, &[1u8; 12_000], ts(2)).unwrap();
    fs.fsync(a).unwrap();
    fs.flash().fail_writes = 1;
    let err = write_until_error(&mut fs, a, &[2u8; 4096], 50);
    assert_eq!(err, Some(Error::Io));
    assert!(fs.is_failed());
    assert_eq!(fs.write(a, 0, b"x", ts(3)).unwrap_err(), Error::ReadOnly);
    assert!(fs.flash().mark_bad_calls.is_empty());
    let st = fs.fault_stats();
    assert_eq!((st.io_errors, st.program_failures), (1, 0), "{st:?}");
    let f = fs.into_flash();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    let mut b = vec![0u8; 12_000];
    fs.read(a, 0, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 1));
    assert!((0..96).all(|s| !fs.flash().inner.is_bad(s).unwrap()));
    ferrofs_engine_tests::assert_fsck(&mut fs);
}

#[test]
fn corrected_reads_are_counted_and_scrubbed() {
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    let mut rng = Rng::new(5);
    let mut data = vec![0u8; 60_000];
    rng.fill(&mut data);
    fs.write(a, 0, &data, ts(2)).unwrap();
    fs.sync().unwrap();
    // fill the heads' current segments so that the file's segments are full (GC candidates)
    let pad = new_file(&mut fs, "pad");
    fs.write(pad, 0, &vec![3u8; 200_000], ts(2)).unwrap();
    fs.sync().unwrap();
    fs.flash().corrected = (0..96).collect();
    check_file(&mut fs, a, &data);
    let st = fs.fault_stats();
    assert!(st.corrected_reads > 0, "{st:?}");
    fs.flash().corrected.clear();
    for _ in 0..40 {
        fs.gc_step(true).unwrap();
    }
    let st = fs.fault_stats();
    assert!(st.scrubbed_segments > 0, "a segment with corrected reads was scrubbed: {st:?}");
    check_file(&mut fs, a, &data);
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    check_file(&mut fs, a, &data);
    ferrofs_engine_tests::assert_fsck(&mut fs);
}

#[test]
fn media_erase_failure_retires_and_keeps_serving() {
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    let mut rng = Rng::new(9);
    let mut data = vec![0u8; 100_000];
    // these log segments (past the superblock and checkpoint areas) fail their next erase once
    for s in 16..60 {
        fs.flash().inner.fail_erase.push(s);
    }
    for _ in 0..6 {
        rng.fill(&mut data);
        fs.write(a, 0, &data, ts(3)).unwrap();
        fs.fsync(a).unwrap();
    }
    assert!(!fs.is_failed());
    let st = fs.fault_stats();
    assert!(st.erase_failures >= 1 && st.io_errors == 0, "{st:?}");
    assert_eq!(fs.stats().retired, st.erase_failures);
    let f = fs.unmount().map_err(|e| e.0).unwrap();
    assert_eq!(f.mark_bad_calls.len() as u64, st.erase_failures);
    let mut fs = E::mount(f, opts()).map_err(|e| e.0).unwrap();
    check_file(&mut fs, a, &data);
    ferrofs_engine_tests::assert_fsck(&mut fs);
}

#[test]
fn worn_out_checkpoint_block_mounts_read_only() {
    // Checkpoint area A is segment 2 (superblocks 0 and 1, area B 3). Its next erase fails and
    // it is marked bad, so every later erase of it fails too (a worn-out block). Every mount
    // writes its first checkpoint to the other area than the newest one, so every second mount
    // must erase segment 2: it then serves the recovered filesystem read-only instead of
    // failing with EIO.
    let mut fs = fresh();
    let a = new_file(&mut fs, "a");
    let mut data = vec![0u8; 8000];
    Rng::new(1).fill(&mut data);
    fs.write(a, 0, &data, ts(2)).unwrap();
    fs.fsync(a).unwrap();
    fs.flash().inner.fail_erase.push(2);
    let mut f = fs.into_flash();
    let mut read_only_mounts = 0;
    for round in 0..4 {
        let mut fs = match E::mount(f, opts()) {
            Ok(fs) => fs,
            Err((e, _)) => panic!("mount {round} failed: {e:?}"),
        };
        check_file(&mut fs, a, &data);
        if fs.is_failed() {
            read_only_mounts += 1;
            assert_eq!(fs.write(a, 0, b"x", ts(3)).unwrap_err(), Error::ReadOnly);
            assert!(fs.fault_stats().erase_failures >= 1 || fs.flash().inner.is_bad(2).unwrap());
        } else {
            fs.write(a, 0, &data, ts(3)).unwrap();
            fs.fsync(a).unwrap();
        }
        f = fs.into_flash();
    }
    assert!(read_only_mounts >= 1, "a mount needed the worn-out block");
    assert!(f.inner.is_bad(2).unwrap());
}
