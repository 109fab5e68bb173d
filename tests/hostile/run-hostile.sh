#!/usr/bin/env bash
# make hostile IMAGES=N [SEED=S]: N hostile ferrofs images (ferrofs-hostile, seeded), each mounted
# in a guest (tests/vm/ferrofs-hostile: rejected with a message, or walked, read, written,
# unmounted). A guest that dies on an image (Oops/panic: oops=panic) or hangs (the guest's
# watchdog, or the host timeout) counts as a crash of that image; the driver goes on with the
# next image in a new guest.
#
#   tests/hostile/run-hostile.sh [IMAGES [SEED]]     (default 200 images, seed 1)
# Env: HOSTILE_TAG (names the disk and logs, for runs side by side), FERROFS_KFLAVOUR (kernel), HOSTILE_IMAGE_TIMEOUT (guest watchdog per image, default 120 s),
# HOSTILE_INITRD (another initramfs, e.g. one with a ferrofs.ko from another branch).
# Prints "hostile images: N tried, R rejected, M mounted, C crashes" and
# "hostile: P passed, F failed" (F = crashed, hung, WARN/BUG reports, silent refusals, bad
# read-back, failed umount; fails on any).
set -uo pipefail
cd "$(dirname "$0")/../.."
source qemu/env.sh
images=${1:-200}; seed=${2:-1}
flavour=${FERROFS_KFLAVOUR:-release}
per_image=${HOSTILE_IMAGE_TIMEOUT:-120}
mkdir -p build/disks build/logs/hostile
disk=build/disks/hostile-$flavour${HOSTILE_TAG:+-$HOSTILE_TAG}.img
t0=$(date +%s)
(cd userspace-tools && cargo build --release -q -p ferrofs-tools --bin ferrofs-hostile) || { echo "hostile: generator build failed"; echo "hostile: 0 passed, 1 failed"; exit 1; }
userspace-tools/target/release/ferrofs-hostile --out "$disk" --images "$images" --seed "$seed" --list > build/logs/hostile/images-$flavour${HOSTILE_TAG:+-$HOSTILE_TAG}.txt \
  || { echo "hostile: generating the images failed"; echo "hostile: 0 passed, 1 failed"; exit 1; }
tail -n1 build/logs/hostile/images-$flavour${HOSTILE_TAG:+-$HOSTILE_TAG}.txt
first=0; tried=0; rejected=0; mounted=0; crashes=0; failed=0; passed=0; guests=0
crashed=()
while [ "$first" -lt "$images" ]; do
  guests=$((guests + 1))
  log=build/logs/hostile/guest-$flavour${HOSTILE_TAG:+-$HOSTILE_TAG}-$first.log
  left=$((images - first))
  # boot plus a generous per-image budget; the guest's own watchdog catches one hung image
  timeout_s=$((120 + left * 20))
  qemu/run-guest.sh ${HOSTILE_INITRD:+--initrd "$HOSTILE_INITRD"} --disk "$disk" --timeout "$timeout_s" --log "$log" ferrofs-hostile "$first" "$left" "$per_image" > "$log.driver" 2>&1
  rc=$?
  done_n=$(grep -acE '^hostile-done [0-9]+ ' "$log")
  rej=$(grep -acE '^hostile-done [0-9]+ rejected' "$log")
  mnt=$(grep -acE '^hostile-done [0-9]+ mounted' "$log")
  fl=$(grep -acE '^FAIL - image [0-9]+' "$log")
  tried=$((tried + done_n)); rejected=$((rejected + rej)); mounted=$((mounted + mnt)); failed=$((failed + fl))
  passed=$((passed + done_n - fl))
  if grep -aq '^hostile-guest-end' "$log"; then
    # the guest went through its images; a failed run (the harness saw a WARN, a lost result)
    # without a failing image is still a failure
    if [ $rc -ne 0 ] && [ "$fl" -eq 0 ]; then
      failed=$((failed + 1)); echo "hostile: guest for images $first.. failed (exit $rc):"; tail -n 15 "$log.driver"
    fi
    break
  fi
  last=$(grep -aoE '^hostile-image [0-9]+' "$log" | tail -n1 | awk '{print $2}')
  if [ -z "$last" ]; then
    echo "hostile: the guest for images $first.. never reached an image (exit $rc):"; tail -n 20 "$log.driver"
    failed=$((failed + 1)); break
  fi
  what=crash; grep -aq "^HOSTILE-HANG image $last" "$log" && what=hang
  [ $rc -eq 0 ] && what="guest end"
  desc=$(grep -aE "^hostile-image $last " "$log" | tail -n1 | cut -d' ' -f3-)
  echo "hostile: image $last ($desc) ended the guest: $what; console log $log"
  grep -aE 'Oops|BUG|WARNING|panic|RIP:|HOSTILE-HANG|blocked for' "$log" | grep -av 'ommand line' | head -n 8 | sed 's/^/hostile:   /'
  crashed+=("$last $desc ($what)")
  tried=$((tried + 1)); crashes=$((crashes + 1)); failed=$((failed + 1))
  first=$((last + 1))
done
echo "hostile: seed $seed, $flavour kernel, $guests guest(s), $(( $(date +%s) - t0 ))s"
for c in "${crashed[@]}"; do echo "hostile: crashed: image $c"; done
echo "hostile images: $tried tried, $rejected rejected, $mounted mounted, $crashes crashes"
echo "hostile: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$tried" -eq "$images" ]
