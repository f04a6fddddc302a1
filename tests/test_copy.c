#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/test_copy.c -- the copy machinery (adsm_impl/copy.h): device data reaches protected host
 * pages in one piece, with one CPU copy where whole huge pages can be moved.
 *
 *   - A thread that reads a block while another thread's fault fetches it sees either a fault
 *     (and then the whole new content) or the whole new content, never the old bytes of a part
 *     not yet copied: many rounds, lazy and rolling, a block size whose fetches are moved
 *     (2 MiB) and one whose fetches are forced through /proc/self/mem (64 KiB), and both again
 *     without /proc/self/mem.
 *   - Whole 2 MiB huge pages are moved (d2h_moved_bytes), pieces smaller than a huge page are
 *     forced (d2h_forced_bytes), the bytes are right wherever a range starts and ends.
 *   - Repeated fetches do not pile up mappings (each move leaves a VMA; they must be replaced,
 *     not accumulated).
 * Built a second time against the CUDA driver double (test_copy_cuda): the same results through
 * the cuda backend's staging; and a third time with translated addresses (test_copy_cuda_locked),
 * where the objects are page-locked and downloads are DMA into the protected pages. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <time.h>

#include "tests/protocol_common.h"
#include "tests/child.h"
#include "tests/death.h"
#include "tests/seccomp.h"

TestSuite(copy, .timeout = 60);

/* ---- readers never see a half-filled block ------------------------------------------------ */
typedef struct race_case {
    adsm_protocol_kind protocol;
    size_t block;
    int without_procmem;
    int plain_moves; /* moves without MREMAP_DONTUNMAP, as where mremap has none (gVisor) */
} race_case;

typedef struct race {
    int32_t *c;
    size_t n;            /* elements the reader checks: the first unit the main thread touches */
    int round;           /* published by the main thread once the kernel's results are Invalid */
    int32_t base;        /* the round's expected c[i] - i */
    int done;            /* the reader finished checking this round */
    int quit;
    unsigned long long wrong, checked;
    size_t first_wrong;
    int32_t got, want;
} race;

/* a busy wait: a sleep would wake far too late on a loaded machine */
static void spin_ns(uint64_t ns) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)(t.tv_nsec - t0.tv_nsec) < ns);
}

static void *race_reader(void *arg) {
    race *r = (race *)arg;
    for (int seen = 0;;) {
        int round;
        while ((round = __atomic_load_n(&r->round, __ATOMIC_ACQUIRE)) == seen)
            if (__atomic_load_n(&r->quit, __ATOMIC_ACQUIRE)) return NULL;
        seen = round;
        int32_t base = __atomic_load_n(&r->base, __ATOMIC_ACQUIRE);
        /* start a little after the main thread's fault, at a different point of its copy each
         * round: reading first would make this thread the fetcher (or a waiter) every time */
        spin_ns((uint64_t)(round % 16) * 15000);
        /* backwards: a forward copy reaches the end last, so a visible half-filled block shows
         * old values here */
        for (size_t i = r->n; i-- > 0;) {
            int32_t v = rd(&r->c[i]);
            r->checked++;
            if (v != base + (int32_t)i && r->wrong++ == 0) {
                r->first_wrong = i;
                r->got = v;
                r->want = base + (int32_t)i;
            }
        }
        __atomic_store_n(&r->done, round, __ATOMIC_RELEASE);
    }
}

