#!/usr/bin/env bash
# Run every guest suite (tests/vm/SUITES) in its own QEMU guest and sum their "N passed, N failed".
# Prints "guest: N passed, N failed" last; exits non-zero if any suite failed or did not report.
set -uo pipefail
cd "$(dirname "$0")/.."
suites=(${FERROFS_SUITES:-$(grep -vE '^\s*(#|$)' tests/vm/SUITES)})
passed=0; failed=0
for s in "${suites[@]}"; do
  log="build/logs/$s.log"
  qemu/run-guest.sh --log "$log" "$s"
  rc=$?
  line="$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)"
  if [ -z "$line" ]; then
    echo "guest suite $s: no result line (exit $rc)"; failed=$((failed + 1)); continue
  fi
  p=$(awk '{print $1}' <<<"$line"); f=$(awk '{print $3}' <<<"$line")
  passed=$((passed + p)); failed=$((failed + f))
  # A suite whose checks all passed but whose run failed (console scan, hang) counts as a failure.
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
  echo "guest suite $s: $line (exit $rc)"
done
echo "guest: $passed passed, $failed failed"
[ $failed -eq 0 ]
