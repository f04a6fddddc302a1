/* bench/deepcopy/deepcopy.c -- pointer structures on a device whose addresses differ from the
 * host's (issue 31; the automatic deep copy paper's List, SplitList and Tree, plus a dense
 * 4-level tree).
 *
 * Each structure lives in typed shared objects: a pool of nodes (each node: four child pointers,
 * a pointer to an external payload, a count, then its inline payload of doubles) and, for
 * SplitList, a pool of payloads. Nodes are linked in a scrambled order, so every pointer is an
 * interior pointer somewhere in the pool. One repetition: the CPU rewrites every payload (the
 * structure is dirty on the host), a kernel walks the structure from its root (depth first, one
 * thread) adding 1 to every payload double and summing them, and the CPU reads every payload back
 * (it comes home). Each start (adsm_init to adsm_shutdown) runs one repetition untimed, so the
 * device's memory is backed (a cost of the first touch, not of moving the structure), then timed
 * ones; a start's time is their median. A structure under 1 MiB takes a fraction of a millisecond,
 * which the machine's moment moves by 2x from one start to the next: its starts hold it twice, in
 * shared objects and in the hand-written copy's buffers, and time 15 pairs of repetitions, one of
 * each, which goes first turning with each pair. A larger one would then share the caches between
 * two copies, slowing both as no program would: each start runs 3 repetitions of one variant.
 * Variants, each started once per run, alternated (which goes first turns each run):
 *   same        the device sees host addresses (ADSM_EMU_SAME_ADDRESS=1 / ADSM_CUDA_SAME_ADDRESS=1):
 *               nothing is translated
 *   in place    addresses differ (=0): adsm translates the typed objects' fields at each launch where
 *               they are (ADSM_TRANSLATE=in-place: through the device's window on emu, by a patch
 *               kernel on a GPU; the paper's PCPY)
 *   staged      the same through host memory (ADSM_TRANSLATE=staged: pieces come home, are
 *               rewritten, go back; the paper's TCPY)
 *   explicit    the hand-written deep copy: adsm_dev_alloc buffers, the host rewrites pointers
 *               into a staging copy, one copy each way, pointers rewritten back on the host (small
 *               structures: in pairs with each variant above; larger: started on its own)
 * Columns: median over runs of ms per repetition (explicit, small structures: beside in place);
 * in place / same as a ratio of those medians; x / explicit, small structures: the median over
 * runs of each start's median pair ratio, larger ones: a ratio of medians; and the CPU faults adsm
 * resolved and the protection changes its protocol made per repetition in place (the same without
 * translation: the protocol's fixed cost, which the hand-written copy does not pay), and staged,
 * the faults and the copies either way per repetition (staged leaves what a kernel wrote current
 * on the host, so the CPU's reads after it do not fault). The
 * default column names the technique ADSM_TRANSLATE=auto takes for the structure: in place,
 * except on a GPU where the typed pool holds under 128 KiB (translate.h, ADSM__XLATE_PATCH_MIN).
 *
 *   bazel run //:bench_deepcopy -- [--runs N] [--mib M] [--backend emu|cuda] [--only SHAPE[:BYTES][,...]]
 * (--only List, --only Tree:1024: one structure, or one node size of it, for a closer look; a comma
 * list names several)
 *   ... --trace VARIANT FILE: after each structure's runs, one more start of VARIANT alone (same, in
 *   place, staged or explicit) writes an ADSM_TRACE timeline of its repetitions to FILE (the last
 *   structure's stays; bench/trace_summary.py --last N lists a repetition's spans in order); up to
 *   4 --trace options trace as many variants
 *
 * Main thread only. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"
#include "bench/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIDS 4
#define HEADER 48 /* kids[4], ext, count */

typedef struct gnode {
    struct gnode *kids[KIDS];
    double *ext;
    uint64_t count; /* payload doubles: inline after the header, or at ext */
} gnode;

/* Walks from root depth first, at most max_nodes nodes (stack: max_nodes entries): payload += 1,
 * sum into result[0]. One thread. */
