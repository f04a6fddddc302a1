#!/usr/bin/env python3
"""bench/gpu_goals.py -- the goals of "On a GPU, as fast as hand-written CUDA", met or missed, from
what bench/gpu_check.sh left in its results folder: one markdown table, one line per goal.

    python3 bench/gpu_goals.py RESULTS_DIR

Reads (each optional; a goal whose input is missing reads "not measured"):
  host_pages.md         (or gpu_host_pages_-.md) the collapsed alias within 1.2x anonymous huge pages (total, protect, read)
  vecadd.csv            lazy and rolling at their best block <= 1.05x explicit
  stencil3d.csv         rolling (its best block per volume) <= 1.1x explicit at every volume
  transfer.csv          lazy's uploads at the largest size >= 0.9x the explicit pinned copy
  apps/apps.csv         every application under lazy and rolling <= 1.05x explicit (medians)
and, where the run has CUDA managed memory's columns (um, um-prefetch: cuda only), adsm's best
no slower than um-prefetch on every program, and faster than fault-driven um on vecadd.
Ratios are of medians measured in one run, as the benchmarks print them."""
import csv
import os
import statistics
import sys
from collections import defaultdict


def rows(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return list(csv.DictReader(f))


def line(goals, goal, value, ok):
    goals.append((goal, value, "not measured" if ok is None else ("met" if ok else "MISSED")))


def host_pages_goals(res, goals):
    path = os.path.join(res, "host_pages.md")
    if not os.path.exists(path):  # as bench/gpu_check.sh names it
        path = os.path.join(res, "gpu_host_pages_-.md")
    table = {}
    if os.path.exists(path):
        for text in open(path):
            cells = [c.strip() for c in text.strip().strip("|").split("|")]
            if len(cells) >= 10 and cells[0].startswith(("anonymous", "shmem")):
                table[cells[0]] = cells
    row = table.get("shmem, collapsed")
    for name, col in (("make + first writes", 5), ("protect a 2 MiB block", 7), ("read pass", 9)):
        goal = f"collapsed alias: {name} <= 1.2x anonymous huge pages"
        if not row:
            line(goals, goal, "-", None)
            continue
        ratio = float(row[col])
        line(goals, goal, f"{ratio:.2f}x", ratio <= 1.2)


def vecadd_goals(res, goals):
    data = rows(os.path.join(res, "vecadd.csv"))
    for v in ("lazy", "rolling"):
        goal = f"vecadd: {v} at its best block <= 1.05x explicit"
        mine = [r for r in data or [] if r["variant"] == v]
        if not mine:
            line(goals, goal, "-", None)
            continue
        best = min(mine, key=lambda r: float(r["ratio_to_explicit"]))
        ratio = float(best["ratio_to_explicit"])
        line(goals, goal, f"{ratio:.2f}x ({int(best['block_size']) >> 10} KiB)", ratio <= 1.05)


def vecadd_unified_goals(res, goals):
    """adsm (lazy or rolling at its best block) against CUDA managed memory, same program, same run."""
    data = rows(os.path.join(res, "vecadd.csv")) or []
    ours = [float(r["wall_ms"]) for r in data if r["variant"] in ("lazy", "rolling")]
    for v, rule in (("um-prefetch", "<= 1.0x"), ("um", "< 1.0x")):
        goal = f"vecadd: adsm's best {rule} {v} (managed memory)"
        theirs = [float(r["wall_ms"]) for r in data if r["variant"] == v]
        if not ours or not theirs:
            line(goals, goal, "-", None)
            continue
        ratio = min(ours) / theirs[0]
        line(goals, goal, f"{ratio:.2f}x", ratio <= 1.0 if v == "um-prefetch" else ratio < 1.0)


def stencil_goals(res, goals):
    data = rows(os.path.join(res, "stencil3d.csv"))
    best = {}
    for r in data or []:
        if r["variant"].startswith("rolling"):
            vol, ratio = int(r["volume"]), float(r["ratio_to_explicit"])
            best[vol] = min(best.get(vol, ratio), ratio)
    if not best:
        line(goals, "stencil3d: rolling <= 1.1x explicit at every volume", "-", None)
    for vol in sorted(best):
        line(goals, f"stencil3d {vol}^3: rolling (best block) <= 1.1x explicit", f"{best[vol]:.2f}x",
             best[vol] <= 1.1)
    for r in data or []:
        if r["variant"] == "um-prefetch" and int(r["volume"]) in best:
            vol, theirs = int(r["volume"]), float(r["ratio_to_explicit"])
            line(goals, f"stencil3d {vol}^3: rolling (best block) <= 1.0x um-prefetch", f"{best[vol] / theirs:.2f}x",
                 best[vol] <= theirs)


def transfer_goals(res, goals):
    data = rows(os.path.join(res, "transfer.csv"))
    lazy = [r for r in data or [] if r["variant"] == "lazy"]
    goal = "uploads from objects (lazy, largest size) >= 0.9x the explicit pinned copy"
    if not lazy:
        line(goals, goal, "-", None)
        return
    largest = max(int(r["size_bytes"]) for r in lazy)
    worst = min(float(r["up_ratio"]) for r in lazy if int(r["size_bytes"]) == largest)
    line(goals, goal, f"{worst:.2f}x (worst row, {largest >> 20} MiB)", worst >= 0.9)


def apps_goals(res, goals):
    data = rows(os.path.join(res, "apps", "apps.csv"))
    if not data:
        line(goals, "applications: lazy and rolling <= 1.05x explicit", "-", None)
        return
    wall = defaultdict(list)
    for r in data:
        variant = "explicit" if r["version"] == "explicit" else r["protocol"]
        wall[(r["app"], variant)].append(float(r["wall_ms"]))
    med = {k: statistics.median(v) for k, v in wall.items()}
    for app in sorted({a for a, _ in med}):
        if (app, "explicit") not in med:
            continue
        for v in ("lazy", "rolling"):
            if (app, v) in med:
                ratio = med[(app, v)] / med[(app, "explicit")]
                line(goals, f"{app}: {v} <= 1.05x explicit", f"{ratio:.2f}x", ratio <= 1.05)
        if (app, "um-prefetch") in med and (app, "lazy") in med and (app, "rolling") in med:
            ratio = min(med[(app, "lazy")], med[(app, "rolling")]) / med[(app, "um-prefetch")]
            line(goals, f"{app}: adsm's best <= 1.0x um-prefetch", f"{ratio:.2f}x", ratio <= 1.0)


def main():
    res = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    goals = []
    for part in (host_pages_goals, vecadd_goals, vecadd_unified_goals, stencil_goals, transfer_goals, apps_goals):
        part(res, goals)
    print("| goal | measured | |")
    print("| --- | ---: | --- |")
    for goal, value, verdict in goals:
        print(f"| {goal} | {value} | {verdict} |")
    missed = sum(1 for g in goals if g[2] == "MISSED")
    print(f"\n{len(goals) - missed} of {len(goals)} goals met or not measured; {missed} missed.")


if __name__ == "__main__":
    main()
