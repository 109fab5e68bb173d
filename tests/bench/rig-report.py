#!/usr/bin/env python3
"""Assemble report.md of a benchmark-rig results folder (tests/bench/run-bench.sh).

Usage: tests/bench/rig-report.py RESULTS_DIR [--tool PATH]

Runs `ferrofs-bench report RESULTS_DIR/json` (tables with ferrofs/peer ratios, SVG plots) into
RESULTS_DIR, then writes RESULTS_DIR/report.md as: the rig's header (profile, commit, NAND),
the status of every target (failed ones with the reason), the tool's report, and the rig's own
write-amplification section from the counters the guests read before and after each experiment
(ferrofs debugfs statistics; sectors written to mtdblock). Standard library only; re-runnable.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ORDER = ["raw", "jffs2", "ubifs", "f2fs", "ext4", "ferrofs"]
EXPS = ["sweep", "latency", "smallfiles", "meta", "dirty", "gc", "mount", "mount-powercut"]


def kv(path):
    d = {}
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#") or "=" not in line:
                    continue
                k, v = line.split("=", 1)
                d[k.strip()] = v.strip()
    except OSError:
        pass
    return d


def status_sections(path):
    """status.txt: [target] sections of key=value and 'exp LABEL EXP rc=N seconds=S' lines."""
    secs, cur = {}, None
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return secs
    for line in lines:
        line = line.rstrip()
        if line.startswith("[") and line.endswith("]"):
            cur = line[1:-1]
            secs[cur] = {"exps": [], "kv": {}}
        elif cur and line.startswith("exp "):
            w = line.split()
            rc = next((x.split("=", 1)[1] for x in w if x.startswith("rc=")), "?")
            s = next((x.split("=", 1)[1] for x in w if x.startswith("seconds=")), "?")
            err = next((x.split("=", 1)[1].replace("_", " ") for x in w if x.startswith("error=")), "")
            secs[cur]["exps"].append((w[1], w[2], rc + (f" ({err})" if err else ""), s))
        elif cur and "=" in line:
            k, v = line.split("=", 1)
            secs[cur]["kv"][k] = v
    return secs


def f2(x, p=2):
    return "n/a" if x is None else f"{x:.{p}f}"


def main():
    args = sys.argv[1:]
    tool = "build/tools/ferrofs-bench"
    if "--tool" in args:
        i = args.index("--tool")
        tool = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    res = args[0]
    cfg = kv(os.path.join(res, "config.txt"))
    st = status_sections(os.path.join(res, "status.txt"))

    # The tool's report, built in a scratch directory, its plots copied next to report.md.
    tool_md, tool_err = "", None
    jdir = os.path.join(res, "json")
    if os.path.isdir(jdir) and any(f.endswith(".json") for _, _, fs in os.walk(jdir) for f in fs):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([tool, "report", jdir, "--out", tmp, "--reference", "ferrofs"], capture_output=True, text=True)
            if p.returncode != 0:
                tool_err = (p.stderr or p.stdout).strip()
            for f in sorted(os.listdir(tmp)):
                if f.endswith(".svg"):
                    shutil.copy(os.path.join(tmp, f), os.path.join(res, f))
            try:
                tool_md = open(os.path.join(tmp, "report.md")).read()
            except OSError:
                pass
    else:
        tool_err = "no JSON results"

    o = []
    o.append(f"# ferrofs benchmark rig: {cfg.get('profile', '?')} profile\n")
    o.append(f"Run of {cfg.get('started_utc', '?')} on commit `{cfg.get('commit', '?')[:10]}` ({cfg.get('commit_subject', '')}), "
             f"{cfg.get('kernel_flavour', '?')} kernel {cfg.get('kernel_release', '?')}, QEMU {cfg.get('accel', '?')}, "
             f"guest {cfg.get('guest_memory_mib', '?')} MiB / {cfg.get('cpus', '?')} CPU(s) (QEMU -smp 2; the test kernel runs one), host load at start {cfg.get('host_load_at_start', '?')}. "
             f"Emulated NAND: nandsim 256 MiB chip, 2 KiB pages, 128 KiB erase blocks, "
             f"filesystems on mtd of {int(cfg.get('mtd_size', '0')) >> 20} MiB; timing on "
             f"(access_delay={cfg.get('access_delay', '?')} µs, programm_delay={cfg.get('programm_delay', '?')} µs, "
             f"erase_delay={cfg.get('erase_delay', '?')} ms, input_cycle={cfg.get('input_cycle', '?')} ns, output_cycle={cfg.get('output_cycle', '?')} ns). "
             "Full configuration: `config.txt`; per-target log of the rig: `status.txt`. Each target ran in a fresh guest with a fresh nandsim. "
             "Labels: `nand-raw` = the MTD char device, `mtdblock-raw` = mtdblock over it (O_DIRECT), the physical limits for the MTD and the cheap-FTL filesystems.\n")

    o.append("## Status of each target\n")
    o.append("| Target | Guest | Setup | Experiments (exit code, guest seconds) | Notes |\n|---|---|---|---|---|")
    targets = [t for t in ORDER if t in st] + [t for t in st if t not in ORDER]
    for t in targets:
        s = st[t]
        k = s["kv"]
        guest = "ok" if k.get("guest_rc") == "0" else f"FAILED ({k.get('guest_failure', 'exit ' + k.get('guest_rc', '?'))})"
        guest += f", {k.get('guest_seconds', '?')} s"
        setup = k.get("setup", "not reached")
        exps = ", ".join(f"{lab if lab != t else ''}{' ' if lab != t else ''}{e} {'ok' if rc == '0' else 'FAILED rc=' + rc + ','} {sec}s" for lab, e, rc, sec in s["exps"]) or "none"
        notes = []
        for key in ("umount", "fsck"):
            if key in k:
                notes.append(f"{key} {k[key]}")
        if "done" not in open(os.path.join(res, "status.txt")).read().split(f"[{t}]", 1)[1].split("\n[", 1)[0] and t != "raw":
            notes.append("did not finish")
        if os.path.exists(os.path.join(res, "failures", f"{t}-console.txt")):
            notes.append(f"console: `failures/{t}-console.txt`")
        o.append(f"| {t} | {guest} | {setup} | {exps} | {'; '.join(notes)} |")
    o.append("")
    if tool_err:
        o.append(f"`ferrofs-bench report` reported: {tool_err}\n")

    # Headline: sequential throughput of every target beside its physical limit.
    sweeps = {}
    for dp, _, fs in os.walk(jdir):
        for f in fs:
            if f.endswith("-sweep.json"):
                try:
                    d = json.load(open(os.path.join(dp, f)))
                    sweeps[d["label"]] = d["results"]["points"]
                except (OSError, ValueError, KeyError):
                    pass
    if sweeps:
        def pt(lab, bs):
            pts = sweeps.get(lab, [])
            p = next((x for x in pts if x["block_size"] == bs and x["mode"] in ("buffered", "raw-mtd", "raw-block")), None)
            return p
        bss = sorted({x["block_size"] for pts in sweeps.values() for x in pts})
        limit = {"jffs2": "nand-raw", "ubifs": "nand-raw", "ferrofs": "nand-raw", "f2fs": "mtdblock-raw", "ext4": "mtdblock-raw"}
        order = ["nand-raw", "mtdblock-raw", "jffs2", "ubifs", "f2fs", "ext4", "ferrofs"]
        labs = [l for l in order if l in sweeps] + [l for l in sweeps if l not in order]
        o.append("## Summary: sequential write / read MB/s (buffered + fsync; raw devices: their own mode)\n")
        o.append("The percentage is of the physical limit below the filesystem: `nand-raw` for JFFS2, UBIFS and ferrofs, "
                 "`mtdblock-raw` (O_DIRECT on mtdblock) for F2FS and ext4 (the cheap-FTL case).\n")
        hdr = "| Target | " + " | ".join(f"{bs >> 10}k write | {bs >> 10}k read" if bs < 1 << 20 else f"{bs >> 20}M write | {bs >> 20}M read" for bs in bss) + " |"
        o.append(hdr)
        o.append("|---|" + "---|---|" * len(bss))
        for l in labs:
            cells = []
            for bs in bss:
                p = pt(l, bs)
                for ph in ("write", "read"):
                    if p is None:
                        cells.append("n/a")
                        continue
                    v = p[ph]
                    if v.get("status") != "ok" or v.get("mb_s") is None:
                        cells.append(v.get("status", "n/a"))
                        continue
                    c = f"{v['mb_s']:.2f}"
                    ref = pt(limit.get(l, ""), bs)
                    if ref and ref[ph].get("status") == "ok" and ref[ph].get("mb_s"):
                        c += f" ({100 * v['mb_s'] / ref[ph]['mb_s']:.0f} %)"
                    cells.append(c)
            o.append(f"| {l} | " + " | ".join(cells) + " |")
        missing = [t for t in ORDER if t != "raw" and t in st and t not in sweeps]
        if missing:
            o.append(f"\nNo sweep results from: {', '.join(missing)} (see the status table).")
        o.append("")

    # Demote the tool report's title; keep everything else as it is.
    if tool_md:
        lines = tool_md.splitlines()
        if lines and lines[0].startswith("# "):
            lines[0] = "## Results (`ferrofs-bench report`)"
        body = []
        for line in lines[1:]:
            body.append("#" + line if line.startswith("#") else line)
        o.append(lines[0])
        o.extend(body)
        o.append("")

    # Rig-level write amplification.
    cdir = os.path.join(res, "counters")
    rows_f, rows_b, rows_e = [], [], []
    esz = float(cfg.get("mtd_erasesize", "131072") or 131072)
    if os.path.isdir(cdir):
        names = sorted({f.rsplit(".", 1)[0] for f in os.listdir(cdir) if f.endswith(".before")})
        for n in names:
            b = kv(os.path.join(cdir, n + ".before"))
            a = kv(os.path.join(cdir, n + ".after"))
            if not a:
                continue
            exp = next((e for e in sorted(EXPS, key=len, reverse=True) if n.endswith("-" + e)), n.rsplit("-", 1)[-1])
            lab = n[:-len(exp) - 1]

            def d(key):
                try:
                    return float(a[key]) - float(b[key])
                except (KeyError, ValueError):
                    return None
            if "ferrofs_user_bytes" in a:
                u, p = d("ferrofs_user_bytes"), d("ferrofs_programmed_bytes")
                wa = p / u if u and p is not None else None
                rows_f.append((EXPS.index(exp) if exp in EXPS else 99, f"| {exp} | {f2(u / 1e6 if u is not None else None)} | {f2(p / 1e6 if p is not None else None)} | {f2(wa)} | "
                               f"{f2(d('ferrofs_erases'), 0)} | {f2((d('ferrofs_gc_bytes') or 0) / 1e6)} | {f2(d('ferrofs_checkpoints'), 0)} |"))
            if "nand_erases" in a:
                e = d("nand_erases")
                u = d("ferrofs_user_bytes") if "ferrofs_user_bytes" in a else None
                rows_e.append((ORDER.index(lab) if lab in ORDER else 99, lab, EXPS.index(exp) if exp in EXPS else 99, exp, e, u, a.get("nand_max_erases")))
            if "mtdblock_sectors_written" in a and lab in ("f2fs", "ext4", "mtdblock-raw"):
                w = d("mtdblock_sectors_written")
                rows_b.append((lab, EXPS.index(exp) if exp in EXPS else 99, f"| {lab} | {exp} | {f2(w * 512 / 1e6 if w is not None else None)} |"))
    o.append("## Write amplification, rig counters\n")
    o.append("Counters read by the guest after a `sync` before and after each whole experiment (fills, warm-ups and clean-up included, "
             "so these are not the per-phase figures of the table above).\n")
    if rows_f:
        o.append("ferrofs, from its debugfs statistics (`/sys/kernel/debug/ferrofs/mtdN/`): WA = bytes programmed to the NAND / file bytes written by users.\n")
        o.append("| Experiment | User MB | Programmed MB | WA | Erases | GC moved MB | Checkpoints |\n|---|---|---|---|---|---|---|")
        o.extend(r for _, r in sorted(rows_f))
        o.append("")
    else:
        o.append("ferrofs: no counters (the target did not run or its debugfs statistics were missing).\n")
    if rows_b:
        o.append("F2FS and ext4 on mtdblock: bytes the filesystem wrote to mtdblock (`/proc/diskstats`), per experiment. "
                 "Per-phase WA against the benchmark's bytes is in the tool's write-amplification table above. "
                 "What mtdblock then does to the NAND (a whole erase block erased and rewritten per flush) is in the erase table below.\n")
        o.append("| Target | Experiment | Written to mtdblock MB |\n|---|---|---|")
        o.extend(r for _, _, r in sorted(rows_b, key=lambda x: (x[0], x[1])))
        o.append("")
    if rows_e:
        o.append("### Erases on the NAND, every target (nandsim's wear report)\n")
        o.append("Erase blocks erased during each whole experiment (nandsim's debugfs wear report on the whole-chip MTD device), "
                 f"and erased MB = erases x {int(esz) >> 10} KiB: on NAND every byte programmed needs an erased block first, so at steady state "
                 "this is the flash-level write volume, comparable across all targets (JFFS2, UBIFS and ferrofs on the MTD device; F2FS and "
                 "ext4 through mtdblock, which erases and rewrites a whole block for each flush). Erases lag writes (blocks are erased when "
                 "reused), so short experiments on a fresh filesystem show few. The per-phase ratios against the bytes the benchmark wrote "
                 "are the `write amplification` table of the tool's report above. Max = the most-erased block of the chip at the end "
                 "(wear hot spot).\n")
        labs_e = sorted({(r[0], r[1]) for r in rows_e})
        exps_e = sorted({(r[2], r[3]) for r in rows_e})
        o.append("| Experiment | " + " | ".join(f"{l} erased MB" for _, l in labs_e) + " |")
        o.append("|---|" + "---|" * len(labs_e))
        cell = {(r[1], r[3]): r for r in rows_e}
        for _, ex in exps_e:
            cs = []
            for _, l in labs_e:
                r = cell.get((l, ex))
                cs.append("n/a" if r is None or r[4] is None else f"{r[4] * esz / 1e6:.1f} ({r[4]:.0f})")
            o.append(f"| {ex} | " + " | ".join(cs) + " |")
        lastmax = {}
        for r in sorted(rows_e, key=lambda r: r[2]):
            if r[6] is not None:
                lastmax[r[1]] = r[6]
        o.append("| max erases of one block at the end | " + " | ".join(lastmax.get(l, "n/a") for _, l in labs_e) + " |")
        fe = [(r[3], r[4], r[5]) for r in rows_e if r[1] == "ferrofs" and r[5]]
        if fe:
            o.append("\nferrofs, erase-based WA per whole experiment (erased bytes / user bytes): " +
                     ", ".join(f"{ex} {e * esz / u:.2f}" for ex, e, u in sorted(fe, key=lambda x: EXPS.index(x[0]) if x[0] in EXPS else 99) if e is not None) + ".")
        o.append("")
    else:
        o.append("No NAND erase counts (nandsim's wear report was missing: it needs CONFIG_MTD_PARTITIONED_MASTER).\n")

    with open(os.path.join(res, "report.md"), "w") as f:
        f.write("\n".join(o).rstrip() + "\n")
    print(f"rig-report: {os.path.join(res, 'report.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
