#!/usr/bin/env bash
# Build ferrofs.ko against the cached test kernel. Fails on any compiler warning, so that the
# engine sources (shared with userspace) stay warning-free under the kernel's flags too.
# Extra arguments are passed to kbuild (e.g. a test module directory via M=...).
set -euo pipefail
source "$(dirname "$0")/env.sh"
KDIR="$(kernel_dir)/linux"
[ -f "$(kernel_dir)/.complete" ] || { echo "build-module: no kernel for the current inputs: run 'make kernel'" >&2; exit 1; }
dir="${1:-$FERROFS_ROOT}"
# kbuild does not always notice edits to the Rust crate's submodules: always rebuild the crate.
rm -f "$dir/src/ferrofs_mod.o"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
make -C "$KDIR" "${KMAKE_TOOLS[@]}" M="$dir" -j"$(nproc)" modules 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "build-module: kbuild failed for $dir" >&2; exit "$rc"; }
if grep -qiE 'warning(\[|:)' "$log"; then
  echo "build-module: the build of $dir printed warnings:" >&2
  grep -iE -A5 'warning(\[|:)' "$log" >&2
  exit 1
fi