ParameterizedTestParameters(copy, readers_never_see_a_half_filled_block) {
    static race_case cases[] = {
        {ADSM_PROTOCOL_LAZY, 2 * MIB, 0, 0},     {ADSM_PROTOCOL_ROLLING, 2 * MIB, 0, 0},
        {ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 0},    {ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 0},
        {ADSM_PROTOCOL_ROLLING, 2 * MIB, 1, 0},  {ADSM_PROTOCOL_ROLLING, 64 * KIB, 1, 0},
        {ADSM_PROTOCOL_LAZY, 2 * MIB, 1, 1},     {ADSM_PROTOCOL_ROLLING, 64 * KIB, 1, 1},
    };
    return cr_make_param_array(race_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(race_case *rc, copy, readers_never_see_a_half_filled_block) {
    init(TEST_DEVICE_BACKEND, rc->protocol, rc->block, 0);
    if (rc->without_procmem) {
        close(adsm__rt.fill.procmem.fd);
        adsm__rt.fill.procmem.fd = -1;
    }
    adsm__rt.fill.plain_moves = rc->plain_moves;
    size_t size = 4 * MIB, n = size / sizeof(int32_t);
    race r;
    memset(&r, 0, sizeof r);
    r.c = (int32_t *)alloc(size);
    /* lazy fetches the whole object at the first touch, rolling the block touched */
    r.n = (rc->protocol == ADSM_PROTOCOL_LAZY ? size : rc->block) / sizeof(int32_t);
    pthread_t reader;
    cr_assert_eq(pthread_create(&reader, NULL, race_reader, &r), 0);
    const int rounds = 150;
    for (int k = 1; k <= rounds && r.wrong == 0; k++) {
        int32_t base = k * 1000003;
        CALL_OK(k_fill, grid_for(n), r.c, n, base);
        sync_ok();
        __atomic_store_n(&r.base, base, __ATOMIC_RELEASE);
        __atomic_store_n(&r.round, k, __ATOMIC_RELEASE);
        /* fault on the unit's first element while the reader scans it from the end */
        cr_assert_eq(rd(&r.c[0]), base);
        while (__atomic_load_n(&r.done, __ATOMIC_ACQUIRE) != k) {}
    }
    __atomic_store_n(&r.quit, 1, __ATOMIC_RELEASE);
    pthread_join(reader, NULL);
    cr_assert_eq(r.wrong, 0, "%llu of %llu reads saw a half-filled block; first: element %zu read %d, expected %d",
                 r.wrong, r.checked, r.first_wrong, r.got, r.want);
    adsm_stats s = stats();
    if (rc->without_procmem) cr_assert_eq(s.d2h_forced_bytes, 0, "no /proc/self/mem, yet bytes were forced");
    if (rc->without_procmem && !fetched_in_place(r.c, size)) cr_assert_gt(s.d2h_moved_bytes, 0, "no piece was moved");
    cr_assert_eq(adsm__rt.fill.plain_moves, rc->plain_moves, "the moves changed kind");
    cr_assert_eq(adsm_free(r.c), ADSM_OK);
    adsm_shutdown();
}

/* ---- which path each piece takes ----------------------------------------------------------- */
/* Where fetches are written in place (fetched_in_place: cuda) no piece needs a staging slot or
 * /proc/self/mem. */

typedef struct path_case {
    size_t block, size;
    size_t moved, forced; /* expected for one read pass over the whole object after a fill */
} path_case;

ParameterizedTestParameters(copy, huge_pages_are_moved_and_the_rest_forced) {
    static path_case cases[] = {
        /* lazy, one fetch of the whole object; objects are aligned to the block size */
        {2 * MIB, 8 * MIB, 8 * MIB, 0},                            /* whole huge pages */
        {2 * MIB, 5 * MIB + 4096, 4 * MIB, MIB + 4096},             /* a tail under a huge page */
        {64 * KIB, 64 * KIB, 0, 64 * KIB},                          /* smaller than a huge page */
        {2 * MIB, 3 * MIB - 12, 2 * MIB, MIB - 12},                 /* an object size not a page multiple */
    };
    return cr_make_param_array(path_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(path_case *pc, copy, huge_pages_are_moved_and_the_rest_forced) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, pc->block, 0);
    size_t n = pc->size / sizeof(int32_t);
    int32_t *c = (int32_t *)alloc(pc->size);
    CALL_OK(k_fill, grid_for(n), c, n, 77);
    sync_ok();
    reset();
    expect_filled(c, 0, n, 77);
    adsm_stats s = stats();
    cr_assert_eq(s.d2h_bytes, n * sizeof(int32_t));
    if (fetched_in_place(c, pc->size)) pc->moved = pc->forced = 0;
    cr_assert_eq(s.d2h_moved_bytes, pc->moved, "moved %llu, expected %zu", (unsigned long long)s.d2h_moved_bytes,
                 pc->moved);
    cr_assert_eq(s.d2h_forced_bytes, pc->forced, "forced %llu, expected %zu",
                 (unsigned long long)s.d2h_forced_bytes, pc->forced);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
}

/* After a move the staging slot holds the moved block's old pages, with their protection, until
 * it is made writable again; at vm.max_map_count the kernel may refuse that. The next fetch
 * through the slot then fails, and the fault says why (the mapping limit) before the process
 * dies. It used to copy into the protected slot: a fault inside adsm, and the process died
 * without a word. Here seccomp refuses mprotect to read-write on the slots only; lazy fetches
 * the 8 MiB object in four moves. Where fetches land in place (page-locked objects, the host
 * alias) no slot is used: the reads simply work. */
#define STAGE_SIZE (8 * MIB)

static int32_t *filled_object(void) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, 2 * MIB, 0);
    int32_t *c = (int32_t *)alloc(STAGE_SIZE);
    CALL_OK(k_fill, grid_for(STAGE_SIZE / 4), c, STAGE_SIZE / 4, 5);
    sync_ok();
    return c;
}

