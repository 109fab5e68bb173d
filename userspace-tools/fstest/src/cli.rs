//! Hand-rolled argument parsing (no dependencies: the binary must stay small and static).

use std::path::PathBuf;

use crate::{enospc, faults, fsx, integrity, posix, powercut, report, stress};

pub const USAGE: &str = "\
usage:
  ferrofs-fstest posix DIR [--other-dir DIR2] [--large-mib N] [--fsx-ops N] [--bigdir N]
                           [--only GROUP[,GROUP...]] [--drop-caches]
  ferrofs-fstest integrity write  DIR --seed S --total-mib N [--fsync] [--no-xattrs]
  ferrofs-fstest integrity verify DIR --seed S --total-mib N [--drop-caches] [--no-xattrs]
  ferrofs-fstest integrity clean  DIR --seed S
  ferrofs-fstest enospc DIR [--seed S] [--rounds N] [--max-mib N] [--drop-caches]
  ferrofs-fstest fsx DIR [--ops N] [--procs P] [--seed S] [--remount SRC:FSTYPE] [--drop-caches]
                         [--barrier-every N] [--max-len BYTES] [--inject-mismatch OP]
  ferrofs-fstest stress DIR [--seconds N] [--procs P] [--seed S] [--inject-mismatch 1]
  ferrofs-fstest powercut run    DIR --log DEV --seed S [--procs N] [--seconds T] [--log-half-mib M]
  ferrofs-fstest powercut verify DIR --log DEV [--log-half-mib M]
  ferrofs-fstest pattern --seed S --path P --offset O --len N   (hex dump of expected bytes)
  ferrofs-fstest faults churn DIR --seed S --files N --kib K --rounds R [--fsync]
  ferrofs-fstest faults write DIR --seed S --files N --kib K --gen G [--fsync]
  ferrofs-fstest faults verify DIR --seed S --files N --kib K --gen G [--expect-eio F,..] [--drop-caches]
  ferrofs-fstest faults locate MTDDEV --seed S --files N --kib K --gen G [--page-size B]
  ferrofs-fstest faults snapshot SRCMTD DSTMTD [--blank P,..]   (copy a mounted MTD: a power cut)
  ferrofs-fstest faults mtdpart-add MASTER NAME OFFSET LEN | mtdpart-del MASTER MTDNUM
  ferrofs-fstest faults romount SRC MNT --seed S --files N --kib K --gen G   (SRC: a read-only MTD)
  ferrofs-fstest hostile DISK MTD MNT [--first K] [--count N] [--image-timeout S]   (make hostile)
  ferrofs-fstest selftest [crash]   (harness self-check: a pass, a panic, optionally a SIGBUS)
  ferrofs-fstest lifecycle quiet|freeze|thaw|xattr-visibility|umount-timed DIR ...  (see lifecycle.rs)
  ferrofs-fstest ifmeta run|verify DIR   (POSIX ACLs and inode flags; see ifmeta.rs)
  ferrofs-fstest labels run|verify DIR   (security labels on new inodes, needs Smack; see labels.rs)
  ferrofs-fstest ifdata run DIR [--snapshot SRCMTD:DSTMTD] | verify DIR   (see ifdata.rs)

Each check prints `ok - NAME`, `ok - NAME # SKIP why` or `FAIL - NAME (expected X, got Y)`;
the last line is `N passed, N failed`. Exit status: 0 all passed, 1 a check failed, 2 usage.

posix groups: open dirs link symlink rename mknod attrs times names truncate sparse io fsx mmap
              sync xattr bigdir readdir perms statfs large
fsx: P processes, each on its own file with its own seed, verified against an in-memory model
     after every operation; every --barrier-every operations (per process) all close their files
     and the filesystem is unmounted and mounted again (--remount) or the caches dropped.
     --inject-mismatch OP (self-test) corrupts process 0's file behind its model at OP.
     defaults: --ops 10000 --procs 1 --seed 1 --barrier-every 2000 --max-len 262144
stress: P processes (renamers, readdir scanners, a mapper with a truncator, unlinkers of open
     files, linkers, owners of model-checked files) on shared directories for N seconds, then
     a check of the whole tree. defaults: --seconds 60 --procs 8 --seed 1
defaults: --large-mib 16, --fsx-ops 3000, --bigdir 10000, enospc --seed 1 --rounds 3 --max-mib 65536
";

