/* fuzz/fuzz_blocktree.c -- libFuzzer target for the address-range AVL tree (adsm_impl/blocktree.h).
 *
 * The input is a sequence of operations on a pool of NODES tree nodes: insert a range (overlapping
 * ones included: they must be refused), remove, find / floor / ceil at an address, iterate both ways,
 * block_index. Every answer is compared with a reference model (a sorted array of the live ranges),
 * and after every operation the whole tree is checked: parent links, order, no overlap, stored
 * heights, AVL balance, count. Any disagreement aborts.
 *
 * Addresses come from a small window (so inserts collide often) placed either low, at 0, or at the
 * very top of the address space (to catch arithmetic that wraps).
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -g -O1 -I. fuzz/fuzz_blocktree.c */
#include "adsm_impl/common.h"
#include "adsm_impl/blocktree.h"

#include "fuzz/fuzz_common.h"
#include <stdio.h>
#include <stdlib.h>

#define NODES 48


/* ---- input reader ------------------------------------------------------------------------------ */

/* ---- reference: live ranges sorted by start ----------------------------------------------------- */
typedef struct ref_range {
    uintptr_t start, end;
    adsm__tree_node *node;
} ref_range;

static ref_range ref[NODES];
static size_t ref_n;

static size_t ref_upper(uintptr_t addr) { /* first index whose start > addr */
    size_t i = 0;
    while (i < ref_n && ref[i].start <= addr) i++;
    return i;
}
static adsm__tree_node *ref_find(uintptr_t a) {
    for (size_t i = 0; i < ref_n; i++)
        if (ref[i].start <= a && a < ref[i].end) return ref[i].node;
    return NULL;
}
static adsm__tree_node *ref_floor(uintptr_t a) {
    size_t i = ref_upper(a);
    return i ? ref[i - 1].node : NULL;
}
static adsm__tree_node *ref_ceil(uintptr_t a) {
    for (size_t i = 0; i < ref_n; i++)
        if (ref[i].start >= a) return ref[i].node;
    return NULL;
}
static int ref_overlaps(uintptr_t s, uintptr_t e) {
    for (size_t i = 0; i < ref_n; i++)
        if (ref[i].start < e && s < ref[i].end) return 1;
    return 0;
}
static void ref_insert(adsm__tree_node *n) {
    size_t i = ref_upper(n->start);
    memmove(&ref[i + 1], &ref[i], (ref_n - i) * sizeof ref[0]);
    ref[i].start = n->start;
    ref[i].end = n->end;
    ref[i].node = n;
    ref_n++;
}
static void ref_remove(adsm__tree_node *n) {
    for (size_t i = 0; i < ref_n; i++) {
        if (ref[i].node == n) {
            memmove(&ref[i], &ref[i + 1], (ref_n - i - 1) * sizeof ref[0]);
            ref_n--;
            return;
        }
    }
    CHECK(0, "node %p not in the reference", (void *)n);
}

/* ---- structural checks ------------------------------------------------------------------------ */
static int check_subtree(const adsm__tree_node *n, const adsm__tree_node *parent, size_t *count, int depth) {
    if (!n) return 0;
    CHECK(depth < 64, "tree deeper than 64 (cycle?)");
    CHECK(n->parent == parent, "node [%#lx,%#lx): parent %p, expected %p", (unsigned long)n->start,
          (unsigned long)n->end, (void *)n->parent, (const void *)parent);
    CHECK(n->end > n->start, "empty or inverted range [%#lx,%#lx)", (unsigned long)n->start, (unsigned long)n->end);
    int lh = check_subtree(n->left, n, count, depth + 1);
    int rh = check_subtree(n->right, n, count, depth + 1);
    if (n->left) CHECK(adsm__tree_rightmost(n->left)->end <= n->start, "left subtree not before its parent");
    if (n->right) CHECK(adsm__tree_leftmost(n->right)->start >= n->end, "right subtree not after its parent");
    CHECK(lh - rh <= 1 && rh - lh <= 1, "AVL balance violated at [%#lx,%#lx): %d vs %d", (unsigned long)n->start,
          (unsigned long)n->end, lh, rh);
    CHECK(n->height == 1 + (lh > rh ? lh : rh), "stale height %d, expected %d", n->height, 1 + (lh > rh ? lh : rh));
    (*count)++;
    return n->height;
}

static void check_tree(const adsm__tree *t) {
    size_t count = 0;
    check_subtree(t->root, NULL, &count, 0);
    CHECK(count == t->count, "count field %zu, nodes reachable %zu", t->count, count);
    CHECK(t->count == ref_n, "tree has %zu nodes, reference %zu", t->count, ref_n);
    size_t i = 0;
    for (adsm__tree_node *n = adsm__tree_first(t); n; n = adsm__tree_next(n), i++) {
        CHECK(i < ref_n, "forward iteration yields more than %zu nodes", ref_n);
        CHECK(n == ref[i].node && n->start == ref[i].start && n->end == ref[i].end,
              "forward iteration: node %zu is [%#lx,%#lx), expected [%#lx,%#lx)", i, (unsigned long)n->start,
              (unsigned long)n->end, (unsigned long)ref[i].start, (unsigned long)ref[i].end);
    }
    CHECK(i == ref_n, "forward iteration yields %zu nodes, expected %zu", i, ref_n);
}

