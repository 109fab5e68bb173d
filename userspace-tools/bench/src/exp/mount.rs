//! `mount`: time a caller-given mount command after a clean unmount, with memory deltas.

use std::collections::BTreeMap;

use crate::cli::MountArgs;
use crate::error::Result;
use crate::exp::{median, Ctx};
use crate::record::{MountResults, MountRun};
use crate::sys::{drop_caches, read_meminfo, read_slabinfo, run_shell};

const MEMINFO_KEYS: [&str; 10] = ["MemFree", "MemAvailable", "Buffers", "Cached", "Slab", "SReclaimable", "SUnreclaim", "KernelStack", "VmallocUsed", "Percpu"];
const TOP_SLABS: usize = 10;

/// after - before for the keys present in both.
pub fn deltas(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, keys: Option<&[&str]>) -> BTreeMap<String, i64> {
    after
        .iter()
        .filter(|(k, _)| keys.is_none_or(|ks| ks.contains(&k.as_str())))
        .filter_map(|(k, &a)| before.get(k).map(|&b| (k.clone(), a as i64 - b as i64)))
        .collect()
}

/// The `n` entries with the largest absolute value (non-zero only).
pub fn top_abs(m: &BTreeMap<String, i64>, n: usize) -> BTreeMap<String, i64> {
    let mut v: Vec<(&String, &i64)> = m.iter().filter(|(_, v)| **v != 0).collect();
    v.sort_by_key(|(_, v)| std::cmp::Reverse(v.unsigned_abs()));
    v.into_iter().take(n).map(|(k, v)| (k.clone(), *v)).collect()
}

/// Memory held by the mounted filesystem (kB): meminfo's Slab change, less the change of the
/// excluded slab caches (`excluded_bytes`, from /proc/slabinfo: nandsim's pages), plus the
/// VmallocUsed and Percpu changes. meminfo's Slab (not /proc/slabinfo's objects) because it
/// also counts kmalloc allocations above the largest kmalloc cache (8 KiB), which come from the
/// page allocator and which slabinfo does not list (a filesystem's large tables: ferrofs's
/// segment table and index cache slots, JFFS2's and UBIFS's hash tables).
pub fn held(d: &BTreeMap<String, i64>, excluded_bytes: Option<i64>) -> Option<i64> {
    let slab_kb = d.get("Slab")? - excluded_bytes.unwrap_or(0) / 1024;
    Some(slab_kb + d.get("VmallocUsed")? + d.get("Percpu")?)
}

/// Empty the page, dentry and inode caches and give deferred frees (RCU) a moment, twice.
fn settle(enabled: bool) -> String {
    let r = drop_caches(None, enabled).unwrap_or_else(|e| format!("failed: {e}"));
    if enabled {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = drop_caches(None, true);
    }
    r
}

/// The experiment name a mount run is recorded under.
pub fn experiment_name(a: &MountArgs) -> &'static str {
    if a.after == "powercut" {
        "mount-powercut"
    } else {
        "mount"
    }
}

