//! Markdown: one run's summary, and the combined report over several filesystems with ratios.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};
use crate::exp::median;
use crate::record::{ConcurrencyResults, DirtyResults, GcResults, LatencyResults, MountResults, OpsResults, RandwriteResults, RunRecord, SweepResults};
use crate::units::fmt_size;
use crate::wa::WaSample;

/// reference / peer, when both exist, are finite and the peer is non-zero.
pub fn ratio(reference: Option<f64>, peer: Option<f64>) -> Option<f64> {
    match (reference, peer) {
        (Some(r), Some(p)) if r.is_finite() && p.is_finite() && p != 0.0 => Some(r / p),
        _ => None,
    }
}

pub fn fmt_num(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "n/a".into(),
    }
}

pub fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(x) => format!("{x:.2}x"),
        None => "n/a".into(),
    }
}

fn fill_name(state: &str, fill: f64) -> String {
    if state == "clean" {
        "clean".into()
    } else {
        format!("dirty {:.0} %", fill * 100.0)
    }
}

// ---------------------------------------------------------------------------------------------
// One run

/// The Markdown summary of one run (printed after a run, written next to its JSON, and used as the
/// per-filesystem appendix of the combined report).
pub fn summary_markdown(rec: &RunRecord) -> Result<String> {
    let mut s = String::new();
    let l = &rec.label;
    match rec.experiment.as_str() {
        "sweep" => {
            let r: SweepResults = rec.results_as()?;
            let modes: Vec<String> = r.points.iter().map(|p| p.mode.clone()).collect::<BTreeSet<_>>().into_iter().collect();
            for m in modes {
                let raw = m == "raw-mtd";
                let _ = writeln!(s, "### {l}: sweep, {m}\n");
                if raw {
                    let _ = writeln!(s, "| Block Size | Write MB/s | Read MB/s | Write incl. erase MB/s |\n|---|---|---|---|");
                } else {
                    let _ = writeln!(s, "| Block Size | Write MB/s | Read MB/s |\n|---|---|---|");
                }
                for p in r.points.iter().filter(|p| p.mode == m) {
                    let cell = |ph: &crate::record::Phase| if ph.status == "ok" { fmt_num(ph.mb_s, 2) } else { ph.status.clone() };
                    let _ = write!(s, "| {} | {} | {} |", fmt_size(p.block_size), cell(&p.write), cell(&p.read));
                    if raw {
                        let incl = p.erase_seconds.filter(|_| p.write.status == "ok").map(|e| crate::stats::mb_per_s(p.write.bytes, p.write.seconds + e));
                        let _ = write!(s, " {} |", fmt_num(incl, 2));
                    }
                    s.push('\n');
                }
                s.push('\n');
            }
        }
        "dirty" => {
            let r: DirtyResults = rec.results_as()?;
            let cols: Vec<(String, f64)> = dedup_cols(r.points.iter().map(|p| (p.state.clone(), p.fill)));
            let _ = writeln!(s, "### {l}: overwrite throughput, clean vs dirty ({} per point)\n", fmt_size(r.overwrite_bytes));
            let _ = write!(s, "| Block Size |");
            for (st, f) in &cols {
                let _ = write!(s, " {} MB/s |", fill_name(st, *f));
            }
            let _ = writeln!(s, "\n|---|{}", "---|".repeat(cols.len()));
            let bss: BTreeSet<u64> = r.points.iter().map(|p| p.block_size).collect();
            for bs in bss {
                let _ = write!(s, "| {} |", fmt_size(bs));
                for (st, f) in &cols {
                    let p = r.points.iter().find(|p| p.block_size == bs && &p.state == st && p.fill == *f);
                    let cell = p.map(|p| if p.overwrite.status == "ok" { fmt_num(p.overwrite.mb_s, 2) } else { p.overwrite.status.clone() }).unwrap_or_else(|| "n/a".into());
                    let _ = write!(s, " {cell} |");
                }
                s.push('\n');
            }
            s.push('\n');
            for f in &r.fills {
                let _ = writeln!(
                    s,
                    "- fill to {:.0} %: reached {}, {} files written, {} deleted{}{}",
                    f.target_fraction * 100.0,
                    f.achieved_fraction.map(|x| format!("{:.1} %", x * 100.0)).unwrap_or_else(|| "n/a".into()),
                    f.files_written,
                    f.files_deleted,
                    if f.enospc { ", stopped by ENOSPC" } else { "" },
                    if f.capped { ", capped by --max-fill-bytes" } else { "" }
                );
            }
            if !r.fills.is_empty() {
                s.push('\n');
            }
        }
        "latency" | "latency-fsync" | "latency-dsync" => {
            let r: LatencyResults = rec.results_as()?;
            let _ = writeln!(s, "### {l}: write latency, {} B writes, sync {}\n", r.block_size, r.sync);
            let _ = writeln!(s, "| Writes | min µs | median µs | p99 µs | p99.9 µs | max µs |\n|---|---|---|---|---|---|");
            match &r.summary {
                Some(x) => {
                    let _ = writeln!(s, "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |", x.count, x.min_us, x.median_us, x.p99_us, x.p999_us, x.max_us);
                }
                None => {
                    let _ = writeln!(s, "| 0 | n/a | n/a | n/a | n/a | n/a |");
                }
            }
            s.push('\n');
        }
        "gc" | "gc-fsync" | "gc-dsync" => {
            let r: GcResults = rec.results_as()?;
            let _ = writeln!(s, "### {l}: overwrite throughput in {:.2} s windows ({} blocks, sync {})\n", r.window_s, fmt_size(r.block_size), r.sync);
            let _ = writeln!(s, "| Windows | Mean MB/s | Min window MB/s | Max window MB/s | Slowest window % of mean | CoV |\n|---|---|---|---|---|---|");
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |\n",
                r.windows.len(),
                fmt_num(r.total.mb_s, 2),
                fmt_num(r.min_window_mb_s, 2),
                fmt_num(r.max_window_mb_s, 2),
                fmt_num(r.slowest_window_pct_of_mean, 0),
                fmt_num(r.cov, 3)
            );
        }
        e if e.starts_with("randwrite-") => {
            let r: RandwriteResults = rec.results_as()?;
            let _ = writeln!(s, "### {l}: {e}: random {} overwrites of a {} file, {}\n", fmt_size(r.block_size), fmt_size(r.file_size), randwrite_form(&r));
            let _ = writeln!(s, "| Writes | fsyncs | MB/s | fsync median ms | fsync max ms | last fsync s | Stopped by |\n|---|---|---|---|---|---|---|");
            let fl = r.fsync_latency.as_ref();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.writes,
                r.fsyncs,
                if r.total.status == "ok" { fmt_num(r.total.mb_s, 3) } else { r.total.status.clone() },
                fmt_num(fl.map(|x| x.median_us / 1000.0), 2),
                fmt_num(fl.map(|x| x.max_us / 1000.0), 2),
                fmt_num(r.final_fsync_s, 3),
                r.stopped_by
            );
            if let (Some(k), Some(c)) = (&r.counter_key, r.counter_per_fsync) {
                let _ = writeln!(s, "Counter `{k}` per fsync: {c:.2}.\n");
            }
        }
        "concurrency" => {
            let r: ConcurrencyResults = rec.results_as()?;
            let _ = writeln!(
                s,
                "### {l}: reader of a cached {} file ({} reads), idle and while another process overwrites a {} file ({} blocks, fsync every {}); {} CPU(s)\n",
                fmt_size(r.read_file_bytes),
                fmt_size(r.read_block),
                fmt_size(r.write_file_bytes),
                fmt_size(r.write_block),
                fmt_size(r.writer_fsync_every),
                r.cpus
            );
            let _ = writeln!(s, "| Reader idle MB/s | Reader loaded MB/s | Loaded % of idle | Slowest read idle / loaded µs | Writer MB/s |\n|---|---|---|---|---|");
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} / {} | {} |\n",
                fmt_num(r.idle.as_ref().map(|p| p.mb_s), 2),
                fmt_num(r.loaded.as_ref().map(|p| p.mb_s), 2),
                fmt_num(r.loaded_pct_of_idle, 0),
                fmt_num(r.idle.as_ref().map(|p| p.max_read_us), 0),
                fmt_num(r.loaded.as_ref().map(|p| p.max_read_us), 0),
                if r.writer.status == "ok" { fmt_num(r.writer.mb_s, 2) } else { r.writer.status.clone() }
            );
        }
        "smallfiles" | "meta" => {
            let r: OpsResults = rec.results_as()?;
            let _ = writeln!(s, "### {l}: {}\n", rec.experiment);
            let _ = writeln!(s, "| Operation | Count | ops/s |\n|---|---|---|");
            for o in &r.ops {
                let _ = writeln!(s, "| {} | {} | {}{} |", o.op, o.count, fmt_num(Some(o.ops_per_s), 1), if o.error.is_some() { " (stopped by error)" } else { "" });
            }
            s.push('\n');
        }
        "mount" | "mount-powercut" => {
            let r: MountResults = rec.results_as()?;
            let what = if rec.experiment == "mount" { "mount after a clean unmount" } else { "mount after a power cut during writes" };
            let _ = writeln!(s, "### {l}: {what}\n");
            if let Some(f) = r.floor_s {
                let _ = writeln!(
                    s,
                    "Floor (the shell and mount(8) mounting a tmpfs, median of {}): {} s; median mount minus floor: {} s.\n",
                    r.floor_runs_s.len(),
                    fmt_num(Some(f), 3),
                    fmt_num(r.net_median_s, 3)
                );
            }
            let _ = writeln!(s, "| Run | Mount s | Held kB | Slab (slabinfo) delta kB | Slab (meminfo) delta kB |\n|---|---|---|---|---|");
            for (i, run) in r.runs.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "| {} | {}{} | {} | {} | {} |",
                    i + 1,
                    fmt_num(Some(run.mount.seconds), 3),
                    if run.mount.ok { "" } else { " (failed)" },
                    run.held_kb.map(|d| d.to_string()).unwrap_or_else(|| "n/a".into()),
                    run.slab_delta_bytes.map(|d| format!("{:.1}", d as f64 / 1024.0)).unwrap_or_else(|| "n/a".into()),
                    run.meminfo_delta_kb.get("Slab").map(|d| d.to_string()).unwrap_or_else(|| "n/a".into())
                );
            }
            if let Some(top) = r.runs.first().map(|x| &x.slab_top_delta_bytes).filter(|t| !t.is_empty()) {
                let v: Vec<String> = top.iter().map(|(k, b)| format!("{k} {:+.1}", *b as f64 / 1024.0)).collect();
                let _ = writeln!(s, "\nSlab caches that changed most in run 1 (kB): {}", v.join(", "));
            }
            s.push('\n');
        }
        other => {
            let _ = writeln!(s, "### {l}: unknown experiment {other:?}\n");
        }
    }
    let wa = wa_points(rec)?;
    if !wa.is_empty() {
        let _ = writeln!(s, "| {l}: point | App MB | Device MB | WA |\n|---|---|---|---|");
        for (name, w) in wa {
            let dev = w.counter_device_bytes.or(w.diskstats_device_bytes.map(|b| b as f64));
            let _ = writeln!(s, "| {name} | {:.2} | {} | {} |", w.app_bytes as f64 / 1e6, fmt_num(dev.map(|b| b / 1e6), 2), fmt_num(w.best(), 2));
        }
        s.push('\n');
    }
    if !rec.events.is_empty() {
        let _ = writeln!(s, "Events ({l}, {}):\n", rec.experiment);
        for e in &rec.events {
            let _ = writeln!(s, "- {e}");
        }
        s.push('\n');
    }
    Ok(s)
}

