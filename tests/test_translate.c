/* tests/test_translate.c -- declared pointer fields (ADSM_TYPE) where a device's addresses differ
 * from the host's: what kernels see in typed objects' pointer fields, what comes home, and the
 * errors (translate.h).
 *
 * Built twice: on the cuda backend against the driver double in the translated placement
 * (ADSM_CUDA_SAME_ADDRESS=0; -DTEST_ON_CUDA_DOUBLE), and on emu. Kernels here read pointer
 * fields as numbers and write fields from other fields' values, so they run on the double too
 * (its kernels see device memory through views, and cannot follow a device address). The
 * expected device address of a host pointer p is adsm_safe(p). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The types for both sides: the kernels are single-source, so that the suite also runs on a GPU
 * (bench/gpu_check.sh builds it with -DTEST_ON_REAL_CUDA), where NVRTC compiles them. */
ADSM_SHARED(typedef struct node {
    int64_t value;
    struct node *next;
    float *data;          /* into a plain data object */
    struct node *kids[2]; /* a tree's children */
} node;
typedef struct strict_node {
    struct strict_node *peer;
    int64_t pad;
} strict_node;
typedef struct holder {
    node *head;
    int64_t sum, count;
} holder;
typedef struct big_node { /* a large struct whose one field is a small part of it */
    struct big_node *next;
    char payload[8184];
} big_node;
typedef struct far_node { /* two fields further apart than the staging buffer (4 MiB), in a struct
                             whose fields' span is a small part (translated span by span) */
    struct far_node *first;
    char gap[6 << 20];
    struct far_node *second;
    char tail[22 << 20];
} far_node;);
ADSM_TYPE(node, ADSM_PTR(next, node), ADSM_PTR_DATA(data), ADSM_PTR(kids, node));
ADSM_TYPE(strict_node, ADSM_PTR_NONNULL(peer, strict_node));
ADSM_TYPE(holder, ADSM_PTR(head, node));
ADSM_TYPE(big_node, ADSM_PTR(next, big_node));
ADSM_TYPE(far_node, ADSM_PTR(first, far_node), ADSM_PTR(second, far_node));

/* Types adsm refuses: a packed struct, whose later structs' fields are not aligned (a slot
 * straddling a piece's edge was translated by neither piece), and a union's two members declared
 * (the slot was translated twice). Host-only: no kernel reads them. */
typedef struct __attribute__((packed)) packed_node {
    struct packed_node *next;
    char tag;
} packed_node;
ADSM_TYPE(packed_node, ADSM_PTR(next, packed_node));
typedef struct cell {
    union {
        struct cell *as_cell;
        float *as_data;
    } u;
} cell;
ADSM_TYPE(cell, ADSM_PTR(u.as_cell, cell), ADSM_PTR_DATA(u.as_data));

/* seen[2 i], seen[2 i + 1] = list[i].next and .data as numbers */
ADSM_KERNEL_DEF(k_links, (ADSM_IN(node, list), ADSM_OUT(uint64_t, seen), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            seen[2 * i] = (uint64_t)(size_t)list[i].next;
            seen[2 * i + 1] = (uint64_t)(size_t)list[i].data;
        }
    }
});

/* seen[i] = big[i].next as a number */
ADSM_KERNEL_DEF(k_big_links, (ADSM_IN(big_node, big), ADSM_OUT(uint64_t, seen), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) seen[i] = (uint64_t)(size_t)big[i].next;
    }
});

/* list[i].next = list[i + 1].next (skips one), kids[0] = next, value += 1; one thread */
ADSM_KERNEL_DEF(k_skip, (ADSM_INOUT(node, list), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t == 0)
            for (size_t i = 0; i + 1 < n; i++) {
                list[i].next = list[i + 1].next;
                list[i].kids[0] = list[i].next;
                list[i].value += 1;
            }
    }
});

/* list[at].next = (node *)bad */
ADSM_KERNEL_DEF(k_poison, (ADSM_INOUT(node, list), ADSM_VALUE(size_t, at), ADSM_VALUE(uint64_t, bad)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t == 0) list[at].next = (node *)(size_t)bad;
    }
});

/* Follows the list from h->head (at most `limit` nodes, so a broken list cannot spin): sums the
 * values and counts the nodes; with relink, reverses the list in place (its nodes must all be in
 * `pool`, the object the kernel may write), and h->head ends at the old last node. One thread. */
ADSM_KERNEL_DEF(k_walk, (ADSM_INOUT(holder, h), ADSM_INOUT(node, pool), ADSM_VALUE(size_t, limit),
                         ADSM_VALUE(int, relink)), g, {
    (void)pool;
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t != 0) continue;
        node *prev = 0, *cur = h->head;
        int64_t sum = 0, count = 0;
        while (cur && (size_t)count < limit) {
            node *next = cur->next;
            sum += cur->value + (cur->data ? (int64_t)cur->data[0] : 0);
            if (relink) cur->next = prev;
            prev = cur;
            cur = next;
            count++;
        }
        h->head = prev;
        h->sum = sum;
        h->count = count;
    }
});

/* seen[2 i], seen[2 i + 1] = far[i].first and .second as numbers */
ADSM_KERNEL_DEF(k_far_links, (ADSM_IN(far_node, far), ADSM_OUT(uint64_t, seen), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            seen[2 * i] = (uint64_t)(size_t)far[i].first;
            seen[2 * i + 1] = (uint64_t)(size_t)far[i].second;
        }
    }
});

/* s[at].peer = NULL, in a field declared ADSM_PTR_NONNULL */
ADSM_KERNEL_DEF(k_unlink, (ADSM_INOUT(strict_node, s), ADSM_VALUE(size_t, at)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t == 0) s[at].peer = 0;
    }
});

/* far[i].first and .second change places */
ADSM_KERNEL_DEF(k_far_swap, (ADSM_INOUT(far_node, far), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            far_node *t = far[i].first;
            far[i].first = far[i].second;
            far[i].second = t;
        }
    }
});

/* data[i] += 1, reps times over, by one thread: a kernel that takes a while */
ADSM_KERNEL_DEF(k_fill_slowly, (ADSM_INOUT(float, data), ADSM_VALUE(size_t, n), ADSM_VALUE(size_t, reps)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t == 0)
            for (size_t r = 0; r < reps; r++)
                for (size_t i = 0; i < n; i++) data[i] += 1;
    }
});

/* value += 100 in every node */
ADSM_KERNEL_DEF(k_bump, (ADSM_INOUT(node, list), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) list[i].value += 100;
    }
});

/* Single thread, in index order: every node i with (i * 2654435761 + seed) % 4 == 0 takes the next
 * of node (7 i + seed) % n, and adds 1 to its value. */
ADSM_KERNEL_DEF(k_rewire, (ADSM_INOUT(node, list), ADSM_VALUE(size_t, n), ADSM_VALUE(uint64_t, seed)), g, {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t != 0) continue;
        for (size_t i = 0; i < n; i++) {
            if ((i * 2654435761u + seed) % 4 != 0) continue;
            list[i].next = list[(7 * i + seed) % n].next;
            list[i].value += 1;
        }
    }
});

