/* tests/test_protection.c -- the two fault engines (adsm_impl/protection.h): which one runs, and
 * that under each every CPU write is seen, whatever state its block came from (a fresh object,
 * a fetch by mremap or through /proc/self/mem, a flush, an eviction), and that the SIGBUS the
 * userfaultfd engine takes over still reaches the program for faults that are not adsm's. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "tests/protocol_common.h"
#include "tests/seccomp.h"

/* Whether this kernel has what the userfaultfd engine needs (Linux 6.4: write-protection of
 * untouched pages). Where it does, the engine must start: a refusal there is a bug. */
static int kernel_has_uffd_wp(void) {
    struct utsname u;
    unsigned major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2) return 0;
    return major > 6 || (major == 6 && minor >= 4);
}

static void init_engine(adsm_fault_engine_kind engine, adsm_protocol_kind protocol, size_t block_size) {
    test_fault_engine = engine;
    init(ADSM_BACKEND_EMU, protocol, block_size, 0);
}

/* ---- which engine ------------------------------------------------------------------------------ */

typedef struct engine_choice {
    adsm_fault_engine_kind engine;
    adsm_backend_kind backend;
    adsm_protocol_kind protocol;
    size_t block_size;
    int uffd; /* 1: userfaultfd must run (where the kernel has it) */
} engine_choice;

/* auto is mprotect; userfaultfd runs where asked for and something is tracked (not on the host
 * backend, not under batch, which protect nothing). */
ParameterizedTestParameters(protection, the_engine_that_runs) {
    static engine_choice cases[] = {
        {ADSM_FAULT_ENGINE_AUTO, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0},
        {ADSM_FAULT_ENGINE_AUTO, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 2 * MIB, 0},
        {ADSM_FAULT_ENGINE_MPROTECT, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0},
        {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 1},
        {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 2 * MIB, 1},
        {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, 4 * KIB, 0},
        {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_BACKEND_HOST, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0},
    };
    return cr_make_param_array(engine_choice, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(engine_choice *c, protection, the_engine_that_runs) {
    if (c->uffd && !kernel_has_uffd_wp()) return; /* an_asked_for_userfaultfd_starts_or_says_why */
    test_fault_engine = c->engine;
    init(c->backend, c->protocol, c->block_size, 0);
    cr_assert_str_eq(adsm_fault_engine_name(), c->uffd ? "userfaultfd" : "mprotect", "engine %d, %s, %s, block %zu",
                     (int)c->engine, adsm_backend_name(), adsm_protocol_name(), c->block_size);
    adsm_shutdown();
}

/* A small emu configuration with nothing taken from the environment but ADSM_FAULT_ENGINE. */
static adsm_config small_emu_config(size_t block_size) {
    clear_adsm_env();
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.block_size = block_size;
    cfg.emu_memory = 64 * MIB;
    return cfg;
}

Test(protection, the_environment_chooses_the_engine) {
    adsm_config cfg = small_emu_config(4 * KIB);
    if (kernel_has_uffd_wp()) {
        setenv("ADSM_FAULT_ENGINE", "uffd", 1);
        cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
        cr_assert_str_eq(adsm_fault_engine_name(), "userfaultfd");
        adsm_shutdown();
        cfg.fault_engine = ADSM_FAULT_ENGINE_MPROTECT; /* the program's choice wins */
        cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
        cr_assert_str_eq(adsm_fault_engine_name(), "mprotect");
        adsm_shutdown();
        cfg.fault_engine = ADSM_FAULT_ENGINE_DEFAULT;
    }
    setenv("ADSM_FAULT_ENGINE", "sometimes", 1);
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_FAULT_ENGINE") != NULL, "message: %s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "userfaultfd") != NULL, "message: %s", adsm_last_error());
    unsetenv("ADSM_FAULT_ENGINE");
}

Test(protection, an_asked_for_userfaultfd_starts_or_says_why) {
    adsm_config cfg = small_emu_config(2 * MIB);
    cfg.fault_engine = ADSM_FAULT_ENGINE_USERFAULTFD;
    adsm_result r = adsm_init(&cfg);
    if (kernel_has_uffd_wp()) {
        cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
        cr_assert_str_eq(adsm_fault_engine_name(), "userfaultfd");
        adsm_shutdown();
    } else {
        cr_assert_eq(r, ADSM_ERROR_INVALID_CONFIG);
        cr_assert(strstr(adsm_last_error(), "ADSM_FAULT_ENGINE=userfaultfd") != NULL, "%s", adsm_last_error());
    }
}