struct Args {
    pos: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

const VALUED: &[&str] = &[
    "--other-dir",
    "--large-mib",
    "--fsx-ops",
    "--bigdir",
    "--only",
    "--seed",
    "--total-mib",
    "--rounds",
    "--max-mib",
    "--path",
    "--offset",
    "--len",
    "--files",
    "--kib",
    "--gen",
    "--expect-eio",
    "--page-size",
    "--blank",
    "--ops",
    "--procs",
    "--remount",
    "--barrier-every",
    "--max-len",
    "--inject-mismatch",
    "--seconds",
    "--log",
    "--log-half-mib",
];
const BOOL: &[&str] = &["--drop-caches", "--fsync", "--no-xattrs"];

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        pos: Vec::new(),
        flags: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let s = &args[i];
        if let Some((k, v)) = s.split_once('=').filter(|(k, _)| k.starts_with("--")) {
            if !VALUED.contains(&k) {
                return Err(format!("unknown option {k}"));
            }
            a.flags.push((k.to_string(), Some(v.to_string())));
        } else if VALUED.contains(&s.as_str()) {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{s} needs a value"))?;
            a.flags.push((s.clone(), Some(v.clone())));
            i += 1;
        } else if BOOL.contains(&s.as_str()) {
            a.flags.push((s.clone(), None));
        } else if s.starts_with("--") {
            return Err(format!("unknown option {s}"));
        } else {
            a.pos.push(s.clone());
        }
        i += 1;
    }
    Ok(a)
}

impl Args {
    fn get(&self, k: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.as_deref())
    }
    fn has(&self, k: &str) -> bool {
        self.flags.iter().any(|(n, _)| n == k)
    }
    fn num(&self, k: &str, default: Option<u64>) -> Result<u64, String> {
        match self.get(k) {
            None => default.ok_or_else(|| format!("{k} is required")),
            Some(v) => parse_num(v).ok_or_else(|| format!("{k}: not a number: {v}")),
        }
    }
    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        for (k, _) in &self.flags {
            if !allowed.contains(&k.as_str()) {
                return Err(format!("option {k} does not apply here"));
            }
        }
        Ok(())
    }
}

fn parse_num(v: &str) -> Option<u64> {
    if let Some(h) = v.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()
    } else {
        v.parse().ok()
    }
}

/// Runs the CLI; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    report::install_panic_hook();
    report::install_fatal_signal_handler();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferrofs-fstest: {e}\n\n{USAGE}");
            2
        }
    }
}

fn dir_arg(a: &Args, i: usize) -> Result<PathBuf, String> {
    let d = a.pos.get(i).ok_or("DIR is required")?;
    if a.pos.len() > i + 1 {
        return Err(format!("unexpected argument {}", a.pos[i + 1]));
    }
    Ok(PathBuf::from(d))
}

