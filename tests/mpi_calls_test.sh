#!/usr/bin/env bash
# MPI calls on shared objects through adsm_mpi.h (tests/mpi/mpi_calls.c: every call family, the
# buffers of each side Invalid, ReadOnly, Dirty and being evicted), under each protocol, with
# Open MPI's shared-memory transport moving large messages by CMA (process_vm_readv/writev) and
# with that single copy off, on 2 and 4 ranks; once more over TCP, and once built with
# AddressSanitizer. With adsm_mpi no transport ever meets a protected page: Open MPI's "Read -1"
# (a CMA read that failed with EFAULT) must not appear.
# The control (tests/mpi/cma_control.c, without adsm_mpi) shows the settings do what they say:
# with CMA Open MPI's read of a protected page fails ("Read -1, expected ..."; Open MPI 4.1 then
# falls back to copying in the sender, where adsm resolves the faults), with single copy off it
# never tries, and over TCP writev fails with EFAULT and the job dies.
set -euo pipefail
tests=${TEST_SRCDIR:+$TEST_SRCDIR/adsm/tests} # under Bazel $0 is a link at the runfiles' root
source "${tests:-$(dirname "$0")}/mpi/common.sh"

mpi_build tests/mpi/mpi_calls.c -o "$work/mpi_calls" || fail "building tests/mpi/mpi_calls.c"
mpi_build tests/mpi/cma_control.c -o "$work/cma_control" || fail "building tests/mpi/cma_control.c"

# runs <binary> <ranks> <protocol> <mpirun options...>: every check must pass, no CMA read may fail
runs() {
    local bin=$1 np=$2 proto=$3 out rc=0
    shift 3
    out=$(ADSM_PROTOCOL=$proto ADSM_BLOCK_SIZE=64K timeout 300 "${MPIRUN[@]}" -x ADSM_PROTOCOL -x ADSM_BLOCK_SIZE \
        -x ASAN_OPTIONS -x MALLOC_PERTURB_ "$@" -np "$np" "$bin" 2>&1) || rc=$?
    grep -v 'is shared memory' <<< "$out" | grep -v '^adsm_mpi: MPI_Buffer_attach' || true
    [[ $rc -eq 0 ]] || fail "$np ranks, $proto, $*: exit status $rc"
    grep -q 'Read -1' <<< "$out" && fail "$np ranks, $proto, $*: Open MPI met a protected page (CMA read failed)"
    grep -q "mpi_calls ($proto, $np ranks): [0-9]* checks, 0 failed on rank 0, 0 failed" <<< "$out" ||
        fail "$np ranks, $proto, $*: no summary line"
}

export ASAN_OPTIONS=
export MALLOC_PERTURB_=165 # fresh mirrors hold junk, not a lucky copy of what a receive should leave
for proto in batch lazy rolling; do
    runs "$work/mpi_calls" 2 $proto "${VADER[@]}" --mca btl_vader_single_copy_mechanism cma
    runs "$work/mpi_calls" 2 $proto "${VADER[@]}" --mca btl_vader_single_copy_mechanism none
    runs "$work/mpi_calls" 4 $proto "${VADER[@]}" --mca btl_vader_single_copy_mechanism cma
done
runs "$work/mpi_calls" 2 rolling --mca btl self,tcp --mca btl_tcp_if_include lo

# AddressSanitizer over adsm_mpi's buffers and requests (Open MPI's own leaks are not ours)
mpi_build -O1 -g -fsanitize=address -fno-omit-frame-pointer tests/mpi/mpi_calls.c -o "$work/mpi_calls_asan" ||
    fail "building tests/mpi/mpi_calls.c with -fsanitize=address"
ASAN_OPTIONS=handle_segv=0:detect_leaks=0 runs "$work/mpi_calls_asan" 2 rolling "${VADER[@]}"

# the control, without adsm_mpi
control() {
    local rc=0
    timeout 120 "${MPIRUN[@]}" "$@" -np 2 "$work/cma_control" > "$work/control.log" 2>&1 || rc=$?
    cat "$work/control.log"
    return $rc
}
control "${VADER[@]}" --mca btl_vader_single_copy_mechanism cma || true
grep -q 'Read -1, expected' "$work/control.log" ||
    fail "control: Open MPI never read a protected page with CMA, so the CMA runs above did not test CMA"
control "${VADER[@]}" --mca btl_vader_single_copy_mechanism none || fail "control without single copy failed"
grep -q 'Read -1' "$work/control.log" && fail "control: CMA was used although single copy was off"
grep -q 'arrived intact' "$work/control.log" || fail "control without single copy: the message did not arrive"
if control --mca btl self,tcp --mca btl_tcp_if_include lo; then
    fail "control: TCP sent a protected page without adsm_mpi; the hazard the TCP run guards against is gone"
fi
grep -q 'Bad address' "$work/control.log" || fail "control over TCP: not the EFAULT expected"
echo "PASS: mpi_calls_test"
