#!/usr/bin/env bash
# The root-filesystem initramfs (issue 14), separate from the test initramfs: busybox, the
# kernel's modules with ferrofs.ko among them (modprobe ferrofs; depmod'ed), and qemu/rootfs-init
# as /init, which mounts the root named on the kernel command line and switch_roots to its init.
# Usage: mkinitramfs-root.sh KDIR OUT.cpio
set -euo pipefail
source "$(dirname "$0")/env.sh"
KDIR="$1"; OUT="$2"
MODROOT="$(dirname "$KDIR")/modroot"
KVER="$(ls "$MODROOT/lib/modules")"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,sbin,usr/bin,usr/sbin,lib,etc,proc,sys,dev,root,tmp}
cp /bin/busybox "$STAGE/bin/busybox"
for applet in $("$STAGE/bin/busybox" --list-full); do
  [ -e "$STAGE/$applet" ] || ln -s /bin/busybox "$STAGE/$applet"
done
cp -a "$MODROOT/lib/modules" "$STAGE/lib/"
install -D -m 0644 "$FERROFS_ROOT/ferrofs.ko" "$STAGE/lib/modules/$KVER/extra/ferrofs.ko"
depmod -b "$STAGE" "$KVER"
install -m 0755 "$FERROFS_ROOT/qemu/rootfs-init" "$STAGE/init"
echo "root:x:0:0:root:/root:/bin/sh" > "$STAGE/etc/passwd"
mkdir -p "$(dirname "$OUT")"
(cd "$STAGE" && find . -print0 | cpio --null -o -H newc --quiet) > "$OUT"