ADSM_KERNEL_DEF(k_graph_walk,
                (ADSM_INOUT(unsigned char, pool), ADSM_INOUT(double, ext_pool), ADSM_INOUT(uint64_t, stack),
                 ADSM_OUT(double, result), ADSM_VALUE(uint64_t, root_off), ADSM_VALUE(uint64_t, max_nodes)),
                g, {
                    if (g.begin == 0) {
                        double sum = 0;
                        uint64_t top = 0, seen = 0;
                        (void)ext_pool;
                        stack[top++] = (uint64_t)(pool + root_off);
                        while (top > 0 && seen < max_nodes) {
                            unsigned char *raw = (unsigned char *)stack[--top];
                            unsigned char **kids = (unsigned char **)raw;
                            double *ext = *(double **)(raw + 32);
                            uint64_t count = *(uint64_t *)(raw + 40);
                            double *v = ext ? ext : (double *)(raw + 48);
                            for (uint64_t i = 0; i < count; i++) {
                                v[i] += 1;
                                sum += v[i];
                            }
                            seen++;
                            for (int k = 3; k >= 0; k--)
                                if (kids[k] && top < max_nodes) stack[top++] = (uint64_t)kids[k];
                        }
                        result[0] = sum;
                    }
                });

typedef enum { LIST, SPLIT_LIST, TREE, DENSE_TREE } shape;
static const char *const shape_names[] = {"List", "SplitList", "Tree", "dense 4-level tree"};

typedef struct structure {
    shape shape;
    size_t node_bytes;    /* node stride in the pool (header + inline payload) */
    size_t payload_bytes; /* per node, inline or external */
    size_t nodes;
    size_t *order;        /* the node at each position of the walk's order */
} structure;

static adsm_type_desc node_type;
static const adsm_field_desc node_fields[] = {{"kids", 0, KIDS, &node_type, 1}, {"ext", 32, 1, NULL, 1}};

/* The host pointers of a structure in pool (nodes) and ext (payloads): written into `nodes`
 * (a pool at node_base with payloads at ext_base; the explicit variant passes device bases). */
static void link_nodes(const structure *s, unsigned char *nodes, uintptr_t node_base, uintptr_t ext_base) {
    for (size_t p = 0; p < s->nodes; p++) {
        gnode *n = (gnode *)(void *)(nodes + s->order[p] * s->node_bytes);
        memset(n->kids, 0, sizeof n->kids);
        size_t first = 0, count = 0;
        if (s->shape == LIST || s->shape == SPLIT_LIST) first = p + 1, count = 1;
        else if (s->shape == TREE) first = 2 * p + 1, count = 2;
        else first = KIDS * p + 1, count = KIDS;
        for (size_t k = 0; k < count; k++)
            if (first + k < s->nodes)
                n->kids[k] = (gnode *)(node_base + s->order[first + k] * s->node_bytes);
        n->ext = s->shape == SPLIT_LIST ? (double *)(ext_base + s->order[p] * s->payload_bytes) : NULL;
        n->count = s->payload_bytes / sizeof(double);
    }
}

static double *payload_of(const structure *s, unsigned char *nodes, double *ext, size_t i) {
    return s->shape == SPLIT_LIST ? (double *)(void *)((unsigned char *)ext + i * s->payload_bytes)
                                  : (double *)(void *)(nodes + i * s->node_bytes + HEADER);
}

static void write_payloads(const structure *s, unsigned char *nodes, double *ext, double value) {
    for (size_t i = 0; i < s->nodes; i++) {
        double *v = payload_of(s, nodes, ext, i);
        for (size_t k = 0; k < s->payload_bytes / sizeof(double); k++) v[k] = value;
    }
}

static double read_payloads(const structure *s, unsigned char *nodes, double *ext) {
    double sum = 0;
    for (size_t i = 0; i < s->nodes; i++) {
        double *v = payload_of(s, nodes, ext, i);
        for (size_t k = 0; k < s->payload_bytes / sizeof(double); k++) sum += v[k];
    }
    return sum;
}

/* Where a traced start writes its timeline (ADSM_TRACE, read at adsm_init, written at shutdown):
 * NULL for an untraced one. */
static const char *trace_file;

static int start(const char *backend, int same_address, int staged) {
    if (trace_file) setenv("ADSM_TRACE", trace_file, 1);
    else unsetenv("ADSM_TRACE");
    setenv(strcmp(backend, "cuda") == 0 ? "ADSM_CUDA_SAME_ADDRESS" : "ADSM_EMU_SAME_ADDRESS", same_address ? "1" : "0", 1);
    setenv("ADSM_TRANSLATE", staged ? "staged" : "in-place", 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = strcmp(backend, "cuda") == 0 ? ADSM_BACKEND_CUDA : ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) {
        fprintf(stderr, "adsm_init: %s\n", adsm_last_error());
        return -1;
    }
    return 0;
}

