#!/usr/bin/env bash
# The application study's programs (bench/apps/) run and compute the right answer: for each
# application, its explicit version generates the inputs and the reference output, then the
# explicit version and the adsm version under lazy and rolling each run once on the emu backend
# and must print a CSV row with ok=1 (they compare their output with the reference and
# exit non-zero on a mismatch), and adsm's runs must move no more bytes than the explicit one;
# the first adsm program fails, saying so, when its output goes to a full disk (/dev/full). Quick sizes; about half a minute. Binaries come as arguments
# (Bazel passes them in pairs: explicit, adsm). The first adsm program runs once more traced: the
# study's report (bench/apps/report.py) counts only the spans inside the run's timed part, so the
# objects it frees after that part (as every program does) are no part of Figure 10; and
# bench/trace_summary.py (what the GPU check prints for stencil3d) sums that trace per kind of span.
#
# APPS_ADSM_BACKEND=cuda (//:apps_double_test): the adsm programs, built with -DAPP_ON_CUDA_DOUBLE,
# run on the cuda backend over the driver test double (tests/cuda/libcudadouble.so from the
# runfiles, or $CUDA_DOUBLE_LIB); the explicit ones stay on emu, where they only give the inputs,
# the reference and the bytes to compare with.
set -euo pipefail
data=${TEST_TMPDIR:-$(mktemp -d)}
export ADSM_BACKEND=emu
adsm_env=(ADSM_BACKEND=emu)
if [[ ${APPS_ADSM_BACKEND:-emu} == cuda ]]; then
    double=${CUDA_DOUBLE_LIB:-${TEST_SRCDIR:-.}/adsm/tests/cuda/libcudadouble.so}
    [[ -f $double ]] || { echo "FAIL: no driver double at $double" >&2; exit 1; }
    adsm_env=(ADSM_BACKEND=cuda ADSM_CUDA_DRIVER="$double" CUDA_DOUBLE_LIB="$double")
fi
(($# % 2 == 0 && $# > 0)) || { echo "usage: $0 EXPLICIT ADSM [EXPLICIT ADSM ...]" >&2; exit 2; }
while (($#)); do
    explicit=$1 adsm=$2
    shift 2
    "$explicit" --gen --data "$data"
    for run in "explicit" "lazy" "rolling"; do
        if [[ $run == explicit ]]; then row=$("$explicit" --data "$data")
        else
            row=$(env "${adsm_env[@]}" ADSM_LOG=info ADSM_PROTOCOL=$run "$adsm" --data "$data" 2> "$data/log")
            # the run went where it was sent: adsm names its backend (and the double) at info
            [[ ${APPS_ADSM_BACKEND:-emu} == cuda ]] && want="cuda: device 0 is GPU 0 (adsm driver double" ||
                want="backend emu"
            grep -qF "$want" "$data/log" ||
                { echo "FAIL: $(basename "$adsm") ($run) did not run where sent: $(cat "$data/log")" >&2; exit 1; }
        fi
        echo "$row"
        [[ $(cut -d, -f16 <<< "$row") == 1 ]] || { echo "FAIL: $(basename "$adsm") ($run): wrong output" >&2; exit 1; }
        moved=$(($(cut -d, -f12 <<< "$row") + $(cut -d, -f13 <<< "$row")))
        [[ $run == explicit ]] && { by_hand=$moved; continue; }
        # Figure 8: adsm moves no more than the explicit program. Not mri-q: its input k, read
        # from the file and used only by the CPU, goes at the first launch, which sends every
        # Dirty unit because kernels may follow pointers stored in shared memory.
        [[ $(basename "$adsm") == *mriq* ]] && continue
        ((moved <= by_hand)) ||
            { echo "FAIL: $(basename "$adsm") ($run) moves $moved bytes, the explicit program $by_hand" >&2; exit 1; }
    done
    [[ -n ${traced:-} ]] && continue
    # An output that cannot be written (a full disk) fails the run: the check reads memory, so a
    # lost file went unseen. Once, on the first application, its outputs sent to /dev/full.
    outs=("$data"/*/*.out) # DIR/APP-quick/NAME.out
    [[ -e ${outs[0]} ]] || { echo "FAIL: $(basename "$adsm") wrote no .out file in $data" >&2; exit 1; }
    for o in "${outs[@]}"; do ln -sf /dev/full "$o"; done
    if env "${adsm_env[@]}" ADSM_PROTOCOL=lazy "$adsm" --data "$data" > /dev/null 2> "$data/log"; then
        echo "FAIL: $(basename "$adsm") succeeded though its output went to a full disk" >&2; exit 1
    fi
    grep -q "writing the output failed" "$data/log" ||
        { echo "FAIL: $(basename "$adsm") on a full disk did not say so: $(cat "$data/log")" >&2; exit 1; }
    rm -f "${outs[@]}"
    traced=$(env "${adsm_env[@]}" ADSM_PROTOCOL=rolling ADSM_TRACE="$data/trace.json" "$adsm" --data "$data")
    python3 - "$data/trace.json" "$traced" <<'EOF_PY'
import sys
sys.path.insert(0, "bench/apps")
import report
path, row = sys.argv[1], sys.argv[2].split(",")
window = (float(row[16]), float(row[17]))
assert window[1] > window[0] > 0, f"no timed part in {row}"
every, timed = report.trace_objects(path), report.trace_objects(path, window)
assert every["free"] > 0 and every["alloc"] > 0, f"the trace has no alloc or free spans: {every}"
assert timed["free"] == 0, f"frees after the timed part were counted: {timed}"
assert 0 < timed["alloc"] <= every["alloc"] and timed["objects"] == every["objects"], f"{timed} / {every}"
busy = report.trace_busy(path, window)
wall_ms = float(row[5])
assert busy["objects"] <= wall_ms * 1.01, f"alloc + free {busy['objects']:.3f} ms in a {wall_ms} ms run"
print(f"traced: alloc {timed['alloc']:.3f} ms of {wall_ms} ms timed; {every['free']:.3f} ms of frees after it")
EOF_PY
    summary=$(python3 bench/trace_summary.py "$data/trace.json" 1)
    for span in alloc call sync kernel; do
        grep -q "^| $span | [1-9]" <<< "$summary" || { echo "FAIL: trace_summary has no $span row: $summary" >&2; exit 1; }
    done
    # --last N: the run's last N spans, in the order they began (the GPU check's dense tree)
    python3 bench/trace_summary.py "$data/trace.json" 1 --last 5 | python3 -c '
import sys
text = sys.stdin.read()
rows = [l.split("|") for l in text.split("The last 5 spans")[1].splitlines() if l.startswith("| ") and l[2].isdigit()]
starts = [float(r[1]) for r in rows]
assert len(rows) == 5 and starts[0] == 0 and starts == sorted(starts), text
' || { echo "FAIL: trace_summary --last 5 does not list 5 spans in order" >&2; exit 1; }
done
echo "PASS: apps_smoke_test"
