# Sourced by the qemu/ scripts and the Makefile helpers: toolchain and cache locations.
# FERROFS_KFLAVOUR=debug selects the debug kernel (KASAN, lockdep, DEBUG_LIST, KFENCE).
FERROFS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FERROFS_CACHE="${FERROFS_CACHE:-/var/cache/ferrofs}"
FERROFS_KFLAVOUR="${FERROFS_KFLAVOUR:-release}"
KERNEL_TARBALL=/usr/src/linux-source-6.12.tar.xz
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
# The kernel must see Debian's rustc (it has rust-src); the rustup one does not.
KMAKE_TOOLS=(LLVM=-19 RUSTC=/usr/bin/rustc BINDGEN="$CARGO_BIN/bindgen" RUSTDOC=/usr/bin/rustdoc)

case "$FERROFS_KFLAVOUR" in
  release) KCONFIG_FRAGMENTS=("$FERROFS_ROOT/qemu/kernel.config") ;;
  debug) KCONFIG_FRAGMENTS=("$FERROFS_ROOT/qemu/kernel.config" "$FERROFS_ROOT/qemu/kernel-debug.config") ;;
  *) echo "FERROFS_KFLAVOUR must be release or debug, not '$FERROFS_KFLAVOUR'" >&2; exit 2 ;;
esac

# The cache key: everything the built kernel depends on.
kernel_key() {
  {
    dpkg-query -W -f='${Package} ${Version}\n' linux-source-6.12 rustc-web rust-web-src clang-19 lld-19 llvm-19 2>/dev/null
    /usr/bin/rustc --version 2>/dev/null
    "$CARGO_BIN/bindgen" --version 2>/dev/null
    echo "flavour $FERROFS_KFLAVOUR"
    cat "${KCONFIG_FRAGMENTS[@]}" "$FERROFS_ROOT/qemu/build-kernel.sh"
  } | sha256sum | cut -c1-16
}

kernel_dir() { echo "$FERROFS_CACHE/kernel-$FERROFS_KFLAVOUR-$(kernel_key)"; }

# One kernel build per flavour at a time: qemu/build-kernel.sh deletes an unfinished tree before it
# starts, so two checkouts (or `make module` beside `make test`) building the same kernel at once
# would destroy each other's work. Sourced by build-kernel.sh, this waits for the other build; the
# script then finds the finished kernel cached. (The lock lives here, not in build-kernel.sh,
# whose text is part of the cache key.)
if [ "$(basename -- "$0")" = build-kernel.sh ]; then
  mkdir -p "$FERROFS_CACHE"
  exec 9>"$FERROFS_CACHE/.build-$FERROFS_KFLAVOUR.lock"
  if ! flock -n 9; then
    echo "build-kernel: another $FERROFS_KFLAVOUR kernel build is running: waiting for it" >&2
    flock 9
  fi
fi
