/* bench/tiles/plan.h -- the copies a careful hand-written multi-device program makes for a task
 * graph (kernels.h: chol_walk, mm_walk) with a given placement: it knows where every tile's latest
 * copy is, sends a tile to a device once and keeps it there until a task elsewhere overwrites it,
 * takes a tile another device wrote straight from that device, and brings every tile the tasks
 * wrote home once at the end. Input tiles start on the host; fresh outputs (matmul's C) start
 * zeroed on every device.
 *
 * The adsm programs only count these copies (the baseline each runtime version is held to); the
 * explicit programs make them (`copy` set): tiles_plan_prefetch first sends every tile the graph
 * will need from the host, before anything runs (a careful program does not wait for kernels to
 * send inputs), then tiles_plan_run makes the device-to-device copies where the graph needs them
 * and calls the program's launcher for each task. Runs on the main thread. */
#ifndef BENCH_TILES_PLAN_H
#define BENCH_TILES_PLAN_H

#include "bench/tiles/kernels.h"

#define PLAN_HOST 0x100u /* bit for the host copy, next to the devices' (bit d) */

/* One copy the plan makes: tile `tile` from device `from` to device `to` (-1: the host). */
typedef void (*tiles_copy_fn)(void *ctx, int tile, int from, int to);

typedef struct tiles_plan {
    unsigned *valid;        /* per tile: the copies holding its latest content */
    int count;
    uint64_t h2d, d2h, d2d; /* tiles moved */
    tiles_copy_fn copy;     /* NULL: count only */
    void *ctx;
    int skip_h2d, skip_d2d; /* copies of these kinds are counted, not made (another pass makes them) */
    tiles_task_fn launch;   /* the explicit programs' launcher, after a task's tiles are in place */
    void *launch_ctx;
    /* the runtime versions' rules, for counting what a hand-written program following them moves
     * (tiles_plan_count_rules): every output copied home right after its task; after a task,
     * its device drops the tiles it only read where another copy holds them */
    int write_through, drop_replicas;
} tiles_plan;

static inline tiles_plan tiles_plan_new(int count, unsigned initial) {
    tiles_plan p;
    memset(&p, 0, sizeof p);
    p.valid = calloc((size_t)count, sizeof(unsigned));
    p.count = count;
    if (!p.valid) tiles_die("tiles plan: out of memory");
    for (int t = 0; t < count; t++) p.valid[t] = initial;
    return p;
}

/* The plan of a graph: Cholesky's tiles all start on the host; matmul's C (the last third of its
 * numbering) starts zeroed everywhere. */
static inline tiles_plan tiles_plan_for(const tiles_options *o) {
    if (strcmp(o->bench, "cholesky") == 0) return tiles_plan_new(chol_tile_count(o), PLAN_HOST);
    int n = mm_tile_count(o);
    tiles_plan p = tiles_plan_new(3 * n, PLAN_HOST);
    for (int c = 2 * n; c < 3 * n; c++) p.valid[c] = PLAN_HOST | ((1u << o->devices) - 1u);
    return p;
}

static inline void tiles_plan_copy(tiles_plan *p, int t, int from, int to, int skip) {
    if (p->copy && !skip) p->copy(p->ctx, t, from, to);
}

/* Tile t must be current on device d (for reading, or for a read-modify-write). */
static inline void tiles_plan_need(tiles_plan *p, int t, int d) {
    unsigned bit = 1u << d;
    if (t < 0 || (p->valid[t] & bit)) return;
    if (p->valid[t] & PLAN_HOST) {
        p->h2d++;
        tiles_plan_copy(p, t, -1, d, p->skip_h2d);
    } else {
        p->d2d++;
        tiles_plan_copy(p, t, __builtin_ctz(p->valid[t]), d, p->skip_d2d);
    }
    p->valid[t] |= bit;
}

/* One task: its tiles current on its device, then (explicit programs) its launch; the tile it
 * writes is then current there alone. */
static inline void tiles_plan_task(void *ctx, const tiles_task *k) {
    tiles_plan *p = (tiles_plan *)ctx;
    tiles_plan_need(p, k->out, k->dev);
    tiles_plan_need(p, k->in1, k->dev);
    tiles_plan_need(p, k->in2, k->dev);
    if (p->launch) p->launch(p->launch_ctx, k);
    unsigned bit = 1u << k->dev;
    p->valid[k->out] = bit;
    if (p->write_through) {
        p->d2h++;
        p->valid[k->out] |= PLAN_HOST;
    }
    int read[] = {k->in1, k->in2};
    for (int i = 0; i < 2 && p->drop_replicas; i++)
        if (read[i] >= 0 && read[i] != k->out && (p->valid[read[i]] & ~bit)) p->valid[read[i]] &= ~bit;
}

static inline void tiles_plan_walk(const tiles_options *o, tiles_plan *p) {
    if (strcmp(o->bench, "cholesky") == 0) chol_walk(o, tiles_plan_task, p);
    else mm_walk(o, tiles_plan_task, p);
}

