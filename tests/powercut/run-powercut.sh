#!/usr/bin/env bash
# Power cuts by killing QEMU (issue 9): `make powercut CUTS=N [FS=ferrofs|ubifs|ferrofs-blk|ferrofs-mtdblock] [SEED=S]`.
#
# The flash is block2mtd over a virtio disk backed by a host file (build/disks/powercut-FS-SEED-flash.img;
# FS=ferrofs-blk: ferrofs on that virtio disk itself, through the block backend, with 1 MiB segments;
# FS=ferrofs-mtdblock: ferrofs through the block backend on /dev/mtdblockN over that block2mtd
# (128 KiB erase blocks), segments of one erase block: the naive one-erase-block FTL (the cheap
# card model; nandsim under it would keep nothing across a reboot). mtdblock keeps one erase
# block in RAM and rewrites it whole (erase, write) when a write goes to another block or at a
# cache flush: ferrofs's fsync ends in an empty REQ_PREFLUSH bio, which mtdblock turns into that
# write-back and an MTD sync, block2mtd's sync_blockdev of the virtio disk, so the fsync'd data
# is in the host file before fsync returns. Its erase and its write are two steps: a cut between
# them loses the whole block, data fsync'd into it earlier included; through block2mtd that
# takes a writeback of the virtio disk's page cache inside that window. See tests/vm/powercut for
# the page-cache warm-up that mtdblock over block2mtd needs),
# the fsync log a second raw virtio disk (powercut-FS-SEED-log.img; both kept if a cut failed). Both use cache=unsafe: a write the
# guest issued reaches the host file when QEMU performs it and survives the SIGKILL (the host
# does not crash); whatever the guest had not yet written out (its page cache, including
# block2mtd's dirty pages not yet flushed by an MTD sync) is lost, as at a power cut.
#
# Boot 0 formats and starts the workload (tests/vm/powercut, ferrofs-fstest powercut run); every
# boot is then killed (SIGKILL) at a random moment: most a random time into the workload, every
# fourth a random delay after the guest printed POWERCUT-MOUNT-BEGIN, up to 1.3 times the latest
# measured mount of this run (MOUNT_MS ms before one was measured; the mount and
# its recovery, including the checkpoint that recovery writes: the boot before it mounts with
# commit=3600,gc=off and runs long, leaving a long log to replay). Every boot after a cut runs
# fsck.ferrofs -n (must be clean), mounts without any repair step, verifies every fsync'd file and
# directory entry recorded in the log and the whole tree, and keeps writing. The last boot is not
# killed: workload, verify, umount, fsck -n.
#
# Options (environment): CUTS (5), FS (ferrofs), SEED (random, printed), PROCS (3),
#   MIN_S/MAX_S (1/8: the kill's delay into the workload, seconds), MOUNT_MS (300),
#   MAX_MINUTES (none: past it the next boot is the last one, and the counts cover the cuts made),
#   FLASH_MIB (64), MEM (512), INITRD (build/initramfs-FLAVOUR.cpio), FERROFS_KFLAVOUR (release).
# The master seed fixes every choice (guest seeds, delays, mount options, which boots are cut in
# the mount); TCG timing is not deterministic, so a repeat lands the kills near, not exactly on,
# the same operations.
# Prints `power cuts: N cuts, F failed mounts, E fsck errors, L fsync'd files lost` and
# `powercut: N passed, N failed` (a failed cut: any problem in the boot it ended or the boot
# after it). Console logs of failed cycles are kept under build/logs/powercut-FS-SEED/.
set -uo pipefail
cd "$(dirname "$0")/../.."
source qemu/env.sh

CUTS="${CUTS:-5}"; FS="${FS:-ferrofs}"; PROCS="${PROCS:-3}"
MIN_S="${MIN_S:-1}"; MAX_S="${MAX_S:-8}"; MOUNT_MS="${MOUNT_MS:-300}"
FLASH_MIB="${FLASH_MIB:-64}"; MEM="${MEM:-512}"
# A boot that has not reached /init after this many seconds is ended and booted again (at most 3 attempts).
PREINIT_S="${PREINIT_S:-200}"
# WRITEBACK=fast (the default for UBIFS): the guest writes dirty pages back within ~10 ms. block2mtd
# writes through the guest's page cache, durable only at an MTD sync or writeback; ferrofs's
# fsync syncs the MTD, UBIFS's does not (it relies on NAND writes being synchronous), so UBIFS
# runs with fast writeback to approximate a synchronous MTD (WRITEBACK=default shows it without).
WRITEBACK="${WRITEBACK:-$([ "$FS" = ubifs ] && echo fast || echo default)}"
SEED="${SEED:-$(( $(od -An -N2 -tu2 /dev/urandom) * 32768 + $(od -An -N2 -tu2 /dev/urandom) ))}"
case "$FS" in ferrofs|ubifs|ferrofs-blk|ferrofs-mtdblock) ;; *) echo "run-powercut: FS must be ferrofs, ubifs, ferrofs-blk or ferrofs-mtdblock" >&2; exit 2 ;; esac

