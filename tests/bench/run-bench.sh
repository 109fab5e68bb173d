#!/usr/bin/env bash
# The side-by-side benchmark rig (issue 5): ferrofs against the raw NAND, JFFS2, UBIFS on UBI,
# and F2FS and ext4 on mtdblock (the cheap-FTL case, where ferrofs's block backend runs beside
# them as ferrofs-mtdblock, issue 13), on the same emulated NAND with SLC timings.
#
# Usage: tests/bench/run-bench.sh [--quick|--full|--tiny] [--targets "raw jffs2 ..."] [--out DIR]
#   --quick   (default; `make bench`) about 10 minutes: 64 MiB partition, few block sizes, short phases
#   --full    (`make bench-full`) the published numbers: 128 MiB partition, every block size, fills
#             to 50/80/90 %, 100 000-write latency, 60 s GC run (about an hour)
#   --tiny    seconds per target: a smoke run of the rig itself (results in bench/results/tmp/)
#   --targets the targets to run (default: raw jffs2 ubifs f2fs ext4 ferrofs ferrofs-mtdblock)
#   --experiments "meta mount ..."  only these experiments (names as in status.txt: sweep, latency,
#             latency-fsync, smallfiles, meta, concurrency, fio, dirty, gc, gc-fsync, mount,
#             mount-powercut, mount-scale, randwrite-sync16, randwrite-buffered, randwrite-sync1;
#             default: all).
#             The profile's setup still runs; the report leaves out what did not run.
#   --out     results folder (default bench/results/<UTC date>-<commit>-<profile>/)
#   --initrd  initramfs to boot (default build/initramfs-<flavour>.cpio, as `make initramfs` builds it)
# Needs the kernel, ferrofs.ko, build/tools and the initramfs (`make initramfs`; `make bench` does it).
#
# Each target runs in a fresh guest (tests/vm/bench-target) with a fresh nandsim; the guest writes
# its results as a tar archive to a virtio disk, extracted here. A target whose setup or guest
# fails is recorded with the reason (status table in report.md), never dropped. Then
# tests/bench/rig-report.py runs `ferrofs-bench report` (tables, ratios, plots) and adds the rig's
# sections (status, configuration, write amplification from the rig's counters); it can be re-run
# alone on a results folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
source qemu/env.sh

profile=quick; targets="raw jffs2 ubifs f2fs ext4 ferrofs ferrofs-mtdblock"; out=; initrd_opt=; exps=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) profile=quick; shift ;;
    --full) profile=full; shift ;;
    --tiny) profile=tiny; shift ;;
    --targets) targets="$2"; shift 2 ;;
    --experiments) exps="$(echo "$2" | tr -s ' ,' '++' | sed 's/^+//; s/+$//')"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --initrd) initrd_opt="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "run-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

# Guest timeouts: the cheap-FTL guests (f2fs, ext4, ferrofs-mtdblock) also erase and format the
# whole chip and lay out a 128 MiB file for the randwrite forms (quick: about 4 minutes more).
case "$profile" in
  tiny) timeout_s=900 ;;
  quick) timeout_s=1800 ;;
  full) timeout_s=3600 ;;
esac
MEM=1024
# Guest clock. Under TCG the guest's TSC is the host's TSC, but the guest calibrates it against the
# emulated PIT, which under host load comes out wrong (one boot measured 387 MHz on a 2300 MHz
# host: guest time ran 6x fast, differently in every guest, and nandsim's udelay-based timings
# with it). The rig passes the host's TSC frequency instead, so guest time is wall time and
# every guest has the same clock; each guest's uptime is compared with the host's stopwatch below.
tsc_khz="$(dmesg 2>/dev/null | sed -nE 's/.*tsc: Detected ([0-9]+)\.([0-9]{3}) MHz.*/\1\2/p' | head -n1)"
[ -n "$tsc_khz" ] || tsc_khz="$(awk -F: '/^cpu MHz/ {printf "%d", $2 * 1000; exit}' /proc/cpuinfo)"
if ! grep -qw constant_tsc /proc/cpuinfo || [ -z "$tsc_khz" ]; then
  echo "run-bench: the host has no constant TSC (or its frequency is unknown): guest timing would be unreliable" >&2
  exit 1