/// "fsync after every 16 writes" or "buffered (vm.dirty_bytes 4M), final fsync timed".
fn randwrite_form(r: &RandwriteResults) -> String {
    match (r.fsync_every, r.dirty_bytes) {
        (0, Some(d)) => format!("buffered (vm.dirty_bytes {}), final fsync timed", fmt_size(d)),
        (0, None) => "buffered, final fsync timed".into(),
        (1, _) => "fsync after every write".into(),
        (n, _) => format!("fsync after every {n} writes"),
    }
}

fn dedup_cols(it: impl Iterator<Item = (String, f64)>) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = Vec::new();
    for c in it {
        if !v.iter().any(|x| x.0 == c.0 && x.1 == c.1) {
            v.push(c);
        }
    }
    v.sort_by(|a, b| a.1.total_cmp(&b.1));
    v
}

/// The WA samples of a run, named by data point.
pub fn wa_points(rec: &RunRecord) -> Result<Vec<(String, WaSample)>> {
    let mut v = Vec::new();
    match rec.experiment.as_str() {
        "sweep" => {
            let r: SweepResults = rec.results_as()?;
            for p in r.points {
                if let Some(w) = p.wa {
                    v.push((format!("sweep {} {}", p.mode, fmt_size(p.block_size)), w));
                }
            }
        }
        "dirty" => {
            let r: DirtyResults = rec.results_as()?;
            for p in r.points {
                if let Some(w) = p.wa {
                    v.push((format!("dirty {} {}", fill_name(&p.state, p.fill), fmt_size(p.block_size)), w));
                }
            }
        }
        "latency" | "latency-fsync" | "latency-dsync" => {
            if let Some(w) = rec.results_as::<LatencyResults>()?.wa {
                v.push((rec.experiment.clone(), w));
            }
        }
        "gc" | "gc-fsync" | "gc-dsync" => {
            if let Some(w) = rec.results_as::<GcResults>()?.wa {
                v.push((rec.experiment.clone(), w));
            }
        }
        "smallfiles" | "meta" => {
            if let Some(w) = rec.results_as::<OpsResults>()?.wa {
                v.push((rec.experiment.clone(), w));
            }
        }
        e if e.starts_with("randwrite-") => {
            if let Some(w) = rec.results_as::<RandwriteResults>()?.wa {
                v.push((rec.experiment.clone(), w));
            }
        }
        _ => {}
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Combined report

/// The runs of a results directory, the latest per (experiment, label).
pub struct ResultSet {
    pub runs: BTreeMap<(String, String), RunRecord>,
    pub warnings: Vec<String>,
}

impl ResultSet {
    pub fn labels(&self, reference: &str) -> Vec<String> {
        let mut ls: Vec<String> = self.runs.keys().map(|k| k.1.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        if let Some(i) = ls.iter().position(|l| l == reference) {
            let r = ls.remove(i);
            ls.insert(0, r);
        }
        ls
    }

    pub fn experiments(&self) -> Vec<String> {
        let order = [
            "sweep", "dirty", "latency", "latency-fsync", "latency-dsync", "gc", "gc-fsync", "gc-dsync", "randwrite-sync16", "randwrite-buffered", "randwrite-sync1", "concurrency", "smallfiles", "meta", "mount", "mount-powercut",
        ];
        let present: BTreeSet<&String> = self.runs.keys().map(|k| &k.0).collect();
        let mut v: Vec<String> = order.iter().filter(|e| present.iter().any(|p| p == e)).map(|e| e.to_string()).collect();
        for p in present {
            if !v.contains(p) {
                v.push(p.clone());
            }
        }
        v
    }

    pub fn get(&self, exp: &str, label: &str) -> Option<&RunRecord> {
        self.runs.get(&(exp.to_string(), label.to_string()))
    }

    /// Labels that ran `exp`, reference first.
    pub fn labels_for(&self, exp: &str, reference: &str) -> Vec<String> {
        self.labels(reference).into_iter().filter(|l| self.get(exp, l).is_some()).collect()
    }
}

fn collect_json(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir).with_ctx(|| format!("reading results directory {}", dir.display()))?;
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if depth > 0 {
                collect_json(&p, depth - 1, out)?;
            }
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Loads every parseable ferrofs-bench JSON under `dir` (3 levels); others become warnings.
pub fn load_results(dir: &Path) -> Result<ResultSet> {
    let mut files = Vec::new();
    collect_json(dir, 3, &mut files)?;
    let mut set = ResultSet { runs: BTreeMap::new(), warnings: Vec::new() };
    for f in files {
        let rec: RunRecord = match std::fs::read_to_string(&f).map_err(crate::error::Error::from).and_then(|t| Ok(serde_json::from_str(&t)?)) {
            Ok(r) => r,
            Err(e) => {
                set.warnings.push(format!("skipped {}: {e}", f.display()));
                continue;
            }
        };
        if rec.tool != "ferrofs-bench" {
            set.warnings.push(format!("skipped {}: not a ferrofs-bench result", f.display()));
            continue;
        }
        let key = (rec.experiment.clone(), rec.label.clone());
        match set.runs.get(&key) {
            Some(old) if old.started_unix > rec.started_unix => {
                set.warnings.push(format!("{}: older {} run of {} ignored", f.display(), rec.experiment, rec.label));
            }
            Some(_) => {
                set.warnings.push(format!("{}: replaces an older {} run of {}", f.display(), rec.experiment, rec.label));
                set.runs.insert(key, rec);
            }
            None => {
                set.runs.insert(key, rec);
            }
        }
    }
    Ok(set)
}

/// A table of one metric per row for each label, with reference/peer ratio columns.
#[allow(clippy::too_many_arguments)]
fn metric_table(s: &mut String, row_header: &str, rows: &[String], labels: &[String], reference: &str, unit: &str, prec: usize, get: impl Fn(&str, &str) -> Option<f64>) {
    let peers: Vec<&String> = if labels.iter().any(|l| l == reference) { labels.iter().filter(|l| *l != reference).collect() } else { Vec::new() };
    let _ = write!(s, "| {row_header} |");
    for l in labels {
        let _ = write!(s, " {l}{unit} |");
    }
    for p in &peers {
        let _ = write!(s, " {reference} / {p} |");
    }
    let _ = writeln!(s, "\n|---|{}", "---|".repeat(labels.len() + peers.len()));
    for r in rows {
        let _ = write!(s, "| {r} |");
        for l in labels {
            let _ = write!(s, " {} |", fmt_num(get(l, r), prec));
        }
        for p in &peers {
            let _ = write!(s, " {} |", fmt_ratio(ratio(get(reference, r), get(p, r))));
        }
        s.push('\n');
    }
    s.push('\n');
}

/// The combined Markdown report.
pub fn combined_markdown(set: &ResultSet, reference: &str) -> Result<String> {
    let mut s = String::new();
    let labels = set.labels(reference);
    let _ = writeln!(s, "# ferrofs-bench report\n");
    if labels.iter().any(|l| l == reference) {
        let _ = writeln!(s, "Filesystems: {}. Ratio columns are {reference} / peer (above 1 means {reference} is higher; for latency, mount time and write amplification lower is better). MB = 10^6 bytes.\n", labels.join(", "));
    } else {
        let _ = writeln!(s, "Filesystems: {}. No run is labelled {reference:?}, so there are no ratio columns (see --reference). MB = 10^6 bytes.\n", labels.join(", "));
    }
    for exp in set.experiments() {
        let ls = set.labels_for(&exp, reference);
        let _ = writeln!(s, "## {exp}\n");
        match exp.as_str() {
            "sweep" => {
                let res: BTreeMap<String, SweepResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let modes: BTreeSet<String> = res.values().flat_map(|r| r.points.iter().map(|p| p.mode.clone())).collect();
                for m in modes {
                    let bss: BTreeSet<u64> = res.values().flat_map(|r| r.points.iter().filter(|p| p.mode == m).map(|p| p.block_size)).collect();
                    let rows: Vec<String> = bss.iter().map(|b| fmt_size(*b)).collect();
                    // Only the filesystems (or devices) measured in this mode.
                    let ml: Vec<String> = ls.iter().filter(|l| res.get(*l).is_some_and(|r| r.points.iter().any(|p| p.mode == m))).cloned().collect();
                    for (phase, is_write) in [("write", true), ("read", false)] {
                        let _ = writeln!(s, "### {m} {phase}\n");
                        metric_table(&mut s, "Block Size", &rows, &ml, reference, " MB/s", 2, |l, row| {
                            let p = res.get(l)?.points.iter().find(|p| p.mode == m && fmt_size(p.block_size) == row)?;
                            if is_write { p.write.mb_s } else { p.read.mb_s }
                        });
                    }
                }
            }
            "dirty" => {
                let res: BTreeMap<String, DirtyResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let mut keys: Vec<(u64, u64, String)> = Vec::new();
                for r in res.values() {
                    for p in &r.points {
                        let k = ((p.fill * 1000.0).round() as u64, p.block_size, format!("{} {}", fill_name(&p.state, p.fill), fmt_size(p.block_size)));
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                    }
                }
                keys.sort();
                let rows: Vec<String> = keys.into_iter().map(|k| k.2).collect();
                metric_table(&mut s, "State, Block Size", &rows, &ls, reference, " MB/s", 2, |l, row| {
                    let p = res.get(l)?.points.iter().find(|p| format!("{} {}", fill_name(&p.state, p.fill), fmt_size(p.block_size)) == row)?;
                    p.overwrite.mb_s
                });
            }
            "latency" | "latency-fsync" | "latency-dsync" => {
                if exp != "latency" {
                    let _ = writeln!(s, "Device-bound variant: every write is followed by its fsync (or opened O_DSYNC), inside the timed region.\n");
                }
                let res: BTreeMap<String, LatencyResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let rows: Vec<String> = ["min", "median", "mean", "p99", "p99.9", "max"].iter().map(|x| x.to_string()).collect();
                metric_table(&mut s, "Latency", &rows, &ls, reference, " µs", 1, |l, row| {
                    let x = res.get(l)?.summary.as_ref()?;
                    Some(match row {
                        "min" => x.min_us,
                        "median" => x.median_us,
                        "mean" => x.mean_us,
                        "p99" => x.p99_us,
                        "p99.9" => x.p999_us,
                        _ => x.max_us,
                    })
                });
            }
            "gc" | "gc-fsync" | "gc-dsync" => {
                if exp != "gc" {
                    let _ = writeln!(s, "Device-bound variant: every overwrite is followed by its fsync (or opened O_DSYNC), so the page cache cannot absorb overwrites of the same blocks.\n");
                }
                let res: BTreeMap<String, GcResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let rows: Vec<String> = ["mean MB/s", "min window MB/s", "max window MB/s", "slowest window % of mean", "CoV"].iter().map(|x| x.to_string()).collect();
                metric_table(&mut s, "Metric", &rows, &ls, reference, "", 3, |l, row| {
                    let r = res.get(l)?;
                    match row {
                        "mean MB/s" => r.total.mb_s,
                        "min window MB/s" => r.min_window_mb_s,
                        "max window MB/s" => r.max_window_mb_s,
                        "slowest window % of mean" => r.slowest_window_pct_of_mean,
                        _ => r.cov,
                    }
                });
            }
            e if e.starts_with("randwrite-") => {
                let res: BTreeMap<String, RandwriteResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                if let Some(r) = res.values().next() {
                    let _ = writeln!(s, "Random {} overwrites of a {} file written and synced before (untimed), {}; MB/s counts every write and fsync. Device rows: /proc/diskstats of the device given (`--diskstats-dev`) and the counters file's key per fsync.\n", fmt_size(r.block_size), fmt_size(r.file_size), randwrite_form(r));
                }
                let rows: Vec<String> = ["MB/s", "writes", "fsyncs", "fsync median ms", "fsync max ms", "last fsync s", "counter per fsync", "device MB written", "device writes", "device KiB per write", "device flushes"].iter().map(|x| x.to_string()).collect();
                metric_table(&mut s, "Metric", &rows, &ls, reference, "", 3, |l, row| {
                    let r = res.get(l)?;
                    let w = r.wa.as_ref();
                    let dev = w.and_then(|w| w.diskstats_device_bytes);
                    let writes = w.and_then(|w| w.diskstats_writes);
                    match row {
                        "MB/s" => r.total.mb_s,
                        "writes" => Some(r.writes as f64),
                        "fsyncs" => Some(r.fsyncs as f64),
                        "fsync median ms" => r.fsync_latency.as_ref().map(|x| x.median_us / 1000.0),
                        "fsync max ms" => r.fsync_latency.as_ref().map(|x| x.max_us / 1000.0),
                        "last fsync s" => r.final_fsync_s,
                        "counter per fsync" => r.counter_per_fsync,
                        "device MB written" => dev.map(|b| b as f64 / 1e6),
                        "device writes" => writes.map(|n| n as f64),
                        "device KiB per write" => dev.zip(writes).filter(|x| x.1 > 0).map(|(b, n)| b as f64 / 1024.0 / n as f64),
                        _ => w.and_then(|w| w.diskstats_flushes).map(|n| n as f64),
                    }
                });
            }
            "concurrency" => {
                let res: BTreeMap<String, ConcurrencyResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let _ = writeln!(s, "A reader streams a cached file alone, then while another process overwrites a different file (fsync included); loaded % = the reader's loaded / idle throughput.\n");
                let rows: Vec<String> = ["reader idle MB/s", "reader loaded MB/s", "loaded % of idle", "writer MB/s", "CPUs"].iter().map(|x| x.to_string()).collect();
                metric_table(&mut s, "Metric", &rows, &ls, reference, "", 2, |l, row| {
                    let r = res.get(l)?;
                    match row {
                        "reader idle MB/s" => r.idle.as_ref().map(|p| p.mb_s),
                        "reader loaded MB/s" => r.loaded.as_ref().map(|p| p.mb_s),
                        "loaded % of idle" => r.loaded_pct_of_idle,
                        "writer MB/s" => r.writer.mb_s,
                        _ => Some(r.cpus as f64),
                    }
                });
            }
            "smallfiles" | "meta" => {
                let res: BTreeMap<String, OpsResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let mut rows: Vec<String> = Vec::new();
                for r in res.values() {
                    for o in &r.ops {
                        if !rows.contains(&o.op) {
                            rows.push(o.op.clone());
                        }
                    }
                }
                metric_table(&mut s, "Operation", &rows, &ls, reference, " ops/s", 1, |l, row| res.get(l)?.ops.iter().find(|o| o.op == row).map(|o| o.ops_per_s));
            }
            "mount" | "mount-powercut" => {
                if exp == "mount-powercut" {
                    let _ = writeln!(s, "Mount of a flash image taken while a writer ran (its unflushed data lost), after UBI attach for UBIFS. Held kB: kernel memory the mounted filesystem keeps (change across the mount, caches dropped, of meminfo's Slab, which counts kmalloc above 8 KiB too, less nandsim's slab cache, plus VmallocUsed and Percpu).\n");
                } else {
                    let _ = writeln!(s, "Mount after a clean unmount of the used filesystem. Held kB: kernel memory the mounted filesystem keeps (change across the mount, caches dropped, of meminfo's Slab, which counts kmalloc above 8 KiB too, less nandsim's slab cache, plus VmallocUsed and Percpu).\n");
                }
                let _ = writeln!(s, "Floor: the same shell and mount(8) spawn mounting a tmpfs (median of its runs); median minus floor is the mount itself.\n");
                let res: BTreeMap<String, MountResults> = ls.iter().filter_map(|l| Some((l.clone(), set.get(&exp, l)?.results_as().ok()?))).collect();
                let rows: Vec<String> = ["min s", "median s", "max s", "median minus floor s", "floor s", "held kB (median)", "slab delta kB (run 1)"]
                    .iter()
                    .map(|x| x.to_string())
                    .collect();
                metric_table(&mut s, "Mount", &rows, &ls, reference, "", 3, |l, row| {
                    let r = res.get(l)?;
                    match row {
                        "min s" => r.min_s,
                        "median s" => r.median_s,
                        "max s" => r.max_s,
                        "median minus floor s" => r.net_median_s,
                        "floor s" => r.floor_s,
                        "held kB (median)" => median(&r.runs.iter().filter_map(|x| x.held_kb.map(|v| v as f64)).collect::<Vec<_>>()),
                        _ => r.runs.first()?.slab_delta_bytes.map(|b| b as f64 / 1024.0),
                    }
                });
            }
            other => {
                let _ = writeln!(s, "(unknown experiment {other:?}; see the per-filesystem section)\n");
            }
        }
    }
    // Write amplification wherever a run recorded it.
    let mut wa: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut wa_rows: Vec<String> = Vec::new();
    for ((_, label), rec) in &set.runs {
        for (name, w) in wa_points(rec).unwrap_or_default() {
            if let Some(v) = w.best() {
                if !wa_rows.contains(&name) {
                    wa_rows.push(name.clone());
                }
                wa.entry(label.clone()).or_default().insert(name, v);
            }
        }
    }
    if !wa_rows.is_empty() {
        let _ = writeln!(s, "## write amplification\n\nDevice bytes written / bytes the benchmark wrote in each measured phase (lower is better). The device bytes come from the counters file when one was given (the rig: nandsim's erase count x erase size, i.e. bytes erased on the NAND), else from /proc/diskstats of the backing device; both are in the JSON.\n");
        let wl: Vec<String> = labels.iter().filter(|l| wa.contains_key(*l)).cloned().collect();
        metric_table(&mut s, "Point", &wa_rows, &wl, reference, "", 2, |l, row| wa.get(l)?.get(row).copied());
    }
    let _ = writeln!(s, "## Per filesystem\n");
    for exp in set.experiments() {
        for l in set.labels_for(&exp, reference) {
            if let Some(rec) = set.get(&exp, &l) {
                match summary_markdown(rec) {
                    Ok(t) => s.push_str(&t),
                    Err(e) => {
                        let _ = writeln!(s, "{l} {exp}: unreadable results ({e})\n");
                    }
                }
            }
        }
    }
    if !set.warnings.is_empty() {
        let _ = writeln!(s, "## Warnings\n");
        for w in &set.warnings {
            let _ = writeln!(s, "- {w}");
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn phase(mb_s: f64) -> serde_json::Value {
        let seconds = if mb_s > 0.0 { 1.0 / mb_s } else { 1.0 };
        json!({"status": "ok", "bytes": 1_000_000, "seconds": seconds, "mb_s": mb_s, "error": null})
    }

    fn rec(label: &str, exp: &str, started: u64, results: serde_json::Value) -> serde_json::Value {
        json!({
            "schema_version": 1, "tool": "ferrofs-bench", "tool_version": "0.1.0", "experiment": exp, "label": label,
            "seed": 1, "target": "/mnt", "kernel": null, "started_unix": started, "elapsed_s": 1.0,
            "params": {}, "results": results, "events": []
        })
    }

    fn sweep(w4k: f64, r4k: f64, w1m: f64) -> serde_json::Value {
        json!({"raw_device": null, "points": [
            {"block_size": 4096, "mode": "buffered", "write": phase(w4k), "read": phase(r4k), "cache_drop": "drop_caches", "erase_seconds": null,
             "wa": {"app_bytes": 1000, "counter_device_bytes": null, "counter_wa": null, "diskstats_device_bytes": 3000, "diskstats_wa": 3.0}},
            {"block_size": 1048576, "mode": "buffered", "write": phase(w1m),
             "read": {"status": "unsupported", "bytes": 0, "seconds": 0.0, "mb_s": null, "error": "O_DIRECT"},
             "cache_drop": null, "erase_seconds": null, "wa": null}
        ]})
    }

    fn latency(p99: f64) -> serde_json::Value {
        json!({"block_size": 4096, "writes": 10, "sync": "none",
            "summary": {"count": 10, "min_us": 1.0, "median_us": 2.0, "mean_us": 2.5, "p99_us": p99, "p999_us": p99, "max_us": p99},
            "histogram": [{"lo_us": 0, "hi_us": 1, "count": 0}, {"lo_us": 1, "hi_us": 2, "count": 10}],
            "total": phase(5.0), "wa": null})
    }

    fn write_set(dir: &Path) {
        let put = |name: &str, v: serde_json::Value| std::fs::write(dir.join(name), serde_json::to_string_pretty(&v).unwrap()).unwrap();
        put("ferrofs-sweep.json", rec("ferrofs", "sweep", 200, sweep(10.0, 40.0, 20.0)));
        put("jffs2-sweep.json", rec("jffs2", "sweep", 100, sweep(5.0, 20.0, 0.0)));
        std::fs::create_dir(dir.join("old")).unwrap();
        // An older run of the same label and experiment: ignored in favour of the newer one.
        std::fs::write(dir.join("old").join("jffs2-sweep.json"), serde_json::to_string(&rec("jffs2", "sweep", 50, sweep(1.0, 1.0, 1.0))).unwrap()).unwrap();
        put("ferrofs-latency.json", rec("ferrofs", "latency", 200, latency(100.0)));
        put("ubifs-latency.json", rec("ubifs", "latency", 200, latency(400.0)));
        std::fs::write(dir.join("broken.json"), "{ not json").unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    }

    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(10.0), Some(5.0)), Some(2.0));
        assert_eq!(ratio(Some(10.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(5.0)), None);
        assert_eq!(ratio(Some(f64::NAN), Some(5.0)), None);
        assert_eq!(fmt_ratio(Some(0.5)), "0.50x");
        assert_eq!(fmt_ratio(None), "n/a");
        assert_eq!(fmt_num(Some(1.234), 1), "1.2");
        assert_eq!(fmt_num(None, 1), "n/a");
    }

    #[test]
    fn combined_tables_with_ratios() {
        let d = tempfile::tempdir().unwrap();
        write_set(d.path());
        let set = load_results(d.path()).unwrap();
        assert_eq!(set.runs.len(), 4);
        assert_eq!(set.labels("ferrofs"), vec!["ferrofs", "jffs2", "ubifs"]);
        assert!(set.warnings.iter().any(|w| w.contains("broken.json")), "{:?}", set.warnings);
        assert!(set.warnings.iter().any(|w| w.contains("older")), "{:?}", set.warnings);
        let md = combined_markdown(&set, "ferrofs").unwrap();
        // Sweep: ferrofs vs jffs2 only (ubifs has no sweep), newer jffs2 run used.
        assert!(md.contains("| Block Size | ferrofs MB/s | jffs2 MB/s | ferrofs / jffs2 |"), "{md}");
        assert!(md.contains("| 4k | 10.00 | 5.00 | 2.00x |"), "{md}");
        assert!(md.contains("| 4k | 40.00 | 20.00 | 2.00x |"), "{md}");
        // jffs2's 1M write is 0 MB/s: no ratio; read unsupported: n/a.
        assert!(md.contains("| 1M | 20.00 | 0.00 | n/a |"), "{md}");
        assert!(md.contains("| 1M | n/a | n/a | n/a |"), "{md}");
        // Latency: ferrofs vs ubifs.
        assert!(md.contains("| p99 | 100.0 | 400.0 | 0.25x |"), "{md}");
        // Write amplification from diskstats.
        assert!(md.contains("## write amplification"), "{md}");
        assert!(md.contains("| sweep buffered 4k | 3.00 | 3.00 | 1.00x |"), "{md}");
        // Per-filesystem tables in the requested style.
        assert!(md.contains("### jffs2: sweep, buffered\n\n| Block Size | Write MB/s | Read MB/s |"), "{md}");
        assert!(md.contains("| 1M | 0.00 | unsupported |"), "{md}");
        // Without the reference label there are no ratio columns.
        let md = combined_markdown(&set, "nilfs2").unwrap();
        assert!(!md.contains("nilfs2 / ") && !md.contains("ferrofs / "), "{md}");
        assert!(md.contains("No run is labelled \"nilfs2\""), "{md}");
    }

    #[test]
    fn report_command_writes_files() {
        let d = tempfile::tempdir().unwrap();
        write_set(d.path());
        let out = d.path().join("out");
        crate::report_cmd(d.path(), Some(&out), "ferrofs", true).unwrap();
        assert!(out.join("report.md").exists());
        assert!(out.join("sweep-buffered.svg").exists());
        assert!(out.join("latency-histogram.svg").exists());
        assert!(!out.join("gc-scatter.svg").exists(), "no gc data, no plot");
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("![sweep-buffered.svg](sweep-buffered.svg)"));
        let empty = tempfile::tempdir().unwrap();
        assert!(crate::report_cmd(empty.path(), None, "ferrofs", false).is_err());
        assert!(crate::report_cmd(&empty.path().join("missing"), None, "ferrofs", false).is_err());
    }
}
