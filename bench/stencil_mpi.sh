#!/usr/bin/env bash
# The distributed stencil's table (examples/mpi/stencil_mpi.c): 1, 2 and 4 MPI ranks on this
# machine, each with its own device (emu: an emulated device per rank), explicit copies against
# adsm's lazy and rolling protocols, time of the slowest rank and bytes moved per rank. Every run
# checks its result against the single-process stencil. Needs Open MPI (.ci/setup).
#
#   bench/stencil_mpi.sh [--edge N] [--steps N] [--runs N]     (defaults 128, 20, 3: about a minute)
#
# Prints a markdown table; writes it and a CSV into bench/results/ (or $ADSM_BENCH_OUT). Ranks may
# outnumber the cores (--oversubscribe): compare the variants of one rank count, not the times of
# different counts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${ADSM_BENCH_OUT:-bench/results}
mkdir -p "$out"
work=$(mktemp -d /tmp/adsm-mpi.XXXXXX) # short: Open MPI's session sockets live under TMPDIR
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
mpicc -std=c11 -O2 -I. examples/mpi/stencil_mpi.c -pthread -ldl -o "$work/stencil_mpi"
root=()
[[ $(id -u) -ne 0 ]] || root=(--allow-run-as-root)
echo "ranks,variant,block_size,edge,steps,ms,h2d_per_rank,d2h_per_rank,mpi_halo_per_rank,adsm_mpi_copies_per_rank" \
    > "$out/stencil_mpi.csv"
{
    echo "## stencil_mpi: $(uname -sr), $(nproc) CPUs, $(mpirun --version | head -1), $(date '+%Y-%m-%d')"
    echo
    header=--header
    for np in 1 2 4; do
        mpirun "${root[@]}" --oversubscribe -np $np "$work/stencil_mpi" $header --csv "$out/stencil_mpi.csv" "$@"
        header=
    done
} | tee "$out/stencil_mpi.md"
