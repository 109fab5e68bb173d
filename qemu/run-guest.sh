#!/usr/bin/env bash
# Boot the ferrofs test kernel in QEMU and run one guest script; return its result as exit code.
#
# Usage: qemu/run-guest.sh [options] NAME [ARGS...]
#   NAME        a script under tests/vm/ (run in the guest as /ferrofs/tests/NAME), or "shell"
#               for an interactive console (the demo runs first if present).
# Options:
#   --disk FILE     attach FILE as the next virtio disk (/dev/vda, /dev/vdb, ...); repeatable
#   --timeout SECS  hard limit for the whole guest run (default 900); a hung guest fails
#   --mem MIB       guest memory (default 1024)
#   --log FILE      console log (default build/logs/NAME.log)
#   --initrd FILE   use this initramfs instead of build/initramfs-FLAVOUR.cpio
#   --append TEXT   extra kernel command line
# Environment: FERROFS_KFLAVOUR=release|debug selects the kernel; FERROFS_ACCEL=tcg|kvm forces
# the accelerator (default: KVM only if a cached probe showed that a guest boots under it).
#
# The run fails (exit 1, reason on screen) when the guest result is non-zero or missing (a hang,
# a panic), or when the console shows a kernel Oops, BUG, WARNING, panic, KASAN, KFENCE, UBSAN,
# lockdep or list-corruption report, or an unexpected ferrofs error (a kernel line from ferrofs
# saying error/corrupt/fail/panic). A boot that reports a problem or hangs before /init (the
# emulated machine, not the test: no module is loaded yet) is booted again, at most 3 attempts.
# Guest tests that provoke
# ferrofs errors on purpose bracket them with "FERROFS-EXPECT-ERRORS-BEGIN/END" written to /dev/kmsg.
set -euo pipefail
source "$(dirname "$0")/env.sh"

disks=(); timeout_s=900; mem=1024; log=; initrd=; append=
while [ $# -gt 0 ]; do
  case "$1" in
    --disk) disks+=("$2"); shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --mem) mem="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --initrd) initrd="$2"; shift 2 ;;
    --append) append="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "run-guest: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "run-guest: name a guest script (tests/vm/NAME) or 'shell'" >&2; exit 2; }
name="$1"; shift
args="$(IFS=,; echo "$*")"
if [ "$name" != shell ] && [ "$name" != __probe ] && [ ! -f "$FERROFS_ROOT/tests/vm/$name" ]; then
  echo "run-guest: no guest script tests/vm/$name" >&2; exit 2
fi

KDIR="$(kernel_dir)/linux"
KERNEL="$KDIR/arch/x86/boot/bzImage"
[ -f "$(kernel_dir)/.complete" ] || { echo "run-guest: no $FERROFS_KFLAVOUR kernel built for the current inputs: run 'make kernel'" >&2; exit 1; }
initrd="${initrd:-$FERROFS_ROOT/build/initramfs-$FERROFS_KFLAVOUR.cpio}"
[ -f "$initrd" ] || { echo "run-guest: $initrd missing: run 'make initramfs'" >&2; exit 1; }
mkdir -p "$FERROFS_ROOT/build/logs"
log="${log:-$FERROFS_ROOT/build/logs/$name.log}"

qemu_base=(qemu-system-x86_64 -nodefaults -no-reboot -m "$mem" -smp 2 -kernel "$KERNEL" -initrd "$initrd")

# KVM only if a probe shows that it boots; the verdict is cached per QEMU and kernel.
choose_accel() {
  if [ -n "${FERROFS_ACCEL:-}" ]; then echo "$FERROFS_ACCEL"; return; fi
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || { echo tcg; return; }
  local key probe
  key="$( { qemu-system-x86_64 --version; echo "$KDIR"; } | sha256sum | cut -c1-16)"
  probe="$FERROFS_CACHE/kvm-probe-$key"
  if [ ! -f "$probe" ]; then
    if timeout 30 "${qemu_base[@]}" -accel kvm -cpu host -display none -serial stdio \
         -append "$GUEST_CMDLINE ferrofs.run=__probe" 2>/dev/null | grep -q "FERROFS-RESULT"; then
      echo kvm > "$probe"
    else
      echo tcg > "$probe"
    fi
  fi
  cat "$probe"
}
accel="$(choose_accel)"
case "$accel" in
  kvm) accel_args=(-accel kvm -cpu host) ;;
  *) accel_args=(-accel tcg,thread=multi -cpu max) ;;
esac

disk_args=()
for d in "${disks[@]}"; do disk_args+=(-drive "file=$d,if=virtio,format=raw,cache=unsafe"); done

cmdline="$GUEST_CMDLINE ferrofs.run=$name"
[ -n "$args" ] && cmdline+=" ferrofs.args=$args"
[ -n "$append" ] && cmdline+=" $append"

if [ "$name" = shell ]; then
  # Interactive: the console on this terminal; Ctrl-A X quits QEMU.
  exec "${qemu_base[@]}" "${accel_args[@]}" "${disk_args[@]}" -display none -serial mon:stdio -append "$cmdline"
fi