KDIR="$(kernel_dir)/linux"
KERNEL="$KDIR/arch/x86/boot/bzImage"
INITRD="${INITRD:-build/initramfs-$FERROFS_KFLAVOUR.cpio}"
[ -f "$(kernel_dir)/.complete" ] || { echo "run-powercut: no $FERROFS_KFLAVOUR kernel: run 'make kernel'" >&2; exit 1; }
[ -f "$INITRD" ] || { echo "run-powercut: $INITRD missing: run 'make initramfs'" >&2; exit 1; }
ACCEL="${FERROFS_ACCEL:-tcg}"
case "$ACCEL" in kvm) accel_args=(-accel kvm -cpu host) ;; *) accel_args=(-accel tcg,thread=multi -cpu max) ;; esac

RANDOM=$SEED
rnd() { echo $(( (RANDOM * 32768 + RANDOM) % $1 )); }   # 0..$1-1, from the master seed

mkdir -p build/disks build/logs
FLASH=build/disks/powercut-$FS-$SEED-flash.img
LOGDISK=build/disks/powercut-$FS-$SEED-log.img
rm -f "$FLASH" "$LOGDISK"
truncate -s "${FLASH_MIB}M" "$FLASH"
truncate -s 80M "$LOGDISK"            # two 32 MiB halves (ferrofs-fstest powercut --log-half-mib 32)
RUNLOGS="$(mktemp -d /tmp/powercut-logs.XXXXXX)"
KEEP="build/logs/powercut-$FS-$SEED"
trap 'rm -rf "$RUNLOGS"' EXIT

PROBLEMS="$KERNEL_PROBLEMS"

echo "powercut: $FS, $CUTS cuts, $FERROFS_KFLAVOUR kernel, $WRITEBACK writeback, master seed $SEED (repeat: make powercut CUTS=$CUTS FS=$FS SEED=$SEED WRITEBACK=$WRITEBACK)"

mount_ms_max=0
cuts=0; mount_cuts=0; mount_cuts_inside=0; failed_mounts=0; fsck_errors=0; lost=0; tree_errors=0
workload_errors=0; kernel_problems=0; other=0
declare -a bad shown   # bad[k]=reason: cut k failed
t_start=$(date +%s)