static void read_through_protected_slots(void) {
    int32_t *c = filled_object();
    uintptr_t slots[2 * ADSM__FILL_PAIRS];
    for (unsigned i = 0; i < 2 * ADSM__FILL_PAIRS; i++) slots[i] = (uintptr_t)adsm__rt.fill.pair[i / 2].slot[i % 2];
    refuse_system_call_at(SYS_mprotect, 2, PROT_READ | PROT_WRITE, 0, slots, 2 * ADSM__FILL_PAIRS, ENOMEM);
    for (size_t i = 0; i < STAGE_SIZE / 4; i += 4096)
        if (rd(&c[i]) != 5 + (int32_t)i) _exit(3); /* wrong bytes: not the death expected */
}

/* Whether this variant fetches the object in place, asked in a child: this process must not
 * start the driver double before expect_death_message forks (the child would find it started
 * and without its stream threads). */
static void say_whether_in_place(int fd) {
    int32_t *c = filled_object();
    char answer = fetched_in_place(c, STAGE_SIZE) ? 'y' : 'n';
    _exit(write(fd, &answer, 1) == 1 ? 0 : 1);
}

static int fetches_in_place(void) {
    char answer[2];
    int status = run_child(say_whether_in_place, answer, sizeof answer);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0 && answer[0], "the probe failed (status %d)", status);
    return answer[0] == 'y';
}

Test(copy, a_staging_slot_left_protected_fails_the_next_fetch_with_a_reason) {
    if (fetches_in_place()) {
        read_through_protected_slots();
        cr_assert_eq(stats().d2h_moved_bytes, 0, "fetched in place, yet moved through a slot");
        adsm_shutdown();
        return;
    }
    expect_death_message(read_through_protected_slots, "could not change the page protection (ENOMEM)");
}

/* An object that starts inside a huge page (64 KiB blocks): the head up to the first huge-page
 * boundary is forced, whole huge pages after it are moved, the tail forced; every byte right. */
Test(copy, a_range_starting_inside_a_huge_page) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, 64 * KIB, 0);
    int32_t *pad = (int32_t *)alloc(192 * KIB); /* moves the next object off a huge-page boundary */
    size_t size = 6 * MIB, n = size / sizeof(int32_t);
    int32_t *c = (int32_t *)alloc(size);
    uintptr_t at = (uintptr_t)c, huge = 2 * MIB;
    cr_assert_neq(at % huge, 0, "the object landed on a huge-page boundary: move it with another pad");
    size_t head = huge - at % huge, body = (size - head) / huge * huge, tail = size - head - body;
    CALL_OK(k_fill, grid_for(n), c, n, -5);
    sync_ok();
    reset();
    expect_filled(c, 0, n, -5);
    adsm_stats s = stats();
    if (fetched_in_place(c, size)) body = head = tail = 0;
    cr_assert_eq(s.d2h_moved_bytes, body);
    cr_assert_eq(s.d2h_forced_bytes, head + tail);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    cr_assert_eq(adsm_free(pad), ADSM_OK);
    adsm_shutdown();
}

