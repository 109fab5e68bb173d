#!/usr/bin/env bash
# `make rootfs-image`: a root filesystem image of ferrofs (issue 14), for the NAND case (block2mtd
# over a virtio disk: raw flash, 128 KiB erase blocks, 512-byte write unit) and for a block
# device (virtio-blk: 4 MiB segments, 4 KiB write unit), packed with `mkfs.ferrofs -r`.
#
# The userland is a minimal Debian (mmdebstrap --variant=minbase plus sysvinit-core) built from
# this machine's own apt sources (/etc/apt/sources.list and sources.list.d: no mirror address is
# written anywhere in the repository), cached as a tarball under $FERROFS_CACHE keyed by its
# inputs (sources, suite, architecture, package recipe, mmdebstrap version), so a rerun only
# unpacks it. When it cannot be built (no network, no mmdebstrap, apt failure) a busybox userland
# is used instead, and the script says so. FERROFS_ROOTFS=debian|busybox forces one (debian then
# fails instead of falling back).
#
# Init: sysvinit, not systemd. The test kernel (tinyconfig + qemu/kernel.config) has none of what
# systemd requires (cgroups, inotify, fhandle, autofs), and under TCG every process spawn is
# costly: sysvinit's rcS runs a handful of shell scripts and is at init in seconds.
#
# On top of the userland: /etc/inittab (serial console with autologin, the test hook), /etc/fstab
# (root remounted read-write by the init scripts, read-only at shutdown), the ferrofs tools and
# tests/rootfs/rootfs-guest as /usr/local/sbin/ferrofs-rootfs-test (run by init; does nothing
# unless the kernel command line asks for a test) with the guest helpers of tests/vm/lib.sh.
#
# Outputs (build/rootfs/): rootfs-nand.img (raw flash image for block2mtd), rootfs-block.img
# (raw block image), userland (debian|busybox), and an inputs stamp: a rerun with the same
# inputs does nothing. Options (environment): ROOTFS_MIB (image size, default 512).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$FERROFS_ROOT"
OUT=build/rootfs
ROOTFS_MIB="${ROOTFS_MIB:-512}"
WANT="${FERROFS_ROOTFS:-auto}"
case "$WANT" in auto|debian|busybox) ;; *) echo "mkrootfs: FERROFS_ROOTFS must be auto, debian or busybox" >&2; exit 2 ;; esac
MKFS=build/tools/mkfs.ferrofs
[ -x "$MKFS" ] || { echo "mkrootfs: $MKFS missing: run 'make tools'" >&2; exit 1; }
mkdir -p "$OUT"

