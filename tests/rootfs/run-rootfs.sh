#!/usr/bin/env bash
# ferrofs as the root filesystem of a booting machine (issue 14): the host side of the tests.
# The image is build/rootfs/rootfs-ROOTDEV.img (make rootfs-image), booted through the root
# initramfs (build/initramfs-root-FLAVOUR.cpio: qemu/rootfs-init) into the image's own init
# (sysvinit for Debian, busybox init for the fallback); tests/rootfs/rootfs-guest is the guest side.
#
# Usage: tests/rootfs/run-rootfs.sh MODE     (environment: ROOTDEV=nand|block, default nand)
#   shell      `make run-rootfs`: boot interactively from build/disks/run-rootfs-ROOTDEV.img
#   quick      what `make test` runs: boot, failures, powercut with 3 cuts
#   boot       install then verify: boot to init, a tiny .deb built with dpkg-deb and installed
#              (version 1, then 2 as an upgrade) and a many-file tree, reboot through init's
#              shutdown scripts; boot again: all there (dpkg --verify, --audit, checksums);
#              `mount -o remount,ro /`, then the host's checksum of the flash file at that point
#              must equal the one after the machine is gone; fsck.ferrofs -n of the image clean.
#   failures   the initramfs's three failures: the ferrofs module missing, the root device
#              missing, the mount failing; each must print its error and give a working shell.
#   powercut   CUTS=N [SEED=S] [MIN_S=2] [MAX_S=30]: a workload under init (ferrofs-fstest
#              powercut run beside dpkg install/upgrade/remove cycles, or tree copies on busybox),
#              QEMU killed (SIGKILL) a random time after it started, then the next boot must reach
#              init from the root mounted as it is (no fsck), every fsync'd file intact, dpkg's
#              database consistent; the last boot is not killed: verify, clean reboot, fsck -n.
#              Ends with `root power cuts: N cuts, F failed boots, L fsync'd files lost`.
#   boottime   time to the root mounted, to the real init, and to the init's test hook (from the
#              kernel timestamps of the initramfs's and the hook's /dev/kmsg lines) for ferrofs
#              on NAND (block2mtd) and on the block device, UBIFS on the same NAND (mkfs.ubifs -r
#              + ubinize) and ext4 on the same block device (mkfs.ext4 -d), same tree; REPEAT=N.
# Every mode ends with "N passed, N failed"; console logs are kept in build/logs/rootfs-*.
set -uo pipefail
cd "$(dirname "$0")/../.."
source qemu/env.sh
MODE="${1:-}"; ROOTDEV="${ROOTDEV:-nand}"
case "$ROOTDEV" in nand|block) ;; *) echo "run-rootfs: ROOTDEV must be nand or block" >&2; exit 2 ;; esac
KERNEL="$(kernel_dir)/linux/arch/x86/boot/bzImage"
INITRD="build/initramfs-root-$FERROFS_KFLAVOUR.cpio"
IMG_NAND=build/rootfs/rootfs-nand.img; IMG_BLOCK=build/rootfs/rootfs-block.img
IMG="build/rootfs/rootfs-$ROOTDEV.img"
[ -f "$(kernel_dir)/.complete" ] || { echo "run-rootfs: no $FERROFS_KFLAVOUR kernel: run 'make kernel'" >&2; exit 1; }
[ -f "$INITRD" ] || { echo "run-rootfs: $INITRD missing: run 'make rootfs-initramfs'" >&2; exit 1; }
[ -f "$IMG" ] || { echo "run-rootfs: $IMG missing: run 'make rootfs-image'" >&2; exit 1; }
USERLAND="$(cat build/rootfs/userland)"
FSCK=build/tools/fsck.ferrofs
LOGS=build/logs/rootfs-$MODE-$ROOTDEV
rm -rf "$LOGS"; mkdir -p "$LOGS" build/disks
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
bad() { failed=$((failed + 1)); echo "FAIL - $1"; }
# check DESC CMD...: a host-side check.
check() { local d="$1"; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }

# The kernel command line naming the root: block2mtd over the first virtio disk (NAND case) or
# the disk itself (block case); read-only at first, as the kernel's own root mount, remounted
# read-write by the boot scripts.
root_args() {
  case "$1" in
    nand) echo "root=mtd:rootfs rootfstype=ferrofs block2mtd=/dev/vda,128KiB,rootfs ro" ;;
    block) echo "root=/dev/vda rootfstype=ferrofs ro" ;;
  esac
}

