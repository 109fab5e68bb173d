#!/usr/bin/env bash
# Run every guest suite (tests/vm/SUITES) in its own QEMU guest and sum their "N passed, N failed".
# Prints "guest: N passed, N failed" last; exits non-zero if any suite failed or did not report.
set -uo pipefail
cd "$(dirname "$0")/.."
# Each line of tests/vm/SUITES: NAME [run-guest options]. "--disk @LABEL:SIZE" attaches a fresh
# sparse host file build/disks/LABEL.img of SIZE; a later "--disk @LABEL" reuses it (the same
# "device" across a guest reset).
mapfile -t lines < <(grep -vE '^\s*(#|$)' tests/vm/SUITES)
if [ -n "${FERROFS_SUITES:-}" ]; then
  mapfile -t lines < <(for n in $FERROFS_SUITES; do grep -E "^$n(\s|$)" tests/vm/SUITES || echo "$n"; done)
fi
mkdir -p build/disks
passed=0; failed=0
for line in "${lines[@]}"; do
  read -r -a words <<<"$line"
  s="${words[0]}"
  opts=()
  for w in "${words[@]:1}"; do
    case "$w" in
      @*:*) label="${w#@}"; size="${label#*:}"; label="${label%%:*}"
            rm -f "build/disks/$label.img"; truncate -s "$size" "build/disks/$label.img"
            opts+=("build/disks/$label.img") ;;
      @*) opts+=("build/disks/${w#@}.img") ;;
      *) opts+=("$w") ;;
    esac
  done
  log="build/logs/$s.log"
  qemu/run-guest.sh --log "$log" "${opts[@]}" "$s"
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
