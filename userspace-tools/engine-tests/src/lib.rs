//! Test support for the ferrofs engine: a small in-memory NAND with power cuts, a PRNG and
//! helpers shared by the integration tests.
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, missing_docs)]

pub mod crashcheck;
pub mod modelrun;
pub mod simcut;
pub mod snapshot;

use ferrofs_engine::std_platform::StdPlatform;
use ferrofs_engine::{Engine, Error, Flash, FlashError, FlashKind, FormatOptions, Geometry, PairInfo, Pairing, ReadStatus, Timespec};
pub use ferrofs_flashsim::{CacheLoss, WriteCache};

/// The engine over [`RamFlash`].
pub type Fs = Engine<StdPlatform, RamFlash>;

/// An in-memory NAND (or block device) obeying the medium rules of `Flash`:
/// erased = 0xFF, in-order programming inside a segment, no reprogramming (NAND),
/// sequential writes (block). It can cut power after a number of operations, tearing the
/// write in progress. As MLC NAND ([`RamFlash::new_mlc`]) its pages share cells as a
/// [`Pairing`] says: a cut while a page is programmed (a torn write) also destroys the
/// programmed pages sharing its cells (reads of them fail `Uncorrectable`).
#[derive(Clone)]
pub struct RamFlash {
    geo: Geometry,
    data: Vec<u8>,
    /// Next programmable offset per segment.
    wp: Vec<u32>,
    bad: Vec<bool>,
    /// Erase counts.
    pub erases: Vec<u32>,
    /// Remaining operations before the power cut (None = no cut planned).
    pub cut_in: Option<u64>,
    /// Power is off: every operation fails with PowerCut.
    pub dead: bool,
    /// Segments whose reads report `Corrected`.
    pub corrected: Vec<u32>,
    /// Segments whose next erase fails.
    pub fail_erase: Vec<u32>,
    /// Counters: bytes programmed, erases, reads.
    pub programmed: u64,
    /// Number of write operations.
    pub writes: u64,
    /// A cut during a write tears it (some whole units, then half a unit, reach the medium);
    /// when false, the interrupted write leaves nothing.
    pub tear: bool,
    /// Number of read operations so far.
    pub reads: u64,
    /// When set, every read is recorded here: (segment, offset, length).
    pub read_log: Option<Vec<(u32, u32, usize)>>,
    /// The last read: (segment, offset, length).
    pub last_read: (u32, u32, usize),
    /// Read-error injection: the read after this many more reads fails once with
    /// `read_error` (None = no injection planned).
    pub fail_read_in: Option<u64>,
    /// The error an injected read failure reports (`Uncorrectable` or `Io`).
    pub read_error: FlashError,
    /// Whether the planned read failure happened.
    pub read_failed: bool,
    /// The volatile write cache of a block device and what a power cut loses of it (None:
    /// every completed write is durable).
    pub cache: Option<(WriteCache, CacheLoss)>,
    /// MLC NAND: how the pages of a segment really share cells (None: they do not).
    pub cells: Option<Pairing>,
    /// What [`Flash::pairing`] reports (a wrong one shows what the engine's padding is for).
    pub reported: Option<Pairing>,
    /// Pages destroyed by a cut during the program of a page sharing their cells: (segment,
    /// page), until the segment is erased.
    pub lost_pages: Vec<(u32, u32)>,
    /// Pages destroyed that way so far (never reset).
    pub pair_losses: u64,
}

impl RamFlash {
    /// A new, fully erased NAND.
    pub fn new_nand(segment_size: u32, segment_count: u32, write_unit: u32) -> Self {
        Self::with_kind(FlashKind::Nand, segment_size, segment_count, write_unit)
    }

    /// A new medium of the given kind.
    pub fn with_kind(kind: FlashKind, segment_size: u32, segment_count: u32, write_unit: u32) -> Self {
        let geo = Geometry { kind, segment_size, segment_count, write_unit, preferred_write: write_unit * 2 };
        let n = segment_size as usize * segment_count as usize;
        RamFlash {
            geo,
            data: vec![0xFF; n],
            wp: vec![0; segment_count as usize],
            bad: vec![false; segment_count as usize],
            erases: vec![0; segment_count as usize],
            cut_in: None,
            dead: false,
            corrected: Vec::new(),
            fail_erase: Vec::new(),
            programmed: 0,
            writes: 0,
            tear: true,
            reads: 0,
            read_log: None,
            last_read: (0, 0, 0),
            fail_read_in: None,
            read_error: FlashError::Uncorrectable,
            read_failed: false,
            cache: None,
            cells: None,
            reported: None,
            lost_pages: Vec::new(),
            pair_losses: 0,
        }
    }

