#!/usr/bin/env bash
# The distributed stencil (examples/mpi/stencil_mpi.c: bench/stencil3d's stencil split along z,
# halos exchanged on shared objects through adsm_mpi.h) equals the single-process stencil bit for
# bit on 1, 2, 3 and 4 ranks (26 planes: uneven slabs for 3 and 4), for the explicit-copy program
# and adsm's lazy and rolling protocols; the program compares on rank 0 and fails on a difference.
set -euo pipefail
tests=${TEST_SRCDIR:+$TEST_SRCDIR/adsm/tests} # under Bazel $0 is a link at the runfiles' root
source "${tests:-$(dirname "$0")}/mpi/common.sh"

mpi_build examples/mpi/stencil_mpi.c -o "$work/stencil_mpi" || fail "building examples/mpi/stencil_mpi.c"
for np in 1 2 3 4; do
    rc=0
    timeout 300 "${MPIRUN[@]}" "${VADER[@]}" -np $np "$work/stencil_mpi" --edge 26 --steps 6 --runs 1 --header \
        > "$work/stencil.log" 2>&1 || rc=$?
    cat "$work/stencil.log"
    [[ $rc -eq 0 ]] || fail "$np ranks: exit status $rc"
    [[ $(grep -c "^| $np | .* | bit-equal |$" "$work/stencil.log") -eq 4 ]] ||
        fail "$np ranks: not every variant reported a bit-equal result"
done
echo "PASS: mpi_stencil_test"
