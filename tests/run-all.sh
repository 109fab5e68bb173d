#!/usr/bin/env bash
# `make test`: the whole chain on this machine, from a fresh clone.
#   toolchain -> userspace tools -> cargo test
#   -> for each kernel flavour: kernel (cached) -> ferrofs.ko -> initramfs -> harness self-test
#      -> guest suites -> power cuts (tests/powercut/run-powercut.sh: 5 cuts on MTD, beside them 3 on
#         the block backend then 3 on mtdblock) -> root filesystem (release only: tests/rootfs/run-rootfs.sh quick)
#      -> hostile images (200)
# The debug kernel, when not cached, builds in the background (nice 19) from the toolchain step on.
# The release flavour runs every suite in tests/vm/SUITES; the debug flavour (KASAN, lockdep,
# DEBUG_LIST, KFENCE) runs the suites in tests/vm/SUITES.debug, unless FERROFS_DEBUG=0.
# FERROFS_KFLAVOUR=debug runs only the debug flavour, with every suite.
# Prints each step's wall time and ends with "N passed, N failed" over every check that ran.
set -uo pipefail
cd "$(dirname "$0")/.."
source qemu/env.sh
mkdir -p build/logs
passed=0; failed=0; t0=$(date +%s)
step_start=0
# The summary at the end repeats every step's time and every check line that failed, so the
# last screen of a long log says where the time went and what failed.
step_name=; step_times=(); failures=()
begin() { step_start=$(date +%s); step_name="$1"; echo; echo "=== $1"; }
took() {
  local t=$(( $(date +%s) - step_start ))
  step_times+=("$(printf '%6ds  %s' "$t" "$1")"); echo "=== $1: ${t}s"
}
summary() {
  echo; echo "make test: step times"; printf '  %s\n' "${step_times[@]}"
  if [ ${#failures[@]} -gt 0 ]; then echo "make test: failed checks"; printf '  %s\n' "${failures[@]}"; fi
}
abort() {
  failures+=("$step_name: $1 failed (stopped here)"); summary
  echo "make test: $1 failed; stopping"; echo "$passed passed, $((failed + 1)) failed"; exit 1
}
# add_line "LABEL: N passed, N failed" [DETAIL]: add the counts (a missing line counts as one
# failure); a line with failures is kept for the summary, with DETAIL (which suites failed).
add_line() {
  local line="$1" p f
  [ -n "$line" ] || line="0 passed, 1 failed (no result line)"
  # The counts are the numbers before "passed," and "failed" (a label may hold spaces).
  if [[ "$line" =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    p=${BASH_REMATCH[1]}; f=${BASH_REMATCH[2]}
  else
    p=0; f=1; line="unreadable result line: $line"
  fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -eq 0 ] || failures+=("$step_name: $line${2:+ [$2]}")
}

begin "toolchain"; qemu/install-deps.sh || abort "toolchain install"; took toolchain

# The debug kernel builds in the background at the lowest priority while the release flavour
# runs: its guests keep one host core mostly idle (one vCPU busy, the other halted), which the
# build soaks up; the debug flavour waits for it (step "kernel (debug)"). FERROFS_BG_KERNEL=0 builds
# it in the foreground instead.
bg_kernel_pid=
if [ "${FERROFS_KFLAVOUR:-release}" != debug ] && [ "${FERROFS_DEBUG:-1}" != 0 ] && [ "${FERROFS_BG_KERNEL:-1}" != 0 ]; then
  (export FERROFS_KFLAVOUR=debug; source qemu/env.sh; exec setsid nice -n 19 qemu/build-kernel.sh) \
    > build/logs/kernel-debug-build.log 2>&1 &
  bg_kernel_pid=$!
  # A failed release flavour stops make test: do not leave the build running behind it.
  # (setsid: the build is its own process group, so make's children go with it)
  trap '[ -z "$bg_kernel_pid" ] || kill -TERM -- "-$bg_kernel_pid" 2>/dev/null' EXIT
  echo "make test: building the debug kernel in the background (nice 19, log build/logs/kernel-debug-build.log)"
fi
begin "userspace tools"; qemu/build-tools.sh || abort "userspace tools build"; took tools

begin "cargo test"
log=build/logs/cargo-test.log
(cd userspace-tools && cargo test --release -- --show-output 2>&1) | tee "$log" | grep -E '^test result:|^error|FAILED|panicked|crash enumeration'
crc=${PIPESTATUS[0]}
p=$(awk '/^test result:/ {for (i=1;i<=NF;i++) if ($i ~ /^passed;?$/) s+=$(i-1)} END {print s+0}' "$log")
f=$(awk '/^test result:/ {for (i=1;i<=NF;i++) if ($i ~ /^failed;?$/) s+=$(i-1)} END {print s+0}' "$log")
[ $crc -ne 0 ] && [ "$f" -eq 0 ] && f=1
add_line "cargo: $p passed, $f failed" "$(grep -E '^test .* FAILED$|^error' "$log" | head -n 5 | tr '\n' ';')"
echo "cargo: $p passed, $f failed"; took "cargo test"

# run_flavour FLAVOUR SUITES_FILE: kernel, module, initramfs, (harness test), guest suites.
run_flavour() {
  local flavour="$1" suites_file="$2"
  export FERROFS_KFLAVOUR="$flavour"
  source qemu/env.sh   # the kernel's cache key depends on the flavour
  begin "kernel ($flavour)"
  if [ "$flavour" = debug ] && [ -n "$bg_kernel_pid" ]; then
    echo "waiting for the background debug kernel build (started at the toolchain step)"
    wait "$bg_kernel_pid" || { tail -n 20 build/logs/kernel-debug-build.log; abort "$flavour kernel build (background)"; }
    bg_kernel_pid=
  fi
  qemu/build-kernel.sh >/dev/null || abort "$flavour kernel build"; took "kernel ($flavour)"
  begin "module ($flavour)"
  qemu/build-module.sh >/dev/null || abort "ferrofs.ko build for the $flavour kernel (or it printed warnings)"
  qemu/build-module.sh "$PWD/tests/harness/faulty" >/dev/null || abort "harness test module build"
  took "module ($flavour)"
  begin "initramfs ($flavour)"
  qemu/mkinitramfs.sh "$(kernel_dir)/linux" "build/initramfs-$flavour.cpio" tests/harness/faulty/faulty.ko \
    || abort "initramfs"; took "initramfs ($flavour)"
  begin "harness self-test ($flavour)"
  tests/harness/test-harness.sh 2>&1 | tee "build/logs/harness-$flavour.log"
  add_line "$(grep -E '^harness: ' "build/logs/harness-$flavour.log" | tail -n1)"
  took "harness self-test ($flavour)"
  begin "guest suites ($flavour)"
  FERROFS_SUITES="$(grep -vE '^\s*(#|$)' "$suites_file" | awk '{print $1}' | tr '\n' ' ')" \
    tests/run-guest-suites.sh 2>&1 | tee "build/logs/guest-suites-$flavour.log"
  add_line "$(grep -E '^guest: ' "build/logs/guest-suites-$flavour.log" | tail -n1)" \
    "$(grep -E '^guest suite ' "build/logs/guest-suites-$flavour.log" | grep -vE ' 0 failed \(exit 0\)$' | cut -c1-300 | tr '\n' ';')"
  took "guest suites ($flavour)"
  begin "power cuts ($flavour)"
  # ferrofs on MTD (block2mtd) and, side by side (one guest each), through the block backend:
  # on the virtio disk itself (FERROFS_POWERCUT_BLK_CUTS cuts), then on mtdblock over block2mtd
  # (FERROFS_POWERCUT_MTDBLOCK_CUTS cuts)
  local blk_rc_file mtdblock_rc_file
  blk_rc_file="$(mktemp)"; mtdblock_rc_file="$(mktemp)"
  {
    CUTS="${FERROFS_POWERCUT_BLK_CUTS:-3}" FS=ferrofs-blk tests/powercut/run-powercut.sh > "build/logs/powercut-blk-$flavour.log" 2>&1
    echo $? > "$blk_rc_file"
    CUTS="${FERROFS_POWERCUT_MTDBLOCK_CUTS:-3}" FS=ferrofs-mtdblock tests/powercut/run-powercut.sh > "build/logs/powercut-mtdblock-$flavour.log" 2>&1
    echo $? > "$mtdblock_rc_file"
  } &
  local blk_pid=$!
  CUTS="${FERROFS_POWERCUT_CUTS:-5}" FS=ferrofs tests/powercut/run-powercut.sh 2>&1 | tee "build/logs/powercut-$flavour.log"
  local pc_rc=${PIPESTATUS[0]} pc_line blk_rc mtdblock_rc
  wait $blk_pid
  blk_rc="$(cat "$blk_rc_file")"; mtdblock_rc="$(cat "$mtdblock_rc_file")"; rm -f "$blk_rc_file" "$mtdblock_rc_file"
  cat "build/logs/powercut-blk-$flavour.log" "build/logs/powercut-mtdblock-$flavour.log"
  for log in "build/logs/powercut-$flavour.log:$pc_rc" "build/logs/powercut-blk-$flavour.log:${blk_rc:-1}" \
             "build/logs/powercut-mtdblock-$flavour.log:${mtdblock_rc:-1}"; do
    pc_line="$(grep -E '^powercut: [0-9]+ passed, [0-9]+ failed' "${log%:*}" | tail -n1)"
    [ "${log##*:}" -ne 0 ] && [ -n "$pc_line" ] && [ "$(awk '{print $4}' <<<"$pc_line")" -eq 0 ] && pc_line="powercut: 0 passed, 1 failed"
    add_line "$pc_line"
  done
  took "power cuts ($flavour)"
  if [ "$flavour" = release ]; then
    # ferrofs as the root filesystem (issue 14): the Debian userland from the cache or built now
    # (mmdebstrap, about 2 min), the busybox fallback when it cannot be built (said on screen).
    begin "root filesystem ($flavour)"
    { qemu/mkrootfs.sh && qemu/mkinitramfs-root.sh "$(kernel_dir)/linux" "build/initramfs-root-$flavour.cpio" &&
      tests/rootfs/run-rootfs.sh quick; } 2>&1 | tee "build/logs/rootfs-$flavour.log"
    add_line "$(grep -E '^rootfs-quick-nand: [0-9]+ passed' "build/logs/rootfs-$flavour.log" | tail -n1)"
    took "root filesystem ($flavour)"
  fi
  begin "hostile images ($flavour)"
  # Two guests side by side, each on half of the images (seeds 1 and 2: distinct images): a
  # hostile guest runs one image at a time and keeps one host core busy, so this halves the
  # step's wall time on 2 cores (the debug flavour took 18 min for 200 images in one guest).
  local himages="${FERROFS_HOSTILE_IMAGES:-200}" half hpids=() h
  half=$(( (himages + 1) / 2 ))
  (cd userspace-tools && cargo build --release -q -p ferrofs-tools --bin ferrofs-hostile)   # once, before both
  for h in 1 2; do
    local n=$half; [ $h -eq 2 ] && n=$(( himages - half ))
    HOSTILE_TAG=part$h tests/hostile/run-hostile.sh "$n" "$h" > "build/logs/hostile-$flavour-part$h.log" 2>&1 &
    hpids+=($!)
  done
  wait "${hpids[@]}"
  for h in 1 2; do
    cat "build/logs/hostile-$flavour-part$h.log"
    add_line "$(grep -E '^hostile: [0-9]+ passed' "build/logs/hostile-$flavour-part$h.log" | tail -n1)"
  done
  took "hostile images ($flavour)"
}

if [ "${FERROFS_KFLAVOUR:-release}" = debug ]; then
  run_flavour debug tests/vm/SUITES
else
  run_flavour release tests/vm/SUITES
  [ "${FERROFS_DEBUG:-1}" = 0 ] || run_flavour debug tests/vm/SUITES.debug
fi

summary
echo
echo "make test: total $(( $(date +%s) - t0 ))s"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
