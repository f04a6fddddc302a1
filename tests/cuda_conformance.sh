#!/usr/bin/env bash
# Checks adsm's own CUDA declarations (adsm_impl/cuda/cuda_driver.h) against the real CUDA headers:
#   (a) tests/cuda_conformance.c, which _Static_asserts every constant, typedef, struct layout and
#       entry-point signature against cuda.h, cudaTypedefs.h and nvrtc.h, compiles and runs;
#   (b) each CONFORMANCE_NEGATIVE=1..4 variant (one deliberately wrong declaration) fails to
#       compile, on the static assertion it was written to trip.
# Needs the CUDA toolkit headers: $CUDA_HOME/include (CUDA_HOME defaults to /usr/local/cuda).
# Runs under `bazel test` (sources come from the runfiles tree) or by hand from the repository root.
set -euo pipefail

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Find the directory holding tests/cuda_conformance.c: the workspace's runfiles under
# `bazel test`, else the repository root this script lives in.
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/tests/cuda_conformance.c" ]]; then
    srcdir=$TEST_SRCDIR/adsm
elif [[ -f "$(dirname "$0")/cuda_conformance.c" ]]; then
    srcdir=$(cd "$(dirname "$0")/.." && pwd)
else
    fail "cannot find tests/cuda_conformance.c (TEST_SRCDIR='${TEST_SRCDIR:-}', script: $0)"
fi
cd "$srcdir"
[[ -f adsm_impl/cuda/cuda_driver.h ]] || fail "adsm_impl/cuda/cuda_driver.h not found in $srcdir"

cuda_home=${CUDA_HOME:-/usr/local/cuda}
for h in cuda.h cudaTypedefs.h nvrtc.h; do
    [[ -f "$cuda_home/include/$h" ]] ||
        fail "$cuda_home/include/$h not found: this test needs the CUDA toolkit headers (set CUDA_HOME to the toolkit's root if it is not at /usr/local/cuda)"
done

tmp=${TEST_TMPDIR:-}
if [[ -z "$tmp" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

# Bazel's strict action environment leaves PATH minimal; fall back to the system compiler.
CC=${CC:-cc}
if ! command -v "$CC" > /dev/null 2>&1; then
    CC=/usr/bin/cc
    [[ -x $CC ]] || CC=/usr/bin/gcc
fi
cflags=(-std=c11 -Wall -Wextra -Werror -I"$srcdir" -I"$cuda_home/include")

# (a) the real declarations
echo "== compile tests/cuda_conformance.c against $cuda_home/include"
echo "   $CC ${cflags[*]} tests/cuda_conformance.c -o $tmp/cuda_conformance"
if ! "$CC" "${cflags[@]}" tests/cuda_conformance.c -o "$tmp/cuda_conformance" 2> "$tmp/positive.log"; then
    cat "$tmp/positive.log" >&2
    echo >&2
    echo "adsm_impl/cuda/cuda_driver.h does not match the CUDA headers in $cuda_home/include; the errors" >&2
    echo "above name each mismatch (a 'conformance: ...' static assertion, or an undeclared name:" >&2
    echo "a constant that cuda.h does not have)." >&2
    fail "tests/cuda_conformance.c did not compile"
fi
echo "== run"
"$tmp/cuda_conformance" || fail "cuda_conformance exited with status $?"

# (b) each deliberately wrong declaration must be rejected, by the assertion meant to catch it.
expected=(
    ""
    "conformance: constant CUDA_ERROR_NOT_READY is not 601"
    "conformance: cuMemcpyHtoDAsync (adsm__cu_deviceptr dst, const void \\*src, int bytes"
    "conformance: cuCtxSynchronize does not match PFN_cuCtxSynchronize_v13000"
    "conformance: offsetof(conf_bad_alloc_prop, type) != offsetof(CUmemAllocationProp, type)"
)
for n in 1 2 3 4; do
    echo "== must not compile: CONFORMANCE_NEGATIVE=$n"
    if "$CC" "${cflags[@]}" -DCONFORMANCE_NEGATIVE=$n tests/cuda_conformance.c -o "$tmp/negative_$n" \
        2> "$tmp/negative_$n.log"; then
        fail "CONFORMANCE_NEGATIVE=$n compiled, but its wrong declaration should fail a static assertion"
    fi
    if ! grep -q -e "${expected[$n]}" "$tmp/negative_$n.log"; then
        cat "$tmp/negative_$n.log" >&2
        fail "CONFORMANCE_NEGATIVE=$n failed to compile, but not with the expected assertion '${expected[$n]}'"
    fi
done

echo "PASS: cuda_conformance_test"
