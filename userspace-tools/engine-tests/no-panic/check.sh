#!/usr/bin/env bash
# Compile a monomorphized instance of the engine (every public operation) with overflow checks
# on, as the kernel may, and fail if any engine code can reach a panic (bounds checks,
# overflow, division by zero, unwrap). Panics inside the test platform's own Vec are ignored.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
RUSTC="${RUSTC:-/usr/bin/rustc}"
"$RUSTC" --edition 2021 --crate-type lib -C overflow-checks=on -C opt-level=2 -C panic=abort -g \
  --emit obj -o "$out/instance.o" "$here/instance.rs"
hits="$(objdump -dlr --demangle "$out/instance.o" \
  | awk '/^[0-9a-f]+ <.*>:$/{fn=$0} /^\/.*:[0-9]+/{loc=$0} /R_X86_64.*(panick|panic_|_fail|unwrap_failed|expect_failed)/{print fn " " loc " -> " $NF}' \
  | grep -v 'instance.rs' | grep -v '<instance::exercise>' | sort -u || true)"
if [ -n "$hits" ]; then
  echo "engine code can panic:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no panic site in the engine"
