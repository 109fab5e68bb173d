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

ORDER = ["raw", "jffs2", "ubifs", "f2fs", "ext4", "ferrofs", "ferrofs-mtdblock"]
RANDWRITE = ["randwrite-sync16", "randwrite-buffered", "randwrite-sync1"]
EXPS = ["sweep", "latency", "latency-fsync", "smallfiles", "meta", "concurrency", "fio", "dirty", "gc", "gc-fsync", "mount", "mount-powercut", "mount-scale"] + RANDWRITE
PEERS = ["jffs2", "ubifs", "f2fs", "ext4"]
# The cheap-FTL case (issue 13): ferrofs's block backend and the block filesystems on mtdblock.
CHEAP = ["ferrofs-mtdblock", "f2fs", "ext4"]


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


def load_runs(jdir):
    """The tool's JSON runs under jdir, the newest per (experiment, label), as the tool's report keeps them."""
    runs = {}
    for dp, _, fs in os.walk(jdir):
        for f in fs:
            if not f.endswith(".json"):
                continue
            try:
                d = json.load(open(os.path.join(dp, f)))
            except (OSError, ValueError):
                continue
            if not isinstance(d, dict) or d.get("tool") != "ferrofs-bench":
                continue
            k = (d.get("experiment"), d.get("label"))
            if k not in runs or d.get("started_unix", 0) >= runs[k].get("started_unix", 0):
                runs[k] = d
    return runs


def load_fio(fdir):
    """fio/<target>/<label>-<job>.json: {(label, job): (MB/s, clat summary or None)} from fio's JSON (one job each).
    MB/s = io_bytes / runtime of the job's direction (fio counts end_fsync in the runtime)."""
    out = {}
    if not os.path.isdir(fdir):
        return out
    for dp, _, fs in os.walk(fdir):
        for f in fs:
            if not f.endswith(".json"):
                continue
            try:
                text = open(os.path.join(dp, f)).read()
                d = json.loads(text[text.index("{"):])
                job = d["jobs"][0]
            except (OSError, ValueError, KeyError, IndexError):
                continue
            name = job.get("jobname", "")
            label = f[:-len(".json")]
            if not label.endswith("-" + name):
                continue
            label = label[:-len(name) - 1]
            ddir = "read" if "-read-" in name else "write"
            ph = job.get(ddir, {})
            rt_ms, nbytes = ph.get("runtime", 0), ph.get("io_bytes", 0)
            if job.get("error", 0) or not rt_ms or not nbytes:
                out[(label, name)] = None
                continue
            out[(label, name)] = nbytes / (rt_ms / 1e3) / 1e6
    return out


def size_name(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}k"