/* A program that closes adsm's /proc/self/mem descriptor (a daemon closing everything) and opens
 * a file that gets its number: the file never receives device bytes, and fetches still bring
 * every byte home (whole pages moved instead of forced). */
Test(copy, a_file_at_the_number_of_proc_self_mem_is_never_written) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_LAZY, 64 * KIB, 0);
    int procmem = adsm__rt.fill.procmem.fd;
    cr_assert_geq(procmem, 0);
    int file = memfd_create("program-file", 0); /* tmpfs: writes at any offset would land */
    cr_assert_geq(file, 0);
    cr_assert_eq(dup2(file, procmem), procmem); /* closes /proc/self/mem, the file takes its number */
    close(file);
    size_t size = 64 * KIB + 4096 + 12, n = size / sizeof(int32_t); /* no whole huge page: all forced */
    int32_t *c = (int32_t *)alloc(size);
    CALL_OK(k_fill, grid_for(n), c, n, 31);
    sync_ok();
    reset();
    expect_filled(c, 0, n, 31);
    struct stat st;
    cr_assert_eq(fstat(procmem, &st), 0);
    cr_assert_eq(st.st_size, 0, "adsm wrote %lld bytes into the program's file", (long long)st.st_size);
    cr_assert_eq(stats().d2h_forced_bytes, 0);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
    cr_assert_neq(fcntl(procmem, F_GETFD), -1, "adsm closed the program's file at shutdown");
}

/* ---- moved pages do not pile up mappings ----------------------------------------------------- */
static size_t mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    size_t lines = 0;
    for (int ch; (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    fclose(f);
    return lines;
}

Test(copy, repeated_fetches_keep_the_mapping_count_bounded) {
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 2 * MIB, 0);
    size_t size = 32 * MIB, n = size / sizeof(int32_t);
    int32_t *c = (int32_t *)alloc(size);
    size_t before = 0;
    for (int k = 0; k < 30; k++) {
        CALL_OK(k_fill, grid_for(n), c, n, k);
        sync_ok();
        /* every other block, so the states alternate and nothing merges by protection alone */
        for (size_t b = (size_t)k % 2; b < size / (2 * MIB); b += 2) cr_assert_eq(rd(&c[b * (2 * MIB / 4)]), k + (int32_t)(b * (2 * MIB / 4)));
        if (k == 1) before = mappings();
    }
    size_t after = mappings();
    cr_assert_leq(after, before + 4, "mappings grew from %zu to %zu over 28 rounds of fetches", before, after);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
}

/* ---- copies run outside the runtime lock ----------------------------------------------------- */
static int busy_units_of(const void *p) {
    adsm__lock(&adsm__rt.lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)p));
    int busy = o ? (int)o->busy_units : -1;
    adsm__unlock(&adsm__rt.lock);
    return busy;
}

typedef struct big_read {
    int32_t *c;
    size_t size;
    int memset_it; /* 0: read it (a fetch of the whole object); 1: adsm_memset it (on the device) */
    int32_t got;
    int done;
} big_read;

