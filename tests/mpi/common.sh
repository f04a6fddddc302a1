# tests/mpi/common.sh -- sourced by the MPI tests (tests/mpi_*_test.sh): the repository root as the
# working directory, Open MPI's tools, a short TMPDIR (Open MPI puts its session sockets there, and
# a socket path has at most 107 bytes, which Bazel's own TEST_TMPDIR can pass), mpirun's flags for
# this machine, and a compiler line for MPI programs with adsm.
fail() { echo "FAIL: $*" >&2; exit 1; }
if [[ -n "${TEST_SRCDIR:-}" && -f "$TEST_SRCDIR/adsm/adsm.h" ]]; then cd "$TEST_SRCDIR/adsm"
else cd "$(dirname "${BASH_SOURCE[0]}")/../.."; fi
command -v mpicc > /dev/null && command -v mpirun > /dev/null ||
    fail "Open MPI is missing (mpicc, mpirun): run .ci/setup (Debian packages openmpi-bin, libopenmpi-dev)"
work=$(mktemp -d /tmp/adsm-mpi.XXXXXX)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
# Ranks may outnumber the cores (2 on the build machine); root, as CI runs, must say so to Open MPI.
# ob1 with the shared-memory BTL unless a run asks otherwise: the transport under test is explicit.
MPIRUN=(mpirun --oversubscribe --mca pml ob1)
[[ $(id -u) -ne 0 ]] || MPIRUN+=(--allow-run-as-root)
VADER=(--mca btl self,vader)
mpi_build() { mpicc -std=c11 -O2 -Wall -Wextra -Werror -I. "$@" -pthread -ldl; }
