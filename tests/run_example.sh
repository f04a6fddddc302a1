#!/usr/bin/env bash
# Runs one example binary (path given as $1, relative to the runfiles
# directory) and passes if it exits 0.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 EXAMPLE_BINARY" >&2
    exit 2
fi

bin=$1
if [[ ! -x "$bin" ]]; then
    echo "FAIL: example binary '$bin' not found or not executable (cwd: $PWD)" >&2
    exit 1
fi

set +e
"$bin"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    echo "FAIL: example '$bin' exited with status $rc" >&2
    exit 1
fi
echo "PASS: example '$bin' exited 0"