static int check(double got, double want, const char *what) {
    if (got == want) return 0;
    fprintf(stderr, "%s: the walk summed %.1f, expected %.1f\n", what, got, want);
    return -1;
}

#define WARM_REPS 1 /* repetitions per start before the timed ones: the device's memory gets backed */

/* Small structures (under 1 MiB) take a fraction of a millisecond, at the mercy of the machine's
 * moment: a start holds both the shared objects and the hand-written copy's buffers and times 15
 * pairs of repetitions, one of each. Larger ones would then share the caches between two copies,
 * which slows both unlike any program: a start times 3 repetitions of one variant. */
static int paired(const structure *s) { return s->nodes * s->node_bytes < ((size_t)1 << 20); }
static int timed_reps(const structure *s) { return paired(s) ? 15 : 3; }

static double want_sum(const structure *s, double value) {
    return (value + 1) * (double)(s->nodes * (s->payload_bytes / sizeof(double)));
}

/* The structure in shared objects: a typed pool of nodes, payloads (SplitList), the walk's stack
 * and its result. */
typedef struct shared_bufs {
    unsigned char *pool;
    double *ext, *result;
    uint64_t *stack;
} shared_bufs;

/* The hand-written deep copy's buffers: host staging and device copies. */
typedef struct explicit_bufs {
    unsigned char *pool, *d_pool;
    double *ext, *d_ext, *d_result;
    uint64_t *d_stack;
    size_t pool_bytes, ext_bytes;
} explicit_bufs;

static size_t ext_bytes_of(const structure *s) { return s->shape == SPLIT_LIST ? s->nodes * s->payload_bytes : 8; }

/* The memory of the shared variant (sh) and of the hand-written copy (ex), either NULL: linked and
 * zeroed. 0, or -1 with a message. */
static int make_bufs(const structure *s, shared_bufs *sh, explicit_bufs *ex) {
    int ok = 1;
    if (sh) {
        sh->pool = adsm_alloc_typed(&node_type, s->nodes);
        sh->ext = adsm_alloc(ext_bytes_of(s));
        sh->stack = adsm_alloc((s->nodes + 1) * sizeof *sh->stack);
        sh->result = adsm_alloc(sizeof *sh->result);
        ok = sh->pool && sh->ext && sh->stack && sh->result;
        if (ok) link_nodes(s, sh->pool, (uintptr_t)sh->pool, (uintptr_t)sh->ext);
        if (ok) write_payloads(s, sh->pool, sh->ext, 0);
    }
    if (ex && ok) {
        ex->pool_bytes = s->nodes * s->node_bytes;
        ex->ext_bytes = ext_bytes_of(s);
        ex->pool = adsm_host_alloc(ex->pool_bytes);
        ex->ext = adsm_host_alloc(ex->ext_bytes);
        ex->d_pool = adsm_dev_alloc(ex->pool_bytes);
        ex->d_ext = adsm_dev_alloc(ex->ext_bytes);
        ex->d_result = adsm_dev_alloc(sizeof(double));
        ex->d_stack = adsm_dev_alloc((s->nodes + 1) * sizeof(uint64_t));
        ok = ex->pool && ex->ext && ex->d_pool && ex->d_ext && ex->d_result && ex->d_stack;
        if (ok) link_nodes(s, ex->pool, (uintptr_t)ex->pool, (uintptr_t)ex->ext);
        if (ok) write_payloads(s, ex->pool, ex->ext, 0);
    }
    if (!ok) {
        fprintf(stderr, "allocating %zu + %zu bytes: %s\n", s->nodes * s->node_bytes, ext_bytes_of(s),
                adsm_last_error());
        return -1;
    }
    return adsm_sync() == ADSM_OK ? 0 : -1;
}

/* One repetition in shared objects: ms, or -1 on an error. */
static double rep_shared(const structure *s, const shared_bufs *b, double value) {
    double t0 = bench_now_s();
    write_payloads(s, b->pool, b->ext, value);
    adsm_result r = ADSM_CALL(k_graph_walk, adsm_grid_1d(1, 32), b->pool, b->ext, b->stack, b->result,
                              (uint64_t)(s->order[0] * s->node_bytes), (uint64_t)s->nodes);
    if (r == ADSM_OK) r = adsm_sync();
    double sum = read_payloads(s, b->pool, b->ext);
    double ms = (bench_now_s() - t0) * 1e3;
    if (r != ADSM_OK) fprintf(stderr, "walk: %s\n", adsm_last_error());
    if (r != ADSM_OK || check(b->result[0], want_sum(s, value), "kernel") != 0 ||
        check(sum, want_sum(s, value), "host") != 0)
        return -1;
    return ms;
}

