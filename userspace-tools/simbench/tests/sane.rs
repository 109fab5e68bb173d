//! Tiny runs of every experiment: the figures must be sane (not timed).

use ferrofs_simbench::{check_sane, markdown, run_mount, run_wa, MountConfig, Pattern, Report, RunLength, WaConfig};

fn wa(pattern: Pattern, fill: f64) -> ferrofs_simbench::WaResult {
    let cfg = WaConfig {
        device_mib: 8,
        fill,
        pattern,
        warmup_device_multiples: 1.0,
        measure_device_multiples: 0.5,
        file_size: 256 * 1024,
        seed: 7,
        cache_nodes: 0,
    };
    run_wa(&cfg).expect("wa run")
}

fn report(wa: Vec<ferrofs_simbench::WaResult>, mount: Vec<ferrofs_simbench::MountResult>) -> Report {
    Report { quick: true, page_size: 2048, erase_block: 131072, wa, mount }
}

#[test]
fn wa_uniform_low_fill_is_sane() {
    let r = wa(Pattern::Uniform, 0.5);
    assert!(r.wa >= 1.0, "{r:?}");
    assert!(r.erases > 0, "{r:?}");
    assert!(r.wa_first_half >= 1.0 && r.wa_second_half >= 1.0, "{r:?}");
    assert!((r.fill_actual - 0.5).abs() < 0.1, "{r:?}");
    assert_eq!(r.greedy_bound, 2.0);
    check_sane(&report(vec![r], vec![])).expect("sane");
}

#[test]
fn wa_grows_with_fill() {
    let lo = wa(Pattern::Uniform, 0.5);
    let hi = wa(Pattern::Uniform, 0.95);
    assert!(hi.wa > lo.wa, "WA at 95 % ({}) not above WA at 50 % ({})", hi.wa, lo.wa);
    assert!(hi.erases_per_user_mib > lo.erases_per_user_mib);
    check_sane(&report(vec![lo, hi], vec![])).expect("sane");
}

#[test]
fn wa_skewed_is_sane() {
    let r = wa(Pattern::Skewed8020, 0.8);
    check_sane(&report(vec![r.clone()], vec![])).expect("sane");
    let md = markdown(&report(vec![r], vec![]));
    assert!(md.contains("| 80/20 | 80 %"), "{md}");
}

#[test]
fn mount_after_clean_unmount_replays_nothing() {
    let cfg = MountConfig { device_mib: 8, prefill: 0.5, run: RunLength::Ops(1500), seed: 3 };
    let m = run_mount(&cfg).expect("mount run");
    assert_eq!(m.len(), 2);
    let (cut, clean) = (&m[0], &m[1]);
    assert_eq!(cut.case, "power-cut");
    assert_eq!(clean.case, "clean-unmount");
    assert_eq!(cut.ops, clean.ops);
    assert!(clean.replayed_records <= 2, "{clean:?}");
    assert_eq!(clean.log_bytes_since_checkpoint, 0);
    assert!(cut.fsynced_data_ok && clean.fsynced_data_ok, "{m:?}");
    assert!(cut.mount_bytes_read > 0 && clean.mount_bytes_read > 0);
    let rep = report(vec![], m);
    check_sane(&rep).expect("sane");
    let json = serde_json::to_string(&rep).expect("json");
    assert!(json.contains("\"replayed_records\""));
}

#[test]
fn meta_run_is_sane() {
    use ferrofs_simbench::meta::{meta_markdown, run_meta, MetaConfig};
    let cfg = MetaConfig { device_mib: 16, dirs: 4, files_per_dir: 50, stat_rounds: 1, seed: 5 };
    let r = run_meta(&cfg).expect("meta run");
    let ops: Vec<&str> = r.phases.iter().map(|p| p.op.as_str()).collect();
    assert_eq!(ops, ["mkdir", "create", "stat", "readdir_entries", "lookup", "readdir_entries_cold", "lookup_cold", "rename", "unlink", "rmdir"]);
    let readdir = &r.phases[3];
    // 50 files and . and .. per directory
    assert_eq!(readdir.ops, 4 * 52);
    // the rig's read cache (4 MiB) still holds the pages the creates wrote: nothing is read
    assert_eq!(readdir.reads_per_op, 0.0, "{readdir:?}");
    // after a remount the entries of a directory share pages: each page is read once
    let cold = &r.phases[5];
    assert!(cold.reads_per_op > 0.0 && cold.reads_per_op < 0.5, "{cold:?}");
    for p in &r.phases {
        // a phase whose records all stay in the head buffers costs no device time
        assert!(p.ops_per_s.is_none_or(|r| r.is_finite() && r > 0.0) && (p.device_us_per_op == 0.0 || p.ops_per_s.is_some()), "{p:?}");
    }
    assert!(r.phases[1].records_per_op >= 3.0, "create appends an inode, an entry and the directory's inode");
    assert!(meta_markdown(&r).contains("| readdir_entries | 208 |"));
}

#[test]
fn mount_after_a_cut_reads_the_log_once_in_large_reads() {
    // a log shorter than LAZY_REPLAY_MIN_LOG (1 MiB of segments), read whole
    let cfg = ferrofs_simbench::mountscale::ScaleConfig { devices_mib: vec![32], data_mib: 2, checkpoint_log_bytes: 512 << 10, seed: 7 };
    let r = ferrofs_simbench::mountscale::run_scale(&cfg, &mut |_| {}).expect("mount scale run");
    let d = &r.devices[0];
    assert!(d.cut.replayed > 0 && d.log_bytes_at_cut >= 256 << 10, "{d:?}");
    assert!(d.log_bytes_at_cut <= 512 << 10, "the log at the cut exceeds the bound: {d:?}");
    // each page of the log since the checkpoint read about once (plus the index leaves the
    // replayed records land in), in reads of several pages, not two small reads per record
    let log_pages = d.log_bytes_at_cut / 2048;
    let extra_pages = d.cut.pages_read.saturating_sub(d.clean.pages_read);
    let extra_reads = d.cut.reads.saturating_sub(d.clean.reads);
    assert!(extra_pages <= log_pages * 3 / 2 + 64, "{extra_pages} pages read for {log_pages} pages of log: {d:?}");
    assert!(extra_reads <= log_pages / 3, "{extra_reads} reads for {log_pages} pages of log: {d:?}");
}

#[test]
fn mount_after_a_long_cut_log_reads_data_records_by_their_headers() {
    // a log longer than LAZY_REPLAY_MIN_LOG: the data records the log proves durable are
    // read by their headers alone (about every other page), so the mount reads fewer pages
    // than the log holds (reading it whole, it read 1.2x: 1 840 pages for 1 507)
    let cfg = ferrofs_simbench::mountscale::ScaleConfig { devices_mib: vec![32], data_mib: 2, checkpoint_log_bytes: 3 << 20, seed: 7 };
    let r = ferrofs_simbench::mountscale::run_scale(&cfg, &mut |_| {}).expect("mount scale run");
    let d = &r.devices[0];
    assert!(d.log_bytes_at_cut >= 2 << 20 && d.log_bytes_at_cut <= 3 << 20, "{d:?}");
    let log_pages = d.log_bytes_at_cut / 2048;
    let extra_pages = d.cut.pages_read.saturating_sub(d.clean.pages_read);
    assert!(extra_pages < log_pages, "{extra_pages} pages read for {log_pages} pages of log: {d:?}");
}
