//! Runs every experiment of the real binary at a tiny size on a temporary directory, then the
//! report over the results; plus the error paths (bad target, ENOSPC during fill).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ferrofs-bench");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("spawn ferrofs-bench")
}

fn run_ok(args: &[&str]) -> String {
    let o = run(args);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "ferrofs-bench {args:?} failed\nstdout:\n{out}\nstderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    out
}

fn json(path: &Path) -> Value {
    let t = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&t).unwrap()
}

/// The target directory holds nothing of ours after a run.
fn assert_clean(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn every_experiment_tiny_then_report() {
    let target = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let t = target.path().to_str().unwrap();
    let o = out.path().to_str().unwrap();
    let counters = out.path().join("counters.txt");
    std::fs::write(&counters, "bytes_written=1000\n").unwrap();
    let c = counters.to_str().unwrap();
    let common = |label: &'static str| vec!["--out-dir", o, "--label", label, "--seed", "7", "--no-progress"];

    for label in ["ferrofs", "jffs2"] {
        let cm = common(label);
        let s = run_ok(&[&["sweep", t, "--block-sizes", "4k,64k", "--total", "256k", "--remount-cmd", "true", "--counters-file", c, "--diskstats-dev", "nosuchdev"], &cm[..]].concat());
        assert!(s.contains("| Block Size | Write MB/s | Read MB/s |"), "{s}");
        assert_clean(target.path());
        run_ok(&[&["dirty", t, "--fill", "50", "--max-fill-bytes", "128k", "--fill-file-size", "16k", "--block-sizes", "4k,16k", "--amount", "64k", "--work-size", "64k"], &cm[..]].concat());
        assert_clean(target.path());
        run_ok(&[&["latency", t, "--count", "500", "--file-size", "64k", "--sync", "fsync"], &cm[..]].concat());
        run_ok(&[&["latency", t, "--count", "300", "--file-size", "64k"], &cm[..]].concat());
        run_ok(&[&["gc", t, "--duration", "300ms", "--window", "50ms", "--file-size", "256k", "--block-size", "16k"], &cm[..]].concat());
        run_ok(&[&["gc", t, "--duration", "300ms", "--window", "50ms", "--file-size", "256k", "--block-size", "16k", "--sync", "fsync"], &cm[..]].concat());
        let c = run_ok(&[&["concurrency", t, "--duration", "300ms", "--read-size", "256k", "--write-size", "256k", "--write-block", "16k"], &cm[..]].concat());
        assert!(c.contains("of idle"), "{c}");
        assert_clean(target.path());
        run_ok(&[&["smallfiles", t, "--count", "20", "--per-dir", "8"], &cm[..]].concat());
        run_ok(&[&["meta", t, "--dirs", "2", "--files-per-dir", "5"], &cm[..]].concat());
        assert_clean(target.path());
        run_ok(&[&["mount", "--mount-cmd", "true", "--umount-cmd", "true", "--repeat", "2", "--no-drop-caches"], &cm[..]].concat());
    }

    // The JSON of each experiment.
    let sw = json(&out.path().join("ferrofs-sweep.json"));
    assert_eq!(sw["experiment"], "sweep");
    assert_eq!(sw["label"], "ferrofs");
    assert_eq!(sw["seed"], 7);
    let pts = sw["results"]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 4, "2 block sizes x 2 modes");
    for p in pts {
        match p["mode"].as_str().unwrap() {
            "buffered" => {
                assert_eq!(p["write"]["status"], "ok");
                assert_eq!(p["read"]["status"], "ok");
                assert_eq!(p["cache_drop"], "remount");
                assert_eq!(p["write"]["bytes"], 256 * 1024);
            }
            // tmpfs and most disk filesystems take O_DIRECT; others must say "unsupported".
            "direct" => assert!(["ok", "unsupported"].contains(&p["write"]["status"].as_str().unwrap())),
            m => panic!("mode {m}"),
        }
        let wa = &p["wa"];
        assert_eq!(wa["counter_device_bytes"], 0.0, "counters did not move");
        assert!(wa["errors"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().contains("nosuchdev")));
    }

    let d = json(&out.path().join("ferrofs-dirty.json"));
    let r = &d["results"];
    assert_eq!(r["points"].as_array().unwrap().len(), 4, "clean and dirty 50 % x 2 block sizes");
    assert_eq!(r["fills"][0]["capped"], true);
    for p in r["points"].as_array().unwrap() {
        assert_eq!(p["overwrite"]["status"], "ok");
        assert_eq!(p["overwrite"]["bytes"], 64 * 1024, "same amount for every point");
    }

    let l = json(&out.path().join("ferrofs-latency.json"));
    assert_eq!(l["results"]["sync"], "none");
    assert_eq!(l["results"]["summary"]["count"], 300);
    let l = json(&out.path().join("ferrofs-latency-fsync.json"));
    assert_eq!(l["experiment"], "latency-fsync", "the device-bound variant sits beside the buffered run");
    assert_eq!(l["results"]["sync"], "fsync");
    let s = &l["results"]["summary"];
    assert_eq!(s["count"], 500);
    assert!(s["min_us"].as_f64().unwrap() <= s["median_us"].as_f64().unwrap());
    assert!(s["median_us"].as_f64().unwrap() <= s["p99_us"].as_f64().unwrap());
    assert!(s["p999_us"].as_f64().unwrap() <= s["max_us"].as_f64().unwrap());
    let hist_total: u64 = l["results"]["histogram"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(hist_total, 500);

    let g = json(&out.path().join("ferrofs-gc.json"));
    let w = g["results"]["windows"].as_array().unwrap();
    assert!(w.len() >= 2, "{w:?}");
    assert_eq!(g["results"]["stopped_by"], "duration");
    let sum: u64 = w.iter().map(|x| x["bytes"].as_u64().unwrap()).sum();
    assert_eq!(sum, g["results"]["total"]["bytes"].as_u64().unwrap());
    assert_eq!(g["results"]["sync"], "none");
    let pct = g["results"]["slowest_window_pct_of_mean"].as_f64().unwrap();
    let (min, mean) = (g["results"]["min_window_mb_s"].as_f64().unwrap(), g["results"]["total"]["mb_s"].as_f64().unwrap());
    assert!(pct > 0.0 && pct >= 100.0 * min / mean - 1e-9, "{pct} vs min {min} mean {mean}");
    let gf = json(&out.path().join("ferrofs-gc-fsync.json"));
    assert_eq!(gf["experiment"], "gc-fsync");
    assert_eq!(gf["results"]["sync"], "fsync");
    assert!(gf["results"]["total"]["bytes"].as_u64().unwrap() > 0);

    let cc = json(&out.path().join("ferrofs-concurrency.json"));
    let r = &cc["results"];
    let (idle, loaded) = (r["idle"]["mb_s"].as_f64().unwrap(), r["loaded"]["mb_s"].as_f64().unwrap());
    assert!(idle > 0.0 && loaded > 0.0, "{r}");
    assert!((r["loaded_pct_of_idle"].as_f64().unwrap() - 100.0 * loaded / idle).abs() < 1e-6);
    assert_eq!(r["writer"]["status"], "ok", "{r}");
    assert!(r["writer"]["bytes"].as_u64().unwrap() >= 16 * 1024, "the writer process wrote");
    assert!(r["cpus"].as_u64().unwrap() >= 1);

    let sf = json(&out.path().join("ferrofs-smallfiles.json"));
    let ops: Vec<&str> = sf["results"]["ops"].as_array().unwrap().iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["mkdir", "create_write_fsync", "unlink"]);
    assert_eq!(sf["results"]["ops"][1]["count"], 20);

    let m = json(&out.path().join("ferrofs-meta.json"));
    let ops: Vec<&str> = m["results"]["ops"].as_array().unwrap().iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["mkdir", "create", "stat", "readdir_entries", "rename", "unlink", "rmdir"]);
    assert_eq!(m["results"]["ops"][3]["count"], 10);

    let mt = json(&out.path().join("ferrofs-mount.json"));
    assert_eq!(mt["results"]["runs"].as_array().unwrap().len(), 2);
    assert!(mt["results"]["median_s"].as_f64().is_some());

    // The Markdown next to each JSON.
    assert!(out.path().join("jffs2-dirty.md").exists());

    // The host-side report.
    let rep = out.path().join("report");
    let text = run_ok(&["report", o, "--out", rep.to_str().unwrap()]);
    assert!(text.contains("ferrofs / jffs2"), "{text}");
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    for section in ["## sweep", "## dirty", "## latency", "## latency-fsync", "## gc", "## gc-fsync", "## concurrency", "slowest window % of mean", "loaded % of idle", "## smallfiles", "## meta", "## mount", "## write amplification"] {
        assert!(md.contains(section), "missing {section}");
    }
    for svg in ["sweep-buffered.svg", "dirty.svg", "latency-histogram.svg", "gc-scatter.svg"] {
        let s = std::fs::read_to_string(rep.join(svg)).unwrap();
        assert!(s.contains("<text") && s.contains("ferrofs") && s.contains("jffs2"), "{svg} lacks labels");
    }
}

