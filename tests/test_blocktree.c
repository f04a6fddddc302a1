/* tests/test_blocktree.c -- white-box tests of the address-range AVL tree (adsm_impl/blocktree.h).
 *
 * The tree is driven with random inserts (overlapping ones included, which must be rejected),
 * removes and lookups, and every answer is compared with a reference model: a sorted array of the
 * live ranges. After each batch the tree's structure is checked in full (parent links, order,
 * stored heights, AVL balance, count). Runs in ordinary test-process context. */
#include "adsm_impl/common.h"
#include "adsm_impl/blocktree.h"
#include <criterion/criterion.h>

/* ---- deterministic random numbers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

/* log2 without libm, so the plain gcc command line needs no -lm. */
static double log2_approx(double x) {
    double frac = 0, bit = 0.5;
    int whole = 0;
    while (x >= 2) x /= 2, whole++;
    for (int i = 0; i < 40; i++, bit /= 2) {
        x *= x;
        if (x >= 2) x /= 2, frac += bit;
    }
    return whole + frac;
}

/* ---- reference model: live ranges sorted by start --------------------------------------------- */

typedef struct {
    uintptr_t start, end;
    adsm__tree_node *node;
} ref_range;

typedef struct {
    ref_range *items;
    size_t count;
} ref_model;

