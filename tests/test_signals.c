/* tests/test_signals.c -- signals and processes around adsm: a program's own signal handler that
 * touches shared memory while the interrupted thread is outside adsm (works), SIGSEGV sent with
 * kill() or raise() (passed on, as without adsm), and fork() followed by exec (the child runs);
 * a forked child that touches shared memory or calls adsm is told it may only exec or _exit. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/death.h"
#include "tests/signal_stack.h"

ADSM_KERNEL(fill, ADSM_OUT(int, c), ADSM_VALUE(int, v), ADSM_VALUE(size_t, n));

void fill(adsm_grid g, int *c, int v, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = v + (int)i;
    }
}

static void init(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

enum { N = 4096 };
static int *volatile shared;
static volatile long seen;
static volatile sig_atomic_t handled;

/* Reads Invalid shared data (a fault, a fetch) and writes ReadOnly data (a fault), from inside
 * a signal handler. */
static void alarm_handler(int sig) {
    (void)sig;
    long sum = 0;
    for (int i = 0; i < N; i += 512) sum += shared[i];
    shared[1] = -1;
    seen = sum;
    handled = 1;
}

Test(signals, handler_touching_shared_memory_outside_adsm, .timeout = 120) {
    init();
    shared = adsm_alloc(N * sizeof(int));
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), shared, 10, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(shared), 'I');
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = alarm_handler;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
    struct itimerval t = {{0, 0}, {0, 20000}};
    cr_assert_eq(setitimer(ITIMER_REAL, &t, NULL), 0);
    volatile unsigned long spin = 0;
    while (!handled) spin++; /* plain code, outside adsm: the handler may use shared memory */
    long want = 0;
    for (int i = 0; i < N; i += 512) want += 10 + i;
    cr_assert_eq(seen, want);
    cr_assert_eq(shared[1], -1);
    cr_assert_eq(adsm_block_state(shared), 'D');
    adsm_shutdown();
}

Test(signals, kill_sigsegv_is_passed_on, .signal = SIGSEGV) {
    init();
    int *p = adsm_alloc(N * sizeof(int));
    p[0] = 1;
    kill(getpid(), SIGSEGV); /* not a fault: adsm passes it on, the default action kills */
    sleep(5);
}

Test(signals, raise_sigsegv_is_passed_on, .signal = SIGSEGV) {
    init();
    raise(SIGSEGV);
}

/* A forked child of an adsm program may exec (documented: only exec or _exit). */
Test(signals, fork_then_exec) {
    init();
    int *p = adsm_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) p[i] = i;
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
        _exit(99);
    }
    cr_assert_gt(pid, 0);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 7, "child status %d", status);
    /* the parent and its device are unaffected */
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), p, 1, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(p[N - 1], N);
    adsm_shutdown();
}

/* A forked child that touches shared memory adsm would have to fetch: adsm's threads and device
 * stayed with the parent, so the child is told why and dies (on cuda a fetch there waited for
 * ever for the missing engine thread; on emu it went to the parent's device). */
static void child_reads_a_kernel_result(void) {
    printf("%d\n", shared[N - 1]);
}

Test(signals, a_forked_child_touching_shared_memory_is_told_why_and_dies) {
    init();
    shared = adsm_alloc(N * sizeof(int));
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), shared, 5, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(shared + N - 1), 'I', "the result is on the device only");
    expect_death_message(child_reads_a_kernel_result, "a forked child may only exec or _exit");
    cr_assert_eq(shared[N - 1], 5 + N - 1, "the parent reads the result");
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), shared, 6, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(shared[N - 1], 6 + N - 1, "the parent's device still works");
    adsm_shutdown();
}

/* What a forked child asks of adsm fails saying why, starts nothing, and leaves the parent's
 * runtime working; a program that forks after adsm_shutdown may start adsm in the child. */
static int child_calls(void) {
    if (adsm_alloc(64) != NULL) return 1;
    if (adsm_last_result() != ADSM_ERROR_UNSUPPORTED || !strstr(adsm_last_error(), "forked child")) return 2;
    if (ADSM_CALL(fill, adsm_grid_1d(1, 64), shared, 1, (size_t)64) != ADSM_ERROR_UNSUPPORTED) return 3;
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_ERROR_UNSUPPORTED) return 4;
    adsm_shutdown(); /* nothing of the parent's to stop here */
    return 0;
}

static int child_exit_status(int (*fn)(void)) {
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(fn());
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "child status %d", status);
    return WEXITSTATUS(status);
}