fi
# The delay loop too: the boot vCPU takes loops_per_jiffy from that frequency, but the second
# calibrates its own against the emulated timer ("calibrate_delay_direct() failed"), which under
# TCG gave 4 895 to 16 700 BogoMIPS across boots, and nandsim's udelay-based page read and program
# times with it (a program took 81, 331 or 947 us depending on the boot and the vCPU). lpj= presets
# both from the same frequency: loops per jiffy = TSC cycles per jiffy (x86 delays count TSC cycles).
guest_hz="$(sed -nE 's/^CONFIG_HZ=([0-9]+)$/\1/p' "$(kernel_dir)/linux/.config" 2>/dev/null)"
[ -n "$guest_hz" ] || { echo "run-bench: CONFIG_HZ of the guest kernel unknown ($(kernel_dir)/linux/.config)" >&2; exit 1; }
APPEND="tsc_early_khz=$tsc_khz tsc=reliable lpj=$(( tsc_khz * 1000 / guest_hz ))"

KDIR="$(kernel_dir)/linux"
INITRD_SRC="${initrd_opt:-build/initramfs-$FERROFS_KFLAVOUR.cpio}"
BENCH_TOOL="build/tools/ferrofs-bench"
for f in "$(kernel_dir)/.complete" "$INITRD_SRC" "$BENCH_TOOL"; do
  [ -e "$f" ] || { echo "run-bench: $f missing: run 'make initramfs' (or 'make bench')" >&2; exit 1; }
done
# (the initramfs is an uncompressed cpio since qemu/mkinitramfs.sh stopped compressing it; older ones are gzip)
grep -q 'ferrofs/tests/bench-target' <({ gzip -dc "$INITRD_SRC" 2>/dev/null || cat "$INITRD_SRC"; } | cpio -it --quiet 2>/dev/null) \
  || { echo "run-bench: $INITRD_SRC lacks tests/vm/bench-target: run 'make initramfs'" >&2; exit 1; }

stamp="$(date -u +%Y-%m-%dT%H%MZ)"
commit="$(git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)"
if [ -z "$out" ]; then
  if [ "$profile" = tiny ]; then out="bench/results/tmp/$stamp-$commit-$profile"
  else out="bench/results/$stamp-$commit-$profile${exps:+-$exps}"; fi
fi
work="build/bench/$stamp-$profile"
mkdir -p "$work/disks" "$work/logs" "$out/json"
# A private copy of the initramfs: other work in this checkout may rebuild the shared one mid-run.
cp "$INITRD_SRC" "$work/initramfs.cpio"
# fio for the cross-check, appended as a second archive (qemu/mkinitramfs.sh --fio-overlay): only
# the bench guests unpack its ~80 MB of libraries. Without it the guests record fio as not run.
fio_overlay=none
if qemu/mkinitramfs.sh --fio-overlay "$work/fio-overlay.cpio.gz" >&2; then
  cat "$work/fio-overlay.cpio.gz" >> "$work/initramfs.cpio"
  fio_overlay="$(fio --version 2>/dev/null) ($(du -k "$work/fio-overlay.cpio.gz" | cut -f1) kB compressed)"
else
  echo "run-bench: no fio overlay (run qemu/install-deps.sh): the fio cross-check will be missing" >&2
fi

{
  echo "# ferrofs benchmark rig configuration"
  echo "profile=$profile"
  echo "started_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git rev-parse HEAD 2>/dev/null)"
  echo "commit_subject=$(git log -1 --format=%s 2>/dev/null)"
  echo "# uncommitted changes to what is built into the guest (shared checkout):"
  git status --short -- src Kbuild userspace-tools qemu tests/vm 2>/dev/null | sed 's/^/#   /'
  echo "kernel_flavour=$FERROFS_KFLAVOUR"
  echo "kernel_release=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null)"
  echo "kernel_cache=$(kernel_dir)"
  echo "ferrofs_ko_sha256=$(sha256sum ferrofs.ko | cut -c1-16)"
  echo "ferrofs_bench_version=$("$BENCH_TOOL" --version 2>/dev/null)"
  echo "qemu=$(qemu-system-x86_64 --version | head -n1)"
  echo "fio=$fio_overlay"
  echo "guest_memory_mib=$MEM"
  echo "guest_kernel_args=$APPEND"
  echo "accel=${FERROFS_ACCEL:-$(cat "$FERROFS_CACHE"/kvm-probe-* 2>/dev/null | head -n1 || echo tcg)}"
  echo "host_cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "host_cpus=$(nproc)"
  echo "host_load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "guest_timeout_s=$timeout_s"
  echo "targets=$targets"
  echo "# profile parameters (tests/vm/bench-target):"
  awk -v p="$profile" '$0 ~ "^  " p "\\)" {on=1; next} on && /;;/ {print; exit} on {print}' tests/vm/bench-target | sed 's/^ */#   /'
} > "$out/config.txt"

