#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <mpi.h>
#define ADSM_MPI_IMPLEMENTATION
#include "adsm_mpi.h"

/* examples/mpi/stencil_mpi.c -- bench/stencil3d's 3D stencil split over MPI ranks along z, with
 * the halo planes exchanged straight from and into shared objects (adsm_mpi.h), one device per
 * rank (an emulated device each on emu; ADSM_DEVICE = the node-local rank on a GPU node).
 *
 * The global volume is edge^3 floats; rank r owns a slab of consecutive planes and keeps one
 * ghost plane on each side. Each step: the rank holding the centre writes the source point with
 * the CPU, every rank sends its first and last planes to its neighbours and receives their planes
 * into its ghosts (MPI_Irecv, MPI_Isend, MPI_Waitall on the shared volume), then the kernel
 * updates the slab (the same 7-point update as bench/stencil3d, the same roundings) and adsm_sync
 * waits. At the end the slabs are gathered on rank 0 (MPI_Gatherv from the shared volume) and
 * compared bit for bit with the single-process stencil computed there (bench/stencil3d's update
 * on one whole volume in plain C, the same source); any difference fails the program.
 *
 * Variants, each in the same run on the same backend:
 *   explicit      device slabs (adsm_dev_alloc); each step the two edge planes come back with
 *                 adsm_copy_from_device into plain host buffers (adsm_host_alloc), MPI moves those,
 *                 the ghosts go to the device with adsm_copy_to_device (the hand-written program)
 *   lazy          shared slabs, protocol lazy
 *   rolling-<B>   shared slabs, protocol rolling, block size B (64K and the default 2M)
 * Time: from the slabs' allocation to the end of the last step, the slowest rank, median of the
 * runs. Bytes per rank: the mean over ranks of adsm's h2d and d2h, MPI's halo bytes sent, and what
 * adsm_mpi copied between shared memory and its mirrors.
 *
 * Build and run (README, "MPI"):
 *   mpicc -std=c11 -O2 -I. examples/mpi/stencil_mpi.c -pthread -ldl -o /tmp/stencil_mpi
 *   mpirun -np 4 /tmp/stencil_mpi [--edge N] [--steps N] [--runs N] [--only explicit|lazy|rolling]
 *          [--csv FILE] [--header]
 * --edge 128, --steps 20, --runs 3 by default; --header prints the table's header first.
 * (as root add --allow-run-as-root; on fewer cores than ranks add --oversubscribe). Rank 0 prints
 * one markdown table row per variant; bench/stencil_mpi.sh runs 1, 2 and 4 ranks. */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/common.h"

/* ---- the kernel ----------------------------------------------------------------------------- */
ADSM_KERNEL(stencil_slab, ADSM_OUT(float, next), ADSM_IN(float, cur), ADSM_VALUE(uint32_t, nx),
            ADSM_VALUE(uint32_t, ny), ADSM_VALUE(uint32_t, nzl), ADSM_VALUE(uint32_t, z0), ADSM_VALUE(uint32_t, nz));

#define STENCIL_C0 0.4f /* bench/stencil3d's weights */
#define STENCIL_C1 0.1f

/* One step over the nzl planes of a slab (x fastest), past its lower ghost plane; z0 is the
 * slab's first global plane. Global boundary points are copied, the rest updated as
 * bench/stencil3d does (same expression, same order of additions). */
void stencil_slab(adsm_grid g, float *next, const float *cur, uint32_t nx, uint32_t ny, uint32_t nzl, uint32_t z0,
                  uint32_t nz) {
    const size_t sy = nx, sz = (size_t)nx * ny, n = sz * nzl;
    if (g.begin >= n) return;
    uint32_t x = (uint32_t)(g.begin % nx), y = (uint32_t)((g.begin / nx) % ny), z = z0 + (uint32_t)(g.begin / sz);
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= n) break;
        size_t c = i + sz;
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1)
            next[c] = cur[c];
        else
            next[c] = STENCIL_C0 * cur[c] +
                      STENCIL_C1 * ((cur[c - 1] + cur[c + 1]) + (cur[c - sy] + cur[c + sy]) + (cur[c - sz] + cur[c + sz]));
        if (++x == nx) {
            x = 0;
            if (++y == ny) {
                y = 0;
                ++z;
            }
        }
    }
}