#ifdef TEST_ON_CUDA_DOUBLE
#include "tests/cuda_double_bridge.h"
#define TEST_BACKEND ADSM_BACKEND_CUDA
__attribute__((constructor)) static void use_cuda_double(void) { cuda_double_use(); }
/* adsm's own patch kernel too (translate.h), as NVRTC would have compiled it on a GPU: the suite
 * asks for it (ADSM_TRANSLATE=in-place; auto would stage the small structures here); built with
 * -DTEST_TRANSLATE_STAGED, ADSM_TRANSLATE=staged rewrites through host memory instead. */
static void attach(void) {
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_k_links(), adsm__kernel_k_skip(), adsm__kernel_k_poison(),
                                               adsm__kernel_k_rewire(), adsm__kernel_adsm__xlate_patch(),
                                               adsm__kernel_k_big_links(), adsm__kernel_k_fill_slowly(),
                                               adsm__kernel_k_bump(), adsm__kernel_k_far_links(),
                                               adsm__kernel_k_far_swap(), adsm__kernel_k_unlink()};
    cr_assert_eq(cuda_double_attach(kernels, 11), 0, "attach: %s", adsm_last_error());
}
#define DIFFERENT_ADDRESSES "ADSM_CUDA_SAME_ADDRESS"
#elif defined(TEST_ON_REAL_CUDA)
#define TEST_BACKEND ADSM_BACKEND_CUDA
static void attach(void) {}
#define DIFFERENT_ADDRESSES "ADSM_CUDA_SAME_ADDRESS"
#else
#define TEST_BACKEND ADSM_BACKEND_EMU
static void attach(void) {}
#define DIFFERENT_ADDRESSES "ADSM_EMU_SAME_ADDRESS"
#endif

#ifdef TEST_TRANSLATE_STAGED
#define SUITE_TRANSLATE "staged"
#else
#define SUITE_TRANSLATE "in-place"
#endif

/* adsm_init with ADSM_TRANSLATE=translate (the suite's technique, or auto where a test is about it). */
static void start_translating(adsm_protocol_kind protocol, size_t block, int same_address, unsigned devices,
                              const char *translate) {
    setenv(DIFFERENT_ADDRESSES, same_address ? "1" : "0", 1);
    setenv("ADSM_TRANSLATE", translate, 1);
    unsetenv("ADSM_PROTOCOL");
    unsetenv("ADSM_BLOCK_SIZE");
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = TEST_BACKEND;
    cfg.protocol = protocol;
    cfg.block_size = block;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 2;
    cfg.emu_devices = devices;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    attach();
}

static void start_on(adsm_protocol_kind protocol, size_t block, int same_address, unsigned devices) {
    start_translating(protocol, block, same_address, devices, SUITE_TRANSLATE);
}

static void start(adsm_protocol_kind protocol, size_t block, int same_address) {
    start_on(protocol, block, same_address, 1);
}

static uintptr_t dev_of(const void *p) { return p ? (uintptr_t)adsm_safe(p) : 0; }

static adsm_stats stats(void) {
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    return s;
}

/* A list of n nodes in one object, each pointing at the next (the last at the first: a cycle),
 * and at its own slice of `data`. */
static node *make_list(size_t n, float *data) {
    node *list = ADSM_ALLOC(node, n);
    cr_assert_not_null(list, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        list[i].value = (int64_t)i;
        list[i].next = &list[(i + 1) % n];
        list[i].data = data + i;
        list[i].kids[0] = list[i].kids[1] = NULL;
    }
    return list;
}

typedef struct protocol_case {
    adsm_protocol_kind protocol;
    size_t block;
} protocol_case;

static protocol_case protocol_cases[] = {
    {ADSM_PROTOCOL_BATCH, 4096}, {ADSM_PROTOCOL_LAZY, 4096}, {ADSM_PROTOCOL_ROLLING, 4096},
    {ADSM_PROTOCOL_ROLLING, 65536}};

ParameterizedTestParameters(translate, kernels_see_device_addresses_and_the_host_its_own) {
    return cr_make_param_array(protocol_case, protocol_cases, sizeof protocol_cases / sizeof *protocol_cases);
}

/* What a kernel reads in the fields is the device address of what they point at; what it writes
 * there comes home as host addresses; the CPU never sees a device address. */
ParameterizedTest(protocol_case *c, translate, kernels_see_device_addresses_and_the_host_its_own) {
    start(c->protocol, c->block, 0);
    const size_t n = 1000; /* 48 KB: several blocks */
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_neq(dev_of(list), (uintptr_t)list, "the addresses should differ in this test");
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(4, 256), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[2 * i], dev_of(&list[(i + 1) % n]), "node %zu: the kernel saw next = %#llx", i,
                     (unsigned long long)seen[2 * i]);
        cr_assert_eq(seen[2 * i + 1], dev_of(&data[i]), "node %zu: data", i);
        cr_assert_eq(list[i].next, &list[(i + 1) % n], "node %zu: the host copy keeps host addresses", i);
    }
    cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i + 1 < n; i++) {
        cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu: written by the kernel, home as %p", i,
                     (void *)list[i].next);
        cr_assert_eq(list[i].kids[0], list[i].next);
        cr_assert_eq(list[i].value, (int64_t)i + 1);
        cr_assert_eq(list[i].data, &data[i]);
    }
    adsm_stats s = stats();
    cr_assert_gt(s.translated_fields, 0);
    adsm_shutdown();
}

/* Where the addresses agree nothing is translated (no pass, no bytes). */
Test(translate, nothing_moves_where_the_addresses_agree) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 1);
    const size_t n = 100;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
#ifdef TEST_ON_REAL_CUDA
    if (dev_of(list) != (uintptr_t)list) { /* a GPU may refuse the host's range (ADSM_LOG=info says why) */
        adsm_shutdown();
        cr_skip_test("this GPU gave the device other addresses");
    }
#endif
    cr_assert_eq(dev_of(list), (uintptr_t)list, "the device sees other addresses although asked for the host's");
    void *buffer = adsm_dev_alloc(4096); /* a device buffer is no reason to translate */
    cr_assert_not_null(buffer);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 128), list, seen, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[0], (uint64_t)(uintptr_t)&list[1]);
    adsm_stats s = stats();
    cr_assert_eq(s.translated_fields, 0);
    cr_assert_eq(s.translation_bytes, 0);
    adsm_shutdown();
}

/* A launch that names no typed object reaches none through declared fields: nothing is
 * translated for it (typed objects exist, the addresses differ), and the next kernel that names
 * the list still sees device addresses. */