static int child_starts_its_own(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) return 1;
    int *p = adsm_alloc(N * sizeof(int));
    if (!p || ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), p, 9, (size_t)N) != ADSM_OK || adsm_sync() != ADSM_OK) return 2;
    int ok = p[N - 1] == 9 + N - 1;
    adsm_shutdown();
    return ok ? 0 : 3;
}

Test(signals, a_forked_child_calls_fail_saying_why) {
    init();
    shared = adsm_alloc(N * sizeof(int));
    cr_assert_eq(child_exit_status(child_calls), 0, "see child_calls for what each status means");
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), shared, 2, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(shared[0], 2, "the parent goes on");
    adsm_shutdown();
    cr_assert_eq(child_exit_status(child_starts_its_own), 0, "a fork after adsm_shutdown may start adsm");
}

/* Faults handled on an 8 KiB alternate signal stack (the classic SIGSTKSZ, which Rust gives every
 * thread): write faults, then read faults that fetch a kernel's result. */
Test(signals, faults_fit_an_8_kib_signal_stack) {
    init();
    shared = adsm_alloc(N * sizeof(int));
    guarded_stack g = guarded_stack_on(8192);
    for (int i = 0; i < N; i += 1024) shared[i] = i;
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), shared, 7, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    long sum = 0;
    for (int i = 0; i < N; i += 1024) sum += shared[i];
    guarded_stack_off(&g);
    cr_assert_eq(sum, 7 * 4 + 0 + 1024 + 2048 + 3072);
    adsm_shutdown();
}

/* ---- threads that block every signal (issue 11, item 4) ------------------------------------ */
/* Reads a kernel's output (Invalid: a fault and a fetch) and writes it (a fault), from a thread
 * whose mask was meant to block every signal. */
static void *touch_shared(void *arg) {
    int *p = arg;
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    if (sigismember(&cur, SIGSEGV)) return "SIGSEGV is blocked in the thread";
    if (sigismember(&cur, SIGBUS)) return "SIGBUS (the userfaultfd engine's write faults) is blocked in the thread";
    if (!sigismember(&cur, SIGINT)) return "the other signals were not blocked";
    if (p[N - 1] != 10 + N - 1) return "wrong data";
    p[0] = -5;
    return NULL;
}

static void *block_all_then_touch(void *arg) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    return touch_shared(arg);
}

static int *filled_invalid_object(void) {
    int *p = adsm_alloc(N * sizeof(int));
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), p, 10, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(p), 'I');
    return p;
}

Test(signals, thread_created_with_every_signal_blocked_touches_shared_memory, .timeout = 120) {
    init();
    int *p = filled_invalid_object();
    sigset_t all, before;
    sigfillset(&all);
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, &all, &before), 0); /* the thread-pool habit */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, touch_shared, p), 0);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    void *failure;
    pthread_join(t, &failure);
    cr_assert_null(failure, "%s", (const char *)failure);
    cr_assert_eq(p[0], -5);
    adsm_shutdown();
}

Test(signals, thread_blocking_every_signal_with_sigprocmask_touches_shared_memory, .timeout = 120) {
    init();
    int *p = filled_invalid_object();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, block_all_then_touch, p), 0);
    void *failure;
    pthread_join(t, &failure);
    cr_assert_null(failure, "%s", (const char *)failure);
    cr_assert_eq(p[0], -5);
    adsm_shutdown();
}

/* A handler installed with every signal in its mask may still touch shared memory. */
Test(signals, handler_with_full_mask_touching_shared_memory, .timeout = 120) {
    init();
    shared = filled_invalid_object();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = alarm_handler;
    sigfillset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGALRM, &sa, NULL), 0);
    struct itimerval t = {{0, 0}, {0, 20000}};
    cr_assert_eq(setitimer(ITIMER_REAL, &t, NULL), 0);
    volatile unsigned long spin = 0;
    while (!handled) spin++;
    cr_assert_eq(shared[1], -1);
    adsm_shutdown();
}

/* ---- faults adsm cannot resolve say why (issue 11, item 6) --------------------------------- */
static void touch_after_free(void) {
    init();
    int *p = adsm_alloc(N * sizeof(int));
    adsm_free(p);
    ((volatile int *)p)[0] = 1;
}

static void touch_device_buffer(void) {
    init();
    int *d = adsm_dev_alloc(N * sizeof(int));
    ((volatile int *)d)[0] = 1;
}

Test(signals, touch_after_free_says_why_before_dying, .timeout = 120) {
    expect_death_message(touch_after_free, "no live object holds");
}

Test(signals, touch_of_a_device_buffer_says_why_before_dying, .timeout = 120) {
    expect_death_message(touch_device_buffer, "adsm_dev_alloc");
}
