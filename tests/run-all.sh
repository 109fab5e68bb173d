#!/usr/bin/env bash
# `make test`: the whole chain on this machine, from a fresh clone.
#   toolchain -> kernel (cached) -> ferrofs.ko -> userspace tools -> cargo test -> initramfs
#   -> harness self-test -> guest suites
# Prints each step's wall time and ends with "N passed, N failed" over every check that ran.
set -uo pipefail
cd "$(dirname "$0")/.."
source qemu/env.sh
passed=0; failed=0; t0=$(date +%s)
step_start=0
begin() { step_start=$(date +%s); echo; echo "=== $1"; }
took() { echo "=== $1: $(( $(date +%s) - step_start ))s"; }
abort() { echo "make test: $1 failed; stopping"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

begin "toolchain"; qemu/install-deps.sh || abort "toolchain install"; took toolchain
begin "kernel ($FERROFS_KFLAVOUR)"; qemu/build-kernel.sh >/dev/null || abort "kernel build"; took kernel
begin "module"; qemu/build-module.sh >/dev/null || abort "ferrofs.ko build (or it printed warnings)"
qemu/build-module.sh "$PWD/tests/harness/faulty" >/dev/null || abort "harness test module build"; took module
begin "userspace tools"; qemu/build-tools.sh || abort "userspace tools build"; took tools

begin "cargo test"
log=build/logs/cargo-test.log; mkdir -p build/logs
(cd userspace-tools && cargo test --release 2>&1) | tee "$log" | grep -E '^test result:|^error|FAILED|panicked'
crc=${PIPESTATUS[0]}
p=$(awk '/^test result:/ {for (i=1;i<=NF;i++) if ($i ~ /^passed;?$/) s+=$(i-1)} END {print s+0}' "$log")
f=$(awk '/^test result:/ {for (i=1;i<=NF;i++) if ($i ~ /^failed;?$/) s+=$(i-1)} END {print s+0}' "$log")
[ $crc -ne 0 ] && [ "$f" -eq 0 ] && f=1
passed=$((passed + p)); failed=$((failed + f))
echo "cargo: $p passed, $f failed"; took "cargo test"

begin "initramfs"
qemu/mkinitramfs.sh "$(kernel_dir)/linux" "build/initramfs-$FERROFS_KFLAVOUR.cpio.gz" tests/harness/faulty/faulty.ko \
  || abort "initramfs"; took initramfs

begin "harness self-test"
out="$(tests/harness/test-harness.sh)"; echo "$out"
line="$(grep -E '^harness: ' <<<"$out" | tail -n1)"
[ -n "$line" ] || line="harness: 0 passed, 1 failed"
passed=$((passed + $(awk '{print $2}' <<<"$line"))); failed=$((failed + $(awk '{print $4}' <<<"$line")))
took "harness self-test"

begin "guest suites"
tests/run-guest-suites.sh 2>&1 | tee build/logs/guest-suites.log
line="$(grep -E '^guest: ' build/logs/guest-suites.log | tail -n1)"
[ -n "$line" ] || line="guest: 0 passed, 1 failed"
passed=$((passed + $(awk '{print $2}' <<<"$line"))); failed=$((failed + $(awk '{print $4}' <<<"$line")))
took "guest suites"

echo
echo "make test: total $(( $(date +%s) - t0 ))s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
