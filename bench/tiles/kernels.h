/* bench/tiles/kernels.h -- the tile kernels and task graphs of the tiled benchmarks (issue 12's
 * groundwork): the right-looking tiled Cholesky factorization of the multi-GPU paper
 * (shared/papers/multigpu-runtime-transfer-management.txt, Tables 5.2-5.5: CHOL, TRSM, SYRK and
 * GEMM tasks on a T x T matrix of tiles) and the tiled matmul of the Nanos6 paper
 * (shared/papers/nanos6-device-coherence-directory.txt: C[i][j] += A[i][k] * B[k][j] tasks).
 *
 * Shared by the adsm versions (cholesky.c, matmul.c) and the explicit ones (cholesky_explicit.c,
 * matmul_explicit.c): the kernels (single-source, ADSM_KERNEL_DEF: the same body runs on the emu
 * and host backends and is compiled by NVRTC on cuda), the task graphs (launched with whatever tile
 * pointers the caller holds: shared objects or device buffers), the deterministic inputs, the CPU
 * references and the checks. Included after adsm.h; runs on the main thread, normal context.
 *
 * A tile is B x B elements, row-major, and each tile is its own object (one adsm_alloc or one
 * adsm_dev_alloc per tile), so that a runtime with several devices can place and replicate tiles
 * one by one. Cholesky keeps only the lower triangle of tiles, T (T + 1) / 2 of them. */
#ifndef BENCH_TILES_KERNELS_H
#define BENCH_TILES_KERNELS_H

#include "bench/tiles/common.h"

/* ---- Cholesky tile kernels (double) ---------------------------------------------------------- */

/* POTRF: a := L with L L^T = a, lower triangle, in place (the upper triangle is left as it was).
 * One thread: the columns depend on each other and the kernel DSL has no barrier; POTRF is one
 * task per tile row, the other kernels carry the work. */
ADSM_KERNEL_DEF(chol_potrf, (ADSM_INOUT(double, a), ADSM_VALUE(int, b)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t != 0) continue;
        for (int j = 0; j < b; j++) {
            double d = a[(size_t)j * b + j];
            for (int l = 0; l < j; l++) d -= a[(size_t)j * b + l] * a[(size_t)j * b + l];
            d = sqrt(d);
            a[(size_t)j * b + j] = d;
            for (int r = j + 1; r < b; r++) {
                double s = a[(size_t)r * b + j];
                for (int l = 0; l < j; l++) s -= a[(size_t)r * b + l] * a[(size_t)j * b + l];
                a[(size_t)r * b + j] = s / d;
            }
        }
    }
});

/* TRSM: a := a L^-T, L the lower triangle of l. Each row x of a solves L x^T = a_row^T by forward
 * substitution, independently of the others: one thread per row. */
ADSM_KERNEL_DEF(chol_trsm, (ADSM_INOUT(double, a), ADSM_IN(double, l), ADSM_VALUE(int, b)), g, {
    ADSM_FOR_EACH_THREAD(g, r) {
        if (r >= (size_t)b) continue;
        double *x = a + r * (size_t)b;
        for (int c = 0; c < b; c++) {
            double s = x[c];
            for (int m = 0; m < c; m++) s -= l[(size_t)c * b + m] * x[m];
            x[c] = s / l[(size_t)c * b + c];
        }
    }
});

/* SYRK: c := c - a a^T on the lower triangle (c is a diagonal tile: POTRF reads only that half).
 * One thread per element. */
ADSM_KERNEL_DEF(chol_syrk, (ADSM_INOUT(double, c), ADSM_IN(double, a), ADSM_VALUE(int, b)), g, {
    ADSM_FOR_EACH_THREAD(g, e) {
        if (e >= (size_t)b * b) continue; /* before dividing: b may be 0 */
        size_t r = e / (size_t)b, col = e % (size_t)b;
        if (col > r) continue;
        double s = 0.0;
        for (int l = 0; l < b; l++) s += a[r * b + l] * a[col * b + l];
        c[r * b + col] -= s;
    }
});