#[test]
fn randwrite_forms_then_report() {
    let target = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let t = target.path().to_str().unwrap();
    let o = out.path().to_str().unwrap();
    let counters = out.path().join("erases.txt");
    std::fs::write(&counters, "Total numbers of erases: 10\n").unwrap();
    let c = counters.to_str().unwrap();
    for label in ["ferrofs-mtdblock", "ext4"] {
        let cm = ["--out-dir", o, "--label", label, "--no-progress", "--counters-file", c, "--counter-key", "Total numbers of erases", "--diskstats-dev", "nosuchdev"];
        let form = |extra: &[&str]| run_ok(&[&["randwrite", t, "--file-size", "256k"], extra, &cm[..]].concat());
        // Three forms over one laid-out file (--keep), then one that lays out its own and cleans up.
        let s = form(&["--amount", "64k", "--fsync-every", "16", "--keep"]);
        assert!(s.contains("randwrite-sync16: 16 writes of 4k in a 256k file, 1 fsyncs"), "{s}");
        form(&["--amount", "128k", "--keep"]);
        assert!(target.path().join(".ferrofs-bench-randwrite/work.dat").exists(), "--keep leaves the file");
        form(&["--amount", "40k", "--fsync-every", "1"]);
        assert_clean(target.path());
    }
    let r = json(&out.path().join("ext4-randwrite-sync16.json"));
    assert_eq!(r["experiment"], "randwrite-sync16");
    let x = &r["results"];
    assert_eq!((x["writes"].as_u64(), x["fsyncs"].as_u64(), x["fsync_every"].as_u64()), (Some(16), Some(1), Some(16)));
    assert_eq!(x["total"]["status"], "ok");
    assert_eq!(x["total"]["bytes"], 64 * 1024);
    assert_eq!(x["layout"]["bytes"], 256 * 1024, "the file was written before the timed phase");
    assert_eq!(x["counter_key"], "Total numbers of erases");
    assert_eq!(x["counter_per_fsync"], 0.0, "the counter did not move");
    assert!(x["dirty_bytes"].is_null());
    let r = json(&out.path().join("ext4-randwrite-buffered.json"));
    let x = &r["results"];
    assert_eq!((x["writes"].as_u64(), x["fsyncs"].as_u64()), (Some(32), Some(1)), "buffered: one fsync, at the end");
    assert!(x["layout"].is_null(), "the kept file was reused");
    assert!(r["events"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().contains("reused")));
    let (last, max) = (x["final_fsync_s"].as_f64().unwrap(), x["fsync_latency"]["max_us"].as_f64().unwrap() / 1e6);
    assert!((last - max).abs() < 1e-9, "the one fsync is the last: {last} vs {max}");
    let r = json(&out.path().join("ext4-randwrite-sync1.json"));
    let x = &r["results"];
    assert_eq!((x["writes"].as_u64(), x["fsyncs"].as_u64()), (Some(10), Some(10)));
    assert_eq!(x["fsync_latency"]["count"], 10);
    assert_eq!(x["stopped_by"], "amount");

    // --max-duration stops the writes, and the pending fsync still runs.
    let cm = ["--out-dir", o, "--label", "capped", "--no-progress"];
    run_ok(&[&["randwrite", t, "--file-size", "1M", "--amount", "64M", "--fsync-every", "64", "--max-duration", "1ms"], &cm[..]].concat());
    let x = json(&out.path().join("capped-randwrite-sync64.json"))["results"].clone();
    assert_eq!(x["stopped_by"], "duration");
    let (w, f) = (x["writes"].as_u64().unwrap(), x["fsyncs"].as_u64().unwrap());
    assert!(w >= 1 && w < 16384 && f == w.div_ceil(64), "{x}");
    assert_clean(target.path());

    let rep = out.path().join("report");
    run_ok(&["report", o, "--out", rep.to_str().unwrap(), "--reference", "ferrofs-mtdblock", "--no-plots"]);
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    for section in ["## randwrite-sync16", "## randwrite-buffered", "## randwrite-sync1\n", "fsync after every 16 writes", "| Metric | ferrofs-mtdblock | ext4 | ferrofs-mtdblock / ext4 |", "| fsyncs | 1.000 | 1.000 | 1.00x |", "| writes | 10.000 | 10.000 | 1.00x |"] {
        assert!(md.contains(section), "missing {section:?}\n{md}");
    }
    assert!(md.lines().any(|l| l.starts_with("| MB/s |")), "{md}");
}

