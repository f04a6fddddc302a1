/* tests/test_fault.c -- SIGSEGV chaining: adsm resolves faults on shared memory and hands every
 * other fault to the handler installed before it, or to the default action, so stray accesses
 * still crash. Each Criterion test is its own process; tests that must die say so with .signal
 * or .exit_code. Emu backend. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

ADSM_KERNEL(scale_copy, ADSM_OUT(int, dst), ADSM_IN(int, src), ADSM_VALUE(int, k), ADSM_VALUE(size_t, n));

void scale_copy(adsm_grid g, int *dst, const int *src, int k, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = k * src[i];
    }
}

static void start(void) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
}

/* an address the compiler cannot see through */
static volatile uintptr_t low_address = 8;

static void stray_write(uintptr_t a) { *(volatile int *)a = 1; }
static int stray_read(uintptr_t a) { return *(volatile int *)a; }

static void *unmapped_page(void) {
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    cr_assert_eq(munmap(p, (size_t)page), 0);
    return p;
}

/* touches shared memory through faults (writes, reads after a kernel) and checks the results */
static void shared_memory_round_trip(void) {
    const size_t n = 20000;
    int *src = adsm_alloc(n * sizeof *src), *dst = adsm_alloc(n * sizeof *dst);
    cr_assert(src && dst, "%s", adsm_last_error());
    adsm_reset_stats();
    for (size_t i = 0; i < n; i++) src[i] = (int)i;
    cr_assert_eq(ADSM_CALL(scale_copy, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), dst, src, 3, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(dst[i], 3 * (int)i);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_gt(s.write_faults, 0, "the CPU writes should have faulted");
    cr_assert_gt(s.read_faults, 0, "the CPU reads of the kernel output should have faulted");
    adsm_free(src);
    adsm_free(dst);
}

/* ---- no handler before adsm: the default action ----------------------------------------------- */

Test(fault, precondition_default_handler) {
    struct sigaction cur;
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL,
              "the test process starts with a SIGSEGV handler already installed");
}

Test(fault, stray_low_address_write, .signal = SIGSEGV) {
    start();
    shared_memory_round_trip();
    stray_write(low_address);
    cr_assert_fail("survived a write to address 8");
}

Test(fault, stray_low_address_read, .signal = SIGSEGV) {
    start();
    stray_read(low_address);
    cr_assert_fail("survived a read of address 8");
}

Test(fault, stray_munmapped_page, .signal = SIGSEGV) {
    start();
    void *p = unmapped_page();
    stray_write((uintptr_t)p);
    cr_assert_fail("survived a write to an unmapped page");
}

static void *stray_thread(void *arg) {
    (void)arg;
    stray_write(low_address);
    return NULL;
}

Test(fault, stray_write_from_another_thread, .signal = SIGSEGV) {
    start();
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, stray_thread, NULL), 0);
    pthread_join(t, NULL);
    cr_assert_fail("survived a write to address 8 from a thread");
}

Test(fault, write_to_freed_object, .signal = SIGSEGV) {
    start();
    int *p = adsm_alloc(4096);
    cr_assert(p);
    p[0] = 1;
    cr_assert_eq(adsm_free(p), ADSM_OK);
    stray_write((uintptr_t)&p[10]);
    cr_assert_fail("survived a write to a freed shared object");
}

Test(fault, read_of_freed_object, .signal = SIGSEGV) {
    start();
    int *p = adsm_alloc(1 << 20);
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    stray_read((uintptr_t)&p[1000]);
    cr_assert_fail("survived a read of a freed shared object");
}

Test(fault, write_to_freed_safe_object, .signal = SIGSEGV) {
    start();
    int *p = adsm_safe_alloc(4096);
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    stray_write((uintptr_t)p);
    cr_assert_fail("survived a write to a freed safe object");
}

Test(fault, rest_of_last_page_belongs_to_object) {
    start();
    long page = sysconf(_SC_PAGESIZE);
    char *p = adsm_alloc(100);
    cr_assert(p);
    p[99] = 1;
    p[page - 1] = 2; /* objects are page granular: the rest of the page is the object's */
    cr_assert_eq(p[page - 1], 2);
    adsm_free(p);
    adsm_shutdown();
}

Test(fault, past_object_page_crashes, .signal = SIGSEGV) {
    start();
    long page = sysconf(_SC_PAGESIZE);
    char *p = adsm_alloc(100);
    cr_assert(p);
    p[0] = 1;
    /* the pages after the only object belong to nothing */
    stray_write((uintptr_t)(p + 4 * page));
    cr_assert_fail("survived a write past a shared object");
}

Test(fault, stray_after_shutdown, .signal = SIGSEGV) {
    start();
    shared_memory_round_trip();
    adsm_shutdown();
    stray_write(low_address);
    cr_assert_fail("survived a write to address 8 after shutdown");
}

