#!/usr/bin/env bash
# The tiled benchmarks over device counts: tiled Cholesky and tiled matmul, the explicit program
# and adsm (lazy and rolling) on 1, 2 and 4 emulated devices with each task on the block-cyclic
# owner of the tile it writes; then the multi-GPU paper's four runtime versions
# (--policy v1..v4) on 4 devices, next to what a hand-written program with the same placement
# would move, and one that also follows the version's rules (write-through, dropped replicas)
# (bench/tiles/plan.h, counted); then 8 x 8 Cholesky on devices smaller than the
# matrix (ADSM_EMU_MEMORY 2M .. 512K: evictions). Prints markdown tables: median time and tile
# transfers host-to-device, device-to-host and device-to-device. About half a minute on 2 cores.
#
#   bench/tiles/run.sh [--runs N (3)]
#
# Builds with Bazel (-c opt). Every run checks its result against the CPU reference; a wrong one
# stops the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
runs=3
[[ ${1:-} == --runs ]] && runs=$2
export ADSM_BACKEND=emu

bazel build -c opt //:bench_tiles_cholesky //:bench_tiles_cholesky_explicit //:bench_tiles_matmul \
    //:bench_tiles_matmul_explicit >&2
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

# row LABEL PROTOCOL DEVICES BINARY ARGS...: one table row from the program's own table line
# (with PLAN=1 in the environment, plus the explicit plan's tiles and those of an explicit program
# following the version's rules too, bench/tiles/plan.h).
row() {
    local label=$1 protocol=$2 devices=$3 out
    shift 3
    local env=(env)
    [[ $protocol == - ]] || env+=(ADSM_PROTOCOL="$protocol")
    out=$("${env[@]}" "$@" --runs "$runs") || { echo "$out" >&2; exit 1; }
    [[ $out == *"check: ok"* ]] || { echo "$out" >&2; echo "wrong result" >&2; exit 1; }
    echo "$out" | awk -v l="$label" -v p="$protocol" -v d="$devices" -v plan="${PLAN:-0}" '
        NR == 3 { line = sprintf("| %s | %s | %s | %.1f | %.0f | %.0f | %.0f |", l, p, d, $3, $7, $8, $9) }
        /^explicit (plan|rules)/ && plan == 1 { line = line sprintf(" %s / %s / %s |", $7, $9, $11) }
        END { print line }'
}

table() {
    local name=$1 tiles=$2 size=$3
    echo
    echo "**$name**, $tiles x $tiles tiles of $size x $size, median of $runs runs:"
    echo
    echo "| variant | protocol | devices | ms | tiles h2d | tiles d2h | tiles d2d |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    for devices in 1 2 4; do
        row explicit - "$devices" "$bin/bench_tiles_${name}_explicit" --tiles "$tiles" --tile-size "$size" \
            --devices "$devices"
    done
    for protocol in lazy rolling; do
        for devices in 1 2 4; do
            row adsm "$protocol" "$devices" "$bin/bench_tiles_$name" --tiles "$tiles" --tile-size "$size" \
                --devices "$devices"
        done
    done
}

# versions NAME TILES SIZE: the paper's runtime versions on 4 devices, rolling.
versions() {
    local name=$1 tiles=$2 size=$3
    echo
    echo "**$name, the multi-GPU paper's runtime versions**, 4 devices, $tiles x $tiles tiles of $size x $size," \
        "rolling, median of $runs runs:"
    echo
    echo "| version | protocol | devices | ms | tiles h2d | tiles d2h | tiles d2d | explicit plan h2d / d2h / d2d |" \
        "explicit, the version's rules too |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for v in v1 v2 v3 v4; do
        PLAN=1 row "$v" rolling 4 "$bin/bench_tiles_$name" --tiles "$tiles" --tile-size "$size" --devices 4 --policy "$v"
    done
}

# capacity NAME TILES SIZE: 4 devices, v4, each device's memory smaller and smaller (capacity.h:
# least recently used tiles are evicted, those only a device held written back first).
capacity() {
    local name=$1 tiles=$2 size=$3
    echo
    echo "**$name, devices smaller than the data**, 4 devices, $tiles x $tiles tiles of $size x $size, rolling," \
        "median of $runs runs (ADSM_EMU_MEMORY per device; writes-back count in d2h):"
    echo
    echo "| device memory | protocol | devices | ms | tiles h2d | tiles d2h | tiles d2d |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    for memory in 256M 4M 2M 1M; do
        ADSM_EMU_MEMORY=$memory row "$memory" rolling 4 "$bin/bench_tiles_$name" --tiles "$tiles" --tile-size "$size" \
            --devices 4
    done
}

echo "## tiles: tiled Cholesky and matmul over emulated devices ($(nproc) CPUs, $(date -u '+%Y-%m-%d'))"
table cholesky 4 128
table cholesky 8 128
table matmul 4 128
table matmul 8 64
versions cholesky 4 128
versions cholesky 8 128
versions matmul 4 128
capacity cholesky 8 128