# guest LOG TIMEOUT APPEND DISK...: boot one machine, console in LOG. Optional (environment of
# the call): KILL_MARK/KILL_MS (SIGKILL KILL_MS ms after a console line starting with KILL_MARK),
# HOOK_MARK/HOOK (run the command HOOK once when a line starts with HOOK_MARK), STDIN (a file
# fed to the console). Sets g_killed, g_hung, g_secs, g_kill_ms.
guest() {
  local log="$1" timeout_s="$2" append="$3"; shift 3
  local drives=() d
  for d in "$@"; do drives+=(-drive "file=$d,if=virtio,format=raw,cache=unsafe"); done
  : > "$log"
  qemu-system-x86_64 -nodefaults -no-reboot -m 1024 -smp 2 -kernel "$KERNEL" -initrd "$INITRD" \
    -accel tcg,thread=multi -cpu max "${drives[@]}" -display none -serial stdio \
    -append "$GUEST_CMDLINE $append" < "${STDIN:-/dev/null}" > "$log" 2>&1 &
  local qpid=$! t0 now seen=0 t_seen=0 hooked=0
  t0=$(date +%s%N); g_killed=0; g_hung=0; g_kill_ms=0
  while kill -0 "$qpid" 2>/dev/null; do
    now=$(date +%s%N)
    if [ -n "${HOOK_MARK:-}" ] && [ $hooked -eq 0 ] && grep -aq "^$HOOK_MARK" "$log"; then hooked=1; eval "$HOOK"; fi
    if [ -n "${KILL_MARK:-}" ]; then
      if [ $seen -eq 0 ] && grep -aq "^$KILL_MARK" "$log"; then seen=1; t_seen=$now; fi
      if [ $seen -eq 1 ] && [ $(( (now - t_seen) / 1000000 )) -ge "$KILL_MS" ]; then
        kill -KILL "$qpid" 2>/dev/null && g_killed=1; g_kill_ms=$(( (now - t_seen) / 1000000 )); break
      fi
    fi
    if [ $(( (now - t0) / 1000000000 )) -ge "$timeout_s" ]; then kill -KILL "$qpid" 2>/dev/null; g_hung=1; break; fi
    sleep 0.05
  done
  wait "$qpid" 2>/dev/null
  g_secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
}

# Kernel lines (printk timestamp) of a console log that report a problem, or a ferrofs error.
kernel_problems() {
  local k
  k="$(sed -E 's/(.)(\[ *[0-9]+\.[0-9]+\] )/\1\n\2/g' "$1" | grep -aE '^\[ *[0-9]+\.[0-9]+\]')"
  { grep -aE "$KERNEL_PROBLEMS" <<<"$k"
    grep -aE '\] ferrofs[ :(]' <<<"$k" | grep -aiE 'error|corrupt|fail|panic'; } | head -n 5
}
# guest_counts LOG DESC: add the guest's ok/FAIL lines (its checks) and the counts of the programs
# it ran ("# DESC: N passed, N failed", lib.sh's run_counted) to ours, kernel problems as one.
guest_counts() {
  local p f kp
  p=$(grep -ac '^ok - ' "$1"); f=$(grep -ac '^FAIL - ' "$1")
  p=$((p + $(grep -aE '^# .*: [0-9]+ passed, [0-9]+ failed' "$1" | awk '{s += $(NF-3)} END {print s + 0}')))
  f=$((f + $(grep -aE '^# .*: [0-9]+ passed, [0-9]+ failed' "$1" | awk '{s += $(NF-1)} END {print s + 0}')))
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -eq 0 ] || grep -a '^FAIL - ' "$1" | head -n 10 | sed "s|^|  $2: |"
  kp="$(kernel_problems "$1")"
  if [ -n "$kp" ]; then bad "$2: the kernel reported a problem"; sed 's/^/    /' <<<"$kp"; fi
}
# fsck_clean IMAGE: fsck.ferrofs -n exits 0; its last lines on the screen otherwise.
fsck_clean() { "$FSCK" -n "$1" > "$LOGS/fsck.out" 2>&1 || { tail -n 5 "$LOGS/fsck.out" | sed 's/^/    /'; return 1; }; }
fresh_copy() { rm -f "$2"; cp --sparse=always "$1" "$2"; }
md5() { md5sum "$1" | cut -d' ' -f1; }