/* userfaultfd(2) failing for want of a descriptor (EMFILE) is told as such, with the limit to
 * raise; it used to be blamed on a container's seccomp profile. */
Test(protection, a_userfaultfd_without_descriptors_names_the_limit) {
    refuse_system_call(__NR_userfaultfd, EMFILE);
    adsm_config cfg = small_emu_config(2 * MIB);
    cfg.fault_engine = ADSM_FAULT_ENGINE_USERFAULTFD;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "no file descriptor free") && strstr(adsm_last_error(), "ulimit -n"), "%s",
              adsm_last_error());
    cr_assert_null(strstr(adsm_last_error(), "seccomp"), "%s", adsm_last_error());
}

/* Container seccomp profiles refuse userfaultfd(2) (EPERM): asking for the engine there fails
 * with a message that says so and names the way out, and the default engine still runs. */
Test(protection, a_refused_userfaultfd_says_why_and_the_default_still_runs) {
    refuse_system_call(__NR_userfaultfd, EPERM);
    adsm_config cfg = small_emu_config(2 * MIB);
    cfg.fault_engine = ADSM_FAULT_ENGINE_USERFAULTFD;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_FAULT_ENGINE=userfaultfd: userfaultfd(2) was refused") != NULL, "%s",
              adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "unset for mprotect") != NULL, "%s", adsm_last_error());
    cfg.fault_engine = ADSM_FAULT_ENGINE_AUTO;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_fault_engine_name(), "mprotect");
    int32_t *p = adsm_alloc(4096);
    cr_assert_not_null(p);
    p[7] = 42;
    CALL_OK(k_fill, grid_for(8), p, 8, 100); /* the kernel overwrites, the CPU reads it back */
    sync_ok();
    cr_assert_eq(p[7], 107);
    adsm_free(p);
    adsm_shutdown();
}

/* ---- every write is seen, under both engines ---------------------------------------------------- */

typedef struct engine_case {
    adsm_fault_engine_kind engine;
    adsm_protocol_kind protocol;
    size_t block_size;
} engine_case;

static engine_case engine_cases[] = {
    {ADSM_FAULT_ENGINE_MPROTECT, ADSM_PROTOCOL_ROLLING, 4 * KIB},
    {ADSM_FAULT_ENGINE_MPROTECT, ADSM_PROTOCOL_LAZY, 2 * MIB},
    {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 4 * KIB},
    {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 64 * KIB},
    {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 2 * MIB},
    {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_LAZY, 4 * KIB},
    {ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_LAZY, 2 * MIB},
};

/* userfaultfd cases need a kernel that has it; the others run everywhere. */
static int runnable(const engine_case *c) {
    return c->engine != ADSM_FAULT_ENGINE_USERFAULTFD || kernel_has_uffd_wp();
}

static void init_case(const engine_case *c) {
    init_engine(c->engine, c->protocol, c->block_size);
    cr_assert_str_eq(adsm_fault_engine_name(), c->engine == ADSM_FAULT_ENGINE_USERFAULTFD ? "userfaultfd" : "mprotect");
}

/* x, the object the tests write, and what a kernel sums it into: sum = x + zero, so the sum
 * shows what the device saw of x. */
typedef struct operands {
    int32_t *x, *zero, *sum;
    size_t n;
} operands;

static operands operands_alloc(size_t n) {
    operands o = {alloc(n * sizeof(int32_t)), alloc(n * sizeof(int32_t)), alloc(n * sizeof(int32_t)), n};
    return o;
}

/* The device's view of x, brought into sum. */
static void sum_on_device(const operands *o) {
    CALL_OK(k_add, grid_for(o->n), o->sum, o->x, o->zero, o->n);
    sync_ok();
}

static void operands_free(const operands *o) {
    adsm_free(o->x);
    adsm_free(o->zero);
    adsm_free(o->sum);
    adsm_shutdown();
}

ParameterizedTestParameters(protection, every_write_reaches_the_device) {
    return cr_make_param_array(engine_case, engine_cases, sizeof engine_cases / sizeof engine_cases[0]);
}

/* The object goes through every state change; after each, the CPU writes one element in every
 * 1 KiB and a kernel adds it to a sum the CPU then checks: a write the engine let through without
 * a fault would never reach the device, and the sum would miss it. */