    /// A new, fully erased MLC NAND whose pages pair as `pairing` says, and which reports it.
    pub fn new_mlc(segment_size: u32, segment_count: u32, write_unit: u32, pairing: Pairing) -> Self {
        let mut f = Self::with_kind(FlashKind::MlcNand, segment_size, segment_count, write_unit);
        f.cells = Some(pairing);
        f.reported = Some(pairing);
        f
    }

    /// MLC: a program of page `page` of `seg` was interrupted: destroy every programmed page
    /// (one not all 0xFF) before it that shares its cells.
    fn pair_damage(&mut self, seg: u32, page: u32) {
        let Some(p) = self.cells.filter(|_| self.geo.kind == FlashKind::MlcNand) else { return };
        let wu = self.geo.write_unit;
        let pages = self.geo.segment_size / wu;
        let Some(i) = p.info(page, pages) else { return };
        for g in 0..i.group {
            if let Some(l) = p.wunit(PairInfo { pair: i.pair, group: g }, pages) {
                let at = seg as usize * self.geo.segment_size as usize + (l * wu) as usize;
                let programmed = self.data[at..at + wu as usize].iter().any(|&b| b != 0xFF);
                if l < page && programmed && !self.lost_pages.contains(&(seg, l)) {
                    self.lost_pages.push((seg, l));
                    self.pair_losses += 1;
                }
            }
        }
    }

    /// Give this block device a volatile write cache (sectors of 512 bytes) whose contents a
    /// power cut loses as `loss` says. Raw NAND has none: a completed program is durable.
    pub fn set_write_cache(&mut self, loss: CacheLoss) {
        assert_eq!(self.geo.kind, FlashKind::Block, "only block devices have a write cache");
        match self.cache.as_mut() {
            Some(c) => c.1 = loss,
            None => self.cache = Some((WriteCache::new(512), loss)),
        }
    }

    /// Cut the power now, between operations (a crash after the last completed operation).
    pub fn power_cut(&mut self) {
        self.dead = true;
    }

    fn store(&mut self, at: usize, src: &[u8]) {
        match self.cache.as_mut() {
            Some((c, _)) => c.write(&mut self.data, at, src),
            None => self.data[at..at + src.len()].copy_from_slice(src),
        }
    }

    /// Present the same contents as another kind of medium (e.g. MLC NAND).
    pub fn set_kind(&mut self, kind: FlashKind) {
        self.geo.kind = kind;
    }

    /// Mark a segment bad (factory bad block).
    pub fn set_bad(&mut self, seg: u32) {
        self.bad[seg as usize] = true;
    }

    /// Flip the bits of `mask` in the byte at `off` of segment `seg` (corruption tests).
    pub fn flip(&mut self, seg: u32, off: u32, mask: u8) {
        let i = seg as usize * self.geo.segment_size as usize + off as usize;
        if let Some(b) = self.data.get_mut(i) {
            *b ^= mask;
        }
    }

    /// The raw contents of the medium.
    pub fn raw(&self) -> &[u8] {
        &self.data
    }

    /// Whether the byte at `off` of segment `seg` was ever programmed (is not 0xFF).
    pub fn is_programmed(&self, seg: u32, off: u32) -> bool {
        let i = seg as usize * self.geo.segment_size as usize + off as usize;
        self.data.get(i).is_some_and(|&b| b != 0xFF)
    }

    /// Restore power (after a cut): the medium keeps what was programmed, less what the write
    /// cache (if any) loses of the writes since the last flush ([`CacheLoss`]). On a block device
    /// the write positions are forgotten, as `BlockSim::reboot` does: a block device has no
    /// write pointer, and the first write of a segment after a power cycle may start anywhere
    /// (a mount closes the tail a head left, from where its recovery found the end, over a
    /// fill the cut interrupted).
    pub fn power_on(&mut self) {
        if let (true, Some((c, loss))) = (self.dead, self.cache.as_mut()) {
            c.power_loss(&mut self.data, *loss);
        }
        self.dead = false;
        self.cut_in = None;
        if self.geo.kind == FlashKind::Block {
            self.wp.fill(0);
        }
    }

    fn tick(&mut self) -> Result<bool, FlashError> {
        if self.dead {
            return Err(FlashError::PowerCut);
        }
        if let Some(n) = self.cut_in {
            if n == 0 {
                self.dead = true;
                return Ok(true);
            }
            self.cut_in = Some(n - 1);
        }
        Ok(false)
    }

    fn range(&self, seg: u32, off: u32, len: usize) -> Result<std::ops::Range<usize>, FlashError> {
        if seg >= self.geo.segment_count || off as usize + len > self.geo.segment_size as usize {
            return Err(FlashError::InvalidRequest);
        }
        let base = seg as usize * self.geo.segment_size as usize + off as usize;
        Ok(base..base + len)
    }
}

impl Flash for RamFlash {
    fn geometry(&self) -> Geometry {
        self.geo
    }

    fn pairing(&self) -> Option<Pairing> {
        self.reported
    }

