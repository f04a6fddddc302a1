/* bench/blocktree_lookup.c -- cost of the fault-path lookup: address -> object -> block.
 *
 * A standalone program (not a test) that times adsm__tree_find plus adsm__tree_block_index for
 * random addresses, with 1, 1K, 64K and 1M 4 KiB blocks laid out either as (a) one object holding
 * every block or (b) objects of 16 blocks each. Layout (a) should cost the same at every size (one
 * tree node); layout (b) should grow with log2(objects). Each cell is the median of 5 runs, timed
 * with clock_gettime(CLOCK_MONOTONIC), and the result is printed as a markdown table. It runs in
 * ordinary process context and finishes in a few seconds.
 *
 * Build: gcc -std=c11 -O2 -I. bench/blocktree_lookup.c -o /tmp/blocktree_lookup */
#include "adsm_impl/common.h"
#include "adsm_impl/blocktree.h"
#include <time.h>

#define BLOCK_SHIFT 12u
#define LOOKUPS ((size_t)1 << 21) /* per run; enough to wash out timer overhead */
#define RUNS 5
#define BASE_ADDR ((uintptr_t)0x100000000000ull)

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct {
    adsm__tree tree;
    adsm__tree_node *objects;
    size_t object_count;
} layout;

/* Builds objects of blocks_per_object blocks (the last one may be shorter), with a one-block gap
 * between objects as separate allocations would have. */
static void layout_build(layout *l, size_t blocks, size_t blocks_per_object) {
    size_t stride = (blocks_per_object + 1) << BLOCK_SHIFT;
    l->object_count = (blocks + blocks_per_object - 1) / blocks_per_object;
    l->objects = calloc(l->object_count, sizeof(adsm__tree_node));
    if (!l->objects) abort();
    adsm__tree_init(&l->tree);
    for (size_t i = 0; i < l->object_count; i++) {
        size_t here = ADSM__MIN(blocks_per_object, blocks - i * blocks_per_object);
        l->objects[i].start = BASE_ADDR + i * stride;
        l->objects[i].end = l->objects[i].start + (here << BLOCK_SHIFT);
        if (adsm__tree_insert(&l->tree, &l->objects[i]) != 0) abort();
    }
}

/* Random addresses that all hit some object: pick an object, then a byte inside it. */
static void make_addresses(const layout *l, uintptr_t *addrs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const adsm__tree_node *o = &l->objects[rng_next() % l->object_count];
        addrs[i] = o->start + (uintptr_t)(rng_next() % (o->end - o->start));
    }
}

/* One timed pass; the checksum keeps the compiler from dropping the lookups. */
static double time_lookups(const layout *l, const uintptr_t *addrs, size_t n, size_t *checksum) {
    size_t sum = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        const adsm__tree_node *o = adsm__tree_find(&l->tree, addrs[i]);
        sum += adsm__tree_block_index(o, addrs[i], BLOCK_SHIFT) + (size_t)(o - l->objects);
    }
    double elapsed = now_ns() - t0;
    *checksum += sum;
    return elapsed / (double)n;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ns_per_lookup(size_t blocks, size_t blocks_per_object, uintptr_t *addrs, size_t *checksum,
                                   size_t *objects_out) {
    layout l;
    double runs[RUNS];
    layout_build(&l, blocks, blocks_per_object);
    make_addresses(&l, addrs, LOOKUPS);
    time_lookups(&l, addrs, LOOKUPS, checksum); /* warm caches and the branch predictor */
    for (int r = 0; r < RUNS; r++) runs[r] = time_lookups(&l, addrs, LOOKUPS, checksum);
    qsort(runs, RUNS, sizeof runs[0], compare_doubles);
    *objects_out = l.object_count;
    free(l.objects);
    return runs[RUNS / 2];
}

int main(void) {
    static const size_t block_counts[] = {1, 1024, 65536, 1048576};
    uintptr_t *addrs = malloc(LOOKUPS * sizeof(uintptr_t));
    size_t checksum = 0;
    if (!addrs) return 1;
    printf("| blocks | (a) 1 object: ns/lookup | (b) objects of 16 blocks | (b) ns/lookup |\n");
    printf("|-------:|------------------------:|-------------------------:|--------------:|\n");
    for (size_t i = 0; i < sizeof block_counts / sizeof block_counts[0]; i++) {
        size_t blocks = block_counts[i], objects_a, objects_b;
        double a = median_ns_per_lookup(blocks, blocks, addrs, &checksum, &objects_a);
        double b = median_ns_per_lookup(blocks, 16, addrs, &checksum, &objects_b);
        printf("| %zu | %.2f | %zu | %.2f |\n", blocks, a, objects_b, b);
    }
    fprintf(stderr, "(checksum %zu; %zu lookups per run, median of %d runs)\n", checksum, LOOKUPS, RUNS);
    free(addrs);
    return 0;
}
