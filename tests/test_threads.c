#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/test_threads.c -- multi-threaded stress test of the runtime (emu backend).
 *
 * One Criterion test per protocol (batch, lazy, rolling, rolling with a fixed rolling size of 2 so
 * evictions race with faults, rolling one block per fault: adsm_config.block_exact) and block size
 * (4 KiB, 512 KiB). In each:
 *
 *   1. Faults on one block resolve once. N worker threads wait on a barrier, then read (or write,
 *      or half read and half write) the same Invalid block at once, after the sync or while the
 *      kernel that writes it still runs (5 ms, so every thread faults while the first waits for
 *      it): d2h grows by exactly one unit (a block, or with rolling's default the object's Invalid
 *      blocks in that block's huge page; the whole object under lazy) in one copy, and
 *      faults by at least 1 and at most N. Every thread sees the kernel's values; every write
 *      survives. Not under batch (no faults).
 *
 *   2. Stress. N workers (8, or ADSM_TEST_THREADS) read and write four shared objects at once,
 *      while a kernel thread allocates, fills and frees objects and calls kernels:
 *        - no lost write: every object is cut into stripes of 8-byte words, stripe s owned by
 *          worker s % N; stripes are 64 B, 256 B, one block and 1016 B (so the same block holds
 *          many owners' stripes, one owner per block, and stripes straddling blocks). An owner
 *          writes version v of a stripe (each word encodes version, object and word index),
 *          re-reads it, then publishes v; its own stripes must always read back its last version;
 *        - no stale read between CPU threads: a word of another owner's stripe must carry a
 *          version >= the one published before the read (and <= the one after, + 1);
 *        - no stale read after a sync: the kernel thread writes an OUT object (and an INOUT
 *          counter) with a kernel, syncs, checks every word, then publishes the object; workers
 *          check published objects under a read lock the kernel thread holds for writing from
 *          before the launch until it published again. Under lazy and rolling the kernel thread
 *          also reads the OUT object before the launch (host copy ReadOnly with the old values)
 *          and while the kernel is in flight (the runtime waits for it);
 *        - at the end every byte is the last value its owner wrote, on the host and, copied by a
 *          kernel, on the device.
 *      ADSM rules: under batch every object goes to the device at a call and comes back at sync,
 *      so CPU writes between them would be overwritten: workers hold a (writer-preferring) read
 *      lock on "the CPU phase" for bursts of operations and the kernel thread takes it for
 *      writing from launch to sync. Under lazy and rolling workers and kernels overlap freely;
 *      kernels read the workers' objects only as IN (so they stay valid on the CPU).
 *
 *   3. No deadlock: a watchdog thread aborts the test with the name and current step of every
 *      thread that made no progress for 20 s (ADSM_TEST_STALL), so a hang fails, never hangs.
 *
 * Environment: ADSM_TEST_THREADS (workers, 1..64, default 8), ADSM_TEST_SECONDS (stress time per
 * test, default 2), ADSM_TEST_STALL (watchdog seconds, default 20), ADSM_TEST_SEED. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#ifdef TEST_ON_CUDA_DOUBLE /* built a second time to run on the cuda backend over the driver double */
#include "tests/cuda_double_bridge.h"
#define THREADS_BACKEND ADSM_BACKEND_CUDA
#else
#define THREADS_BACKEND ADSM_BACKEND_EMU
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- values ---------------------------------------------------------------------------------- */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* what the kernel writes at word i of its OUT object, and what its IN object holds at word j */
static uint64_t gen_value(uint64_t seed, size_t i, uint64_t x) { return mix64(seed ^ (i * 0xD1B54A32D192ED03ull)) ^ x; }
static uint64_t in_value(uint64_t tseed, size_t j) { return mix64(tseed + j * 0x9E3779B97F4A7C15ull); }

/* word j of a worker object at version v (0: never written, the object's initial zeros) */
static uint64_t word_of(unsigned obj, size_t j, uint32_t v) {
    return v ? ((uint64_t)v << 32) | ((uint64_t)obj << 28) | (j & 0x0fffffffu) : 0;
}

/* ---- kernels --------------------------------------------------------------------------------- */
typedef struct gen_args {
    size_t out_words, counter_words, in_words, peek_words;
    uint64_t seed, inc, spin_ns; /* spin_ns: each chunk of the grid runs at least this long */
} gen_args;

/* out[i] = gen_value(seed, i, in[i % in_words]); counter[i] += inc + (i & 7); reads peek (a
 * worker object the CPU keeps writing) without using it. Any pointer may be NULL. */
ADSM_KERNEL(tt_gen, ADSM_OUT(uint64_t, out), ADSM_INOUT(uint64_t, counter), ADSM_IN(uint64_t, in),
            ADSM_IN(uint64_t, peek), ADSM_VALUE(gen_args, a));

void tt_gen(adsm_grid g, uint64_t *out, uint64_t *counter, const uint64_t *in, const uint64_t *peek, gen_args a) {
    uint64_t sink = 0;
    if (a.spin_ns) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t1);
        while ((uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec - (uint64_t)t0.tv_nsec < a.spin_ns);
    }
    ADSM_FOR_EACH_THREAD(g, i) {
        if (out && i < a.out_words) out[i] = gen_value(a.seed, i, in && a.in_words ? in[i % a.in_words] : 0);
        if (counter && i < a.counter_words) counter[i] += a.inc + (i & 7);
        if (peek && i < a.peek_words) sink += peek[i];
    }
    volatile uint64_t keep = sink;
    (void)keep;
}

ADSM_KERNEL(tt_copy, ADSM_OUT(uint64_t, dst), ADSM_IN(uint64_t, src), ADSM_VALUE(size_t, n));

void tt_copy(adsm_grid g, uint64_t *dst, const uint64_t *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

/* a kernel that takes its time, and one that adds to two objects (a read racing a launch, below) */
ADSM_KERNEL(tt_slow_fill, ADSM_OUT(int32_t, c), ADSM_VALUE(size_t, n), ADSM_VALUE(int32_t, v), ADSM_VALUE(int, ms));
void tt_slow_fill(adsm_grid g, int32_t *c, size_t n, int32_t v, int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    if (ms) nanosleep(&ts, NULL);
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = v;
    }
}
ADSM_KERNEL(tt_add_both, ADSM_INOUT(int32_t, o), ADSM_INOUT(int32_t, p), ADSM_VALUE(int32_t, v));
void tt_add_both(adsm_grid g, int32_t *o, int32_t *p, int32_t v) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) o[0] += v, p[0] += v;
    }
}

/* a typed object (declared pointer fields: translated where the device's addresses differ), a
 * kernel that writes it slowly and one that reads it and writes a plain object (a read racing a
 * translating launch, below) */
typedef struct tt_link {
    struct tt_link *next;
    int64_t value;
} tt_link;
ADSM_TYPE(tt_link, ADSM_PTR(next, tt_link));
ADSM_KERNEL(tt_slow_bump, ADSM_INOUT(tt_link, l), ADSM_VALUE(int, ms));
void tt_slow_bump(adsm_grid g, tt_link *l, int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) l[0].value += 1;
    }
}
ADSM_KERNEL(tt_fill_beside, ADSM_IN(tt_link, l), ADSM_OUT(int32_t, c), ADSM_VALUE(size_t, n), ADSM_VALUE(int32_t, v));
void tt_fill_beside(adsm_grid g, const tt_link *l, int32_t *c, size_t n, int32_t v) {
    (void)l;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = v;
    }
}

