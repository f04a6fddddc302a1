#!/usr/bin/env bash
# The application study (GMAC paper, Figures 7, 8, 10 and 12) on this machine's default backend:
# every application under bench/apps/ in its explicit version and its adsm version under batch,
# lazy and rolling (and with ADSM_BACKEND=cuda under um and um-prefetch too: CUDA managed
# memory, the same program unchanged; and hmm, plain host memory, where the GPU reaches pageable
# memory), in rounds (one run of each variant per round, so drift hits all alike; the
# variant that runs first changes from round to round, because the first large allocation after
# another program's exit pays the kernel's huge-page compaction, up to 10x its copy time), then
# tpacf across block sizes and rolling sizes, then the line counts. Prints the tables, writes
# CSV files and PNG plots into bench/results/apps/ (or $ADSM_BENCH_OUT/apps).
#
#   bench/apps/run.sh            quick sizes, 3 rounds: a few minutes on 2 cores
#   bench/apps/run.sh --full     Parboil-like sizes, 5 rounds
#   bench/apps/run.sh --runs N   N rounds
#   bench/apps/run.sh --sweep-runs N   N rounds of the tpacf sweep (default: as many as --runs)
#
# Builds with Bazel (-c opt) when it is there, else with cc. Plots need gnuplot (.ci/setup).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
mode=--quick
runs=3
sweep_runs=
while (($#)); do
    case "$1" in
    --quick) mode=--quick ;;
    --full) mode=--full; runs=5 ;;
    --runs) runs=$2; shift ;;
    --sweep-runs) sweep_runs=$2; shift ;;
    *) echo "usage: $0 [--quick|--full] [--runs N] [--sweep-runs N]" >&2; exit 2 ;;
    esac
    shift
