#!/usr/bin/env bash
# bench/gpu_goals.py reads the GPU check's results into met / missed lines: on made-up results
# with known ratios, every goal gets the verdict its numbers call for, and an absent input reads
# "not measured", never "met".
set -euo pipefail
script=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-adsm}/bench/gpu_goals.py
[[ -f $script ]] || script=bench/gpu_goals.py
res=$(mktemp -d)
trap 'rm -rf "$res"' EXIT
cat > "$res/vecadd.csv" <<CSV
variant,block_size,wall_ms,h2d_ms,d2h_ms,h2d_gbps,d2h_gbps,h2d_bytes,d2h_bytes,faults,evictions,ratio_to_explicit
explicit,0,10.0,1,1,1,1,1,1,0,0,1.0000
lazy,65536,12.0,1,1,1,1,1,1,0,0,1.2000
lazy,2097152,11.0,1,1,1,1,1,1,0,0,1.1000
rolling,2097152,10.2,1,1,1,1,1,1,0,0,1.0200
um,0,10.1,1,1,1,1,1,1,0,0,1.0100
um-prefetch,0,10.5,1,1,1,1,1,1,0,0,1.0500
CSV
cat > "$res/stencil3d.csv" <<CSV
variant,volume,block_size,wall_ms,h2d_bytes,d2h_bytes,faults,evictions,ratio_to_explicit,ratio_to_lazy
explicit,64,0,1,0,0,0,0,1.0000,0.5
rolling,64,4096,1,0,0,0,0,1.3000,0.5
rolling,64,262144,1,0,0,0,0,1.0500,0.5
um-prefetch,64,0,1,0,0,0,0,1.0200,0.5
rolling,128,262144,1,0,0,0,0,1.2000,0.5
CSV
out=$(python3 "$script" "$res")
echo "$out"
expect() { grep -qF -- "$1" <<<"$out" || { echo "FAIL: no line with: $1"; exit 1; }; }
expect "| vecadd: lazy at its best block <= 1.05x explicit | 1.10x (2048 KiB) | MISSED |"
expect "| vecadd: rolling at its best block <= 1.05x explicit | 1.02x (2048 KiB) | met |"
expect "| vecadd: adsm's best <= 1.0x um-prefetch (managed memory) | 0.97x | met |"
expect "| vecadd: adsm's best < 1.0x um (managed memory) | 1.01x | MISSED |"
expect "| stencil3d 64^3: rolling (best block) <= 1.1x explicit | 1.05x | met |"
expect "| stencil3d 128^3: rolling (best block) <= 1.1x explicit | 1.20x | MISSED |"
expect "| stencil3d 64^3: rolling (best block) <= 1.0x um-prefetch | 1.03x | MISSED |"
expect "| collapsed alias: make + first writes <= 1.2x anonymous huge pages | - | not measured |"
expect "| applications: lazy and rolling <= 1.05x explicit | - | not measured |"
expect "4 missed."
echo "PASS: gpu_goals_test"
