/* tests/test_shutdown_races.c -- adsm_shutdown while other threads call adsm (issue 11, item 13).
 *
 * What adsm.h allows: a call that races with adsm_shutdown either finishes before shutdown tears
 * anything down, or runs after it (as any call after shutdown: initialising again where the call
 * does that, "not initialised" errors for old pointers). It never touches freed state. A thread
 * blocked in adsm_read on a pipe does not hold shutdown up; its call fails with ECANCELED.
 * Touching shared memory itself after shutdown stays a crash (test_misuse.c). Run under ASan and
 * TSan too, which see any use of freed runtime state. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

ADSM_KERNEL(mark, ADSM_OUT(int, c), ADSM_VALUE(int, v));
void mark(adsm_grid g, int *c, int v) {
    ADSM_FOR_EACH_THREAD(g, i) { c[i] = v; }
}

static void init_emu(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 2;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

#define WORKERS 4
#define ROUNDS 300

static int allowed(adsm_result r) { return r == ADSM_OK || r == ADSM_ERROR_NOT_SHARED; }

/* What went wrong in worker w, with the call's result and its message (the worker's own). */
static char failure_text[WORKERS][600];
static const char *failed(int w, const char *what, adsm_result r) {
    snprintf(failure_text[w], sizeof failure_text[w], "%s returned %s (%s)", what, adsm_result_string(r),
             adsm_last_error());
    return failure_text[w];
}

/* Calls that never touch shared memory with the CPU: allocate, launch on it, sync, look at it,
 * free. Returns NULL or what went wrong. */
static void *calls_in_a_loop(void *arg) {
    int w = (int)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        int *p = adsm_alloc(8192);
        if (!p) return "adsm_alloc failed";
        adsm_result r = ADSM_CALL(mark, adsm_grid_1d(8, 256), p, i);
        if (!allowed(r)) return (void *)failed(w, "ADSM_CALL", r);
        if (!allowed(r = adsm_sync())) return (void *)failed(w, "adsm_sync", r);
        adsm_stats s;
        if (adsm_get_stats(&s) != ADSM_OK) return "adsm_get_stats failed";
        (void)adsm_block_state(p);
        if (!allowed(r = adsm_free(p))) return (void *)failed(w, "adsm_free", r);
    }
    return NULL;
}

Test(shutdown_races, shutdown_while_threads_allocate_launch_sync_and_free, .timeout = 60) {
    init_emu();
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++) cr_assert_eq(pthread_create(&t[i], NULL, calls_in_a_loop, (void *)(intptr_t)i), 0);
    for (int k = 0; k < 3; k++) { /* the workers initialise again implicitly: shut that down too */
        usleep(20000);
        adsm_shutdown();
    }
    for (int i = 0; i < WORKERS; i++) {
        void *failure;
        pthread_join(t[i], &failure);
        cr_expect_null(failure, "worker %d: %s", i, (const char *)failure);
    }
    adsm_shutdown();
}

typedef struct blocked_read {
    int fd;
    char *buf;
    ssize_t got;
    int err;
    int tid; /* the reader's thread id, once it runs */
} blocked_read;

static void *read_from_pipe(void *arg) {
    blocked_read *b = arg;
    __atomic_store_n(&b->tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
    errno = 0;
    b->got = adsm_read(b->fd, b->buf, 4096);
    b->err = errno;
    return NULL;
}

/* Whether thread tid is blocked in read(2) now (/proc/self/task/<tid>/syscall names the call). */
static int blocked_in_read(int tid) {
    char path[64];
    long nr = -1;
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (fscanf(f, "%ld", &nr) != 1) nr = -1;
    fclose(f);
    return nr == SYS_read;
}

/* Waits, a bounded number of 1 ms naps (a minute at most, however loaded the machine), until the
 * reader is blocked in read(2): shutting down before it got there would test something else. */
static void await_blocked_reader(const blocked_read *b) {
    int seen = 0;
    for (int i = 0; i < 60000 && !seen; i++) {
        int tid = __atomic_load_n(&b->tid, __ATOMIC_ACQUIRE);
        seen = tid != 0 && blocked_in_read(tid);
        struct timespec nap = {0, 1000000};
        if (!seen) nanosleep(&nap, NULL);
    }
    cr_assert(seen, "the reader never blocked in read(2)");
}

Test(shutdown_races, shutdown_does_not_wait_for_a_read_blocked_on_a_pipe, .timeout = 60) {
    init_emu();
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    blocked_read b = {.fd = fds[0], .buf = adsm_alloc(4096)};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_from_pipe, &b), 0);
    await_blocked_reader(&b);
    adsm_shutdown(); /* returns: the Criterion timeout fails a hang */
    cr_assert_eq(write(fds[1], "late", 4), 4);
    pthread_join(t, NULL);
    cr_assert_eq(b.got, -1);
    cr_assert_eq(b.err, ECANCELED, "errno %d", b.err);
    close(fds[0]);
    close(fds[1]);
}