/* One repetition of the hand-written deep copy: ms, or -1. */
static double rep_explicit(const structure *s, const explicit_bufs *b, double value) {
    double t0 = bench_now_s(), result = 0;
    write_payloads(s, b->pool, b->ext, value);
    /* the deep copy: pointers rewritten to device addresses in place, one copy each way, and
     * back to host addresses after (a staging copy of the pool would only add two memcpys) */
    link_nodes(s, b->pool, (uintptr_t)b->d_pool, (uintptr_t)b->d_ext);
    adsm_result r = adsm_copy_to_device(b->d_pool, b->pool, b->pool_bytes);
    if (r == ADSM_OK && s->shape == SPLIT_LIST) r = adsm_copy_to_device(b->d_ext, b->ext, b->ext_bytes);
    if (r == ADSM_OK)
        r = ADSM_CALL(k_graph_walk, adsm_grid_1d(1, 32), b->d_pool, b->d_ext, b->d_stack, b->d_result,
                      (uint64_t)(s->order[0] * s->node_bytes), (uint64_t)s->nodes);
    if (r == ADSM_OK) r = adsm_sync();
    if (r == ADSM_OK) r = adsm_copy_from_device(b->pool, b->d_pool, b->pool_bytes);
    if (r == ADSM_OK && s->shape == SPLIT_LIST) r = adsm_copy_from_device(b->ext, b->d_ext, b->ext_bytes);
    if (r == ADSM_OK) r = adsm_copy_from_device(&result, b->d_result, sizeof result);
    if (r == ADSM_OK) link_nodes(s, b->pool, (uintptr_t)b->pool, (uintptr_t)b->ext); /* the host's again */
    double sum = read_payloads(s, b->pool, b->ext);
    double ms = (bench_now_s() - t0) * 1e3;
    if (r != ADSM_OK) fprintf(stderr, "explicit: %s\n", adsm_last_error());
    if (r != ADSM_OK || check(result, want_sum(s, value), "explicit kernel") != 0 ||
        check(sum, want_sum(s, value), "explicit host") != 0)
        return -1;
    return ms;
}

/* What one start measured: the medians of its timed repetitions of the shared variant and of the
 * hand-written copy (either -1 when not run), the median of the pairs' ratios (paired starts), and
 * adsm's protocol work per shared repetition (CPU faults resolved, protection changes made; the
 * hand-written copy's memory is not shared, so it adds none). */
typedef struct start_result {
    double shared_ms, explicit_ms, ratio, faults, changes, copies;
} start_result;

enum { SHARED = 1, EXPLICIT = 2 }; /* what a start runs: one of them, or both in pairs */

/* One start (same, in place or staged: the environment start() writes; ignored for the explicit
 * variant alone). 0, or -1 on an error. */
static int run_start(const structure *s, const char *backend, int same_address, int staged, int what, double value,
                     start_result *out) {
    if (start(backend, same_address, staged) != 0) return -1;
    shared_bufs sh;
    explicit_bufs ex;
    int failed = make_bufs(s, what & SHARED ? &sh : NULL, what & EXPLICIT ? &ex : NULL) != 0, reps = timed_reps(s);
    double shared_ms[64], explicit_ms[64], ratio[64];
    adsm_stats before, after, rep0, rep1;
    memset(&before, 0, sizeof before);
    uint64_t copies = 0; /* the shared variant's alone: the explicit one's copy calls count there too */
    for (int k = 0; k < WARM_REPS + reps && !failed; k++) {
        if (k == WARM_REPS) adsm_get_stats(&before);
        double t_shared = 0, t_explicit = 0, v = value + k;
        if (k % 2 && (what & EXPLICIT)) t_explicit = rep_explicit(s, &ex, v);
        adsm_get_stats(&rep0);
        if (what & SHARED) t_shared = rep_shared(s, &sh, v);
        adsm_get_stats(&rep1);
        if (k >= WARM_REPS) copies += rep1.h2d_copies + rep1.d2h_copies - rep0.h2d_copies - rep0.d2h_copies;
        if (!(k % 2) && (what & EXPLICIT)) t_explicit = rep_explicit(s, &ex, v);
        failed = t_shared < 0 || t_explicit < 0;
        if (k < WARM_REPS || failed) continue;
        shared_ms[k - WARM_REPS] = t_shared;
        explicit_ms[k - WARM_REPS] = t_explicit;
        ratio[k - WARM_REPS] = what == (SHARED | EXPLICIT) ? t_shared / t_explicit : 0;
    }
    adsm_get_stats(&after);
    adsm_shutdown();
    if (failed) return -1;
    out->shared_ms = what & SHARED ? bench_median(shared_ms, reps) : -1;
    out->explicit_ms = what & EXPLICIT ? bench_median(explicit_ms, reps) : -1;
    out->ratio = bench_median(ratio, reps);
    out->faults = (double)(after.read_faults + after.write_faults - before.read_faults - before.write_faults) / reps;
    out->changes = (double)(after.protection_changes - before.protection_changes) / reps;
    out->copies = (double)copies / reps;
    return 0;
}

