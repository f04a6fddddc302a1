#!/usr/bin/env bash
# Runs the GMAC paper's two block-size experiments on this machine's default backend (emu when
# there is no GPU): bench/vecadd (Figure 11) and bench/stencil3d (Figure 9), then bench/transfer
# (upload/download bandwidth through adsm against explicit copies; no plot), bench/objects (what
# making and freeing an object costs, against the explicit program's host + device buffers),
# bench/patterns (CPU access patterns between calls: lazy, adaptive rolling and explicit, time
# and bytes; no plot), bench/fault_path (one write fault against a bare handler, per object size),
# bench/threads (faults from several threads; one thread's faults while another fetches; again
# with ADSM_FAULT_ENGINE=userfaultfd) and
# bench/tiles/run.sh (tiled Cholesky and matmul on 1, 2 and 4 emulated devices). Prints the tables,
# writes CSV files and draws PNG plots into bench/results/ (or $ADSM_BENCH_OUT).
#
#   bench/sweep.sh            quick mode: a few minutes on 2 cores
#   bench/sweep.sh --full     the paper's sizes, more runs
#   bench/sweep.sh --apps     the application study instead (bench/apps/run.sh; more options there)
#
# Builds with Bazel (-c opt) when it is there, else with cc. Plots need gnuplot (.ci/setup).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=${1:---quick}
[[ $mode == --apps ]] && exec bench/apps/run.sh "${@:2}"
case "$mode" in --quick|--full) ;; *) echo "usage: $0 [--quick|--full|--apps [...]]" >&2; exit 2 ;; esac
out=${ADSM_BENCH_OUT:-bench/results}
mkdir -p "$out"

echo "== building the benchmarks" >&2
if command -v bazel >/dev/null; then
    bazel build -c opt //:bench_vecadd //:bench_stencil3d //:bench_transfer //:bench_patterns //:bench_fault_path \
        //:bench_threads //:bench_objects >&2
    bin=$(bazel info -c opt bazel-bin 2>/dev/null)
else
    bin=$out/bin
    mkdir -p "$bin"
    for b in vecadd stencil3d transfer patterns fault_path threads objects; do
        cc -std=c11 -O2 -I. "bench/$b/$b.c" -pthread -ldl -o "$bin/bench_$b"
    done
fi

echo "== vecadd block-size sweep ($mode)" >&2
"$bin/bench_vecadd" "$mode" --csv "$out/vecadd.csv" | tee "$out/vecadd.md"
echo "== stencil3d volume x block-size sweep ($mode)" >&2
"$bin/bench_stencil3d" "$mode" --csv "$out/stencil3d.csv" | tee "$out/stencil3d.md"
echo "== transfer bandwidth: adsm uploads/downloads against explicit copies ($mode)" >&2
"$bin/bench_transfer" "$mode" --csv "$out/transfer.csv" | tee "$out/transfer.md"
echo "== objects: making and freeing shared objects against host + device buffers ($mode)" >&2
"$bin/bench_objects" "$mode" | tee "$out/objects.md"
echo "== access patterns: lazy, adaptive rolling and explicit copies, time and bytes ($mode)" >&2
"$bin/bench_patterns" "$mode" --csv "$out/patterns.csv" | tee "$out/patterns.md"
echo "== fault path: adsm's write fault against a bare handler ($mode)" >&2
"$bin/bench_fault_path" "$mode" | tee "$out/fault_path.md"
echo "== threads: fault throughput and latency next to a large fetch ($mode)" >&2
"$bin/bench_threads" "$mode" | tee "$out/threads.md"
echo "== threads again with the userfaultfd fault engine (its cost across CPUs; emu only)" >&2
if ADSM_FAULT_ENGINE=userfaultfd "$bin/bench_threads" "$mode" > "$out/threads_userfaultfd.md" 2>&1; then
    cat "$out/threads_userfaultfd.md"
else
    echo "(not run: $(tail -n 1 "$out/threads_userfaultfd.md"))"
fi
if command -v bazel >/dev/null; then
    echo "== tiles: tiled Cholesky and matmul on 1, 2 and 4 emulated devices" >&2
    bench/tiles/run.sh --runs "$([[ $mode == --full ]] && echo 5 || echo 3)" | tee "$out/tiles.md"
fi

if ! command -v gnuplot >/dev/null; then
    echo "gnuplot not found (run .ci/setup): CSV files are in $out, no plots drawn" >&2
    exit 0
fi
echo "== plots" >&2
# Figure 11 style: time of each protocol against the block size, the explicit copy as a line.
gnuplot <<GP
set terminal pngcairo size 900,560 noenhanced
set output '$out/vecadd.png'
set datafile separator ','
set title 'vecadd, 8M floats: time against block size ($(uname -n), $(nproc) CPUs)'
set logscale x 2
set logscale y
set xlabel 'block size'
set format x '%.0b%BB'
set ylabel 'wall time (ms, median)'
set key top left
set grid
explicit = system("awk -F, '\$1==\"explicit\" {print \$3; exit}' $out/vecadd.csv")
plot for [v in "batch lazy rolling"] '< grep "^'.v.',"  $out/vecadd.csv' using 2:3 with linespoints title v, \
     explicit+0 with lines dashtype 2 title 'explicit copies'
GP
# Figure 9 style: slowdown against the explicit version, per volume, for each variant.
gnuplot <<GP
set terminal pngcairo size 900,560 noenhanced
set output '$out/stencil3d.png'
set datafile separator ','
set title '3D stencil: time relative to explicit copies ($(uname -n), $(nproc) CPUs)'
set xlabel 'volume edge (points)'
set ylabel 'wall time / explicit'
set key top right
set grid
plot '< grep "^lazy,"  $out/stencil3d.csv' using 2:9 with linespoints title 'lazy', \
     for [b in "4096 262144 1048576 33554432"] '< grep "^rolling,[0-9]*,'.b.',"  $out/stencil3d.csv' using 2:9 with linespoints title 'rolling '.b
GP
echo "plots: $out/vecadd.png $out/stencil3d.png" >&2