static void *read_big(void *arg) {
    big_read *b = (big_read *)arg;
    if (b->memset_it) b->got = adsm_memset(b->c, 0, b->size) == ADSM_OK ? 0 : -1;
    else b->got = rd(&b->c[0]); /* lazy: fetches the whole object */
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Starts adsm for a test with one large object whose copies take a while: on the cuda double
 * every stream operation is delayed, on emu the object is large. Returns the object's size.
 * The delay leaves a wide margin: at 1 ms per operation the large fetch once ended before the
 * other thread's two faults on a machine busy with compiles beside the suite. */
static size_t init_for_a_long_copy(adsm_protocol_kind protocol) {
#ifdef TEST_ON_CUDA_DOUBLE
    setenv("CUDADOUBLE_DELAY_US", "3000", 1);
    size_t size = 128 * MIB;
#else
    size_t size = 512 * MIB;
#endif
    clear_adsm_env();
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = TEST_DEVICE_BACKEND;
    cfg.protocol = protocol;
    cfg.block_size = 2 * MIB;
    cfg.emu_memory = size + 64 * MIB;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    if (TEST_DEVICE_BACKEND == ADSM_BACKEND_CUDA) attach_test_kernels();
    return size;
}

/* While one thread's fault fetches a large object (or adsm_memset clears it on the device),
 * another thread's faults on other objects (a write to a ReadOnly block, a read that fetches)
 * complete: the copy holds its unit, not the runtime lock. On the cuda double every stream
 * operation is delayed, so the copy takes a while whatever the machine; on emu the object is
 * large. */
static void faults_elsewhere(int memset_it) {
    size_t size = init_for_a_long_copy(ADSM_PROTOCOL_LAZY);
    size_t n = size / sizeof(int32_t);
    big_read b = {(int32_t *)alloc(size), size, memset_it, 0, 0};
    int32_t *readonly = (int32_t *)alloc(4096), *invalid = (int32_t *)alloc(4096);
    CALL_OK(k_fill, grid_for(n), b.c, n, 11);
    CALL_OK(k_fill, grid_for(1024), invalid, (size_t)1024, 22);
    sync_ok();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_big, &b), 0);
    /* the fetch started (a fetch holding the runtime lock is only seen once it is over) */
    while (busy_units_of(b.c) == 0 && !__atomic_load_n(&b.done, __ATOMIC_ACQUIRE)) {}
    wr(&readonly[5], 5);               /* ReadOnly -> Dirty: no copy */
    cr_assert_eq(rd(&invalid[7]), 29); /* Invalid: a fetch of its own */
    int still = busy_units_of(b.c);
    pthread_join(t, NULL);
    cr_assert_gt(still, 0, "the other faults waited until the large %s was done", memset_it ? "memset" : "fetch");
    if (memset_it) {
        cr_assert_eq(b.got, 0, "adsm_memset: %s", adsm_last_error());
        for (size_t i = n - 1024; i < n; i++) cr_assert_eq(rd(&b.c[i]), 0, "element %zu not cleared", i);
    } else {
        cr_assert_eq(b.got, 11);
        expect_filled(b.c, n - 1024, n, 11);
    }
    cr_assert_eq(adsm_free(b.c), ADSM_OK);
    cr_assert_eq(adsm_free(readonly), ADSM_OK);
    cr_assert_eq(adsm_free(invalid), ADSM_OK);
    adsm_shutdown();
}

Test(copy, faults_elsewhere_do_not_wait_for_a_fetch) { faults_elsewhere(0); }
#ifndef TEST_ON_CUDA /* on cuda a device memset is queued on a stream and returns at once */
Test(copy, faults_elsewhere_do_not_wait_for_a_device_memset) { faults_elsewhere(1); }
#endif

typedef struct batch_copy {
    int32_t *big, *small;
    size_t size;
    int at_sync; /* 0: the launch sends every object; 1: adsm_sync brings the kernel's output home */
    adsm_result got;
    int done;
} batch_copy;

static void *batch_call_or_sync(void *arg) {
    batch_copy *b = (batch_copy *)arg;
    b->got = b->at_sync ? adsm_sync() : ADSM_CALL(k_fill, grid_for(1024), b->small, (size_t)1024, 5);
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Batch copies whole objects at each call and sync; while one thread's call sends a large
 * object (or its sync brings one home), another thread allocates, writes and frees another
 * object: the copies hold their objects (an adsm_memset into one of them waits), not the
 * runtime lock. */
ParameterizedTestParameters(copy, batch_copies_do_not_hold_other_calls) {
    static int at_sync[] = {0, 1};
    return cr_make_param_array(int, at_sync, 2);
}

ParameterizedTest(int *at_sync, copy, batch_copies_do_not_hold_other_calls) {
    size_t size = init_for_a_long_copy(ADSM_PROTOCOL_BATCH);
    size_t n = size / sizeof(int32_t);
    batch_copy b = {(int32_t *)alloc(size), (int32_t *)alloc(4096), size, *at_sync, ADSM_OK, 0};
    for (size_t i = 0; i < n; i += 1024) b.big[i] = 3;
    if (*at_sync) CALL_OK(k_fill, grid_for(n), b.big, n, 11); /* sync brings it home */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, batch_call_or_sync, &b), 0);
    while (busy_units_of(b.big) == 0 && !__atomic_load_n(&b.done, __ATOMIC_ACQUIRE)) {}
    cr_assert_not_null(adsm_safe(b.small), "a lookup under the runtime lock: %s", adsm_last_error());
