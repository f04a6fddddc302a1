#!/usr/bin/env python3
"""bench/apps/report.py -- the application study's tables from the runs bench/apps/run.sh made.

    report.py APPS_CSV TPACF_SWEEP_CSV OUT_DIR

Prints markdown: Figure 7 (time of batch, lazy and rolling as a multiple of explicit, medians),
Figure 8 (bytes moved normalised to batch, explicit's beside them), Figure 10 (where rolling's
time goes), Figure 12 (tpacf over block and rolling sizes), the porting claim (non-blank lines of
explicit.c and adsm.c) and the goals. Writes fig7.dat and fig8.dat for gnuplot into OUT_DIR."""
import csv
import os
import statistics
import sys
from collections import defaultdict

VARIANTS = ["explicit", "batch", "lazy", "rolling"]
# CUDA managed memory: measured on cuda only; hmm (plain host memory the GPU reaches) only where the
# GPU reports pageable memory access
UNIFIED = ["um", "um-prefetch", "hmm"]


def load(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f)]


def variant(row):
    return "explicit" if row["version"] == "explicit" else row["protocol"]


def medians(rows, key):
    groups = defaultdict(list)
    for r in rows:
        groups[(r["app"], variant(r))].append(float(r[key]))
    return {k: statistics.median(v) for k, v in groups.items()}


def window_of(row):
    """The run's timed part, (start, stop) in CLOCK_MONOTONIC ns, from its CSV row (None: not given)."""
    try:
        return float(row["start_ns"]), float(row["stop_ns"])
    except (KeyError, TypeError, ValueError):
        return None


def app_trace(out, app):
    """The application's ADSM_TRACE file in OUT_DIR/traces (named without its dash, or with it)."""
    path = os.path.join(out, "traces", app.replace("-", "") + ".json")
    return path if os.path.exists(path) else os.path.join(out, "traces", app + ".json")


def trace_spans(path, window=None):
    """(name, args, ms) of each span in an ADSM_TRACE file; with a window, only the part of each span
    that lies inside it (the program's timed part: what it frees or checks after it does not count).
    None where the file is missing."""
    if not os.path.exists(path):
        return None
    import json
    trace = json.load(open(path))
    origin = float(trace.get("otherData", {}).get("origin_ns", 0))
    spans = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        begin = origin + e["ts"] * 1000.0
        end = begin + e["dur"] * 1000.0
        if window is not None and origin:
            begin, end = max(begin, window[0]), min(end, window[1])
        spans.append((e["name"], e.get("args", {}), max(end - begin, 0.0) / 1e6))
    return spans


def trace_busy(path, window=None):
    """Milliseconds per kind of span in an ADSM_TRACE file (fetches are inside faults or calls)."""
    spans = trace_spans(path, window)
    if spans is None:
        return None
    kinds = {"kernel": ["kernel"], "copy": ["copy to device", "copy from device"],
             "fault": ["fault (read)", "fault (write)"], "io": ["I/O"], "objects": ["alloc", "free"]}
    total = {k: 0.0 for k in kinds}
    for name, _, ms in spans:
        for k, names in kinds.items():
            if name in names:
                total[k] += ms
    return total


def trace_objects(path, window=None):
    """Milliseconds spent making and freeing objects in an ADSM_TRACE file, and in each part of it;
    objects: the alloc spans that lie at least partly inside the window."""
    spans = trace_spans(path, window)
    if spans is None:
        return None
    parts = {"alloc": 0.0, "host pages: made": 0.0, "host pages: page-lock": 0.0, "host pages: view mapped": 0.0,
             "alloc: device memory": 0.0, "free": 0.0, "free: page-unlock": 0.0, "free: device memory": 0.0,
             "objects": 0}
    for name, args, ms in spans:
        if name == "device memory":  # given (bytes) while making an object, taken back (0) while freeing
            name = "alloc: device memory" if args.get("bytes", 0) else "free: device memory"
        if name in parts:
            parts[name] += ms
        if name == "alloc" and (window is None or ms > 0):
            parts["objects"] += 1
    return parts