    fn read(&mut self, seg: u32, offset: u32, buf: &mut [u8]) -> Result<ReadStatus, FlashError> {
        if self.dead {
            return Err(FlashError::PowerCut);
        }
        let r = self.range(seg, offset, buf.len())?;
        self.reads += 1;
        if let Some(l) = self.read_log.as_mut() {
            l.push((seg, offset, buf.len()));
        }
        self.last_read = (seg, offset, buf.len());
        if let Some(n) = self.fail_read_in {
            if n == 0 {
                self.fail_read_in = None;
                self.read_failed = true;
                buf.fill(0);
                return Err(self.read_error);
            }
            self.fail_read_in = Some(n - 1);
        }
        let wu = self.geo.write_unit;
        let (first, last) = (offset / wu, (offset + buf.len().max(1) as u32 - 1) / wu);
        if self.lost_pages.iter().any(|&(s, p)| s == seg && (first..=last).contains(&p)) {
            return Err(FlashError::Uncorrectable);
        }
        buf.copy_from_slice(&self.data[r]);
        if self.corrected.contains(&seg) {
            return Ok(ReadStatus::Corrected);
        }
        Ok(ReadStatus::Clean)
    }

    fn write(&mut self, seg: u32, offset: u32, buf: &[u8]) -> Result<(), FlashError> {
        let wu = self.geo.write_unit;
        if offset % wu != 0 || buf.len() as u32 % wu != 0 {
            return Err(FlashError::InvalidRequest);
        }
        let r = self.range(seg, offset, buf.len())?;
        if self.bad[seg as usize] {
            return Err(FlashError::InvalidRequest);
        }
        if offset < self.wp[seg as usize] {
            return Err(FlashError::InvalidRequest);
        }
        if matches!(self.geo.kind, FlashKind::Nand | FlashKind::MlcNand) && self.data[r.clone()].iter().any(|&b| b != 0xFF) {
            return Err(FlashError::InvalidRequest);
        }
        let cut = self.tick()?;
        if cut && !self.tear {
            return Err(FlashError::PowerCut);
        }
        if cut {
            // torn write: some whole units then a half-programmed one
            let units = buf.len() / wu as usize;
            let keep = (self.writes as usize % (units + 1)) * wu as usize;
            let half = (wu as usize / 2).min(buf.len() - keep);
            let end = (keep + half).min(buf.len());
            self.store(r.start, &buf[..end]);
            if end > keep {
                // the unit at `keep` was being programmed (everything before it is)
                self.pair_damage(seg, (offset + keep as u32) / wu);
            }
            return Err(FlashError::PowerCut);
        }
        self.store(r.start, buf);
        self.wp[seg as usize] = offset + buf.len() as u32;
        self.programmed += buf.len() as u64;
        self.writes += 1;
        Ok(())
    }

    fn erase(&mut self, seg: u32) -> Result<(), FlashError> {
        let r = self.range(seg, 0, self.geo.segment_size as usize)?;
        if self.bad[seg as usize] {
            return Err(FlashError::EraseFailed);
        }
        if let Some(p) = self.fail_erase.iter().position(|&s| s == seg) {
            self.fail_erase.remove(p);
            return Err(FlashError::EraseFailed);
        }
        let cut = self.tick()?;
        if cut {
            // interrupted erase: half the block erased
            let half = r.start + (r.end - r.start) / 2;
            self.data[r.start..half].fill(0xFF);
            return Err(FlashError::PowerCut);
        }
        if matches!(self.geo.kind, FlashKind::Nand | FlashKind::MlcNand) {
            self.data[r].fill(0xFF);
        }
        self.lost_pages.retain(|&(s, _)| s != seg);
        self.wp[seg as usize] = 0;
        self.erases[seg as usize] += 1;
        Ok(())
    }

    fn is_bad(&mut self, seg: u32) -> Result<bool, FlashError> {
        Ok(*self.bad.get(seg as usize).ok_or(FlashError::InvalidRequest)?)
    }

    fn mark_bad(&mut self, seg: u32) -> Result<(), FlashError> {
        *self.bad.get_mut(seg as usize).ok_or(FlashError::InvalidRequest)? = true;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), FlashError> {
        if self.dead {
            return Err(FlashError::PowerCut);
        }
        if let Some((c, _)) = self.cache.as_mut() {
            c.flush();
        }
        Ok(())
    }
}

/// A [`Platform`](ferrofs_engine::Platform) whose allocations can be made to fail: the
/// engine over it behaves exactly as over [`StdPlatform`] until [`failalloc::arm`] plans the
/// failure of the n-th next allocation (a growth of a vector beyond its capacity, or with
/// [`failalloc::any_growth`] any growth), which then returns `NoMem` once. Counters and plans are per thread (tests run in parallel).
pub mod failalloc {
    use std::cell::Cell;

