//! `concurrency`: a reader streaming a cached file, alone and while another process overwrites a
//! different file; the reader's throughput under load as a fraction of its idle throughput.
//!
//! The reader file is written, fsynced and read once (so it is in the page cache), then the reader
//! streams it (`pread` of `--read-block`, wrapping at its end) for `--duration` alone. Then this
//! program starts itself again as the writer (`concurrency-writer`, a separate process, so the
//! kernel schedules two tasks as it would two applications): random block overwrites of its own
//! file, fsync every `--writer-fsync-every` bytes. Once the writer says it is writing, the reader
//! streams again for `--duration`; the writer runs half a second longer, so it covers the whole
//! loaded phase.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::buf::DataBuf;
use crate::cli::{ConcurrencyArgs, Pattern, WriterArgs};
use crate::error::{Context, Result};
use crate::exp::{cleanup, open_rw, work_dir, write_file, Ctx, Overwriter};
use crate::record::{ConcurrencyResults, Phase, ReaderPhase};
use crate::stats::mb_per_s;

/// The writer runs this much longer than the reader's loaded phase.
const WRITER_MARGIN: Duration = Duration::from_millis(500);

pub fn run(ctx: &mut Ctx, a: &ConcurrencyArgs) -> Result<ConcurrencyResults> {
    let w = work_dir(&a.dir, ".ferrofs-bench-concurrency")?;
    let r = run_in(ctx, a, &w);
    cleanup(ctx, &w);
    r
}

/// Streams `file` (of `size` bytes) in `bs` reads from offset 0, wrapping, for `dur`.
fn stream(file: &std::fs::File, size: u64, bs: u64, buf: &mut [u8], dur: Duration) -> std::io::Result<ReaderPhase> {
    let start = Instant::now();
    let (mut off, mut bytes, mut reads, mut max_ns) = (0u64, 0u64, 0u64, 0u128);
    loop {
        let n = bs.min(size - off) as usize;
        let t = Instant::now();
        let got = file.read_at(&mut buf[..n], off)?;
        let now = Instant::now();
        max_ns = max_ns.max(now.duration_since(t).as_nanos());
        if got == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("read file ends at {off}, expected {size} bytes")));
        }
        off += got as u64;
        if off >= size {
            off = 0;
        }
        bytes += got as u64;
        reads += 1;
        if now.duration_since(start) >= dur {
            break;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(ReaderPhase { bytes, seconds, mb_s: mb_per_s(bytes, seconds), reads, max_read_us: max_ns as f64 / 1e3 })
}

fn cpus() -> u64 {
    std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1)
}

