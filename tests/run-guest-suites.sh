#!/usr/bin/env bash
# Run every guest suite (tests/vm/SUITES) in its own QEMU guest and sum their "N passed, N failed".
# Prints "guest: N passed, N failed" last; exits non-zero if any suite failed or did not report.
#
# FERROFS_GUEST_JOBS=N (default 2) guests run side by side. A TCG guest keeps about one host core
# busy (its workload runs on one vCPU at a time, mostly), so on 2 cores two guests halve the wall
# time. Suites that share a disk ("--disk @LABEL" after "--disk @LABEL:SIZE": the same device
# across a reset) form a chain that runs in order in one job. Each suite's screen output is kept
# in build/logs/NAME.out and printed whole when that suite ends, so parallel output does not
# interleave.
set -uo pipefail
cd "$(dirname "$0")/.."
# Each line of tests/vm/SUITES: NAME [run-guest options]. "--disk @LABEL:SIZE" attaches a fresh
# sparse host file build/disks/LABEL.img of SIZE; a later "--disk @LABEL" reuses it.
mapfile -t lines < <(grep -vE '^\s*(#|$)' tests/vm/SUITES)
if [ -n "${FERROFS_SUITES:-}" ]; then
  mapfile -t lines < <(for n in $FERROFS_SUITES; do grep -E "^$n(\s|$)" tests/vm/SUITES || echo "$n"; done)
fi
jobs_max="${FERROFS_GUEST_JOBS:-2}"
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || { echo "run-guest-suites: FERROFS_GUEST_JOBS must be a positive number" >&2; exit 2; }
mkdir -p build/disks build/logs
results="$(mktemp)"; trap 'rm -f "$results"' EXIT

# run_suite LINE: one guest; appends "NAME PASSED FAILED RC" to $results.
run_suite() {
  local line="$1" words s opts=() w label size log rc res p f
  read -r -a words <<<"$line"
  s="${words[0]}"
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
  qemu/run-guest.sh --log "$log" "${opts[@]}" "$s" > "build/logs/$s.out" 2>&1
  rc=$?
  res="$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)"
  if [ -z "$res" ]; then
    echo "$s 0 1 $rc none" >> "$results"
  else
    p=$(awk '{print $1}' <<<"$res"); f=$(awk '{print $3}' <<<"$res")
    echo "$s $p $f $rc line" >> "$results"
  fi
}

# Chains: a line reusing a disk label joins the chain of the line that created it.
chains=(); declare -A label_chain=()
for line in "${lines[@]}"; do
  read -r -a words <<<"$line"
  target=; created=()
  for w in "${words[@]:1}"; do
    case "$w" in
      @*:*) l="${w#@}"; created+=("${l%%:*}") ;;
      @*) target="${label_chain[${w#@}]:-}" ;;
    esac
  done
  if [ -n "$target" ]; then
    chains[$target]+=$'\n'"$line"
  else
    target=${#chains[@]}; chains+=("$line")
  fi
  for l in "${created[@]}"; do label_chain[$l]=$target; done
done

run_chain() {
  local chain="$1" line s
  while IFS= read -r line; do
    run_suite "$line"
    s="${line%% *}"
    cat "build/logs/$s.out"
  done <<<"$chain"
}

running=0
for chain in "${chains[@]}"; do
  while [ "$running" -ge "$jobs_max" ]; do wait -n; running=$((running - 1)); done
  run_chain "$chain" &
  running=$((running + 1))
done
wait

passed=0; failed=0
while read -r s p f rc kind; do
  if [ "$kind" = none ]; then
    echo "guest suite $s: no result line (exit $rc)"; failed=$((failed + 1)); continue
  fi
  passed=$((passed + p)); failed=$((failed + f))
  # A suite whose checks all passed but whose run failed (console scan, hang) counts as a failure.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
  echo "guest suite $s: $p passed, $f failed (exit $rc)"
  # the failed checks by name (the first five), so a summary that reaches nobody's console
  # but its tail (CI's) still says which checks failed
  if [ "$f" -gt 0 ] || [ "$rc" -ne 0 ]; then
    grep -aE '^FAIL - ' "build/logs/$s.log" | head -n 5 | cut -c1-240 | sed "s/^/guest suite $s failed check: /"
  fi
  # A run that failed with every check passed (a kernel report on the console, an unexpected
  # ferrofs error, a hang): run-guest's reason and its first quoted lines, for the same reason.
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    grep -aE '^run-guest: (FAIL|  )' "build/logs/$s.out" | head -n 4 | cut -c1-240 | sed "s/^/guest suite $s run: /"
  fi
done < "$results"
echo "guest: $passed passed, $failed failed"
[ $failed -eq 0 ]
