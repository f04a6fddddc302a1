/* tests/mpi/cma_control.c -- the control of tests/mpi_calls_test.sh: the same kind of exchange as
 * mpi_calls.c without adsm_mpi.h, to show that the transport settings the tests use do what they
 * say. Rank 0 sends 1 MiB from a shared object a kernel just wrote (Invalid: PROT_NONE on the
 * host) to rank 1's plain buffer. Open MPI's shared-memory transport with CMA has rank 1 read
 * rank 0's pages with process_vm_readv, which fails with EFAULT on them ("Read -1, expected
 * ..."): the job must fail. With single copy off, rank 0 copies the message itself, its reads
 * fault, adsm resolves them and the message arrives: the job must succeed. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ADSM_KERNEL(k_fill, ADSM_OUT(uint32_t, x), ADSM_VALUE(size_t, n));
void k_fill(adsm_grid g, uint32_t *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] = (uint32_t)i * 3u + 1u;
    }
}

int main(int argc, char **argv) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 1;
    if (adsm_init(&cfg) != ADSM_OK) return 2;
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const size_t n = (size_t)1 << 18; /* 1 MiB: far above the eager limit, so a single copy */
    uint32_t *x = rank == 0 ? adsm_alloc(n * sizeof *x) : malloc(n * sizeof *x);
    if (!x) return 2;
    if (rank == 0) {
        if (ADSM_CALL(k_fill, adsm_grid_1d((uint32_t)(n / 256), 256), x, n) != ADSM_OK || adsm_sync() != ADSM_OK) return 2;
        printf("rank 0: the buffer is '%c' on the host\n", adsm_block_state(x));
        MPI_Send(x, (int)n, MPI_UNSIGNED, 1, 0, MPI_COMM_WORLD);
    } else {
        MPI_Recv(x, (int)n, MPI_UNSIGNED, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < n; i++)
            if (x[i] != (uint32_t)i * 3u + 1u) {
                printf("rank 1: element %zu is %u\n", i, x[i]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        printf("rank 1: the message arrived intact\n");
    }
    MPI_Finalize();
    return 0;
}