mode_boot() {
  local disk=build/disks/rootfs-boot-$ROOTDEV.img log
  fresh_copy "$IMG" "$disk"
  echo "run-rootfs: $USERLAND userland on ferrofs ($ROOTDEV), boot 1: install"
  log=$LOGS/boot1-install.log
  guest "$log" 900 "$(root_args "$ROOTDEV") rootfs.test=install" "$disk"
  echo "run-rootfs: boot 1 ended after ${g_secs}s"
  check "boot 1: the initramfs mounted the root and switched to init" grep -aq '^ROOTFS-INIT:' "$log"
  check "boot 1: the guest's checks passed" grep -aq 'FERROFS-RESULT: 0' "$log"
  check "boot 1: rebooted through init's shutdown" grep -aq 'reboot: Restarting system' "$log"
  [ "$g_hung" -eq 0 ] || bad "boot 1 hung (killed after 900 s)"
  grep -aE '^ROOTFS-|^INIT:|passed, .* failed' "$log" | sed 's/^/  | /'
  guest_counts "$log" "boot 1"
  check "fsck.ferrofs -n clean after boot 1" fsck_clean "$disk"

  echo "run-rootfs: boot 2: verify, remount,ro, the flash file checksummed"
  log=$LOGS/boot2-verify.log
  local settled=
  HOOK_MARK=ROOTFS-RO-SETTLED HOOK='settled=$(md5 "$disk")' \
    guest "$log" 900 "$(root_args "$ROOTDEV") rootfs.test=verify" "$disk"
  echo "run-rootfs: boot 2 ended after ${g_secs}s"
  check "boot 2: reached init" grep -aq '^ROOTFS-INIT:' "$log"
  check "boot 2: the guest's checks passed" grep -aq 'FERROFS-RESULT: 0' "$log"
  grep -aE '^ROOTFS-|passed, .* failed' "$log" | sed 's/^/  | /'
  guest_counts "$log" "boot 2"
  local after; after=$(md5 "$disk")
  echo "run-rootfs: flash file md5 at remount,ro: ${settled:-none}; after power-off: $after"
  check "remount,ro: nothing written to the flash after it (checksums equal)" test -n "$settled" -a "$settled" = "$after"
  check "fsck.ferrofs -n clean at the end" fsck_clean "$disk"
  rm -f "$disk"
}

mode_failures() {
  local stage; stage="$(mktemp -d)"
  local noko=build/initramfs-root-noferrofs.cpio shellin="$LOGS/shell-input"
  # A copy of the root initramfs without ferrofs.ko: the module is missing.
  (cd "$stage" && cpio -idm --quiet < "$OLDPWD/$INITRD" && find . -name ferrofs.ko -delete &&
   find . -print0 | cpio --null -o -H newc --quiet) > "$noko"
  rm -rf "$stage"
  # The console input: a FIFO, written when the shell is there (bytes sent before the guest's
  # serial port is set up are lost).
  rm -f "$shellin"; mkfifo "$shellin"; exec 8<>"$shellin"
  local disk=build/disks/rootfs-failures.img
  fresh_copy "$IMG" "$disk"
  local blank=build/disks/rootfs-blank.img; rm -f "$blank"; truncate -s 64M "$blank"
  # case NAME INITRD APPEND DISK EXPECTED-ERROR
  local name initrd append dsk want log
  while IFS='|' read -r name initrd append dsk want; do
    log=$LOGS/failure-$name.log
    INITRD_SAVE=$INITRD; INITRD=$initrd
    STDIN=$shellin HOOK_MARK='ferrofs-initramfs: dropping to a shell' \
      HOOK="sleep 1; printf 'echo RESCUE-SHELL-WORKS-\$((6 * 7))\\nreboot -f\\n' >&8" guest "$log" 300 "$append" $dsk
    INITRD=$INITRD_SAVE
    check "$name: the initramfs says why ($want)" grep -aqE "^ferrofs-initramfs: error: .*$want" "$log"
    check "$name: a working shell after it" grep -aq '^RESCUE-SHELL-WORKS-42' "$log"
    check "$name: no kernel problem" test -z "$(kernel_problems "$log")"
    grep -a '^ferrofs-initramfs: error' "$log" | head -n 1 | sed 's/^/  | /'
  done <<EOF
module-missing|$noko|$(root_args "$ROOTDEV")|$disk|cannot load the module for the root filesystem type 'ferrofs'
device-missing|$INITRD|root=mtd:nosuchflash rootfstype=ferrofs rootdelay=2|$disk|root device mtd:nosuchflash not found
mount-fails|$INITRD|$(root_args "$ROOTDEV" | sed 's|/dev/vda|/dev/vdb|g')|$disk $blank|mounting .* failed
EOF
  exec 8>&-
  rm -f "$disk" "$blank" "$noko" "$shellin"
}