/* GEMM: c := c - a bt^T (c below the diagonal: A_ij -= A_ik A_jk^T). One thread per element. */
ADSM_KERNEL_DEF(chol_gemm, (ADSM_INOUT(double, c), ADSM_IN(double, a), ADSM_IN(double, bt), ADSM_VALUE(int, b)),
                g, {
    ADSM_FOR_EACH_THREAD(g, e) {
        if (e >= (size_t)b * b) continue; /* before dividing: b may be 0 */
        size_t r = e / (size_t)b, col = e % (size_t)b;
        double s = 0.0;
        for (int l = 0; l < b; l++) s += a[r * b + l] * bt[col * b + l];
        c[r * b + col] -= s;
    }
});

/* ---- matmul tile kernel (float) -------------------------------------------------------------- */

/* c := c + a b, one thread per element of c. */
ADSM_KERNEL_DEF(mm_tile, (ADSM_INOUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(int, n)), g, {
    ADSM_FOR_EACH_THREAD(g, e) {
        if (e >= (size_t)n * n) continue; /* before dividing: n may be 0 */
        size_t r = e / (size_t)n, col = e % (size_t)n;
        float s = 0.0f;
        for (int l = 0; l < n; l++) s += a[r * n + l] * b[(size_t)l * n + col];
        c[r * n + col] += s;
    }
});

/* Starts adsm with o->devices devices (emu: ADSM_EMU_DEVICES; the rest of the configuration comes
 * from the environment, as for any adsm program) and refuses to run on fewer. */
static inline void tiles_start(const tiles_options *o) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.emu_devices = (unsigned)o->devices;
    cfg.write_through = tiles_version(o) <= 3;
    cfg.drop_replicas = tiles_version(o) <= 2;
    if (adsm_init(&cfg) != ADSM_OK) tiles_die(adsm_last_error());
    if (adsm_device_count() != o->devices) {
        fprintf(stderr, "%s: %d devices asked for, the %s backend drives %d\n", o->bench, o->devices,
                adsm_backend_name(), adsm_device_count());
        exit(1);
    }
}

/* Compiles every kernel now on cuda (NVRTC), not inside the first timed run. */
static inline void tiles_load_kernels(void) {
    if (ADSM_PREPARE(chol_potrf) != ADSM_OK || ADSM_PREPARE(chol_trsm) != ADSM_OK ||
        ADSM_PREPARE(chol_syrk) != ADSM_OK || ADSM_PREPARE(chol_gemm) != ADSM_OK || ADSM_PREPARE(mm_tile) != ADSM_OK)
        tiles_die(adsm_last_error());
}

/* One thread per element of a tile, and one per row. */
static inline adsm_grid tiles_grid_elements(int b) {
    return adsm_grid_1d((uint32_t)(((size_t)b * b + 255) / 256), 256);
}

static inline adsm_grid tiles_grid_rows(int b) { return adsm_grid_1d((uint32_t)((b + 63) / 64), 64); }

/* ---- Cholesky: layout, task graph, input, reference, check ----------------------------------- */

/* Tile (i, j), j <= i, of the lower triangle, in the order rows are stored: row i starts at
 * i (i + 1) / 2. */
static inline int chol_at(int i, int j) { return i * (i + 1) / 2 + j; }

static inline int chol_tile_count(const tiles_options *o) { return o->tiles * (o->tiles + 1) / 2; }

static inline size_t chol_tile_bytes(const tiles_options *o) {
    return (size_t)o->tile_size * o->tile_size * sizeof(double);
}

/* The table's header line: the shape of the problem and the backend. */
static inline const char *chol_shape(const tiles_options *o) {
    static char shape[160];
    snprintf(shape, sizeof shape, "%d x %d tiles of %d x %d doubles (%d lower tiles), %s backend", o->tiles,
             o->tiles, o->tile_size, o->tile_size, chol_tile_count(o), adsm_backend_name());
    return shape;
}

/* One task of the graph: its kernel, its device, the tile it writes and those it reads (tile
 * numbers; -1: none). Matmul numbers A's tiles, then B's, then C's (mm_walk). */
