# ferrofs: top-level build. Every target is a thin call into qemu/ or tests/ scripts.
#   make test        everything: toolchain, kernel, module, tools, cargo test, harness test, guest suites
#   make run         boot a QEMU guest with emulated NAND and ferrofs loaded, with a shell
#   make module      build ferrofs.ko against the cached test kernel
# FERROFS_KFLAVOUR=debug selects the KASAN/lockdep/DEBUG_LIST/KFENCE kernel for any target.
SHELL := /bin/bash
.PHONY: all deps kernel module tools initramfs cargo-test harness-test guest-test test run clean

all: module tools

deps:
	qemu/install-deps.sh

kernel: deps
	qemu/build-kernel.sh >/dev/null

module: kernel
	qemu/build-module.sh

tools:
	qemu/build-tools.sh

initramfs: module tools harness-module
	source qemu/env.sh && qemu/mkinitramfs.sh "$$(kernel_dir)/linux" build/initramfs-$${FERROFS_KFLAVOUR}.cpio tests/harness/faulty/faulty.ko

harness-module: kernel
	qemu/build-module.sh $(CURDIR)/tests/harness/faulty

cargo-test:
	cd userspace-tools && cargo test

harness-test: initramfs
	tests/harness/test-harness.sh

guest-test: initramfs
	tests/run-guest-suites.sh

test:
	tests/run-all.sh

run: initramfs
	qemu/run-guest.sh shell

clean:
	rm -rf build userspace-tools/target
	-source qemu/env.sh && [ -d "$$(kernel_dir)/linux" ] && $(MAKE) -C "$$(kernel_dir)/linux" M=$(CURDIR) clean

# The side-by-side benchmark rig (issues 5, 10): tests/bench/run-bench.sh, docs/benchmarks.md "The rig".
# Every target: throughput, latency and GC buffered and device-bound (fsync per write), concurrency
# (reader beside a writer process), fio as a cross-check (needs fio on the host: qemu/install-deps.sh);
# report.md opens with issue 10's write-path figures, each with its target, met or not; then issue
# 13's cheap-FTL case: ferrofs-mtdblock (the block backend on mtdblock) beside F2FS and ext4, the
# seed's sweep and dirty runs, and random 4 KiB overwrites of a file of half the chip with an fsync
# per 16 writes, buffered under a 4 MiB dirty limit, and an fsync per write, each target met or not;
# then every target's usable capacity (df after mkfs) and, for ferrofs, JFFS2 and UBIFS, the clean
# mount of the same data on a 256 MiB and a 1 GiB chip (experiment mount-scale, issue 12).
#   make bench       quick profile (a few minutes): bench/results/<date>-<commit>-quick/
#   make bench-full  full profile (the published numbers, about an hour)
#   TARGETS="ferrofs ext4 ubifs" and EXPERIMENTS="meta mount mount-powercut" narrow either run
#   (experiment names as in status.txt; the results folder's name ends with them)
.PHONY: bench bench-full
BENCH_NARROW = $(if $(TARGETS),--targets "$(TARGETS)") $(if $(EXPERIMENTS),--experiments "$(EXPERIMENTS)")
bench: initramfs
	tests/bench/run-bench.sh --quick $(BENCH_NARROW)

bench-full: initramfs
	tests/bench/run-bench.sh --full $(BENCH_NARROW)

# Crash-point enumeration, every cut point of every workload, torn and not, recoveries cut too
# (userspace-tools/engine-tests): crash_ace.rs (ACE-style: every one- and two-operation workload
# over a small tree and a bounded three-operation set, each operation followed by a persistence
# variant, on NAND and on a block device with a write cache), crash_enum.rs (64 random workloads
# on NAND and on the block device, full-device deletions; also the failure injection, sampled:
# FERROFS_FAIL_FULL=1 for all of it) and write_blocks.rs (write-back batches). `cargo test` runs
# a sample of each. Prints every enumeration's line, then their sum:
#   crash enumeration: W workloads, N cut points checked, F failures
# (the full log in build/crash-full.log; 2.35 million cut points with the MLC enumerations, about half an hour on 2 cores).
.PHONY: crash-full
crash-full:
	mkdir -p build
	cd userspace-tools && FERROFS_CRASH_FULL=1 cargo test --release -p ferrofs-engine-tests \
	  --test crash_ace --test crash_enum --test write_blocks -- --nocapture | tee ../build/crash-full.log; \
	st=$${PIPESTATUS[0]}; \
	awk '/^crash enumeration/ { for (i = 2; i <= NF; i++) { if ($$i == "workloads,") w += $$(i-1); \
	  if ($$i == "cut" && $$(i+1) == "points") n += $$(i-1); if ($$i ~ /^failures/) f += $$(i-1) } } \
	  END { printf "crash enumeration: %d workloads, %d cut points checked, %d failures\n", w, n, f }' ../build/crash-full.log; \
	exit $$st

