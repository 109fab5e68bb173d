#!/usr/bin/env bash
# Build the userspace tools statically (for the initramfs) into build/tools/.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$FERROFS_ROOT/userspace-tools"
TARGET=x86_64-unknown-linux-gnu
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --bins --target "$TARGET" --quiet
out="$FERROFS_ROOT/build/tools"
rm -rf "$out"; mkdir -p "$out"
find "target/$TARGET/release" -maxdepth 1 -type f -executable -exec cp {} "$out/" \;
strip --strip-debug "$out"/*
# Cargo names the binaries mkfs-ferrofs and fsck-ferrofs; fsck(8) and mount look for mkfs.TYPE.
for t in mkfs fsck; do
  if [ -f "$out/$t-ferrofs" ]; then mv "$out/$t-ferrofs" "$out/$t.ferrofs"; fi
done
ls "$out"