typedef enum { TILES_POTRF, TILES_TRSM, TILES_GEMM, TILES_SYRK, TILES_MM } tiles_kind;
typedef struct tiles_task {
    tiles_kind kind;
    int dev, out, in1, in2;
} tiles_task;

typedef void (*tiles_task_fn)(void *ctx, const tiles_task *task);

/* The right-looking tiled Cholesky, in the paper's task order: for each step k, CHOL of the
 * diagonal tile, TRSM of the tiles below it, then the trailing update row by row (SYRK on the
 * diagonal, GEMM left of it). Each task runs on tiles_place() of the tile it writes; `run` gets
 * the tasks in order (to launch them, or to count what they need). */
static inline void chol_walk(const tiles_options *o, tiles_task_fn run, void *ctx) {
    int t = o->tiles, turn = 0;
    for (int k = 0; k < t; k++) {
        run(ctx, &(tiles_task){TILES_POTRF, tiles_place(o, &turn, k, k), chol_at(k, k), -1, -1});
        for (int i = k + 1; i < t; i++)
            run(ctx, &(tiles_task){TILES_TRSM, tiles_place(o, &turn, i, k), chol_at(i, k), chol_at(k, k), -1});
        for (int i = k + 1; i < t; i++) {
            for (int j = k + 1; j < i; j++)
                run(ctx, &(tiles_task){TILES_GEMM, tiles_place(o, &turn, i, j), chol_at(i, j), chol_at(i, k),
                                       chol_at(j, k)});
            run(ctx, &(tiles_task){TILES_SYRK, tiles_place(o, &turn, i, i), chol_at(i, i), chol_at(i, k), -1});
        }
    }
}

/* Launches one Cholesky task on tile[] (the tiles' pointers: shared objects, or the buffers of
 * the task's device). Asynchronous: errors surface at adsm_sync. */
static inline void chol_launch(double *const *tile, int b, const tiles_task *k) {
    switch (k->kind) {
    case TILES_POTRF: ADSM_CALL_ON(k->dev, chol_potrf, adsm_grid_1d(1, 1), tile[k->out], b); break;
    case TILES_TRSM: ADSM_CALL_ON(k->dev, chol_trsm, tiles_grid_rows(b), tile[k->out], tile[k->in1], b); break;
    case TILES_GEMM:
        ADSM_CALL_ON(k->dev, chol_gemm, tiles_grid_elements(b), tile[k->out], tile[k->in1], tile[k->in2], b);
        break;
    case TILES_SYRK: ADSM_CALL_ON(k->dev, chol_syrk, tiles_grid_elements(b), tile[k->out], tile[k->in1], b); break;
    default: break;
    }
}

typedef struct chol_tiles {
    double *const *tile;
    int b;
} chol_tiles;

static inline void chol_launch_task(void *ctx, const tiles_task *task) {
    const chol_tiles *c = (const chol_tiles *)ctx;
    chol_launch(c->tile, c->b, task);
}

/* The whole factorization on tile[] (shared objects, or one device's buffers). Asynchronous: the
 * caller syncs. */
static inline void chol_factor(const tiles_options *o, double *const *tile) {
    chol_tiles c = {tile, o->tile_size};
    chol_walk(o, chol_launch_task, &c);
}

/* The input, element (r, c) of the n x n matrix: symmetric, entries in [-1, 1) off the diagonal
 * and n on it, so strictly diagonally dominant with a positive diagonal, hence positive definite. */
static inline double chol_input(int n, int r, int c) {
    if (r == c) return (double)n;
    int hi = r > c ? r : c, lo = r > c ? c : r;
    return tiles_unit(0xc401e5c1ull, (uint64_t)hi * (uint64_t)n + (uint64_t)lo);
}

/* Writes the input into tile (i, j) (all of it, upper half of diagonal tiles included). */
static inline void chol_fill_tile(const tiles_options *o, double *tile, int i, int j) {
    int b = o->tile_size, n = o->tiles * b;
    for (int r = 0; r < b; r++)
        for (int c = 0; c < b; c++) tile[(size_t)r * b + c] = chol_input(n, i * b + r, j * b + c);
}