/* adsm_init on the suite's backend (on the driver double, with the suite's kernels attached). */
static void start_runtime(const adsm_config *cfg) {
#ifdef TEST_ON_CUDA_DOUBLE
    cuda_double_use();
#endif
    cr_assert_eq(adsm_init(cfg), ADSM_OK, "adsm_init: %s", adsm_last_error());
#ifdef TEST_ON_CUDA_DOUBLE
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_tt_gen(), adsm__kernel_tt_copy(), adsm__kernel_tt_slow_fill(),
                                               adsm__kernel_tt_add_both(), adsm__kernel_tt_slow_bump(),
                                               adsm__kernel_tt_fill_beside()};
    cr_assert_eq(cuda_double_attach(kernels, 6), 0, "attaching to the driver double: %s", adsm_last_error());
#endif
}

static adsm_grid grid_for(size_t threads) { return adsm_grid_1d((uint32_t)((threads + 255) / 256), 256); }

/* ---- test state ------------------------------------------------------------------------------ */
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define NWOBJ 4
#define NPUB 2
#define NTEMP 3
#define MAX_WORKERS 64
#define PRE_ROUNDS 60

typedef struct variant {
    const char *name;
    adsm_protocol_kind protocol;
    size_t block_size, rolling_size;
    int block_exact; /* adsm_config.block_exact */
} variant;

/* progress and current step of one thread, for the watchdog */
typedef struct tstat {
    char name[24];
    uint64_t progress;  /* atomic */
    const char *what;   /* atomic */
    uint64_t a1, a2;    /* atomic */
    int running;        /* atomic */
} tstat;

typedef struct wobj {
    uint64_t *p;
    size_t size, words, stripe_words, nstripes;
    uint32_t *pub; /* per stripe: the last version its owner completed (written by the owner only) */
} wobj;

typedef struct pubobj {
    pthread_rwlock_t lock; /* the kernel thread writes, workers read */
    uint64_t *p;
    size_t words;
    int valid;
    uint64_t seed, tseed, publications;
    size_t in_words;
} pubobj;

typedef struct worker {
    unsigned id;
    uint64_t rng;
    pthread_t thread;
    tstat *st;
    uint64_t writes, own_checks, other_checks, pub_checks, pub_busy;
} worker;

typedef struct tt {
    const variant *v;
    int tracked, batch;
    size_t B;
    unsigned nworkers;
    uint64_t seed;
    double stall_s, stress_s;

    int stop;   /* atomic */
    int failed; /* atomic */
    pthread_mutex_t fail_mutex;
    char fail_msg[2048];

    wobj wo[NWOBJ];
    pubobj pub[NPUB];
    pthread_rwlock_t phase; /* batch: workers read-lock the CPU phase, the kernel thread write-locks */

    /* phase 1 */
    pthread_barrier_t pre_start, pre_end;
    uint64_t *F;
    int pre_kind;
    uint64_t pre_seed;
    unsigned pre_round;
    int pre_concurrent_rounds, pre_all_faulted_rounds;

    worker workers[MAX_WORKERS];
    tstat stats[MAX_WORKERS + 2]; /* workers, kernel thread, main */
    unsigned nstats;
    pthread_t kthread;
    uint64_t k_iterations, k_launches, k_churn, k_pipelined, k_inflight_reads, k_prelaunch_reads;
} tt;

static tt T;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s) { return mix64(*s += 0x632BE59BD9B4E019ull); }
static size_t below(uint64_t *s, size_t n) { return n ? (size_t)(rnd(s) % n) : 0; }
static int chance(uint64_t *s, unsigned percent) { return below(s, 100) < percent; }

static void doing(tstat *st, const char *what, uint64_t a1, uint64_t a2) {
    __atomic_store_n(&st->a1, a1, __ATOMIC_RELAXED);
    __atomic_store_n(&st->a2, a2, __ATOMIC_RELAXED);
    __atomic_store_n(&st->what, what, __ATOMIC_RELEASE);
}
static void tick(tstat *st) { __atomic_add_fetch(&st->progress, 1, __ATOMIC_RELAXED); }
static int stopping(void) { return __atomic_load_n(&T.stop, __ATOMIC_ACQUIRE); }

