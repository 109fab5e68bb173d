#!/bin/sh
# Run the ferrofs fuzz targets with cargo-fuzz (libFuzzer).
#
#   userspace-tools/fuzz/run.sh [SECONDS] [TARGET...]
#
# SECONDS (default 600) is given to each target as -max_total_time; targets default to
# mount_and_read and mount_raw. Works on the stable toolchain: RUSTC_BOOTSTRAP=1 lets cargo-fuzz
# pass its -Z flags to a stable rustc. Seeds are (re)generated from the engine into corpus/,
# crashes land in artifacts/<target>/, libFuzzer's output in logs/<target>.log.
# Build flags (default: optimized, with debug assertions and overflow checks, no sanitizer: the
# engine is forbid(unsafe_code), and ASan made runs 3-4x slower): FUZZ_BUILD="-s address" run.sh
# Extra libFuzzer flags: FUZZ_FLAGS="-jobs=2 -workers=2" run.sh 600
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-"mount_and_read mount_raw"}

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1

# seeds from valid images, built by the engine itself
cargo run --quiet --release --example make_corpus -- corpus

mkdir -p logs
for t in $targets; do
    case $t in
        mount_raw) maxlen=1048576 ;;
        *) maxlen=4096 ;;
    esac
    echo "== $t: ${secs}s" >&2
    # shellcheck disable=SC2086  # word splitting of FUZZ_BUILD and FUZZ_FLAGS is wanted
    cargo fuzz run ${FUZZ_BUILD:--O -a -s none} "$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len="$maxlen" \
        -dict=ferrofs.dict -print_final_stats=1 ${FUZZ_FLAGS:-} 2>&1 | tee "logs/$t.log" | grep -E "^#[0-9]+.*(pulse|DONE)|ERROR|SUMMARY|stat::" >&2 || true
    if ls "artifacts/$t"/crash-* "artifacts/$t"/oom-* "artifacts/$t"/timeout-* >/dev/null 2>&1; then
        echo "== $t: FINDINGS in artifacts/$t (minimize: cargo fuzz tmin $t <file>)" >&2
    fi
done