#[test]
fn bad_targets_are_errors_not_panics() {
    let out = tempfile::tempdir().unwrap();
    let o = out.path().to_str().unwrap();
    let file = out.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    for args in [
        vec!["sweep", "/nonexistent/ferrofs-bench", "--out-dir", o],
        vec!["dirty", file.to_str().unwrap(), "--out-dir", o],
        vec!["latency", "/nonexistent/x", "--out-dir", o],
        vec!["randwrite", "/nonexistent/x", "--out-dir", o],
        vec!["randwrite", file.to_str().unwrap(), "--out-dir", o],
        vec!["sweep", "--raw", file.to_str().unwrap(), "--destructive", "--out-dir", o],
        vec!["sweep", "--raw", "/dev/null", "--out-dir", o],
        vec!["report", "/nonexistent/results"],
        vec!["mount", "--mount-cmd", "exit 3", "--no-drop-caches", "--out-dir", o],
    ] {
        let r = run(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Bad arguments: clap's usage error (exit 2).
    let r = run(&["sweep", "/tmp", "--block-sizes", "4k,zz"]);
    assert_eq!(r.status.code(), Some(2));
}

/// Unmounts on drop so a failing assertion does not leave a mount behind.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn enospc_during_fill_is_reported_not_fatal() {
    // Needs a small filesystem: a 2 MiB tmpfs (root only); fails where it cannot mount one.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"]).arg(&mnt).stderr(std::process::Stdio::null()).status().map(|s| s.success()).unwrap_or(false);
    assert!(ok, "cannot run: mounting a 2 MiB tmpfs failed (needs root)");
    let _guard = Mounted(mnt.clone());
    let out = dir.path().join("out");
    let m = mnt.to_str().unwrap();
    // 768 KiB fill files cannot reach 99 % of 2 MiB without one of them hitting ENOSPC.
    run_ok(&["dirty", m, "--fill", "99", "--fill-file-size", "768k", "--block-sizes", "64k", "--amount", "128k", "--work-size", "128k", "--no-progress", "--out-dir", out.to_str().unwrap(), "--label", "tiny"]);
    let d = json(&out.join("tiny-dirty.json"));
    assert_eq!(d["results"]["fills"][0]["enospc"], true, "{d}");
    assert!(d["events"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().contains("ENOSPC")));
    // The measurement still ran on the full filesystem.
    assert_eq!(d["results"]["points"].as_array().unwrap().len(), 2);
    assert_clean(&mnt);
}

#[test]
fn o_direct_refused_is_unsupported() {
    // ramfs has no direct I/O: open(O_DIRECT) fails with EINVAL. Root only; fails elsewhere.
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("ram");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount").args(["-t", "ramfs", "ramfs"]).arg(&mnt).stderr(std::process::Stdio::null()).status().map(|s| s.success()).unwrap_or(false);
    assert!(ok, "cannot run: mounting a ramfs failed (needs root)");
    let _guard = Mounted(mnt.clone());
    let out = dir.path().join("out");
    run_ok(&["sweep", mnt.to_str().unwrap(), "--block-sizes", "4k", "--total", "64k", "--no-drop-caches", "--no-progress", "--out-dir", out.to_str().unwrap(), "--label", "ram"]);
    let s = json(&out.join("ram-sweep.json"));
    let pts = s["results"]["points"].as_array().unwrap();
    assert_eq!(pts[0]["mode"], "buffered");
    assert_eq!(pts[0]["write"]["status"], "ok");
    assert_eq!(pts[1]["mode"], "direct");
    assert_eq!(pts[1]["write"]["status"], "unsupported", "{s}");
    assert_eq!(pts[1]["read"]["status"], "unsupported");
    assert_clean(&mnt);
}