#ifndef TEST_ON_CUDA /* on cuda an allocation maps device memory on the engine, behind the copy */
    int32_t *fresh = (int32_t *)adsm_alloc(4096);
    cr_assert_not_null(fresh, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(fresh, 7, 4096), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(rd(&fresh[100]), 0x07070707);
    cr_assert_eq(adsm_free(fresh), ADSM_OK);
#endif
    int still = busy_units_of(b.big);
    pthread_join(t, NULL);
    cr_assert_eq(b.got, ADSM_OK, "%s", adsm_last_error());
    cr_assert_gt(still, 0, "the other calls waited until the %s was done", *at_sync ? "sync's copy" : "call's copies");
    sync_ok();
    if (*at_sync) expect_filled(b.big, n - 1024, n, 11);
    else cr_assert_eq(rd(&b.big[n - 1024]), 3);
    cr_assert_eq(rd(&b.small[1023]), *at_sync ? 0 : 5 + 1023);
    adsm_shutdown();
}

#ifdef TEST_ON_CUDA_DOUBLE
typedef struct slow_alloc {
    size_t size;
    void *p;
} slow_alloc;

static void *alloc_slowly(void *arg) {
    slow_alloc *a = (slow_alloc *)arg;
    a->p = adsm_alloc(a->size);
    return NULL;
}

/* Page-locking a new object's host pages takes the driver 1-2 GB/s. Meanwhile another thread's
 * faults, fetches (engine copies), allocations and frees of other objects complete: the pinning
 * holds neither the runtime lock nor the engine. The double pins the 64 MiB object for up to
 * 12.8 s (200 ms per MiB), long past anything a loaded machine could make the other calls take,
 * and the test lets it finish as soon as they are done. */
Test(copy, page_locking_a_new_object_holds_up_nothing_else) {
    setenv("CUDADOUBLE_REGISTER_US_PER_MIB", "200000", 1);
    setenv("ADSM_CUDA_SAME_ADDRESS", "0", 1); /* translated addresses: the driver locks */
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0);
    int32_t *readonly = (int32_t *)alloc(4096), *invalid = (int32_t *)alloc(4096);
    CALL_OK(k_fill, grid_for(1024), invalid, (size_t)1024, 22);
    sync_ok();
    slow_alloc a = {64 * MIB, NULL};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, alloc_slowly, &a), 0);
    while (cuda_double_counters().registers_in_flight == 0) {}
    wr(&readonly[5], 5);               /* ReadOnly -> Dirty: no copy */
    cr_assert_eq(rd(&invalid[7]), 29); /* Invalid: a fetch on the engine */
    void *small = adsm_alloc(1000);    /* pinned too, but 1000 bytes take no time */
    cr_assert_not_null(small, "%s", adsm_last_error());
    cr_assert_eq(adsm_free(small), ADSM_OK);
    unsigned long long still = cuda_double_counters().registers_in_flight;
    cuda_double_release_registers();
    pthread_join(t, NULL);
    cr_assert_gt(still, 0, "the other calls waited until the 64 MiB object was page-locked");
    cr_assert_not_null(a.p, "%s", adsm_last_error());
    int32_t *big = (int32_t *)a.p;
    size_t n = 64 * MIB / sizeof(int32_t);
    CALL_OK(k_fill, grid_for(n), big, n, 3);
    sync_ok();
    expect_filled(big, n - 1024, n, 3);
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    cr_assert_eq(s.staged_bytes, 0, "copies were DMA on the locked pages");
    cr_assert_eq(adsm_free(big), ADSM_OK);
    adsm_shutdown();
}