Test(translate, a_launch_naming_no_typed_object_translates_nothing) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 100;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    for (size_t i = 0; i < n; i++) data[i] = 1;
    adsm_stats before = stats();
    cr_assert_eq(ADSM_CALL(k_fill_slowly, adsm_grid_1d(1, 32), data, n, 3), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    adsm_stats after = stats();
    cr_assert_eq(after.translated_fields, before.translated_fields, "%llu fields translated for an untyped launch",
                 (unsigned long long)(after.translated_fields - before.translated_fields));
    cr_assert_eq(after.translation_bytes, before.translation_bytes);
    for (size_t i = 0; i < n; i++) cr_assert_eq(data[i], 4.0f, "data[%zu] = %f", i, data[i]);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 128), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[0], dev_of(&list[1]), "the kernel naming the list saw %#llx", (unsigned long long)seen[0]);
    cr_assert_eq(seen[1], dev_of(&data[0]));
    cr_assert_eq(list[0].next, &list[1]);
    cr_assert_gt(stats().translated_fields, after.translated_fields);
    adsm_shutdown();
}

#if !defined(TEST_ON_CUDA_DOUBLE) && !defined(TEST_ON_REAL_CUDA)
/* Waits, a bounded number of 1 ms naps, until the file /tmp/adsm-translate-async-<tag> exists;
 * saw[0] = whether it did. Emu only: the body runs on the CPU, in the device process. */
ADSM_KERNEL(k_wait_for_file, ADSM_OUT(int, saw), ADSM_VALUE(int64_t, tag));

void k_wait_for_file(adsm_grid g, int *saw, int64_t tag) {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t != 0) continue;
        char path[64];
        snprintf(path, sizeof path, "/tmp/adsm-translate-async-%lld", (long long)tag);
        saw[0] = 0;
        for (int i = 0; i < 60000 && !saw[0]; i++) {
            struct timespec nap = {0, 1000000};
            if (access(path, F_OK) == 0) saw[0] = 1;
            else nanosleep(&nap, NULL);
        }
    }
}

/* The same, reading a typed list too: list[0].next as a number into seen[0] first. */
ADSM_KERNEL(k_wait_reading, ADSM_IN(node, list), ADSM_OUT(uint64_t, seen), ADSM_OUT(int, saw),
            ADSM_VALUE(int64_t, tag));

void k_wait_reading(adsm_grid g, const node *list, uint64_t *seen, int *saw, int64_t tag) {
    ADSM_FOR_EACH_THREAD(g, t) {
        if (t == 0) seen[0] = (uint64_t)(size_t)list[0].next;
    }
    k_wait_for_file(g, saw, tag);
}

/* ... and returns before its kernel finished: the kernel waits for a file the test makes only
 * once the launch returned (a launch that waited would leave it waiting in vain for a minute). */
static void launch_then_release(int typed) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    node *list = make_list(10, adsm_alloc(10 * sizeof(float)));
    int *saw = adsm_alloc(sizeof *saw);
    uint64_t *seen = adsm_alloc(sizeof *seen);
    cr_assert(list && saw && seen, "%s", adsm_last_error());
    char path[64];
    snprintf(path, sizeof path, "/tmp/adsm-translate-async-%lld", (long long)getpid());
    unlink(path);
    adsm_result r = typed ? ADSM_CALL(k_wait_reading, adsm_grid_1d(1, 32), list, seen, saw, (int64_t)getpid())
                          : ADSM_CALL(k_wait_for_file, adsm_grid_1d(1, 32), saw, (int64_t)getpid());
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    unlink(path);
    cr_assert_eq(saw[0], 1, "the launch waited for its kernel");
    if (typed) {
        cr_assert_eq(seen[0], dev_of(&list[1]), "the kernel saw %#llx", (unsigned long long)seen[0]);
        cr_assert_eq(list[0].next, &list[1]);
    }
    adsm_shutdown();
}

Test(translate, a_launch_naming_no_typed_object_stays_asynchronous) { launch_then_release(0); }

#ifdef TEST_TRANSLATE_STAGED
/* Staged, a launch whose kernel only reads typed objects needs nothing of the device's memory to
 * bring them home (the host copies are current), so it returns before its kernel finished too. */
Test(translate, a_launch_only_reading_typed_objects_stays_asynchronous) { launch_then_release(1); }
#endif
#endif

/* Structs of 8 KiB whose one pointer field is a small part of them: each is translated right,
 * and staged, only the fields' span of each crosses (not the payloads). */
Test(translate, large_structs_move_only_their_fields) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    const size_t n = 16;
    big_node *big = ADSM_ALLOC(big_node, n);
    uint64_t *seen = adsm_alloc(n * sizeof *seen);
    cr_assert(big && seen, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        big[i].next = &big[(i + 5) % n];
        memset(big[i].payload, (int)i, sizeof big[i].payload);
    }
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
    cr_assert_eq(ADSM_CALL(k_big_links, adsm_grid_1d(1, 32), big, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    adsm_stats st = stats();
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[i], dev_of(&big[(i + 5) % n]), "struct %zu", i);
        cr_assert_eq(big[i].next, &big[(i + 5) % n], "struct %zu came home in host addresses", i);
        cr_assert_eq(big[i].payload[100], (char)i);
    }
    cr_assert_eq(st.translated_fields, 2 * n);
    cr_assert_leq(st.translation_bytes, 4 * n * sizeof(void *), "%llu bytes moved to translate %zu fields",
                  (unsigned long long)st.translation_bytes, n);
    adsm_shutdown();
}

/* A CPU write after the kernel (rolling: the block is fetched, written, evicted) is seen by the
 * next kernel translated, and what the CPU reads of a kernel's writes is always host addresses,
 * block by block. */
Test(translate, blocks_fetched_and_evicted_one_by_one_stay_right) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 4096; /* 48 blocks of 4 KiB */
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (size_t i = 0; i < n; i += 97) { /* scattered reads and writes: single blocks */
        cr_assert_eq(list[i].next, i + 1 < n ? &list[(i + 2) % n] : &list[0], "node %zu", i);
        list[i].next = &list[i];
    }
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(16, 256), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (size_t i = 0; i < n; i++) {
        const node *want = i % 97 == 0 ? &list[i] : i + 1 < n ? &list[(i + 2) % n] : &list[0];
        cr_assert_eq(seen[2 * i], dev_of(want), "node %zu", i);
    }
    adsm_shutdown();
}

/* A field holding an address outside shared memory fails the launch, naming kernel, object,
 * element and field; nothing is left translated, and a corrected structure works. */
Test(translate, a_field_pointing_outside_shared_memory_fails_the_launch) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    const size_t n = 64;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    static node outside;
    list[5].next = &outside;
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 64), list, seen, n), ADSM_ERROR_NOT_SHARED);
    const char *e = adsm_last_error();
    cr_assert(strstr(e, "k_links") && strstr(e, "'next'") && strstr(e, "'node' 5"), "%s", e);
    float *buffer = adsm_dev_alloc(64); /* a device buffer: the message names it */
    cr_assert_not_null(buffer, "%s", adsm_last_error());
    list[5].next = (node *)(void *)buffer;
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 64), list, seen, n), ADSM_ERROR_NOT_SHARED);
    cr_assert(strstr(adsm_last_error(), "a device buffer from adsm_dev_alloc"), "%s", adsm_last_error());
    list[5].next = &list[6];
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 64), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_dev_free(buffer), ADSM_OK);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[2 * i], dev_of(&list[(i + 1) % n]), "node %zu", i);
        cr_assert_eq(list[i].next, &list[(i + 1) % n], "node %zu came back untranslated", i);
    }
    adsm_shutdown();
}

