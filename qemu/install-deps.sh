#!/usr/bin/env bash
# Install the host toolchain for ferrofs: Debian packages and bindgen-cli.
# Idempotent: skips whatever is already installed. Run as root (CI and sessions are root).
set -euo pipefail

PKGS=(
  linux-source-6.12 rustc-web rust-web-src
  clang-19 lld-19 llvm-19 libclang-19-dev
  flex bison bc libelf-dev libssl-dev cpio xz-utils make kmod file
  qemu-system-x86 busybox-static mtd-utils f2fs-tools e2fsprogs
  stress-ng fio mmdebstrap
)
BINDGEN_VERSION=0.71.1

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: Debian packages present"
fi

CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
if ! "$CARGO_BIN/bindgen" --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
  echo "install-deps: cargo install bindgen-cli $BINDGEN_VERSION"
  # Build bindgen with the rustup toolchain (cargo), but linked against libclang-19.
  LIBCLANG_PATH=/usr/lib/llvm-19/lib cargo install --locked --quiet bindgen-cli --version "$BINDGEN_VERSION"
else
  echo "install-deps: bindgen $BINDGEN_VERSION present"
fi