static void *first_write(void *arg) {
    wr((int32_t *)arg, 1);
    return NULL;
}

/* Under shared addresses with the host alias, lazy and rolling make an object's host pages at its
 * first use (host_pages.h): in a fault, where the pinning then runs with the object's units busy
 * and the runtime lock let go. Meanwhile another thread's faults, fetches (engine copies),
 * allocations and frees of other objects complete, as they do while adsm_alloc pins, and so does
 * the first use of another object (another preparer makes it). The double pins the 64 MiB object
 * for up to 12.8 s, and the test lets it finish as soon as they are done. The placement and the
 * setting are set here, whatever the suite's variant. */
Test(copy, page_locking_at_a_first_use_holds_up_nothing_else) {
    setenv("CUDADOUBLE_REGISTER_US_PER_MIB", "200000", 1);
    setenv("ADSM_CUDA_SAME_ADDRESS", "1", 1);
    setenv("ADSM_CUDA_DMA_VIEW", "1", 1);
    setenv("ADSM_HOST_ON_FIRST_USE", "1", 1);
    init(TEST_DEVICE_BACKEND, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0);
    cr_assert_gt(adsm__rt.preparers_running, 1, "objects' host pages are not made on first use by several threads");
    int32_t *readonly = (int32_t *)alloc(4096), *invalid = (int32_t *)alloc(4096), *later = (int32_t *)alloc(4096);
    wr(&readonly[0], 1); /* both first used now (a write: a read of a fresh object is no fault) */
    wr(&invalid[0], 1);
    CALL_OK(k_fill, grid_for(1024), invalid, (size_t)1024, 22);
    sync_ok();
    int32_t *big = (int32_t *)alloc(64 * MIB);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, first_write, big), 0);
    while (cuda_double_counters().registers_in_flight == 0) {}
    wr(&readonly[5], 5);               /* ReadOnly -> Dirty: no copy */
    cr_assert_eq(rd(&invalid[7]), 29); /* Invalid: a fetch on the engine */
    void *small = adsm_alloc(1000);
    cr_assert_not_null(small, "%s", adsm_last_error());
    cr_assert_eq(adsm_free(small), ADSM_OK);
    uint64_t made = adsm__rt.first_uses;
    wr(&later[3], 3); /* its first use: made beside the large one */
    cr_assert_eq(adsm__rt.first_uses, made + 1);
    unsigned long long still = cuda_double_counters().registers_in_flight;
    cuda_double_release_registers();
    pthread_join(t, NULL);
    cr_assert_gt(still, 0, "the other calls waited until the 64 MiB object was page-locked");
    cr_assert_eq(rd(&big[0]), 1);
    size_t n = 64 * MIB / sizeof(int32_t);
    uint64_t staged = adsm__rt.stats.staged_bytes;
    CALL_OK(k_fill, grid_for(n), big, n, 3);
    sync_ok();
    expect_filled(big, n - 1024, n, 3);
    cr_assert_eq(adsm__rt.stats.staged_bytes, staged, "copies of the object made on first use were staged");
    cr_assert_eq(adsm_free(big), ADSM_OK);
    cr_assert_eq(rd(&later[3]), 3);
    adsm_shutdown();
}
#endif

/* ---- queued flushes and invalidation ---------------------------------------------------------- */
/* A launch queues the flushes of dirty units instead of copying them under the runtime lock; an
 * object the kernel also writes becomes Invalid (PROT_NONE) right after, so its flush must have
 * read the pages by then (a copy thread faulting on them would wait forever). Many rounds of
 * CPU writes followed by a kernel that reads and writes the same object. */
ParameterizedTestParameters(copy, inout_object_flushed_before_it_is_invalidated) {
    static adsm_protocol_kind protocols[] = {ADSM_PROTOCOL_LAZY, ADSM_PROTOCOL_ROLLING};
    return cr_make_param_array(adsm_protocol_kind, protocols, 2);
}