/* A launch that fails on the last field of one element leaves nothing translated: not an object
 * translated before it, not the blocks before it, not that element's earlier fields. Untyped
 * afterwards, both lists' device copies hold host addresses everywhere (a kernel reads them raw). */
Test(translate, a_failed_launch_leaves_nothing_translated) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 512; /* 20 KiB: five blocks */
    float *data = adsm_alloc(n * sizeof *data);
    node *a = make_list(n, data), *b = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(8, 64), a, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    static node outside;
    b[300].kids[1] = &outside; /* after next, data and kids[0] of the same element */
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(8, 64), b, seen, n), ADSM_ERROR_NOT_SHARED);
    cr_assert(strstr(adsm_last_error(), "'kids[1]'") && strstr(adsm_last_error(), "'node' 300"), "%s",
              adsm_last_error());
    cr_assert_eq(adsm_set_type(a, NULL), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_set_type(b, NULL), ADSM_OK, "%s", adsm_last_error());
    node *lists[] = {a, b};
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(8, 64), lists[l], seen, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(seen[2 * i], (uint64_t)(uintptr_t)&lists[l][(i + 1) % n], "list %d node %zu: next", l, i);
            cr_assert_eq(seen[2 * i + 1], (uint64_t)(uintptr_t)(data + i), "list %d node %zu: data", l, i);
        }
    }
    adsm_shutdown();
}

/* A kernel that leaves a field pointing into no shared object: the launch and the next sync say
 * so, naming the field; the other fields come home right. */
Test(translate, a_kernel_leaving_a_wild_pointer_is_an_error) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 64;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    adsm_result r = ADSM_CALL(k_poison, adsm_grid_1d(1, 32), list, (size_t)7, (uint64_t)0x1234);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED);
    cr_assert(strstr(adsm_last_error(), "k_poison") && strstr(adsm_last_error(), "'next'") &&
                  strstr(adsm_last_error(), "0x1234"),
              "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_NOT_SHARED);
    cr_assert(strstr(adsm_last_error(), "'node' 7"), "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "reported once");
    for (size_t i = 0; i < n; i++)
        if (i != 7) cr_assert_eq(list[i].next, &list[(i + 1) % n], "node %zu", i);
    adsm_shutdown();
}

/* NULL in a field declared ADSM_PTR_NONNULL fails the launch. */
Test(translate, null_in_a_nonnull_field_fails_the_launch) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    strict_node *s = ADSM_ALLOC(strict_node, 4);
    for (int i = 0; i < 4; i++) s[i].peer = &s[(i + 1) % 4];
    s[2].peer = NULL;
    uint64_t *seen = adsm_alloc(64);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 32), (node *)(void *)s, seen, (size_t)0),
                 ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "'peer'") && strstr(adsm_last_error(), "NONNULL"), "%s", adsm_last_error());
    adsm_shutdown();
}

/* A kernel that leaves NULL in a field declared ADSM_PTR_NONNULL: the error says the kernel left
 * it (it read as if the launch had been refused for it). */
Test(translate, a_kernel_leaving_null_in_a_nonnull_field_is_told_so) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    strict_node *s = ADSM_ALLOC(strict_node, 4);
    for (int i = 0; i < 4; i++) s[i].peer = &s[(i + 1) % 4];
    adsm_result r = ADSM_CALL(k_unlink, adsm_grid_1d(1, 32), s, (size_t)2);
    if (r == ADSM_OK) r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_INVALID_VALUE, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "kernel 'k_unlink' left field 'peer'") && strstr(adsm_last_error(), "NONNULL"),
              "%s", adsm_last_error());
    adsm_shutdown();
}

/* Typing checks what it is given. */
Test(translate, typing_refuses_what_does_not_fit) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    void *odd = adsm_alloc(sizeof(node) * 3 + 8);
    cr_assert_eq(adsm_set_type(odd, ADSM_TYPE_OF(node)), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "whole number"), "%s", adsm_last_error());
    node *ok = adsm_alloc(sizeof(node) * 3);
    cr_assert_eq(adsm_set_type((char *)ok + 8, ADSM_TYPE_OF(node)), ADSM_ERROR_NOT_OBJECT_START);
    int local;
    cr_assert_eq(adsm_set_type(&local, ADSM_TYPE_OF(node)), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(adsm_set_type(ok, ADSM_TYPE_OF(node)), ADSM_OK);
    cr_assert_eq(adsm_set_type(ok, NULL), ADSM_OK);
    static const adsm_field_desc bad_field = {"x", 3, 1, NULL, 1};
    static const adsm_type_desc bad = {"bad", 16, 1, &bad_field};
    cr_assert_eq(adsm_set_type(ok, &bad), ADSM_ERROR_INVALID_VALUE);
    cr_assert_null(adsm_alloc_typed(NULL, 4));
    cr_assert_null(ADSM_ALLOC(node, 0));
    cr_assert_null(adsm_alloc_typed(ADSM_TYPE_OF(node), SIZE_MAX / 8));
    cr_assert_null(ADSM_ALLOC(packed_node, 1000), "a packed struct of %zu bytes", sizeof(packed_node));
    cr_assert(strstr(adsm_last_error(), "packed"), "%s", adsm_last_error());
    cr_assert_null(ADSM_ALLOC(cell, 10), "a union's two members");
    cr_assert(strstr(adsm_last_error(), "overlap"), "%s", adsm_last_error());
    cr_assert_eq(adsm_set_type(ok, ADSM_TYPE_OF(cell)), ADSM_ERROR_INVALID_VALUE);
    adsm_shutdown();
}

/* Fields further apart than the staging buffer: each struct's field span goes through it in
 * pieces (it went whole, 6 MiB into 4 MiB, and crashed) where a pass reads the device's copy: a
 * launch's translation after a kernel wrote the structs and, with two devices, the walk for what
 * a kernel reaches (even where addresses agree). */