/* The same in CUDA C (bench/stencil3d's, with the slab's offsets); __fadd_rn keeps the roundings. */
static const char stencil_slab_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void stencil_slab(float *next, const float *cur, unsigned int nx, unsigned int ny,
                                            unsigned int nzl, unsigned int z0, unsigned int nz) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        const size_t sy = nx, sz = (size_t)nx * ny, n = sz * nzl;
        if (i >= n) return;
        unsigned int x = (unsigned int)(i % nx), y = (unsigned int)((i / nx) % ny), z = z0 + (unsigned int)(i / sz);
        size_t c = i + sz;
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1)
            next[c] = cur[c];
        else
            next[c] = __fadd_rn(0.4f * cur[c], 0.1f * ((cur[c - 1] + cur[c + 1]) + (cur[c - sy] + cur[c + sy]) +
                                                       (cur[c - sz] + cur[c + sz])));
    });

/* The source written at step t (bench/stencil3d's emitter). */
static float source_value(int t) { return 1.0f + 0.25f * (float)(t % 8); }

/* ---- the reference: the single-process stencil ---------------------------------------------- */
/* bench/stencil3d's step on one whole volume, in plain C. */
static void reference_step(float *next, const float *cur, uint32_t e) {
    const size_t sy = e, sz = (size_t)e * e;
    for (uint32_t z = 0; z < e; z++)
        for (uint32_t y = 0; y < e; y++)
            for (uint32_t x = 0; x < e; x++) {
                size_t i = z * sz + y * sy + x;
                if (x == 0 || y == 0 || z == 0 || x == e - 1 || y == e - 1 || z == e - 1)
                    next[i] = cur[i];
                else
                    next[i] = STENCIL_C0 * cur[i] + STENCIL_C1 * ((cur[i - 1] + cur[i + 1]) + (cur[i - sy] + cur[i + sy]) +
                                                                  (cur[i - sz] + cur[i + sz]));
            }
}

static float *reference(uint32_t e, int steps, size_t src) {
    size_t n = (size_t)e * e * e;
    float *cur = calloc(n, sizeof *cur), *next = calloc(n, sizeof *next);
    if (!cur || !next) return NULL;
    for (int t = 1; t <= steps; t++) {
        cur[src] = source_value(t);
        reference_step(next, cur, e);
        float *tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next);
    return cur;
}

/* ---- the decomposition ---------------------------------------------------------------------- */
typedef struct slab {
    int rank, size, down, up; /* neighbours: MPI_PROC_NULL at the volume's ends */
    uint32_t edge, nzl, z0;   /* own planes [z0, z0 + nzl) */
    size_t plane, n;          /* floats per plane, per slab with its two ghosts */
    long src;                 /* the source point's index in the slab, -1 when another rank has it */
} slab;

static slab slab_of(int rank, int size, uint32_t edge) {
    slab s;
    s.rank = rank;
    s.size = size;
    s.edge = edge;
    s.nzl = edge / (uint32_t)size + ((uint32_t)rank < edge % (uint32_t)size);
    s.z0 = (uint32_t)rank * (edge / (uint32_t)size) + ((uint32_t)rank < edge % (uint32_t)size ? (uint32_t)rank : edge % (uint32_t)size);
    s.plane = (size_t)edge * edge;
    s.n = s.plane * (s.nzl + 2);
    s.down = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    s.up = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    uint32_t c = edge / 2;
    s.src = c >= s.z0 && c < s.z0 + s.nzl ? (long)((size_t)(c - s.z0 + 1) * s.plane + (size_t)c * edge + c) : -1;
    return s;
}

/* ---- variants ------------------------------------------------------------------------------- */
enum { V_EXPLICIT, V_LAZY, V_ROLLING };
typedef struct variant {
    const char *name;
    int kind;
    size_t block; /* rolling; 0: the default */
} variant;

static const variant variants[] = {
    {"explicit", V_EXPLICIT, 0}, {"lazy", V_LAZY, 0}, {"rolling", V_ROLLING, 64u << 10}, {"rolling", V_ROLLING, 0}};
#define NVARIANTS (sizeof variants / sizeof variants[0])

typedef struct result {
    double ms;                 /* the slowest rank's */
    double h2d, d2h, mirrored; /* per rank, mean */
    size_t block;
} result;

