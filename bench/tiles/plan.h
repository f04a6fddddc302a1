/* bench/tiles/plan.h -- the copies a careful hand-written multi-device program needs for the
 * same task graph and the same placement: the baseline each adsm version is held to ("moves no
 * more than an explicit program with the same placement"). adsm's explicit path drives device 0
 * only, so this program is counted, not run: it knows where every tile's latest copy is, sends a
 * tile to a device once and keeps it there until a task elsewhere overwrites it, takes a tile
 * another device wrote straight from that device, and brings every tile the tasks wrote home
 * once at the end. Input tiles start on the host; fresh outputs (matmul's C) start zeroed on
 * every device. Runs on the main thread; no adsm call. */
#ifndef BENCH_TILES_PLAN_H
#define BENCH_TILES_PLAN_H

#include "bench/tiles/common.h"

#define PLAN_HOST 0x100u /* bit for the host copy, next to the devices' (bit d) */

typedef struct tiles_plan {
    unsigned *valid;   /* per tile: the copies holding its latest content */
    uint64_t h2d, d2h, d2d; /* tiles moved */
} tiles_plan;

static inline tiles_plan tiles_plan_new(int count, unsigned initial) {
    tiles_plan p = {calloc((size_t)count, sizeof(unsigned)), 0, 0, 0};
    if (!p.valid) tiles_die("tiles plan: out of memory");
    for (int t = 0; t < count; t++) p.valid[t] = initial;
    return p;
}

/* Tile t must be current on device d (for reading, or for a read-modify-write). */
static inline void tiles_plan_need(tiles_plan *p, int t, int d) {
    unsigned bit = 1u << d;
    if (p->valid[t] & bit) return;
    if (p->valid[t] & PLAN_HOST) p->h2d++;
    else p->d2d++;
    p->valid[t] |= bit;
}

/* A task on device d wrote tile t: every other copy is stale. */
static inline void tiles_plan_wrote(tiles_plan *p, int t, int d) { p->valid[t] = 1u << d; }

/* The end: every tile not current on the host comes home once. */
static inline void tiles_plan_finish(tiles_plan *p, int count) {
    for (int t = 0; t < count; t++)
        if (!(p->valid[t] & PLAN_HOST)) p->d2h++, p->valid[t] |= PLAN_HOST;
    free(p->valid);
    p->valid = NULL;
}

/* The device of a task writing tile (i, j), as tiles_device() places it, with the plan's own turn
 * counter (v1 hands tasks out in turn). */
static inline int tiles_plan_device(const tiles_options *o, int *turn, int i, int j) {
    return tiles_version(o) == 1 ? (*turn)++ % o->devices : tiles_owner(o, i, j);
}

/* One line under the program's table: the plan's tile counts. */
static inline void tiles_plan_report(const tiles_plan *p) {
    printf("explicit plan (same placement, counted): h2d_tiles %llu d2h_tiles %llu d2d_tiles %llu\n",
           (unsigned long long)p->h2d, (unsigned long long)p->d2h, (unsigned long long)p->d2d);
}

#endif /* BENCH_TILES_PLAN_H */