Test(fault, default_restored_after_shutdown) {
    start();
    struct sigaction cur;
    adsm__real_sigaction()(SIGSEGV, NULL, &cur); /* white-box: what the kernel really has */
    cr_assert(cur.sa_flags & SA_SIGINFO, "adsm installs an SA_SIGINFO handler");
    sigaction(SIGSEGV, NULL, &cur); /* the program's own view */
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL, "the program sees its own disposition");
    adsm_shutdown();
    sigaction(SIGSEGV, NULL, &cur);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL, "SIGSEGV not back to SIG_DFL");
}

/* ---- a handler installed before adsm ---------------------------------------------------------- */

static sigjmp_buf jump_back;
static volatile sig_atomic_t prev_calls;
static volatile uintptr_t prev_last_addr;

static void jumping_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    prev_calls++;
    prev_last_addr = (uintptr_t)si->si_addr;
    siglongjmp(jump_back, 1);
}

static void exiting_handler(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)si;
    (void)ctx;
    _exit(42);
}

static void plain_exiting_handler(int sig) {
    (void)sig;
    _exit(43);
}

static void install(void (*action)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = action;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGSEGV, &sa, NULL), 0);
}

/* 1 when the access faulted and the previous handler jumped back */
static int faulted(void (*access)(uintptr_t), uintptr_t a) {
    if (sigsetjmp(jump_back, 1) == 0) {
        access(a);
        return 0;
    }
    return 1;
}

static void read_access(uintptr_t a) { (void)stray_read(a); }

Test(fault, previous_handler_exits, .exit_code = 42) {
    install(exiting_handler);
    start();
    shared_memory_round_trip();
    stray_write(low_address);
    cr_assert_fail("the previous handler did not run");
}

Test(fault, previous_plain_handler_exits, .exit_code = 43) {
    signal(SIGSEGV, plain_exiting_handler);
    start();
    shared_memory_round_trip();
    stray_write((uintptr_t)unmapped_page());
    cr_assert_fail("the previous sa_handler did not run");
}

Test(fault, previous_handler_gets_freed_object_faults, .exit_code = 42) {
    install(exiting_handler);
    start();
    int *p = adsm_alloc(4096);
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    stray_write((uintptr_t)p);
    cr_assert_fail("the previous handler did not get the fault on freed shared memory");
}

Test(fault, previous_handler_and_shared_memory_coexist) {
    install(jumping_handler);
    start();
    void *hole = unmapped_page();

    cr_assert(faulted(stray_write, low_address));
    cr_assert_eq(prev_calls, 1);
    cr_assert_eq(prev_last_addr, (uintptr_t)low_address);

    /* shared-memory faults are resolved by adsm and never reach the previous handler */
    shared_memory_round_trip();
    cr_assert_eq(prev_calls, 1, "the previous handler saw a shared-memory fault");

    cr_assert(faulted(stray_write, (uintptr_t)hole));
    cr_assert(faulted(read_access, (uintptr_t)hole));
    cr_assert_eq(prev_calls, 3);
    cr_assert_eq(prev_last_addr, (uintptr_t)hole);

    /* interleaved: shared faults between stray ones, many times */
    int *obj = adsm_alloc(1 << 16);
    cr_assert(obj);
    for (int round = 0; round < 50; round++) {
        obj[round * 100] = round;
        cr_assert(faulted(stray_write, low_address));
        cr_assert_eq(ADSM_CALL(scale_copy, adsm_grid_1d(1, 1), obj + 8000, obj + round * 100, 2, 1), ADSM_OK);
        cr_assert(faulted(read_access, (uintptr_t)hole));
        cr_assert_eq(obj[8000], 2 * round, "round %d: %d", round, obj[8000]); /* faults, waits, fetches */
    }
    cr_assert_eq(prev_calls, 3 + 100);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());

    /* a freed object's fault goes to the previous handler too */
    cr_assert_eq(adsm_free(obj), ADSM_OK);
    cr_assert(faulted(stray_write, (uintptr_t)obj));
    cr_assert_eq(prev_calls, 104);
    cr_assert_eq(prev_last_addr, (uintptr_t)obj);

    /* and shared memory still works after all that */
    shared_memory_round_trip();
    cr_assert_eq(prev_calls, 104);
    adsm_shutdown();
}

