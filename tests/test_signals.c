/* tests/test_signals.c -- signals and processes around adsm: a program's own signal handler that
 * touches shared memory while the interrupted thread is outside adsm (works), SIGSEGV sent with
 * kill() or raise() (passed on, as without adsm), and fork() followed by exec (the child runs). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

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

Test(signals, handler_touching_shared_memory_outside_adsm, .timeout = 20) {
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
