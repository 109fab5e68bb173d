//! A clean mount to profile (callgrind, perf): the rig's mount-scale data (32 MiB in files of
//! 4-256 KiB) on a device of the given MiB, unmounted, then `MOUNTS` clean mounts (default 3,
//! as the rig mounts it again and again); the last one goes through `mount_once`, the symbol to
//! `--toggle-collect` on.
//!
//! `valgrind --tool=callgrind --toggle-collect='*mount_once*' target/release/examples/mountprof 1024`

use ferrofs_engine::format::S_IFREG;
use ferrofs_engine::{CreateArgs, ROOT_INO};
use ferrofs_flashsim::NandSim;
use ferrofs_simbench::{fresh_fs, mount_opts, now, Fs, Rng};

#[inline(never)]
fn mount_once(sim: NandSim) -> Fs {
    Fs::mount(sim, mount_opts(0)).map_err(|(e, _)| e).expect("mount")
}

#[inline(never)]
fn mount_warm(sim: NandSim) -> Fs {
    Fs::mount(sim, mount_opts(0)).map_err(|(e, _)| e).expect("mount")
}

fn main() {
    let mut a = std::env::args().skip(1);
    let mib: u32 = a.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let mounts: u32 = a.next().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    let mut fs = fresh_fs(mib, 1, 0).expect("format");
    let mut rng = Rng::new(1);
    let args = CreateArgs { mode: S_IFREG | 0o644, uid: 0, gid: 0, rdev: 0 };
    let mut buf = vec![0u8; 256 << 10];
    let (mut written, mut dir) = (0u64, ROOT_INO);
    let mut i = 0u64;
    while written < 32 << 20 {
        if i % 100 == 0 {
            dir = fs.mkdir(ROOT_INO, format!("d{}", i / 100).as_bytes(), 0o755, 0, 0, now(i)).expect("mkdir").ino;
        }
        let size = 4096 * (1 + rng.below(64)) as usize;
        for c in buf[..size].chunks_mut(8) {
            c.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let ino = fs.create(dir, format!("f{i}").as_bytes(), &args, now(i)).expect("create").ino;
        fs.write(ino, 0, &buf[..size], now(i)).expect("write");
        written += size as u64;
        i += 1;
    }
    let mut sim = fs.unmount().map_err(|(e, _)| e).expect("unmount");
    for k in 0..mounts {
        let t = std::time::Instant::now();
        let fs = if k + 1 == mounts { mount_once(sim) } else { mount_warm(sim) };
        let st = fs.stats();
        eprintln!(
            "{mib} MiB: mount {:.3} ms, checkpoint {} B, SEGTAB {} B",
            t.elapsed().as_secs_f64() * 1e3,
            fs.checkpoint_bytes(),
            st.segtab_bytes
        );
        sim = fs.unmount().map_err(|(e, _)| e).expect("unmount");
    }
}
