#!/usr/bin/env bash
# Build the ferrofs test kernel (Debian linux-source-6.12, LLVM, CONFIG_RUST) out of the checkout,
# cached under $FERROFS_CACHE keyed by kernel version, config fragments, toolchain and this script.
# Prints the kernel tree's path on the last line of stdout.
set -euo pipefail
source "$(dirname "$0")/env.sh"

KDIR_BASE="$(kernel_dir)"
KSRC="$KDIR_BASE/linux"
if [ -f "$KDIR_BASE/.complete" ] && [ -f "$KSRC/arch/x86/boot/bzImage" ]; then
  echo "build-kernel: cached $FERROFS_KFLAVOUR kernel at $KSRC" >&2
  echo "$KSRC"
  exit 0
fi

[ -f "$KERNEL_TARBALL" ] || { echo "build-kernel: $KERNEL_TARBALL missing: run qemu/install-deps.sh" >&2; exit 1; }
echo "build-kernel: building $FERROFS_KFLAVOUR kernel in $KSRC (takes ~10 min on 2 cores)" >&2
rm -rf "$KDIR_BASE"
mkdir -p "$KDIR_BASE"
tar -C "$KDIR_BASE" -xf "$KERNEL_TARBALL"
mv "$KDIR_BASE"/linux-source-6.12 "$KSRC"
cd "$KSRC"
export LLVM=-19   # merge_config.sh runs make itself; without this the config turns gcc-based
make -s "${KMAKE_TOOLS[@]}" tinyconfig >&2
./scripts/kconfig/merge_config.sh -m .config "${KCONFIG_FRAGMENTS[@]}" >&2
make -s "${KMAKE_TOOLS[@]}" olddefconfig >&2

# merge_config drops what it cannot satisfy without failing: check what we rely on.
need=(CONFIG_RUST CONFIG_MODULES CONFIG_MTD_NAND_NANDSIM CONFIG_MTD_UBI CONFIG_UBIFS_FS CONFIG_JFFS2_FS
      CONFIG_F2FS_FS CONFIG_EXT4_FS CONFIG_MTD_BLOCK CONFIG_MTD_BLOCK2MTD CONFIG_VIRTIO_BLK CONFIG_DEVTMPFS
      CONFIG_BLK_DEV_INITRD CONFIG_SERIAL_8250_CONSOLE CONFIG_NILFS2_FS CONFIG_BLK_DEV_LOOP
      CONFIG_MTD_PARTITIONED_MASTER CONFIG_SLUB_DEBUG CONFIG_SMP CONFIG_X86_MPPARSE CONFIG_ACPI CONFIG_PREEMPT
      CONFIG_SECURITY CONFIG_SECURITY_SMACK)
[ "$FERROFS_KFLAVOUR" = debug ] && need+=(CONFIG_KASAN CONFIG_PROVE_LOCKING CONFIG_DEBUG_LIST CONFIG_KFENCE)
bad=0
for opt in "${need[@]}"; do
  grep -Eq "^$opt=(y|m)" .config || { echo "build-kernel: $opt is not set after merging the fragments" >&2; bad=1; }
done
# built is not enough for an LSM: it must be in the boot order
grep -q '^CONFIG_LSM="smack"' .config || { echo "build-kernel: CONFIG_LSM does not start Smack" >&2; bad=1; }
if [ $bad -ne 0 ]; then
  make -s "${KMAKE_TOOLS[@]}" rustavailable >&2 || true
  exit 1
fi

make -s -j"$(nproc)" "${KMAKE_TOOLS[@]}" bzImage modules >&2
rm -rf "$KDIR_BASE/modroot"
make -s "${KMAKE_TOOLS[@]}" INSTALL_MOD_PATH="$KDIR_BASE/modroot" modules_install >&2
touch "$KDIR_BASE/.complete"
# Only now drop kernels built from other inputs for this flavour (they can never be used again):
# a failed build leaves the previous one in place.
find "$FERROFS_CACHE" -maxdepth 1 -name "kernel-$FERROFS_KFLAVOUR-*" ! -path "$KDIR_BASE" -exec rm -rf {} + 2>/dev/null || true
echo "build-kernel: done" >&2
echo "$KSRC"