ParameterizedTest(engine_case *c, protection, every_write_reaches_the_device) {
    if (!runnable(c)) return; /* asserted by an_asked_for_userfaultfd_starts_or_says_why */
    init_case(c);
    const size_t n = 3 * MIB / sizeof(int32_t) + 777; /* several huge pages and a ragged end */
    operands o = operands_alloc(n);
    int32_t *x = o.x, *sum = o.sum;
    const size_t stride = 256;
    /* 1: a fresh object (ReadOnly from the start) */
    for (size_t i = 0; i < n; i += stride) wr(&x[i], (int32_t)i);
    expect_all(x, stride * sizeof *x, 'D');
    sum_on_device(&o); /* flushes x: Dirty -> ReadOnly */
    for (size_t i = 0; i < n; i += stride) cr_assert_eq(rd(&sum[i]), (int32_t)i, "fresh: sum[%zu]", i);
    /* 2: written again after the flush made it ReadOnly */
    for (size_t i = 0; i < n; i += stride) wr(&x[i], 2 * (int32_t)i);
    sum_on_device(&o);
    for (size_t i = 0; i < n; i += stride) cr_assert_eq(rd(&sum[i]), 2 * (int32_t)i, "after a flush: sum[%zu]", i);
    /* 3: a kernel writes x (ReadOnly -> Invalid), the CPU reads it back (a fetch: Invalid ->
     * ReadOnly), then writes it */
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    for (size_t i = 0; i < n; i += stride) cr_assert_eq(rd(&x[i]), 2 * (int32_t)i + 1, "fetched x[%zu]", i);
    for (size_t i = 0; i < n; i += stride) wr(&x[i], 3 * (int32_t)i);
    sum_on_device(&o);
    for (size_t i = 0; i < n; i += stride) cr_assert_eq(rd(&sum[i]), 3 * (int32_t)i, "after a fetch: sum[%zu]", i);
    /* 4: written while Invalid (a write fault that fetches) */
    CALL_OK(k_incr, grid_for(n), x, n);
    sync_ok();
    for (size_t i = 0; i < n; i += stride) wr(&x[i], 4 * (int32_t)i);
    sum_on_device(&o);
    for (size_t i = 0; i < n; i++) { /* the others were incremented twice from zero */
        int32_t want = i % stride == 0 ? 4 * (int32_t)i : 2;
        cr_assert_eq(rd(&sum[i]), want, "after a write to Invalid data: sum[%zu]", i);
    }
    operands_free(&o);
}

ParameterizedTestParameters(protection, writes_after_both_kinds_of_fetch_are_seen) {
    return cr_make_param_array(engine_case, engine_cases, sizeof engine_cases / sizeof engine_cases[0]);
}

/* A fetch that moves staging pages over the object (mremap: whole 2 MiB pieces) replaces its
 * mapping; one through /proc/self/mem (smaller pieces) writes into it. Both kinds of page must
 * be write-protected again when the data is ReadOnly. */
ParameterizedTest(engine_case *c, protection, writes_after_both_kinds_of_fetch_are_seen) {
    if (!runnable(c)) return;
    init_case(c);
    const size_t n = 4 * MIB / sizeof(int32_t) + 1024; /* two whole huge pages and a 4 KiB tail */
    operands o = operands_alloc(n);
    int32_t *x = o.x, *sum = o.sum;
    CALL_OK(k_fill, grid_for(n), x, n, 5);
    sync_ok();
    reset();
    int64_t seen = 0;
    for (size_t i = 0; i < n; i++) seen += rd(&x[i]); /* read faults: every block fetched ReadOnly */
    adsm_stats s = stats();
    cr_assert_eq(s.d2h_bytes, n * sizeof *x);
    if (c->block_size == 2 * MIB || c->protocol == ADSM_PROTOCOL_LAZY)
        cr_assert_gt(s.d2h_moved_bytes, 0, "no fetch moved whole huge pages");
    cr_assert_gt(s.d2h_forced_bytes, 0, "no fetch went through /proc/self/mem");
    cr_assert_eq(seen, (int64_t)n * 5 + (int64_t)n * (int64_t)(n - 1) / 2);
    expect_all(x, n * sizeof *x, 'R');
    for (size_t i = 0; i < n; i += 1024) wr(&x[i], -(int32_t)i); /* every 4 KiB, both kinds of page */
    cr_assert_gt(stats().write_faults, 0);
    sum_on_device(&o);
    for (size_t i = 0; i < n; i++) {
        int32_t want = i % 1024 == 0 ? -(int32_t)i : 5 + (int32_t)i;
        cr_assert_eq(rd(&sum[i]), want, "sum[%zu]", i);
    }
    operands_free(&o);
}

/* Rolling evicts the oldest Dirty blocks while the CPU goes on writing (Dirty -> ReadOnly with
 * the copy in flight); a block written again after its eviction must fault and be sent again. */
ParameterizedTestParameters(protection, writes_after_an_eviction_are_seen) {
    return cr_make_param_array(engine_case, engine_cases, sizeof engine_cases / sizeof engine_cases[0]);
}

