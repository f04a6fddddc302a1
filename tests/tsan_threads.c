#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/tsan_threads.c -- a small multi-threaded stress of the runtime for ThreadSanitizer.
 *
 * Criterion 2.4 aborts at start-up under TSan (Snaipe/Criterion#274), so this is a plain program
 * (exit status 0: every variant passed). It does what tests/test_threads.c does, smaller, so the
 * whole run takes seconds natively and well under a minute under TSan:
 *
 *   for every protocol (batch, lazy, rolling, rolling with a rolling size of 2 so evictions race
 *   with faults) and block size (4 KiB, 512 KiB), in a child process of its own (forked while
 *   this process has one thread, so TSan allows the child's threads):
 *     - N workers (8, or ADSM_TEST_THREADS) write and re-read their own stripes of three shared
 *       objects (64-byte stripes, one owner per block, 1016-byte stripes straddling blocks) and read
 *       other workers' stripes: no lost write (an owner reads back its last version), no stale read
 *       between CPU threads (a word carries at least the version published before the read);
 *     - a kernel thread allocates, writes and frees objects nobody else sees, fills an IN object,
 *       launches a kernel that writes an OUT object and increments an INOUT counter (under lazy and
 *       rolling it also reads a worker object, so flushes race with the workers' stores), reads the
 *       OUT object while the kernel runs, syncs and checks every word (no stale read after a sync),
 *       then publishes the OUT object, which workers check under a read lock;
 *     - at the end every word is its owner's last version on the host and, copied by a kernel, on
 *       the device.
 *   Under batch every object goes to the device at a call and comes back at sync (ADSM's rule: the
 *   CPU must not write between them), so workers hold a read lock on "the CPU phase" for bursts of
 *   operations and the kernel thread holds it for writing from launch to sync.
 *
 * No hang goes unnoticed: a watchdog thread in each child aborts with every stuck thread's name and
 * step after ADSM_TEST_STALL seconds (default 30) without progress, and the parent kills a child
 * that outlives ADSM_TEST_TIMEOUT seconds (default 120).
 *
 * Usage: tsan_threads [variant...] (default: all). Environment: ADSM_TEST_THREADS (1..32),
 * ADSM_TEST_SECONDS (stress time per variant, default 0.5), ADSM_TEST_STALL, ADSM_TEST_TIMEOUT,
 * ADSM_TEST_SEED. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- values ------------------------------------------------------------------------------------ */
static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static uint64_t next_rand(uint64_t *s) { return splitmix(*s += 0x2545F4914F6CDD1Dull); }
static size_t rand_below(uint64_t *s, size_t n) { return n ? (size_t)(next_rand(s) % n) : 0; }

/* word j of worker object o at version v (0: never written, the initial zeros) */
static uint64_t stripe_word(unsigned o, size_t j, uint32_t v) {
    return v ? ((uint64_t)v << 32) | ((uint64_t)(o + 1) << 28) | (j & 0x0fffffffu) : 0;
}
/* word i of the IN object filled with seed s, and word i of the OUT object the kernel writes */
static uint64_t in_word(uint64_t s, size_t i) { return splitmix(s ^ (i * 0xA24BAED4963EE407ull)); }
static uint64_t out_word(uint64_t s, size_t i, uint64_t in) { return splitmix(s + i) ^ in; }

/* ---- kernels ----------------------------------------------------------------------------------- */
typedef struct produce_args {
    size_t out_n, in_n, counter_n, peek_n;
    uint64_t seed, inc;
} produce_args;

/* out[i] = out_word(seed, i, in[i % in_n]); counter[i] += inc; reads peek[0..peek_n) (a worker
 * object the CPU keeps writing) without using it. peek may be NULL. */
ADSM_KERNEL(ts_produce, ADSM_OUT(uint64_t, out), ADSM_INOUT(uint64_t, counter), ADSM_IN(uint64_t, in),
            ADSM_IN(uint64_t, peek), ADSM_VALUE(produce_args, a));
void ts_produce(adsm_grid g, uint64_t *out, uint64_t *counter, const uint64_t *in, const uint64_t *peek,
                produce_args a) {
    uint64_t sink = 0;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < a.out_n) out[i] = out_word(a.seed, i, in[i % a.in_n]);
        if (i < a.counter_n) counter[i] += a.inc;
        if (peek && i < a.peek_n) sink += peek[i];
    }
    volatile uint64_t keep = sink;
    (void)keep;
}

ADSM_KERNEL(ts_copy, ADSM_OUT(uint64_t, dst), ADSM_IN(uint64_t, src), ADSM_VALUE(size_t, n));
void ts_copy(adsm_grid g, uint64_t *dst, const uint64_t *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

static adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 255) / 256), 256); }