    use ferrofs_engine::{Error, FallibleVec, Platform};

    thread_local! {
        static FAIL_IN: Cell<Option<u64>> = const { Cell::new(None) };
        static COUNT: Cell<u64> = const { Cell::new(0) };
        static FIRED: Cell<bool> = const { Cell::new(false) };
        static ANY_GROWTH: Cell<bool> = const { Cell::new(false) };
    }

    /// Count (and fail) every growth of a vector, not only those beyond its capacity: the
    /// `FallibleVec` contract lets any growth fail, whatever the allocator keeps in reserve.
    pub fn any_growth(on: bool) {
        ANY_GROWTH.with(|c| c.set(on));
    }

    /// Plan the failure of the allocation after `n` more (None: no failure); clears `fired`.
    pub fn arm(n: Option<u64>) {
        FAIL_IN.with(|c| c.set(n));
        FIRED.with(|c| c.set(false));
    }

    /// Allocations made on this thread so far.
    pub fn allocations() -> u64 {
        COUNT.with(|c| c.get())
    }

    /// Whether the planned failure happened.
    pub fn fired() -> bool {
        FIRED.with(|c| c.get())
    }

    fn grow<T>(v: &mut Vec<T>, add: usize) -> Result<(), Error> {
        if v.capacity() - v.len() >= add && (add == 0 || !ANY_GROWTH.with(|c| c.get())) {
            return Ok(());
        }
        COUNT.with(|c| c.set(c.get() + 1));
        let fail = FAIL_IN.with(|c| match c.get() {
            Some(0) => {
                c.set(None);
                true
            }
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        });
        if fail {
            if std::env::var_os("FERROFS_FAILALLOC_BT").is_some() {
                eprintln!("injected NoMem at:\n{}", std::backtrace::Backtrace::force_capture());
            }
            FIRED.with(|c| c.set(true));
            return Err(Error::NoMem);
        }
        v.try_reserve(add).map_err(|_| Error::NoMem)
    }

    /// The failing platform.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct FailPlatform;

    /// Its vector.
    #[derive(Debug, Clone, Default)]
    pub struct FailVec<T>(pub Vec<T>);

    impl<T> FallibleVec<T> for FailVec<T> {
        fn new() -> Self {
            FailVec(Vec::new())
        }
        fn try_push(&mut self, v: T) -> Result<(), Error> {
            grow(&mut self.0, 1)?;
            self.0.push(v);
            Ok(())
        }
        fn pop(&mut self) -> Option<T> {
            self.0.pop()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn as_slice(&self) -> &[T] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [T] {
            &mut self.0
        }
        fn truncate(&mut self, len: usize) {
            self.0.truncate(len);
        }
        fn try_extend_from_slice(&mut self, s: &[T]) -> Result<(), Error>
        where
            T: Copy,
        {
            grow(&mut self.0, s.len())?;
            self.0.extend_from_slice(s);
            Ok(())
        }
        fn try_resize(&mut self, len: usize, v: T) -> Result<(), Error>
        where
            T: Copy,
        {
            if len > self.0.len() {
                let add = len - self.0.len();
                grow(&mut self.0, add)?;
            }
            self.0.resize(len, v);
            Ok(())
        }
    }

    impl Platform for FailPlatform {
        type Vec<T> = FailVec<T>;
    }

    /// The engine over [`RamFlash`](crate::RamFlash) with the failing platform.
    pub type FailFs = ferrofs_engine::Engine<FailPlatform, crate::RamFlash>;
}

/// Create arguments of a regular file, mode 0644, owned by root.
pub fn reg() -> ferrofs_engine::CreateArgs {
    ferrofs_engine::CreateArgs { mode: ferrofs_engine::format::S_IFREG | 0o644, ..Default::default() }
}

/// A time stamp `t` seconds after an arbitrary epoch.
pub fn ts(t: i64) -> Timespec {
    Timespec { sec: 1_700_000_000 + t, nsec: 0 }
}

/// A small deterministic PRNG (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Fill `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf.iter_mut() {
            *b = self.next() as u8;
        }
    }
}

/// The data alignment the suites format with when `FERROFS_TEST_ALIGNED` is set (to anything
/// but `0`): aligned data (format.md section 8) on every volume that can hold it, chosen as
/// `mkfs.ferrofs --data-align` would: 4096 on a block device, the write unit on NAND (at least
/// 512, at most 4096). NOR never takes the bit (format refuses it), so a NOR volume stays
/// unaligned; `None` when the variable is unset or `0` (the default volumes).
pub fn test_data_align(geo: &Geometry) -> Option<u32> {
    match std::env::var("FERROFS_TEST_ALIGNED") {
        Ok(v) if v != "0" => {}
        _ => return None,
    }
    Some(match geo.kind {
        FlashKind::Nor => 0,
        FlashKind::Block => 4096,
        _ => geo.write_unit.clamp(512, 4096),
    })
}

