# Boot time to init (issue 14), sourced by tests/rootfs/run-rootfs.sh (mode boottime): the same
# tree (build/rootfs/tree, what mkrootfs.sh packed) as ferrofs on NAND (block2mtd over a virtio
# disk) and on the block device (virtio-blk), as UBIFS on the same NAND (mkfs.ubifs -r, ubinize,
# UBI attached by the initramfs) and as ext4 on the same block device (mkfs.ext4 -d). Each boot
# starts from a fresh copy of its image. Measured from the kernel's own timestamps on the
# console: the initramfs's /dev/kmsg marks ("mounting", "root mounted", "switch_root") and the
# real init's test hook ("init reached", after the boot scripts: sysvinit's rcS with the root
# remounted read-write, or busybox's rcS). Prints one line per filesystem, medians of REPEAT boots.

# ubifs_image TREE OUT: a UBI image for block2mtd (128 KiB erase blocks, 1-byte writes: the UBI
# headers take 128 bytes of each erase block), padded with erased bytes to the NAND size.
ubifs_image() {
  local tree="$1" out="$2" tmp; tmp="$(mktemp -d)"
  local peb=131072 leb=$((131072 - 128)) pebs=$((ROOTFS_MIB * 8))
  mkfs.ubifs -q -r "$tree" -m 8 -e "$leb" -c $((pebs - 40)) -o "$tmp/root.ubifs" || return 1
  printf '[rootfs]\nmode=ubi\nimage=%s\nvol_id=0\nvol_type=dynamic\nvol_name=rootfs\nvol_flags=autoresize\n' \
    "$tmp/root.ubifs" > "$tmp/ubi.ini"
  ubinize -o "$tmp/root.ubi" -p "$peb" -m 1 "$tmp/ubi.ini" || return 1
  # the rest of the flash erased (0xFF), as ubiformat would leave it
  { cat "$tmp/root.ubi"; head -c $(( ROOTFS_MIB * 1048576 - $(stat -c %s "$tmp/root.ubi") )) /dev/zero | tr '\0' '\377'; } > "$out"
  rm -rf "$tmp"
}

# stamp LOG PATTERN: the kernel timestamp (seconds) of the first kernel line matching PATTERN.
stamp() { grep -aE "^\[ *[0-9]+\.[0-9]+\] .*$2" "$1" | head -n1 | sed -E 's/^\[ *([0-9]+\.[0-9]+)\].*/\1/'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else print a[int((NR + 1) / 2)]}'; }

mode_boottime() {
  local REPEAT="${REPEAT:-3}" ROOTFS_MIB="${ROOTFS_MIB:-512}"
  local tree=build/rootfs/tree
  [ -d "$tree" ] || { bad "no build/rootfs/tree: run make rootfs-image"; return; }
  local ubi=build/disks/rootfs-bt-ubifs.img ext4=build/disks/rootfs-bt-ext4.img
  echo "run-rootfs: boot time to init, $USERLAND userland ($(du -sh --apparent-size "$tree" | cut -f1)), median of $REPEAT boots each"
  check "UBIFS image (mkfs.ubifs -r, ubinize)" ubifs_image "$tree" "$ubi"
  rm -f "$ext4"
  check "ext4 image (mkfs.ext4 -d)" mkfs.ext4 -q -F -d "$tree" "$ext4" "${ROOTFS_MIB}M"
  local name img append r log disk t_run t_mnt0 t_mnt t_sw t_hook
  local rows=()
  while IFS='|' read -r name img append; do
    local mounts=() inits=() hooks=()
    for (( r = 1; r <= REPEAT; r++ )); do
      disk=build/disks/rootfs-bt-run.img; fresh_copy "$img" "$disk"
      log=$LOGS/$name-$r.log
      guest "$log" 600 "$append rootfs.test=boottime" "$disk"
      t_run=$(stamp "$log" 'Run /init as init process'); t_mnt0=$(stamp "$log" 'ferrofs-initramfs: mounting')
      t_mnt=$(stamp "$log" 'ferrofs-initramfs: root mounted'); t_sw=$(stamp "$log" 'ferrofs-initramfs: switch_root')
      t_hook=$(stamp "$log" 'ferrofs-rootfs: init reached')
      if [ -z "$t_run" ] || [ -z "$t_mnt" ] || [ -z "$t_sw" ] || [ -z "$t_hook" ]; then
        bad "$name boot $r: a mark is missing (log $log)"; grep -a 'ferrofs-initramfs' "$log" | head -n 3; continue
      fi
      mounts+=("$(awk -v a="$t_mnt0" -v b="$t_mnt" 'BEGIN {printf "%.3f", b - a}')")
      inits+=("$t_sw"); hooks+=("$t_hook")
      echo "run-rootfs: $name boot $r: /init at $t_run s, mount $t_mnt0 -> $t_mnt s, real init at $t_sw s, boot scripts done at $t_hook s"
      guest_counts "$log" "$name boot $r"
    done
    rows+=("$(printf '%-22s %8s %10s %14s' "$name" "$(printf '%s\n' "${mounts[@]}" | median)" \
      "$(printf '%s\n' "${inits[@]}" | median)" "$(printf '%s\n' "${hooks[@]}" | median)")")
  done <<EOF
ferrofs NAND|$IMG_NAND|$(root_args nand)
ferrofs block|$IMG_BLOCK|$(root_args block)
UBIFS NAND|$ubi|root=ubi0:rootfs rootfstype=ubifs block2mtd=/dev/vda,128KiB,rootfs ubi.mtd=rootfs ro
ext4 block|$ext4|root=/dev/vda rootfstype=ext4 ro
EOF
  echo "boot time (s, kernel clock; median of $REPEAT): root mount, kernel start to the real init, to the end of the boot scripts"
  printf '%-22s %8s %10s %14s\n' "filesystem" "mount" "init" "boot scripts"
  printf '%s\n' "${rows[@]}"
  rm -f "$ubi" "$ext4" build/disks/rootfs-bt-run.img
}