/// Times `a.floor_cmd` `a.floor_runs` times on an empty directory of the tool's (each run
/// undone by `a.floor_undo_cmd`); failures are events and end the measurement.
fn floor(ctx: &mut Ctx, a: &MountArgs) -> Vec<f64> {
    let mut out = Vec::new();
    if a.floor_runs == 0 {
        return out;
    }
    let dir = std::env::temp_dir().join(format!("ferrofs-bench-floor-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        ctx.event(format!("mount floor: cannot create {}: {e}", dir.display()));
        return out;
    }
    let d = dir.display().to_string();
    for i in 0..a.floor_runs {
        let cmd = a.floor_cmd.replace("{dir}", &d);
        match run_shell(&cmd) {
            Ok(r) if r.ok => out.push(r.seconds),
            Ok(r) => {
                ctx.event(format!("mount floor: {cmd:?} failed (exit {:?}) on run {}", r.exit_code, i + 1));
                break;
            }
            Err(e) => {
                ctx.event(format!("mount floor: {e}"));
                break;
            }
        }
        let undo = a.floor_undo_cmd.replace("{dir}", &d);
        if !run_shell(&undo).map(|r| r.ok).unwrap_or(false) {
            ctx.event(format!("mount floor: {undo:?} failed"));
            break;
        }
    }
    let _ = std::fs::remove_dir(&dir);
    if let Some(m) = median(&out) {
        say!("mount floor (shell + mount(8) of a tmpfs): median {m:.3} s over {} runs", out.len());
    }
    out
}

pub fn run(ctx: &mut Ctx, a: &MountArgs) -> Result<MountResults> {
    let floor_runs_s = floor(ctx, a);
    let floor_s = median(&floor_runs_s);
    let mut runs = Vec::new();
    for i in 0..a.repeat.max(1) {
        let umount = match &a.umount_cmd {
            Some(cmd) if i > 0 || !a.not_mounted => {
                let r = run_shell(cmd)?;
                if !r.ok {
                    ctx.event(format!("unmount command {cmd:?} failed (exit {:?}) before run {}", r.exit_code, i + 1));
                }
                Some(r)
            }
            _ => None,
        };
        let cache_drop = settle(!a.common.no_drop_caches);
        let (m0, s0) = (read_meminfo(), read_slabinfo());
        let mount = run_shell(&a.mount_cmd)?;
        // Settle: what the mount read into the page cache, and dentries/inodes, are not held memory.
        if !a.common.no_drop_caches {
            settle(true);
        }
        let (m1, s1) = (read_meminfo(), read_slabinfo());
        let meminfo_delta_kb = match (&m0, &m1) {
            (Some(b), Some(a)) => deltas(b, a, Some(&MEMINFO_KEYS)),
            _ => BTreeMap::new(),
        };
        let (slab_delta_bytes, slab_top_delta_bytes, excluded_bytes) = match (&s0, &s1) {
            (Some(b), Some(af)) => {
                let mut d = deltas(b, af, None);
                let excluded: i64 = d.iter().filter(|(k, _)| a.exclude_slab.contains(k)).map(|(_, v)| *v).sum();
                d.retain(|k, _| !a.exclude_slab.contains(k));
                (Some(d.values().sum()), top_abs(&d, TOP_SLABS), Some(excluded))
            }
            _ => (None, BTreeMap::new(), None),
        };
        let held_kb = held(&meminfo_delta_kb, excluded_bytes);
        say!(
            "mount run {}: {:.3} s{}{}{}",
            i + 1,
            mount.seconds,
            if mount.ok { String::new() } else { format!(" (FAILED, exit {:?})", mount.exit_code) },
            slab_delta_bytes.map(|d| format!(", slab {:+} kB", d / 1024)).unwrap_or_default(),
            held_kb.map(|d| format!(", held {d:+} kB")).unwrap_or_default()
        );
        let ok = mount.ok;
        runs.push(MountRun { umount, mount, meminfo_delta_kb, slab_delta_bytes, slab_top_delta_bytes, cache_drop, held_kb });
        if !ok {
            ctx.event(format!("mount command failed on run {}; stopping", i + 1));
            break;
        }
    }
    let times: Vec<f64> = runs.iter().filter(|r| r.mount.ok).map(|r| r.mount.seconds).collect();
    let median_s = median(&times);
    let net_median_s = median_s.zip(floor_s).map(|(m, f)| m - f);
    if let Some(n) = net_median_s {
        say!("mount minus floor: median {n:.3} s");
    }
    Ok(MountResults {
        min_s: times.iter().copied().reduce(f64::min),
        median_s,
        max_s: times.iter().copied().reduce(f64::max),
        runs,
        floor_runs_s,
        floor_s,
        net_median_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_math() {
        let b: BTreeMap<String, u64> = [("Slab".to_string(), 100), ("MemFree".to_string(), 1000), ("Other".to_string(), 1)].into();
        let a: BTreeMap<String, u64> = [("Slab".to_string(), 150), ("MemFree".to_string(), 900), ("Other".to_string(), 2), ("New".to_string(), 5)].into();
        let d = deltas(&b, &a, Some(&MEMINFO_KEYS));
        assert_eq!(d.len(), 2);
        assert_eq!(d["Slab"], 50);
        assert_eq!(d["MemFree"], -100);
        let all = deltas(&b, &a, None);
        assert_eq!(all.len(), 3);
        let t = top_abs(&all, 2);
        assert_eq!(t.len(), 2);
        assert!(t.contains_key("MemFree") && t.contains_key("Slab"));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let h: BTreeMap<String, i64> = [("Slab".to_string(), 300), ("VmallocUsed".to_string(), 128), ("Percpu".to_string(), -8), ("Cached".to_string(), 999)].into();
        assert_eq!(held(&h, None), Some(420));
        // nandsim's cache grew by 100 kB: not the filesystem's
        assert_eq!(held(&h, Some(100 * 1024)), Some(320));
        assert_eq!(held(&BTreeMap::new(), None), None);
    }
}
