# Shared helpers for guest test scripts (busybox sh). Source it; call `check`, then `finish`.
PASSED=0
FAILED=0

# check DESCRIPTION COMMAND...: run COMMAND, count it as passed if it succeeds.
check() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  else
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: $* -> $out"
  fi
}

# check_fails DESCRIPTION COMMAND...: COMMAND must fail.
check_fails() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: '$*' succeeded but should have failed"
  else
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  fi
}

# must DESCRIPTION COMMAND...: a setup step; a failure counts and aborts the script.
must() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  else
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: $* -> $out"
    finish
  fi
}

# kmsg_mark: put a numbered mark in the kernel log; logged_since_mark PATTERN: whether a line
# after the last mark matches PATTERN (grep -E). Unlike `dmesg | tail -n K`, a message from
# elsewhere (a loop device's capacity change, the background thread) cannot push the one
# looked for out of the window.
KMSG_N=0
kmsg_mark() { KMSG_N=$((KMSG_N + 1)); echo "FERROFS-MARK-$KMSG_N" > /dev/kmsg; }
logged_since_mark() { dmesg | sed -n "/FERROFS-MARK-$KMSG_N\$/,\$p" | grep -qE -- "$1"; }

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
  exit $?
}

# nandsim geometry: 256 MiB, 2 KiB pages, 128 KiB erase blocks.
NAND_256M="id_bytes=0x20,0xaa,0x00,0x15"

# pattern_file PATH KIB: a file of random bytes.
pattern_file() { dd if=/dev/urandom of="$1" bs=1024 count="$2" 2>/dev/null; }

# run_counted DESC CMD...: run a program that ends with "N passed, N failed" and add its counts.
# Its own summary line is shown as "# DESC: ..." so that the suite's last line is the total.
run_counted() {
  desc="$1"; shift
  "$@" > /tmp/run_counted.out 2>&1
  rc=$?
  sed -E 's/^([0-9]+ passed, [0-9]+ failed.*)$/# '"$desc"': \1/' /tmp/run_counted.out
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' /tmp/run_counted.out | tail -n1)
  if [ -z "$line" ]; then
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: no result line (exit $rc)"; return
  fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
  PASSED=$((PASSED + p)); FAILED=$((FAILED + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then FAILED=$((FAILED + 1)); echo "FAIL - $desc: exit $rc"; fi
}

# The MTD number of the first device whose /proc/mtd name matches $1.
mtd_named() { awk -F: -v pat="$1" '$0 ~ pat {sub("mtd","",$1); print $1; exit}' /proc/mtd; }

# ferrofs_load_nand [nandsim params...]: nandsim (256 MiB unless overridden), sets MTD.
ferrofs_load_nand() {
  must "nandsim loads $*" modprobe nandsim "$NAND_256M" "$@"
  MTD=$(mtd_named "NAND simulator")
}

# ferrofs_device KIND: the medium of a suite that runs on every backend (ferrofs-posix,
# ferrofs-enospc, ferrofs-corrupt; their -blk and -mtdblock variants set FERROFS_KIND):
#   nand      nandsim (256 MiB, 128 KiB erase blocks) through MTD: mount mtdN
#   blk       the virtio disk /dev/vda through the block backend, 1 MiB segments
#   mtdblock  /dev/mtdblockN over that nandsim (the naive one-erase-block FTL), 1 MiB segments
# Sets DEV (what mkfs.ferrofs and fsck.ferrofs take), SRC (what mount takes), NAME (the device in
# ferrofs's messages), SEG (segment bytes) and MKFS_OPTS. ferrofs_device_done unloads nandsim.
ferrofs_device() {
  KIND=${1:-nand}
  case "$KIND" in
    nand) ferrofs_load_nand; DEV=/dev/mtd$MTD; SRC=mtd$MTD; NAME=mtd$MTD; SEG=131072; MKFS_OPTS= ;;
    blk) must "the virtio disk /dev/vda is there" test -b /dev/vda
         DEV=/dev/vda; SRC=$DEV; NAME=vda; SEG=1048576; MKFS_OPTS="--au 1M" ;;
    mtdblock) ferrofs_load_nand; DEV=/dev/mtdblock$MTD; SRC=$DEV; NAME=mtdblock$MTD; SEG=1048576; MKFS_OPTS="--au 1M" ;;
    *) must "a known device kind (nand, blk, mtdblock), not '$KIND'" false ;;
  esac
  echo "# ferrofs on $DEV ($KIND)"
}
ferrofs_device_done() { [ "$KIND" = blk ] || check "rmmod nandsim" rmmod nandsim; }

# ferrofs_mkfs_mount [mount options]: mkfs.ferrofs on $DEV (default: the MTD $MTD), insmod,
# mount on /mnt.
ferrofs_mkfs_mount() {
  must "mkfs.ferrofs ${DEV:-/dev/mtd$MTD}" mkfs.ferrofs -q $MKFS_OPTS ${DEV:-/dev/mtd$MTD}
  must "insmod ferrofs.ko" insmod /ferrofs/ferrofs.ko
  must "mount ferrofs ${SRC:-mtd$MTD} $*" mount -t ferrofs ${1:+-o "$1"} ${SRC:-mtd$MTD} /mnt
}

# ferrofs_unmount_check: umount, fsck -n clean, rmmod (the inode cache must be empty).
ferrofs_unmount_check() {
  check "umount /mnt" umount /mnt
  check "fsck.ferrofs -n clean" fsck.ferrofs -n ${DEV:-/dev/mtd$MTD}
  check "rmmod ferrofs (no leaked inodes)" rmmod ferrofs
}

# Bracket ferrofs errors that a test provokes on purpose (the harness ignores them).
expect_errors_begin() { echo FERROFS-EXPECT-ERRORS-BEGIN > /dev/kmsg; }
expect_errors_end() { echo FERROFS-EXPECT-ERRORS-END > /dev/kmsg; }

# finish_and_reset: report like finish, then reset the machine without syncing (a power cut
# for everything not yet durable). The harness sees the result line first.
finish_and_reset() {
  echo "$PASSED passed, $FAILED failed"
  rc=0; [ "$FAILED" -eq 0 ] || rc=1
  echo "FERROFS-RESULT: $rc"
  # The reset shuts the virtio disk down under whatever I/O is in flight (an unsynced writer,
  # the background thread): block2mtd then fails reads and erases with EIO and ferrofs says so.
  # Those messages are the reset's, not a fault; oopses and WARNs still fail the run.
  expect_errors_begin
  reboot -f -n
  sleep 60
}