fn run_in(ctx: &mut Ctx, a: &ConcurrencyArgs, w: &Path) -> Result<ConcurrencyResults> {
    let rsize = a.read_size.max(a.read_block);
    let wsize = a.write_size.max(a.write_block);
    let fsync_every = a.writer_fsync_every.unwrap_or(wsize);
    let mut buf = DataBuf::new(1 << 20, ctx.seed);
    let rpath = w.join("read.dat");
    let wpath = w.join("write.dat");
    drop(write_file(&rpath, rsize, 1 << 20, &mut buf, 0)?);
    drop(write_file(&wpath, wsize, 1 << 20, &mut buf, 0)?);
    let rfile = std::fs::File::open(&rpath).with_ctx(|| format!("opening {}", rpath.display()))?;
    let mut rbuf = vec![0u8; a.read_block as usize];
    let mut out = ConcurrencyResults {
        read_file_bytes: rsize,
        read_block: a.read_block,
        write_file_bytes: wsize,
        write_block: a.write_block,
        writer_fsync_every: fsync_every,
        cpus: cpus(),
        idle: None,
        loaded: None,
        loaded_pct_of_idle: None,
        writer: Phase::skipped("not started"),
    };
    // Warm the cache: one whole pass, untimed.
    let warm = (|| -> std::io::Result<()> {
        let mut off = 0;
        while off < rsize {
            let n = rfile.read_at(&mut rbuf, off)?;
            if n == 0 {
                break;
            }
            off += n as u64;
        }
        Ok(())
    })();
    if let Err(e) = warm {
        ctx.event(format!("concurrency: warming the read file: {e}"));
        return Ok(out);
    }
    match stream(&rfile, rsize, a.read_block, &mut rbuf, a.duration) {
        Ok(p) => out.idle = Some(p),
        Err(e) => {
            ctx.event(format!("concurrency: idle reader: {e}"));
            return Ok(out);
        }
    }
    let exe = std::env::current_exe().with_ctx(|| "locating ferrofs-bench for the writer process".to_string())?;
    let wdur = a.duration + WRITER_MARGIN;
    let mut child = Command::new(&exe)
        .arg("concurrency-writer")
        .arg(&wpath)
        .args(["--size", &wsize.to_string(), "--block", &a.write_block.to_string()])
        .args(["--duration", &format!("{}ms", wdur.as_millis()), "--fsync-every", &fsync_every.to_string(), "--seed", &ctx.seed.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .with_ctx(|| format!("starting the writer process {}", exe.display()))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        crate::bail!("the writer process has no stdout pipe");
    };
    let mut lines = BufReader::new(stdout).lines();
    // The writer prints `writing` once its file is open and the first overwrite is done.
    let ready = matches!(lines.next(), Some(Ok(ref l)) if l == "writing");
    if ready {
        match stream(&rfile, rsize, a.read_block, &mut rbuf, a.duration) {
            Ok(p) => out.loaded = Some(p),
            Err(e) => ctx.event(format!("concurrency: reader with the writer running: {e}")),
        }
    } else {
        ctx.event("concurrency: the writer process did not start writing".to_string());
    }
    let last: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let status = child.wait().with_ctx(|| "waiting for the writer process".to_string())?;
    let parsed = last.iter().rev().find_map(|l| {
        let mut bytes = None;
        let mut secs = None;
        for kv in l.split_whitespace() {
            match kv.split_once('=') {
                Some(("bytes", v)) => bytes = v.parse::<u64>().ok(),
                Some(("seconds", v)) => secs = v.parse::<f64>().ok(),
                _ => {}
            }
        }
        Some((bytes?, secs?))
    });
    out.writer = match (status.success(), parsed) {
        (true, Some((b, s))) => Phase::ok(b, s),
        (_, p) => {
            let m = format!("writer process exited with {status}: {}", last.join(" | "));
            ctx.event(format!("concurrency: {m}"));
            let (b, s) = p.unwrap_or((0, 0.0));
            Phase::failed("error", b, s, m)
        }
    };
    if let (Some(i), Some(l)) = (&out.idle, &out.loaded) {
        if i.mb_s > 0.0 {
            out.loaded_pct_of_idle = Some(100.0 * l.mb_s / i.mb_s);
        }
    }
    say!(
        "concurrency ({} CPU(s)): reader idle {} MB/s, with the writer {} MB/s ({} of idle); writer {} MB/s",
        out.cpus,
        out.idle.as_ref().map(|p| format!("{:.2}", p.mb_s)).unwrap_or_else(|| "n/a".into()),
        out.loaded.as_ref().map(|p| format!("{:.2}", p.mb_s)).unwrap_or_else(|| "n/a".into()),
        out.loaded_pct_of_idle.map(|p| format!("{p:.0} %")).unwrap_or_else(|| "n/a".into()),
        out.writer.mb_s.map(|m| format!("{m:.2}")).unwrap_or_else(|| "n/a".into())
    );
    Ok(out)
}

/// The writer process: random overwrites of `a.file` for `a.duration`, fsync every
/// `a.fsync_every` bytes (0: never) and at the end; prints `writing` after the first overwrite and
/// `bytes=N seconds=S` when done.
pub fn writer(a: &WriterArgs) -> Result<()> {
    let file = open_rw(&a.file, 0)?;
    let buf = DataBuf::new(a.block.max(1 << 20) as usize, a.seed ^ 0x77);
    let mut ow = Overwriter::new(file, a.size, a.block, Pattern::Random, a.seed ^ 0x57, buf);
    let start = Instant::now();
    let (mut bytes, mut since_sync) = (0u64, 0u64);
    let mut announced = false;
    loop {
        ow.write_one().with_ctx(|| format!("overwriting {}", a.file.display()))?;
        bytes += a.block;
        since_sync += a.block;
        if a.fsync_every > 0 && since_sync >= a.fsync_every {
            ow.file.sync_data().with_ctx(|| format!("fsync {}", a.file.display()))?;
            since_sync = 0;
        }
        if !announced {
            announced = true;
            let mut o = std::io::stdout();
            let _ = writeln!(o, "writing");
            let _ = o.flush();
        }
        if start.elapsed() >= a.duration {
            break;
        }
    }
    ow.file.sync_data().with_ctx(|| format!("fsync {}", a.file.display()))?;
    say!("bytes={bytes} seconds={:.6}", start.elapsed().as_secs_f64());
    Ok(())
}