ParameterizedTest(engine_case *c, protection, writes_after_an_eviction_are_seen) {
    if (!runnable(c) || c->protocol != ADSM_PROTOCOL_ROLLING) return; /* lazy does not evict */
    test_fault_engine = c->engine;
    init(ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, c->block_size, 2);
    const size_t per_block = c->block_size / sizeof(int32_t), blocks = 8;
    operands o = operands_alloc(per_block * blocks);
    int32_t *x = o.x, *sum = o.sum;
    for (int round = 1; round <= 3; round++)
        for (size_t b = 0; b < blocks; b++) wr(&x[b * per_block + 7], round * 100 + (int32_t)b);
    cr_assert_gt(stats().evictions, 0, "rolling size 2 with 8 blocks written: nothing was evicted");
    sum_on_device(&o);
    for (size_t b = 0; b < blocks; b++)
        cr_assert_eq(rd(&sum[b * per_block + 7]), 300 + (int32_t)b, "block %zu lost its last write", b);
    operands_free(&o);
}

/* ---- SIGBUS belongs to the program too ---------------------------------------------------------- */

static sigjmp_buf bus_jump;
static volatile sig_atomic_t program_bus_errors;

static void program_bus_handler(int sig) {
    (void)sig;
    program_bus_errors++;
    siglongjmp(bus_jump, 1);
}

/* A real bus error: touching a file mapping past the end of its file. */
static int touch_past_end_of_file(void) {
    char path[] = "/tmp/adsm_bus_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    volatile char *m = (volatile char *)mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq((void *)m, MAP_FAILED);
    int faulted = 0;
    if (sigsetjmp(bus_jump, 1) == 0) m[5000] = 1; /* second page: past the end of the file */
    else faulted = 1;
    munmap((void *)m, 8192);
    close(fd);
    return faulted;
}

Test(protection, the_programs_sigbus_handler_gets_its_own_bus_errors) {
    if (!kernel_has_uffd_wp()) return; /* the mprotect engine takes no SIGBUS */
    init_engine(ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 4 * KIB);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = program_bus_handler;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGBUS, &sa, &old), 0); /* installed after adsm's */
    int32_t *x = alloc(64 * KIB);
    wr(&x[10], 1); /* adsm's SIGBUS, resolved by adsm */
    cr_assert_eq(program_bus_errors, 0, "the program's handler got adsm's write fault");
    cr_assert(touch_past_end_of_file(), "the bus error never came back");
    cr_assert_eq(program_bus_errors, 1, "the program's handler did not get its bus error");
    struct sigaction now;
    cr_assert_eq(sigaction(SIGBUS, NULL, &now), 0);
    cr_assert(now.sa_handler == program_bus_handler, "sigaction did not read back the program's handler");
    wr(&x[5000], 2); /* and shared memory still works */
    EXPECT_STATE(&x[5000], 'D');
    adsm_free(x);
    adsm_shutdown();
}

static void *write_with_every_signal_blocked(void *p) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    wr((int32_t *)p, 42);
    return NULL;
}

Test(protection, a_thread_that_blocks_every_signal_still_writes) {
    if (!kernel_has_uffd_wp()) return;
    init_engine(ADSM_FAULT_ENGINE_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 4 * KIB);
    int32_t *x = alloc(64 * KIB);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, write_with_every_signal_blocked, &x[3000]), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    EXPECT_STATE(&x[3000], 'D');
    cr_assert_eq(rd(&x[3000]), 42);
    adsm_free(x);
    adsm_shutdown();
}

/* ---- a program that closes adsm's userfaultfd ---------------------------------------------------- */

/* How the program takes the descriptor from adsm. */
enum { CLOSED, ANOTHER_FILE, ANOTHER_USERFAULTFD };

typedef struct lost_case {
    int how;
    adsm_protocol_kind protocol;
    size_t block_size;
    int read_first; /* 1: the first thing after the loss is a read fault, not a kernel call */
} lost_case;

/* The descriptor whose link reads anon_inode:[userfaultfd], or -1. */
static int find_userfaultfd(void) {
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int found = -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], link[128];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strstr(link, "userfaultfd") && atoi(e->d_name) != dirfd(d)) found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

static void take_descriptor(int how, int fd) {
    int other = -1;
    if (how == ANOTHER_FILE) other = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (how == ANOTHER_USERFAULTFD) { /* the program's own, with nothing of adsm's registered */
        other = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
        struct uffdio_api api = {.api = UFFD_API};
        cr_assert_eq(ioctl(other, UFFDIO_API, &api), 0);
    }
    if (how == CLOSED) cr_assert_eq(close(fd), 0);
    else cr_assert_eq(dup2(other, fd), fd, "dup2: %s", strerror(errno));
    if (other >= 0) close(other);
}

