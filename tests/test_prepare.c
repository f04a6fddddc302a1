/* tests/test_prepare.c -- adsm_impl/prepare.h: a large host range split over threads in runs of
 * whole 2 MiB pages, each run done once, the caller taking one; ADSM_PREPARE_THREADS resolved.
 * The work here only records what it was given: what the runs do to real memory (collapses,
 * populates) is tested where adsm uses them, on the cuda driver double (test_backend_cuda.c,
 * large_ranges_are_prepared_on_several_threads). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>

#define MIB ((size_t)1 << 20)
#define BASE ((uintptr_t)1 << 40) /* a 2 MiB-aligned address nothing dereferences */

/* What the work saw: each run's range and thread, in the order they ran. */
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uintptr_t at;
    size_t n;
    pthread_t by;
} seen[ADSM__PREPARE_MAX_THREADS + 1];
static size_t nseen;
static uintptr_t refuse_at; /* a run starting here answers EBUSY */

static int record(uintptr_t at, size_t n) {
    pthread_mutex_lock(&seen_lock);
    if (nseen <= ADSM__PREPARE_MAX_THREADS) seen[nseen].at = at, seen[nseen].n = n, seen[nseen].by = pthread_self();
    nseen++;
    pthread_mutex_unlock(&seen_lock);
    return at == refuse_at ? EBUSY : 0;
}

static int by_address(const void *a, const void *b) {
    uintptr_t x = ((const __typeof__(seen[0]) *)a)->at, y = ((const __typeof__(seen[0]) *)b)->at;
    return x < y ? -1 : x > y;
}

typedef struct split_case {
    unsigned threads;
    size_t n;
    unsigned runs; /* expected */
} split_case;

ParameterizedTestParameters(prepare, a_range_is_split_into_whole_huge_pages_done_once) {
    static split_case cases[] = {
        {1, 96 * MIB, 1},           /* one thread: the caller alone */
        {0, 96 * MIB, 1},           /* none asked: still the caller */
        {4, 96 * MIB, 4},           /* 24 MiB each */
        {8, 96 * MIB, 8},           /* 12 MiB each */
        {8, 16 * MIB, 4},           /* at least 4 MiB a run */
        {4, 6 * MIB, 1},            /* too small to split */
        {3, 10 * MIB, 2},           /* 5 huge pages: 4 MiB and 6 MiB */
        {64, 256 * MIB, 16},        /* at most ADSM__PREPARE_MAX_THREADS */
        {4, 20 * MIB + 4096, 4},    /* a tail under a huge page goes with the last run */
    };
    return cr_make_param_array(split_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(split_case *c, prepare, a_range_is_split_into_whole_huge_pages_done_once) {
    nseen = 0;
    refuse_at = 0;
    int result = -1;
    unsigned helpers = adsm__prepare_split(c->threads, BASE, c->n, record, &result);
    cr_assert_eq(result, 0);
    cr_assert_eq(nseen, c->runs, "%zu runs for %zu bytes over %u threads, expected %u", nseen, c->n, c->threads,
                 c->runs);
    cr_assert_eq(helpers, c->runs - 1, "%u threads helped the caller, expected %u", helpers, c->runs - 1);
    qsort(seen, nseen, sizeof seen[0], by_address);
    uintptr_t next = BASE;
    size_t callers = 0;
    for (size_t i = 0; i < nseen; i++) {
        cr_assert_eq(seen[i].at, next, "run %zu starts at +%zu, expected +%zu (a gap or an overlap)", i,
                     (size_t)(seen[i].at - BASE), (size_t)(next - BASE));
        cr_assert(seen[i].at % ADSM__HUGE_PAGE == 0, "run %zu starts inside a huge page", i);
        cr_assert(seen[i].n >= ADSM__PREPARE_MIN_RUN || nseen == 1, "run %zu of %zu bytes", i, seen[i].n);
        next += seen[i].n;
        callers += pthread_equal(seen[i].by, pthread_self()) != 0;
        for (size_t j = 0; j < i; j++)
            cr_assert(!pthread_equal(seen[i].by, seen[j].by) || pthread_equal(seen[i].by, pthread_self()),
                      "two runs on one helper thread");
    }
    cr_assert_eq(next, BASE + c->n, "the runs end at +%zu of %zu", (size_t)(next - BASE), c->n);
    cr_assert_eq(callers, 1, "the caller ran %zu runs, expected its one", callers);
}

/* A refusal in any run (a helper's included) is what the split answers; the other runs still ran. */
Test(prepare, a_refusal_in_any_run_is_reported) {
    nseen = 0;
    refuse_at = BASE + 72 * MIB; /* the last of 4 runs of 24 MiB, on a helper */
    int result = 0;
    adsm__prepare_split(4, BASE, 96 * MIB, record, &result);
    cr_assert_eq(result, EBUSY);
    cr_assert_eq(nseen, 4);
}

/* ADSM_PREPARE_THREADS=0 (or unset): half the CPUs, at most 8, where there are 4 or more; else the
 * caller alone. A count is taken as given. */
Test(prepare, the_thread_count_follows_the_cpus_or_the_setting) {
    cr_assert_eq(adsm__prepare_threads_auto(1), 1);
    cr_assert_eq(adsm__prepare_threads_auto(2), 1);
    cr_assert_eq(adsm__prepare_threads_auto(4), 2);
    cr_assert_eq(adsm__prepare_threads_auto(16), 8);
    cr_assert_eq(adsm__prepare_threads_auto(192), 8);
    adsm__settings s;
    setenv("ADSM_PREPARE_THREADS", "5", 1);
    cr_assert_eq(adsm__settings_resolve(NULL, 4096, &s), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(s.prepare_threads, 5);
    setenv("ADSM_PREPARE_THREADS", "0", 1);
    cr_assert_eq(adsm__settings_resolve(NULL, 4096, &s), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(s.prepare_threads, adsm__prepare_threads_auto(adsm__cpu_count()));
}