/* The end: every tile not current on the host comes home once, from its lowest holder. */
static inline void tiles_plan_finish(tiles_plan *p) {
    for (int t = 0; t < p->count; t++)
        if (!(p->valid[t] & PLAN_HOST)) {
            p->d2h++;
            tiles_plan_copy(p, t, __builtin_ctz(p->valid[t]), -1, 0);
            p->valid[t] |= PLAN_HOST;
        }
    free(p->valid);
    p->valid = NULL;
}

/* The copies only, counted. */
static inline tiles_plan tiles_plan_count(const tiles_options *o) {
    tiles_plan p = tiles_plan_for(o);
    tiles_plan_walk(o, &p);
    tiles_plan_finish(&p);
    return p;
}

/* The copies a hand-written program makes that follows the version's rules too (write-through for
 * v1-v3, dropped replicas for v1-v2), counted: what each version is held to. */
static inline tiles_plan tiles_plan_count_rules(const tiles_options *o) {
    tiles_plan p = tiles_plan_for(o);
    p.write_through = tiles_version(o) <= 3;
    p.drop_replicas = tiles_version(o) <= 2;
    tiles_plan_walk(o, &p);
    tiles_plan_finish(&p);
    return p;
}

/* The explicit programs: every host-to-device copy first, then the graph with its
 * device-to-device copies and launches, then the copies home. Returns the tiles moved. */
static inline tiles_plan tiles_plan_execute(const tiles_options *o, tiles_copy_fn copy, void *ctx, tiles_task_fn launch,
                                            void *launch_ctx) {
    tiles_plan pre = tiles_plan_for(o);
    pre.copy = copy, pre.ctx = ctx, pre.skip_d2d = 1;
    tiles_plan_walk(o, &pre); /* the same decisions as the run below: the walk is deterministic */
    free(pre.valid);
    tiles_plan p = tiles_plan_for(o);
    p.copy = copy, p.ctx = ctx, p.skip_h2d = 1, p.launch = launch, p.launch_ctx = launch_ctx;
    tiles_plan_walk(o, &p);
    if (adsm_sync() != ADSM_OK) tiles_die(adsm_last_error());
    tiles_plan_finish(&p);
    return p;
}

/* ---- the explicit programs' tiles -------------------------------------------------------------- */
/* Every tile on the host (one adsm_host_alloc block) and on every device (one adsm_dev_alloc_on
 * buffer per tile and device): host[t], dev[d][t]. */
typedef struct tiles_buffers {
    int count, devices, tile_size; /* tile_size: elements per side, for the launchers */
    size_t bytes;
    void *host_block;
    void **host, ***dev;
} tiles_buffers;

static inline tiles_buffers tiles_buffers_new(const tiles_options *o, int count, size_t bytes) {
    tiles_buffers b = {count, o->devices, o->tile_size, bytes, adsm_host_alloc(bytes * (size_t)count),
                       calloc((size_t)count, sizeof(void *)), calloc((size_t)o->devices, sizeof(void **))};
    if (!b.host_block || !b.host || !b.dev) tiles_die("tiles: out of memory");
    for (int t = 0; t < count; t++) b.host[t] = (unsigned char *)b.host_block + (size_t)t * bytes;
    for (int d = 0; d < o->devices; d++) {
        if (!(b.dev[d] = calloc((size_t)count, sizeof(void *)))) tiles_die("tiles: out of memory");
        for (int t = 0; t < count; t++)
            if (!(b.dev[d][t] = adsm_dev_alloc_on(d, bytes))) tiles_die(adsm_last_error());
    }
    return b;
}

static inline void tiles_buffers_free(tiles_buffers *b) {
    for (int d = 0; d < b->devices; d++) {
        for (int t = 0; t < b->count; t++) adsm_dev_free(b->dev[d][t]);
        free(b->dev[d]);
    }
    adsm_host_free(b->host_block);
    free(b->host);
    free(b->dev);
}

/* A tiles_copy_fn over tiles_buffers: host to device, device to host, or device to device. */
static inline void tiles_buffers_copy(void *ctx, int t, int from, int to) {
    tiles_buffers *b = (tiles_buffers *)ctx;
    adsm_result r = from < 0 ? adsm_copy_to_device(b->dev[to][t], b->host[t], b->bytes)
                    : to < 0 ? adsm_copy_from_device(b->host[t], b->dev[from][t], b->bytes)
                             : adsm_memcpy(b->dev[to][t], b->dev[from][t], b->bytes);
    if (r != ADSM_OK) tiles_die(adsm_last_error());
}

/* Two lines under the adsm programs' table: the tiles the plan moves, and those a program
 * following the version's rules moves (the same fields, for bench/tiles/run.sh's awk). */
static inline void tiles_plan_report(const tiles_options *o) {
    tiles_plan p = tiles_plan_count(o), r = tiles_plan_count_rules(o);
    printf("explicit plan (same placement, counted): h2d_tiles %llu d2h_tiles %llu d2d_tiles %llu\n",
           (unsigned long long)p.h2d, (unsigned long long)p.d2h, (unsigned long long)p.d2d);
    printf("explicit rules (version's too, counted): h2d_tiles %llu d2h_tiles %llu d2d_tiles %llu\n",
           (unsigned long long)r.h2d, (unsigned long long)r.d2h, (unsigned long long)r.d2d);
}

#endif /* BENCH_TILES_PLAN_H */