# ---------------------------------------------------------------- the Debian userland (cached)
SUITE="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
ARCH="$(dpkg --print-architecture)"
# What mmdebstrap is asked for. minbase: Essential packages and apt. sysvinit-core: the init.
# Documentation, manual pages and translations are not unpacked (dpkg path-exclude).
RECIPE=(--variant=minbase --include=sysvinit-core
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
        --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/info/*'
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*'
        --aptopt='APT::Install-Recommends "false"')
# The machine's apt sources, as files (one-line .list and deb822 .sources).
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && [ -s "$f" ] && echo "$f"
  done
  return 0
}
debian_key() {
  { echo "$SUITE $ARCH"; printf '%s\n' "${RECIPE[@]}"; mmdebstrap --version 2>/dev/null
    local f; for f in $(host_sources); do echo "== $f"; cat "$f"; done; } | sha256sum | cut -c1-16
}

# debian_tarball: prints the cached tarball's path, building it first if needed; fails (with a
# reason on stderr) when it cannot.
debian_tarball() {
  command -v mmdebstrap >/dev/null || { echo "mkrootfs: mmdebstrap is not installed (qemu/install-deps.sh installs it)" >&2; return 1; }
  [ -n "$SUITE" ] || { echo "mkrootfs: no VERSION_CODENAME in /etc/os-release" >&2; return 1; }
  local srcs; mapfile -t srcs < <(host_sources)
  [ ${#srcs[@]} -gt 0 ] || { echo "mkrootfs: no apt sources on this machine" >&2; return 1; }
  local key tar
  key="$(debian_key)"
  tar="$FERROFS_CACHE/rootfs-debian-$key.tar"
  if [ -f "$tar" ]; then echo "mkrootfs: cached Debian userland $tar" >&2; echo "$tar"; return 0; fi
  # Anything else at that path (a directory left by an older mkrootfs that let mmdebstrap choose
  # the format from the name) is not a userland: remove it and build again.
  rm -rf "$tar" "$tar.tmp"
  mkdir -p "$FERROFS_CACHE"
  echo "mkrootfs: building a Debian $SUITE userland with mmdebstrap from ${srcs[*]} (cached as $tar)" >&2
  local t0=$SECONDS
  # --format=tar: the name ends in .tmp, from which mmdebstrap would choose a directory.
  if ! mmdebstrap --quiet --format=tar "${RECIPE[@]}" "$SUITE" "$tar.tmp" "${srcs[@]}" >&2; then
    rm -rf "$tar.tmp"; return 1
  fi
  [ -f "$tar.tmp" ] || { echo "mkrootfs: mmdebstrap did not write a tarball at $tar.tmp" >&2; rm -rf "$tar.tmp"; return 1; }
  mv "$tar.tmp" "$tar"
  echo "mkrootfs: Debian userland built in $((SECONDS - t0)) s ($(du -h "$tar" | cut -f1))" >&2
  # Older userlands (other inputs) can never be used again.
  find "$FERROFS_CACHE" -maxdepth 1 -name 'rootfs-debian-*.tar' ! -path "$tar" -exec rm -rf {} + 2>/dev/null || true
  echo "$tar"
}

userland=; tarball=
if [ "$WANT" != busybox ]; then
  if tarball="$(debian_tarball)"; then userland=debian
  elif [ "$WANT" = debian ]; then echo "mkrootfs: FERROFS_ROOTFS=debian, but the Debian userland could not be built" >&2; exit 1
  else echo "mkrootfs: the Debian userland cannot be built here (see above): using the busybox fallback userland" >&2
  fi
fi
[ -n "$userland" ] || userland=busybox

# ---------------------------------------------------------------- the stamp of every input
OVERLAY=(tests/rootfs/rootfs-guest tests/vm/lib.sh tests/rootfs/inittab-debian tests/rootfs/inittab-busybox tests/rootfs/rcS-busybox)
TOOLS=(build/tools/ferrofs-fstest build/tools/fsck.ferrofs "$MKFS")
stamp="$( { echo "$userland ${tarball:-} $ROOTFS_MIB"; [ "$userland" = busybox ] && sha256sum /bin/busybox
            sha256sum "${OVERLAY[@]}" "${TOOLS[@]}" "$0"; } | sha256sum | cut -c1-16)"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$stamp" ] && [ -f "$OUT/rootfs-nand.img" ] && [ -f "$OUT/rootfs-block.img" ]; then
  echo "mkrootfs: $OUT/rootfs-{nand,block}.img ($(cat "$OUT/userland")) are up to date"
  exit 0
fi
rm -f "$OUT/stamp"

# ---------------------------------------------------------------- the tree
TREE="$OUT/tree"
rm -rf "$TREE"; mkdir -p "$TREE"
if [ "$userland" = debian ]; then
  tar -C "$TREE" --numeric-owner -xpf "$tarball"
  install -m 0644 tests/rootfs/inittab-debian "$TREE/etc/inittab"
  # The root is mounted by the initramfs (read-only unless `rw`), remounted read-write by
  # checkroot.sh (fstab says rw; pass 0: no fsck at boot), read-only by umountroot at shutdown.
  printf '/dev/root / auto rw 0 0\n' > "$TREE/etc/fstab"
  # /etc/mtab as checkroot.sh would make it at every first boot of a fresh image copy.
  ln -sfn ../proc/self/mounts "$TREE/etc/mtab"
  # No password on the console: run-rootfs logs in as root through agetty --autologin.
  sed -i 's/^root:[^:]*:/root::/' "$TREE/etc/shadow"
else
  mkdir -p "$TREE"/{bin,sbin,usr/bin,usr/sbin,usr/local/sbin,etc/init.d,proc,sys,dev,tmp,run,root,var/tmp,mnt}
  chmod 1777 "$TREE/tmp" "$TREE/var/tmp"
  cp /bin/busybox "$TREE/bin/busybox"
  for applet in $("$TREE/bin/busybox" --list-full); do
    [ -e "$TREE/$applet" ] || ln -s /bin/busybox "$TREE/$applet"
  done
  install -m 0644 tests/rootfs/inittab-busybox "$TREE/etc/inittab"
  install -m 0755 tests/rootfs/rcS-busybox "$TREE/etc/init.d/rcS"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$TREE/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$TREE/etc/group"
  printf '/dev/root / auto rw 0 0\n' > "$TREE/etc/fstab"
fi
echo ferrofs-root > "$TREE/etc/hostname"
mkdir -p "$TREE/usr/local/sbin"
install -m 0755 build/tools/ferrofs-fstest "$TREE/usr/local/sbin/ferrofs-fstest"
install -m 0755 build/tools/fsck.ferrofs "$TREE/usr/local/sbin/fsck.ferrofs"
install -m 0755 tests/rootfs/rootfs-guest "$TREE/usr/local/sbin/ferrofs-rootfs-test"
install -D -m 0644 tests/vm/lib.sh "$TREE/usr/local/lib/ferrofs/lib.sh"
echo "$userland" > "$TREE/etc/ferrofs-userland"
echo "mkrootfs: $userland tree: $(du -sh --apparent-size "$TREE" | cut -f1), $(find "$TREE" | wc -l) entries"

# ---------------------------------------------------------------- the images
pack() {
  local img="$1"; shift
  rm -f "$img"
  local t0; t0=$(date +%s%N)
  "$MKFS" "$img" --raw --size "${ROOTFS_MIB}M" "$@" -r "$TREE"
  echo "mkrootfs: $img: mkfs.ferrofs -r took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
}
# block2mtd: erase block 128 KiB (its erasesize parameter), write unit 512 bytes (ferrofs's
# minimum on a bit-programmable MTD such as block2mtd, src/mtd.rs)
pack "$OUT/rootfs-nand.img.tmp" --page 512 --erase 128k
pack "$OUT/rootfs-block.img.tmp" --block
mv "$OUT/rootfs-nand.img.tmp" "$OUT/rootfs-nand.img"
mv "$OUT/rootfs-block.img.tmp" "$OUT/rootfs-block.img"
echo "$userland" > "$OUT/userland"
echo "$stamp" > "$OUT/stamp"
echo "mkrootfs: $userland userland in $OUT/rootfs-nand.img (block2mtd, ${ROOTFS_MIB} MiB) and $OUT/rootfs-block.img (virtio-blk)"
