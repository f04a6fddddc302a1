#!/usr/bin/env bash
# bench/gpu_check.sh --build-only: the GPU check's examples and test suites (built for the real
# driver, -DTEST_ON_REAL_CUDA) compile and link here, so a session lent a GPU does not find them
# broken. Runs nothing on a device.
set -euo pipefail
out=${TEST_TMPDIR:-$(mktemp -d)}/gpu_check
ADSM_BENCH_OUT=$out bench/gpu_check.sh --build-only || { cat "$out/gpu_check.md"; exit 1; }
grep -q "everything built" "$out/gpu_check.md" || { cat "$out/gpu_check.md"; exit 1; }
echo "PASS: gpu_check_build_test"