# Flash faults under nandsim (tests/vm/ferrofs-faults): bit-flips during a long write/read
# workload, factory bad blocks, weak blocks, weak pages (and a power cut after fsync), a grave
# page, a worn-out checkpoint block, a read-only MTD. Prints "flash faults: N scenarios, F failed".
#   make faults [ROUNDS=N] [SEED=S]   churn generations (default 4, what `make test` runs)
.PHONY: faults
faults: initramfs
	qemu/run-guest.sh --timeout 3600 ferrofs-faults $(or $(ROUNDS),4) $(or $(SEED),11)
# Long randomized checking (issue 9): fsx-style checker (ferrofs-fstest fsx) on nandsim, PROCS
# processes on separate files, umount+mount every 1000 operations per process; prints
# "fsx: N operations, M mismatches". make test runs 20000 operations.
#   make fsx OPS=1000000 [PROCS=4] [SEED=1]
# Concurrent stress (issue 9): stress-ng's filesystem stressors for half of SECONDS, then
# ferrofs-fstest stress (8 processes on shared directories) for the other half; prints
# "stress: N seconds, P processes, E errors, M mismatches". make test runs 60 s.
#   make stress SECONDS=1800 [SEED=1]
.PHONY: fsx stress
fsx: initramfs
	qemu/run-guest.sh --timeout $$(( 600 + $(or $(OPS),20000) / 20 )) ferrofs-fsx $(or $(OPS),20000) $(or $(PROCS),4) $(or $(SEED),1)

stress: initramfs
	qemu/run-guest.sh --timeout $$(( 900 + 2 * $(or $(SECONDS),60) )) ferrofs-stress $(or $(SECONDS),60) $(or $(SEED),1)
# Power cuts by killing QEMU (issue 9): tests/powercut/run-powercut.sh (SIGKILL at random moments,
# also inside the mount; fsck -n, mount, every fsync'd file and entry checked against a log on a
# second disk). Prints "power cuts: N cuts, F failed mounts, E fsck errors, L fsync'd files lost".
#   make powercut CUTS=200 [FS=ferrofs|ubifs|ferrofs-blk|ferrofs-mtdblock] [SEED=S]
# (ferrofs-blk: ferrofs on the virtio disk through the block backend; ferrofs-mtdblock: through
# the block backend on mtdblock over block2mtd, the one-erase-block FTL)
.PHONY: powercut
CUTS ?= 5
FS ?= ferrofs
powercut: initramfs
	CUTS=$(CUTS) FS=$(FS) $(if $(SEED),SEED=$(SEED)) tests/powercut/run-powercut.sh
# Hostile images (issue 9): IMAGES mutated ferrofs images (seeded: SEED), each mounted in a guest on
# mtdram; rejected with a message or mounted, read, written, unmounted; a crash of one image is counted
# and the next runs in a new guest. Prints "hostile images: N tried, R rejected, M mounted, C crashes".
#   make hostile IMAGES=5000 SEED=1
.PHONY: hostile
IMAGES ?= 200

hostile: initramfs
	tests/hostile/run-hostile.sh $(IMAGES) $(or $(SEED),1)
# ferrofs as the root filesystem of a booting machine (issue 14): tests/rootfs/run-rootfs.sh.
#   make rootfs-image                  minimal Debian (mmdebstrap, sysvinit; busybox fallback) packed by
#                                      mkfs.ferrofs -r into build/rootfs/rootfs-{nand,block}.img
#   make run-rootfs [ROOTDEV=block]    boot it interactively (NAND over block2mtd by default)
#   make rootfs-test                   what `make test` runs: install+reboot+verify, the initramfs's
#                                      failures, 3 power cuts (NAND)
#   make rootfs-powercut CUTS=N [ROOTDEV=block] [SEED=S]   prints "root power cuts: N cuts, ..."
#   make rootfs-boottime [REPEAT=N]    time to init: ferrofs NAND and block, UBIFS, ext4
.PHONY: rootfs-image rootfs-initramfs run-rootfs rootfs-test rootfs-powercut rootfs-boottime
ROOTDEV ?= nand
rootfs-image: tools
	qemu/mkrootfs.sh

rootfs-initramfs: module
	source qemu/env.sh && qemu/mkinitramfs-root.sh "$$(kernel_dir)/linux" build/initramfs-root-$${FERROFS_KFLAVOUR}.cpio

run-rootfs: rootfs-image rootfs-initramfs
	ROOTDEV=$(ROOTDEV) tests/rootfs/run-rootfs.sh shell

rootfs-test: rootfs-image rootfs-initramfs
	tests/rootfs/run-rootfs.sh quick

rootfs-powercut: rootfs-image rootfs-initramfs
	CUTS=$(CUTS) ROOTDEV=$(ROOTDEV) $(if $(SEED),SEED=$(SEED)) tests/rootfs/run-rootfs.sh powercut

rootfs-boottime: rootfs-image rootfs-initramfs
	$(if $(REPEAT),REPEAT=$(REPEAT)) tests/rootfs/run-rootfs.sh boottime