/* Records the first failure (any thread) and stops the run; the test thread reports it. */
static void tt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tt_fail(const char *fmt, ...) {
    pthread_mutex_lock(&T.fail_mutex);
    if (!T.failed) {
        int k = snprintf(T.fail_msg, sizeof T.fail_msg, "[%s] ", T.v->name);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(T.fail_msg + k, sizeof T.fail_msg - (size_t)k, fmt, ap);
        va_end(ap);
        __atomic_store_n(&T.failed, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&T.fail_mutex);
    __atomic_store_n(&T.stop, 1, __ATOMIC_RELEASE);
}

/* a runtime call that must succeed; the varargs give the context */
static void check_failed(const char *call, adsm_result r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_failed(const char *call, adsm_result r, const char *fmt, ...) {
    char ctx[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    tt_fail("%s failed (%s): %s (%s)", call, ctx, adsm_result_string(r), adsm_last_error());
}
#define CHECK_OK(call, ...)                                           \
    do {                                                              \
        adsm_result r_ = (call);                                      \
        if (r_ != ADSM_OK) check_failed(#call, r_, __VA_ARGS__);      \
    } while (0)

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi) {
    const char *e = getenv(name);
    if (!e || !*e) return def;
    unsigned long x = strtoul(e, NULL, 0);
    return x < lo ? lo : x > hi ? hi : (unsigned)x;
}
static double env_double(const char *name, double def) {
    const char *e = getenv(name);
    double x = e && *e ? strtod(e, NULL) : 0;
    return x > 0 ? x : def;
}

/* ---- the watchdog ---------------------------------------------------------------------------- */
static int wd_done;
static pthread_t wd_thread;

static void *watchdog_main(void *arg) {
    (void)arg;
    uint64_t seen[MAX_WORKERS + 2];
    double since[MAX_WORKERS + 2], t0 = now_s();
    for (unsigned i = 0; i < T.nstats; i++) {
        seen[i] = __atomic_load_n(&T.stats[i].progress, __ATOMIC_RELAXED);
        since[i] = t0;
    }
    while (!__atomic_load_n(&wd_done, __ATOMIC_ACQUIRE)) {
        usleep(100 * 1000);
        double now = now_s();
        int stuck = 0;
        for (unsigned i = 0; i < T.nstats; i++) {
            uint64_t p = __atomic_load_n(&T.stats[i].progress, __ATOMIC_RELAXED);
            if (p != seen[i] || !__atomic_load_n(&T.stats[i].running, __ATOMIC_ACQUIRE)) {
                seen[i] = p;
                since[i] = now;
            } else if (now - since[i] > T.stall_s) {
                stuck = 1;
            }
        }
        if (!stuck) continue;
        char msg[8192];
        int n = snprintf(msg, sizeof msg,
                         "test_threads [%s]: DEADLOCK? no progress for %.0f s (ADSM_TEST_STALL); stuck threads:\n",
                         T.v->name, T.stall_s);
        for (unsigned i = 0; i < T.nstats && n < (int)sizeof msg - 200; i++) {
            tstat *st = &T.stats[i];
            if (!__atomic_load_n(&st->running, __ATOMIC_ACQUIRE) || now - since[i] <= T.stall_s) continue;
            const char *what = __atomic_load_n(&st->what, __ATOMIC_ACQUIRE);
            n += snprintf(msg + n, sizeof msg - (size_t)n, "  %-12s %6.1f s in '%s' (%" PRIu64 ", %" PRIu64
                          ") after %" PRIu64 " steps\n", st->name, now - since[i], what ? what : "?",
                          __atomic_load_n(&st->a1, __ATOMIC_RELAXED), __atomic_load_n(&st->a2, __ATOMIC_RELAXED),
                          __atomic_load_n(&st->progress, __ATOMIC_RELAXED));
        }
        fputs(msg, stderr);
        fflush(stderr);
        abort();
    }
    return NULL;
}

/* ---- phase 1: many threads fault on one Invalid block at once -------------------------------- */
/* worker w's word in block 1 of F, and what it writes there in round r */
static size_t pre_word(unsigned w) { return T.B / 8 + (size_t)w * 8 + 1; }
static uint64_t pre_written(unsigned w, unsigned r) { return 0x5EED000000000000ull | ((uint64_t)w << 16) | r; }
static int pre_writes(unsigned w, int kind) { return kind == 1 || (kind == 2 && (w & 1)); }

static void pre_worker(worker *wk) {
    for (unsigned r = 0; r < PRE_ROUNDS; r++) {
        doing(wk->st, "phase 1: barrier before round", r, 0);
        pthread_barrier_wait(&T.pre_start);
        int kind = T.pre_kind;
        size_t j = pre_word(wk->id);
        volatile uint64_t *p = (volatile uint64_t *)T.F;
        if (pre_writes(wk->id, kind)) {
            doing(wk->st, "phase 1: write the Invalid block", r, j);
            p[j] = pre_written(wk->id, r);
        } else {
            doing(wk->st, "phase 1: read the Invalid block", r, j);
            uint64_t got = p[j], want = gen_value(T.pre_seed, j, 0);
            if (got != want)
                tt_fail("phase 1 round %u: worker %u read word %zu of the fetched block: %016" PRIx64
                        ", the kernel wrote %016" PRIx64, r, wk->id, j, got, want);
        }
        tick(wk->st);
        doing(wk->st, "phase 1: barrier after round", r, 0);
        pthread_barrier_wait(&T.pre_end);
    }
    doing(wk->st, "phase 1: barrier at the end", 0, 0);
    pthread_barrier_wait(&T.pre_start); /* main has read the statistics of the last round */
}

static void pre_main(tstat *st) {
    size_t B = T.B, words = 2 * B / 8;
    size_t unit = T.v->protocol == ADSM_PROTOCOL_LAZY ? 2 * B : B, store_unit = unit;
    if (T.v->protocol == ADSM_PROTOCOL_ROLLING && !T.v->block_exact && B < 2 * MIB) {
        /* a fetch takes the Invalid blocks of its huge page: those of the object's two; but a
         * store that is the object's first fetch since the call takes its block alone */
        uintptr_t page = (uintptr_t)(T.F + B / 8) & ~(uintptr_t)(2 * MIB - 1), lo = (uintptr_t)T.F;
        uintptr_t hi = lo + 2 * B;
        unit = (hi < page + 2 * MIB ? hi : page + 2 * MIB) - (lo > page ? lo : page);
    }
    unsigned N = T.nworkers;
    uint64_t rng = T.seed ^ 0x1234;
    int ok = !T.failed;
    for (unsigned r = 0; r < PRE_ROUNDS; r++) {
        /* odd rounds release the threads while a 5 ms kernel that writes the block still runs:
         * the first fault waits for it holding the runtime lock, so the others pile up behind */
        int in_flight = r & 1;
        int kind = (int)(r / 2 % 3); /* 0: all read, 1: all write, 2: odd workers write, even read */
        uint64_t seed = rnd(&rng);
        adsm_stats s0, s1;
        if (ok) {
            doing(st, "phase 1: launch", r, 0);
            gen_args a = {words, 0, 0, 0, seed, 0, in_flight ? 5000000 : 0};
            CHECK_OK(ADSM_CALL(tt_gen, grid_for(words), T.F, NULL, NULL, NULL, a), "phase 1 round %u", r);
            if (!in_flight) {
                doing(st, "phase 1: sync", r, 0);
                CHECK_OK(adsm_sync(), "phase 1 round %u", r);
            }
            char state = adsm_block_state(T.F + B / 8);
            if (state != 'I') tt_fail("phase 1 round %u: block 1 of the OUT object is '%c' after the call, not 'I'",
                                      r, state);
            ok = !T.failed;
        }
        T.pre_kind = kind;
        T.pre_seed = seed;
        adsm_get_stats(&s0);
        doing(st, "phase 1: barrier before round", r, 0);
        pthread_barrier_wait(&T.pre_start);
        doing(st, "phase 1: barrier after round", r, 0);
        pthread_barrier_wait(&T.pre_end);
        adsm_get_stats(&s1);
        tick(st);
        if (ok && in_flight) {
            doing(st, "phase 1: sync", r, 0);
            CHECK_OK(adsm_sync(), "phase 1 round %u", r);
            ok = !T.failed;
        }
        if (!ok) continue;
        uint64_t d2h = s1.d2h_bytes - s0.d2h_bytes, copies = s1.d2h_copies - s0.d2h_copies;
        uint64_t rf = s1.read_faults - s0.read_faults, wf = s1.write_faults - s0.write_faults;
        static const char *kinds[] = {"all read", "all write", "half read, half write"};
        const char *when = in_flight ? "kernel in flight" : "after sync";
        /* which fault fetches is a race: with writers, a store may be the one (kind 1: always) */
        size_t want = kind == 1 ? store_unit : kind == 2 && d2h == store_unit ? store_unit : unit;
        if (d2h != want || copies != 1)
            tt_fail("phase 1 round %u (%s, %s, %u threads, %" PRIu64 " faults): the Invalid unit of %zu bytes was "
                    "fetched as %" PRIu64 " bytes in %" PRIu64 " copies (expected once)", r, kinds[kind], when, N,
                    rf + wf, want, d2h, copies);
        else if (rf + wf < 1 || rf + wf > N)
            tt_fail("phase 1 round %u (%s, %s, %u threads): %" PRIu64 " read + %" PRIu64
                    " write faults (expected 1..%u)", r, kinds[kind], when, N, rf, wf, N);
        else if ((kind == 0 && wf != 0) || (kind == 1 && rf != 0))
            tt_fail("phase 1 round %u (%s, %s): %" PRIu64 " read and %" PRIu64 " write faults", r, kinds[kind], when,
                    rf, wf);
        if (rf + wf > 1) T.pre_concurrent_rounds++;
        if (rf + wf == N) T.pre_all_faulted_rounds++;
        /* every write survived, every other word is the kernel's */
        for (size_t j = B / 8; j < 2 * B / 8 && !T.failed; j++) {
            uint64_t want = gen_value(seed, j, 0);
            for (unsigned w = 0; w < N; w++)
                if (j == pre_word(w) && pre_writes(w, kind)) want = pre_written(w, r);
            if (T.F[j] != want)
                tt_fail("phase 1 round %u (%s): word %zu of the block is %016" PRIx64 ", expected %016" PRIx64,
                        r, kinds[kind], j, T.F[j], want);
        }
        ok = !T.failed;
    }
    doing(st, "phase 1: barrier at the end", 0, 0);
    pthread_barrier_wait(&T.pre_start);
}

/* ---- phase 2: workers -------------------------------------------------------------------------- */
static size_t own_count(const wobj *o, unsigned w) {
    return o->nstripes > w ? (o->nstripes - w + T.nworkers - 1) / T.nworkers : 0;
}
static void stripe_words(const wobj *o, size_t s, size_t *j0, size_t *j1) {
    *j0 = s * o->stripe_words;
    *j1 = *j0 + o->stripe_words < o->words ? *j0 + o->stripe_words : o->words;
}

static void report_word(const char *what, worker *wk, unsigned oi, size_t s, size_t j, uint64_t got,
                        const char *expect) {
    const wobj *o = &T.wo[oi];
    tt_fail("%s: worker %u, object %u word %zu (byte %zu, block %zu, stripe %zu of worker %zu): got %016" PRIx64
            " (version %u), %s; block state '%c'", what, wk->id, oi, j, j * 8, j * 8 / T.B, s,
            s % T.nworkers, got, (unsigned)(got >> 32), expect, adsm_block_state(o->p + j));
}

static void op_write(worker *wk, unsigned oi, size_t s) {
    wobj *o = &T.wo[oi];
    size_t j0, j1;
    stripe_words(o, s, &j0, &j1);
    uint32_t v = __atomic_load_n(&o->pub[s], __ATOMIC_RELAXED) + 1;
    doing(wk->st, "write own stripe (object, word)", oi, j0);
    for (size_t j = j0; j < j1; j++) __atomic_store_n(&o->p[j], word_of(oi, j, v), __ATOMIC_RELAXED);
    doing(wk->st, "re-read own write (object, word)", oi, j0);
    for (size_t j = j0; j < j1; j++) {
        uint64_t got = __atomic_load_n(&o->p[j], __ATOMIC_RELAXED);
        if (got != word_of(oi, j, v)) {
            char e[64];
            snprintf(e, sizeof e, "it just wrote version %u", v);
            report_word("lost write (re-read right after writing)", wk, oi, s, j, got, e);
            return;
        }
    }
    __atomic_store_n(&o->pub[s], v, __ATOMIC_RELEASE);
    wk->writes++;
}

static void op_check_own(worker *wk, unsigned oi, size_t s) {
    wobj *o = &T.wo[oi];
    size_t j0, j1;
    stripe_words(o, s, &j0, &j1);
    uint32_t v = __atomic_load_n(&o->pub[s], __ATOMIC_RELAXED);
    doing(wk->st, "check own stripe (object, word)", oi, j0);
    for (size_t j = j0; j < j1; j++) {
        uint64_t got = __atomic_load_n(&o->p[j], __ATOMIC_RELAXED);
        if (got != word_of(oi, j, v)) {
            char e[64];
            snprintf(e, sizeof e, "its last write was version %u", v);
            report_word("lost write (owner re-check)", wk, oi, s, j, got, e);
            return;
        }
    }
    wk->own_checks++;
}

static void op_check_other(worker *wk, unsigned oi, size_t s) {
    wobj *o = &T.wo[oi];
    size_t j0, j1;
    stripe_words(o, s, &j0, &j1);
    uint32_t before = __atomic_load_n(&o->pub[s], __ATOMIC_ACQUIRE);
    doing(wk->st, "read another worker's stripe (object, word)", oi, j0);
    for (size_t j = j0; j < j1; j++) {
        uint64_t got = __atomic_load_n(&o->p[j], __ATOMIC_RELAXED);
        uint32_t after = __atomic_load_n(&o->pub[s], __ATOMIC_ACQUIRE), gv = (uint32_t)(got >> 32);
        if (got != word_of(oi, j, gv) || gv < before || gv > after + 1) {
            char e[96];
            snprintf(e, sizeof e, "the owner had published version %u before the read, %u after", before, after);
            report_word(gv < before ? "stale read of another thread's write" : "corrupt word", wk, oi, s, j, got, e);
            return;
        }
    }
    wk->other_checks++;
}

static void op_check_published(worker *wk, unsigned k) {
    pubobj *P = &T.pub[k];
    if (pthread_rwlock_tryrdlock(&P->lock) != 0) {
        wk->pub_busy++;
        return;
    }
    if (P->valid) {
        doing(wk->st, "check published kernel output (object, publication)", k, P->publications);
        for (unsigned n = 0; n < 48; n++) {
            size_t i = n == 0 ? 0 : n == 1 ? P->words - 1 : below(&wk->rng, P->words);
            uint64_t want = gen_value(P->seed, i, in_value(P->tseed, i % P->in_words));
            uint64_t got = __atomic_load_n(&P->p[i], __ATOMIC_RELAXED);
            if (got != want) {
                tt_fail("stale read after sync: worker %u read word %zu of published kernel output %u "
                        "(publication %" PRIu64 "): %016" PRIx64 ", the kernel wrote %016" PRIx64 "; block state '%c'",
                        wk->id, i, k, P->publications, got, want, adsm_block_state(&P->p[i]));
                break;
            }
        }
        wk->pub_checks++;
    }
    pthread_rwlock_unlock(&P->lock);
}

static void worker_op(worker *wk) {
    unsigned w = wk->id, oi;
    size_t own;
    do {
        oi = (unsigned)below(&wk->rng, NWOBJ);
        own = own_count(&T.wo[oi], w);
    } while (own == 0);
    size_t s = w + T.nworkers * below(&wk->rng, own);
    unsigned r = (unsigned)below(&wk->rng, 100);
    if (r < 40) op_write(wk, oi, s);
    else if (r < 60) op_check_own(wk, oi, s);
    else if (r < 90) {
        size_t other = below(&wk->rng, T.wo[oi].nstripes);
        if (other % T.nworkers == w) op_check_own(wk, oi, other);
        else op_check_other(wk, oi, other);
    } else op_check_published(wk, (unsigned)below(&wk->rng, NPUB));
    tick(wk->st);
}

static void *worker_main(void *arg) {
    worker *wk = (worker *)arg;
    if (T.tracked) pre_worker(wk);
    while (!stopping()) {
        if (T.batch) {
            doing(wk->st, "batch: wait for the CPU phase", 0, 0);
            pthread_rwlock_rdlock(&T.phase);
        }
        for (int i = 0; i < 16 && !stopping(); i++) worker_op(wk);
        if (T.batch) pthread_rwlock_unlock(&T.phase);
    }
    doing(wk->st, "done", 0, 0);
    __atomic_store_n(&wk->st->running, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- phase 2: the kernel thread ---------------------------------------------------------------- */
typedef struct temp {
    uint64_t *p;
    size_t words;
    uint64_t tseed;
} temp;

typedef struct kstate {
    tstat *st;
    uint64_t rng;
    temp temps[NTEMP];
    uint64_t *counter;
    size_t counter_words;
    uint64_t sum_inc, counter_launches;
} kstate;

static void fill_temp(kstate *k, temp *t) {
    t->tseed = rnd(&k->rng);
    doing(k->st, "fill an IN object (words)", t->words, 0);
    for (size_t j = 0; j < t->words; j++) t->p[j] = in_value(t->tseed, j);
}

/* allocate, touch and free an object nobody else sees: the tree changes under the faulting workers */
static void churn(kstate *k) {
    size_t size = 1 + below(&k->rng, 3 * T.B);
    doing(k->st, "churn: adsm_alloc (bytes)", size, 0);
    uint8_t *q = (uint8_t *)adsm_alloc(size);
    if (!q) {
        tt_fail("adsm_alloc(%zu) failed: %s", size, adsm_last_error());
        return;
    }
    doing(k->st, "churn: write and read (bytes)", size, 0);
    for (unsigned n = 0; n < 8; n++) {
        size_t off = below(&k->rng, size);
        q[off] = (uint8_t)(off * 7 + 1);
        if (q[off] != (uint8_t)(off * 7 + 1)) tt_fail("churn object: byte %zu of %zu lost its write", off, size);
    }
    if (chance(&k->rng, 30)) CHECK_OK(adsm_memset(q, 0x5a, size), "churn memset of %zu bytes", size);
    doing(k->st, "churn: adsm_free (bytes)", size, 0);
    CHECK_OK(adsm_free(q), "churn");
    T.k_churn++;
}

static void verify_pub(pubobj *P, unsigned k, const temp *in, uint64_t seed, const char *when) {
    for (size_t i = 0; i < P->words; i++) {
        uint64_t want = gen_value(seed, i, in_value(in->tseed, i % in->words));
        if (P->p[i] != want) {
            tt_fail("stale read %s: word %zu of kernel output %u is %016" PRIx64 ", the kernel wrote %016" PRIx64
                    " (launch %" PRIu64 "); block state '%c'", when, i, k, P->p[i], want, T.k_launches,
                    adsm_block_state(&P->p[i]));
            return;
        }
    }
}

static void kernel_iteration(kstate *k, uint64_t it) {
    /* the IN object: new, refilled, or as it was */
    temp *in = &k->temps[it % NTEMP];
    if (!in->p || chance(&k->rng, 40)) {
        if (in->p) {
            doing(k->st, "adsm_free an IN object (words)", in->words, 0);
            CHECK_OK(adsm_free(in->p), "IN object of %zu words", in->words);
        }
        in->words = 1 + below(&k->rng, 3 * T.B / 8);
        doing(k->st, "adsm_alloc an IN object (words)", in->words, 0);
        in->p = (uint64_t *)adsm_alloc(in->words * 8);
        if (!in->p) {
            tt_fail("adsm_alloc(%zu) failed: %s", in->words * 8, adsm_last_error());
            return;
        }
        fill_temp(k, in);
    } else if (chance(&k->rng, 30)) {
        fill_temp(k, in);
    }
    if (chance(&k->rng, 50)) churn(k);
    if (stopping()) return;

    unsigned pk = (unsigned)(it % NPUB);
    pubobj *P = &T.pub[pk];
    doing(k->st, "write-lock a published object (object)", pk, 0);
    pthread_rwlock_wrlock(&P->lock);
    int was_valid = P->valid;
    P->valid = 0;
    /* lazy, rolling: read the old output first, so the host copy is ReadOnly with old values */
    if (T.tracked && was_valid && chance(&k->rng, 50)) {
        doing(k->st, "read the OUT object before the launch (object)", pk, 0);
        for (unsigned n = 0; n < 16; n++) {
            size_t i = below(&k->rng, P->words);
            uint64_t want = gen_value(P->seed, i, in_value(P->tseed, i % P->in_words));
            if (P->p[i] != want) {
                tt_fail("kernel output %u changed while nobody wrote it: word %zu is %016" PRIx64 ", expected %016" PRIx64,
                        pk, i, P->p[i], want);
                break;
            }
        }
        T.k_prelaunch_reads++;
    }
    if (T.batch) {
        doing(k->st, "batch: write-lock the CPU phase", 0, 0);
        pthread_rwlock_wrlock(&T.phase);
    }
    unsigned nl = chance(&k->rng, 30) ? 2 : 1;
    uint64_t seed = 0;
    for (unsigned l = 0; l < nl && !T.failed; l++) {
        seed = rnd(&k->rng);
        int use_counter = chance(&k->rng, 50);
        const wobj *peek = chance(&k->rng, 50) ? &T.wo[below(&k->rng, NWOBJ)] : NULL;
        gen_args a = {P->words, use_counter ? k->counter_words : 0, in->words, peek ? peek->words : 0, seed, 0, 0};
        a.inc = 1 + below(&k->rng, 1000);
        size_t threads = P->words;
        if (use_counter && k->counter_words > threads) threads = k->counter_words;
        if (peek && peek->words > threads) threads = peek->words;
        doing(k->st, "launch (launch, object)", T.k_launches + 1, pk);
        adsm_result r = ADSM_CALL(tt_gen, grid_for(threads), P->p, use_counter ? k->counter : NULL, in->p,
                                  peek ? peek->p : NULL, a);
        if (r != ADSM_OK) {
            tt_fail("launch %" PRIu64 " failed: %s (%s)", T.k_launches + 1, adsm_result_string(r), adsm_last_error());
            break;
        }
        T.k_launches++;
        if (use_counter) {
            k->sum_inc += a.inc;
            k->counter_launches++;
        }
    }
    if (nl > 1) T.k_pipelined++;
    /* lazy, rolling: a read before the sync waits for the kernel */
    if (T.tracked && !T.failed && chance(&k->rng, 40)) {
        doing(k->st, "read the OUT object in flight (object)", pk, 0);
        for (unsigned n = 0; n < 8; n++) {
            size_t i = below(&k->rng, P->words);
            uint64_t want = gen_value(seed, i, in_value(in->tseed, i % in->words)), got = P->p[i];
            if (got != want) {
                tt_fail("stale read of a kernel's OUT object before sync: word %zu of output %u is %016" PRIx64
                        ", the kernel wrote %016" PRIx64 "; block state '%c'", i, pk, got, want,
                        adsm_block_state(&P->p[i]));
                break;
            }
        }
        T.k_inflight_reads++;
    }
    doing(k->st, "adsm_sync (after launch)", T.k_launches, 0);
    CHECK_OK(adsm_sync(), "after launch %" PRIu64, T.k_launches);
    if (T.batch) pthread_rwlock_unlock(&T.phase);
    if (!T.failed) {
        doing(k->st, "verify the OUT object after sync (object)", pk, 0);
        verify_pub(P, pk, in, seed, "after sync");
        doing(k->st, "verify the INOUT counter after sync", 0, 0);
        for (size_t i = 0; i < k->counter_words && !T.failed; i++) {
            uint64_t want = k->sum_inc + k->counter_launches * (i & 7);
            if (k->counter[i] != want)
                tt_fail("stale read after sync: INOUT counter word %zu is %" PRIu64 ", expected %" PRIu64
                        " after %" PRIu64 " launches; block state '%c'", i, k->counter[i], want,
                        k->counter_launches, adsm_block_state(&k->counter[i]));
        }
    }
    P->seed = seed;
    P->tseed = in->tseed;
    P->in_words = in->words;
    P->publications++;
    P->valid = !T.failed;
    pthread_rwlock_unlock(&P->lock);
}

static void *kernel_main(void *arg) {
    kstate *k = (kstate *)arg;
    for (uint64_t it = 0; !stopping(); it++) {
        kernel_iteration(k, it);
        __atomic_add_fetch(&T.k_iterations, 1, __ATOMIC_RELAXED);
        tick(k->st);
    }
    for (unsigned i = 0; i < NTEMP; i++) {
        doing(k->st, "adsm_free an IN object at the end", i, 0);
        if (k->temps[i].p) CHECK_OK(adsm_free(k->temps[i].p), "IN object at the end");
    }
    doing(k->st, "done", 0, 0);
    __atomic_store_n(&k->st->running, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- the driver -------------------------------------------------------------------------------- */
static void final_check(tstat *st) {
    doing(st, "final adsm_sync", 0, 0);
    CHECK_OK(adsm_sync(), "final");
    for (unsigned oi = 0; oi < NWOBJ && !T.failed; oi++) {
        wobj *o = &T.wo[oi];
        doing(st, "final host check (object)", oi, 0);
        for (size_t s = 0; s < o->nstripes && !T.failed; s++) {
            size_t j0, j1;
            stripe_words(o, s, &j0, &j1);
            for (size_t j = j0; j < j1; j++)
                if (o->p[j] != word_of(oi, j, o->pub[s])) {
                    tt_fail("lost write at the end: object %u word %zu (block %zu, stripe %zu of worker %zu) is %016"
                            PRIx64 ", its owner last wrote version %u; block state '%c'", oi, j, j * 8 / T.B, s,
                            s % T.nworkers, o->p[j], o->pub[s], adsm_block_state(&o->p[j]));
                    break;
                }
        }
        /* the device copy, as a kernel sees it */
        doing(st, "final device check (object)", oi, 0);
        uint64_t *d = (uint64_t *)adsm_alloc(o->size);
        if (!d) {
            tt_fail("adsm_alloc(%zu): %s", o->size, adsm_last_error());
            break;
        }
        CHECK_OK(ADSM_CALL(tt_copy, grid_for(o->words), d, o->p, o->words), "final copy");
        CHECK_OK(adsm_sync(), "final copy");
        for (size_t j = 0; j < o->words && !T.failed; j++) {
            size_t s = j / o->stripe_words;
            if (d[j] != word_of(oi, j, o->pub[s]))
                tt_fail("lost write on the device: a kernel read word %zu of object %u (block %zu) as %016" PRIx64
                        ", its owner last wrote version %u", j, oi, j * 8 / T.B, d[j], o->pub[s]);
        }
        CHECK_OK(adsm_free(d), "final copy");
        tick(st);
    }
}

static void run_threads(const variant *v) {
    memset(&T, 0, sizeof T);
    pthread_mutex_init(&T.fail_mutex, NULL);
    T.v = v;
    T.batch = v->protocol == ADSM_PROTOCOL_BATCH;
    T.tracked = !T.batch;
    T.B = v->block_size;
    T.nworkers = env_uint("ADSM_TEST_THREADS", 8, 1, MAX_WORKERS);
    T.stress_s = env_double("ADSM_TEST_SECONDS", 2.0);
    T.stall_s = env_double("ADSM_TEST_STALL", 20.0);
    T.seed = getenv("ADSM_TEST_SEED") ? strtoull(getenv("ADSM_TEST_SEED"), NULL, 0) : 20260601;
    for (const char *c = v->name; *c; c++) T.seed = T.seed * 1099511628211ull + (uint8_t)*c;

    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = THREADS_BACKEND;
    cfg.protocol = v->protocol;
    cfg.block_size = v->block_size;
    cfg.rolling_size = v->rolling_size;
    cfg.block_exact = v->block_exact;
    setenv("ADSM_SYNC_HOME", "0", 1); /* phase 1 needs the OUT object Invalid after each sync */
    start_runtime(&cfg);
    cr_assert_eq(adsm_block_size(), v->block_size);
    size_t B = T.B;
    unsigned N = T.nworkers;

    /* the workers' objects: fine stripes, one block per owner, stripes straddling blocks, a
     * partial block */
    const size_t sizes[NWOBJ] = {2 * B + 4096, (size_t)N * B, 3 * B - 8, B / 2 + 24};
    const size_t stripes[NWOBJ] = {64, B, 1016, 256};
    for (unsigned i = 0; i < NWOBJ; i++) {
        wobj *o = &T.wo[i];
        o->size = sizes[i];
        o->words = o->size / 8;
        o->stripe_words = stripes[i] / 8;
        o->nstripes = (o->words + o->stripe_words - 1) / o->stripe_words;
        o->p = (uint64_t *)adsm_alloc(o->size);
        o->pub = (uint32_t *)calloc(o->nstripes, sizeof *o->pub);
        cr_assert(o->p && o->pub, "adsm_alloc(%zu): %s", o->size, adsm_last_error());
    }
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&T.phase, &ra);
    for (unsigned k = 0; k < NPUB; k++) {
        pubobj *P = &T.pub[k];
        pthread_rwlock_init(&P->lock, &ra);
        P->words = (3 * B / 2) / 8;
        P->p = (uint64_t *)adsm_alloc(P->words * 8);
        cr_assert(P->p, "adsm_alloc: %s", adsm_last_error());
    }
    pthread_rwlockattr_destroy(&ra);
    static kstate ks;
    memset(&ks, 0, sizeof ks);
    ks.rng = T.seed ^ 0xabcdef;
    ks.counter_words = (B + 64) / 8;
    ks.counter = (uint64_t *)adsm_alloc(ks.counter_words * 8);
    T.F = (uint64_t *)adsm_alloc(2 * B);
    cr_assert(ks.counter && T.F, "adsm_alloc: %s", adsm_last_error());

    /* thread records: workers, kernel thread, main */
    T.nstats = N + 2;
    for (unsigned i = 0; i < T.nstats; i++) {
        if (i < N) snprintf(T.stats[i].name, sizeof T.stats[i].name, "worker %u", i);
        else snprintf(T.stats[i].name, sizeof T.stats[i].name, i == N ? "kernel" : "main");
        T.stats[i].running = i != N; /* the kernel thread starts after phase 1 */
        T.stats[i].what = "starting";
    }
    tstat *mst = &T.stats[N + 1];
    ks.st = &T.stats[N];
    cr_assert_eq(pthread_create(&wd_thread, NULL, watchdog_main, NULL), 0);

    pthread_barrier_init(&T.pre_start, NULL, N + 1);
    pthread_barrier_init(&T.pre_end, NULL, N + 1);
    adsm_reset_stats();
    double t0 = now_s();
    for (unsigned i = 0; i < N; i++) {
        worker *wk = &T.workers[i];
        wk->id = i;
        wk->rng = T.seed + 977 * (i + 1);
        wk->st = &T.stats[i];
        cr_assert_eq(pthread_create(&wk->thread, NULL, worker_main, wk), 0);
    }
    if (T.tracked) pre_main(mst);
    double t1 = now_s();

    /* phase 2 */
    __atomic_store_n(&ks.st->running, 1, __ATOMIC_RELEASE);
    cr_assert_eq(pthread_create(&T.kthread, NULL, kernel_main, &ks), 0);
    doing(mst, "sleeping while the stress runs", 0, 0);
    for (;;) {
        usleep(20 * 1000);
        tick(mst);
        double el = now_s() - t1;
        if (stopping()) break;
        uint64_t wops = 0;
        for (unsigned i = 0; i < N; i++) wops += __atomic_load_n(&T.stats[i].progress, __ATOMIC_RELAXED);
        /* at least 20 kernel iterations and 100 operations per worker, unless it takes far too long */
        if (el >= T.stress_s && ((__atomic_load_n(&T.k_iterations, __ATOMIC_RELAXED) >= 20 && wops >= 100ull * N) || el > 6 * T.stress_s)) break;
    }
    __atomic_store_n(&T.stop, 1, __ATOMIC_RELEASE);
    doing(mst, "join the kernel thread", 0, 0);
    pthread_join(T.kthread, NULL);
    for (unsigned i = 0; i < N; i++) {
        doing(mst, "join worker", i, 0);
        pthread_join(T.workers[i].thread, NULL);
    }
    double t2 = now_s();
    int failed_in_run = T.failed;
    if (!failed_in_run) final_check(mst);

    adsm_stats st;
    adsm_get_stats(&st);
    uint64_t writes = 0, own = 0, other = 0, pubc = 0, busy = 0;
    for (unsigned i = 0; i < N; i++) {
        writes += T.workers[i].writes;
        own += T.workers[i].own_checks;
        other += T.workers[i].other_checks;
        pubc += T.workers[i].pub_checks;
        busy += T.workers[i].pub_busy;
    }
    cr_log_info("[%s] %u workers; phase 1 %.2f s (%d/%d rounds with concurrent faults, %d with N); stress %.2f s: "
                "%" PRIu64 " stripe writes, %" PRIu64 " own + %" PRIu64 " other checks, %" PRIu64
                " published checks (%" PRIu64 " busy); kernel thread %" PRIu64 " iterations, %" PRIu64
                " launches (%" PRIu64 " pipelined), %" PRIu64 " churn objects, %" PRIu64 " reads in flight, %" PRIu64
                " before launch; faults %" PRIu64 "r/%" PRIu64 "w, %" PRIu64 " evictions, h2d %" PRIu64
                " MiB, d2h %" PRIu64 " MiB",
                v->name, N, t1 - t0, T.pre_concurrent_rounds, T.tracked ? PRE_ROUNDS : 0, T.pre_all_faulted_rounds, t2 - t1, writes, own,
                other, pubc, busy, T.k_iterations, T.k_launches, T.k_pipelined, T.k_churn, T.k_inflight_reads,
                T.k_prelaunch_reads, st.read_faults, st.write_faults, st.evictions, st.h2d_bytes >> 20,
                st.d2h_bytes >> 20);

    __atomic_store_n(&mst->running, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&wd_done, 1, __ATOMIC_RELEASE);
    pthread_join(wd_thread, NULL);
    if (T.failed) cr_assert_fail("%s", T.fail_msg);

    if (T.tracked && N > 1)
        cr_expect_gt(T.pre_concurrent_rounds, 0, "[%s] phase 1 never had two threads fault on the block at once",
                     v->name);
    cr_expect_geq(T.k_launches, 20, "[%s] only %" PRIu64 " launches", v->name, T.k_launches);
    cr_expect_gt(writes, 0);
    if (T.batch) {
        cr_expect_eq(st.read_faults + st.write_faults, 0, "[%s] batch took faults", v->name);
    } else {
        cr_expect_gt(st.read_faults, 0, "[%s] no read faults", v->name);
        cr_expect_gt(st.write_faults, 0, "[%s] no write faults", v->name);
    }
    if (v->rolling_size) cr_expect_gt(st.evictions, 0, "[%s] rolling size %zu but no evictions", v->name,
                                      v->rolling_size);

    for (unsigned i = 0; i < NWOBJ; i++) {
        cr_expect_eq(adsm_free(T.wo[i].p), ADSM_OK);
        free(T.wo[i].pub);
    }
    for (unsigned k = 0; k < NPUB; k++) cr_expect_eq(adsm_free(T.pub[k].p), ADSM_OK);
    cr_expect_eq(adsm_free(ks.counter), ADSM_OK);
    cr_expect_eq(adsm_free(T.F), ADSM_OK);
    adsm_shutdown();
}

/* ---- the tests ---------------------------------------------------------------------------------- */
TestSuite(threads, .timeout = 60);

/* ---- a read racing a launch ------------------------------------------------------------------
 * K1, slow, writes o; the CPU makes p Dirty; K2 writes o and p. K2's release queues p's flush,
 * which the device runs after K1, and waits for it with the runtime lock let go. Another thread
 * reads o meanwhile: its fault must wait for K2 (and see o after it), not fetch K1's bytes and
 * leave them ReadOnly over K2's, as it did when the wait marked only the units it flushed and then
 * cleared every unit's mark, the reader's too. Timing only decides whether the read lands in that
 * window; every outcome must read o after K2 once adsm_sync returned. */
static int32_t *volatile race_o;
static volatile int race_go;
static volatile int32_t race_seen;
static void *read_during_the_launch(void *arg) {
    (void)arg;
    while (!race_go) sched_yield();
    struct timespec ts = {0, 30 * 1000000L}; /* into K2's release, well inside K1's 300 ms */
    nanosleep(&ts, NULL);
    race_seen = race_o[0];
    return NULL;
}

static void read_racing_a_launch(adsm_protocol_kind protocol) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = THREADS_BACKEND;
    cfg.protocol = protocol;
    cfg.block_size = 64 * KIB;
    start_runtime(&cfg);
    const size_t n = MIB / sizeof(int32_t);
    int32_t *o = adsm_alloc(n * sizeof *o), *p = adsm_alloc(4096);
    cr_assert(o && p, "%s", adsm_last_error());
    race_o = o;
    for (int32_t round = 0; round < 3; round++) {
        cr_assert_eq(ADSM_CALL(tt_slow_fill, adsm_grid_1d(1, 1), o, n, 10 * round, 300), ADSM_OK, "%s", adsm_last_error());
        p[0] = round; /* Dirty: K2's release queues its flush behind K1 */
        race_go = 0;
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, read_during_the_launch, NULL), 0);
        race_go = 1;
        cr_assert_eq(ADSM_CALL(tt_add_both, adsm_grid_1d(1, 1), o, p, 100), ADSM_OK, "%s", adsm_last_error());
        pthread_join(t, NULL);
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        cr_assert(race_seen == 10 * round || race_seen == 10 * round + 100, "round %d: the reader saw %d", round,
                  race_seen);
        cr_assert_eq(o[0], 10 * round + 100, "round %d: after adsm_sync o[0] = %d, not K2's %d", round, o[0],
                     10 * round + 100);
        cr_assert_eq(p[0], round + 100);
    }
    adsm_shutdown();
}

Test(threads, a_read_racing_a_launch_lazy) { read_racing_a_launch(ADSM_PROTOCOL_LAZY); }
Test(threads, a_read_racing_a_launch_rolling) { read_racing_a_launch(ADSM_PROTOCOL_ROLLING); }

/* ---- a read racing a translating launch ------------------------------------------------------
 * Where the device's addresses differ, a launch naming a typed object waits, before translating
 * it, for every fault copying a typed object, with the runtime lock let go. Here thread R1 reads
 * m, which K1 wrote, and its fault copies all of it (32 MiB, one unit): K2 (reads l, another
 * typed object, writes c) waits for that copy after its release sent c and made it Invalid.
 * Thread R2 reads c as soon as the statistics show a protection change (that invalidation, or
 * R1's copy done): its fault must wait for K2 (and see c after it), not fetch the bytes from
 * before K2, whose launch was not issued yet, and leave them ReadOnly over what K2 writes, even
 * after adsm_sync. Timing only decides whether the reads land in that window; every outcome must
 * read c after K2 once adsm_sync returned. */
static tt_link *volatile xrace_m;
static int32_t *volatile xrace_c;
static volatile int xrace_go;
static volatile uint64_t xrace_changes; /* protection_changes after K1 */
static volatile int64_t xrace_seen_m;
static volatile int32_t xrace_seen_c;
static void *read_the_typed_object(void *arg) {
    (void)arg;
    while (!xrace_go) sched_yield();
    xrace_seen_m = xrace_m[0].value;
    return NULL;
}
static void *read_the_output_once_invalid(void *arg) {
    (void)arg;
    while (!xrace_go) sched_yield();
    for (;;) {
        adsm_stats s;
        if (adsm_get_stats(&s) != ADSM_OK || s.protection_changes > xrace_changes) break;
        sched_yield();
    }
    xrace_seen_c = xrace_c[0];
    return NULL;
}

static void read_racing_a_translating_launch(adsm_protocol_kind protocol) {
    setenv("ADSM_EMU_SAME_ADDRESS", "0", 1);
    setenv("ADSM_CUDA_SAME_ADDRESS", "0", 1);
    setenv("ADSM_TRANSLATE", "staged", 1);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = THREADS_BACKEND;
    cfg.protocol = protocol;
    cfg.block_size = 32 * MIB; /* rolling: m is one block, fetched whole */
    start_runtime(&cfg);
    const size_t n = 64 * KIB / sizeof(int32_t), links = 32 * MIB / sizeof(tt_link);
    tt_link *m = ADSM_ALLOC(tt_link, links), *l = ADSM_ALLOC(tt_link, 2);
    int32_t *c = adsm_alloc(n * sizeof *c);
    cr_assert(m && l && c, "%s", adsm_last_error());
    cr_assert_neq((uintptr_t)adsm_safe(l), (uintptr_t)l, "the device's addresses should differ in this test");
    for (size_t i = 0; i < links; i++) m[i].next = &m[(i + 1) % links], m[i].value = 0;
    l[0].next = &l[1], l[1].next = &l[0], l[0].value = l[1].value = 0;
    xrace_m = m, xrace_c = c;
    for (int32_t round = 1; round <= 4; round++) {
        for (size_t i = 0; i < n; i++) c[i] = -round; /* Dirty: K2's release sends them */
        cr_assert_eq(ADSM_CALL(tt_slow_bump, adsm_grid_1d(1, 1), m, 0), ADSM_OK, "%s", adsm_last_error());
        adsm_stats s;
        cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
        xrace_changes = s.protection_changes;
        xrace_go = 0;
        pthread_t r1, r2;
        cr_assert_eq(pthread_create(&r1, NULL, read_the_typed_object, NULL), 0);
        cr_assert_eq(pthread_create(&r2, NULL, read_the_output_once_invalid, NULL), 0);
        xrace_go = 1;
        struct timespec ts = {0, 2 * 1000000L}; /* R1's fault is copying m by then, most times */
        nanosleep(&ts, NULL);
        cr_assert_eq(ADSM_CALL(tt_fill_beside, grid_for(n), l, c, n, 100 * round), ADSM_OK, "%s", adsm_last_error());
        pthread_join(r1, NULL);
        pthread_join(r2, NULL);
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(xrace_seen_m, round, "round %d: R1 read m[0].value = %lld", round, (long long)xrace_seen_m);
        cr_assert(xrace_seen_c == -round || xrace_seen_c == 100 * round, "round %d: R2 saw %d", round, xrace_seen_c);
        for (size_t i = 0; i < n; i += 1024)
            cr_assert_eq(c[i], 100 * round, "round %d: after adsm_sync c[%zu] = %d, not K2's %d", round, i, c[i],
                         100 * round);
        cr_assert_eq(m[0].next, &m[1], "round %d: the host copy keeps host addresses", round);
    }
    adsm_shutdown();
    unsetenv("ADSM_EMU_SAME_ADDRESS");
    unsetenv("ADSM_CUDA_SAME_ADDRESS");
    unsetenv("ADSM_TRANSLATE");
}

Test(threads, a_read_racing_a_translating_launch_lazy) { read_racing_a_translating_launch(ADSM_PROTOCOL_LAZY); }
Test(threads, a_read_racing_a_translating_launch_rolling) { read_racing_a_translating_launch(ADSM_PROTOCOL_ROLLING); }



#define THREADS_TEST(tname, protocol, bs, rs, exact)             \
    Test(threads, tname) {                                       \
        static const variant v = {#tname, protocol, bs, rs, exact}; \
        run_threads(&v);                                         \
    }

THREADS_TEST(batch_4k, ADSM_PROTOCOL_BATCH, 4 * KIB, 0, 0)
THREADS_TEST(batch_512k, ADSM_PROTOCOL_BATCH, 512 * KIB, 0, 0)
THREADS_TEST(lazy_4k, ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 0)
THREADS_TEST(lazy_512k, ADSM_PROTOCOL_LAZY, 512 * KIB, 0, 0)
THREADS_TEST(rolling_4k, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0, 0)
THREADS_TEST(rolling_512k, ADSM_PROTOCOL_ROLLING, 512 * KIB, 0, 0)
THREADS_TEST(rolling_rs2_4k, ADSM_PROTOCOL_ROLLING, 4 * KIB, 2, 0)
THREADS_TEST(rolling_rs2_512k, ADSM_PROTOCOL_ROLLING, 512 * KIB, 2, 0)
THREADS_TEST(rolling_exact_4k, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0, 1)