static void die(const char *what) {
    fprintf(stderr, "stencil_mpi: %s: %s\n", what, adsm_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check(adsm_result r, const char *what) {
    if (r != ADSM_OK) die(what);
}

static void mpi_check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "stencil_mpi: %s failed (%d)\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* One device per rank: on cuda the node-local rank's GPU unless ADSM_DEVICE says; if that GPU
 * does not exist (fewer GPUs than ranks), the default device. */
static void start_adsm(const variant *v) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.protocol = v->kind == V_LAZY ? ADSM_PROTOCOL_LAZY : ADSM_PROTOCOL_ROLLING;
    cfg.block_size = v->kind == V_ROLLING ? v->block : 0;
    int local = adsm_mpi_local_rank();
    if (!getenv("ADSM_DEVICE") && local > 0) cfg.device = local + 1;
    adsm_result r = adsm_init(&cfg);
    if (r != ADSM_OK && cfg.device) {
        cfg.device = 0;
        r = adsm_init(&cfg);
    }
    check(r, "adsm_init");
    check(adsm_module_load_source(stencil_slab_cuda, NULL), "adsm_module_load_source");
}

static adsm_grid slab_grid(const slab *s) {
    size_t threads = s->plane * s->nzl;
    return adsm_grid_1d((uint32_t)((threads + 255) / 256), 256);
}

/* The halo exchange on `cur` (shared or plain host memory): its first and last own planes go to
 * the neighbours, theirs arrive in its ghost planes. */
static void exchange(const slab *s, float *cur) {
    MPI_Request r[4];
    const int n = (int)s->plane;
    mpi_check(MPI_Irecv(cur, n, MPI_FLOAT, s->down, 0, MPI_COMM_WORLD, &r[0]), "MPI_Irecv");
    mpi_check(MPI_Irecv(cur + (s->nzl + 1) * s->plane, n, MPI_FLOAT, s->up, 1, MPI_COMM_WORLD, &r[1]), "MPI_Irecv");
    mpi_check(MPI_Isend(cur + s->plane, n, MPI_FLOAT, s->down, 1, MPI_COMM_WORLD, &r[2]), "MPI_Isend");
    mpi_check(MPI_Isend(cur + s->nzl * s->plane, n, MPI_FLOAT, s->up, 0, MPI_COMM_WORLD, &r[3]), "MPI_Isend");
    mpi_check(MPI_Waitall(4, r, MPI_STATUSES_IGNORE), "MPI_Waitall");
}

/* Rank 0 gets every slab's own planes into `all` (rank 0 only; plain memory). */
static void gather(const slab *s, const float *own, float *all) {
    int counts[64], displs[64];
    for (int r = 0; r < s->size; r++) {
        slab o = slab_of(r, s->size, s->edge);
        counts[r] = (int)(o.nzl * o.plane);
        displs[r] = (int)(o.z0 * o.plane);
    }
    mpi_check(MPI_Gatherv(own, counts[s->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD),
              "MPI_Gatherv");
}

/* What adsm and adsm_mpi moved during the steps (the gather after them left out). */
typedef struct moved {
    adsm_stats adsm;
    adsm_mpi_stats mpi;
} moved;

static void moved_now(moved *m) {
    check(adsm_get_stats(&m->adsm), "adsm_get_stats");
    adsm_mpi_get_stats(&m->mpi);
}

/* Runs the steps with device slabs and explicit copies of the halo planes. */
static double run_explicit(const slab *s, int steps, float *all, moved *m) {
    const size_t pb = s->plane * sizeof(float);
    double t0 = MPI_Wtime();
    float *d_cur = adsm_dev_alloc(s->n * sizeof(float)), *d_next = adsm_dev_alloc(s->n * sizeof(float));
    float *host = adsm_host_alloc(s->n * sizeof(float)); /* planes: its ghosts and edges only are used */
    if (!d_cur || !d_next || !host) die("allocation");
    for (int t = 1; t <= steps; t++) {
        float v = source_value(t);
        if (s->src >= 0) check(adsm_copy_to_device(d_cur + s->src, &v, sizeof v), "adsm_copy_to_device (source)");
        if (s->down != MPI_PROC_NULL) /* only the planes a neighbour needs */
            check(adsm_copy_from_device(host + s->plane, d_cur + s->plane, pb), "adsm_copy_from_device");
        if (s->up != MPI_PROC_NULL)
            check(adsm_copy_from_device(host + s->nzl * s->plane, d_cur + s->nzl * s->plane, pb),
                  "adsm_copy_from_device");
        exchange(s, host);
        if (s->down != MPI_PROC_NULL) check(adsm_copy_to_device(d_cur, host, pb), "adsm_copy_to_device");
        if (s->up != MPI_PROC_NULL)
            check(adsm_copy_to_device(d_cur + (s->nzl + 1) * s->plane, host + (s->nzl + 1) * s->plane, pb),
                  "adsm_copy_to_device");
        check(ADSM_CALL(stencil_slab, slab_grid(s), d_next, d_cur, s->edge, s->edge, s->nzl, s->z0, s->edge), "launch");
        check(adsm_sync(), "adsm_sync");
        float *tmp = d_cur;
        d_cur = d_next;
        d_next = tmp;
    }
    double ms = (MPI_Wtime() - t0) * 1e3;
    moved_now(m);
    check(adsm_copy_from_device(host + s->plane, d_cur + s->plane, s->nzl * pb), "adsm_copy_from_device (result)");
    gather(s, host + s->plane, all);
    adsm_host_free(host);
    adsm_dev_free(d_cur);
    adsm_dev_free(d_next);
    return ms;
}

/* Runs the steps on shared slabs: the halos go through MPI straight from the objects. */
static double run_shared(const slab *s, int steps, float *all, moved *m) {
    double t0 = MPI_Wtime();
    float *cur = adsm_alloc(s->n * sizeof(float)), *next = adsm_alloc(s->n * sizeof(float));
    if (!cur || !next) die("adsm_alloc");
    for (int t = 1; t <= steps; t++) {
        if (s->src >= 0) cur[s->src] = source_value(t); /* the CPU writes one point */
        exchange(s, cur);
        check(ADSM_CALL(stencil_slab, slab_grid(s), next, cur, s->edge, s->edge, s->nzl, s->z0, s->edge), "launch");
        check(adsm_sync(), "adsm_sync");
        float *tmp = cur;
        cur = next;
        next = tmp;
    }
    double ms = (MPI_Wtime() - t0) * 1e3;
    moved_now(m);
    gather(s, cur + s->plane, all); /* MPI_Gatherv from the shared slab */
    adsm_free(cur);
    adsm_free(next);
    return ms;
}

/* One run of a variant: its time (slowest rank) and bytes (mean per rank); rank 0's `all` gets
 * the gathered volume. */
static result run_variant(const slab *s, const variant *v, int steps, float *all) {
    result res;
    start_adsm(v);
    check(adsm_reset_stats(), "adsm_reset_stats");
    adsm_mpi_reset_stats();
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    moved m;
    double ms = v->kind == V_EXPLICIT ? run_explicit(s, steps, all, &m) : run_shared(s, steps, all, &m);
    res.block = v->kind == V_EXPLICIT ? 0 : adsm_block_size();
    adsm_shutdown();
    double mine[4] = {(double)m.adsm.h2d_bytes, (double)m.adsm.d2h_bytes,
                      (double)(m.mpi.bytes_out + m.mpi.bytes_in), 0},
           sum[4];
    mpi_check(MPI_Reduce(&ms, &res.ms, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
    mpi_check(MPI_Reduce(mine, sum, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    res.h2d = sum[0] / s->size;
    res.d2h = sum[1] / s->size;
    res.mirrored = sum[2] / s->size;
    return res;
}

/* ---- report --------------------------------------------------------------------------------- */
static const char *human(double b, char *buf, size_t len) {
    if (b < 1024) snprintf(buf, len, "%.0f B", b);
    else if (b < 1024.0 * 1024) snprintf(buf, len, "%.1f KiB", b / 1024);
    else snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
    return buf;
}

static void label(const variant *v, size_t block, char *buf, size_t len) {
    if (v->kind == V_ROLLING) snprintf(buf, len, "rolling %zuK", block >> 10);
    else snprintf(buf, len, "%s", v->name);
}

/* The halo bytes one rank sends per run, on average. */
static double halo_bytes(int size, uint32_t edge, int steps) {
    double planes = size > 1 ? 2.0 * (size - 1) / size : 0; /* the end ranks have one neighbour */
    return planes * (double)edge * edge * sizeof(float) * steps;
}

static long parse(const char *s, const char *opt, long lo, long hi) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "stencil_mpi: %s needs an integer in [%ld, %ld]\n", opt, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, runs = 3, steps = 20;
    uint32_t edge = 128;
    const char *only = NULL, *csv_path = NULL;
    int header = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--edge")) edge = (uint32_t)parse(next, a, 3, 1024), i++;
        else if (!strcmp(a, "--steps")) steps = (int)parse(next, a, 1, 100000), i++;
        else if (!strcmp(a, "--runs")) runs = (int)parse(next, a, 1, 64), i++;
        else if (!strcmp(a, "--only") && next) only = next, i++;
        else if (!strcmp(a, "--csv") && next) csv_path = next, i++;
        else if (!strcmp(a, "--header")) header = 1;
        else {
            if (rank == 0)
                fprintf(stderr, "usage: %s [--edge N] [--steps N] [--runs N] [--only VARIANT] [--csv FILE] [--header]\n",
                        argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if ((uint32_t)size > edge || size > 64) {
        if (rank == 0) fprintf(stderr, "stencil_mpi: %d ranks for %u planes\n", size, edge);
        MPI_Finalize();
        return 2;
    }
    slab s = slab_of(rank, size, edge);
    size_t total = (size_t)edge * edge * edge;
    float *all = rank == 0 ? malloc(total * sizeof *all) : NULL, *ref = NULL;
    if (rank == 0) {
        uint32_t c = edge / 2;
        ref = reference(edge, steps, ((size_t)c * edge + c) * edge + c);
        if (!all || !ref) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    FILE *csv = rank == 0 && csv_path ? fopen(csv_path, "a") : NULL;
    double ms[NVARIANTS][64], explicit_ms = 0;
    result last[NVARIANTS];
    int ok[NVARIANTS] = {1, 1, 1, 1};
    for (int r = 0; r < runs; r++) /* interleaved, so drift of a shared machine spreads evenly */
        for (size_t v = 0; v < NVARIANTS; v++) {
            if (only && strcmp(only, variants[v].name)) continue;
            last[v] = run_variant(&s, &variants[v], steps, all);
            ms[v][r] = last[v].ms;
            if (rank == 0 && memcmp(all, ref, total * sizeof *all) != 0) {
                size_t i = 0;
                while (!memcmp(&all[i], &ref[i], sizeof *all)) i++;
                fprintf(stderr, "stencil_mpi: WRONG RESULT: %s on %d ranks, run %d: point %zu (plane %zu) is %.9g, "
                        "the single-process stencil has %.9g\n", variants[v].name, size, r + 1, i,
                        i / ((size_t)edge * edge), (double)all[i], (double)ref[i]);
                ok[v] = 0;
            }
        }
    if (rank == 0 && header)
        printf("| ranks | variant | ms (slowest rank) | x explicit | h2d / rank | d2h / rank | MPI halo / rank | "
               "adsm_mpi copies / rank | result |\n| ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | :--- |\n");
    if (rank == 0) {
        for (size_t v = 0; v < NVARIANTS; v++) {
            if (only && strcmp(only, variants[v].name)) continue;
            double med = bench_median_of(ms[v], runs);
            if (v == V_EXPLICIT) explicit_ms = med;
            char name[32], ratio[32], h[32], d[32], halo[32], mirrored[32];
            label(&variants[v], last[v].block, name, sizeof name);
            snprintf(ratio, sizeof ratio, explicit_ms > 0 ? "%.2f" : "-", med / explicit_ms);
            printf("| %d | %s | %.1f | %s | %s | %s | %s | %s | %s |\n", size, name, med, ratio,
                   human(last[v].h2d, h, sizeof h), human(last[v].d2h, d, sizeof d),
                   human(halo_bytes(size, edge, steps), halo, sizeof halo),
                   human(last[v].mirrored, mirrored, sizeof mirrored), ok[v] ? "bit-equal" : "WRONG");
            if (csv)
                fprintf(csv, "%d,%s,%zu,%u,%d,%.3f,%.0f,%.0f,%.0f,%.0f\n", size, variants[v].name, last[v].block, edge,
                        steps, med, last[v].h2d, last[v].d2h, halo_bytes(size, edge, steps), last[v].mirrored);
        }
        fflush(stdout);
    }
    if (csv) fclose(csv);
    free(all);
    free(ref);
    MPI_Finalize();
    for (size_t v = 0; v < NVARIANTS; v++)
        if (!ok[v]) return 1;
    return 0;
}
