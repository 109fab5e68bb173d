#!/usr/bin/env bash
# Assemble the guest initramfs: busybox, the kernel's modules, ferrofs.ko, the userspace tools,
# the peers' tools (mtd-utils, f2fs-tools, e2fsprogs) and stress-ng with their libraries, and the
# guest tests.
# Usage: mkinitramfs.sh KDIR OUT.cpio [EXTRA_KO...]
#        mkinitramfs.sh --fio-overlay OUT.cpio.gz
# --fio-overlay writes only fio (Debian's, dynamically linked) with its shared libraries and the
# SysV-shm shim it needs in the guest (tests/bench/fio-sysv-shm.c), as an archive that the bench
# rig appends to its private copy of the initramfs (the kernel unpacks concatenated archives in
# turn). fio's libraries (Ceph, ICU, GlusterFS, ...) are about 80 MB that every test guest would
# otherwise unpack.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
# Copy a host binary and the shared libraries it needs.
copy_bin() {
  local bin="$1" dest="$2"
  install -D -m 0755 "$bin" "$STAGE$dest"
  { ldd "$bin" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r lib; do
    [ -e "$STAGE$lib" ] || install -D -m 0755 "$lib" "$STAGE$lib"
  done
}

if [ "${1:-}" = --fio-overlay ]; then
  OUT="$2"
  path="$(command -v fio || true)"
  [ -n "$path" ] || { echo "mkinitramfs: fio not found on the host: run qemu/install-deps.sh" >&2; exit 1; }
  copy_bin "$path" /usr/bin/fio
  mkdir -p "$STAGE/usr/lib"
  cc -shared -fPIC -O2 -Wall -Werror -o "$STAGE/usr/lib/fio-sysv-shm.so" "$FERROFS_ROOT/tests/bench/fio-sysv-shm.c"
  mkdir -p "$(dirname "$OUT")"
  (cd "$STAGE" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$OUT"
  exit 0
fi
KDIR="$1"; OUT="$2"; shift 2
MODROOT="$(dirname "$KDIR")/modroot"

mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,mnt,root,run,var,ferrofs/tests}
cp /bin/busybox "$STAGE/bin/busybox"
for applet in $("$STAGE/bin/busybox" --list-full); do
  [ -e "$STAGE/$applet" ] || ln -s /bin/busybox "$STAGE/$applet"
done

# Kernel modules with their dependency index, so that (busybox) modprobe works, including the
# kernel's own on-demand requests through /sbin/modprobe.
cp -a "$MODROOT/lib/modules" "$STAGE/lib/"

# ferrofs.ko and any extra test modules.
cp "$FERROFS_ROOT/ferrofs.ko" "$STAGE/ferrofs/"
for ko in "$@"; do cp "$ko" "$STAGE/ferrofs/"; done

for b in flash_erase nandwrite nanddump nandtest mtdinfo mtd_debug ubiattach ubidetach ubiformat \
         ubimkvol ubirmvol ubinfo ubiupdatevol mkfs.ubifs mkfs.jffs2 mkfs.f2fs fsck.f2fs mke2fs e2fsck filefrag; do
  path="$(command -v "$b" || true)"
  [ -n "$path" ] || { echo "mkinitramfs: $b not found on the host: run qemu/install-deps.sh" >&2; exit 1; }
  copy_bin "$path" "/usr/sbin/$b"
done
# stress-ng (Debian's, dynamically linked) for the ferrofs-stress suite.
path="$(command -v stress-ng || true)"
[ -n "$path" ] || { echo "mkinitramfs: stress-ng not found on the host: run qemu/install-deps.sh" >&2; exit 1; }
copy_bin "$path" /usr/bin/stress-ng
ln -sf mke2fs "$STAGE/usr/sbin/mkfs.ext4"
ln -sf e2fsck "$STAGE/usr/sbin/fsck.ext4"
[ -e "$STAGE/etc/mke2fs.conf" ] || cp /etc/mke2fs.conf "$STAGE/etc/" 2>/dev/null || true

# The ferrofs userspace tools (static), whatever of them the workspace builds today.
TOOLS_DIR="$FERROFS_ROOT/build/tools"
if [ -d "$TOOLS_DIR" ]; then
  for t in "$TOOLS_DIR"/*; do [ -x "$t" ] && install -m 0755 "$t" "$STAGE/usr/bin/"; done
fi

# Guest scripts and programs.
cp -a "$FERROFS_ROOT/tests/vm/." "$STAGE/ferrofs/tests/"
install -m 0755 "$FERROFS_ROOT/qemu/guest-init" "$STAGE/init"
echo "root:x:0:0:root:/root:/bin/sh" > "$STAGE/etc/passwd"
echo "nobody:x:65534:65534:nobody:/:/bin/false" >> "$STAGE/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$STAGE/etc/group"
# No ACPI in the tiny kernel: powering off is a reboot, which QEMU (-no-reboot) turns into an exit.
printf "alias poweroff='reboot -f'\nalias halt='reboot -f'\nexport PS1='ferrofs-guest:\\w# '\n" > "$STAGE/etc/profile"

mkdir -p "$(dirname "$OUT")"
# Uncompressed: every guest boot unpacks the archive, and inflating ~60 MB under TCG took 5 s of
# each release boot (measured: "Unpacking initramfs" to "Freeing initrd memory" 5.7 s gzip'd,
# 0.9 s plain) and several times that on the KASAN kernel, where the inflate loop is instrumented.
(cd "$STAGE" && find . -print0 | cpio --null -o -H newc --quiet) > "$OUT"