# boot I PHASE MODE DELAY_MS MOPTS: runs one guest; sets killed=1 if it was killed, kill_ms.
boot() {
  local i="$1" phase="$2" mode="$3" delay_ms="$4" mopts="$5"
  local log="$RUNLOGS/boot$i.log" gseed secs marker=""
  gseed=$(( SEED * 1000 + i ))
  secs=$(( MAX_S + 60 ))
  [ "$phase" = final ] && secs=$MIN_S
  local args="fs=$FS,phase=$phase,seed=$gseed,procs=$PROCS,seconds=$secs,wb=$WRITEBACK"
  [ -n "$mopts" ] && args+=",mopts=$mopts"
  local attempt
  for attempt in 1 2 3; do
  : > "$log"
  qemu-system-x86_64 -nodefaults -no-reboot -m "$MEM" -smp 2 -kernel "$KERNEL" -initrd "$INITRD" \
    "${accel_args[@]}" \
    -drive "file=$FLASH,if=virtio,format=raw,cache=unsafe" \
    -drive "file=$LOGDISK,if=virtio,format=raw,cache=unsafe" \
    -display none -serial stdio \
    -append "$GUEST_CMDLINE ferrofs.run=powercut ferrofs.args=$args" \
    </dev/null >"$log" 2>&1 &
  local qpid=$! t0 seen=0 t_seen=0 now limit
  t0=$(date +%s%N)
  limit=$(( t0 + (secs + 240) * 1000000000 ))
  case "$mode" in mount) marker=POWERCUT-MOUNT-BEGIN ;; workload) marker=POWERCUT-WORKLOAD-START ;; esac
  killed=0; kill_ms=0; hung=0; preinit_hang=0
  while kill -0 "$qpid" 2>/dev/null; do
    now=$(date +%s%N)
    if [ -n "$marker" ]; then
      if [ $seen -eq 0 ] && grep -aq "^$marker" "$log"; then seen=1; t_seen=$now; fi
      if [ $seen -eq 1 ] && [ $(( (now - t_seen) / 1000000 )) -ge "$delay_ms" ]; then
        kill -KILL "$qpid" 2>/dev/null && killed=1
        kill_ms=$(( (now - t_seen) / 1000000 ))
        break
      fi
    fi
    if [ "$now" -gt "$limit" ]; then kill -KILL "$qpid" 2>/dev/null; hung=1; break; fi
    # A boot that has not reached /init after PREINIT_S seconds is stuck in the kernel's own boot,
    # before ferrofs is loaded or the disks are touched: end it and boot again (below). (Seen on
    # the debug kernel until pci=noacpi: see qemu/run-guest.sh; kept as a guard.)
    if [ $(( (now - t0) / 1000000000 )) -ge "$PREINIT_S" ] && ! grep -aq "Run /init as init process" "$log"; then
      kill -KILL "$qpid" 2>/dev/null; preinit_hang=1; break
    fi
    sleep 0.01
  done
  wait "$qpid" 2>/dev/null
  boot_secs=$(( ($(date +%s%N) - t0) / 1000000000 ))
  # A report from the kernel's own boot, before /init (and so before the disks are touched), is a
  # failure of the emulated machine (seen under heavy host load: "IO-APIC + timer doesn't work"),
  # as in qemu/run-guest.sh: boot again (at most three attempts), saying so.
  if [ $attempt -lt 3 ] && [ $preinit_hang -eq 1 ]; then
    cp "$log" "$log.boot-failure$attempt"
    echo "powercut: boot $i: the kernel did not reach /init in ${PREINIT_S}s (stuck in its own boot, before ferrofs or the disks); booting again"
    continue
  fi
  [ $preinit_hang -eq 1 ] && hung=1
  if [ $attempt -lt 3 ] && awk '/Run \/init as init process/ {exit} {print}' "$log" | grep -aqE "$PROBLEMS"; then
    cp "$log" "$log.boot-failure$attempt"
    echo "powercut: boot $i: the kernel reported a problem before /init: $(grep -aE "$PROBLEMS" "$log" | head -n1); booting again"
    continue
  fi
  break
  done
}

