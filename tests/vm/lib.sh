# Shared helpers for guest test scripts (busybox sh). Source it; call `check`, then `finish`.
PASSED=0
FAILED=0

# check DESCRIPTION COMMAND...: run COMMAND, count it as passed if it succeeds.
check() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  else
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: $* -> $out"
  fi
}

# check_fails DESCRIPTION COMMAND...: COMMAND must fail.
check_fails() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: '$*' succeeded but should have failed"
  else
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  fi
}

# must DESCRIPTION COMMAND...: a setup step; a failure counts and aborts the script.
must() {
  desc="$1"; shift
  if out="$("$@" 2>&1)"; then
    PASSED=$((PASSED + 1)); echo "ok - $desc"
  else
    FAILED=$((FAILED + 1)); echo "FAIL - $desc: $* -> $out"
    finish
  fi
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
  exit $?
}

# nandsim geometry: 256 MiB, 2 KiB pages, 128 KiB erase blocks.
NAND_256M="id_bytes=0x20,0xaa,0x00,0x15"

# pattern_file PATH KIB: a file of random bytes.
pattern_file() { dd if=/dev/urandom of="$1" bs=1024 count="$2" 2>/dev/null; }
