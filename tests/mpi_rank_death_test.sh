#!/usr/bin/env bash
# A rank that dies in the middle of a halo exchange on shared objects (tests/mpi/rank_death.c,
# 4 ranks, adsm_mpi.h, an emulated device per rank) ends the job with a clear error, not a hang:
# killed (SIGKILL), aborted (SIGABRT) or exited without MPI_Finalize, the job is over well within
# its bound (60 s; about a second here), mpirun names the rank and how it died, and no process of
# the job is left: no rank and no emulated device process.
set -euo pipefail
tests=${TEST_SRCDIR:+$TEST_SRCDIR/adsm/tests} # under Bazel $0 is a link at the runfiles' root
source "${tests:-$(dirname "$0")}/mpi/common.sh"

mpi_build tests/mpi/rank_death.c -o "$work/rank_death" || fail "building tests/mpi/rank_death.c"
for run in "1 kill signal 9" "2 abort signal 6" "3 exit Exit code: *3"; do
    read -r victim how said <<< "$run"
    start=$SECONDS
    rc=0
    timeout 60 "${MPIRUN[@]}" "${VADER[@]}" -np 4 "$work/rank_death" "$victim" "$how" > "$work/death.log" 2>&1 || rc=$?
    cat "$work/death.log"
    echo "== rank $victim ($how): mpirun exit status $rc after $((SECONDS - start)) s"
    [[ $rc -ne 124 ]] || fail "rank $victim died ($how) and the job hung until the 60 s bound"
    [[ $rc -ne 0 ]] || fail "rank $victim died ($how) and mpirun reported success"
    grep -q "rank $victim dies now" "$work/death.log" || fail "rank $victim did not reach the exchange it dies in"
    grep -Eq "rank $victim .*($said)|Process name: \[\[[0-9]+,1\],$victim\]" "$work/death.log" ||
        fail "mpirun did not name rank $victim"
    grep -Eq "$said" "$work/death.log" || fail "mpirun did not say how rank $victim died ($said)"
    for _ in $(seq 50); do # the job's processes go with it (ranks, emulated devices)
        pgrep -f "$work/rank_death" > /dev/null || break
        sleep 0.2
    done
    left=$(pgrep -af "$work/rank_death" || true)
    [[ -z $left ]] || fail "processes of the job outlived it: $left"
done
echo "PASS: mpi_rank_death_test"
