#!/usr/bin/env python3
"""bench/trace_summary.py -- where a traced run's time goes, per kind of span.

    trace_summary.py TRACE.json [STEPS] [--last N]

Reads an ADSM_TRACE file (Chrome trace-event JSON) and prints a markdown table: for each kind of
span (call, sync, faults, fetches, copies, kernels, I/O, alloc, free and their parts), how many
there were, their total and mean time, the time per step (with STEPS: a program's time steps,
stencil3d's --steps), and the share of the run: from the first object made to the end of the
last call, sync or I/O call. Spans nest on a thread's track (a fetch inside a fault or a sync)
and copies run on the copy engines beside the CPU, so the shares do not add up to 100; "call",
"sync" and "I/O" are the program's own calls into adsm, the rest what happened inside them, in
its faults or on the device. With --last N, the run's last N spans follow in the order they began
(when, how long, on which track, how many bytes): one repetition of a short loop, span by span."""
import json
import sys
from collections import defaultdict


def summary(trace):
    events = [e for e in trace if e.get("ph") == "X"]
    if not events:
        return None, {}
    begin = min((e["ts"] for e in events if e["name"] == "alloc"), default=min(e["ts"] for e in events))
    ends = [e["ts"] + e["dur"] for e in events if e["name"] in ("call", "sync", "I/O")]
    end = max(ends) if ends else max(e["ts"] + e["dur"] for e in events)
    kinds = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e["ts"] + e["dur"] < begin or e["ts"] > end:
            continue
        k = kinds[e["name"]]
        k[0] += 1
        k[1] += e["dur"] / 1000.0
    return (end - begin) / 1000.0, kinds


def last_spans(trace, n):
    """The run's last n spans in the order they began, as a markdown table."""
    tracks = {e["tid"]: e["args"]["name"] for e in trace if e.get("ph") == "M" and "name" in e.get("args", {})}
    spans = sorted((e for e in trace if e.get("ph") == "X"), key=lambda e: e["ts"])[-n:]
    if not spans:
        return
    t0 = spans[0]["ts"]
    print(f"\nThe last {len(spans)} spans, in the order they began:\n")
    print("| at us | us | track | span | bytes |")
    print("| ---: | ---: | --- | --- | ---: |")
    for e in spans:
        track = tracks.get(e["tid"], str(e["tid"]))
        print(f"| {e['ts'] - t0:.1f} | {e['dur']:.1f} | {track} | {e['name']} | {e.get('args', {}).get('bytes', '')} |")


def main():
    args = sys.argv[1:]
    last = 0
    if "--last" in args:
        k = args.index("--last")
        last = int(args[k + 1])
        del args[k:k + 2]
    if not args:
        sys.exit(__doc__)
    steps = int(args[1]) if len(args) > 1 else 0
    trace = json.load(open(args[0]))["traceEvents"]
    run_ms, kinds = summary(trace)
    if run_ms is None:
        sys.exit(f"{args[0]}: no spans")
    print(f"run: {run_ms:.2f} ms from the first object made to the end of the last call, sync or I/O call"
          + (f", {steps} steps: {run_ms * 1000 / steps:.0f} us a step" if steps else "") + "\n")
    print("| span | count | total ms | mean us | " + ("us per step | " if steps else "") + "% of the run |")
    print("| --- | ---: | ---: | ---: | " + ("---: | " if steps else "") + "---: |")
    for name, (n, ms) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        per_step = f" {ms * 1000 / steps:.1f} |" if steps else ""
        print(f"| {name} | {n} | {ms:.3f} | {ms * 1000 / n:.1f} |{per_step} {ms / run_ms * 100:.1f} |")
    if last:
        last_spans(trace, last)


if __name__ == "__main__":
    main()
