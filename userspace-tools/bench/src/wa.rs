//! Write amplification: device-side write counters read before and after a measured phase.
//!
//! Two sources: (a) a caller-named file of `key=value` lines (ferrofs's sysfs/debugfs stats, a
//! script's dump of MTD counters, ...), of which one key scaled by a factor counts bytes written to
//! the medium; (b) `/proc/diskstats` sectors written (512-byte units) for a block device.
//! WA = device bytes written / bytes the benchmark wrote.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Parses `key=value` (or `key: value`) lines; blank lines and `#` comments are skipped, lines whose
/// value is not a number are returned in the second list.
pub fn parse_counters(text: &str) -> (BTreeMap<String, f64>, Vec<String>) {
    let mut map = BTreeMap::new();
    let mut bad = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let Some((k, v)) = l.split_once('=').or_else(|| l.split_once(':')) else {
            bad.push(l.to_string());
            continue;
        };
        // Tolerate a unit or trailing words after the number ("1234 bytes").
        let v = v.split_whitespace().next().unwrap_or("");
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() => {
                map.insert(k.trim().to_string(), n);
            }
            _ => bad.push(l.to_string()),
        }
    }
    (map, bad)
}

/// Counters of one device line of `/proc/diskstats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStat {
    pub sectors_read: u64,
    pub sectors_written: u64,
    /// Write requests completed (after merging: the device's own write count).
    pub writes: u64,
    /// Flush requests completed (kernels since 5.5; `None` on shorter lines).
    pub flushes: Option<u64>,
}

/// Finds `dev` (e.g. "vda", "mtdblock0"; a leading "/dev/" is ignored) in `/proc/diskstats` text.
pub fn parse_diskstats(text: &str, dev: &str) -> Option<DiskStat> {
    let dev = dev.strip_prefix("/dev/").unwrap_or(dev);
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[2] != dev {
            return None;
        }
        Some(DiskStat { sectors_read: f[5].parse().ok()?, sectors_written: f[9].parse().ok()?, writes: f[7].parse().ok()?, flushes: f.get(18).and_then(|v| v.parse().ok()) })
    })
}

/// WA = device bytes / application bytes; `None` when the application wrote nothing.
pub fn write_amplification(app_bytes: u64, device_bytes: f64) -> Option<f64> {
    if app_bytes == 0 || !device_bytes.is_finite() {
        None
    } else {
        Some(device_bytes / app_bytes as f64)
    }
}

/// Where to read device counters from.
#[derive(Debug, Clone, Default)]
pub struct WaConfig {
    pub counters_file: Option<PathBuf>,
    /// The key of `counters_file` that counts medium writes.
    pub counter_key: String,
    /// Bytes per unit of `counter_key` (1 for bytes, the page size for a page counter).
    pub counter_scale: f64,
    pub diskstats_dev: Option<String>,
    pub diskstats_path: PathBuf,
}

/// Counters at one instant.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    counters: Option<BTreeMap<String, f64>>,
    disk: Option<DiskStat>,
    errors: Vec<String>,
}

/// WA of one measured phase, as stored in the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WaSample {
    /// Bytes the benchmark wrote in the phase.
    pub app_bytes: u64,
    /// From the counters file: `counter_key` delta x `counter_scale`.
    pub counter_device_bytes: Option<f64>,
    pub counter_wa: Option<f64>,
    /// Every numeric key's delta, for later analysis.
    #[serde(default)]
    pub counters_delta: BTreeMap<String, f64>,
    /// From /proc/diskstats: sectors written delta x 512.
    pub diskstats_device_bytes: Option<u64>,
    pub diskstats_wa: Option<f64>,
    /// From /proc/diskstats: write requests and flush requests completed in the phase (bytes /
    /// writes = the average write the device saw).
    #[serde(default)]
    pub diskstats_writes: Option<u64>,
    #[serde(default)]
    pub diskstats_flushes: Option<u64>,
    #[serde(default)]
    pub errors: Vec<String>,
}

impl WaSample {
    /// The WA to show: the counters file's if present, else diskstats'.
    pub fn best(&self) -> Option<f64> {
        self.counter_wa.or(self.diskstats_wa)
    }
}

impl WaConfig {
    pub fn enabled(&self) -> bool {
        self.counters_file.is_some() || self.diskstats_dev.is_some()
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        if let Some(p) = &self.counters_file {
            match std::fs::read_to_string(p) {
                Ok(t) => {
                    let (m, bad) = parse_counters(&t);
                    if !bad.is_empty() {
                        s.errors.push(format!("{}: {} unparsed line(s), first {:?}", p.display(), bad.len(), bad[0]));
                    }
                    s.counters = Some(m);
                }
                Err(e) => s.errors.push(format!("reading counters file {}: {e}", p.display())),
            }
        }
        if let Some(dev) = &self.diskstats_dev {
            match std::fs::read_to_string(&self.diskstats_path) {
                Ok(t) => match parse_diskstats(&t, dev) {
                    Some(d) => s.disk = Some(d),
                    None => s.errors.push(format!("device {dev} not found in {}", self.diskstats_path.display())),
                },
                Err(e) => s.errors.push(format!("reading {}: {e}", self.diskstats_path.display())),
            }
        }
        s
    }