/* How many pages of [p, p + len) are registered with the userfaultfd fd (writing their
 * protection through it works): adsm must never register its memory with the program's. */
static size_t pages_registered_with(int fd, const void *p, size_t len) {
    size_t pages = 0;
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095; a < (uintptr_t)p + len; a += 4096) {
        struct uffdio_writeprotect wp = {.range = {.start = a, .len = 4096}, .mode = 0};
        pages += ioctl(fd, UFFDIO_WRITEPROTECT, &wp) == 0;
    }
    return pages;
}

ParameterizedTestParameters(protection, a_closed_userfaultfd_loses_no_write) {
    static lost_case cases[] = {
        {CLOSED, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0},       {CLOSED, ADSM_PROTOCOL_ROLLING, 4 * KIB, 1},
        {CLOSED, ADSM_PROTOCOL_LAZY, 2 * MIB, 0},          {CLOSED, ADSM_PROTOCOL_LAZY, 2 * MIB, 1},
        {ANOTHER_FILE, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0}, {ANOTHER_FILE, ADSM_PROTOCOL_LAZY, 4 * KIB, 1},
        {ANOTHER_USERFAULTFD, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0},
        {ANOTHER_USERFAULTFD, ADSM_PROTOCOL_LAZY, 2 * MIB, 1},
    };
    return cr_make_param_array(lost_case, cases, sizeof cases / sizeof cases[0]);
}

/* Closing the userfaultfd drops every write-protection in the kernel, so writes to ReadOnly data
 * stop faulting. adsm notices at the next kernel call or protection change and goes on with
 * mprotect, sending the ReadOnly data again: x, written after the loss while ReadOnly, reaches
 * the device, though sum (the kernel's output) stays Invalid and needs no protection change that
 * would show the loss; later writes are tracked by mprotect. */
ParameterizedTest(lost_case *c, protection, a_closed_userfaultfd_loses_no_write, .timeout = 60) {
    if (!kernel_has_uffd_wp()) return;
    init_engine(ADSM_FAULT_ENGINE_USERFAULTFD, c->protocol, c->block_size);
    const size_t n = 3 * MIB / sizeof(int32_t) + 99;
    operands o = operands_alloc(n);
    int32_t *x = o.x, *sum = o.sum, *zero = o.zero;
    for (size_t i = 0; i < n; i++) wr(&x[i], 1);
    CALL_OK(k_add, grid_for(n), sum, x, zero, n); /* x flushed (ReadOnly), sum Invalid */
    sync_ok();
    cr_assert_eq(rd(&zero[n - 1]), 0); /* zero stays ReadOnly */
    int fd = find_userfaultfd();
    cr_assert_geq(fd, 0, "no userfaultfd among the descriptors");
    take_descriptor(c->how, fd);
    if (c->read_first) cr_assert_eq(rd(&sum[n / 2]), 1, "a fetch after the loss"); /* the fault sees it */
    if (c->how == ANOTHER_USERFAULTFD) cr_assert_eq(pages_registered_with(fd, sum, n * sizeof *sum), 0);
    for (size_t i = 0; i < n; i += 100) x[i] = 2; /* ReadOnly, and no longer write-protected */
    sum_on_device(&o);
    for (size_t i = 0; i < n; i++) cr_assert_eq(rd(&sum[i]), i % 100 == 0 ? 2 : 1, "sum[%zu]", i);
    cr_assert_str_eq(adsm_fault_engine_name(), "mprotect");
    for (size_t i = 0; i < n; i += 1000) wr(&x[i], 3); /* tracked again, by mprotect */
    expect_all(x, 4 * KIB, 'D');
    sum_on_device(&o);
    for (size_t i = 0; i < n; i += 100) cr_assert_eq(rd(&sum[i]), i % 1000 == 0 ? 3 : 2, "sum[%zu], later", i);
    for (size_t i = 0; i < n; i += 100) wr(&sum[i], -1); /* fetched after the loss: nobody else's to stop */
    CALL_OK(k_incr, grid_for(n), sum, n);
    for (size_t i = 0; i < n; i += 100) cr_assert_eq(rd(&sum[i]), 0, "sum[%zu], written by the CPU", i);
    if (c->how == CLOSED) cr_assert_eq(fcntl(fd, F_GETFD), -1, "adsm opened its descriptor again");
    operands_free(&o);
}
