#!/usr/bin/env bash
# Runs the protocol tests (Criterion binaries given as arguments) under valgrind memcheck and fails
# on any memcheck error or definite/indirect leak in any process they start.
#
#   tests/valgrind_protocol.sh SUPPRESSIONS TEST_BINARY...
#
# Processes: each Criterion binary is a runner that forks one worker per Test (no exec), and every
# test that uses the emu backend forks the emulated device (no exec either). valgrind follows a
# fork by itself (the child keeps running on the synthetic CPU); --child-silent-after-fork=no keeps
# the children's reports, and --log-file=...%p gives every process its own log, so reports do not
# interleave. --trace-children=yes also covers anything started with exec. --jobs=1: one worker at a
# time, so the 2 CPUs are not oversubscribed by several valgrind'ed workers and their devices.
#
# Why the logs are read and not only exit codes: valgrind's --error-exitcode applies per process.
# The runner's own status does not include a worker's or a device's errors (Criterion judges a
# worker by its test-protocol messages, and adsm never looks at the device's exit status), and the
# device process never reaches valgrind's exit-time summary at all: adsm_shutdown SIGKILLs it
# (adsm__emu_shutdown). memcheck prints each error as it happens, though, so any error headline in
# any log, or a nonzero ERROR SUMMARY (which counts definite and indirect leaks, see
# --errors-for-leak-kinds), fails the test.
#
# No Criterion test is filtered out: the three suites take about 2.5 minutes here under valgrind
# (measured on 2 cores), well inside the budget. If that grows, pass --filter to the runner below.
set -euo pipefail

supp=$1
shift
[[ $# -gt 0 ]] || { echo "usage: $0 SUPPRESSIONS TEST_BINARY..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed (.ci/setup installs it)" >&2; exit 1; }

out=${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-$(mktemp -d)}}/valgrind
rm -rf "$out"
mkdir -p "$out"

# memcheck's error headlines (valgrind 3.19 manual, section 4.2) and the leak records that count
# as errors here.
errors='ERROR SUMMARY: [1-9]|Invalid (read|write) of size|Invalid free|Mismatched free|depends on uninitialised|Use of uninitialised|uninitialised byte|unaddressable byte|Source and destination overlap|has a fishy|Invalid alignment value|Jump to the invalid address|Illegal memory pool|are definitely lost in|are indirectly lost in'

status=0
for bin in "$@"; do
    name=$(basename "$bin")
    logs=$out/$name
    mkdir -p "$logs"
    start=$SECONDS
    rc=0
    valgrind --tool=memcheck \
        --error-exitcode=99 \
        --leak-check=full \
        --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect \
        --trace-children=yes \
        --child-silent-after-fork=no \
        --suppressions="$supp" \
        --log-file="$logs/%p.log" \
        "$bin" --jobs=1 --short-filename || rc=$?
    nlogs=$(find "$logs" -name '*.log' | wc -l)
    echo "$name: exit status $rc, $nlogs processes, $((SECONDS - start)) s under valgrind"
    if [[ $rc -ne 0 ]]; then
        echo "FAIL: $name exited with status $rc under valgrind (99: memcheck error in the runner)"
        status=1
    fi
    if [[ $nlogs -lt 2 ]]; then
        echo "FAIL: $name: expected a valgrind log for the runner and for each test process, found $nlogs"
        status=1
    fi
    bad=$(grep -lE "$errors" "$logs"/*.log || true)
    for log in $bad; do
        echo "FAIL: $name: memcheck reported errors in process $(basename "$log" .log):"
        cat "$log"
        status=1
    done
done
if [[ $status -eq 0 ]]; then
    echo "valgrind memcheck: no errors and no definite or indirect leaks in $# test binaries"
fi
exit $status