def write_path_figures(res):
    """The figures issue 10 asks for, in one place, each with its target and met / not met, from the JSON."""
    runs = load_runs(os.path.join(res, "json"))
    fio = load_fio(os.path.join(res, "fio"))
    o = ["## Write-path figures (issue 10)\n"]
    o.append("Every figure below is computed from this folder's JSON (`json/`, `fio/`) when the report is built. Ratios are "
             "ferrofs / peer; a target is met when the ratio (or percentage) is on the right side of it. "
             "Targets from issue 10; they are meant for the full profile (`make bench-full`): the quick profile "
             "has fewer writes and shorter runs, so its tails (p99.9, max) and GC windows are less settled.\n")
    checks = []  # (figure, ferrofs value, reference, ratio or %, target, met)

    def verdict(ok):
        return "n/a" if ok is None else ("met" if ok else "**not met**")

    def add(fig, val, ref, r, target, ok):
        checks.append((fig, val, ref, r, target, verdict(ok)))

    def get(exp, label):
        return runs.get((exp, label), {}).get("results")

    def div(a, b):
        return a / b if a is not None and b not in (None, 0) else None

    def ratio_s(r):
        return "n/a" if r is None else f"{r:.2f}x"

    def pct_s(p):
        return "n/a" if p is None else f"{p:.0f} %"

    labels = [l for l in ["ferrofs"] + PEERS if any(k[1] == l for k in runs)]

    # --- 4 KiB buffered write latency, and the device-bound variant beside it.
    lat = {l: (get("latency", l) or {}).get("summary") for l in labels}
    latf = {l: (get("latency-fsync", l) or {}).get("summary") for l in labels}
    if any(lat.values()) or any(latf.values()):
        n = (runs.get(("latency", "ferrofs"), {}).get("params") or {}).get("count", "?")
        nf = (runs.get(("latency-fsync", "ferrofs"), {}).get("params") or {}).get("count", "?")
        o.append(f"### 4 KiB write latency, µs\n\nBuffered (`latency`, {n} writes, no sync) beside the device-bound variant "
                 f"(`latency-fsync`, {nf} writes, each followed by fsync inside the timing).\n")
        o.append("| Target | buffered median | buffered p99.9 | buffered max | fsync median | fsync p99.9 | fsync max |\n|---|---|---|---|---|---|---|")
        for l in labels:
            a, b = lat.get(l) or {}, latf.get(l) or {}
            o.append(f"| {l} | " + " | ".join(f2(x.get(k), 1) for x in (a, b) for k in ("median_us", "p999_us", "max_us")) + " |")
        o.append("")
        fr, ub, jf = lat.get("ferrofs") or {}, lat.get("ubifs") or {}, lat.get("jffs2") or {}
        r = div(fr.get("median_us"), ub.get("median_us"))
        add("4 KiB buffered write latency, median vs UBIFS", f2(fr.get("median_us"), 1) + " µs", f2(ub.get("median_us"), 1) + " µs", ratio_s(r), "<= 1.5x", None if r is None else r <= 1.5)
        r = div(fr.get("p999_us"), ub.get("p999_us"))
        add("4 KiB buffered write latency, p99.9 vs UBIFS", f2(fr.get("p999_us"), 1) + " µs", f2(ub.get("p999_us"), 1) + " µs", ratio_s(r), "<= 1.0x", None if r is None else r <= 1.0)
        r = div(fr.get("max_us"), jf.get("max_us"))
        add("4 KiB buffered write latency, max vs JFFS2", f2(fr.get("max_us"), 1) + " µs", f2(jf.get("max_us"), 1) + " µs", ratio_s(r), "<= 0.1x", None if r is None else r <= 0.1)

    # --- Sequential buffered write and cold read against the raw NAND and UBIFS.
    def sweep_pts(label, modes=("buffered",)):
        pts = (get("sweep", label) or {}).get("points", [])
        return {p["block_size"]: p for p in pts if p.get("mode") in modes}

    def mb(p, ph):
        if p is None or p.get(ph, {}).get("status") != "ok":
            return None
        return p[ph].get("mb_s")
    fs, raw, ub = sweep_pts("ferrofs"), sweep_pts("nand-raw", ("raw-mtd",)), sweep_pts("ubifs")
    if fs:
        o.append("### Sequential buffered write and cold read, MB/s (fsync included; cold: after umount + mount)\n")
        o.append("| Block Size | ferrofs write | nand-raw write | ferrofs % of raw | ubifs write | ferrofs / ubifs | ferrofs read | nand-raw read | ferrofs % of raw | ubifs read (% of raw) |\n|---|---|---|---|---|---|---|---|---|---|")
        for bs in sorted(fs):
            w, rw, uw = mb(fs[bs], "write"), mb(raw.get(bs), "write"), mb(ub.get(bs), "write")
            rd, rr, ur = mb(fs[bs], "read"), mb(raw.get(bs), "read"), mb(ub.get(bs), "read")
            pw, pr, pu = div(w, rw), div(rd, rr), div(ur, rr)
            o.append(f"| {size_name(bs)} | {f2(w)} | {f2(rw)} | {pct_s(pw * 100 if pw else None)} | {f2(uw)} | {ratio_s(div(w, uw))} | "
                     f"{f2(rd)} | {f2(rr)} | {pct_s(pr * 100 if pr else None)} | {f2(ur)} ({pct_s(pu * 100 if pu else None)}) |")
            if bs >= 64 << 10:
                add(f"sequential buffered write {size_name(bs)}, % of raw NAND", f2(w) + " MB/s", f2(rw) + " MB/s (nand-raw)", pct_s(pw * 100 if pw else None), ">= 90 %", None if pw is None else pw >= 0.9)
            r = div(w, uw)
            add(f"sequential buffered write {size_name(bs)} vs UBIFS", f2(w) + " MB/s", f2(uw) + " MB/s", ratio_s(r), ">= 1.0x", None if r is None else r >= 1.0)
            if bs >= 64 << 10:
                add(f"sequential cold read {size_name(bs)}, % of raw NAND", f2(rd) + " MB/s", f2(rr) + " MB/s (nand-raw)", pct_s(pr * 100 if pr else None), ">= 70 %", None if pr is None else pr >= 0.7)
        o.append("")

    # --- Clean and dirty overwrites against UBIFS and JFFS2.
    def dirty_pts(label):
        out = {}
        for p in (get("dirty", label) or {}).get("points", []):
            k = (p.get("state"), round(p.get("fill", 0) * 100), p.get("block_size"))
            out[k] = p["overwrite"].get("mb_s") if p.get("overwrite", {}).get("status") == "ok" else None
        return out
    dfs, dub, djf = dirty_pts("ferrofs"), dirty_pts("ubifs"), dirty_pts("jffs2")
    if dfs:
        o.append("### Clean and dirty overwrites, MB/s (random overwrites, fsync included)\n")
        o.append("| State, Block Size | ferrofs | ubifs | ferrofs / ubifs | jffs2 | ferrofs / jffs2 |\n|---|---|---|---|---|---|")
        for k in sorted(dfs, key=lambda k: (k[1], k[2])):
            st_name = "clean" if k[0] == "clean" else f"dirty {k[1]} %"
            v, u, j = dfs[k], dub.get(k), djf.get(k)
            ru, rj = div(v, u), div(v, j)
            o.append(f"| {st_name} {size_name(k[2])} | {f2(v)} | {f2(u)} | {ratio_s(ru)} | {f2(j)} | {ratio_s(rj)} |")
            add(f"overwrite {st_name} {size_name(k[2])} vs UBIFS", f2(v) + " MB/s", f2(u) + " MB/s", ratio_s(ru), ">= 1.0x", None if ru is None else ru >= 1.0)
            add(f"overwrite {st_name} {size_name(k[2])} vs JFFS2", f2(v) + " MB/s", f2(j) + " MB/s", ratio_s(rj), ">= 3.0x", None if rj is None else rj >= 3.0)
        o.append("")

    # --- GC fluctuation, buffered and device-bound.
    def slowest(g):
        """The tool's slowest_window_pct_of_mean, or the same figure from the windows (runs before it was recorded)."""
        if not g:
            return None
        if g.get("slowest_window_pct_of_mean") is not None:
            return g["slowest_window_pct_of_mean"]
        ws, mean, win = g.get("windows") or [], (g.get("total") or {}).get("mb_s"), g.get("window_s") or 0
        full = [w["mb_s"] for w in ws if w.get("seconds", 0) >= 0.9 * win] or [w["mb_s"] for w in ws]
        return 100 * min(full) / mean if full and mean else None
    if any(get("gc", l) or get("gc-fsync", l) for l in labels):
        o.append("### GC fluctuation: slowest 1 s window as % of the run's mean\n")
        o.append("Random 64 KiB overwrites on the filesystem `dirty` left filled and fragmented. Buffered: each window ends with fsync "
                 "(the page cache absorbs repeated overwrites of the same blocks within a window); device-bound (`gc-fsync`): "
                 "fsync after every write. The slowest window leaves out a last window shorter than 90 % of a second.\n")
        o.append("| Target | buffered mean MB/s | buffered slowest window | fsync mean MB/s | fsync slowest window | fsync windows |\n|---|---|---|---|---|---|")
        for l in labels:
            g, gf = get("gc", l) or {}, get("gc-fsync", l) or {}
            o.append(f"| {l} | {f2((g.get('total') or {}).get('mb_s'))} | {pct_s(slowest(g))} | "
                     f"{f2((gf.get('total') or {}).get('mb_s'))} | {pct_s(slowest(gf))} | {len(gf.get('windows', []))} |")
        o.append("")
        for exp, what in (("gc", "buffered"), ("gc-fsync", "device-bound")):
            p = slowest(get(exp, "ferrofs"))
            mean = ((get(exp, "ferrofs") or {}).get("total") or {}).get("mb_s")
            add(f"GC slowest 1 s window, {what} ({exp})", pct_s(p), f"mean {f2(mean)} MB/s", pct_s(p), ">= 50 %", None if p is None else p >= 50)

    # --- Concurrency.
    if any(get("concurrency", l) for l in labels):
        o.append("### Concurrency: a reader streaming a cached file while another process overwrites a different file\n")
        o.append("| Target | CPUs | reader idle MB/s | reader loaded MB/s | loaded % of idle | slowest read loaded µs | writer MB/s |\n|---|---|---|---|---|---|---|")
        for l in labels:
            c = get("concurrency", l)
            if not c:
                o.append(f"| {l} | n/a | n/a | n/a | n/a | n/a | n/a |")
                continue
            i, ld = c.get("idle") or {}, c.get("loaded") or {}
            o.append(f"| {l} | {c.get('cpus')} | {f2(i.get('mb_s'))} | {f2(ld.get('mb_s'))} | {pct_s(c.get('loaded_pct_of_idle'))} | {f2(ld.get('max_read_us'), 0)} | {f2((c.get('writer') or {}).get('mb_s'))} |")
        o.append("")
        c = get("concurrency", "ferrofs") or {}
        p = c.get("loaded_pct_of_idle")
        add(f"concurrency: reader's throughput while a writer runs ({c.get('cpus', '?')} CPUs)", pct_s(p), f"idle {f2((c.get('idle') or {}).get('mb_s'))} MB/s", pct_s(p), ">= 80 %", None if p is None else p >= 80)

    # --- fio beside the tool.
    flabels = sorted({k[0] for k in fio}, key=lambda l: (["ferrofs"] + PEERS + ["mtdblock-raw"]).index(l) if l in ["ferrofs"] + PEERS + ["mtdblock-raw"] else 99)
    if fio:
        o.append("### fio beside ferrofs-bench, MB/s\n")
        o.append("The same experiment under both tools on every target: sequential write (fsync at the end, in the timing) and cold read "
                 "(after umount + mount) per block size, against the tool's `sweep` (buffered; O_DIRECT `raw-block` for mtdblock-raw); "
                 "4 KiB random overwrites (fsync at the end) of a file written and synced before, against the tool's `dirty` clean 4k point "
                 "(mtdblock-raw: O_DIRECT, a smaller amount, no tool counterpart). fio: psync engine, MB/s = io_bytes / the job's runtime. "
                 "ferrofs / peer ratios under each tool (none for mtdblock-raw, the cheap FTL's limit).\n")
        points = []
        bss = sorted({int(k[1].split("-")[-1][:-1]) << (20 if k[1].endswith("M") else 10) for k in fio if k[1].startswith("seq-")})
        for bs in bss:
            points.append((f"seq write {size_name(bs)}", f"seq-write-{size_name(bs)}", ("sweep", bs, "write")))
            points.append((f"seq read {size_name(bs)}", f"seq-read-{size_name(bs)}", ("sweep", bs, "read")))
        points.append(("random overwrite 4k", "rand-write-4k", ("dirty", 4096, None)))

        def tool_val(label, spec):
            kind, bs, ph = spec
            if kind == "sweep":
                modes = ("raw-block",) if label == "mtdblock-raw" else ("buffered",)
                return mb(sweep_pts(label, modes).get(bs), ph)
            return dirty_pts(label).get(("clean", 0, bs))
        o.append("| Point | Target | ferrofs-bench | fio | fio / tool | ferrofs / target (tool) | ferrofs / target (fio) |\n|---|---|---|---|---|---|---|")
        for name, job, spec in points:
            fref, tref = fio.get(("ferrofs", job)), tool_val("ferrofs", spec)
            for l in flabels:
                fv, tv = fio.get((l, job)), tool_val(l, spec)
                if fv is None and tv is None:
                    continue
                peer = l not in ("ferrofs", "mtdblock-raw")  # mtdblock-raw is a limit, not a peer
                o.append(f"| {name} | {l} | {f2(tv)} | {f2(fv)} | {ratio_s(div(fv, tv))} | "
                         f"{ratio_s(div(tref, tv)) if peer else ''} | {ratio_s(div(fref, fv)) if peer else ''} |")
        o.append("")
        # The targets that fio can restate: sequential write vs UBIFS; the 4 KiB random overwrite vs UBIFS and JFFS2.
        for bs in bss:
            job = f"seq-write-{size_name(bs)}"
            r = div(fio.get(("ferrofs", job)), fio.get(("ubifs", job)))
            add(f"fio: sequential write {size_name(bs)} vs UBIFS", f2(fio.get(("ferrofs", job))) + " MB/s", f2(fio.get(("ubifs", job))) + " MB/s", ratio_s(r), ">= 1.0x", None if r is None else r >= 1.0)
        for peer, tgt in (("ubifs", 1.0), ("jffs2", 3.0)):
            r = div(fio.get(("ferrofs", "rand-write-4k")), fio.get((peer, "rand-write-4k")))
            add(f"fio: random overwrite 4k (clean) vs {peer.upper()}", f2(fio.get(("ferrofs", "rand-write-4k"))) + " MB/s", f2(fio.get((peer, "rand-write-4k"))) + " MB/s", ratio_s(r), f">= {tgt:.1f}x", None if r is None else r >= tgt)
    else:
        o.append("No fio results (`fio/` is empty: fio was not in the guests' initramfs or did not run; see the status table).\n")

    if checks:
        met = sum(1 for c in checks if c[5] == "met")
        nm = sum(1 for c in checks if c[5] != "met" and c[5] != "n/a")
        head = [f"### Targets: {met} met, {nm} not met, {len(checks) - met - nm} without data\n",
                "| Figure | ferrofs | reference | ratio / % | target | verdict |\n|---|---|---|---|---|---|"]
        head += [f"| {a} | {b} | {c} | {d} | {e} | {f} |" for a, b, c, d, e, f in checks]
        head.append("")
        o[2:2] = head
    return o