    /// The WA sample between two snapshots; `None` when no counter source is configured.
    pub fn sample(&self, before: &Snapshot, after: &Snapshot, app_bytes: u64) -> Option<WaSample> {
        if !self.enabled() {
            return None;
        }
        let mut out = WaSample { app_bytes, ..Default::default() };
        out.errors.extend(before.errors.iter().cloned());
        for e in &after.errors {
            if !out.errors.contains(e) {
                out.errors.push(e.clone());
            }
        }
        if let (Some(b), Some(a)) = (&before.counters, &after.counters) {
            for (k, av) in a {
                if let Some(bv) = b.get(k) {
                    out.counters_delta.insert(k.clone(), av - bv);
                }
            }
            match out.counters_delta.get(&self.counter_key) {
                Some(d) => {
                    let bytes = d * self.counter_scale;
                    out.counter_device_bytes = Some(bytes);
                    out.counter_wa = write_amplification(app_bytes, bytes);
                }
                None => out.errors.push(format!("counter key {:?} not in counters file", self.counter_key)),
            }
        }
        if let (Some(b), Some(a)) = (before.disk, after.disk) {
            let bytes = a.sectors_written.saturating_sub(b.sectors_written) * 512;
            out.diskstats_device_bytes = Some(bytes);
            out.diskstats_wa = write_amplification(app_bytes, bytes as f64);
            out.diskstats_writes = Some(a.writes.saturating_sub(b.writes));
            out.diskstats_flushes = a.flushes.zip(b.flushes).map(|(a, b)| a.saturating_sub(b));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISKSTATS: &str = "\
 253       0 vda 1200 10 96000 300 5000 20 80000 900 0 1000 1200 0 0 0 0 77 5
  31       0 mtdblock0 10 0 80 1 2 0 16 3 0 4 4
";

    #[test]
    fn counters_parse() {
        let (m, bad) = parse_counters("# ferrofs stats\nbytes_written=4096\npages_programmed = 2\n\ngc_runs: 7 runs\nname=ferro\n");
        assert_eq!(m["bytes_written"], 4096.0);
        assert_eq!(m["pages_programmed"], 2.0);
        assert_eq!(m["gc_runs"], 7.0);
        assert_eq!(bad, vec!["name=ferro".to_string()]);
    }

    #[test]
    fn diskstats_parse() {
        assert_eq!(parse_diskstats(DISKSTATS, "vda"), Some(DiskStat { sectors_read: 96000, sectors_written: 80000, writes: 5000, flushes: Some(77) }));
        assert_eq!(parse_diskstats(DISKSTATS, "/dev/mtdblock0"), Some(DiskStat { sectors_read: 80, sectors_written: 16, writes: 2, flushes: None }), "a line of an older kernel has no flush count");
        assert_eq!(parse_diskstats(DISKSTATS, "vdb"), None);
        assert_eq!(parse_diskstats("garbage", "vda"), None);
    }

    #[test]
    fn wa_math() {
        assert_eq!(write_amplification(1000, 5000.0), Some(5.0));
        assert_eq!(write_amplification(0, 5000.0), None);
        assert_eq!(write_amplification(10, f64::NAN), None);
    }

    #[test]
    fn wa_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let counters = dir.path().join("stats");
        let ds = dir.path().join("diskstats");
        std::fs::write(&counters, "pages_programmed=10\nerases=1\n").unwrap();
        std::fs::write(&ds, DISKSTATS).unwrap();
        let cfg = WaConfig {
            counters_file: Some(counters.clone()),
            counter_key: "pages_programmed".into(),
            counter_scale: 2048.0,
            diskstats_dev: Some("vda".into()),
            diskstats_path: ds.clone(),
        };
        let before = cfg.snapshot();
        std::fs::write(&counters, "pages_programmed=110\nerases=3\n").unwrap();
        std::fs::write(&ds, DISKSTATS.replace("80000", "80400").replace(" 5000 ", " 5004 ").replace(" 77 ", " 80 ")).unwrap();
        let after = cfg.snapshot();
        let s = cfg.sample(&before, &after, 102_400).unwrap();
        assert_eq!(s.counter_device_bytes, Some(204_800.0));
        assert_eq!(s.counter_wa, Some(2.0));
        assert_eq!(s.counters_delta["erases"], 2.0);
        assert_eq!(s.diskstats_device_bytes, Some(400 * 512));
        assert_eq!(s.diskstats_wa, Some(2.0));
        assert_eq!((s.diskstats_writes, s.diskstats_flushes), (Some(4), Some(3)));
        assert_eq!(s.best(), Some(2.0));
        assert!(s.errors.is_empty(), "{:?}", s.errors);

        let missing = WaConfig { counters_file: Some(dir.path().join("nope")), counter_key: "x".into(), counter_scale: 1.0, ..Default::default() };
        let s = missing.sample(&missing.snapshot(), &missing.snapshot(), 1).unwrap();
        assert_eq!(s.best(), None);
        assert_eq!(s.errors.len(), 1);
        assert!(WaConfig::default().sample(&Snapshot::default(), &Snapshot::default(), 1).is_none());
    }
}