ParameterizedTest(adsm_protocol_kind *protocol, copy, inout_object_flushed_before_it_is_invalidated) {
    init(TEST_DEVICE_BACKEND, *protocol, 64 * KIB, 0);
    size_t size = 4 * MIB, n = size / sizeof(int32_t);
    int32_t *x = (int32_t *)alloc(size);
    for (int round = 0; round < 100; round++) {
        for (size_t i = (size_t)round % 7; i < n; i += 4096) wr(&x[i], rd(&x[i]) + 10); /* dirty many blocks */
        CALL_OK(k_incr, grid_for(n), x, n);
    }
    sync_ok();
    for (size_t i = 0; i < n; i++) {
        int32_t cpu = 0;
        for (int round = 0; round < 100; round++) cpu += (i % 4096 == (size_t)round % 7) ? 10 : 0;
        cr_assert_eq(rd(&x[i]), cpu + 100, "x[%zu] = %d, expected %d", i, rd(&x[i]), cpu + 100);
    }
    cr_assert_eq(adsm_free(x), ADSM_OK);
    adsm_shutdown();
}

/* ---- device-side writes after a call --------------------------------------------------------- */
/* A call queues the flush of an input the CPU wrote; adsm_memset (or adsm_memcpy from an object
 * valid on the device) of that whole input then runs on the device and leaves it Invalid, and a
 * CPU write over it next waits for nothing but the kernel that writes it, which no kernel does.
 * So the flush, which may still be reading the host pages, must have read them by then: the
 * kernel sees what the object held at its call, never the bytes written after. On the cuda double
 * every stream operation waits 50 ms (the flush is still queued when the CPU writes); on emu the
 * device's memset waits for everything itself. */
typedef struct device_write_case {
    adsm_protocol_kind protocol;
    int by_memcpy; /* the device-side write: 0 adsm_memset, 1 adsm_memcpy from another object */
} device_write_case;

ParameterizedTestParameters(copy, a_device_side_write_lets_the_flush_read_first) {
    static device_write_case cases[] = {
        {ADSM_PROTOCOL_LAZY, 0}, {ADSM_PROTOCOL_LAZY, 1}, {ADSM_PROTOCOL_ROLLING, 0}, {ADSM_PROTOCOL_ROLLING, 1}};
    return cr_make_param_array(device_write_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(device_write_case *dc, copy, a_device_side_write_lets_the_flush_read_first) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    init(TEST_DEVICE_BACKEND, dc->protocol, 64 * KIB, 0);
    size_t size = 64 * KIB, n = size / sizeof(int32_t); /* one block: one unit under both */
    int32_t *a = alloc(size), *b = alloc(size), *c = alloc(size), *plain = malloc(size);
    cr_assert_not_null(plain);
    for (size_t i = 0; i < n; i++) plain[i] = 9;
    CALL_OK(k_fill, grid_for(n), c, n, 5); /* c: valid on the device, the memcpy's source */
    sync_ok();
    for (size_t i = 0; i < n; i++) wr(&a[i], 1);
    CALL_OK(k_add, grid_for(n), b, a, a, n); /* queues a's flush */
    if (dc->by_memcpy) cr_assert_eq(adsm_memcpy(a, c, size), ADSM_OK, "%s", adsm_last_error());
    else cr_assert_eq(adsm_memset(a, 0x07, size), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(a), 'I', "the %s did not run on the device", dc->by_memcpy ? "memcpy" : "memset");
    cr_assert_eq(adsm_memcpy(a, plain, size), ADSM_OK, "%s", adsm_last_error()); /* the CPU over it */
    sync_ok();
    cr_assert_eq(rd(&b[0]), 2, "b[0] = %d: the kernel read bytes written after its call", rd(&b[0]));
    cr_assert_eq(rd(&b[n - 1]), 2, "b[n - 1] = %d", rd(&b[n - 1]));
    cr_assert_eq(rd(&a[n / 2]), 9);
    free(plain);
    adsm_shutdown();
    unsetenv("CUDADOUBLE_DELAY_US");
}
