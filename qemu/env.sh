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

# The kernel command line of every test guest (qemu/run-guest.sh, the power-cut drivers).
# no_timer_check: under TCG on a loaded host the IO-APIC timer check can misfire and panic the boot
# ("IO-APIC + timer doesn't work"); a 120 s RCU stall timeout keeps a starved vCPU thread (host
# load, not the guest) from being reported as a stall after the default 21 s.
# pci=noacpi: PCI interrupts are routed from the BIOS's PIRQ table, not by evaluating the DSDT's
# _PRT method. QEMU's i440fx _PRT is an AML While loop over 128 entries; the ACPI interpreter of
# the debug kernel (KASAN, lockdep, SLUB debugging) under TCG took about 25 s per virtio device
# for it, and past 30 s ACPICA aborts it (AE_AML_LOOP_TIMEOUT, "PCI INT A: no GSI"): the disk
# then has no interrupt and the boot hangs in the partition scan, before /init. That was every
# "did not reach /init" seen in the debug power-cut runs, and the ~60 s debug boots with disks.
GUEST_CMDLINE="console=ttyS0 panic=-1 oops=panic printk.devkmsg=on no_timer_check pci=noacpi rcupdate.rcu_cpu_stall_timeout=120"
# Kernel reports that fail a guest run when they appear in a kernel line of its console.
KERNEL_PROBLEMS='Kernel panic|Oops|BUG:|kernel BUG at|WARNING:|KASAN:|KFENCE:|UBSAN:|general protection fault|possible (recursive|circular) locking|inconsistent lock state|lockdep is turned off|DEBUG_LOCKS_WARN_ON|list_(add|del) corruption|Call Trace:|stack-protector|blocked for more than|soft lockup'

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