def nonblank_lines(path):
    with open(path) as f:
        return sum(1 for line in f if line.strip())


def main():
    apps_csv, sweep_csv, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = load(apps_csv)
    bad = [r for r in rows if r["ok"] != "1"]
    if bad:
        print(f"WRONG OUTPUT in {len(bad)} runs: " + ", ".join(sorted({r['app'] + '/' + variant(r) for r in bad})))
    apps = sorted({r["app"] for r in rows})
    wall = medians(rows, "wall_ms")
    moved = defaultdict(list)
    for r in rows:
        moved[(r["app"], variant(r))].append(int(r["h2d_bytes"]) + int(r["d2h_bytes"]))
    moved = {k: statistics.median(v) for k, v in moved.items()}
    goals = []

    # unified memory (cuda only): its columns where the run has them
    unified = [v for v in UNIFIED if any(variant(r) == v for r in rows)]
    print("### Figure 7: time as a multiple of explicit (median of each)\n")
    print("| application | explicit ms | batch | lazy | rolling |" + "".join(f" {v} |" for v in unified))
    print("| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(unified))
    with open(os.path.join(out, "fig7.dat"), "w") as dat:
        dat.write("app explicit batch lazy rolling\n")
        for a in apps:
            e = wall[(a, "explicit")]
            ratios = [wall.get((a, v), float("nan")) / e for v in VARIANTS[1:]]
            um = [wall.get((a, v), float("nan")) / e for v in unified]
            print(f"| {a} | {e:.1f} | " + " | ".join(f"{x:.2f}" for x in ratios + um) + " |")
            dat.write(f"{a} 1 " + " ".join(f"{x:.3f}" for x in ratios) + "\n")
            for v, x in zip(VARIANTS[2:], ratios[1:]):
                if x > 1.05:
                    goals.append(f"{a}: {v} takes {x:.2f}x explicit (goal 1.05x)")
            best = min(ratios[1:])
            if "um-prefetch" in unified and best > wall.get((a, "um-prefetch"), float("inf")) / e:
                goals.append(f"{a}: adsm's best (lazy or rolling, {best:.2f}x) is slower than um-prefetch "
                             f"({wall[(a, 'um-prefetch')] / e:.2f}x)")

    print("\n### Figure 8: bytes moved (both ways), normalised to batch\n")
    print("| application | batch MiB | explicit | lazy | rolling |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with open(os.path.join(out, "fig8.dat"), "w") as dat:
        dat.write("app batch explicit lazy rolling\n")
        for a in apps:
            b = moved[(a, "batch")] or 1
            vals = [moved[(a, v)] / b for v in ["explicit", "lazy", "rolling"]]
            print(f"| {a} | {moved[(a, 'batch')] / 2**20:.1f} | " + " | ".join(f"{x:.2f}" for x in vals) + " |")
            dat.write(f"{a} 1 " + " ".join(f"{x:.3f}" for x in vals) + "\n")
            for v in ["lazy", "rolling"]:
                if moved[(a, v)] > moved[(a, "explicit")]:
                    goals.append(f"{a}: {v} moves {moved[(a, v)] / 2**20:.2f} MiB, explicit "
                                 f"{moved[(a, 'explicit')] / 2**20:.2f} MiB")

    traced = load(sys.argv[4]) if len(sys.argv) > 4 else []
    print("\n### Figure 10: where rolling's time goes (percent of the run's wall time, from its ADSM_TRACE)\n")
    print("| application | CPU | kernels | copies | fault handling | I/O | alloc + free | sum | wall ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    fig10 = open(os.path.join(out, "fig10.dat"), "w")
    fig10.write("app CPU kernels copies faults I/O objects\n")
    for r in traced:
        a, w = r["app"], float(r["wall_ms"])
        busy = trace_busy(app_trace(out, a), window_of(r))
        if busy is None:
            continue
        parts = [float(r["cpu_ms"]), busy["kernel"], busy["copy"], busy["fault"], busy["io"], busy["objects"]]
        print(f"| {a} | " + " | ".join(f"{p / w * 100:.1f}" for p in parts) +
              f" | {sum(parts) / w * 100:.1f} | {w:.1f} |")
        fig10.write(f"{a} " + " ".join(f"{p / w * 100:.2f}" for p in parts) + "\n")
        if busy["fault"] / w * 100 >= 2.0:
            goals.append(f"{a}: fault handling is {busy['fault'] / w * 100:.1f}% of rolling's time (goal < 2%)")
    fig10.close()
    print("\n(CPU is the program's own work between calls; kernels, copies, fault handling, I/O and making and "
          "freeing objects are the trace's spans within the timed part (not the frees and checks after it), summed "
          "per kind; copies run on the copy engine and overlap the rest, so the sum may pass 100; well under 100 "
          "leaves time the trace does not see.)")

    print("\n### Making and freeing objects (rolling's trace, ms in all within the timed part; host pages made, "
          "page-locked and mapped inside alloc, or on cuda at each object's first use, inside the fault or call "
          "that first used it, which Figure 10 counts there; device memory inside alloc and free)\n")
    print("| application | objects | alloc | host pages made | page-lock | view mapped | device memory | free | "
          "page-unlock | device memory |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in traced:
        a = r["app"]
        o = trace_objects(app_trace(out, a), window_of(r))
        if o is None:
            continue
        cols = ["alloc", "host pages: made", "host pages: page-lock", "host pages: view mapped", "alloc: device memory", "free",
                "free: page-unlock", "free: device memory"]
        print(f"| {a} | {o['objects']} | " + " | ".join(f"{o[c]:.2f}" for c in cols) + " |")

    sweep = [r for r in load(sweep_csv) if r["version"] == "adsm"]
    if sweep:
        ex = statistics.median(float(r["wall_ms"]) for r in load(sweep_csv) if r["version"] == "explicit")
        times = defaultdict(list)
        for r in sweep:
            times[(int(r["block_size"]), int(r["rolling_size"]))].append(float(r["wall_ms"]))
        blocks = sorted({k[0] for k in times})
        sizes = sorted({k[1] for k in times})
        print("\n### Figure 12: tpacf under rolling, time as a multiple of explicit, by block size and rolling size\n")
        print("| block | " + " | ".join(f"rolling {s}" for s in sizes) + " |")
        print("| --- | " + " | ".join("---:" for _ in sizes) + " |")
        with open(os.path.join(out, "fig12.dat"), "w") as dat:
            dat.write("block " + " ".join(f"rolling_{s}" for s in sizes) + "\n")
            for b in blocks:
                label = f"{b >> 20}M" if b >= 2**20 else f"{b >> 10}K"
                ratios = [statistics.median(times[(b, s)]) / ex for s in sizes]
                print(f"| {label} | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")
                dat.write(f"{label} " + " ".join(f"{x:.3f}" for x in ratios) + "\n")

    print("\n### Porting: non-blank lines (kernels.h shared)\n")
    print("| application | explicit.c | adsm.c | removed |")
    print("| --- | ---: | ---: | ---: |")
    for a in apps:
        src = f"bench/apps/{a.replace('-', '')}"  # the directory: "mri-q" lives in bench/apps/mriq
        e = nonblank_lines(f"{src}/explicit.c")
        d = nonblank_lines(f"{src}/adsm.c")
        print(f"| {a} | {e} | {d} | {e - d} |")
        if d >= e:
            goals.append(f"{a}: adsm.c is not shorter than explicit.c")

    print("\n### Goals\n")
    print("\n".join(f"- missed: {g}" for g in goals) if goals else "- all met")


if __name__ == "__main__":
    main()
