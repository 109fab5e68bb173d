//! Filling a filesystem to a statvfs fraction with files, and fragmenting it by random deletion.
//!
//! ENOSPC while filling is an expected outcome on small media: the fill stops, the report says so,
//! and the measurement goes on.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::buf::{DataBuf, Progress, Rng};
use crate::cli::FillArgs;
use crate::error::{Context, Error, Result};
use crate::exp::{write_file, Ctx};
use crate::record::FillReport;

const FILES_PER_DIR: usize = 256;

/// The fill files written so far (kept across fill levels).
pub struct Filler {
    root: PathBuf,
    files: Vec<(PathBuf, u64)>,
    next_id: u64,
    rng: Rng,
    buf: DataBuf,
    args: FillArgs,
    /// Bytes written by all fills so far (for --max-fill-bytes).
    total_written: u64,
    /// Set once the filesystem said ENOSPC: later levels do not try again.
    full: bool,
}

impl Filler {
    pub fn new(root: PathBuf, args: &FillArgs, seed: u64) -> Self {
        let chunk = args.fill_file_size.min(1 << 20) as usize;
        Filler { root, files: Vec::new(), next_id: 0, rng: Rng::new(seed ^ 0xf111), buf: DataBuf::new(chunk, seed ^ 0xf111), args: args.clone(), total_written: 0, full: false }
    }

    fn used(&self, dir: &Path) -> Result<f64> {
        let u = crate::sys::statvfs(dir)?;
        u.used_fraction().ok_or_else(|| Error::msg(format!("{} reports a size of 0; fill levels cannot be computed", dir.display())))
    }

    /// Fills to `target`, deletes `delete_fraction` of all fill files at random, fills to `target` again.
    pub fn fill_and_fragment(&mut self, ctx: &mut Ctx, target: f64) -> Result<FillReport> {
        let t = Instant::now();
        let mut rep = FillReport { target_fraction: target, ..Default::default() };
        self.fill_to(ctx, target, &mut rep)?;
        // Fragment: random files die, leaving holes among live data in the erase blocks.
        let n_del = ((self.files.len() as f64) * self.args.delete_fraction.clamp(0.0, 1.0)).round() as usize;
        self.rng.shuffle(&mut self.files);
        for (p, sz) in self.files.drain(..n_del) {
            std::fs::remove_file(&p).with_ctx(|| format!("deleting fill file {}", p.display()))?;
            rep.files_deleted += 1;
            rep.bytes_deleted += sz;
        }
        crate::sys::sync_all();
        if n_del > 0 {
            self.full = false;
        }
        self.fill_to(ctx, target, &mut rep)?;
        rep.achieved_fraction = self.used(&self.root).ok();
        rep.seconds = t.elapsed().as_secs_f64();
        Ok(rep)
    }

    fn fill_to(&mut self, ctx: &mut Ctx, target: f64, rep: &mut FillReport) -> Result<()> {
        let usage = crate::sys::statvfs(&self.root)?;
        let mut used = self.used(&self.root)?;
        // Safety net against filesystems whose statvfs does not move: never write more than 2x the size.
        let limit = usage.total_bytes.saturating_mul(2);
        let mut written_here = 0u64;
        let to_write = ((target - used).max(0.0) * usage.total_bytes as f64) as u64;
        let pb = Progress::new(ctx.progress, to_write, &format!("fill to {:.0} %", target * 100.0));
        while used < target && !self.full {
            if self.args.max_fill_bytes > 0 && self.total_written >= self.args.max_fill_bytes {
                if !rep.capped {
                    ctx.event(format!("fill stopped by --max-fill-bytes at {:.1} % used (target {:.0} %)", used * 100.0, target * 100.0));
                }
                rep.capped = true;
                break;
            }
            if written_here > limit {
                ctx.event(format!("fill wrote {written_here} bytes but statvfs still says {:.1} % used; stopping", used * 100.0));
                break;
            }
            let id = self.next_id;
            self.next_id += 1;
            let sub = self.root.join(format!("d{}", id as usize / FILES_PER_DIR));
            if (id as usize).is_multiple_of(FILES_PER_DIR) {
                match std::fs::create_dir(&sub) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                        self.note_enospc(ctx, rep, used, target);
                        break;
                    }
                    Err(e) => return Err(e).with_ctx(|| format!("creating {}", sub.display())),
                }
            }
            let path = sub.join(format!("f{id}"));
            let size = self.args.fill_file_size;
            let chunk = self.buf.len() as u64;
            match write_file(&path, size, chunk, &mut self.buf, 0) {
                Ok(_) => {
                    self.files.push((path, size));
                    rep.files_written += 1;
                    rep.bytes_written += size;
                    self.total_written += size;
                    written_here += size;
                    pb.inc(size);
                }
                Err(e) if e.is_enospc() => {
                    // The partial file stays: it is part of the fill. Its size is unknown; count 0.
                    self.files.push((path, 0));
                    self.note_enospc(ctx, rep, used, target);
                    break;
                }
                Err(e) => return Err(e),
            }
            used = self.used(&self.root)?;
        }
        pb.finish();
        Ok(())
    }

    fn note_enospc(&mut self, ctx: &mut Ctx, rep: &mut FillReport, used: f64, target: f64) {
        self.full = true;
        rep.enospc = true;
        ctx.event(format!("ENOSPC while filling at {:.1} % used (target {:.0} %); continuing with the space reached", used * 100.0, target * 100.0));
    }
}
