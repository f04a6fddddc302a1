#!/usr/bin/env bash
# CI's bounded fuzzing run: every libFuzzer target in fuzz/ (blocktree, arena, config, the
# protocol state machine on each protocol) for a few seconds from its corpus, failing on any
# crash or mismatch. Longer runs: FUZZ_SECONDS=300 fuzz/run.sh. Needs clang and libclang-rt
# (installed by .ci/setup).
set -euo pipefail
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/fuzz/run.sh" ]]; then cd "$TEST_SRCDIR/adsm"
else cd "$(dirname "$0")/.."; fi
command -v clang >/dev/null || { echo "FAIL: clang missing: run .ci/setup" >&2; exit 1; }
export FUZZ_SECONDS=${FUZZ_SECONDS:-8}
exec bash fuzz/run.sh