/* ---- state ------------------------------------------------------------------------------------- */
#define KIB ((size_t)1 << 10)
#define NOBJ 3
#define MAXW 32

typedef struct variant {
    const char *name;
    adsm_protocol_kind protocol;
    size_t block, rolling;
    unsigned devices; /* emulated devices; with several, launches go to each in turn */
} variant;

static const variant variants[] = {
    {"batch_4k", ADSM_PROTOCOL_BATCH, 4 * KIB, 0, 1},        {"batch_512k", ADSM_PROTOCOL_BATCH, 512 * KIB, 0, 1},
    {"lazy_4k", ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 1},          {"lazy_512k", ADSM_PROTOCOL_LAZY, 512 * KIB, 0, 1},
    {"rolling_4k", ADSM_PROTOCOL_ROLLING, 4 * KIB, 0, 1},    {"rolling_512k", ADSM_PROTOCOL_ROLLING, 512 * KIB, 0, 1},
    {"rolling_rs2_4k", ADSM_PROTOCOL_ROLLING, 4 * KIB, 2, 1}, {"rolling_rs2_512k", ADSM_PROTOCOL_ROLLING, 512 * KIB, 2, 1},
    {"lazy_64k_3dev", ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 3},   {"rolling_64k_3dev", ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 3},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

/* what a thread is doing, for the watchdog; all fields atomic */
typedef struct progress {
    char name[24];
    uint64_t steps;
    const char *step;
    int live;
} progress;

typedef struct shared_obj {
    uint64_t *p;
    size_t words, stripe; /* stripe: words per stripe */
    size_t nstripes, group; /* stripe s belongs to worker (s / group) % nworkers */
    uint32_t *version; /* per stripe: the owner's last completed version (atomic) */
} shared_obj;

static struct {
    const variant *v;
    int batch;
    size_t B;
    unsigned nworkers;
    uint64_t seed;
    double seconds, stall;
    int stop, failed, watchdog_done; /* atomic */
    pthread_mutex_t fail_lock;
    char fail_msg[1024];

    shared_obj obj[NOBJ];
    pthread_rwlock_t cpu_phase; /* batch only */

    /* the kernel thread's OUT object, published to the workers after each checked sync */
    pthread_rwlock_t out_lock;
    uint64_t *out;
    size_t out_n;
    int out_valid;
    uint64_t out_seed, in_seed;
    size_t in_n;
    uint64_t *in, *counter;
    size_t counter_n;
    uint64_t counter_sum; /* what every counter word must hold */

    progress prog[MAXW + 2]; /* workers, kernel thread, main */
    unsigned nprog;
    uint64_t launches, kernel_iters, churned, in_flight_reads, worker_ops[MAXW], pub_checks;
    unsigned devices, next_dev; /* emulated devices; next_dev atomic */
} S;

/* The device for the next launch: each in turn with several devices, adsm's choice otherwise. */
static int next_device(void) {
    if (S.devices < 2) return ADSM_ANY_DEVICE;
    return (int)(__atomic_fetch_add(&S.next_dev, 1, __ATOMIC_RELAXED) % S.devices);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void at(progress *p, const char *step) {
    __atomic_store_n(&p->step, step, __ATOMIC_RELEASE);
    __atomic_add_fetch(&p->steps, 1, __ATOMIC_RELAXED);
}
static int stopped(void) { return __atomic_load_n(&S.stop, __ATOMIC_ACQUIRE); }

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    pthread_mutex_lock(&S.fail_lock);
    if (!__atomic_load_n(&S.failed, __ATOMIC_RELAXED)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(S.fail_msg, sizeof S.fail_msg, fmt, ap);
        va_end(ap);
        __atomic_store_n(&S.failed, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&S.fail_lock);
    __atomic_store_n(&S.stop, 1, __ATOMIC_RELEASE);
}
static int failed(void) { return __atomic_load_n(&S.failed, __ATOMIC_ACQUIRE); }

#define MUST(call, what)                                                                                    \
    do {                                                                                                    \
        adsm_result r_ = (call);                                                                            \
        if (r_ != ADSM_OK) fail("%s (%s): %s: %s", #call, what, adsm_result_string(r_), adsm_last_error()); \
    } while (0)

static double env_num(const char *name, double def, double lo, double hi) {
    const char *e = getenv(name);
    double x = e && *e ? strtod(e, NULL) : def;
    return x < lo ? lo : x > hi ? hi : x;
}

/* ---- watchdog (one per child) ------------------------------------------------------------------ */
static void *watchdog(void *arg) {
    (void)arg;
    uint64_t seen[MAXW + 2];
    double since[MAXW + 2];
    for (unsigned i = 0; i < S.nprog; i++) {
        seen[i] = __atomic_load_n(&S.prog[i].steps, __ATOMIC_RELAXED);
        since[i] = now();
    }
    while (!__atomic_load_n(&S.watchdog_done, __ATOMIC_ACQUIRE)) {
        usleep(50 * 1000);
        double t = now();
        int stuck = 0;
        for (unsigned i = 0; i < S.nprog; i++) {
            uint64_t s = __atomic_load_n(&S.prog[i].steps, __ATOMIC_RELAXED);
            if (s != seen[i] || !__atomic_load_n(&S.prog[i].live, __ATOMIC_ACQUIRE)) {
                seen[i] = s;
                since[i] = t;
            } else if (t - since[i] > S.stall) {
                stuck = 1;
            }
        }
        if (!stuck) continue;
        fprintf(stderr, "tsan_threads [%s]: DEADLOCK? no progress for %.0f s (ADSM_TEST_STALL):\n", S.v->name, S.stall);
        for (unsigned i = 0; i < S.nprog; i++)
            if (__atomic_load_n(&S.prog[i].live, __ATOMIC_ACQUIRE) && t - since[i] > S.stall)
                fprintf(stderr, "  %-10s stuck in '%s'\n", S.prog[i].name, __atomic_load_n(&S.prog[i].step, __ATOMIC_ACQUIRE));
        fflush(stderr);
        abort();
    }
    return NULL;
}

/* ---- workers ----------------------------------------------------------------------------------- */
static unsigned owner(const shared_obj *o, size_t s) { return (unsigned)(s / o->group % S.nworkers); }

static void stripe_range(const shared_obj *o, size_t s, size_t *j0, size_t *j1) {
    *j0 = s * o->stripe;
    *j1 = *j0 + o->stripe < o->words ? *j0 + o->stripe : o->words;
}

static void write_own(unsigned w, progress *p, unsigned oi, size_t s) {
    shared_obj *o = &S.obj[oi];
    size_t j0, j1;
    stripe_range(o, s, &j0, &j1);
    uint32_t v = __atomic_load_n(&o->version[s], __ATOMIC_RELAXED) + 1;
    at(p, "write own stripe");
    for (size_t j = j0; j < j1; j++) __atomic_store_n(&o->p[j], stripe_word(oi, j, v), __ATOMIC_RELAXED);
    at(p, "re-read own stripe");
    for (size_t j = j0; j < j1; j++) {
        uint64_t got = __atomic_load_n(&o->p[j], __ATOMIC_RELAXED);
        if (got != stripe_word(oi, j, v)) {
            fail("lost write: worker %u re-read object %u word %zu (block %zu) as %016" PRIx64 " right after writing "
                 "version %u; block state '%c'", w, oi, j, j * 8 / S.B, got, v, adsm_block_state(&o->p[j]));
            return;
        }
    }
    __atomic_store_n(&o->version[s], v, __ATOMIC_RELEASE);
}

static void read_stripe(unsigned w, progress *p, unsigned oi, size_t s) {
    shared_obj *o = &S.obj[oi];
    size_t j0, j1;
    stripe_range(o, s, &j0, &j1);
    int own = owner(o, s) == w;
    uint32_t before = __atomic_load_n(&o->version[s], __ATOMIC_ACQUIRE);
    at(p, own ? "check own stripe" : "read another worker's stripe");
    for (size_t j = j0; j < j1; j++) {
        uint64_t got = __atomic_load_n(&o->p[j], __ATOMIC_RELAXED);
        uint32_t after = __atomic_load_n(&o->version[s], __ATOMIC_ACQUIRE), gv = (uint32_t)(got >> 32);
        int ok = own ? got == stripe_word(oi, j, before) : got == stripe_word(oi, j, gv) && gv >= before && gv <= after + 1;
        if (!ok) {
            fail("%s: worker %u read object %u word %zu (block %zu, stripe %zu of worker %u) as %016" PRIx64
                 ", published version %u before the read, %u after; block state '%c'",
                 own ? "lost write" : gv < before ? "stale read" : "corrupt word", w, oi, j, j * 8 / S.B, s,
                 owner(o, s), got, before, after, adsm_block_state(&o->p[j]));
            return;
        }
    }
}

static void check_published(unsigned w, progress *p, uint64_t *rng) {
    if (pthread_rwlock_tryrdlock(&S.out_lock) != 0) return;
    if (S.out_valid) {
        at(p, "check published kernel output");
        for (unsigned k = 0; k < 32; k++) {
            size_t i = k == 0 ? S.out_n - 1 : rand_below(rng, S.out_n);
            uint64_t want = out_word(S.out_seed, i, in_word(S.in_seed, i % S.in_n));
            uint64_t got = __atomic_load_n(&S.out[i], __ATOMIC_RELAXED);
            if (got != want) {
                fail("stale read after sync: worker %u read word %zu of the published kernel output as %016" PRIx64
                     ", the kernel wrote %016" PRIx64 "; block state '%c'", w, i, got, want, adsm_block_state(&S.out[i]));
                break;
            }
        }
        __atomic_add_fetch(&S.pub_checks, 1, __ATOMIC_RELAXED);
    }
    pthread_rwlock_unlock(&S.out_lock);
}

static void *worker_main(void *arg) {
    unsigned w = (unsigned)(uintptr_t)arg;
    progress *p = &S.prog[w];
    uint64_t rng = S.seed * 31 + w + 1;
    while (!stopped()) {
        if (S.batch) {
            at(p, "batch: wait for the CPU phase");
            pthread_rwlock_rdlock(&S.cpu_phase);
        }
        for (int k = 0; k < 16 && !stopped(); k++) {
            unsigned oi = (unsigned)rand_below(&rng, NOBJ);
            shared_obj *o = &S.obj[oi];
            size_t ngroups = (o->nstripes + o->group - 1) / o->group;
            size_t owned = ngroups > w ? (ngroups - w + S.nworkers - 1) / S.nworkers : 0; /* groups */
            unsigned r = (unsigned)rand_below(&rng, 100);
            if (r < 40 && owned) {
                size_t g = w + S.nworkers * rand_below(&rng, owned), s = g * o->group + rand_below(&rng, o->group);
                write_own(w, p, oi, s < o->nstripes ? s : o->nstripes - 1);
            }
            else if (r < 90) read_stripe(w, p, oi, rand_below(&rng, o->nstripes));
            else check_published(w, p, &rng);
            S.worker_ops[w]++;
        }
        if (S.batch) pthread_rwlock_unlock(&S.cpu_phase);
#ifdef __SANITIZE_THREAD__
        /* Under TSan every word a worker stored and a flush then copies is a (suppressed) report,
         * and each costs TSan a stack restore: unthrottled workers dirty so many words between two
         * launches that one flush of 512 KiB blocks takes seconds. A pause per burst keeps the
         * kernel thread launching; faults, evictions and flushes still race with the workers. */
        usleep(2000);
#endif
    }
    at(p, "done");
    __atomic_store_n(&p->live, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- the kernel thread --------------------------------------------------------------------------- */
static void churn(progress *p, uint64_t *rng) {
    size_t size = 8 + 8 * rand_below(rng, 3 * S.B / 8);
    at(p, "churn: alloc");
    uint64_t *x = (uint64_t *)adsm_alloc(size);
    if (!x) {
        fail("adsm_alloc(%zu): %s", size, adsm_last_error());
        return;
    }
    size_t n = size / 8;
    at(p, "churn: write and read back");
    x[n - 1] = n;
    x[0] += 1;
    if (x[0] != (n == 1 ? 2 : 1) || x[n - 1] != (n == 1 ? 2 : n))
        fail("churn object of %zu bytes read back wrong", size);
    at(p, "churn: free");
    MUST(adsm_free(x), "churn");
    S.churned++;
}

static void kernel_iteration(progress *p, uint64_t *rng) {
    churn(p, rng);
    uint64_t in_seed = next_rand(rng), out_seed = next_rand(rng), inc = 1 + rand_below(rng, 1000);
    at(p, "fill the IN object");
    for (size_t i = 0; i < S.in_n; i++) S.in[i] = in_word(in_seed, i);

    /* under lazy and rolling the kernel also reads a worker object the workers keep writing */
    const shared_obj *peek = S.batch ? NULL : &S.obj[rand_below(rng, NOBJ)];
    produce_args a = {S.out_n, S.in_n, S.counter_n, peek ? peek->words : 0, out_seed, inc};

    at(p, "take the OUT object from the workers");
    pthread_rwlock_wrlock(&S.out_lock);
    if (!S.batch && S.out_valid) {
        /* read before the launch: the host copy holds the last published values */
        size_t i = rand_below(rng, S.out_n);
        if (S.out[i] != out_word(S.out_seed, i, in_word(S.in_seed, i % S.in_n)))
            fail("OUT word %zu changed before the launch", i);
    }
    S.out_valid = 0;
    if (S.batch) {
        at(p, "batch: take the CPU phase");
        pthread_rwlock_wrlock(&S.cpu_phase);
    }
    at(p, "launch");
    MUST(ADSM_CALL_ON(next_device(), ts_produce, grid_for(S.out_n > S.counter_n ? S.out_n : S.counter_n), S.out,
                      S.counter, S.in, peek ? peek->p : NULL, a),
         "produce");
    S.launches++;
    if (!S.batch && !failed()) {
        /* read while the kernel may still run: the runtime waits for it and fetches */
        at(p, "read the OUT object while the kernel runs");
        size_t i = rand_below(rng, S.out_n);
        if (S.out[i] != out_word(out_seed, i, in_word(in_seed, i % S.in_n)))
            fail("stale read during the kernel: OUT word %zu is %016" PRIx64, i, S.out[i]);
        S.in_flight_reads++;
    }
    at(p, "sync");
    MUST(adsm_sync(), "produce");
    if (S.batch) pthread_rwlock_unlock(&S.cpu_phase);
    S.counter_sum += inc;
    at(p, "check every OUT and counter word");
    for (size_t i = 0; i < S.out_n && !failed(); i++)
        if (S.out[i] != out_word(out_seed, i, in_word(in_seed, i % S.in_n)))
            fail("stale read after sync: OUT word %zu (block %zu) is %016" PRIx64 ", the kernel wrote %016" PRIx64
                 "; block state '%c'", i, i * 8 / S.B, S.out[i], out_word(out_seed, i, in_word(in_seed, i % S.in_n)),
                 adsm_block_state(&S.out[i]));
    for (size_t i = 0; i < S.counter_n && !failed(); i++)
        if (S.counter[i] != S.counter_sum)
            fail("lost kernel update: counter word %zu is %" PRIu64 ", expected %" PRIu64, i, S.counter[i],
                 S.counter_sum);
    S.out_seed = out_seed;
    S.in_seed = in_seed;
    S.out_valid = !failed();
    pthread_rwlock_unlock(&S.out_lock);
    __atomic_add_fetch(&S.kernel_iters, 1, __ATOMIC_RELAXED);
}

static void *kernel_main(void *arg) {
    (void)arg;
    progress *p = &S.prog[S.nworkers];
    uint64_t rng = S.seed ^ 0x5151;
    while (!stopped()) kernel_iteration(p, &rng);
    at(p, "done");
    __atomic_store_n(&p->live, 0, __ATOMIC_RELEASE);
    return NULL;
}

/* ---- one variant (in a child process) ------------------------------------------------------------- */
static void final_check(progress *p) {
    for (unsigned oi = 0; oi < NOBJ && !failed(); oi++) {
        shared_obj *o = &S.obj[oi];
        at(p, "final host check");
        for (size_t j = 0; j < o->words && !failed(); j++) {
            uint32_t v = o->version[j / o->stripe];
            if (o->p[j] != stripe_word(oi, j, v))
                fail("lost write at the end: object %u word %zu (block %zu) is %016" PRIx64 ", its owner's last version "
                     "is %u; block state '%c'", oi, j, j * 8 / S.B, o->p[j], v, adsm_block_state(&o->p[j]));
        }
        at(p, "final device check");
        uint64_t *d = (uint64_t *)adsm_alloc(o->words * 8);
        if (!d) {
            fail("adsm_alloc: %s", adsm_last_error());
            return;
        }
        MUST(ADSM_CALL_ON(next_device(), ts_copy, grid_for(o->words), d, o->p, o->words), "final copy");
        MUST(adsm_sync(), "final copy");
        for (size_t j = 0; j < o->words && !failed(); j++) {
            uint32_t v = o->version[j / o->stripe];
            if (d[j] != stripe_word(oi, j, v))
                fail("lost write on the device: a kernel read object %u word %zu (block %zu) as %016" PRIx64
                     ", its owner's last version is %u", oi, j, j * 8 / S.B, d[j], v);
        }
        MUST(adsm_free(d), "final copy");
    }
}

static int run_variant(const variant *v) {
    memset(&S, 0, sizeof S);
    pthread_mutex_init(&S.fail_lock, NULL);
    S.v = v;
    S.batch = v->protocol == ADSM_PROTOCOL_BATCH;
    S.B = v->block;
    S.nworkers = (unsigned)env_num("ADSM_TEST_THREADS", 8, 1, MAXW);
    S.seconds = env_num("ADSM_TEST_SECONDS", 0.5, 0.01, 3600);
    S.stall = env_num("ADSM_TEST_STALL", 30, 1, 3600);
    S.seed = (uint64_t)env_num("ADSM_TEST_SEED", 20260601, 0, 1e18);
    for (const char *c = v->name; *c; c++) S.seed = S.seed * 1099511628211ull + (uint8_t)*c;

    /* the environment must not override the variant */
    static const char *const vars[] = {"ADSM_BACKEND", "ADSM_PROTOCOL", "ADSM_BLOCK_SIZE", "ADSM_ROLLING_SIZE",
                                       "ADSM_ROLLING_STEP"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = v->protocol;
    cfg.block_size = v->block;
    cfg.rolling_size = v->rolling;
    cfg.emu_memory = (size_t)1 << 30;
    cfg.emu_workers = 2;
    cfg.emu_devices = v->devices;
    S.devices = v->devices;
    if (adsm_init(&cfg) != ADSM_OK) {
        fprintf(stderr, "tsan_threads [%s]: adsm_init: %s\n", v->name, adsm_last_error());
        return 1;
    }

    size_t B = S.B;
    unsigned N = S.nworkers;
    const size_t sizes[NOBJ] = {2 * B + 4096, (size_t)N * B, 3 * B - 8};
    /* 64-byte stripes (many owners per block), one owner per block (512-byte stripes, a block's
     * worth per owner: whole-block stripes would make each write, and so each flush TSan checks,
     * a whole block of racing words, far too slow under TSan at 512 KiB), 1016-byte stripes
     * straddling blocks */
    const size_t stripes[NOBJ] = {64, 512, 1016}, groups[NOBJ] = {1, B / 512, 1};
    for (unsigned i = 0; i < NOBJ; i++) {
        shared_obj *o = &S.obj[i];
        o->words = sizes[i] / 8;
        o->stripe = stripes[i] / 8;
        o->nstripes = (o->words + o->stripe - 1) / o->stripe;
        o->group = groups[i];
        o->p = (uint64_t *)adsm_alloc(o->words * 8);
        o->version = (uint32_t *)calloc(o->nstripes, sizeof *o->version);
        if (!o->p || !o->version) {
            fprintf(stderr, "tsan_threads [%s]: adsm_alloc: %s\n", v->name, adsm_last_error());
            return 1;
        }
    }
    S.out_n = (3 * B / 2) / 8;
    S.in_n = B / 8 + 3;
    S.counter_n = (B + 64) / 8;
    S.out = (uint64_t *)adsm_alloc(S.out_n * 8);
    S.in = (uint64_t *)adsm_alloc(S.in_n * 8);
    S.counter = (uint64_t *)adsm_alloc(S.counter_n * 8);
    if (!S.out || !S.in || !S.counter) {
        fprintf(stderr, "tsan_threads [%s]: adsm_alloc: %s\n", v->name, adsm_last_error());
        return 1;
    }
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&S.cpu_phase, &ra);
    pthread_rwlock_init(&S.out_lock, &ra);
    pthread_rwlockattr_destroy(&ra);

    S.nprog = N + 2;
    for (unsigned i = 0; i < S.nprog; i++) {
        if (i < N) snprintf(S.prog[i].name, sizeof S.prog[i].name, "worker %u", i);
        else snprintf(S.prog[i].name, sizeof S.prog[i].name, i == N ? "kernel" : "main");
        S.prog[i].step = "starting";
        S.prog[i].live = 1;
    }
    progress *mp = &S.prog[N + 1];
    adsm_reset_stats();
    pthread_t wd, kt, wt[MAXW];
    if (pthread_create(&wd, NULL, watchdog, NULL) != 0) return 1;
    double t0 = now();
    for (unsigned i = 0; i < N; i++)
        if (pthread_create(&wt[i], NULL, worker_main, (void *)(uintptr_t)i) != 0) abort();
    if (pthread_create(&kt, NULL, kernel_main, NULL) != 0) abort();
    for (;;) {
        usleep(10 * 1000);
        at(mp, "sleep while the stress runs");
        double el = now() - t0;
        uint64_t iters = __atomic_load_n(&S.kernel_iters, __ATOMIC_RELAXED);
        if (stopped()) break;
        /* at least 8 kernel iterations, unless they take far too long */
        if (el >= S.seconds && (iters >= 8 || el > 10 * S.seconds)) break;
    }
    __atomic_store_n(&S.stop, 1, __ATOMIC_RELEASE);
    at(mp, "join the kernel thread");
    pthread_join(kt, NULL);
    at(mp, "join the workers");
    for (unsigned i = 0; i < N; i++) pthread_join(wt[i], NULL);
    double t1 = now();
    if (!failed()) final_check(mp);

    adsm_stats st;
    adsm_get_stats(&st);
    uint64_t ops = 0;
    for (unsigned i = 0; i < N; i++) ops += S.worker_ops[i];
    if (!failed() && S.launches < 3) fail("only %" PRIu64 " launches", S.launches);
    if (!failed() && !S.batch && (st.read_faults == 0 || st.write_faults == 0))
        fail("%" PRIu64 " read and %" PRIu64 " write faults: the workers never faulted", st.read_faults, st.write_faults);
    if (!failed() && S.batch && st.read_faults + st.write_faults)
        fail("batch took %" PRIu64 " faults", st.read_faults + st.write_faults);

    for (unsigned i = 0; i < NOBJ; i++) {
        MUST(adsm_free(S.obj[i].p), "end");
        free(S.obj[i].version);
    }
    MUST(adsm_free(S.out), "end");
    MUST(adsm_free(S.in), "end");
    MUST(adsm_free(S.counter), "end");
    at(mp, "adsm_shutdown");
    adsm_shutdown();
    __atomic_store_n(&mp->live, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&S.watchdog_done, 1, __ATOMIC_RELEASE);
    pthread_join(wd, NULL);

    printf("tsan_threads [%s] %s: %u workers, %.2f s: %" PRIu64 " worker operations, %" PRIu64 " published checks; "
           "%" PRIu64 " kernel iterations (%" PRIu64 " launches, %" PRIu64 " churned objects, %" PRIu64
           " reads in flight); faults %" PRIu64 "r/%" PRIu64 "w, %" PRIu64 " evictions\n",
           v->name, failed() ? "FAILED" : "ok", N, t1 - t0, ops, S.pub_checks, S.kernel_iters, S.launches, S.churned,
           S.in_flight_reads, st.read_faults, st.write_faults, st.evictions);
    if (failed()) fprintf(stderr, "tsan_threads [%s]: %s\n", v->name, S.fail_msg);
    fflush(stdout);
    return failed() ? 1 : 0;
}

/* ---- main: each variant in a child process, with a timeout ----------------------------------------- */
static int run_in_child(const variant *v, double timeout) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(run_variant(v));
    double t0 = now();
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            return 1;
        }
        if (now() - t0 > timeout) {
            fprintf(stderr, "tsan_threads [%s]: still running after %.0f s (ADSM_TEST_TIMEOUT); killed\n", v->name,
                    timeout);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        usleep(20 * 1000);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFSIGNALED(status))
        fprintf(stderr, "tsan_threads [%s]: killed by signal %d\n", v->name, WTERMSIG(status));
    else
        fprintf(stderr, "tsan_threads [%s]: exit status %d\n", v->name, WEXITSTATUS(status));
    return 1;
}

int main(int argc, char **argv) {
    double timeout = env_num("ADSM_TEST_TIMEOUT", 120, 1, 86400);
    unsigned passed = 0, nfailed = 0;
    for (size_t i = 0; i < NVARIANTS; i++) {
        int chosen = argc < 2;
        for (int a = 1; a < argc; a++) chosen |= strcmp(argv[a], variants[i].name) == 0;
        if (!chosen) continue;
        if (run_in_child(&variants[i], timeout) == 0) passed++;
        else nfailed++;
    }
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < NVARIANTS && strcmp(argv[a], variants[i].name) != 0) i++;
        if (i == NVARIANTS) {
            fprintf(stderr, "tsan_threads: unknown variant '%s'\n", argv[a]);
            nfailed++;
        }
    }
    printf("tsan_threads: %u passed, %u failed\n", passed, nfailed);
    return nfailed || !passed ? 1 : 0;
}