static void far_fields(adsm_protocol_kind protocol, int same_address, unsigned devices) {
    start_on(protocol, 4096, same_address, devices);
    far_node *far = ADSM_ALLOC(far_node, 2);
    uint64_t *seen = adsm_alloc(4 * sizeof *seen);
    cr_assert(far && seen, "%s", adsm_last_error());
    far[0].first = &far[0], far[0].second = &far[1];
    far[1].first = &far[1], far[1].second = NULL;
    int other = devices > 1; /* the swap runs on the other device: only it holds the structs then */
    cr_assert_eq(ADSM_CALL_ON(other, k_far_swap, adsm_grid_1d(1, 32), far, (size_t)2), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(0, k_far_links, adsm_grid_1d(1, 32), far, seen, (size_t)2), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[0], dev_of(&far[1]), "far[0].first: the kernel saw %#llx", (unsigned long long)seen[0]);
    cr_assert_eq(seen[1], dev_of(&far[0]), "far[0].second: the kernel saw %#llx", (unsigned long long)seen[1]);
    cr_assert_eq(seen[2], 0);
    cr_assert_eq(seen[3], dev_of(&far[1]));
    cr_assert_eq(far[0].second, &far[0], "the host keeps host addresses");
    cr_assert_eq(far[1].first, NULL);
    adsm_shutdown();
}

Test(translate, fields_further_apart_than_the_stage_lazy) { far_fields(ADSM_PROTOCOL_LAZY, 0, 1); }
Test(translate, fields_further_apart_than_the_stage_rolling) { far_fields(ADSM_PROTOCOL_ROLLING, 0, 1); }
#ifndef TEST_ON_CUDA_DOUBLE /* two emulated devices */
Test(translate, fields_further_apart_than_the_stage_on_two_devices) { far_fields(ADSM_PROTOCOL_LAZY, 1, 2); }
#endif

/* Safe objects sit at device addresses of their own whatever the placement: a field pointing
 * into one holds that address on the device, and the host's at home. */
Test(translate, fields_into_safe_objects_hold_their_device_addresses) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 1);
    const size_t n = 200;
    float *data = adsm_safe_alloc(n * sizeof *data);
    node *list = adsm_safe_alloc(n * sizeof *list);
    cr_assert_not_null(list, "%s", adsm_last_error());
    cr_assert_eq(adsm_set_type(list, ADSM_TYPE_OF(node)), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        list[i].next = &list[(i + 1) % n];
        list[i].data = &data[i];
    }
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_neq(dev_of(list), (uintptr_t)list);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 256), adsm_safe(list), seen, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), adsm_safe(list), n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[2 * i], dev_of(&list[(i + 1) % n]), "node %zu", i);
        cr_assert_eq(seen[2 * i + 1], dev_of(&data[i]), "node %zu: data", i);
        if (i + 1 < n) cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu", i);
    }
    adsm_shutdown();
}

#ifndef TEST_TRANSLATE_STAGED
/* Where the fields are: on cuda the patch kernel rewrites them on the device, and a launch copies
 * only its fault record home, twice (the check and the rewrite queued together share one read,
 * the pass back has the other); on emu they are rewritten through the device's window, with no
 * copy at all. */
Test(translate, the_device_patches_in_place_without_copies) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    const size_t n = 500;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(2, 256), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
#ifdef TEST_ON_CUDA_DOUBLE
    unsigned long long d2h_before = cuda_double_counters().d2h_bytes;
#endif
    cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    adsm_stats st = stats();
    cr_assert_eq(st.translation_bytes, 0);
    cr_assert_eq(st.translated_fields, 2 * n * 4, "%llu", (unsigned long long)st.translated_fields);
    cr_assert_eq(st.launches, 1, "the patch kernels are not the program's launches");
    cr_assert_eq(st.d2h_copies, 0, "%llu copies home", (unsigned long long)st.d2h_copies);
#ifdef TEST_ON_CUDA_DOUBLE
    unsigned long long d2h = cuda_double_counters().d2h_bytes - d2h_before;
    cr_assert_eq(d2h, 2 * 5 * sizeof(uint64_t), "the fault record read twice, not %llu bytes home", d2h);
#endif
    for (size_t i = 0; i + 1 < n; i++) cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu", i);
    adsm_shutdown();
}
#endif

#if defined(TEST_ON_CUDA_DOUBLE) && !defined(TEST_TRANSLATE_STAGED)
/* By default a GPU patches pointer fields where they are only where the typed objects hold 128
 * KiB or more (translate.h, ADSM__XLATE_PATCH_MIN): below that a launch's fixed round trips cost
 * more than staging the fields. A small list is staged (its bytes come home), a large one is
 * patched (none do), and each comes out right. */
Test(translate, by_default_small_structures_are_staged_and_large_ones_patched) {
    start_translating(ADSM_PROTOCOL_LAZY, 4096, 0, 1, "auto");
    const size_t small = 500, large = ((size_t)128 << 10) / sizeof(node) + 1;
    float *data = adsm_alloc(large * sizeof *data);
    uint64_t *seen = adsm_alloc(2 * large * sizeof *seen);
    node *list = make_list(small, data);
    for (int round = 0; round < 2; round++) {
        size_t n = round ? large : small;
        cr_assert_eq(adsm_reset_stats(), ADSM_OK);
        cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        adsm_stats st = stats();
        if (round == 0)
            cr_assert_geq(st.translation_bytes, 2 * n * sizeof(node), "%zu nodes: staged, both ways", n);
        else
            cr_assert_eq(st.translation_bytes, 0, "%zu nodes: patched where they are", n);
        cr_assert_eq(st.translated_fields, 2 * n * 4, "%zu nodes: four fields a node, both ways", n);
        for (size_t i = 0; i + 1 < n; i++)
            cr_assert_eq(list[i].next, &list[(i + 2) % n], "%zu nodes: node %zu", n, i);
        cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 32), list, seen, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(seen[0], dev_of(&list[2]), "%zu nodes: the kernel saw device addresses", n);
        if (round == 0) {
            cr_assert_eq(adsm_free(list), ADSM_OK);
            list = make_list(large, data);
        }
    }
    adsm_shutdown();
}
#endif

#ifdef TEST_TRANSLATE_STAGED /* through host memory: on cuda, and on emu when asked for */
/* Staged, a typed object moves as a hand-written deep copy would: once to the device per launch,
 * read from the host's bytes and sent translated in place of its raw flush, and home only when a
 * kernel wrote it (its host copy is then current and Dirty, the device's left stale in device
 * form). A launch that writes it reads its host pages too (its release made it Invalid, but they
 * still hold what was flushed). So the steps cost 1, 2, 1 and 1 copies of it, and one copy of it
 * goes to the device each time. */
Test(translate, a_structure_current_on_the_host_is_not_copied_home_to_go) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    const size_t n = 300, bytes = n * sizeof(node);
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    struct {
        int skip;
        size_t copies;
        const char *why;
    } steps[] = {{0, 1, "read, written by the CPU"}, {1, 2, "written by the kernel"},
                 {0, 1, "read after a kernel wrote it"}, {0, 1, "read again"}};
    for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
        cr_assert_eq(adsm_reset_stats(), ADSM_OK);
        adsm_result r = steps[s].skip ? ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n)
                                      : ADSM_CALL(k_links, adsm_grid_1d(2, 256), list, seen, n);
        cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(stats().translation_bytes, steps[s].copies * bytes, "%s: %llu bytes", steps[s].why,
                     (unsigned long long)stats().translation_bytes);
        cr_assert_eq(stats().h2d_bytes, bytes, "%s: %llu bytes there",
                     steps[s].why, (unsigned long long)stats().h2d_bytes);
        if (s == 2) cr_assert_eq(list[0].next, &list[2]); /* the CPU reads it: current on both sides next */
    }
    cr_assert_eq(seen[0], dev_of(&list[2]), "the kernel saw the skipped list");
    for (size_t i = 0; i + 1 < n; i++) cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu", i);
    adsm_shutdown();
}

