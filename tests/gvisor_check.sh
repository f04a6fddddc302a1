#!/usr/bin/env bash
# adsm in a gVisor sandbox (Debian's runsc, ptrace platform): there mremap has no
# MREMAP_DONTUNMAP, /proc/self/mem refuses writes and the signal frame carries no page-fault
# error code, so fetches take copy.h's plain moves and writes are first decoded as reads
# (fault.h, adsm__checked_is_write). The examples must run to the right answers, not hang (they
# did, before): each gets two minutes. Then the I/O battery (rolling, 4 KiB blocks). Needs runsc
# (installed by .ci/setup) and Criterion.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then cd "$TEST_SRCDIR/adsm"
else cd "$(dirname "$0")/.."; fi
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v runsc >/dev/null || fail "runsc missing: run .ci/setup"
flags=(--network=none --platform=ptrace --root="$tmp/runsc-state")
[[ $(id -u) -eq 0 ]] || flags+=(--rootless)
declare -A expect=([vecadd]=" 0 wrong" [linked_list]="expected" [file_vecadd]=" 0 wrong")
for ex in vecadd linked_list file_vecadd; do
    echo "== gVisor: $ex"
    gcc -std=c11 -O1 -I. "examples/$ex.c" -pthread -ldl -o "$tmp/$ex" || fail "compiling examples/$ex.c"
    out=$(cd "$tmp" && timeout 120 runsc "${flags[@]}" do "./$ex" 2>&1) || fail "examples/$ex under runsc: $out"
    echo "$out"
    grep -q -- "${expect[$ex]}" <<< "$out" || fail "examples/$ex under runsc gave no right answer"
done
grep -q "kernel sum \([0-9]*\), expected \1" <<< "$(cd "$tmp" && timeout 120 runsc "${flags[@]}" do ./linked_list 2>&1)" ||
    fail "linked_list's sum is wrong under runsc"
# I/O on shared memory, rolling with 4 KiB blocks, every function: gVisor has no
# process_vm_readv, so io.h asks another call whether program memory inside the reservation is
# readable (the buffers that run from an object into it were short here before).
echo "== gVisor: tests/test_io.c, io/rolling_4k_*"
gcc -std=c11 -O1 -D_GNU_SOURCE -I. tests/test_io.c -pthread -ldl -lcriterion -o "$tmp/test_io" || fail "compiling tests/test_io.c"
out=$(cd "$tmp" && timeout 300 runsc "${flags[@]}" do ./test_io --jobs 1 --filter='io/rolling_4k_*' 2>&1) ||
    fail "tests/test_io.c under runsc: $out"
grep -q "Tested: 6 | Passing: 6" <<< "$out" || fail "tests/test_io.c under runsc: $out"
echo "PASS: gvisor_check"