/// `Engine::format` as the suites call it: `fo` as given, plus the data alignment of
/// [`test_data_align`] when `FERROFS_TEST_ALIGNED` asks for it and `fo` names none (a test that
/// sets `data_align` itself keeps its own).
pub fn mkfs<F: Flash>(flash: F, fo: &FormatOptions, now: Timespec) -> Result<F, (Error, F)> {
    let mut fo = *fo;
    if fo.data_align == 0 {
        if let Some(a) = test_data_align(&flash.geometry()) {
            fo.data_align = a;
        }
    }
    Engine::<StdPlatform, F>::format(flash, &fo, now)
}

/// Format a fresh RamFlash and mount it.
pub fn fresh(segment_size: u32, segments: u32, write_unit: u32) -> Fs {
    let f = RamFlash::new_nand(segment_size, segments, write_unit);
    let f = mkfs(f, &Default::default(), ts(0)).map_err(|e| e.0).expect("format");
    Fs::mount(f, Default::default()).map_err(|e| e.0).expect("mount")
}

/// Unmount cleanly and mount again.
pub fn remount(fs: Fs) -> Fs {
    let f = fs.unmount().map_err(|e| e.0).expect("unmount");
    Fs::mount(f, Default::default()).map_err(|e| e.0).expect("mount")
}

/// Drop without unmounting (unflushed buffers are lost) and mount again.
pub fn crash_remount(fs: Fs) -> Fs {
    let f = fs.into_flash();
    Fs::mount(f, Default::default()).map_err(|e| e.0).expect("mount after crash")
}

/// Assert the index and the segment table agree.
pub fn assert_consistent(fs: &mut Fs) {
    assert_fsck(fs);
}

/// Run the engine's fsck on any flash and assert it finds nothing, and that the segment
/// table's summary counters equal a recount.
pub fn assert_fsck<F: Flash>(fs: &mut Engine<StdPlatform, F>) -> ferrofs_engine::FsckReport {
    let r = fs.fsck().expect("fsck");
    assert_eq!(r.problems, 0, "fsck: {r:?}");
    assert_eq!(fs.check_counters(), None, "segment-table counters differ from a recount (mask)");
    r
}

/// The crash-consistency workload shared by the power-cut tests.
pub mod crashload {
    use std::collections::BTreeMap;

    use ferrofs_engine::format::S_IFREG;
    use ferrofs_engine::std_platform::StdPlatform;
    use ferrofs_engine::{CreateArgs, Engine, Error, Flash, SetAttr, ROOT_INO};

    use crate::{ts, Rng};

    /// Visible state: `path` -> file contents, `path@x` -> value of xattr `user.x`,
    /// `dir/` -> empty for directories (one level below the root).
    pub type State = BTreeMap<String, Vec<u8>>;

    /// One phase of the crash workload (each is followed by fsync).
    #[allow(missing_docs)]
    #[derive(Clone, Debug)]
    pub enum Op {
        Create(String),
        Write(String, u64, usize, u8),
        Truncate(String, u64),
        Rename(String, String),
        Unlink(String),
        Mkdir(String),
        Rmdir(String),
        SetXattr(String, u8, usize),
        RemoveXattr(String),
        Link(String, String),
        Symlink(String, String),
        Sync,
        Gc,
    }

    /// The model: names -> file identities (hard links share one), directories, symlinks.
    #[derive(Clone, Debug, Default)]
    pub struct Model {
        paths: BTreeMap<String, u32>,
        files: BTreeMap<u32, (Vec<u8>, Option<Vec<u8>>)>,
        dirs: BTreeMap<String, ()>,
        links: BTreeMap<String, Vec<u8>>,
        next: u32,
    }

    impl Model {
        /// The model from a visible state of plain files (no hard links).
        pub fn from_state(s: &State) -> Model {
            let mut m = Model::default();
            for (k, v) in s {
                if let Some(d) = k.strip_suffix('/') {
                    m.dirs.insert(d.to_string(), ());
                } else if let Some(p) = k.strip_suffix("@l") {
                    m.links.insert(p.to_string(), v.clone());
                } else if !k.ends_with("@x") {
                    m.next += 1;
                    let x = s.get(&format!("{k}@x")).cloned();
                    m.files.insert(m.next, (v.clone(), x));
                    m.paths.insert(k.clone(), m.next);
                }
            }
            m
        }

        /// The visible state.
        pub fn state(&self) -> State {
            let mut s = State::new();
            for (p, id) in &self.paths {
                let (c, x) = &self.files[id];
                s.insert(p.clone(), c.clone());
                if let Some(x) = x {
                    s.insert(format!("{p}@x"), x.clone());
                }
            }
            for d in self.dirs.keys() {
                s.insert(format!("{d}/"), Vec::new());
            }
            for (l, t) in &self.links {
                s.insert(format!("{l}@l"), t.clone());
            }
            s
        }