def verdict(ok):
    return "n/a" if ok is None else ("met" if ok else "**not met**")


def div(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def ratio_s(r):
    return "n/a" if r is None else f"{r:.2f}x"


def pct_s(p):
    return "n/a" if p is None else f"{p:.0f} %"


def cheap_ftl_figures(res, st, esz):
    """Issue 13's cheap-FTL case: ferrofs-mtdblock beside F2FS and ext4 on mtdblock, the randwrite
    forms with the issue's targets (met / not met), the seed's experiments, and where the time goes."""
    runs = load_runs(os.path.join(res, "json"))
    labels = [l for l in CHEAP if any(k[1] == l for k in runs)]
    if not any(k[0] in RANDWRITE for k in runs) and "ferrofs-mtdblock" not in labels:
        return []
    ref = "ferrofs-mtdblock"
    key = "Total numbers of erases"

    def get(exp, label):
        return runs.get((exp, label), {}).get("results")

    def mb(p, ph):
        return p[ph].get("mb_s") if p and p.get(ph, {}).get("status") == "ok" else None
    o = ["## Cheap-FTL case (issue 13): ferrofs-mtdblock beside F2FS and ext4 on mtdblock\n"]
    # mtdblock's own sequential write bandwidth: the raw guest's O_DIRECT sweep on mtdblock, at
    # 1 MiB (the largest block size both profiles sweep), else its largest block size.
    raw_pts = {p["block_size"]: p for p in (get("sweep", "mtdblock-raw") or {}).get("points", []) if p.get("mode") == "raw-block"}
    raw_bs = 1 << 20 if (1 << 20) in raw_pts else max(raw_pts, default=None)
    seq = mb(raw_pts.get(raw_bs), "write") if raw_bs else None
    seq_s = f"{f2(seq)} MB/s (mtdblock-raw, O_DIRECT {size_name(raw_bs)} writes + fsync)" if seq else "n/a (no mtdblock-raw sweep)"

    # Settings, from the runs' own parameters.
    forms = {e: {l: runs.get((e, l)) for l in labels if runs.get((e, l))} for e in RANDWRITE}
    anyrun = next((r for f in forms.values() for r in f.values()), None)
    dev = next((st.get(l, {}).get("kv", {}).get("randwrite_device") for l in labels if st.get(l, {}).get("kv", {}).get("randwrite_device")), None)
    if dev and " size=" in dev:
        name, size = dev.split(" size=", 1)
        dev = f"{name}, {int(size) >> 20} MiB" if size.isdigit() else dev
    if anyrun:
        pr = anyrun["params"]
        db = next(iter(forms["randwrite-buffered"].values()))["results"].get("dirty_bytes") if forms["randwrite-buffered"] else None
        cap = pr.get("max_duration_s")
        amounts = ", ".join(f"`{e}` {size_name(next(iter(forms[e].values()))['params']['amount'])}" for e in RANDWRITE if forms[e])
        o.append(f"Settings, the same for every target: random {size_name(pr['block_size'])} overwrites (block-aligned, seeded) of one "
                 f"{size_name(pr['file_size'])} file, half of the device (`{dev or '?'}`: mtdblock over the whole 256 MiB nandsim chip, "
                 "erased and formatted for this step: on the 64/128 MiB partition F2FS has no room for a file of half the device), written "
                 "sequentially and fsynced first (untimed); the three forms overwrite it in turn, in this order, amounts "
                 f"{amounts}; every write and fsync(2) is inside the timing (MB/s = bytes overwritten / seconds). "
                 "`randwrite-sync16`: an fsync after every 16 writes; `randwrite-buffered`: buffered, "
                 + (f"vm.dirty_bytes = {size_name(db)} during the timed phase (the background threshold is then half of it)" if db else "**the kernel's own dirty limits** (no vm.dirty_bytes given)")
                 + ", one fsync at the end, timed; `randwrite-sync1`: an fsync after every write. "
                 + (f"A form stops early only at {cap:.0f} s (a safety net; `stopped by` below). " if cap else "No time limit. ")
                 + 
                 "mkfs (the same options on the partition and for the randwrite forms): "
                 + ", ".join(f"{l} `{st[l]['kv']['mkfs_cmd'].rsplit(' ', 1)[0]}`" for l in labels if st.get(l, {}).get("kv", {}).get("mkfs_cmd"))
                 + " (ferrofs: segments of one erase block, mkfs's block defaults otherwise: 4 KiB write unit, at most 2 segments open). Erases: nandsim's erase counter during the timed "
                 f"phase (mtdblock erases and rewrites a whole 128 KiB erase block for each block it writes back and at every flush). "
                 f"Sequential write bandwidth of mtdblock: {seq_s}.\n")
    checks = []

    def add(fig, val, refv, r, target, ok):
        checks.append((fig, val, refv, r, target, verdict(ok)))

    def rw(exp, l):
        return get(exp, l) or {}

    def mbs(exp, l):
        return (rw(exp, l).get("total") or {}).get("mb_s") if (rw(exp, l).get("total") or {}).get("status") == "ok" else None

    def erases(exp, l):
        return ((rw(exp, l).get("wa") or {}).get("counters_delta") or {}).get(key)

    def per_fsync(exp, l):
        n = rw(exp, l).get("fsyncs")
        return div(erases(exp, l), n)
    fm = lambda e: f2(mbs(e, ref), 3) + " MB/s"
    for e, peer, tgt in (("randwrite-sync16", "ext4", 10.0), ("randwrite-sync16", "f2fs", 2.0), ("randwrite-buffered", "ext4", 3.0), ("randwrite-sync1", "ext4", 2.0)):
        r = div(mbs(e, ref), mbs(e, peer))
        add(f"{e}: ferrofs-mtdblock vs {peer}", fm(e), f2(mbs(e, peer), 3) + " MB/s", ratio_s(r), f">= {tgt:.0f}x", None if r is None else r >= tgt)
    for e, tgt in (("randwrite-sync16", 60), ("randwrite-buffered", 75)):
        p = div(mbs(e, ref), seq)
        add(f"{e}: % of mtdblock's sequential write", fm(e), f2(seq) + " MB/s", pct_s(p * 100 if p is not None else None), f">= {tgt} %", None if p is None else p * 100 >= tgt)
    pf = per_fsync("randwrite-sync1", ref)
    add("randwrite-sync1: erase-block rewrites per fsync", f2(pf), f"{f2(erases('randwrite-sync1', ref), 0)} erases / {rw('randwrite-sync1', ref).get('fsyncs', 'n/a')} fsyncs", f2(pf), "<= 1", None if pf is None else pf <= 1.0)
    met = sum(1 for c in checks if c[5] == "met")
    nm = sum(1 for c in checks if c[5] not in ("met", "n/a"))
    o.append(f"### Targets: {met} met, {nm} not met, {len(checks) - met - nm} without data\n")
    o.append("| Figure | ferrofs-mtdblock | reference | ratio / % | target | verdict |\n|---|---|---|---|---|---|")
    o.extend(f"| {a} | {b} | {c} | {d} | {e} | {f} |" for a, b, c, d, e, f in checks)
    o.append("")

    what = {"randwrite-sync16": "an fsync after every 16 writes (a logging or database workload)",
            "randwrite-buffered": "buffered under a 4 MiB dirty limit, the final fsync timed",
            "randwrite-sync1": "an fsync after every write"}
    for e in RANDWRITE:
        if not forms[e]:
            o.append(f"### {e}\n\nNo runs (see the status table).\n")
            continue
        ls = [l for l in labels if l in forms[e]]
        o.append(f"### {e}\n\n{what[e][0].upper() + what[e][1:]}. Device rows: the timed phase only (nandsim's erase counter; "
                 "mtdblock's write requests, bytes and flushes from /proc/diskstats).\n")
        o.append("| Metric | " + " | ".join(ls) + " |\n|---|" + "---|" * len(ls))

        def row(name, fn, p=2):
            o.append(f"| {name} | " + " | ".join(f2(fn(l), p) for l in ls) + " |")

        def wa(l, k):
            return (rw(e, l).get("wa") or {}).get(k)
        row("MB/s", lambda l: mbs(e, l), 3)
        row("writes", lambda l: rw(e, l).get("writes"), 0)
        row("fsyncs", lambda l: rw(e, l).get("fsyncs"), 0)
        row("seconds", lambda l: (rw(e, l).get("total") or {}).get("seconds"), 1)
        row("fsync median ms", lambda l: ((rw(e, l).get("fsync_latency") or {}).get("median_us") or 0) / 1000 if rw(e, l).get("fsync_latency") else None, 1)
        row("fsync max ms", lambda l: ((rw(e, l).get("fsync_latency") or {}).get("max_us") or 0) / 1000 if rw(e, l).get("fsync_latency") else None, 1)
        row("NAND erases", lambda l: erases(e, l), 0)
        row("erases per fsync", lambda l: per_fsync(e, l), 2)
        row("erased MB / written MB", lambda l: div(erases(e, l) * esz if erases(e, l) is not None else None, (rw(e, l).get("total") or {}).get("bytes")), 1)
        row("MB written to mtdblock", lambda l: div(wa(l, "diskstats_device_bytes"), 1e6), 2)
        row("write requests to mtdblock", lambda l: wa(l, "diskstats_writes"), 0)
        row("KiB per write request", lambda l: div(div(wa(l, "diskstats_device_bytes"), 1024), wa(l, "diskstats_writes")), 1)
        row("flushes of mtdblock", lambda l: wa(l, "diskstats_flushes"), 0)
        row("stopped by", lambda l: None, 0)
        o[-1] = "| stopped by | " + " | ".join(rw(e, l).get("stopped_by", "n/a") for l in ls) + " |"
        rs = [f"ferrofs-mtdblock / {p} {ratio_s(div(mbs(e, ref), mbs(e, p)))}" for p in ls if p != ref]
        if seq:
            rs.append(f"ferrofs-mtdblock = {pct_s(div(mbs(e, ref), seq) * 100 if div(mbs(e, ref), seq) is not None else None)} of mtdblock's sequential write ({f2(seq)} MB/s)")
        o.append("\n" + ("; ".join(rs) + "." if rs else "") + "\n")

    # The seed's experiments on the same three: the sweep by block size (clean) and overwrites by
    # block size, clean and filled.
    sw = {l: {p["block_size"]: p for p in (get("sweep", l) or {}).get("points", []) if p.get("mode") in ("buffered", "raw-block")} for l in ["mtdblock-raw"] + labels}
    bss = sorted({b for v in sw.values() for b in v})
    if bss:
        o.append("### The seed's block-size sweep on mtdblock, MB/s (buffered + fsync; mtdblock-raw: O_DIRECT), write / cold read\n")
        o.append("| Block Size | " + " | ".join(l for l in sw) + " |\n|---|" + "---|" * len(sw))
        for b in bss:
            o.append(f"| {size_name(b)} | " + " | ".join(f"{f2(mb(sw[l].get(b), 'write'))} / {f2(mb(sw[l].get(b), 'read'))}" for l in sw) + " |")
        o.append("")
    dp = {}
    for l in labels:
        for p in (get("dirty", l) or {}).get("points", []):
            k = (round(p.get("fill", 0) * 100), p.get("block_size"))
            dp.setdefault(k, {})[l] = p["overwrite"].get("mb_s") if p.get("overwrite", {}).get("status") == "ok" else None
    if dp:
        o.append("### Overwrites by block size, clean and filled (the rig's `dirty`: random overwrites of a 4 MiB file, fsync at the end), MB/s\n")
        peers = [p for p in labels if p != ref] if ref in labels else []
        o.append("| Fill, Block Size | " + " | ".join(labels + [f"ferrofs-mtdblock / {p}" for p in peers]) + " |")
        o.append("|---|" + "---|" * (len(labels) + len(peers)))
        for (fill, b) in sorted(dp):
            v = dp[(fill, b)]
            o.append(f"| {'clean' if fill == 0 else f'{fill} % full'} {size_name(b)} | "
                     + " | ".join([f2(v.get(l)) for l in labels] + [ratio_s(div(v.get(ref), v.get(p))) for p in peers]) + " |")
        o.append("")

    # Where ferrofs-mtdblock's time goes: its own statistics around each form (the rig's counters).
    cdir = os.path.join(res, "counters")
    rowsf = []
    for e in RANDWRITE:
        b, a = kv(os.path.join(cdir, f"{ref}-{e}.before")), kv(os.path.join(cdir, f"{ref}-{e}.after"))
        if not a:
            continue

        def d(k):
            try:
                return float(a[k]) - float(b[k])
            except (KeyError, ValueError):
                return None
        rowsf.append(f"| {e} | {f2(div(d('ferrofs_user_bytes'), 1e6))} | {f2(div(d('ferrofs_programmed_bytes'), 1e6))} | {f2(d('ferrofs_erases'), 0)} | "
                     f"{f2(div(d('ferrofs_gc_bytes'), 1e6))} | {f2(d('ferrofs_checkpoints'), 0)} | {a.get('ferrofs_max_open_segments', 'n/a')} | "
                     f"{f2(d('mtdblock_flushes'), 0)} | {f2(d('nand_erases'), 0)} |")
    if rowsf:
        o.append("### Where ferrofs-mtdblock's time goes\n")
        o.append("ferrofs's debugfs statistics and mtdblock's counters around each whole form (the rig's counters: "
                 "the first form's row includes the untimed layout of the file, which that run writes before its timed phase). "
                 "Every mtdblock flush writes its cached erase block back (an erase and 64 page programs): the flushes and NAND erases per "
                 "fsync are the cost a cheap FTL charges for durability.\n")
        o.append("| Form | user MB | programmed MB | segment erases (discards) | GC moved MB | checkpoints | max open segments | mtdblock flushes | NAND erases |\n|---|---|---|---|---|---|---|---|---|")
        o.extend(rowsf)
        o.append("")
    return o


def df_total(path):
    """The first `df -k` line of /mnt in a target's nand.txt (after mkfs and mount): (total, used, available) in KiB."""
    try:
        for line in open(path):
            w = line.split()
            if len(w) >= 6 and w[-1] == "/mnt" and w[1].isdigit():
                return int(w[1]), int(w[2]), int(w[3])
    except OSError:
        pass
    return None


def capacity_and_scale(res, runs):
    """Usable capacity of each target (df after mkfs) and the mount-scale experiment (issue 12)."""
    o = []
    caps = {}
    for t in ORDER:
        c = df_total(os.path.join(res, "json", t, "nand.txt"))
        if c:
            caps[t] = c
    if caps:
        o.append("## Usable capacity\n")
        o.append("`df -k` of each filesystem right after mkfs and mount on the rig's partition (json/TARGET/nand.txt); "
                 "ratios are ferrofs's over the target's (issue 12: ferrofs's total at least UBIFS's).\n")
        o.append("| target | total KiB | used KiB | available KiB | ferrofs total / this | ferrofs available / this |\n|---|---|---|---|---|---|")
        f = caps.get("ferrofs")
        for t, (tot, used, av) in caps.items():
            rt = f"{f[0] / tot:.3f}x" if f and tot else "n/a"
            ra = f"{f[2] / av:.3f}x" if f and av else "n/a"
            o.append(f"| {t} | {tot} | {used} | {av} | {rt} | {ra} |")
        o.append("")
    rows = []
    for t in ORDER:
        a, b = runs.get(("mount", f"{t}-256m")), runs.get(("mount", f"{t}-1g"))
        if not a and not b:
            continue

        def fig(d, k):
            return None if not d else d.get("results", {}).get(k)

        def held(d):
            if not d:
                return None
            h = [r.get("held_kb") for r in d.get("results", {}).get("runs", []) if r.get("held_kb") is not None]
            return sorted(h)[len(h) // 2] if h else None
        rows.append((t, fig(a, "median_s"), fig(b, "median_s"), fig(a, "net_median_s"), fig(b, "net_median_s"), held(a), held(b)))
    if rows:
        o.append("## Mount time at scale\n")
        o.append("The same data (mount-scale in tests/vm/bench-target: files of 1 MiB and 4 KiB) on a 256 MiB and a 1 GiB nandsim, "
                 "clean mounts (median; `net` = minus the shell-and-mount(8) floor), memory the mounted filesystem holds; "
                 "issue 12: ferrofs's 1 GiB / 256 MiB ratio at most 1.2, beside JFFS2's and UBIFS's.\n")
        o.append("| target | 256 MiB s | 1 GiB s | ratio | net 256 MiB s | net 1 GiB s | net ratio | held 256 MiB KiB | held 1 GiB KiB |\n|---|---|---|---|---|---|---|---|---|")
        for t, a, b, na, nb, ha, hb in rows:
            r = f"{b / a:.2f}" if a and b else "n/a"
            nr = f"{nb / na:.2f}" if na and nb else "n/a"
            o.append(f"| {t} | {f2(a, 3)} | {f2(b, 3)} | {r} | {f2(na, 3)} | {f2(nb, 3)} | {nr} | {ha if ha is not None else 'n/a'} | {hb if hb is not None else 'n/a'} |")
        o.append("")
    return o


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
             f"guest {cfg.get('guest_memory_mib', '?')} MiB / {cfg.get('cpus', '?')} CPU(s) (QEMU -smp 2; the count is what the guest kernel brought up), host load at start {cfg.get('host_load_at_start', '?')}. "
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
        for key in ("umount", "fsck", "randwrite", "randwrite_umount", "randwrite_fsck"):
            if key in k:
                notes.append(f"{key.replace('_', ' ')} {k[key]}")
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
        limit = {"jffs2": "nand-raw", "ubifs": "nand-raw", "ferrofs": "nand-raw", "f2fs": "mtdblock-raw", "ext4": "mtdblock-raw", "ferrofs-mtdblock": "mtdblock-raw"}
        order = ["nand-raw", "mtdblock-raw", "jffs2", "ubifs", "f2fs", "ext4", "ferrofs", "ferrofs-mtdblock"]
        labs = [l for l in order if l in sweeps] + [l for l in sweeps if l not in order]
        o.append("## Summary: sequential write / read MB/s (buffered + fsync; raw devices: their own mode)\n")
        o.append("The percentage is of the physical limit below the filesystem: `nand-raw` for JFFS2, UBIFS and ferrofs, "
                 "`mtdblock-raw` (O_DIRECT on mtdblock) for F2FS, ext4 and ferrofs-mtdblock (the cheap-FTL case).\n")
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

    o.extend(write_path_figures(res))
    o.extend(cheap_ftl_figures(res, st, float(cfg.get("mtd_erasesize", "131072") or 131072)))
    o.extend(capacity_and_scale(res, load_runs(jdir)))

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
                rows_f.append((ORDER.index(lab) if lab in ORDER else 99, EXPS.index(exp) if exp in EXPS else 99, f"| {lab} | {exp} | {f2(u / 1e6 if u is not None else None)} | {f2(p / 1e6 if p is not None else None)} | {f2(wa)} | "
                               f"{f2(d('ferrofs_erases'), 0)} | {f2((d('ferrofs_gc_bytes') or 0) / 1e6)} | {f2(d('ferrofs_checkpoints'), 0)} |"))
            if "nand_erases" in a:
                e = d("nand_erases")
                u = d("ferrofs_user_bytes") if "ferrofs_user_bytes" in a else None
                rows_e.append((ORDER.index(lab) if lab in ORDER else 99, lab, EXPS.index(exp) if exp in EXPS else 99, exp, e, u, a.get("nand_max_erases")))
            if "mtdblock_sectors_written" in a and lab in ("f2fs", "ext4", "mtdblock-raw", "ferrofs-mtdblock"):
                w, n, fl = d("mtdblock_sectors_written"), d("mtdblock_writes"), d("mtdblock_flushes")
                rows_b.append((lab, EXPS.index(exp) if exp in EXPS else 99, f"| {lab} | {exp} | {f2(w * 512 / 1e6 if w is not None else None)} | "
                               f"{f2(n, 0)} | {f2(w * 512 / 1024 / n if w is not None and n else None, 1)} | {f2(fl, 0)} |"))
    o.append("## Write amplification, rig counters\n")
    o.append("Counters read by the guest after a `sync` before and after each whole experiment (fills, warm-ups and clean-up included, "
             "so these are not the per-phase figures of the table above).\n")
    if rows_f:
        o.append("ferrofs, from its debugfs statistics (`/sys/kernel/debug/ferrofs/<device>/`): WA = bytes programmed to the medium / file bytes written by users "
                 "(on ferrofs-mtdblock: bytes written to mtdblock; erases there are segment discards, which mtdblock does not have).\n")
        o.append("| Target | Experiment | User MB | Programmed MB | WA | Erases | GC moved MB | Checkpoints |\n|---|---|---|---|---|---|---|---|")
        o.extend(r for _, _, r in sorted(rows_f))
        o.append("")
    else:
        o.append("ferrofs: no counters (the target did not run or its debugfs statistics were missing).\n")
    if rows_b:
        o.append("F2FS, ext4 and ferrofs-mtdblock on mtdblock: bytes, write requests and flushes the filesystem sent to mtdblock (`/proc/diskstats`), per experiment. "
                 "Per-phase WA against the benchmark's bytes is in the tool's write-amplification table above. "
                 "What mtdblock then does to the NAND (a whole erase block erased and rewritten per flush) is in the erase table below.\n")
        o.append("| Target | Experiment | Written to mtdblock MB | Write requests | KiB per request | Flushes |\n|---|---|---|---|---|---|")
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
            if r[6] is not None and r[3] not in RANDWRITE:
                lastmax[r[1]] = r[6]
        o.append("| max erases of one block at the end (before the randwrite forms) | " + " | ".join(lastmax.get(l, "n/a") for _, l in labs_e) + " |")
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
