#!/usr/bin/env bash
# The CUDA C twins of the kernels in examples/*.c and bench/**/*.c, and the CUDA C the cuda backend
# generates for their single-source kernels (ADSM_KERNEL_DEF, prelude and ADSM_SHARED blocks
# included), compile with the real NVRTC to
# PTX for compute_90 and assemble with ptxas for sm_90, and each matches its ADSM_KERNEL
# declaration: same entry name, same number of parameters, same size of each parameter.
#
# The convention the programs follow (what this test relies on; single-source kernels need only the
# first point, with ADSM_KERNEL_DEF):
#   * every kernel is declared with `ADSM_KERNEL(name, ...)` starting a line;
#   * its CUDA C is a string named `name_cuda` defined in the same file, right after the CPU
#     body: static const char name_cuda[] = ADSM_CUDA_SOURCE(extern "C" __global__ void name(...) {...});
#     with the parameters of the declaration in the same order (IN pointers as const T *), and
#     the same flattened global thread index i as ADSM_FOR_EACH_THREAD (x fastest);
#   * the program loads it right after initialisation: adsm_module_load_source(name_cuda, NULL).
# For each source file declaring kernels, tests/cuda_kernels.c is compiled with that file
# #included (its main renamed) and PROGRAM_KERNELS='X(k1) X(k2) ...' from the declarations found
# here; the driver gets the CUDA C as k_cuda and the declaration as adsm__kernel_k(). It also runs
# once on its own (no program) as a self-test: its control kernel must pass and each of its
# deliberately mismatched kernels (int for size_t, a missing parameter, a struct of another size,
# a mangled or misspelt entry, a source NVRTC rejects) must be rejected.
#
# Needs CUDA 12+ under $CUDA_HOME (default /usr/local/cuda): lib64/libnvrtc.so and bin/ptxas; no
# GPU. Runs under `bazel test` (sources from the runfiles tree) or by hand from the repository
# root.
set -euo pipefail

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then
    srcdir=$TEST_SRCDIR/adsm
elif [[ -f "$(dirname "$0")/../adsm.h" ]]; then
    srcdir=$(cd "$(dirname "$0")/.." && pwd)
else
    fail "cannot find adsm.h (TEST_SRCDIR='${TEST_SRCDIR:-}', script: $0)"
fi
cd "$srcdir"