/* Index of the first range whose start is > addr. */
static size_t ref_upper(const ref_model *m, uintptr_t addr) {
    size_t lo = 0, hi = m->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (m->items[mid].start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static adsm__tree_node *ref_floor(const ref_model *m, uintptr_t addr) {
    size_t i = ref_upper(m, addr);
    return i ? m->items[i - 1].node : NULL;
}

static adsm__tree_node *ref_find(const ref_model *m, uintptr_t addr) {
    size_t i = ref_upper(m, addr);
    return (i && addr < m->items[i - 1].end) ? m->items[i - 1].node : NULL;
}

static adsm__tree_node *ref_ceil(const ref_model *m, uintptr_t addr) {
    size_t i = ref_upper(m, addr);
    if (i && m->items[i - 1].start == addr) return m->items[i - 1].node;
    return i < m->count ? m->items[i].node : NULL;
}

static int ref_overlaps_any(const ref_model *m, uintptr_t start, uintptr_t end) {
    size_t i = ref_upper(m, end - 1); /* candidates: ranges starting at or before end-1 */
    return i && m->items[i - 1].end > start;
}

static void ref_insert(ref_model *m, adsm__tree_node *n) {
    size_t i = ref_upper(m, n->start);
    memmove(&m->items[i + 1], &m->items[i], (m->count - i) * sizeof(ref_range));
    m->items[i] = (ref_range){n->start, n->end, n};
    m->count++;
}

static void ref_remove_at(ref_model *m, size_t i) {
    memmove(&m->items[i], &m->items[i + 1], (m->count - i - 1) * sizeof(ref_range));
    m->count--;
}

/* ---- structural checks ----------------------------------------------------------------------- */

/* Returns the subtree height after asserting every invariant below n. */
static int check_subtree(const adsm__tree_node *n, const adsm__tree_node *parent, size_t *count) {
    if (!n) return 0;
    cr_assert_eq(n->parent, parent, "broken parent link");
    cr_assert_gt(n->end, n->start);
    if (n->left) cr_assert_leq(n->left->end, n->start, "left child not before its parent");
    if (n->right) cr_assert_geq(n->right->start, n->end, "right child not after its parent");
    int lh = check_subtree(n->left, n, count);
    int rh = check_subtree(n->right, n, count);
    cr_assert(lh - rh <= 1 && rh - lh <= 1, "AVL balance violated");
    cr_assert_eq(n->height, 1 + (lh > rh ? lh : rh), "stale height");
    (*count)++;
    return n->height;
}

static void check_tree(const adsm__tree *t, const ref_model *m) {
    size_t count = 0;
    int height = check_subtree(t->root, NULL, &count);
    cr_assert_eq(count, t->count);
    cr_assert_eq(t->count, m->count);
    cr_assert_leq((double)height, 1.45 * log2_approx((double)t->count + 2), "tree too tall: %d for %zu nodes",
                  height, t->count);
    /* In-order iteration, both directions, equals the reference order. */
    size_t i = 0;
    for (adsm__tree_node *n = adsm__tree_first(t); n; n = adsm__tree_next(n), i++) {
        cr_assert_lt(i, m->count);
        cr_assert_eq(n, m->items[i].node, "in-order mismatch at %zu", i);
        cr_assert_eq(adsm__tree_prev(n), i ? m->items[i - 1].node : NULL);
    }
    cr_assert_eq(i, m->count);
}

static void check_lookup(const adsm__tree *t, const ref_model *m, uintptr_t addr) {
    cr_assert_eq(adsm__tree_find(t, addr), ref_find(m, addr), "find(%#lx)", (unsigned long)addr);
    cr_assert_eq(adsm__tree_floor(t, addr), ref_floor(m, addr), "floor(%#lx)", (unsigned long)addr);
    cr_assert_eq(adsm__tree_ceil(t, addr), ref_ceil(m, addr), "ceil(%#lx)", (unsigned long)addr);
}

/* Probes the edges of a live range plus the gap on each side of it. */
static void check_edges(const adsm__tree *t, const ref_model *m, const ref_range *r) {
    check_lookup(t, m, r->start);
    check_lookup(t, m, r->end - 1);
    check_lookup(t, m, r->end);
    check_lookup(t, m, r->start - 1);
    check_lookup(t, m, r->start + (r->end - r->start) / 2);
    cr_assert_eq(adsm__tree_find(t, r->start), r->node);
    cr_assert_eq(adsm__tree_find(t, r->end - 1), r->node);
}

static void check_global_edges(const adsm__tree *t, const ref_model *m) {
    check_lookup(t, m, 0);
    check_lookup(t, m, UINTPTR_MAX);
    if (!m->count) return;
    check_lookup(t, m, m->items[0].start - 1);               /* before the first */
    check_lookup(t, m, m->items[m->count - 1].end);          /* after the last */
    check_lookup(t, m, m->items[m->count - 1].end + 12345);
}

/* ---- tests ----------------------------------------------------------------------------------- */

Test(blocktree, empty_tree) {
    adsm__tree t;
    adsm__tree_init(&t);
    cr_assert_null(adsm__tree_find(&t, 0x1000));
    cr_assert_null(adsm__tree_floor(&t, 0x1000));
    cr_assert_null(adsm__tree_ceil(&t, 0x1000));
    cr_assert_null(adsm__tree_first(&t));
    cr_assert_eq(t.count, 0);
}

Test(blocktree, single_range_edges_and_overlap_rejection) {
    adsm__tree t;
    adsm__tree_node a = {.start = 0x1000, .end = 0x2000}, b, c = {.start = 0x2000, .end = 0x2001};
    adsm__tree_init(&t);
    cr_assert_eq(adsm__tree_insert(&t, &a), 0);
    cr_assert_eq(adsm__tree_find(&t, 0x1000), &a);
    cr_assert_eq(adsm__tree_find(&t, 0x1fff), &a);
    cr_assert_null(adsm__tree_find(&t, 0x2000));
    cr_assert_null(adsm__tree_find(&t, 0xfff));
    /* Every kind of overlap is refused: inside, covering, straddling either edge, identical. */
    uintptr_t bad[][2] = {{0x1800, 0x1900}, {0x0, 0x3000}, {0xfff, 0x1001}, {0x1fff, 0x2001}, {0x1000, 0x2000}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        b = (adsm__tree_node){.start = bad[i][0], .end = bad[i][1]};
        cr_assert_eq(adsm__tree_insert(&t, &b), -1, "overlap %zu accepted", i);
        cr_assert_eq(t.count, 1);
    }
    cr_assert_eq(adsm__tree_insert(&t, &c), 0, "touching range must be accepted");
    cr_assert_eq(adsm__tree_find(&t, 0x2000), &c);
    cr_assert_eq(adsm__tree_next(&a), &c);
    cr_assert_eq(adsm__tree_prev(&c), &a);
    cr_assert_eq(adsm__tree_block_index(&a, 0x1fff, 8), 0xf);
    cr_assert_eq(adsm__tree_block_index(&a, 0x1000, 8), 0);
    adsm__tree_remove(&t, &a);
    cr_assert_null(adsm__tree_find(&t, 0x1000));
    cr_assert_eq(adsm__tree_first(&t), &c);
}

typedef struct {
    int payload;
    adsm__tree_node node;
} wrapped_object;

Test(blocktree, container_of_recovers_owner) {
    adsm__tree t;
    wrapped_object obj = {.payload = 42, .node = {.start = 0x5000, .end = 0x6000}};
    adsm__tree_init(&t);
    adsm__tree_insert(&t, &obj.node);
    wrapped_object *found = ADSM__CONTAINER_OF(adsm__tree_find(&t, 0x5abc), wrapped_object, node);
    cr_assert_eq(found, &obj);
    cr_assert_eq(found->payload, 42);
}

/* Random mix in a small address space so that many inserts collide and get rejected. */
Test(blocktree, random_against_reference) {
    enum { POOL = 3000, OPS = 40000 };
    const uintptr_t space_lo = 0x100000, space_len = 1u << 22;
    adsm__tree_node *pool = calloc(POOL, sizeof *pool);
    ref_model m = {calloc(POOL, sizeof(ref_range)), 0};
    size_t *free_slots = malloc(POOL * sizeof(size_t)), free_count = POOL;
    size_t rejected = 0, removed = 0;
    adsm__tree t;
    adsm__tree_init(&t);
    for (size_t i = 0; i < POOL; i++) free_slots[i] = i;

    for (size_t op = 0; op < OPS; op++) {
        if (free_count && rng_below(10) < 6) {
            size_t slot_i = rng_below(free_count), slot = free_slots[slot_i];
            adsm__tree_node *n = &pool[slot];
            n->start = space_lo + rng_below(space_len);
            n->end = n->start + 1 + rng_below(4096);
            int expect_reject = ref_overlaps_any(&m, n->start, n->end);
            int rc = adsm__tree_insert(&t, n);
            cr_assert_eq(rc, expect_reject ? -1 : 0, "insert [%#lx,%#lx)", (unsigned long)n->start,
                         (unsigned long)n->end);
            if (rc == 0) {
                ref_insert(&m, n);
                free_slots[slot_i] = free_slots[--free_count];
            } else {
                rejected++;
            }
        } else if (m.count) {
            size_t i = rng_below(m.count);
            adsm__tree_node *n = m.items[i].node;
            adsm__tree_remove(&t, n);
            ref_remove_at(&m, i);
            free_slots[free_count++] = (size_t)(n - pool);
            removed++;
        }
        check_lookup(&t, &m, space_lo + rng_below(space_len)); /* mostly gaps and interiors */
        if (m.count) check_edges(&t, &m, &m.items[rng_below(m.count)]);
        if (op % 500 == 0) {
            check_tree(&t, &m);
            check_global_edges(&t, &m);
        }
    }
    check_tree(&t, &m);
    cr_assert_gt(rejected, 1000, "test should exercise rejection (got %zu)", rejected);
    cr_assert_gt(removed, 1000);
    free(pool);
    free(m.items);
    free(free_slots);
}

static void shuffle(size_t *v, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(i), tmp = v[i - 1];
        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

Test(blocktree, hundred_thousand_nodes) {
    enum { N = 100000 };
    const uintptr_t base = 0x7f0000000000ull, slot = 64;
    adsm__tree_node *pool = calloc(N, sizeof *pool);
    ref_model m = {calloc(N, sizeof(ref_range)), 0};
    size_t *order = malloc(N * sizeof(size_t));
    adsm__tree t;
    adsm__tree_init(&t);

    /* Slot i holds a range of random length at its front, leaving a gap of random size. */
    for (size_t i = 0; i < N; i++) {
        order[i] = i;
        pool[i].start = base + i * slot;
        pool[i].end = pool[i].start + 1 + rng_below(slot - 1);
    }
    shuffle(order, N);
    for (size_t i = 0; i < N; i++) cr_assert_eq(adsm__tree_insert(&t, &pool[order[i]]), 0);
    for (size_t i = 0; i < N; i++) m.items[m.count++] = (ref_range){pool[i].start, pool[i].end, &pool[i]};
    check_tree(&t, &m);
    check_global_edges(&t, &m);
    for (size_t i = 0; i < N; i++) check_edges(&t, &m, &m.items[i]);

    /* Remove a random half, re-check, then everything. */
    shuffle(order, N);
    for (size_t i = 0; i < N / 2; i++) adsm__tree_remove(&t, &pool[order[i]]);
    m.count = 0;
    for (size_t i = 0; i < N; i++)
        if (pool[i].height != 0) m.items[m.count++] = (ref_range){pool[i].start, pool[i].end, &pool[i]};
    cr_assert_eq(m.count, N - N / 2);
    check_tree(&t, &m);
    for (size_t i = 0; i < N; i += 7) check_edges(&t, &m, &m.items[i % m.count]);
    for (size_t i = 0; i < N; i++) check_lookup(&t, &m, base + rng_below(N * slot));
    for (size_t i = N / 2; i < N; i++) adsm__tree_remove(&t, &pool[order[i]]);
    cr_assert_null(t.root);
    cr_assert_eq(t.count, 0);
    free(pool);
    free(m.items);
    free(order);
}

/* Sequential inserts are the classic worst case for an unbalanced tree. */
Test(blocktree, sequential_inserts_stay_balanced) {
    enum { N = 65535 };
    adsm__tree_node *pool = calloc(N, sizeof *pool);
    ref_model m = {calloc(N, sizeof(ref_range)), 0};
    adsm__tree t;
    adsm__tree_init(&t);
    for (size_t i = 0; i < N; i++) {
        pool[i].start = 0x1000 + i * 0x1000;
        pool[i].end = pool[i].start + 0x1000;
        cr_assert_eq(adsm__tree_insert(&t, &pool[i]), 0);
        m.items[m.count++] = (ref_range){pool[i].start, pool[i].end, &pool[i]};
    }
    check_tree(&t, &m);
    cr_assert_eq(t.root->height, 16, "perfectly balanced for 2^16-1 sequential nodes");
    free(pool);
    free(m.items);
}