Test(fault, previous_handler_restored_after_shutdown) {
    install(jumping_handler);
    start();
    struct sigaction cur;
    cr_assert_eq(adsm__real_sigaction()(SIGSEGV, NULL, &cur), 0);
    cr_assert((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction != jumping_handler, "adsm did not install itself");
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert(cur.sa_sigaction == jumping_handler, "the program still sees its own handler");
    shared_memory_round_trip();
    adsm_shutdown();
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == jumping_handler,
              "the previous handler is not back after adsm_shutdown");
    prev_calls = 0;
    cr_assert(faulted(stray_write, low_address));
    cr_assert_eq(prev_calls, 1);

    /* a second init/shutdown cycle chains and restores again */
    start();
    cr_assert(faulted(stray_write, low_address));
    cr_assert_eq(prev_calls, 2);
    shared_memory_round_trip();
    cr_assert_eq(prev_calls, 2);
    adsm_shutdown();
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == jumping_handler);
}

Test(fault, previous_plain_handler_restored_after_shutdown) {
    signal(SIGSEGV, plain_exiting_handler);
    start();
    shared_memory_round_trip();
    adsm_shutdown();
    struct sigaction cur;
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == plain_exiting_handler);
}

/* ---- a handler installed after adsm ------------------------------------------------------------ */

/* The program installs its handler after adsm_init (sigaction, then signal): adsm stays first,
 * shared memory keeps working, and the program's handler gets every other fault. */
Test(fault, handler_installed_after_adsm) {
    start();
    install(jumping_handler);
    prev_calls = 0;
    shared_memory_round_trip();
    cr_assert_eq(prev_calls, 0, "shared-memory faults never reach the program's handler");
    cr_assert(faulted(stray_write, low_address));
    cr_assert_eq(prev_calls, 1);
    struct sigaction cur;
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert(cur.sa_sigaction == jumping_handler, "the program reads back what it installed");
    adsm_shutdown();
    cr_assert_eq(sigaction(SIGSEGV, NULL, &cur), 0);
    cr_assert(cur.sa_sigaction == jumping_handler, "after shutdown the program's handler is the real one");
    cr_assert(faulted(stray_write, low_address));
    cr_assert_eq(prev_calls, 2);
}

Test(fault, plain_handler_installed_after_adsm, .exit_code = 43) {
    start();
    cr_assert_neq(signal(SIGSEGV, plain_exiting_handler), SIG_ERR);
    shared_memory_round_trip();
    *(volatile int *)low_address = 1; /* the program's handler exits with 43 */
}

Test(fault, default_set_after_adsm_still_crashes, .signal = SIGSEGV) {
    start();
    install(jumping_handler);
    signal(SIGSEGV, SIG_DFL); /* back to the default: a stray access must kill */
    shared_memory_round_trip();
    *(volatile int *)low_address = 1;
}

/* ---- a decoder that calls every write a read -------------------------------------------------- */
#include <criterion/parameterized.h>

ParameterizedTestParameters(fault, a_decoder_that_calls_writes_reads_cannot_loop) {
    static adsm_protocol_kind protocols[] = {ADSM_PROTOCOL_ROLLING, ADSM_PROTOCOL_LAZY};
    return cr_make_param_array(adsm_protocol_kind, protocols, 2);
}

/* Some sandboxes' signal frames carry no page-fault error code (gVisor's ptrace platform), so a
 * write decodes as a read: making the block readable then lets the write fault again at the same
 * address, for ever. adsm takes the second fault as the write it is; every write still reaches
 * the device, from a fresh object, a flushed one and an Invalid one. */
ParameterizedTest(adsm_protocol_kind *protocol, fault, a_decoder_that_calls_writes_reads_cannot_loop, .timeout = 30) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = *protocol;
    cfg.block_size = 64 << 10;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "adsm_init: %s", adsm_last_error());
    adsm__rt.decode_as_read = 1;
    enum { N = 100000 };
    int *src = adsm_alloc(N * sizeof *src), *dst = adsm_alloc(N * sizeof *dst);
    cr_assert(src && dst, "%s", adsm_last_error());
    for (int i = 0; i < N; i++) src[i] = i; /* fresh: ReadOnly */
    cr_assert_eq(ADSM_CALL(scale_copy, adsm_grid_1d(N / 100, 100), dst, src, 3, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (int i = 0; i < N; i += 7) cr_assert_eq(dst[i], 3 * i, "dst[%d]", i);
    for (int i = 0; i < N; i++) src[i] = 2 * i; /* flushed at the call: ReadOnly again */
    cr_assert_eq(ADSM_CALL(scale_copy, adsm_grid_1d(N / 100, 100), dst, src, 1, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    dst[5] = -7; /* Invalid: a fetch, then the write */
    cr_assert_eq(ADSM_CALL(scale_copy, adsm_grid_1d(N / 100, 100), src, dst, 1, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (int i = 0; i < N; i += 7) cr_assert_eq(src[i], i == 5 ? -7 : 2 * i, "src[%d]", i);
    cr_assert_eq(src[5], -7);
    adsm_free(src);
    adsm_free(dst);
    adsm_shutdown();
}