ParameterizedTestParameters(translate, what_a_kernel_wrote_comes_home_with_the_translation_back) {
    static protocol_case cases[] = {{ADSM_PROTOCOL_LAZY, 4096}, {ADSM_PROTOCOL_ROLLING, 4096},
                                    {ADSM_PROTOCOL_ROLLING, 65536}};
    return cr_make_param_array(protocol_case, cases, sizeof cases / sizeof *cases);
}

/* Staged, the translation back after a kernel brings the typed objects it wrote home anyway: their
 * host copies take those bytes and are left Dirty (the device copy, in device form, is stale), so
 * the CPU reads and writes them without a fault or a fetch, sees what the kernel wrote in host
 * addresses, and its write reaches the next kernel. */
ParameterizedTest(protocol_case *c, translate, what_a_kernel_wrote_comes_home_with_the_translation_back) {
    start(c->protocol, c->block, 0);
    const size_t n = 2000; /* 80 KB: several blocks, two rolling blocks of 64 KiB */
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_eq(ADSM_CALL(k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
    for (size_t i = 0; i + 1 < n; i++) {
        cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu: %p", i, (void *)list[i].next);
        cr_assert_eq(list[i].kids[0], list[i].next, "node %zu", i);
        cr_assert_eq(list[i].value, (int64_t)i + 1, "node %zu", i);
    }
    adsm_stats st = stats();
    cr_assert_eq(st.read_faults, 0, "%llu read faults on a list the translation back brought home",
                 (unsigned long long)st.read_faults);
    cr_assert_eq(st.d2h_bytes, 0, "%llu bytes fetched", (unsigned long long)st.d2h_bytes);
    list[5].next = &list[7]; /* Dirty already: no fault, and the next kernel sees the write */
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(8, 256), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[10], dev_of(&list[7]), "the kernel saw node 5's next at %#llx", (unsigned long long)seen[10]);
    cr_assert_eq(seen[12], dev_of(&list[8]));
    cr_assert_eq(stats().write_faults, 0);
    adsm_shutdown();
}

/* Staged, small typed objects lying end to end go through the stage together: a launch costs a
 * copy each way for 64 one-node objects, not 64; and each comes home right. */
Test(translate, small_objects_end_to_end_are_staged_together) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    enum { N = 64 };
    node *nodes[N];
    for (int i = 0; i < N; i++) nodes[i] = ADSM_ALLOC(node, 1);
    for (int i = 0; i < N; i++) {
        nodes[i]->next = nodes[(i + 1) % N];
        nodes[i]->value = i;
        if (i) cr_assert_eq((uintptr_t)nodes[i], (uintptr_t)nodes[i - 1] + 4096, "objects packed end to end");
    }
    uint64_t *seen = adsm_alloc(2 * sizeof *seen);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
    cr_assert_eq(ADSM_CALL(k_links, adsm_grid_1d(1, 32), nodes[5], seen, (size_t)1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    adsm_stats st = stats();
    cr_assert_eq(seen[0], dev_of(nodes[6]));
    cr_assert_eq(st.h2d_copies, 1, "the nodes, once: %llu copies", (unsigned long long)st.h2d_copies);
    cr_assert_eq(st.d2h_copies, 0, "a kernel that only reads them brings none home: %llu copies",
                 (unsigned long long)st.d2h_copies);
    cr_assert_geq(st.translation_bytes, (N - 1) * 4096, "staged: the nodes went through host memory");
    cr_assert_eq(st.translated_fields, N * 4, "four fields a node, one way");
    cr_assert_eq(adsm_reset_stats(), ADSM_OK); /* one written: all come home in one copy */
    cr_assert_eq(ADSM_CALL(k_bump, adsm_grid_1d(1, 32), nodes[5], (size_t)1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    st = stats();
    cr_assert_eq(st.d2h_copies, 1, "translation copies home: %llu", (unsigned long long)st.d2h_copies);
    cr_assert_eq(st.translated_fields, 2 * N * 4, "four fields a node, both ways");
    cr_assert_eq(nodes[5]->value, 105);
    for (int i = 0; i < N; i++) cr_assert_eq(nodes[i]->next, nodes[(i + 1) % N], "node %d", i);
    adsm_shutdown();
}
#endif

#if defined(TEST_ON_CUDA_DOUBLE) && defined(TEST_TRANSLATE_STAGED)
/* Staged on a GPU, the translation copies through a stage the driver page-locked once, kept for
 * the next launch: the copies are DMA from and into it, as a hand-written deep copy's are from its
 * page-locked buffer, never through the backend's own pinned staging (a memcpy each way). At
 * shutdown the stage goes. */
Test(translate, the_stage_is_page_locked_once_and_kept) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    const size_t n = 2000, bytes = n * sizeof(node), launches = 3;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_reset_stats(), ADSM_OK);
    for (size_t k = 0; k < launches; k++) {
        cr_assert_eq(ADSM_CALL(k_bump, adsm_grid_1d(8, 256), list, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    }
    adsm_stats st = stats();
    cr_assert_eq(st.translation_bytes, 2 * launches * bytes, "the list each way at each launch: %llu bytes",
                 (unsigned long long)st.translation_bytes);
    cr_assert_eq(st.staged_bytes, 0, "%llu bytes through the backend's staging", (unsigned long long)st.staged_bytes);
    cr_assert_eq(stbds_arrlen(adsm__rt.xlate_stages), 1, "one stage for every pass");
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(list[i].value, (int64_t)(i + 100 * launches), "node %zu", i);
        cr_assert_eq(list[i].next, &list[(i + 1) % n], "node %zu", i);
    }
    adsm_shutdown();
    cr_assert_null(adsm__rt.xlate_stages, "the stage outlived adsm_shutdown");
}
#endif

#ifdef TEST_ON_CUDA_DOUBLE
/* A second GPU always has addresses of its own: a kernel there sees its addresses (consistent
 * offsets, neither the host's nor the first GPU's), and what it writes comes home right. */
Test(translate, a_second_gpu_translates_with_its_own_addresses) {
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    setenv(DIFFERENT_ADDRESSES, "1", 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.devices = "all";
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    attach();
    cr_assert_eq(adsm_device_count(), 2);
    const size_t n = 300;
    float *data = adsm_alloc(n * sizeof *data);
    node *list = make_list(n, data);
    uint64_t *seen = adsm_alloc(2 * n * sizeof *seen);
    cr_assert_eq(ADSM_CALL_ON(1, k_links, adsm_grid_1d(2, 256), list, seen, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(1, k_skip, adsm_grid_1d(1, 32), list, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    uint64_t base = seen[2 * (n - 1)]; /* list[n - 1].next: list's own device address on GPU 1 */
    cr_assert_neq(base, (uint64_t)(uintptr_t)list);
    cr_assert_neq(base, dev_of(list));
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(seen[2 * i], base + ((i + 1) % n) * sizeof(node), "node %zu", i);
        cr_assert_eq(seen[2 * i + 1] - seen[1], i * sizeof(float), "node %zu: data", i);
        if (i + 1 < n) cr_assert_eq(list[i].next, &list[(i + 2) % n], "node %zu", i);
    }
    adsm_shutdown();
}
#endif

#ifndef TEST_ON_CUDA_DOUBLE
/* On emu with addresses of its own, kernels really follow the pointers: a list of nodes each in
 * an object of its own, all pointing at one data object (a shared target); the kernel walks it
 * and leaves a pointer to the last node in the holder. */
Test(translate, a_kernel_follows_a_list_of_objects) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 50;
    float *shared_data = adsm_alloc(sizeof(float) * 4);
    shared_data[0] = 2;
    holder *h = ADSM_ALLOC(holder, 1);
    node *nodes[50];
    for (size_t i = 0; i < n; i++) {
        nodes[i] = ADSM_ALLOC(node, 1);
        cr_assert_not_null(nodes[i], "%s", adsm_last_error());
        nodes[i]->value = (int64_t)i;
        nodes[i]->data = shared_data;
    }
    for (size_t i = 0; i + 1 < n; i++) nodes[i]->next = nodes[i + 1];
    h->head = nodes[0];
    cr_assert_eq(ADSM_CALL(k_walk, adsm_grid_1d(1, 32), h, nodes[0], 2 * n, 0), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(h->count, (int64_t)n);
    cr_assert_eq(h->sum, (int64_t)(n * (n - 1) / 2 + 2 * n));
    cr_assert_eq(h->head, nodes[n - 1]);
    cr_assert_eq(nodes[3]->next, nodes[4]);
    adsm_shutdown();
}

#ifndef TEST_ON_REAL_CUDA /* two emulated devices */
typedef struct reach_case {
    adsm_protocol_kind protocol;
    int same_address;
} reach_case;

static reach_case reach_cases[] = {
    {ADSM_PROTOCOL_LAZY, 0}, {ADSM_PROTOCOL_LAZY, 1}, {ADSM_PROTOCOL_ROLLING, 0}, {ADSM_PROTOCOL_ROLLING, 1}};

ParameterizedTestParameters(translate, with_two_devices_what_a_kernel_reaches_goes_with_it) {
    return cr_make_param_array(reach_case, reach_cases, sizeof reach_cases / sizeof *reach_cases);
}

/* Two devices: a kernel on device 1 writes a list's pool, so only device 1 holds it, and the CPU
 * then writes the data its nodes point at, so only the host holds that. A kernel on device 0 that
 * names neither (only the holder of the list's head, and an unrelated node) follows the head into
 * the pool and on into the data: both must have come to device 0 with it, the pool from device 1
 * and the data from the host. Where the addresses differ, device 0's fields are also translated. */
ParameterizedTest(reach_case *c, translate, with_two_devices_what_a_kernel_reaches_goes_with_it) {
    start_on(c->protocol, 4096, c->same_address, 2);
    const size_t n = 300; /* 12 KiB of nodes: three blocks */
    float *data = adsm_alloc(n * sizeof *data);
    node *pool = make_list(n, data);
    pool[n - 1].next = NULL; /* a list, not a cycle */
    holder *h = ADSM_ALLOC(holder, 1);
    node *other = ADSM_ALLOC(node, 1);
    cr_assert(h && other, "%s", adsm_last_error());
    h->head = &pool[0];
    cr_assert_eq(ADSM_CALL_ON(1, k_bump, adsm_grid_1d(2, 256), pool, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) data[i] = (float)(2 * i);
    cr_assert_eq(ADSM_CALL_ON(0, k_walk, adsm_grid_1d(1, 32), h, other, 2 * n, 0), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(h->count, (int64_t)n, "the walk on device 0 found %lld nodes", (long long)h->count);
    int64_t want = 0;
    for (size_t i = 0; i < n; i++) want += (int64_t)i + 100 + (int64_t)(2 * i);
    cr_assert_eq(h->sum, want, "values and data as device 1 and the CPU left them");
    cr_assert_eq(h->head, &pool[n - 1], "the head comes home in host addresses");
    for (size_t i = 0; i < n; i++) cr_assert_eq(pool[i].value, (int64_t)i + 100, "node %zu", i);
    adsm_shutdown();
}

/* Several devices run kernels on several streams, ordered by what they access. A kernel that
 * only reaches an object (through a field) comes after one still writing it on the same device:
 * here the walk must see all the slow kernel's increments, not some. */
Test(translate, a_kernel_reading_what_it_reaches_waits_for_its_writer) {
    start_on(ADSM_PROTOCOL_LAZY, 4096, 1, 2); /* same addresses: no translation waits for the device */
    const size_t n = 64, reps = 200000;
    float *data = adsm_alloc(n * sizeof *data);
    node *pool = make_list(n, data);
    pool[n - 1].next = NULL;
    holder *h = ADSM_ALLOC(holder, 1);
    node *other = ADSM_ALLOC(node, 1);
    cr_assert(h && other, "%s", adsm_last_error());
    h->head = &pool[0];
    for (size_t i = 0; i < n; i++) data[i] = 0;
    cr_assert_eq(ADSM_CALL_ON(0, k_fill_slowly, adsm_grid_1d(1, 32), data, n, reps), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(ADSM_CALL_ON(0, k_walk, adsm_grid_1d(1, 32), h, other, 2 * n, 0), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(h->count, (int64_t)n);
    cr_assert_eq(h->sum, (int64_t)(n * (n - 1) / 2 + n * reps), "the walk saw %lld of the data",
                 (long long)(h->sum - (int64_t)(n * (n - 1) / 2)));
    adsm_shutdown();
}
#endif

/* A list threaded through one pool object in a scrambled order, with a cycle's worth of
 * interior pointers: the kernel reverses it in place, and the host walks the reversed list. */
Test(translate, a_kernel_reverses_a_list_in_place) {
    start(ADSM_PROTOCOL_ROLLING, 4096, 0);
    const size_t n = 3000; /* 144 KB: 36 blocks */
    node *pool = ADSM_ALLOC(node, n);
    holder *h = ADSM_ALLOC(holder, 1);
    size_t *order = malloc(n * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = (i * 1237) % n; /* 1237 is prime to 3000 */
    for (size_t i = 0; i < n; i++) {
        pool[order[i]].value = (int64_t)i;
        pool[order[i]].next = i + 1 < n ? &pool[order[i + 1]] : NULL;
    }
    h->head = &pool[order[0]];
    cr_assert_eq(ADSM_CALL(k_walk, adsm_grid_1d(1, 32), h, pool, 2 * n, 1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(h->count, (int64_t)n);
    size_t seen = 0;
    for (node *p = h->head; p && seen <= n; p = p->next, seen++)
        cr_assert_eq(p, &pool[order[n - 1 - seen]], "node %zu of the reversed list", seen);
    cr_assert_eq(seen, n);
    free(order);
    adsm_shutdown();
}

#ifndef TEST_ON_REAL_CUDA /* a GPU's illegal address leaves its context unusable: not tried there */
/* The same walk over untyped objects: the kernel follows host addresses, which the device does
 * not map, and crashes as it would on a GPU; the host's data is as it was. */
Test(translate, a_kernel_following_an_untranslated_pointer_crashes_as_on_a_gpu) {
    start(ADSM_PROTOCOL_LAZY, 4096, 0);
    holder *h = adsm_alloc(sizeof *h);
    node *pool = adsm_alloc(2 * sizeof *pool);
    pool[0].value = 1;
    pool[0].next = &pool[1];
    h->head = &pool[0];
    cr_assert_eq(ADSM_CALL(k_walk, adsm_grid_1d(1, 32), h, pool, (size_t)10, 1), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "k_walk"), "%s", adsm_last_error());
    cr_assert_eq(pool[0].next, &pool[1]);
    adsm_shutdown();
}
#endif
#endif

/* ---- a randomized model: typed pools linked to each other at random ----------------------------
 * Pools of nodes are made and freed, the CPU points nodes at nodes of any pool (or NULL) and
 * changes values, kernels rewire a pool from its own fields' values (device addresses into any
 * pool), and every node's next and value are compared with a model that keeps (pool, index)
 * pairs. Freeing a pool first clears the fields pointing into it, as a program must. */
#define GRAPH_POOLS 6
typedef struct graph_model {
    node *pool[GRAPH_POOLS]; /* NULL: free slot */
    size_t n[GRAPH_POOLS];
    int *tpool[GRAPH_POOLS]; /* the model: next = &pool[tpool][tidx], or NULL where tpool < 0 */
    size_t *tidx[GRAPH_POOLS];
    int64_t *value[GRAPH_POOLS];
    uint64_t rng;
} graph_model;

static uint64_t graph_rand(graph_model *g) {
    g->rng ^= g->rng << 13, g->rng ^= g->rng >> 7, g->rng ^= g->rng << 17;
    return g->rng;
}

static int graph_live(graph_model *g) {
    int live[GRAPH_POOLS], k = 0;
    for (int p = 0; p < GRAPH_POOLS; p++)
        if (g->pool[p]) live[k++] = p;
    return k ? live[graph_rand(g) % (uint64_t)k] : -1;
}

static void graph_alloc(graph_model *g, int p) {
    g->n[p] = 1 + graph_rand(g) % 2500;
    g->pool[p] = ADSM_ALLOC(node, g->n[p]);
    cr_assert_not_null(g->pool[p], "%s", adsm_last_error());
    g->tpool[p] = malloc(g->n[p] * sizeof(int));
    g->tidx[p] = calloc(g->n[p], sizeof(size_t));
    g->value[p] = calloc(g->n[p], sizeof(int64_t));
    for (size_t i = 0; i < g->n[p]; i++) g->tpool[p][i] = -1;
}

static void graph_free(graph_model *g, int p) {
    for (int q = 0; q < GRAPH_POOLS; q++)
        for (size_t i = 0; g->pool[q] && i < g->n[q]; i++)
            if (g->tpool[q][i] == p) {
                g->tpool[q][i] = -1;
                g->pool[q][i].next = NULL;
            }
    cr_assert_eq(adsm_free(g->pool[p]), ADSM_OK, "%s", adsm_last_error());
    free(g->tpool[p]), free(g->tidx[p]), free(g->value[p]);
    g->pool[p] = NULL;
}

static void graph_verify(graph_model *g, int p, size_t op) {
    for (size_t i = 0; i < g->n[p]; i++) {
        node *want = g->tpool[p][i] < 0 ? NULL : &g->pool[g->tpool[p][i]][g->tidx[p][i]];
        cr_assert_eq(g->pool[p][i].next, want, "op %zu: pool %d node %zu: next %p, model %p", op, p, i,
                     (void *)g->pool[p][i].next, (void *)want);
        cr_assert_eq(g->pool[p][i].value, g->value[p][i], "op %zu: pool %d node %zu: value", op, p, i);
    }
}

static void graph_rewire(graph_model *g, int p, uint64_t seed) {
    cr_assert_eq(ADSM_CALL(k_rewire, adsm_grid_1d(1, 32), g->pool[p], g->n[p], seed), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    size_t n = g->n[p];
    for (size_t i = 0; i < n; i++) { /* the kernel's loop, on the model */
        if ((i * 2654435761u + seed) % 4 != 0) continue;
        g->tpool[p][i] = g->tpool[p][(7 * i + seed) % n];
        g->tidx[p][i] = g->tidx[p][(7 * i + seed) % n];
        g->value[p][i] += 1;
    }
}

ParameterizedTestParameters(translate, random_graphs_match_their_model) {
    return cr_make_param_array(protocol_case, protocol_cases, sizeof protocol_cases / sizeof *protocol_cases);
}

ParameterizedTest(protocol_case *c, translate, random_graphs_match_their_model) {
    start(c->protocol, c->block, 0);
    graph_model g;
    memset(&g, 0, sizeof g);
    g.rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)c->protocol ^ c->block;
    for (size_t op = 0; op < 1500; op++) {
        unsigned r = (unsigned)(graph_rand(&g) % 100);
        int p = graph_live(&g);
        if (p < 0 || r < 6) {
            for (int q = 0; q < GRAPH_POOLS; q++)
                if (!g.pool[q]) {
                    graph_alloc(&g, q);
                    break;
                }
        } else if (r < 10) {
            graph_free(&g, p);
        } else if (r < 60) { /* the CPU links a node, or cuts it */
            size_t i = graph_rand(&g) % g.n[p];
            int q = graph_rand(&g) % 8 ? graph_live(&g) : -1;
            size_t j = q < 0 ? 0 : graph_rand(&g) % g.n[q];
            g.pool[p][i].next = q < 0 ? NULL : &g.pool[q][j];
            g.tpool[p][i] = q;
            g.tidx[p][i] = j;
        } else if (r < 70) {
            size_t i = graph_rand(&g) % g.n[p];
            g.pool[p][i].value = g.value[p][i] = (int64_t)graph_rand(&g);
        } else if (r < 90) {
            graph_rewire(&g, p, graph_rand(&g) % 1000);
        } else {
            graph_verify(&g, p, op);
        }
    }
    for (int p = 0; p < GRAPH_POOLS; p++)
        if (g.pool[p]) graph_verify(&g, p, 1500);
    for (int p = 0; p < GRAPH_POOLS; p++)
        if (g.pool[p]) graph_free(&g, p);
    cr_assert_gt(stats().translated_fields, 0);
    adsm_shutdown();
}