        fn file_paths(&self) -> Vec<String> {
            self.paths.keys().cloned().collect()
        }

        fn taken(&self, p: &str) -> bool {
            self.paths.contains_key(p) || self.dirs.contains_key(p) || self.links.contains_key(p)
        }

        fn dir_empty(&self, d: &str) -> bool {
            let pre = format!("{d}/");
            !self.paths.keys().chain(self.links.keys()).any(|k| k.starts_with(&pre))
        }

        fn drop_name(&mut self, p: &str) {
            if let Some(id) = self.paths.remove(p) {
                if !self.paths.values().any(|v| *v == id) {
                    self.files.remove(&id);
                }
            }
        }

        /// Apply a phase.
        pub fn apply(&mut self, op: &Op) {
            match op {
                Op::Create(n) => {
                    self.next += 1;
                    self.files.insert(self.next, (Vec::new(), None));
                    self.paths.insert(n.clone(), self.next);
                }
                Op::Write(n, off, len, b) => {
                    let c = &mut self.files.get_mut(&self.paths[n]).unwrap().0;
                    let end = *off as usize + len;
                    if c.len() < end {
                        c.resize(end, 0);
                    }
                    c[*off as usize..end].fill(*b);
                }
                Op::Truncate(n, sz) => self.files.get_mut(&self.paths[n]).unwrap().0.resize(*sz as usize, 0),
                Op::Rename(a, b) => {
                    let id = self.paths[a];
                    if self.paths.get(b) == Some(&id) {
                        return;
                    }
                    self.paths.remove(a);
                    self.drop_name(b);
                    self.paths.insert(b.clone(), id);
                }
                Op::Unlink(n) => self.drop_name(n),
                Op::Mkdir(d) => {
                    self.dirs.insert(d.clone(), ());
                }
                Op::Rmdir(d) => {
                    self.dirs.remove(d);
                }
                Op::SetXattr(n, b, len) => self.files.get_mut(&self.paths[n]).unwrap().1 = Some(vec![*b; *len]),
                Op::RemoveXattr(n) => self.files.get_mut(&self.paths[n]).unwrap().1 = None,
                Op::Link(a, b) => {
                    let id = self.paths[a];
                    self.paths.insert(b.clone(), id);
                }
                Op::Symlink(p, t) => {
                    self.links.insert(p.clone(), t.as_bytes().to_vec());
                }
                Op::Sync | Op::Gc => {}
            }
        }
    }

    /// A random element of `v` (None if empty).
    pub fn pick(rng: &mut Rng, v: &[String]) -> Option<String> {
        if v.is_empty() {
            None
        } else {
            Some(v[rng.below(v.len() as u64) as usize].clone())
        }
    }

    fn new_path(rng: &mut Rng, m: &Model, i: usize, prefix: &str) -> String {
        let d: Vec<String> = m.dirs.keys().cloned().collect();
        match pick(rng, &d) {
            Some(d) if rng.below(2) == 0 => format!("{d}/{prefix}{i}"),
            _ => format!("{prefix}{i}"),
        }
    }

    /// A deterministic workload of single-operation phases (files in the root and in
    /// subdirectories, renames across directories, hard links, symlinks, xattrs).
    pub fn workload(seed: u64) -> Vec<Op> {
        let mut rng = Rng::new(seed);
        let mut ops = Vec::new();
        let mut model = Model::default();
        for i in 0..90 {
            let r = rng.below(100);
            let fs_ = model.file_paths();
            let op = if fs_.len() < 3 || r < 12 {
                Op::Create(new_path(&mut rng, &model, i, "n"))
            } else if r < 40 {
                let n = pick(&mut rng, &fs_).unwrap();
                let off = rng.below(6) * 4096 + if rng.below(2) == 0 { 0 } else { rng.below(3000) };
                let len = 1 + rng.below(4096 - (off % 4096)) as usize;
                Op::Write(n, off, len, rng.below(250) as u8 + 1)
            } else if r < 46 {
                Op::Truncate(pick(&mut rng, &fs_).unwrap(), rng.below(20_000))
            } else if r < 57 {
                let a = pick(&mut rng, &fs_).unwrap();
                let b = if rng.below(3) == 0 { pick(&mut rng, &fs_).unwrap() } else { new_path(&mut rng, &model, i, "m") };
                if a == b || (model.taken(&b) && !model.paths.contains_key(&b)) {
                    continue;
                }
                Op::Rename(a, b)
            } else if r < 63 {
                Op::Unlink(pick(&mut rng, &fs_).unwrap())
            } else if r < 67 {
                let d = format!("d{}", rng.below(3));
                if model.dirs.contains_key(&d) {
                    if !model.dir_empty(&d) {
                        continue;
                    }
                    Op::Rmdir(d)
                } else if model.taken(&d) {
                    continue;
                } else {
                    Op::Mkdir(d)
                }
            } else if r < 73 {
                Op::SetXattr(pick(&mut rng, &fs_).unwrap(), rng.below(250) as u8 + 1, 1 + rng.below(200) as usize)
            } else if r < 76 {
                let with: Vec<String> = fs_.iter().filter(|f| model.files[&model.paths[*f]].1.is_some()).cloned().collect();
                match pick(&mut rng, &with) {
                    Some(f) => Op::RemoveXattr(f),
                    None => continue,
                }
            } else if r < 83 {
                let a = pick(&mut rng, &fs_).unwrap();
                let b = new_path(&mut rng, &model, i, "h");
                if model.taken(&b) {
                    continue;
                }
                Op::Link(a, b)
            } else if r < 87 {
                let p = new_path(&mut rng, &model, i, "s");
                if model.taken(&p) {
                    continue;
                }
                Op::Symlink(p, format!("target/{i}/{}", "x".repeat(rng.below(100) as usize)))
            } else if r < 94 {
                Op::Sync
            } else {
                Op::Gc
            };
            model.apply(&op);
            ops.push(op);
        }
        ops
    }