fn run(args: &[String]) -> Result<i32, String> {
    if args.first().map(String::as_str) == Some("ifdata") {
        return Ok(crate::ifdata::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("lifecycle") {
        return Ok(crate::lifecycle::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("hostile") {
        return Ok(crate::hostile::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("ifmeta") {
        return Ok(crate::ifmeta::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("labels") {
        return Ok(crate::labels::main(&args[1..]));
    }
    let a = parse(args)?;
    match a.pos.first().map(String::as_str) {
        Some("posix") => {
            a.only(&[
                "--other-dir",
                "--large-mib",
                "--fsx-ops",
                "--bigdir",
                "--only",
                "--drop-caches",
            ])?;
            let o = posix::Opts {
                dir: dir_arg(&a, 1)?,
                other_dir: a.get("--other-dir").map(PathBuf::from),
                large_mib: a.num("--large-mib", Some(16))?,
                fsx_ops: a.num("--fsx-ops", Some(3000))?,
                bigdir: a.num("--bigdir", Some(10_000))? as usize,
                drop_caches: a.has("--drop-caches"),
                only: a
                    .get("--only")
                    .map(|s| s.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            };
            let known = posix::group_names();
            if let Some(bad) = o.only.iter().find(|g| !known.contains(&g.as_str())) {
                return Err(format!(
                    "--only: no group {bad:?} (groups: {})",
                    known.join(" ")
                ));
            }
            Ok(posix::run(&o))
        }
        Some("integrity") => {
            let sub = a
                .pos
                .get(1)
                .map(String::as_str)
                .ok_or("integrity needs write, verify or clean")?;
            let dir = dir_arg(&a, 2)?;
            let seed = a.num("--seed", None)?;
            match sub {
                "clean" => {
                    a.only(&["--seed"])?;
                    integrity::clean(&dir, seed).map_err(|e| format!("clean: {e}"))?;
                    Ok(0)
                }
                "write" | "verify" => {
                    a.only(&[
                        "--seed",
                        "--total-mib",
                        "--fsync",
                        "--drop-caches",
                        "--no-xattrs",
                    ])?;
                    let o = integrity::Opts {
                        dir,
                        seed,
                        total_mib: a.num("--total-mib", None)?,
                        fsync: a.has("--fsync"),
                        no_xattrs: a.has("--no-xattrs"),
                        drop_caches: a.has("--drop-caches"),
                    };
                    Ok(if sub == "write" {
                        integrity::write(&o)
                    } else {
                        integrity::verify(&o)
                    })
                }
                other => Err(format!("unknown integrity subcommand {other}")),
            }
        }
        Some("enospc") => {
            a.only(&["--seed", "--rounds", "--max-mib", "--drop-caches"])?;
            let o = enospc::Opts {
                dir: dir_arg(&a, 1)?,
                seed: a.num("--seed", Some(1))?,
                rounds: a.num("--rounds", Some(3))? as u32,
                max_mib: a.num("--max-mib", Some(65536))?,
                drop_caches: a.has("--drop-caches"),
            };
            Ok(enospc::run(&o))
        }
        Some("fsx") => {
            a.only(&[
                "--ops",
                "--procs",
                "--seed",
                "--remount",
                "--barrier-every",
                "--max-len",
                "--inject-mismatch",
                "--drop-caches",
            ])?;
            let remount = match a.get("--remount") {
                None => None,
                Some(v) => {
                    let (s, t) = v
                        .rsplit_once(':')
                        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
                        .ok_or_else(|| format!("--remount: want SRC:FSTYPE, got {v}"))?;
                    Some((s.to_string(), t.to_string()))
                }
            };
            let procs = a.num("--procs", Some(1))?;
            if !(1..=64).contains(&procs) {
                return Err(format!("--procs: 1 to 64, got {procs}"));
            }
            let o = fsx::Opts {
                dir: dir_arg(&a, 1)?,
                ops: a.num("--ops", Some(10_000))?,
                procs: procs as u32,
                seed: a.num("--seed", Some(1))?,
                remount,
                barrier_every: a.num("--barrier-every", Some(2000))?,
                max_len: a.num("--max-len", Some(256 * 1024))?.clamp(4096, 64 << 20),
                inject: a
                    .get("--inject-mismatch")
                    .map(|_| a.num("--inject-mismatch", None))
                    .transpose()?,
                drop_caches: a.has("--drop-caches"),
            };
            Ok(fsx::run(&o))
        }
        Some("stress") => {
            a.only(&["--seconds", "--procs", "--seed", "--inject-mismatch"])?;
            let procs = a.num("--procs", Some(8))?;
            if !(2..=64).contains(&procs) {
                return Err(format!("--procs: 2 to 64, got {procs}"));
            }
            let o = stress::Opts {
                dir: dir_arg(&a, 1)?,
                seconds: a.num("--seconds", Some(60))?,
                procs: procs as u32,
                seed: a.num("--seed", Some(1))?,
                inject: a.num("--inject-mismatch", Some(0))? != 0,
            };
            Ok(stress::run(&o))
        }
        Some("powercut") => {
            let sub = a.pos.get(1).map(String::as_str).ok_or("powercut needs run or verify")?;
            let dir = dir_arg(&a, 2)?;
            let log = PathBuf::from(a.get("--log").ok_or("--log is required")?);
            let half_sectors = a.num("--log-half-mib", Some(32))? * 1024 * 1024 / powercut::SECTOR as u64;
            if half_sectors == 0 {
                return Err("--log-half-mib must be at least 1".into());
            }
            match sub {
                "run" => {
                    a.only(&["--log", "--seed", "--procs", "--seconds", "--log-half-mib"])?;
                    Ok(powercut::run(&powercut::RunOpts {
                        dir,
                        log,
                        half_sectors,
                        procs: a.num("--procs", Some(3))?.clamp(1, 16) as u32,
                        seed: a.num("--seed", None)?,
                        seconds: a.num("--seconds", Some(60))?,
                    }))
                }
                "verify" => {
                    a.only(&["--log", "--log-half-mib"])?;
                    Ok(powercut::verify(&powercut::VerifyOpts { dir, log, half_sectors }))
                }
                other => Err(format!("unknown powercut subcommand {other}")),
            }
        }
        Some("pattern") => {
            a.only(&["--seed", "--path", "--offset", "--len"])?;
            let key = crate::pattern::key_for(
                a.num("--seed", None)?,
                a.get("--path").ok_or("--path is required")?.as_bytes(),
            );
            let off = a.num("--offset", Some(0))?;
            let mut b = vec![0u8; a.num("--len", Some(64))?.min(1 << 20) as usize];
            crate::pattern::fill(key, off, &mut b);
            for (i, c) in b.chunks(16).enumerate() {
                let hex: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
                println!("{:010x}  {}", off + 16 * i as u64, hex.join(" "));
            }
            Ok(0)
        }
        Some("faults") => faults_cmd(&a),
        Some("selftest") => {
            // Exercises the harness itself: a passing check, a panicking group, and with
            // `crash` a SIGBUS inside a group (reported as one FAIL plus the summary line).
            let mut r = report::Report::new();
            r.group("selftest", |r| r.pass("a passing check"));
            r.group("panics", |_| panic!("deliberate panic"));
            if a.pos.get(1).map(String::as_str) == Some("crash") {
                r.group("crashes", |_| {
                    // SAFETY: raising a signal in our own process.
                    unsafe { libc::raise(libc::SIGBUS) };
                });
            }
            Ok(r.finish())
        }
        Some("help") | Some("-h") | Some("--help") => {
            print!("{USAGE}");
            Ok(0)
        }
        Some(other) => Err(format!("unknown command {other}")),
        None => Err("no command".into()),
    }
}

fn num_list(a: &Args, k: &str) -> Result<Vec<u32>, String> {
    match a.get(k) {
        None => Ok(Vec::new()),
        Some(l) => l
            .split(',')
            .map(|x| parse_num(x).map(|v| v as u32).ok_or_else(|| format!("{k}: not a number: {x}")))
            .collect(),
    }
}

fn faults_cmd(a: &Args) -> Result<i32, String> {
    let sub = a.pos.get(1).map(String::as_str).ok_or("faults needs a subcommand")?;
    let arg = |i: usize| a.pos.get(i).cloned().ok_or_else(|| format!("faults {sub}: argument {i} is missing"));
    let opts = |dir: PathBuf| -> Result<faults::Opts, String> {
        Ok(faults::Opts {
            dir,
            seed: a.num("--seed", Some(1))?,
            files: a.num("--files", Some(16))? as u32,
            kib: a.num("--kib", Some(256))?,
            gen: a.num("--gen", Some(0))? as u32,
            rounds: a.num("--rounds", Some(1))? as u32,
            fsync: a.has("--fsync"),
            expect_eio: num_list(a, "--expect-eio")?,
        })
    };
    match sub {
        "churn" => Ok(faults::churn(&opts(PathBuf::from(arg(2)?))?)),
        "write" => Ok(faults::write(&opts(PathBuf::from(arg(2)?))?)),
        "verify" => Ok(faults::verify(&opts(PathBuf::from(arg(2)?))?, a.has("--drop-caches"))),
        "locate" => {
            let o = opts(PathBuf::new())?;
            Ok(faults::locate(std::path::Path::new(&arg(2)?), &o, a.num("--page-size", Some(2048))?))
        }
        "mtdpart-add" => {
            let off = parse_num(&arg(4)?).ok_or("OFFSET: not a number")?;
            let len = parse_num(&arg(5)?).ok_or("LEN: not a number")?;
            Ok(faults::mtdpart(std::path::Path::new(&arg(2)?), Some(&arg(3)?), off, len, 0))
        }
        "mtdpart-del" => {
            let n = parse_num(&arg(3)?).ok_or("MTDNUM: not a number")?;
            Ok(faults::mtdpart(std::path::Path::new(&arg(2)?), None, 0, 0, n as i32))
        }
        "snapshot" => {
            let blank = num_list(a, "--blank")?;
            Ok(faults::snapshot(std::path::Path::new(&arg(2)?), std::path::Path::new(&arg(3)?), &blank))
        }
        "romount" => {
            let mnt = PathBuf::from(arg(3)?);
            let o = opts(PathBuf::from("faults"))?;
            Ok(faults::romount(&arg(2)?, &mnt, &o))
        }
        other => Err(format!("unknown faults subcommand {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flags() {
        let v: Vec<String> = [
            "posix",
            "/x",
            "--large-mib",
            "5",
            "--drop-caches",
            "--only=io,fsx",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let a = parse(&v).unwrap();
        assert_eq!(a.pos, vec!["posix", "/x"]);
        assert_eq!(a.num("--large-mib", None).unwrap(), 5);
        assert!(a.has("--drop-caches"));
        assert_eq!(a.get("--only"), Some("io,fsx"));
        assert!(parse(&["--bogus".to_string()]).is_err());
        assert!(parse(&["--seed".to_string()]).is_err());
        assert_eq!(parse_num("0x10"), Some(16));
    }
}
