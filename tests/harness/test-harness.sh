#!/usr/bin/env bash
# Test of the guest harness itself: every kind of guest failure must fail run-guest.sh with the
# reason on screen, and a clean run (including ferrofs errors a test expects) must pass.
set -uo pipefail
cd "$(dirname "$0")/../.."
passed=0; failed=0

# expect RC_KIND REASON_REGEX MODE [run-guest options]: RC_KIND is "pass" or "fail".
expect() {
  local want="$1" reason="$2" mode="$3"; shift 3
  local out rc
  out="$(qemu/run-guest.sh --log "build/logs/harness-$mode.log" "$@" harness-fault "$mode" 2>&1 >/dev/null)"
  rc=$?
  if [ "$want" = pass ] && [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "ok - harness passes a clean guest ($mode)"
  elif [ "$want" = fail ] && [ $rc -ne 0 ] && grep -qE "$reason" <<<"$out"; then
    passed=$((passed + 1)); echo "ok - harness fails on $mode: $(grep -m1 -E 'FAIL' <<<"$out")"
  else
    failed=$((failed + 1)); echo "FAIL - harness on $mode: exit $rc, wanted $want matching '$reason'; it said:"
    sed 's/^/    /' <<<"$out"
  fi
}

if [ "${FERROFS_KFLAVOUR:-release}" = debug ]; then
  # On the debug kernel (slow to boot): its sanitizer reports fail the run, a clean guest passes.
  expect fail 'KASAN' kasan --timeout 300
  expect pass '' none --timeout 300
else
  expect fail 'WARNING' warn
  expect fail 'Oops|BUG|panic' oops
  expect fail 'Kernel panic' panic
  expect fail 'hung: no result' hang --timeout 25
  expect fail 'unexpected ferrofs error' ferrofs-error
  expect fail 'exited 3' fail
  expect pass '' none
  expect pass '' expected-ferrofs-error
fi
echo "harness: $passed passed, $failed failed"
[ $failed -eq 0 ]