    fn resolve<F: Flash>(fs: &mut Engine<StdPlatform, F>, path: &str) -> Result<(u64, String), Error> {
        match path.split_once('/') {
            Some((d, n)) => Ok((fs.lookup(ROOT_INO, d.as_bytes())?.ino, n.to_string())),
            None => Ok((ROOT_INO, path.to_string())),
        }
    }

    /// Apply a phase to the filesystem, then fsync (or checkpoint).
    pub fn apply_fs<F: Flash>(fs: &mut Engine<StdPlatform, F>, op: &Op, t: i64) -> Result<(), Error> {
        fn look<F: Flash>(fs: &mut Engine<StdPlatform, F>, p: &str) -> Result<u64, Error> {
            let (d, n) = resolve(fs, p)?;
            Ok(fs.lookup(d, n.as_bytes())?.ino)
        }
        match op {
            Op::Create(p) => {
                let (d, n) = resolve(fs, p)?;
                fs.create(d, n.as_bytes(), &CreateArgs { mode: S_IFREG | 0o644, ..Default::default() }, ts(t))?;
            }
            Op::Write(p, off, len, b) => {
                let ino = look(fs, p)?;
                fs.write(ino, *off, &vec![*b; *len], ts(t))?;
            }
            Op::Truncate(p, sz) => {
                let ino = look(fs, p)?;
                fs.setattr(ino, &SetAttr { size: Some(*sz), ..Default::default() }, ts(t))?;
            }
            Op::Rename(a, b) => {
                let victim = look(fs, b).ok();
                let (da, na) = resolve(fs, a)?;
                let (db, nb) = resolve(fs, b)?;
                fs.rename(da, na.as_bytes(), db, nb.as_bytes(), 0, ts(t))?;
                if let Some(v) = victim {
                    fs.evict(v)?;
                }
            }
            Op::Unlink(p) => {
                let ino = look(fs, p)?;
                let (d, n) = resolve(fs, p)?;
                fs.unlink(d, n.as_bytes(), ts(t))?;
                fs.evict(ino)?;
            }
            Op::Mkdir(d) => {
                fs.mkdir(ROOT_INO, d.as_bytes(), 0o755, 0, 0, ts(t))?;
            }
            Op::Rmdir(d) => {
                let ino = fs.lookup(ROOT_INO, d.as_bytes())?.ino;
                fs.rmdir(ROOT_INO, d.as_bytes(), ts(t))?;
                fs.evict(ino)?;
            }
            Op::SetXattr(p, b, len) => {
                let ino = look(fs, p)?;
                fs.setxattr(ino, b"user.x", &vec![*b; *len], 0, ts(t))?;
            }
            Op::RemoveXattr(p) => {
                let ino = look(fs, p)?;
                fs.removexattr(ino, b"user.x", ts(t))?;
            }
            Op::Link(a, b) => {
                let ino = look(fs, a)?;
                let (d, n) = resolve(fs, b)?;
                fs.link(ino, d, n.as_bytes(), ts(t))?;
            }
            Op::Symlink(p, target) => {
                let (d, n) = resolve(fs, p)?;
                fs.symlink(d, n.as_bytes(), target.as_bytes(), 0, 0, ts(t))?;
            }
            Op::Sync => return fs.sync(),
            Op::Gc => {
                fs.gc_step(false)?;
            }
        }
        fs.fsync(ROOT_INO)
    }

