//! The power-cut workload and verifier on the host (tmpfs): a workload killed at random moments
//! (SIGKILL to all its processes, without a power cut the tree is exact) must verify clean, and
//! the verifier must detect an fsync'd file that is lost, changed, or a durable directory entry
//! that is gone; torn or stale log sectors are not taken for records.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use ferrofs_fstest::powercut::{self, Body, LogDev, SECTOR};

static N: AtomicU32 = AtomicU32::new(0);
const HALF_MIB: u64 = 8;

struct Scratch {
    top: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let top = PathBuf::from(format!(
            "/dev/shm/fstest-pc.{}.{}.{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&top);
        std::fs::create_dir_all(top.join("fs")).unwrap();
        std::fs::File::create(top.join("log"))
            .unwrap()
            .set_len(2 * HALF_MIB << 20)
            .unwrap();
        Scratch { top }
    }
    fn fs(&self) -> PathBuf {
        self.top.join("fs")
    }
    fn log(&self) -> PathBuf {
        self.top.join("log")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrofs-fstest"))
}

fn run(s: &Scratch, seed: u64, seconds: u64) -> (i32, String) {
    let o = bin()
        .args(["powercut", "run"])
        .arg(s.fs())
        .arg("--log")
        .arg(s.log())
        .args(["--seed", &seed.to_string(), "--procs", "3", "--seconds", &seconds.to_string()])
        .args(["--log-half-mib", &HALF_MIB.to_string()])
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Starts the workload in its own process group and SIGKILLs the whole group after `ms`.
fn run_killed(s: &Scratch, seed: u64, ms: u64) {
    use std::os::unix::process::CommandExt;
    let mut c = bin()
        .args(["powercut", "run"])
        .arg(s.fs())
        .arg("--log")
        .arg(s.log())
        .args(["--seed", &seed.to_string(), "--procs", "3", "--seconds", "60"])
        .args(["--log-half-mib", &HALF_MIB.to_string()])
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let pg = c.id() as i32;
    // SAFETY: signalling the process group we just created.
    unsafe { libc::kill(-pg, libc::SIGKILL) };
    let _ = c.wait();
    // the workers may outlive the leader by a moment
    std::thread::sleep(std::time::Duration::from_millis(50));
}

struct V {
    code: i32,
    out: String,
    lost: u64,
    tree: u64,
}

fn verify(s: &Scratch) -> V {
    let o = bin()
        .args(["powercut", "verify"])
        .arg(s.fs())
        .arg("--log")
        .arg(s.log())
        .args(["--log-half-mib", &HALF_MIB.to_string()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = out
        .lines()
        .find(|l| l.starts_with("POWERCUT-VERIFY:"))
        .unwrap_or_else(|| panic!("no POWERCUT-VERIFY line in {out}"))
        .to_string();
    let field = |k: &str| -> u64 {
        let i = line.find(k).unwrap() + k.len();
        line[i..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    V {
        code: o.status.code().unwrap_or(-1),
        lost: field("lost="),
        tree: field("tree="),
        out,
    }
}

fn standing(s: &Scratch) -> powercut::Standing {
    let dev = LogDev::open(&s.log(), HALF_MIB * 1024 * 1024 / SECTOR as u64).unwrap();
    let eps = dev.epochs().unwrap();
    let ep = powercut::newest_committed(&eps).expect("a committed epoch").clone();
    powercut::standing(&ep)
}

#[test]
fn killed_workload_verifies_clean_and_continues() {
    let s = Scratch::new("kill");
    // nothing recorded yet: the check cannot run, so it fails
    assert_ne!(verify(&s).code, 0);
    let (rc, out) = run(&s, 1, 1);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("POWERCUT-WORKLOAD-START"), "{out}");
    for (i, ms) in [150u64, 400, 90, 700, 250].iter().enumerate() {
        let v = verify(&s);
        assert_eq!((v.code, v.lost, v.tree), (0, 0, 0), "cycle {i}: {}", v.out);
        run_killed(&s, 10 + i as u64, *ms);
    }
    let v = verify(&s);
    assert_eq!((v.code, v.lost, v.tree), (0, 0, 0), "{}", v.out);
    let st = standing(&s);
    assert!(!st.contents.is_empty() && !st.dirs.is_empty(), "nothing standing: {st:?}");
}

#[test]
fn verify_detects_lost_and_wrong_fsyncd_files() {
    let s = Scratch::new("detect");
    let (rc, out) = run(&s, 5, 1);
    assert_eq!(rc, 0, "{out}");
    let v = verify(&s);
    assert_eq!((v.code, v.lost), (0, 0), "{}", v.out);
    let st = standing(&s);

    // a changed byte in an fsync'd file
    let (ino, rec) = st
        .contents
        .iter()
        // one whose inode a standing entry names (a file renamed since its fsync has no path)
        .find(|(i, r)| r.size > 0 && st.entries.values().any(|e| e.ino == **i))
        .expect("a standing non-empty file");
    let path = st
        .entries
        .values()
        .find(|e| e.ino == *ino)
        .map(|e| e.path.clone())
        .unwrap_or_else(|| rec.path.clone());
    let p = s.fs().join(&path);
    let orig = std::fs::read(&p).unwrap();
    let mut bad = orig.clone();
    bad[orig.len() / 2] ^= 0x40;
    std::fs::write(&p, &bad).unwrap();
    let v = verify(&s);
    assert!(v.code != 0 && v.lost >= 1, "changed byte not detected: {}", v.out);
    assert!(v.out.contains("content digest"), "{}", v.out);
    std::fs::write(&p, &orig).unwrap();
    assert_eq!(verify(&s).lost, 0);

    // a shorter file
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(orig.len() as u64 - 1).unwrap();
    let v = verify(&s);
    assert!(v.lost >= 1 && v.out.contains("size"), "{}", v.out);
    std::fs::write(&p, &orig).unwrap();

    // a lost fsync'd file (all its names gone)
    let tmp = s.top.join("saved");
    let names: Vec<PathBuf> = walk(&s.fs()).into_iter().filter(|q| ino_of(q) == *ino).collect();
    assert!(!names.is_empty());
    std::fs::copy(&names[0], &tmp).unwrap();
    for n in &names {
        std::fs::remove_file(n).unwrap();
    }
    let v = verify(&s);
    assert!(v.lost >= 1 && v.out.contains("not found anywhere"), "{}", v.out);
    // put it back as a new inode: the entry names another inode now
    std::fs::copy(&tmp, &names[0]).unwrap();
    let v = verify(&s);
    assert!(v.lost >= 1, "{}", v.out);

    // a durable directory entry gone (a file appearing in an fsync'd directory counts too)
    let s2 = Scratch::new("detect-dir");
    assert_eq!(run(&s2, 6, 1).0, 0);
    let st2 = standing(&s2);
    let d = st2.dirs.keys().find(|d| d.starts_with('w')).expect("a standing worker directory").clone();
    std::fs::write(s2.fs().join(&d).join("intruder"), b"x").unwrap();
    let v = verify(&s2);
    assert!(v.lost >= 1 && v.out.contains("fsync'd directory"), "{}", v.out);
    std::fs::remove_file(s2.fs().join(&d).join("intruder")).unwrap();
    assert_eq!(verify(&s2).lost, 0);

    // a wrong link count is a tree problem
    let f = walk(&s2.fs()).into_iter().next().expect("a file");
    std::fs::hard_link(&f, s2.top.join("outside")).unwrap();
    let v = verify(&s2);
    assert!(v.tree >= 1 && v.code != 0, "{}", v.out);
}

#[test]
fn torn_and_stale_sectors_are_not_records() {
    let half = HALF_MIB * 1024 * 1024 / SECTOR as u64;
    let rec = Body::Intent(vec![powercut::Key::Ino(7), powercut::Key::Path("w0/f1".into())]);
    let s = powercut::encode(3, 9, &rec).unwrap();
    assert_eq!(powercut::decode(&s, 3), Some((9, rec.clone())));
    assert_eq!(powercut::decode(&s, 4), None, "a record read at another sector");
    for cut in [40usize, 100, 300, 511] {
        let mut t = s;
        // the rest of the sector still holds what was there before (here: erased 0xff)
        for b in &mut t[cut..] {
            *b = 0xff;
        }
        assert_eq!(powercut::decode(&t, 3), None, "torn at {cut}");
    }
    let mut t = s;
    t[200] ^= 1;
    assert_eq!(powercut::decode(&t, 3), None);

    // an epoch that never committed is ignored; the workload continues from the committed one
    let sc = Scratch::new("torn");
    // A workload of no time: a fast host fills a whole log half in one second, and the torn
    // sector below must land inside the committed epoch's half, not on the other half's BEGIN.
    assert_eq!(run(&sc, 2, 0).0, 0);
    let dev = LogDev::open(&sc.log(), half).unwrap();
    let eps = dev.epochs().unwrap();
    let c = powercut::newest_committed(&eps).unwrap().clone();
    assert!(c.end < half, "the first epoch filled its half: no room for the torn sector");
    dev.put(1 - c.half, 0, c.epoch + 1, &Body::Begin).unwrap();
    dev.put(1 - c.half, 1, c.epoch + 1, &Body::Intent(vec![powercut::Key::Dir("w0".into())])).unwrap();
    let eps = dev.epochs().unwrap();
    assert_eq!(powercut::newest_committed(&eps).unwrap().epoch, c.epoch);
    // a torn sector after the last record does not end the epoch's records early or count
    let mut junk = powercut::encode(c.end, c.epoch, &Body::Intent(vec![powercut::Key::Ino(1)])).unwrap();
    junk[300] ^= 0xff;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(sc.log()).unwrap();
        f.write_at(&junk, (c.half * half + c.end) * SECTOR as u64).unwrap();
    }
    let again = powercut::newest_committed(&dev.epochs().unwrap()).unwrap().clone();
    assert_eq!((again.epoch, again.recs.len()), (c.epoch, c.recs.len()), "the torn sector was taken for a record");
    let v = verify(&sc);
    assert_eq!((v.code, v.lost), (0, 0), "{}", v.out);
    assert_eq!(run(&sc, 3, 1).0, 0);
    let eps = dev.epochs().unwrap();
    assert_eq!(powercut::newest_committed(&eps).unwrap().epoch, c.epoch + 2, "epochs are never reused");
}

fn ino_of(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().ino()
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}