static inline void chol_fill(const tiles_options *o, double *const *tile) {
    for (int i = 0; i < o->tiles; i++)
        for (int j = 0; j <= i; j++) chol_fill_tile(o, tile[chol_at(i, j)], i, j);
}

/* Copies the lower triangle of the factored tiles into a dense n x n row-major matrix (the upper
 * triangle stays as the caller left it). On shared tiles, this is where the result comes home. */
static inline void chol_gather(const tiles_options *o, double *const *tile, double *dense) {
    int b = o->tile_size, n = o->tiles * b;
    for (int i = 0; i < o->tiles; i++)
        for (int j = 0; j <= i; j++)
            for (int r = 0; r < b; r++)
                for (int c = 0; c < (i == j ? r + 1 : b); c++)
                    dense[(size_t)(i * b + r) * n + (size_t)(j * b + c)] = tile[chol_at(i, j)][(size_t)r * b + c];
}

/* The reference: the dense, unblocked Cholesky of the same input on the CPU (a different order of
 * operations than the tiles', so the check tolerates rounding). Lower triangle, row-major, malloc'd. */
static inline double *chol_reference(const tiles_options *o) {
    int n = o->tiles * o->tile_size;
    double *l = calloc((size_t)n * n, sizeof *l);
    if (!l) tiles_die("cholesky: out of memory for the reference");
    for (int j = 0; j < n; j++) {
        double d = chol_input(n, j, j);
        for (int k = 0; k < j; k++) d -= l[(size_t)j * n + k] * l[(size_t)j * n + k];
        d = sqrt(d);
        l[(size_t)j * n + j] = d;
        for (int r = j + 1; r < n; r++) {
            double s = chol_input(n, r, j);
            for (int k = 0; k < j; k++) s -= l[(size_t)r * n + k] * l[(size_t)j * n + k];
            l[(size_t)r * n + j] = s / d;
        }
    }
    return l;
}

/* Every element of the lower triangle within 1e-9 (relative above 1) of the reference; the
 * factor of a well-conditioned matrix agrees to about 1e-14, a wrong kernel misses by far more. */
static inline int chol_check(const tiles_options *o, const double *got, const double *want) {
    int n = o->tiles * o->tile_size;
    size_t bad = 0;
    for (int r = 0; r < n; r++)
        for (int c = 0; c <= r; c++) bad += !tiles_close(got[(size_t)r * n + c], want[(size_t)r * n + c], 1e-9);
    if (bad) fprintf(stderr, "cholesky: %zu of %zu elements of L differ from the reference\n", bad, (size_t)n * (n + 1) / 2);
    return bad == 0;
}

/* ---- matmul: layout, task graph, input, reference, check ------------------------------------- */

static inline int mm_tile_count(const tiles_options *o) { return o->tiles * o->tiles; }

static inline size_t mm_tile_bytes(const tiles_options *o) {
    return (size_t)o->tile_size * o->tile_size * sizeof(float);
}

/* The table's header line: the shape of the problem and the backend. */
static inline const char *mm_shape(const tiles_options *o) {
    static char shape[160];
    snprintf(shape, sizeof shape, "C += A B, %d x %d tiles of %d x %d floats (%d tiles per matrix), %s backend",
             o->tiles, o->tiles, o->tile_size, o->tile_size, mm_tile_count(o), adsm_backend_name());
    return shape;
}

/* The Nanos6 paper's loop nest: one task per (i, j, k), C[i][j] += A[i][k] * B[k][j], on the
 * owner of C[i][j]. Tiles are numbered A's (row-major), then B's, then C's: the task writes C's
 * tile 2n + i t + j and reads A's i t + k and B's n + k t + j (n = t^2). */
static inline void mm_walk(const tiles_options *o, tiles_task_fn run, void *ctx) {
    int t = o->tiles, n = t * t, turn = 0;
    for (int i = 0; i < t; i++)
        for (int j = 0; j < t; j++)
            for (int k = 0; k < t; k++)
                run(ctx, &(tiles_task){TILES_MM, tiles_place(o, &turn, i, j), 2 * n + i * t + j, i * t + k,
                                       n + k * t + j});
}

