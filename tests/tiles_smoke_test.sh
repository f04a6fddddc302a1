#!/usr/bin/env bash
# The tiled benchmarks (bench/tiles/) run and compute the right answer: for each benchmark, its
# explicit version, then its adsm version under lazy and rolling, each run once on the emu backend
# at small sizes (4 x 4 tiles of 32 x 32, the paper's 4 x 4 shape) and must print "check: ok" and
# exit 0 (they compare with a CPU reference and exit non-zero on a mismatch). On one device adsm
# must also move no more bytes either way than the explicit program, the issue's goal; on 2 and
# 4 emulated devices (tasks on the block-cyclic owner of the tile they write) no more in all than
# the explicit multi-device program with the same placement, and Cholesky's tiles must move
# device to device. A few seconds. Binaries come as
# arguments (Bazel passes them in pairs: explicit, adsm).
set -euo pipefail
export ADSM_BACKEND=emu
(($# % 2 == 0 && $# > 0)) || { echo "usage: $0 EXPLICIT ADSM [EXPLICIT ADSM ...]" >&2; exit 2; }
size=(--tiles 4 --tile-size 32 --runs 1)

# run NAME PROTOCOL BINARY [ARGS...]: prints the table, fails unless it checked ok; sets h2d, d2h
# and d2d.
run() {
    local out
    out=$(ADSM_PROTOCOL=$2 "$3" "${size[@]}" "${@:4}") || { echo "$out"; echo "FAIL: $1 ($2) exited non-zero" >&2; exit 1; }
    echo "$out"
    [[ $out == *"check: ok"* ]] || { echo "FAIL: $1 ($2 ${*:4}): no 'check: ok'" >&2; exit 1; }
    read -r h2d d2h d2d < <(echo "$out" | awk 'NR == 3 { print $4, $5, $6 }')
    read -r tiles_moved plan_tiles rules_tiles < <(echo "$out" | awk 'BEGIN { plan = rules = "-" }
        NR == 3 { moved = $7 + $8 + $9 } /^explicit plan/ { plan = $7 + $9 + $11 }
        /^explicit rules/ { rules = $7 + $9 + $11 } END { print moved, plan, rules }')
}

all=("$@")
while (($#)); do
    explicit=$1 adsm=$2
    shift 2
    run "$(basename "$explicit")" rolling "$explicit"
    want_h2d=$h2d want_d2h=$d2h
    for protocol in lazy rolling; do
        run "$(basename "$adsm")" "$protocol" "$adsm"
        ((h2d <= want_h2d && d2h <= want_d2h)) ||
            { echo "FAIL: $(basename "$adsm") ($protocol) moved $h2d/$d2h bytes, explicit $want_h2d/$want_d2h" >&2; exit 1; }
    done
    # Several devices: the hand-written multi-device program (the explicit plan made for real) and
    # adsm with the same placement; adsm may move no more in all, and Cholesky's tiles other
    # devices wrote must go device to device.
    for devices in 2 4; do
        run "$(basename "$explicit")" rolling "$explicit" --devices "$devices"
        want_total=$((h2d + d2h + d2d))
        for protocol in lazy rolling; do
            run "$(basename "$adsm")" "$protocol" "$adsm" --devices "$devices"
            ((h2d + d2h + d2d <= want_total)) ||
                { echo "FAIL: $(basename "$adsm") ($protocol, $devices devices) moved $((h2d + d2h + d2d)) bytes," \
                       "the explicit program $want_total" >&2; exit 1; }
            [[ $adsm != *cholesky* ]] || ((d2d > 0)) ||
                { echo "FAIL: $(basename "$adsm") on $devices devices moved nothing between them" >&2; exit 1; }
        done
    done
done
# The multi-GPU paper's runtime versions on 4 devices: each right, and each moves fewer bytes in
# all (host to device, device to host, device to device) than the one before, as in the paper;
# every version of both benchmarks moves no more tiles than a hand-written program
# with the same placement that follows the version's rules (write-through, dropped replicas),
# and version 4 as many as the explicit plan for the same placement (bench/tiles/plan.h).
for ((i = 2; i <= ${#all[@]}; i += 2)); do
    adsm=${all[i - 1]}
    before=
    for v in v1 v2 v3 v4; do
        run "$(basename "$adsm")" rolling "$adsm" --devices 4 --policy "$v"
        total=$((h2d + d2h + d2d))
        ((tiles_moved <= rules_tiles)) ||
            { echo "FAIL: $(basename "$adsm") $v moved $tiles_moved tiles, an explicit program with its rules" \
                   "$rules_tiles" >&2; exit 1; }
        # write-back moves exactly what a hand-written program with the same placement would
        [[ $v != v4 ]] || [[ $tiles_moved == "$plan_tiles" ]] ||
            { echo "FAIL: $(basename "$adsm") v4 moved $tiles_moved tiles, the explicit plan $plan_tiles" >&2; exit 1; }
        [[ -z $before ]] || ((total < before)) ||
            { echo "FAIL: $(basename "$adsm") policy $v moved $total bytes, no fewer than the version before ($before)" >&2; exit 1; }
        before=$total
    done
done
echo "PASS: tiles_smoke_test"