: > "$out/status.txt"
t_all=$(date +%s)
for t in $targets; do
  disk="$work/disks/$t.img"
  rm -f "$disk"; truncate -s 64M "$disk"
  log="$work/logs/$t.log"
  echo "=== run-bench: $t ($profile)"
  t0=$(date +%s)
  qemu/run-guest.sh --mem "$MEM" --timeout "$timeout_s" --disk "$disk" --log "$log" --append "$APPEND" \
    --initrd "$work/initramfs.cpio" bench-target "$t" "$profile" $exps > "$work/logs/$t.run" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  grep -aE '^  \| bench\[' "$work/logs/$t.run" | sed 's/^  | //' || true
  x="$work/extract/$t"; rm -rf "$x"; mkdir -p "$x"
  if ! tar xf "$disk" -C "$x" 2>/dev/null; then
    echo "run-bench: $t: no results archive on the disk" >&2
  fi
  [ -d "$x/json" ] && mkdir -p "$out/json/$t" && cp -a "$x/json/." "$out/json/$t/"
  [ -d "$x/counters" ] && mkdir -p "$out/counters" && cp -a "$x/counters/." "$out/counters/"
  [ -d "$x/fio" ] && mkdir -p "$out/fio/$t" && cp -a "$x/fio/." "$out/fio/$t/"
  [ -f "$x/nand.txt" ] && cp "$x/nand.txt" "$out/json/$t/nand.txt" 2>/dev/null
  gstatus="$(cat "$x/status.txt" 2>/dev/null)"
  # Clock check: the guest's uptime at its last save against the host's stopwatch (which also
  # counts QEMU start and exit, a second or two): near 1 when guest time is wall time.
  clock="$(awk -v g="$(cat "$x/uptime" 2>/dev/null)" -v h="$secs" 'BEGIN {if (g == "" || h == 0) print "n/a"; else printf "%.2f (guest %.1f s, host %d s)", g / h, g, h}')"
  reason=
  if [ "$rc" -ne 0 ]; then
    reason="$(grep -a 'run-guest: FAIL' "$work/logs/$t.run" | head -n1 | sed 's/^run-guest: //')"
    [ -n "$reason" ] || reason="run-guest exit $rc"
    # Keep the end of the console for the record.
    mkdir -p "$out/failures"
    { echo "# $t: $reason"; echo "# last 80 lines of the console (full log: $log)"; tail -n 80 "$log"; } > "$out/failures/$t-console.txt"
    [ -f "$x/dmesg-tail.txt" ] && cp "$x/dmesg-tail.txt" "$out/failures/$t-dmesg.txt"
  elif [ -f "$x/dmesg-tail.txt" ]; then
    mkdir -p "$out/failures"; cp "$x/dmesg-tail.txt" "$out/failures/$t-dmesg.txt"
  fi
  {
    echo "[$t]"
    echo "guest_rc=$rc"
    echo "guest_seconds=$secs"
    echo "clock_check=$clock"
    [ -n "$reason" ] && echo "guest_failure=$reason"
    printf '%s\n' "$gstatus"
    echo
  } >> "$out/status.txt"
  echo "=== run-bench: $t: guest exit $rc after ${secs}s${reason:+ ($reason)}"
done
echo "total_guest_seconds=$(( $(date +%s) - t_all ))" >> "$out/config.txt"
echo "host_load_at_end=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/config.txt"
# The nandsim parameters as the guest saw them (identical in every guest).
for t in $targets; do
  if [ -f "$out/json/$t/nand.txt" ]; then
    { echo "# nandsim and guest, as recorded by the $t guest:"; sed -n '/^# nandsim/,/^# \/proc\/mtd/p' "$out/json/$t/nand.txt" | grep -v '^# /proc/mtd'
      grep -E '^(mtd_|kernel=|MemTotal|cpus=)' "$out/json/$t/nand.txt"; } >> "$out/config.txt"
    break
  fi
done

echo "=== run-bench: report"
python3 tests/bench/rig-report.py "$out" --tool "$BENCH_TOOL" || echo "run-bench: rig-report.py failed" >&2
echo "run-bench: results in $out (report.md, *.svg, config.txt, status.txt; guest logs in $work/logs)"