mode_powercut() {
  local CUTS="${CUTS:-3}" MIN_S="${MIN_S:-2}" MAX_S="${MAX_S:-30}"
  local SEED="${SEED:-$(( $(od -An -N2 -tu2 /dev/urandom) * 32768 + $(od -An -N2 -tu2 /dev/urandom) ))}"
  RANDOM=$SEED
  local flash=build/disks/rootfs-pc-$ROOTDEV-$SEED.img logdisk=build/disks/rootfs-pc-$ROOTDEV-$SEED-log.img
  fresh_copy "$IMG" "$flash"; rm -f "$logdisk"; truncate -s 80M "$logdisk"
  echo "run-rootfs: power cuts on the root filesystem: $USERLAND on ferrofs ($ROOTDEV), $CUTS cuts, seed $SEED (repeat: make rootfs-powercut CUTS=$CUTS ROOTDEV=$ROOTDEV SEED=$SEED)"
  local i phase delay log cuts=0 failed_boots=0 lost=0 n v t0; t0=$(date +%s)
  for (( i = 0; i <= CUTS; i++ )); do
    phase=cut; [ $i -eq 0 ] && phase=init; [ $i -eq "$CUTS" ] && phase=final
    delay=$(( MIN_S * 1000 + (RANDOM * 32768 + RANDOM) % ((MAX_S - MIN_S) * 1000 + 1) ))
    log=$LOGS/boot$i.log
    if [ "$phase" = final ]; then
      guest "$log" 1200 "$(root_args "$ROOTDEV") rootfs.test=powercut rootfs.args=phase=final,seed=$((SEED * 1000 + i))" "$flash" "$logdisk"
    else
      KILL_MARK=POWERCUT-WORKLOAD-START KILL_MS=$delay \
        guest "$log" 1200 "$(root_args "$ROOTDEV") rootfs.test=powercut rootfs.args=phase=$phase,seed=$((SEED * 1000 + i)),seconds=$((MAX_S + 120))" "$flash" "$logdisk"
    fi
    [ "$g_killed" -eq 1 ] && cuts=$((cuts + 1))
    local what="not killed"; [ "$g_killed" -eq 1 ] && what="killed ${g_kill_ms} ms into the workload"
    [ "$g_hung" -eq 1 ] && what="HUNG (killed after the time limit)"
    v="$(grep -aE '^POWERCUT-VERIFY:' "$log" | tail -n1 | sed 's/^POWERCUT-VERIFY: //')"
    echo "run-rootfs: boot $i ($phase): ${g_secs}s, $what; dpkg: $(grep -aE '^ROOTFS-DPKG-STATE:' "$log" | tail -n1 | cut -d' ' -f2-); workload cycles: $(grep -ac '^ROOTFS-WORKLOAD: cycle' "$log")${v:+; verify: $v}"
    if ! grep -aq '^ROOTFS-INIT:' "$log"; then
      failed_boots=$((failed_boots + 1)); bad "boot $i ($phase): did not reach init (log $log)"
      grep -aE '^ferrofs-initramfs: error|ferrofs' "$log" | tail -n 5 | sed 's/^/  | /'
    else ok "boot $i ($phase): reached init"
    fi
    if [ "$phase" != final ] && [ "$g_killed" -ne 1 ]; then bad "boot $i: the workload never started or ended before the kill"; fi
    n=0; for v in $(grep -aE '^POWERCUT-VERIFY:' "$log" | sed -E 's/.* lost=([0-9]+).*/\1/'); do n=$((n + v)); done
    lost=$((lost + n))
    guest_counts "$log" "boot $i"
    if [ "$phase" = final ]; then
      check "last boot: the guest's checks passed and it rebooted through init" grep -aq 'FERROFS-RESULT: 0' "$log"
      check "fsck.ferrofs -n clean after the last boot" fsck_clean "$flash"
    fi
  done
  echo "run-rootfs: $(( $(date +%s) - t0 ))s; seed $SEED"
  echo "root power cuts: $cuts cuts, $failed_boots failed boots, $lost fsync'd files lost"
  [ "$cuts" -eq "$CUTS" ] || bad "only $cuts of $CUTS boots were killed"
  if [ "$failed" -eq 0 ]; then rm -f "$flash" "$logdisk"; else echo "run-rootfs: disks kept: $flash $logdisk; logs in $LOGS"; fi
}

case "$MODE" in
  shell)
    # `make run-rootfs`: the machine's own disk, kept between runs, fresh when the image is newer.
    disk=build/disks/run-rootfs-$ROOTDEV.img
    [ -f "$disk" ] && [ "$disk" -nt "$IMG" ] || { echo "run-rootfs: a fresh copy of $IMG as $disk"; fresh_copy "$IMG" "$disk"; }
    echo "run-rootfs: $USERLAND on ferrofs ($ROOTDEV) from $disk; log in is automatic; 'reboot' (or 'poweroff') ends the machine, Ctrl-A X quits QEMU"
    exec qemu/run-guest.sh --initrd "$INITRD" --disk "$disk" --append "$(root_args "$ROOTDEV")" shell ;;
  quick)
    # make test's part: install, reboot, verify, the initramfs's failures, 3 power cuts.
    mode_boot; mode_failures; CUTS=3 MAX_S="${MAX_S:-12}" mode_powercut ;;
  boot) mode_boot ;;
  failures) mode_failures ;;
  powercut) mode_powercut ;;
  boottime) source tests/rootfs/boottime.sh; mode_boottime ;;
  *) echo "usage: tests/rootfs/run-rootfs.sh boot|failures|powercut|boottime" >&2; exit 2 ;;
esac
echo "rootfs-$MODE-$ROOTDEV: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