# judge I: the part of boot I's log before the workload started judges the previous cut
# (fsck, mount, verify); the rest (workload, final checks) and kernel reports in it judge cut I.
# Adds to the totals and to bad[].
note() { local k="$1"; shift; [ "$k" -ge 0 ] || k=0; bad[$k]="${bad[$k]:+${bad[$k]}; }$*"; }
judge() {
  local i="$1" phase="$2" mode="$3" log="$RUNLOGS/boot$1.log" pre post n line
  local prev=$(( i - 1 ))
  pre="$(awk '/^POWERCUT-WORKLOAD-START/ {exit} {print}' "$log")"
  post="$(awk 'f {print} /^POWERCUT-WORKLOAD-START/ {f=1}' "$log")"
  if [ "$phase" != init ] && [ "$FS" != ubifs ]; then
    line="$(grep -aE '^POWERCUT-FSCK-BEFORE:' <<<"$pre" | tail -n1)"
    if [ -z "$line" ]; then note $prev "no fsck result"; other=$((other + 1))
    else n="$(sed -E 's/.*problems=([0-9]+).*/\1/' <<<"$line")"
      [ "$n" -gt 0 ] && { fsck_errors=$((fsck_errors + n)); note $prev "fsck: $n problems before the mount"; }
    fi
  fi
  line="$(grep -aE '^POWERCUT-MOUNT-END:' <<<"$pre" | tail -n1)"
  if [ -n "$line" ]; then
    if ! grep -q 'rc=0' <<<"$line"; then failed_mounts=$((failed_mounts + 1)); note $prev "mount failed"; fi
  elif [ "$mode" = mount ] && [ "$killed" = 1 ]; then
    :   # killed inside the mount: the next boot verifies
  elif [ "$phase" != init ] || [ "$killed" = 0 ]; then
    failed_mounts=$((failed_mounts + 1)); note $prev "no mount result"
  fi
  if [ "$phase" != init ]; then
    line="$(grep -aE '^POWERCUT-VERIFY:' <<<"$pre" | tail -n1)"
    if [ -n "$line" ]; then
      n="$(sed -E 's/.* lost=([0-9]+).*/\1/' <<<"$line")"; [ "$n" -gt 0 ] && { lost=$((lost + n)); note $prev "$n fsync'd files lost"; }
      n="$(sed -E 's/.* tree=([0-9]+).*/\1/' <<<"$line")"; [ "$n" -gt 0 ] && { tree_errors=$((tree_errors + n)); note $prev "$n tree problems"; }
    elif grep -aq '^POWERCUT-MOUNT-END: rc=0' <<<"$pre" && ! { [ "$mode" = mount ] && [ "$killed" = 1 ]; }; then
      note $prev "no verify result"; other=$((other + 1))
    fi
  fi
  if [ "$mode" = workload ] && [ "$killed" = 1 ] && ! grep -aq '^POWERCUT-WORKLOAD-START' "$log"; then note $i "killed but the workload never started"; other=$((other + 1)); fi
  n="$(grep -ac '^FAIL - powercut worker' <<<"$post")"
  [ "$n" -gt 0 ] && { workload_errors=$((workload_errors + n)); note $i "$n workload errors"; }
  # kernel reports (lines with a printk timestamp), in the part they belong to
  local kp
  kp="$(grep -aE '^\[ *[0-9]+\.[0-9]+\]' <<<"$pre" | grep -aE "$PROBLEMS" | head -n 5)"
  [ -n "$kp" ] && { kernel_problems=$((kernel_problems + 1)); note $prev "kernel report: $(head -n1 <<<"$kp")"; }
  kp="$(grep -aE '^\[ *[0-9]+\.[0-9]+\]' <<<"$post" | grep -aE "$PROBLEMS" | head -n 5)"
  [ -n "$kp" ] && { kernel_problems=$((kernel_problems + 1)); note $i "kernel report: $(head -n1 <<<"$kp")"; }
  kp="$(grep -aE '^\[ *[0-9]+\.[0-9]+\]' "$log" | grep -aE '\] ferrofs[ :(]' | grep -aiE 'error|corrupt|fail|panic' | head -n 3)"
  [ -n "$kp" ] && note $prev "ferrofs error: $(head -n1 <<<"$kp")"
  if [ "$phase" = final ]; then
    line="$(grep -aE '^POWERCUT-FSCK-AFTER:' "$log" | tail -n1)"
    if [ "$FS" != ubifs ]; then
      if [ -z "$line" ]; then note $prev "no final fsck result"; other=$((other + 1))
      else n="$(sed -E 's/.*problems=([0-9]+).*/\1/' <<<"$line")"
        [ "$n" -gt 0 ] && { fsck_errors=$((fsck_errors + n)); note $prev "final fsck: $n problems"; }
      fi
    fi
    line="$(grep -aE '^POWERCUT-VERIFY:' <<<"$post" | tail -n1)"
    n="$(sed -E 's/.* lost=([0-9]+).*/\1/' <<<"${line:- lost=1}")"
    [ "$n" -gt 0 ] && { lost=$((lost + n)); note $prev "final verify: $n lost (or no result)"; }
    grep -aq 'FERROFS-RESULT: 0' "$log" || { note $prev "final boot did not pass ($(grep -aE '^FAIL' "$log" | head -n 3 | tr '\n' ' '))"; other=$((other + 1)); }
  fi
  [ "${hung:-0}" = 1 ] && { note $prev "boot $i hung (killed after the time limit)"; other=$((other + 1)); }
}

