#!/usr/bin/env bash
# The application study's programs (bench/apps/) run and compute the right answer: for each
# application, its explicit version generates the inputs and the reference output, then the
# explicit version and the adsm version under lazy and rolling each run once on the emu backend
# and must print a CSV row ending in ok=1 (they compare their output with the reference and
# exit non-zero on a mismatch). Quick sizes; about half a minute. Binaries come as arguments
# (Bazel passes them in pairs: explicit, adsm).
set -euo pipefail
data=${TEST_TMPDIR:-$(mktemp -d)}
export ADSM_BACKEND=emu
(($# % 2 == 0 && $# > 0)) || { echo "usage: $0 EXPLICIT ADSM [EXPLICIT ADSM ...]" >&2; exit 2; }
while (($#)); do
    explicit=$1 adsm=$2
    shift 2
    "$explicit" --gen --data "$data"
    for run in "explicit" "lazy" "rolling"; do
        if [[ $run == explicit ]]; then row=$("$explicit" --data "$data")
        else row=$(ADSM_PROTOCOL=$run "$adsm" --data "$data"); fi
        echo "$row"
        [[ $row == *,1 ]] || { echo "FAIL: $(basename "$adsm") ($run): wrong output" >&2; exit 1; }
    done
done
echo "PASS: apps_smoke_test"
