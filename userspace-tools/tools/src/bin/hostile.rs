//! ferrofs-hostile: writes a disk of hostile ferrofs images for `ferrofs-fstest hostile`
//! (`make hostile`). See `ferrofs_tools::hostile`.

use std::path::PathBuf;

use clap::Parser;
use ferrofs_tools::hostile::{build_bases, image_seed, make_image, parse, write_disk, IMAGE_BYTES};
use ferrofs_tools::util::clap_exit;

/// Generate hostile ferrofs images (seeded, reproducible) on one disk file.
#[derive(Parser, Debug)]
#[command(name = "ferrofs-hostile", version, about, long_about = None)]
struct Cli {
    /// Output disk file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Number of images.
    #[arg(long, default_value_t = 200)]
    images: u32,
    /// Master seed (image i has seed `image_seed(master, i)`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one line per image: index, seed, label.
    #[arg(long)]
    list: bool,
    /// Write image I as a raw 4 MiB device image to FILE (to reproduce one case).
    #[arg(long, num_args = 2, value_names = ["I", "FILE"])]
    dump: Vec<String>,
}

fn main() {
    ferrofs_tools::util::default_sigpipe();
    let cli = Cli::try_parse().unwrap_or_else(|e| clap_exit::<Cli>(e));
    let bases = match build_bases(cli.seed) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("ferrofs-hostile: building the base images failed: {e}");
            std::process::exit(1);
        }
    };
    if let [i, file] = cli.dump.as_slice() {
        let Ok(i) = i.parse::<u32>() else {
            eprintln!("ferrofs-hostile: --dump wants an image index, got {i}");
            std::process::exit(2);
        };
        let parsed: Vec<_> = match bases.iter().map(|b| parse(&b.data)).collect::<Result<Vec<_>, _>>() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("ferrofs-hostile: a base does not parse: {e}");
                std::process::exit(1);
            }
        };
        let img = make_image(&bases, &parsed, image_seed(cli.seed, i));
        if let Err(e) = std::fs::write(file, &img.data) {
            eprintln!("ferrofs-hostile: write {file}: {e}");
            std::process::exit(1);
        }
        println!("image {i} seed {:#018x} {} -> {file} ({} bytes)", img.seed, img.label, IMAGE_BYTES);
        return;
    }
    let Some(out) = cli.out else {
        eprintln!("ferrofs-hostile: --out FILE is required (or --dump I FILE)");
        std::process::exit(2);
    };
    match write_disk(&out, cli.seed, cli.images, &bases) {
        Ok(labels) => {
            if cli.list {
                for (i, (s, l)) in labels.iter().enumerate() {
                    println!("{i} {s:#018x} {l}");
                }
            }
            let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
            println!(
                "ferrofs-hostile: {} images (seed {}) from {} bases on {} ({} bytes)",
                cli.images,
                cli.seed,
                bases.len(),
                out.display(),
                size
            );
        }
        Err(e) => {
            eprintln!("ferrofs-hostile: {e}");
            std::process::exit(1);
        }
    }
}
