/* tests/mpi/rank_death.c -- a rank dies in the middle of a halo exchange on shared objects
 * (tests/mpi_rank_death_test.sh runs it under mpirun and checks the job ends with a clear error,
 * not a hang, and leaves no process behind: neither a rank nor an emulated device).
 *
 * Ranks in a ring exchange a plane of a shared volume with both neighbours each step, a kernel
 * updates the volume in between. At step 3 the rank named by argv[1] dies the way argv[2] says:
 * "kill" (SIGKILL, as the OOM killer would), "abort" (SIGABRT) or "exit" (exit status 3 without
 * MPI_Finalize) while the others wait for its planes. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <mpi.h>
#define ADSM_MPI_IMPLEMENTATION
#include "adsm_mpi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ADSM_KERNEL(k_step, ADSM_INOUT(float, v), ADSM_VALUE(size_t, n));
void k_step(adsm_grid g, float *v, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) v[i] = 0.5f * v[i] + 1.0f;
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: rank_death <rank that dies> kill|abort|exit\n");
        return 2;
    }
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 1;
    if (adsm_init(&cfg) != ADSM_OK) {
        fprintf(stderr, "adsm_init: %s\n", adsm_last_error());
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, size, victim = atoi(argv[1]);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const size_t plane = 64 * 1024, n = 6 * plane; /* floats: ghost, 4 planes, ghost */
    float *v = adsm_alloc(n * sizeof *v);
    if (!v) MPI_Abort(MPI_COMM_WORLD, 2);
    int up = (rank + 1) % size, down = (rank + size - 1) % size;
    for (int step = 0; step < 1000; step++) {
        if (step == 3 && rank == victim) {
            printf("rank %d dies now (%s)\n", rank, argv[2]);
            fflush(stdout);
            if (!strcmp(argv[2], "kill")) raise(SIGKILL);
            if (!strcmp(argv[2], "abort")) abort();
            exit(3);
        }
        MPI_Sendrecv(v + 4 * plane, (int)plane, MPI_FLOAT, up, 0, v, (int)plane, MPI_FLOAT, down, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(v + plane, (int)plane, MPI_FLOAT, down, 1, v + 5 * plane, (int)plane, MPI_FLOAT, up, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (ADSM_CALL(k_step, adsm_grid_1d((uint32_t)(n / 256), 256), v, n) != ADSM_OK || adsm_sync() != ADSM_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, adsm_last_error());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    printf("rank %d: the victim did not die\n", rank);
    MPI_Finalize();
    return 1;
}
