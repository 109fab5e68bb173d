//! The cheap-FTL model: mtdblock's one-erase-block cache counts what it says, and a small run of
//! the three forms is sane.

use ferrofs_engine::flash::Flash;
use ferrofs_flashsim::{BlockConfig, BlockSim};
use ferrofs_simbench::cheapftl::{run_cheap, CheapConfig, MtdBlock, ERASE_BLOCK};

fn model() -> MtdBlock<BlockSim> {
    let sim = BlockSim::new(BlockConfig::with_layout(4096, ERASE_BLOCK as u32, 16)).expect("sim");
    MtdBlock::new(sim)
}

#[test]
fn sequential_whole_blocks_cost_one_writeback_each() {
    let mut m = model();
    // four erase blocks written front to back in 4 KiB writes, then a flush
    for a in (0..4 * ERASE_BLOCK).step_by(4096) {
        m.model_write(a, 4096);
    }
    assert_eq!(m.c.writebacks, 3, "{:?}", m.c);
    m.model_flush();
    assert_eq!(m.c.writebacks, 4, "{:?}", m.c);
    assert_eq!((m.c.writebacks_switch, m.c.writebacks_flush), (3, 1));
    assert_eq!(m.c.cache_fills, 4);
    // a flush of a clean cache writes nothing back
    m.model_flush();
    assert_eq!(m.c.writebacks, 4);
    assert_eq!(m.c.flushes, 2);
}

#[test]
fn alternating_blocks_cost_one_writeback_per_switch() {
    let mut m = model();
    // A, B, A, B, ... 10 writes: 9 switches, each writing the other block back
    for i in 0..10u64 {
        let block = i % 2;
        m.model_write(block * ERASE_BLOCK + (i / 2) * 4096, 4096);
    }
    assert_eq!(m.c.writebacks, 9, "{:?}", m.c);
    m.model_flush();
    assert_eq!(m.c.writebacks, 10);
    // a write that straddles two blocks switches once
    let mut m = model();
    m.model_write(ERASE_BLOCK - 4096, 8192);
    assert_eq!(m.c.writebacks, 1);
    assert_eq!(m.c.cache_fills, 2);
}

#[test]
fn reads_never_write_back_and_hit_the_cached_block() {
    let mut m = model();
    m.model_write(0, 4096);
    let before = m.c.nand_pages_read;
    // inside the cached block: served from the cache
    m.model_read(8192, 4096);
    assert_eq!(m.c.nand_pages_read, before);
    // another block: from NAND (2 KiB pages), and the cache stays dirty
    m.model_read(3 * ERASE_BLOCK, 4096);
    assert_eq!(m.c.nand_pages_read, before + 2);
    assert_eq!(m.c.writebacks, 0);
    m.model_flush();
    assert_eq!(m.c.writebacks, 1);
}

#[test]
fn flash_calls_reach_the_model() {
    let mut m = model();
    let buf = vec![0x5au8; 4096];
    m.write(0, 0, &buf).expect("write");
    m.write(1, 0, &buf).expect("write");
    m.flush().expect("flush");
    let mut out = vec![0u8; 4096];
    m.read(0, 0, &mut out).expect("read");
    assert_eq!(out, buf);
    assert_eq!((m.c.writes, m.c.writebacks, m.c.flushes, m.c.reads), (2, 2, 1, 1), "{:?}", m.c);
}

#[test]
fn small_run_of_the_forms_is_sane() {
    let mut cfg = CheapConfig::rig(3);
    cfg.device_mib = 32;
    cfg.amounts = [256 << 10, 1 << 20, 64 << 10];
    let r = run_cheap(&cfg, &mut |_| {}).expect("run");
    assert!(r.fsck_clean);
    assert_eq!(r.forms.len(), 3);
    let (s16, buf, s1) = (&r.forms[0], &r.forms[1], &r.forms[2]);
    assert_eq!((s16.fsyncs, buf.fsyncs, s1.fsyncs), (4, 1, 16));
    for f in &r.forms {
        // every fsync flushes the device, and a flush after writes writes a block back
        assert!(f.dev.flushes >= f.fsyncs, "{f:?}");
        assert!(f.dev.writebacks >= f.fsyncs, "{f:?}");
        assert!(f.engine_programmed >= f.user_bytes, "{f:?}");
        assert_eq!(f.dev.write_bytes, f.engine_programmed, "{f:?}");
    }
    // buffered: at least one write-back per erase block of log written
    assert!(buf.dev.writebacks >= buf.engine_programmed / ERASE_BLOCK, "{buf:?}");
}

/// An fsync after every write costs mtdblock one erase-block rewrite per fsync when no
/// checkpoint falls in between (no background thread here): the fsync's flush pads to the
/// segment's end when no data record would fit after it, so the next record does not dirty the
/// flushed block again. Without that (the padding written by the next record's write), an fsync
/// that crosses a segment end costs two.
#[test]
fn sync1_costs_one_rewrite_per_fsync_without_checkpoints() {
    let mut cfg = CheapConfig::rig(5);
    cfg.device_mib = 32;
    cfg.background = false;
    for (sync16, sync1) in [(256u64 << 10, 512u64 << 10), (300 << 10, 512 << 10), (1 << 20, 1 << 20)] {
        cfg.amounts = [sync16, 1 << 20, sync1];
        let r = run_cheap(&cfg, &mut |_| {}).expect("run");
        assert!(r.fsck_clean);
        let s1 = &r.forms[2];
        assert_eq!(s1.checkpoints, 0, "{s1:?}");
        assert_eq!(s1.dev.writebacks, s1.fsyncs, "sync16 {sync16}, sync1 {sync1}: {s1:?}");
    }
}

/// With the background thread (the rig's default run at several timings): sync1 still costs one
/// erase-block rewrite per fsync. The periodic commit on a block device flushes only records that
/// waited a whole `commit=` interval without a flush (src/bg.rs, mirrored in the model), so it
/// never lands between an fsync's write-back and the fsync's own flush, which made mtdblock write
/// that block back twice (the rig's 65 erases for 64 fsyncs).
#[test]
fn sync1_costs_one_rewrite_per_fsync_with_the_background_thread() {
    let mut worst = (0u64, 0u64, 0u32, 0u32);
    for gap in [0u32, 1, 2, 3, 5, 6, 7] {
        for call_ms in [0.0, 1.0, 2.0] {
            let mut cfg = CheapConfig::rig(1);
            cfg.gap_seconds = gap;
            cfg.call_ms = call_ms;
            let r = run_cheap(&cfg, &mut |_| {}).expect("run");
            let s1 = &r.forms[2];
            if s1.dev.writebacks > s1.fsyncs && s1.dev.writebacks - s1.fsyncs > worst.0 {
                worst = (s1.dev.writebacks - s1.fsyncs, s1.fsyncs, gap, call_ms as u32);
            }
        }
    }
    assert_eq!(worst.0, 0, "extra write-backs {} over {} fsyncs at gap {} s, call {} ms", worst.0, worst.1, worst.2, worst.3);
}