PROBLEMS="$KERNEL_PROBLEMS"
attempt=1
# PREINIT_S: seconds a boot may take to reach /init (the debug kernel under TCG needs about 60).
preinit_s="${PREINIT_S:-200}"
while :; do
  echo "run-guest: $name ($FERROFS_KFLAVOUR kernel, $accel, timeout ${timeout_s}s), console log $log"
  start=$(date +%s)
  set +e
  : > "$log"
  # Watchdog: a boot that has not reached /init after PREINIT_S seconds is stuck in the kernel's
  # own boot (seen on the debug kernel under TCG on a loaded host: no output after the virtio
  # probe), before ferrofs or any test runs; it is killed and booted again (below).
  # Its fds go to /dev/null and its sleep is killed with it: an orphaned sleep holding this
  # script's stdout/stderr kept a caller's $(run-guest.sh ...) or pipe waiting for the full
  # PREINIT_S after the guest had ended (200 s per harness self-test case).
  ( exec >/dev/null 2>&1 </dev/null
    sleep "$preinit_s" & sp=$!
    trap 'kill $sp 2>/dev/null; exit 0' TERM
    wait $sp
    grep -aq "Run /init as init process" "$log" || { touch "$log.preinit-hang"; pkill -KILL -f -- "ferrofs.run=$name.*rgid=$$" 2>/dev/null; } ) &
  watchdog=$!
  rm -f "$log.preinit-hang"
  timeout --foreground -k 5 "$timeout_s" "${qemu_base[@]}" "${accel_args[@]}" "${disk_args[@]}" \
    -display none -serial stdio -append "$cmdline rgid=$$" </dev/null 2>&1 | tee "$log" | sed -u 's/^/  | /'
  qemu_rc=${PIPESTATUS[0]}
  kill "$watchdog" 2>/dev/null || true; wait "$watchdog" 2>/dev/null || true
  set -e
  elapsed=$(( $(date +%s) - start ))
  if [ -f "$log.preinit-hang" ] && [ $attempt -lt 3 ]; then
    rm -f "$log.preinit-hang"; cp "$log" "$log.boot-failure$attempt"
    echo "run-guest: the kernel did not reach /init in ${preinit_s}s (stuck in its own boot, before any test; log kept in $log.boot-failure$attempt); booting again" >&2
    attempt=$((attempt + 1))
    continue
  fi
  rm -f "$log.preinit-hang"
  # A report from the kernel's own boot, before /init (and so before any module or test), is a
  # failure of the emulated machine, not of the test (seen once: a KASAN report in an early
  # timer interrupt of the debug kernel under TCG). Boot once more, saying so; twice fails.
  boot_part="$(awk '/Run \/init as init process/ {exit} {print}' "$log")"
  if [ $attempt -lt 3 ] && grep -aqE "$PROBLEMS" <<<"$boot_part"; then
    cp "$log" "$log.boot-failure$attempt"
    echo "run-guest: the kernel reported a problem while booting, before /init (log kept in $log.boot-failure$attempt); booting again" >&2
    attempt=$((attempt + 1))
    continue
  fi
  break
done

fail() {
  echo "run-guest: FAIL ($name): $1" >&2
  [ -n "${2:-}" ] && printf '%s\n' "$2" | head -n 40 | sed 's/^/run-guest:   /' >&2
  exit 1
}

# Only kernel lines (they carry a printk timestamp) are scanned, so test output cannot trip it.
# A kernel line can land glued to the end of a userspace line on the shared console ("ok - insmod
# ferrofs.ko[    2.55] FERROFS-EXPECT-ERRORS-BEGIN", seen in a hostile run): split before every
# timestamp first, so no kernel line (nor expect marker) is missed.
klines="$(sed -E 's/(.)(\[ *[0-9]+\.[0-9]+\] )/\1\n\2/g' "$log" | grep -aE '^\[ *[0-9]+\.[0-9]+\]' || true)"
scan="$(printf '%s\n' "$klines" | grep -aE "$PROBLEMS" || true)"
# ferrofs errors, minus those between expect markers.
ferr="$(printf '%s\n' "$klines" | awk '
  /FERROFS-EXPECT-ERRORS-BEGIN/ {skip=1; next}
  /FERROFS-EXPECT-ERRORS-END/ {skip=0; next}
  !skip && $0 ~ /\] ferrofs[ :(]/ && tolower($0) ~ /(error|corrupt|fail|panic)/ {print}')"

result="$(grep -aoE 'FERROFS-RESULT: [0-9]+' "$log" | tail -n1 | awk '{print $2}' || true)"
[ -z "$scan" ] || fail "kernel reported a problem on the console" "$scan"
[ -z "$ferr" ] || fail "unexpected ferrofs error on the console" "$ferr"
if [ -z "$result" ]; then
  if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
    fail "guest hung: no result after ${timeout_s}s (killed)" "$(tail -n 20 "$log")"
  fi
  fail "guest ended without a result (QEMU exit $qemu_rc after ${elapsed}s)" "$(tail -n 20 "$log")"
fi
if [ "$result" -ne 0 ]; then
  fail "guest script $name exited $result" "$(grep -aE 'FAIL|not ok' "$log" | tail -n 20)"
fi
echo "run-guest: $name finished in ${elapsed}s with result $result"
exit "$result"
