#!/usr/bin/env bash
# The implementation also builds for aarch64 Linux (fault decoding reads the ESR record of the
# signal frame there). This cross-compiles the examples with -Werror and runs them under
# qemu-user. qemu-user does not put an ESR record in its signal frames, so on it adsm takes its
# documented fallback (a fault it cannot classify is treated as a read of Invalid data and
# retried as a write); the examples still have to produce right answers.
# Needs gcc-aarch64-linux-gnu and qemu-user (installed by .ci/setup).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then cd "$TEST_SRCDIR/adsm"
else cd "$(dirname "$0")/.."; fi
tmp=${TEST_TMPDIR:-$(mktemp -d)}
command -v aarch64-linux-gnu-gcc >/dev/null || fail "aarch64-linux-gnu-gcc missing: run .ci/setup"
command -v qemu-aarch64 >/dev/null || fail "qemu-aarch64 missing: run .ci/setup"
for ex in vecadd linked_list file_vecadd; do
    echo "== aarch64: $ex"
    aarch64-linux-gnu-gcc -std=c11 -O1 -Wall -Wextra -Werror -pedantic -I. "examples/$ex.c" -pthread -ldl \
        -o "$tmp/$ex" || fail "cross-compiling examples/$ex.c"
    ADSM_BLOCK_SIZE=64K qemu-aarch64 -L /usr/aarch64-linux-gnu "$tmp/$ex" || fail "examples/$ex under qemu-aarch64"
done
echo "PASS: aarch64_check"