static void check_iterate_backward(const adsm__tree *t) {
    size_t i = ref_n;
    for (adsm__tree_node *n = adsm__tree_rightmost(t->root); n; n = adsm__tree_prev(n)) {
        CHECK(i > 0, "backward iteration yields more than %zu nodes", ref_n);
        i--;
        CHECK(n == ref[i].node, "backward iteration: wrong node at %zu", i);
    }
    CHECK(i == 0, "backward iteration stopped %zu nodes short", i);
    for (size_t k = 0; k < ref_n; k++) {
        CHECK(adsm__tree_next(ref[k].node) == (k + 1 < ref_n ? ref[k + 1].node : NULL), "next() of node %zu", k);
        CHECK(adsm__tree_prev(ref[k].node) == (k ? ref[k - 1].node : NULL), "prev() of node %zu", k);
    }
}

static void check_lookup(const adsm__tree *t, uintptr_t a) {
    adsm__tree_node *got, *want;
    got = adsm__tree_find(t, a), want = ref_find(a);
    CHECK(got == want, "find(%#lx) = %p, expected %p", (unsigned long)a, (void *)got, (void *)want);
    got = adsm__tree_floor(t, a), want = ref_floor(a);
    CHECK(got == want, "floor(%#lx) = %p, expected %p", (unsigned long)a, (void *)got, (void *)want);
    got = adsm__tree_ceil(t, a), want = ref_ceil(a);
    CHECK(got == want, "ceil(%#lx) = %p, expected %p", (unsigned long)a, (void *)got, (void *)want);
}

/* ---- the target ------------------------------------------------------------------------------- */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static adsm__tree_node pool[NODES];
    static int live[NODES];
    adsm__tree t;
    reader r = {data, size};

    adsm__tree_init(&t);
    memset(pool, 0, sizeof pool);
    memset(live, 0, sizeof live);
    ref_n = 0;

    /* the address window: low, at 0, or at the top of the address space */
    uint8_t where = rd8(&r);
    uintptr_t base = where % 3 == 0 ? (uintptr_t)0x7f0000000000ull
                     : where % 3 == 1 ? 0
                                      : UINTPTR_MAX - 0x20000;
    unsigned scale = (where >> 2) & 7; /* addresses are window offsets << scale */

    size_t ops = 0;
    while (r.n && ops++ < 4096) {
        uint8_t op = rd8(&r);
        switch (op % 8) {
        case 0:
        case 1: { /* insert */
            unsigned slot = rd8(&r) % NODES;
            uintptr_t off = (uintptr_t)rd16(&r) << scale;
            uintptr_t len = (uintptr_t)(1 + (op >> 3 & 1 ? rd16(&r) : rd8(&r))) << scale;
            uintptr_t start = base + off;
            if (start + len < start || start + len == 0) break; /* would wrap: not a range */
            if (live[slot]) break;
            adsm__tree_node *n = &pool[slot];
            n->start = start;
            n->end = start + len;
            int expect = ref_overlaps(n->start, n->end) ? -1 : 0;
            int got = adsm__tree_insert(&t, n);
            CHECK(got == expect, "insert [%#lx,%#lx) returned %d, expected %d", (unsigned long)n->start,
                  (unsigned long)n->end, got, expect);
            if (got == 0) {
                live[slot] = 1;
                ref_insert(n);
            }
            break;
        }
        case 2: { /* remove */
            if (!ref_n) break;
            adsm__tree_node *n = ref[rd8(&r) % ref_n].node;
            adsm__tree_remove(&t, n);
            ref_remove(n);
            live[n - pool] = 0;
            CHECK(n->height == 0 && !n->left && !n->right && !n->parent, "removed node keeps links");
            break;
        }
        case 3: { /* lookups at an arbitrary address of the window */
            uintptr_t a = base + ((uintptr_t)rd16(&r) << scale) + (op >> 3 & 3) - 1;
            check_lookup(&t, a);
            break;
        }
        case 4: { /* lookups at the edges of a live range */
            if (!ref_n) {
                check_lookup(&t, base);
                break;
            }
            ref_range e = ref[rd8(&r) % ref_n];
            check_lookup(&t, e.start);
            check_lookup(&t, e.start - 1);
            check_lookup(&t, e.end - 1);
            check_lookup(&t, e.end);
            check_lookup(&t, e.start + (e.end - e.start) / 2);
            break;
        }
        case 5: /* iterate both ways */
            check_iterate_backward(&t);
            break;
        case 6: { /* block index */
            if (!ref_n) break;
            ref_range e = ref[rd8(&r) % ref_n];
            unsigned shift = rd8(&r) % 24;
            uintptr_t a = e.start + (uintptr_t)rd16(&r) % (e.end - e.start);
            adsm__tree_node *n = adsm__tree_find(&t, a);
            CHECK(n == e.node, "find inside a live range");
            CHECK(adsm__tree_block_index(n, a, shift) == (size_t)((a - e.start) >> shift), "block_index");
            break;
        }
        default: { /* remove and reinsert the same node (a freed node reused) */
            if (!ref_n) break;
            adsm__tree_node *n = ref[rd8(&r) % ref_n].node;
            adsm__tree_remove(&t, n);
            ref_remove(n);
            int got = adsm__tree_insert(&t, n);
            CHECK(got == 0, "reinserting a just-removed range failed");
            ref_insert(n);
            break;
        }
        }
        check_tree(&t);
    }
    /* empty the tree from the root down: exercises two-child removals */
    while (t.root) {
        adsm__tree_node *n = t.root;
        adsm__tree_remove(&t, n);
        ref_remove(n);
        check_tree(&t);
    }
    CHECK(t.count == 0 && ref_n == 0, "tree not empty at the end");
    return 0;
}
