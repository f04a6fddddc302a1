#!/usr/bin/env bash
# Debugging an adsm program with gdb as README says: `handle SIGSEGV nostop noprint pass` lets the
# faults adsm resolves through without stopping, and `break adsm__fault_unresolved` stops at a real
# crash (here a read after adsm_free) with the faulting line in the backtrace. Built with -O2 -g,
# as a program being debugged may be. Needs gdb (installed by .ci/setup).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then cd "$TEST_SRCDIR/adsm"
else cd "$(dirname "$0")/.."; fi
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v gdb > /dev/null || fail "gdb missing: run .ci/setup"
gcc -std=c11 -O2 -g -I. tests/gdb_crash.c -pthread -ldl -o "$tmp/gdb_crash" || fail "compiling tests/gdb_crash.c"
bug_line=$(grep -n 'THE BUG' tests/gdb_crash.c | cut -d: -f1)
out=$(cd "$tmp" && ADSM_BACKEND=emu timeout 120 gdb -q -batch -nx \
    -ex 'handle SIGSEGV nostop noprint pass' -ex 'break adsm__fault_unresolved' -ex run -ex bt ./gdb_crash 2>&1) ||
    true
echo "$out"
grep -q 'resolved read: 7' <<< "$out" || fail "the faults adsm resolves did not run through"
grep -q 'Breakpoint 1, adsm__fault_unresolved' <<< "$out" || fail "gdb did not stop at adsm__fault_unresolved"
grep -q "main () at tests/gdb_crash.c:$bug_line" <<< "$out" || fail "the backtrace does not reach line $bug_line"
[[ $(grep -c 'Breakpoint 1, ' <<< "$out") -eq 1 ]] || fail "gdb stopped more than once"
echo "PASS: gdb_check"
