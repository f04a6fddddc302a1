#!/usr/bin/env bash
# A kernel in a library the program loads with dlopen after adsm_init, on emu: the launch is
# refused with ADSM_ERROR_UNSUPPORTED naming the library and the remedy, and the device keeps
# running the program's own kernels (it was lost for good: the device process, made at
# adsm_init, faulted on the kernel it did not have); loaded before adsm_init, the kernel runs.
# Builds tests/late_library/ with the system compiler. Runs under `bazel test` (sources from
# the runfiles tree) or by hand from the repository root.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then
    srcdir=$TEST_SRCDIR/adsm
else
    srcdir=$(cd "$(dirname "$0")/.." && pwd)
fi
cd "$srcdir"
tmp=${TEST_TMPDIR:-}
if [[ -z "$tmp" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

cc -std=c11 -Wall -Wextra -Werror -fPIC -shared -I. tests/late_library/plugin.c -o "$tmp/plugin.so"
cc -std=c11 -Wall -Wextra -Werror -rdynamic -I. tests/late_library/main.c -pthread -ldl -lm -o "$tmp/main"
for when in before after; do
    timeout 120 "$tmp/main" "$tmp/plugin.so" "$when"
done