/* Whether --only (NULL: everything) names this structure ("List") or this structure and node size
 * ("Tree:1024"); a comma separates several ("dense 4-level tree,List:128"). */
static int wanted(const char *only, const char *name, size_t node_bytes) {
    if (!only) return 1;
    for (const char *w = only;; w++) { /* w: one name of the list */
        size_t len = strcspn(w, ","), n = strcspn(w, ":,");
        if (strlen(name) == n && strncmp(w, name, n) == 0 && (n == len || strtoull(w + n + 1, NULL, 10) == node_bytes))
            return 1;
        w += len;
        if (!*w) return 0;
    }
}

int main(int argc, char **argv) {
    int runs = 5;
    size_t mib = 32;
    const char *backend = "emu", *only = NULL;
    static const char *const variant_names[] = {"same", "in place", "staged", "explicit"};
    struct {
        int variant; /* an index of variant_names */
        const char *file;
    } traces[4];
    int ntraces = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0) runs = (int)bench_long_arg("deepcopy", "--runs", argv[++i], 1, 256);
        else if (strcmp(argv[i], "--mib") == 0) mib = (size_t)bench_long_arg("deepcopy", "--mib", argv[++i], 1, 4096);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--trace") == 0 && i + 2 < argc && ntraces < 4) {
            int v = 0;
            while (v < 4 && strcmp(argv[i + 1], variant_names[v]) != 0) v++;
            if (v == 4) {
                fprintf(stderr, "--trace %s: not a variant (same, in place, staged, explicit)\n", argv[i + 1]);
                return 2;
            }
            traces[ntraces].variant = v;
            traces[ntraces++].file = argv[i + 2];
            i += 2;
        } else {
            fprintf(stderr, "usage: %s [--runs N] [--mib M] [--backend emu|cuda] [--only SHAPE[:BYTES][,...]] "
                            "[--trace VARIANT FILE]...\n", argv[0]);
            return 2;
        }
    }
    if (strcmp(backend, "emu") != 0 && strcmp(backend, "cuda") != 0) {
        fprintf(stderr, "deepcopy: --backend %s: emu or cuda\n", backend);
        return 2;
    }
    static const size_t node_sizes[] = {128, 1024, (size_t)1 << 20};
    int any = 0;
    for (int sh = LIST; sh <= DENSE_TREE; sh++)
        for (size_t z = 0; z < sizeof node_sizes / sizeof *node_sizes; z++) any |= wanted(only, shape_names[sh], node_sizes[z]);
    if (!any) {
        fprintf(stderr, "deepcopy: --only %s names no structure (List, SplitList, Tree, dense 4-level tree; node sizes 128, "
                        "1024, 1048576)\n", only);
        return 2;
    }
    printf("## deepcopy: pointer structures where device addresses differ (%s backend), %zu MiB of payload, "
           "median of %d runs\n\n", backend, mib, runs);
    printf("ms per repetition: CPU writes every payload, a kernel walks the structure (payload += 1), the CPU "
           "reads every payload. same = no translation; in place = adsm translates the typed pool where it is "
           "at each launch (ADSM_TRANSLATE=in-place); staged = through host memory (ADSM_TRANSLATE=staged); "
           "default = the one adsm takes unless told (ADSM_TRANSLATE=auto: staged on a GPU where the typed "
           "objects hold under 128 KiB), its x / explicit beside; "
           "explicit = hand-written deep copy with adsm_dev_alloc; x / explicit: for structures under 1 MiB the "
           "median of the ratios of pairs of repetitions in one start (explicit ms: beside in place), for larger "
           "ones a ratio of medians of starts of their own; "
           "faults / rep: CPU faults adsm resolved per repetition; changes / rep: page protection changes its "
           "protocol made per repetition (each a system call), both in place; staged faults / rep, copies / rep: "
           "the faults staged (it leaves a structure a kernel wrote current on the host), and the copies either "
           "way per repetition (adsm_stats h2d_copies + d2h_copies: flushes, fetches and the translation's).\n\n");
    printf("| structure | node | nodes | same ms | in place ms | staged ms | explicit ms | in place / same | "
           "in place / explicit | staged / explicit | default | default / explicit | faults / rep | changes / rep | "
           "staged faults / rep | staged copies / rep |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n");
    int failed = 0;
    for (int sh = LIST; sh <= DENSE_TREE; sh++)
        for (size_t z = 0; z < sizeof node_sizes / sizeof *node_sizes; z++) {
            if (!wanted(only, shape_names[sh], node_sizes[z])) continue;
            structure s;
            memset(&s, 0, sizeof s);
            s.shape = (shape)sh;
            s.payload_bytes = node_sizes[z] - (sh == SPLIT_LIST ? 0 : HEADER);
            s.node_bytes = sh == SPLIT_LIST ? HEADER : node_sizes[z];
            s.nodes = sh == DENSE_TREE ? 85 : (mib << 20) / node_sizes[z]; /* dense: 1 + 4 + 16 + 64 nodes */
            if (s.nodes < 2) s.nodes = 2;
            s.order = malloc(s.nodes * sizeof *s.order);
            for (size_t i = 0; i < s.nodes; i++) s.order[i] = i;
            bench_random_order(s.order, s.nodes, s.nodes, 31 + (uint64_t)z);
            node_type = (adsm_type_desc){"gnode", s.node_bytes, 2, node_fields};
            /* same, in place, staged and (large structures) explicit alone; per run */
            start_result res[4][256];
            int pairs = paired(&s), starts = pairs ? 3 : 4;
            for (int r = 0; r < runs && !failed; r++) { /* alternated: each meets the same moments of load, */
                double v = (double)(r + 1);         /* and which goes first turns with each run */
                for (int k = 0; k < starts && !failed; k++) {
                    int which = (k + r) % starts, what = which == 3 ? EXPLICIT : pairs ? SHARED | EXPLICIT : SHARED;
                    failed = run_start(&s, backend, which == 0, which == 2, what, v, &res[which][r]) != 0;
                }
            }
            for (int t = 0; t < ntraces && !failed; t++) { /* one start of the variant alone, traced */
                int v = traces[t].variant;
                start_result traced;
                trace_file = traces[t].file;
                failed = run_start(&s, backend, v == 0, v == 2, v == 3 ? EXPLICIT : SHARED, 1.0, &traced) != 0;
                trace_file = NULL;
            }
            if (failed) {
                fprintf(stderr, "%s, %zu-byte nodes: a variant failed\n", shape_names[sh], node_sizes[z]);
                free(s.order);
                return 1;
            }
            double same[256], in_place[256], staged[256], expl[256], in_place_x[256], staged_x[256];
            for (int r = 0; r < runs; r++) {
                same[r] = res[0][r].shared_ms;
                in_place[r] = res[1][r].shared_ms;
                staged[r] = res[2][r].shared_ms;
                expl[r] = res[pairs ? 1 : 3][r].explicit_ms;
                in_place_x[r] = res[1][r].ratio;
                staged_x[r] = res[2][r].ratio;
            }
            double ms = bench_median(same, runs), mp = bench_median(in_place, runs), mt = bench_median(staged, runs),
                   me = bench_median(expl, runs);
            double in_place_r = pairs ? bench_median(in_place_x, runs) : mp / me,
                   staged_r = pairs ? bench_median(staged_x, runs) : mt / me;
            int default_staged = !strcmp(backend, "cuda") && s.nodes * s.node_bytes < ADSM__XLATE_PATCH_MIN;
            printf("| %s | %zu B | %zu | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx | %s | %.2fx | %.0f | %.0f | "
                   "%.0f | %.1f |\n",
                   shape_names[sh], node_sizes[z], s.nodes, ms, mp, mt, me, mp / ms, in_place_r, staged_r,
                   default_staged ? "staged" : "in place", default_staged ? staged_r : in_place_r, res[1][0].faults,
                   res[1][0].changes, res[2][0].faults, res[2][0].copies);
            fflush(stdout);
            free(s.order);
        }
    return 0;
}
