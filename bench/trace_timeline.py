#!/usr/bin/env python3
"""bench/trace_timeline.py -- draws an ADSM_TRACE file as a timeline PNG (with gnuplot).

    ADSM_TRACE=/tmp/vecadd.json ./vecadd
    bench/trace_timeline.py /tmp/vecadd.json bench/results/vecadd_trace.png [--title TEXT]

One row per track (the program's threads, the copy engine, the device's kernels), one box per
event, coloured by kind; instants (evictions) are ticks. The same file opens in Perfetto
(ui.perfetto.dev) or chrome://tracing for a closer look."""
import json
import os
import subprocess
import sys
import tempfile

COLOURS = {"fault (write)": "#d62728", "fault (read)": "#ff9896", "fetch": "#9467bd", "copy to device": "#1f77b4",
           "copy from device": "#17becf", "kernel": "#2ca02c", "I/O": "#7f7f7f", "evict": "#000000"}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, png = sys.argv[1], sys.argv[2]
    title = sys.argv[sys.argv.index("--title") + 1] if "--title" in sys.argv else os.path.basename(src)
    events = json.load(open(src))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    spans = [e for e in events if e["ph"] in ("X", "i")]
    tids = sorted({e["tid"] for e in spans}, key=lambda t: (t == 999999, "engine" in names.get(t, ""), t))
    row = {t: i for i, t in enumerate(tids)}
    end = max((e["ts"] + e.get("dur", 0)) / 1000.0 for e in spans) if spans else 1.0
    least = end / 600  # half-width of the thinnest box drawn: a fault of a few microseconds stays visible
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for kind in COLOURS:
            path = os.path.join(tmp, f"kind{len(files)}_{list(COLOURS).index(kind)}.dat")
            with open(path, "w") as f:
                for e in spans:
                    if e["name"] != kind:
                        continue
                    t0, dur = e["ts"] / 1000.0, e.get("dur", 0) / 1000.0
                    half_height = 0.45 if e["ph"] == "i" else 0.3
                    f.write(f"{t0 + dur / 2} {row[e['tid']]} {max(dur / 2, least)} {half_height}\n")
            if os.path.getsize(path):
                files[kind] = path
        ytics = ", ".join(f'"{names.get(t, "thread " + str(t))}" {row[t]}' for t in tids)
        plots = ", ".join(f"'{p}' using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '{COLOURS[k]}' title '{k}'"
                          for k, p in files.items())
        script = f"""
set terminal pngcairo size 1200,{180 + 60 * len(tids)} noenhanced
set output '{png}'
set title '{title}'
set xlabel 'ms'
set ytics ({ytics})
set yrange [-0.6:{len(tids) - 0.4}]
set key outside right
set grid xtics
plot {plots}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"wrote {png} ({len(spans)} events, {len(tids)} tracks)")


if __name__ == "__main__":
    main()