tmp=${TEST_TMPDIR:-}
if [[ -z "$tmp" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

# The tools, by absolute path (PATH is minimal under Bazel).
cuda=${CUDA_HOME:-/usr/local/cuda}
nvrtc=""
for lib in "$cuda/lib64/libnvrtc.so" "$cuda/lib64/libnvrtc.so".* "$cuda/lib/libnvrtc.so" "$cuda/lib/libnvrtc.so".*; do
    if [[ -f "$lib" ]]; then
        nvrtc=$lib
        break
    fi
done
[[ -n "$nvrtc" ]] || fail "NVRTC not found: no $cuda/lib64/libnvrtc.so (set CUDA_HOME to the CUDA toolkit)"
ptxas=$cuda/bin/ptxas
[[ -x "$ptxas" ]] || fail "ptxas not found at $ptxas (set CUDA_HOME to the CUDA toolkit)"
CC=${CC:-}
if [[ -z "$CC" ]]; then
    for c in /usr/bin/cc /usr/bin/gcc /usr/bin/clang /usr/local/bin/cc; do
        if [[ -x "$c" ]]; then
            CC=$c
            break
        fi
    done
fi
[[ -n "$CC" ]] || fail "no C compiler found (set CC)"
echo "== NVRTC $nvrtc, ptxas $ptxas ($("$ptxas" --version | tail -1)), cc $CC"

build_driver() { # build_driver OUT [cc flags...]
    local out=$1
    shift
    "$CC" -std=c11 -D_GNU_SOURCE -I. "$@" tests/cuda_kernels.c -pthread -ldl -lm -o "$out" ||
        fail "building tests/cuda_kernels.c $* failed"
}

# 1. The checker rejects mismatches.
echo "== self-test: the checker accepts its control and rejects each mismatch"
mkdir -p "$tmp/self_test"
build_driver "$tmp/self_test/check"
"$tmp/self_test/check" "$nvrtc" "$ptxas" "$tmp/self_test" || fail "the checker's self-test failed"

# The driver test double, on which every single-source kernel also runs through adsm's cuda backend.
double=${CUDA_DOUBLE_LIB:-}
for d in "${TEST_SRCDIR:-/nonexistent}/adsm/tests/cuda/libcudadouble.so" bazel-bin/tests/cuda/libcudadouble.so; do
    [[ -z $double && -f $d ]] && double=$(cd "$(dirname "$d")" && pwd)/$(basename "$d")
done
[[ -n $double ]] || fail "the driver test double is missing: bazel build //tests/cuda:libcudadouble.so (or set CUDA_DOUBLE_LIB)"

# 2. Every example and benchmark source. The application study (bench/apps/<app>/) keeps its
# kernels in kernels.h, shared by explicit.c and adsm.c: the checker includes adsm.c. The tiled
# benchmarks (bench/tiles/) keep theirs in kernels.h too: the checker includes cholesky.c.
shopt -s nullglob
files=(examples/*.c bench/*.c bench/*/*.c bench/apps/*/kernels.h bench/tiles/kernels.h)
checked=0
for f in "${files[@]}"; do
    if grep -qE '^[[:space:]]+ADSM_KERNEL(_DEF)?\(' "$f"; then
        fail "$f: an indented ADSM_KERNEL; this test finds kernels declared at the start of a line"
    fi
    kernels=$(sed -n 's/^ADSM_KERNEL([[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$f")
    singles=$(sed -n 's/^ADSM_KERNEL_DEF([[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' "$f")
    if [[ -z "$kernels$singles" ]]; then
        echo "== $f: no kernels"
        continue
    fi
    list=""
    for k in $kernels; do
        list="$list X($k)"
        grep -Eq "static const char (\*const )?${k}_cuda(\[\])? = ADSM_CUDA_SOURCE\(" "$f" ||
            fail "$f: kernel $k has no CUDA C string '${k}_cuda = ADSM_CUDA_SOURCE(...)'"
        grep -Eq "adsm_module_load_source\(${k}_cuda," "$f" ||
            fail "$f: kernel $k: the program never calls adsm_module_load_source(${k}_cuda, ...)"
    done
    for k in $singles; do
        list="$list S($k)" # single-source: the CUDA C the cuda backend generates from the body
    done
    echo "== $f:$list"
    dir=$tmp/$(echo "$f" | tr '/.' '__')
    mkdir -p "$dir"
    program=$f
    [[ $f == bench/apps/*/kernels.h ]] && program=$(dirname "$f")/adsm.c
    [[ $f == bench/tiles/kernels.h ]] && program=bench/tiles/cholesky.c
    build_driver "$dir/check" -DPROGRAM_FILE="\"$program\"" -DPROGRAM_KERNELS="$list"
    "$dir/check" "$nvrtc" "$ptxas" "$dir" "$double" || fail "$f: CUDA C kernels do not match their ADSM_KERNEL declarations, or a single-source one failed on the driver double"
    checked=$((checked + 1))
done
((checked > 0)) || fail "no source file with kernels found under examples/ and bench/"

# 3. adsm's own single-source kernels (declared at the start of a line in adsm_impl/ or one of its
# backend folders), in a program that is nothing but adsm.
internal=$(sed -n 's/^ADSM_KERNEL_DEF([[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' adsm_impl/*.h adsm_impl/*/*.h)
[[ -n $internal ]] || fail "no ADSM_KERNEL_DEF found in adsm_impl/ (translate.h's patch kernel)"
list=""
for k in $internal; do list="$list S($k)"; done
echo "== adsm_impl/:$list"
mkdir -p "$tmp/internal"
build_driver "$tmp/internal/check" -DPROGRAM_FILE='"tests/cuda_internal_kernels.c"' -DPROGRAM_KERNELS="$list"
"$tmp/internal/check" "$nvrtc" "$ptxas" "$tmp/internal" "$double" || fail "adsm's own kernels:$list"
checked=$((checked + 1))
echo "PASS: cuda_kernels_test ($checked source files)"
