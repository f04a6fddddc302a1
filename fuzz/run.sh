#!/usr/bin/env bash
# fuzz/run.sh -- builds the libFuzzer targets in fuzz/ and runs each for a bounded time.
#
#   fuzz/run.sh                       # from the repository root (or anywhere)
#   FUZZ_SECONDS=300 fuzz/run.sh      # longer runs
#
# Environment:
#   FUZZ_SECONDS    seconds per run (libFuzzer -max_total_time), default 20
#   FUZZ_TARGETS    targets to run, default "fuzz_blocktree fuzz_arena fuzz_config fuzz_protocol"
#   FUZZ_PROTOCOLS  protocols fuzz_protocol runs under, one run each (ADSM_FUZZ_PROTOCOL),
#                   default "rolling lazy batch"; "rolling:3" also sets the rolling size
#                   (ADSM_FUZZ_ROLLING_SIZE)
#   FUZZ_SAVE=1     merge the new inputs that add coverage into fuzz/corpus/<target>/ (by default
#                   they go to a temporary directory and the repository is left alone)
#   FUZZ_KEEP=1     keep the temporary directory (binaries, logs, new inputs) even on success
#   FUZZ_ARGS       extra libFuzzer flags for every run (e.g. "-jobs=2" or "-seed=1")
#   CC              compiler, default clang (needs -fsanitize=fuzzer)
#
# Sanitizers: ASan + UBSan (UBSan reports are fatal). ASAN_OPTIONS gets handle_segv=0 because
# adsm resolves CPU accesses to protected shared memory in its own SIGSEGV handler; ASan's handler
# would report those faults as crashes. (fuzz_protocol needs it; the others do not mind.)
#
# Crashes: the input is saved under <tmp>/artifacts/<target>/ (printed at the end; the temporary
# directory is kept). Replay with the printed binary, e.g.
#   ASAN_OPTIONS=handle_segv=0 ADSM_FUZZ_PROTOCOL=rolling ADSM_FUZZ_TRACE=1 <tmp>/fuzz_protocol <crash-file>
#
# Exit status: 0 when every target ran clean, 1 when a target found a crash (or timeout, leak,
# out-of-memory), 2 when a build failed.
set -u

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
FUZZ_TARGETS="${FUZZ_TARGETS:-fuzz_blocktree fuzz_arena fuzz_config fuzz_protocol}"
FUZZ_PROTOCOLS="${FUZZ_PROTOCOLS:-rolling lazy batch}"
FUZZ_ARGS="${FUZZ_ARGS:-}"
CC="${CC:-clang}"
CFLAGS=(-fsanitize=fuzzer,address,undefined -fno-sanitize=null -g -O1 -I.)
LIBS=(-pthread -ldl)

export ASAN_OPTIONS="handle_segv=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/adsm-fuzz.XXXXXX")" || exit 2
echo "fuzz: work directory $WORK, $FUZZ_SECONDS s per run"

# max input length per target (decoders stop at a bounded number of operations anyway)
max_len() {
    case "$1" in
    fuzz_protocol) echo 512 ;;
    fuzz_config) echo 1024 ;;
    *) echo 2048 ;;
    esac
}

failed=0
build_failed=0
summary=()
crashes=()

# run_one <target> <label> [env assignments...]
run_one() {
    local t="$1" label="$2"
    shift 2
    local name="${label//[\[\]:]/_}"
    local log="$WORK/$name.log" new="$WORK/new/$t" art="$WORK/artifacts/$name/"
    mkdir -p "$new" "$art" "fuzz/corpus/$t"
    # First corpus directory receives the new inputs: the temporary one.
    # shellcheck disable=SC2086
    env "$@" "$WORK/$t" -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=4096 \
        -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$art" $FUZZ_ARGS \
        "$new" "fuzz/corpus/$t" >"$log" 2>&1
    local rc=$?
    local runs execs cov ft corp result
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    execs=$(grep -o 'stat::average_exec_per_sec: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    [ -n "$execs" ] || execs=$(grep -o 'exec/s: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}')
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | awk '{print $2}')
    if [ "$rc" -eq 0 ]; then
        result="ok"
    else
        failed=1
        local what artifact
        what=$(grep -m1 -o -E 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): [a-zA-Z -]+|runtime error: .*|check failed: .*|FAILED at .*' "$log" | head -1)
        artifact=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -1 | awk '{print $5}')
        result="FAILED (exit $rc: ${what:-see log})"
        crashes+=("$label: ${artifact:-no artifact}; log $log")
    fi
    local line
    line=$(printf '%-24s runs=%-9s exec/s=%-6s cov=%-5s ft=%-6s corpus=%-12s %s' "$label" "${runs:-?}" \
        "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result")
    echo "$line"
    summary+=("$line")
    if [ "${FUZZ_SAVE:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
        env "$@" "$WORK/$t" -merge=1 -max_len="$(max_len "$t")" "fuzz/corpus/$t" "$new" >>"$log" 2>&1 ||
            echo "fuzz: merging into fuzz/corpus/$t failed (see $log)"
    fi
}

for t in $FUZZ_TARGETS; do
    if [ ! -f "fuzz/$t.c" ]; then
        echo "fuzz: no such target fuzz/$t.c"
        build_failed=1
        continue
    fi
    if ! "$CC" "${CFLAGS[@]}" "fuzz/$t.c" -o "$WORK/$t" "${LIBS[@]}" >"$WORK/$t.build.log" 2>&1; then
        echo "fuzz: building $t failed:"
        cat "$WORK/$t.build.log"
        build_failed=1
        continue
    fi
    if [ "$t" = fuzz_protocol ]; then
        for p in $FUZZ_PROTOCOLS; do
            case "$p" in
            *:*) run_one "$t" "$t[$p]" ADSM_FUZZ_PROTOCOL="${p%%:*}" ADSM_FUZZ_ROLLING_SIZE="${p#*:}" ;;
            *) run_one "$t" "$t[$p]" ADSM_FUZZ_PROTOCOL="$p" ;;
            esac
        done
    else
        run_one "$t" "$t"
    fi
done

echo
echo "fuzz: summary ($FUZZ_SECONDS s per run)"
for line in "${summary[@]}"; do echo "  $line"; done
if [ "$failed" -ne 0 ] || [ "$build_failed" -ne 0 ]; then
    for c in "${crashes[@]}"; do echo "  crash: $c"; done
    echo "fuzz: FAILED; binaries, logs and inputs kept in $WORK"
    [ "$build_failed" -ne 0 ] && exit 2
    exit 1
fi
if [ "${FUZZ_KEEP:-0}" = 1 ]; then
    echo "fuzz: all clean; kept $WORK"
else
    rm -rf "$WORK"
    echo "fuzz: all clean"
fi
exit 0