    fn read_dir_into<P: ferrofs_engine::Platform, F: Flash>(fs: &mut Engine<P, F>, dir: u64, prefix: &str, s: &mut State) {
        let mut names = Vec::new();
        fs.readdir(dir, 0, &mut |n, ino, _, _| {
            names.push((String::from_utf8(n.to_vec()).unwrap(), ino));
            true
        })
        .unwrap();
        for (n, ino) in names {
            if n == "." || n == ".." {
                continue;
            }
            let i = fs.getattr(ino).unwrap();
            let path = format!("{prefix}{n}");
            if i.is_dir() {
                s.insert(format!("{path}/"), Vec::new());
                read_dir_into(fs, ino, &format!("{path}/"), s);
                continue;
            }
            if i.file_type() == Some(ferrofs_engine::FileType::Symlink) {
                let mut t = vec![0u8; 4096];
                let k = fs.readlink(ino, &mut t).unwrap();
                s.insert(format!("{path}@l"), t[..k].to_vec());
                continue;
            }
            let mut b = vec![0u8; i.size as usize];
            fs.read(ino, 0, &mut b).unwrap();
            s.insert(path.clone(), b);
            let mut x = vec![0u8; ferrofs_engine::format::XATTR_VALUE_MAX];
            match fs.getxattr(ino, b"user.x", &mut x) {
                Ok(k) => {
                    s.insert(format!("{path}@x"), x[..k].to_vec());
                }
                Err(Error::NoData) => {}
                Err(e) => panic!("getxattr: {e:?}"),
            }
        }
    }

    /// Read the visible state (root and its subdirectories).
    pub fn read_state<P: ferrofs_engine::Platform, F: Flash>(fs: &mut Engine<P, F>) -> State {
        let mut s = State::new();
        read_dir_into(fs, ROOT_INO, "", &mut s);
        s
    }

    /// Model states after each phase (index 0 = before the first).
    pub fn states(base: &State, ops: &[Op]) -> Vec<State> {
        let mut m = Model::from_state(base);
        let mut v = vec![m.state()];
        for op in ops {
            m.apply(op);
            v.push(m.state());
        }
        v
    }

    /// The shared oracle ([`crate::crashcheck::Oracle`]) of `ops` run on `fs` without a cut:
    /// the snapshot after each phase (every attribute; each checked against the model's state
    /// `all[k]`), every phase a persistence point (it ends with fsync or a checkpoint), and an
    /// interrupted `Write` may be partly done.
    pub fn live_oracle<F: Flash>(mut fs: Engine<StdPlatform, F>, ops: &[Op], all: &[State]) -> crate::crashcheck::Oracle {
        use crate::crashcheck::{Oracle, WriteShape};
        use crate::snapshot::snapshot;
        let mut o = Oracle { states: vec![snapshot(&mut fs).unwrap()], ..Default::default() };
        for (i, op) in ops.iter().enumerate() {
            let before = o.states.last().unwrap();
            o.partial.push(match op {
                Op::Write(p, off, len, _) => Some(WriteShape { ino: before.names[&format!("/{p}")], off: *off, end: off + *len as u64, intermediate: true }),
                _ => None,
            });
            o.persists.push(true);
            apply_fs(&mut fs, op, i as i64 + 10).unwrap();
            let got = read_state(&mut fs);
            assert!(got == all[i + 1], "phase {i} {op:?}: the engine differs from the model: {:?}", diff(&all[i + 1], &got));
            o.states.push(snapshot(&mut fs).unwrap());
        }
        o
    }

    /// Human-readable differences between two states.
    pub fn diff(exp: &State, got: &State) -> Vec<String> {
        let mut diffs = Vec::new();
        for (k, v) in exp.iter() {
            match got.get(k) {
                None => diffs.push(format!("missing {k}")),
                Some(g) if g != v => {
                    let first = g.iter().zip(v.iter()).position(|(a, b)| a != b);
                    diffs.push(format!("{k}: len {} vs expected {}, first difference {first:?}", g.len(), v.len()))
                }
                _ => {}
            }
        }
        for k in got.keys() {
            if !exp.contains_key(k) {
                diffs.push(format!("extra {k}"));
            }
        }
        diffs
    }
}

/// The places (segment, offset) of the SEGTAB records the newest checkpoint names, as the
/// engine's `checkpoint_metadata` reports them (every record that reads as a SEGTAB record
/// there), on a RamFlash of `seg_size`-byte segments.
pub fn named_segtab_places(fs: &mut Fs, seg_size: usize) -> std::collections::BTreeSet<(u32, u32)> {
    let mut places = Vec::new();
    fs.checkpoint_metadata(&mut |s, o, l| places.push((s, o, l))).unwrap();
    let raw = fs.flash().raw();
    places
        .iter()
        .filter(|&&(s, o, _)| {
            let r = &raw[s as usize * seg_size + o as usize..];
            r[0..2] == [0xA5, 0xF5] && r[2] == 9
        })
        .map(|&(s, o, _)| (s, o))
        .collect()
}