done
sweep_runs=${sweep_runs:-$runs}
out=${ADSM_BENCH_OUT:-bench/results}/apps
mkdir -p "$out"
size=()
[[ $mode == --full ]] && size=(--full)
apps=()
for d in bench/apps/*/; do
    [[ -f $d/kernels.h && -f $d/explicit.c && -f $d/adsm.c ]] && apps+=("$(basename "$d")")
done

echo "== building ${apps[*]}" >&2
if command -v bazel >/dev/null; then
    targets=()
    for a in "${apps[@]}"; do targets+=("//:app_${a}_explicit" "//:app_${a}_adsm"); done
    bazel build -c opt "${targets[@]}" >&2
    bin=$(bazel info -c opt bazel-bin 2>/dev/null)
else
    bin=$out/bin
    mkdir -p "$bin"
    for a in "${apps[@]}"; do
        for v in explicit adsm; do
            cc -std=c11 -O2 -I. "bench/apps/$a/$v.c" -pthread -ldl -lm -o "$bin/app_${a}_$v"
        done
    done
fi

echo "== generating inputs and reference outputs" >&2
for a in "${apps[@]}"; do "$bin/app_${a}_explicit" --gen "${size[@]}"; done

# One discarded run of each application first: the first large allocations after the inputs were
# written pay the kernel's huge-page compaction (hundreds of ms in this VM), whichever variant
# makes them.
echo "== warm-up (discarded)" >&2
for a in "${apps[@]}"; do
    "$bin/app_${a}_explicit" "${size[@]}" >/dev/null
    ADSM_PROTOCOL=lazy "$bin/app_${a}_adsm" "${size[@]}" >/dev/null
done

# Plain host memory the GPU reaches itself (protocol hmm), where the GPU reports pageable memory
# access; elsewhere adsm_init refuses it, and the reason is printed here.
unified=()
if [[ ${ADSM_BACKEND:-} == cuda ]]; then
    unified=(um um-prefetch)
    if why=$(ADSM_PROTOCOL=hmm "$bin/app_${apps[0]}_adsm" "${size[@]}" 2>&1 >/dev/null); then
        unified+=(hmm)
    else
        echo "no hmm runs: ${why##*$'\n'}" >&2
    fi
fi

csv=$out/apps.csv
header="round,app,version,protocol,block_size,rolling_size,wall_ms,io_ms,kernel_ms,cpu_ms,copy_ms,fault_ms,h2d_bytes,d2h_bytes,faults,evictions,ok,start_ns,stop_ns"
echo "$header" >"$csv"
for ((r = 1; r <= runs; r++)); do
    echo "== round $r of $runs" >&2
    variants=(explicit batch lazy rolling)
    # CUDA managed memory beside them, where there is a GPU (the emulated device refuses it)
    variants+=("${unified[@]}")
    nv=${#variants[@]}
    for a in "${apps[@]}"; do
        echo "   $a" >&2
        for ((k = 0; k < nv; k++)); do
            v=${variants[$(((k + r) % nv))]}
            if [[ $v == explicit ]]; then
                echo "$r,$("$bin/app_${a}_explicit" "${size[@]}")" >>"$csv"
            else
                echo "$r,$(ADSM_PROTOCOL=$v "$bin/app_${a}_adsm" "${size[@]}")" >>"$csv"
            fi
        done
    done
done

# One more rolling run of each application with ADSM_TRACE: Figure 10 is computed from these.
mkdir -p "$out/traces"
traced=$out/traced.csv
echo "$header" >"$traced"
for a in "${apps[@]}"; do
    echo "0,$(ADSM_PROTOCOL=rolling ADSM_TRACE="$out/traces/$a.json" "$bin/app_${a}_adsm" "${size[@]}")" >>"$traced"
done

sweep=$out/tpacf_sweep.csv
echo "$header" >"$sweep"
if [[ " ${apps[*]} " == *" tpacf "* ]]; then
    echo "== tpacf across block sizes and rolling sizes (Figure 12)" >&2
    for ((r = 1; r <= sweep_runs; r++)); do
        echo "$r,$("$bin/app_tpacf_explicit" "${size[@]}")" >>"$sweep"
        for bs in 128K 256K 512K 1M 2M 4M 8M 16M 32M; do
            for rs in 2 4 8; do
                echo "$r,$(ADSM_PROTOCOL=rolling ADSM_BLOCK_SIZE=$bs ADSM_ROLLING_SIZE=$rs "$bin/app_tpacf_adsm" "${size[@]}")" >>"$sweep"
            done
        done
    done
fi

python3 bench/apps/report.py "$csv" "$sweep" "$out" "$traced" | tee "$out/apps.md"

# The README's picture: examples/vecadd under rolling, traced, drawn by bench/trace_timeline.py.
cc -std=c11 -O2 -I. examples/vecadd.c -pthread -ldl -o "$out/vecadd_example"
ADSM_PROTOCOL=rolling ADSM_TRACE="$out/traces/vecadd.json" "$out/vecadd_example" >&2

if ! command -v gnuplot >/dev/null; then
    echo "gnuplot not found (run .ci/setup): CSV files are in $out, no plots drawn" >&2
    exit 0
fi
for fig in fig7 fig8; do
    [[ -f $out/$fig.dat ]] || continue
    gnuplot <<GP
set terminal pngcairo size 900,520 noenhanced
set output '$out/$fig.png'
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top left
set xtics rotate by -30
set grid ytics
set yrange [0:*]
set title '$( [[ $fig == fig7 ]] && echo "Time as a multiple of explicit (median of $runs)" || echo "Bytes moved, normalised to batch")'
plot for [i=2:5] '$out/$fig.dat' using i:xtic(1) title columnheader
GP
done
if [[ -f $out/fig10.dat ]]; then
    gnuplot <<GP
set terminal pngcairo size 900,520 noenhanced
set output '$out/fig10.png'
set style data histogram
set style histogram rowstacked
set style fill solid 0.8 border -1
set key outside right
set xtics rotate by -30
set ylabel 'percent of wall time'
set yrange [0:*]
set title "Where rolling's time goes (from ADSM_TRACE; copies overlap the rest)"
plot for [i=2:7] '$out/fig10.dat' using i:xtic(1) title columnheader
GP
fi
if [[ -f $out/fig12.dat ]]; then
    gnuplot <<GP
set terminal pngcairo size 900,520 noenhanced
set output '$out/fig12.png'
set key top right
set grid
set ylabel 'time / explicit'
set xlabel 'block size'
set yrange [0:*]
set title 'tpacf under rolling, by block size and rolling size'
plot for [i=2:4] '$out/fig12.dat' using 0:i:xtic(1) with linespoints lw 2 title columnheader
GP
fi
python3 bench/trace_timeline.py "$out/traces/vecadd.json" "$out/vecadd_trace.png" \
    --title "examples/vecadd under rolling (emu, $(nproc) CPUs): the copy engine evicts while the CPU writes" >&2
echo "plots in $out" >&2