/* Launches one matmul task; tile[] holds A's, B's and C's tile pointers in mm_walk's numbering. */
static inline void mm_launch(float *const *tile, int b, const tiles_task *k) {
    ADSM_CALL_ON(k->dev, mm_tile, tiles_grid_elements(b), tile[k->out], tile[k->in1], tile[k->in2], b);
}

typedef struct mm_tiles {
    float **tile; /* 3 t^2: A's, B's, C's */
    int b;
} mm_tiles;

static inline void mm_launch_task(void *ctx, const tiles_task *task) {
    const mm_tiles *m = (const mm_tiles *)ctx;
    mm_launch(m->tile, m->b, task);
}

/* Every task on row-major arrays of tile pointers. Asynchronous: the caller syncs. */
static inline void mm_multiply(const tiles_options *o, float *const *c, float *const *a, float *const *b) {
    int n = mm_tile_count(o);
    float **all = malloc(3 * (size_t)n * sizeof *all);
    if (!all) tiles_die("matmul: out of memory");
    for (int t = 0; t < n; t++) all[t] = a[t], all[n + t] = b[t], all[2 * n + t] = c[t];
    mm_tiles m = {all, o->tile_size};
    mm_walk(o, mm_launch_task, &m);
    free(all);
}

/* Element (r, c) of the input matrix `which` (0: A, 1: B), in [-1, 1). */
static inline float mm_input(int n, int which, int r, int c) {
    return (float)tiles_unit(0x3a7b1cull + (uint64_t)which, (uint64_t)r * (uint64_t)n + (uint64_t)c);
}

static inline void mm_fill(const tiles_options *o, float *const *tile, int which) {
    int b = o->tile_size, n = o->tiles * b;
    for (int i = 0; i < o->tiles; i++)
        for (int j = 0; j < o->tiles; j++)
            for (int r = 0; r < b; r++)
                for (int c = 0; c < b; c++)
                    tile[i * o->tiles + j][(size_t)r * b + c] = mm_input(n, which, i * b + r, j * b + c);
}

/* The tiles of C into a dense n x n row-major matrix. On shared tiles, the result comes home here. */
static inline void mm_gather(const tiles_options *o, float *const *tile, float *dense) {
    int b = o->tile_size, n = o->tiles * b;
    for (int i = 0; i < o->tiles; i++)
        for (int j = 0; j < o->tiles; j++)
            for (int r = 0; r < b; r++)
                memcpy(dense + (size_t)(i * b + r) * n + (size_t)j * b, tile[i * o->tiles + j] + (size_t)r * b,
                       (size_t)b * sizeof *dense);
}

/* The reference: the dense product in double on the CPU. Row-major n x n, malloc'd. */
static inline double *mm_reference(const tiles_options *o) {
    int n = o->tiles * o->tile_size;
    double *c = calloc((size_t)n * n, sizeof *c), *brow = malloc((size_t)n * sizeof *brow);
    if (!c || !brow) tiles_die("matmul: out of memory for the reference");
    for (int l = 0; l < n; l++) {
        for (int col = 0; col < n; col++) brow[col] = mm_input(n, 1, l, col);
        for (int r = 0; r < n; r++) {
            double a = mm_input(n, 0, r, l);
            for (int col = 0; col < n; col++) c[(size_t)r * n + col] += a * brow[col];
        }
    }
    free(brow);
    return c;
}

/* Every element within 1e-3 (relative above 1) of the double reference: float sums of n terms in
 * [-1, 1) drift by about 1e-5 here, a wrong kernel by the size of a term (about 0.3). */
static inline int mm_check(const tiles_options *o, const float *got, const double *want) {
    size_t n = (size_t)o->tiles * o->tile_size, bad = 0;
    for (size_t e = 0; e < n * n; e++) bad += !tiles_close(got[e], want[e], 1e-3);
    if (bad) fprintf(stderr, "matmul: %zu of %zu elements of C differ from the reference\n", bad, n * n);
    return bad == 0;
}

#endif /* BENCH_TILES_KERNELS_H */
