use clap::Parser;

fn main() {
    let cli = ferrofs_bench::cli::Cli::parse();
    if let Err(e) = ferrofs_bench::run(cli) {
        eprintln!("ferrofs-bench: error: {e}");
        std::process::exit(1);
    }
}