for (( i = 0; i <= CUTS; i++ )); do
  # MAX_MINUTES: past it, the next boot is the last one (not killed); the counts cover the cuts made
  if [ -n "${MAX_MINUTES:-}" ] && [ $i -ge 2 ] && [ $i -lt "$CUTS" ] && [ $(( $(date +%s) - t_start )) -ge $(( MAX_MINUTES * 60 )) ]; then
    echo "powercut: time limit of $MAX_MINUTES minutes reached after $i cuts: this boot is the last"
    CUTS=$i
  fi
  phase=cut; [ $i -eq 0 ] && phase=init; [ $i -eq "$CUTS" ] && phase=final
  mode=workload; [ $i -ge 1 ] && [ $(( i % 4 )) -eq 2 ] && mode=mount
  [ "$phase" = final ] && mode=none
  # the kill's delay: into the workload, or into the mount; the boot before a mount cut runs long
  if [ "$mode" = mount ]; then
    # over the mount's duration as measured in this run so far (at least MOUNT_MS), a bit past it
    span=$MOUNT_MS; [ "$mount_ms_max" -gt 0 ] && span=$(( mount_ms_max * 13 / 10 + 20 ))
    delay=$(rnd "$span")
  elif [ $(( (i + 1) % 4 )) -eq 2 ]; then delay=$(( (MAX_S * 1000 + MIN_S * 1000) / 2 + $(rnd $(( (MAX_S - MIN_S) * 500 + 1 ))) ))
  else delay=$(( MIN_S * 1000 + $(rnd $(( (MAX_S - MIN_S) * 1000 + 1 ))) ))
  fi
  mopts=
  if [ "$FS" != ubifs ]; then
    if [ $(( (i + 1) % 4 )) -eq 2 ]; then mopts="commit=3600:gc=off"
    else case $(rnd 4) in 0) mopts= ;; 1) mopts="commit=1" ;; 2) mopts="commit=3600" ;; 3) mopts="commit=3600:gc=off" ;; esac
    fi
  fi
  boot "$i" "$phase" "$mode" "$delay" "$mopts"
  [ "$killed" = 1 ] && cuts=$((cuts + 1))
  where=
  if [ "$mode" = mount ] && [ "$killed" = 1 ]; then
    mount_cuts=$((mount_cuts + 1))
    if grep -aq '^POWERCUT-MOUNT-END' "$RUNLOGS/boot$i.log"; then where=" (after the mount completed)"
    else mount_cuts_inside=$((mount_cuts_inside + 1)); where=" (inside the mount)"; fi
  fi
  judge "$i" "$phase" "$mode"
  [ $i -ge 1 ] && [ -n "${bad[$((i - 1))]:-}" ] && [ "${shown[$((i - 1))]:-}" != "${bad[$((i - 1))]}" ] && {
    echo "powercut: PROBLEM at cut $((i - 1)) (seen in boot $i): ${bad[$((i - 1))]}"; shown[$((i - 1))]="${bad[$((i - 1))]}"; }
  m="$(grep -aE '^POWERCUT-MOUNT-END: rc=0 ms=[0-9]+' "$RUNLOGS/boot$i.log" | sed -E 's/.*ms=([0-9]+).*/\1/' | head -n1)"
  [ -n "$m" ] && [ "$phase" != init ] && mount_ms_max=$m   # the latest measured mount (load varies)
  v="$(grep -aE '^POWERCUT-VERIFY:' "$RUNLOGS/boot$i.log" | head -n1 | sed 's/^POWERCUT-VERIFY: //')"
  ops="$(grep -aE '^POWERCUT-WORKER' "$RUNLOGS/boot$i.log" | awk '{s+=$3} END {if (NR) print s}')"
  if [ "$killed" = 1 ]; then what="killed ${kill_ms} ms after ${mode} start$where"; else what="not killed"; fi
  echo "powercut: boot $i ($phase${mopts:+, -o $mopts}): ${boot_secs}s, $what${v:+; verify: $v}${ops:+; $ops worker ops reported}"
done

n_failed=0
for (( k = 0; k < CUTS; k++ )); do
  if [ -n "${bad[$k]:-}" ]; then
    n_failed=$((n_failed + 1))
    mkdir -p "$KEEP"
    cp "$RUNLOGS/boot$k.log" "$KEEP/" 2>/dev/null; cp "$RUNLOGS/boot$((k + 1)).log" "$KEEP/" 2>/dev/null
    echo "powercut: FAIL cut $k (seed $SEED): ${bad[$k]} (logs: $KEEP/boot$k.log, boot$((k + 1)).log)"
  fi
done
if [ "$n_failed" -eq 0 ]; then rm -f "$FLASH" "$LOGDISK"; else echo "powercut: disks kept: $FLASH $LOGDISK"; fi
[ "$cuts" -eq "$CUTS" ] || { echo "powercut: only $cuts of $CUTS boots were killed"; }
echo "powercut: $mount_cuts cuts during mount ($mount_cuts_inside inside it), $tree_errors tree problems, $workload_errors workload errors, $kernel_problems kernel reports, $other other problems; master seed $SEED; $(( $(date +%s) - t_start ))s"
echo "power cuts: $cuts cuts, $failed_mounts failed mounts, $fsck_errors fsck errors, $lost fsync'd files lost"
echo "powercut: $((CUTS - n_failed)) passed, $n_failed failed"
[ "$n_failed" -eq 0 ] && [ "$cuts" -eq "$CUTS" ] && [ "$failed_mounts" -eq 0 ] && [ "$fsck_errors" -eq 0 ] && [ "$lost" -eq 0 ]
