/* tests/test_limits.c -- adsm under the kernel's per-process limits on file descriptors and
 * locked memory (the mapping-count limit, vm.max_map_count, is provoked in test_objects.c).
 *
 * adsm keeps a fixed number of descriptors (the emulated device's memfd and socket, and
 * /proc/self/mem) whatever the number of objects, and locks no memory. So: with no descriptor
 * left, initialisation fails with a clear error and leaks nothing, and succeeds once descriptors
 * are free again; once initialised, running out of descriptors changes nothing for objects,
 * kernels and I/O on descriptors already open; without /proc/self/mem the fetch path falls back
 * to opening the pages; RLIMIT_MEMLOCK 0 changes nothing; a program that locks its future
 * mappings (mlockall) gets no emulated device memory filled, or under a locked-memory limit a
 * clear refusal; a file-size limit (ulimit -f) below the emulated device's memory file is named.
 * Each Test is its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/child.h"

ADSM_KERNEL(lim_fill, ADSM_OUT(int, c), ADSM_IN(int, a), ADSM_VALUE(size_t, n));
void lim_fill(adsm_grid g, int *c, const int *a, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] * 2 + 1;
    }
}

static adsm_config emu_config(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 2;
    return cfg;
}

static adsm_result init_emu(void) {
    adsm_config cfg = emu_config();
    return adsm_init(&cfg);
}

/* ---- a process under limits ----------------------------------------------------------------- */
/* What run_in_child does in a forked child (the limits are per process): `prepare` sets them up,
 * then adsm_init(&cfg), then `check` looks at the process (both get the pipe to write why they
 * failed), then a kernel runs. */
typedef struct child_plan {
    int (*prepare)(const void *arg); /* 0 or failure */
    const void *arg;
    adsm_config cfg;
    int (*check)(int pipe_fd); /* 0 or failure; NULL: nothing to check */
} child_plan;

static const child_plan *plan_now; /* what the next child runs */

static void run_plan(int fd) {
    const child_plan *plan = plan_now;
    if (plan->prepare(plan->arg) != 0) _exit(3);
    adsm_config cfg = plan->cfg;
    if (adsm_init(&cfg) != ADSM_OK) {
        const char *m = adsm_last_error();
        if (write(fd, m, strlen(m)) < 0) _exit(4);
        _exit(1);
    }
    if (plan->check && plan->check(fd) != 0) _exit(2);
    enum { N = 100000 };
    int *a = adsm_alloc(N * sizeof(int)), *c = adsm_alloc(N * sizeof(int));
    if (!a || !c) _exit(5);
    for (int i = 0; i < N; i++) a[i] = i;
    if (ADSM_CALL(lim_fill, adsm_grid_1d(N / 100, 100), c, a, (size_t)N) != ADSM_OK || adsm_sync() != ADSM_OK)
        _exit(6);
    _exit(c[N - 1] == 2 * (N - 1) + 1 ? 0 : 7);
}

/* Exit 0: it all worked; 1: adsm_init failed (its message on the pipe, returned in msg); 2: the
 * check failed (its text in msg); 3: prepare failed; above: the objects or the kernel failed. */
static int run_in_child(const child_plan *plan, char *msg, size_t msg_size) {
    plan_now = plan;
    int status = run_child(run_plan, msg, msg_size);
    cr_assert(WIFEXITED(status), "the child died: status %d", status);
    return WEXITSTATUS(status);
}

static int open_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* The lowest free descriptor number is the count of descriptors only if they are dense: make the
 * limit "no new descriptor" by counting the highest one in use instead. */
static int highest_fd(void) {
    int top = -1;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int self = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd != self && fd > top) top = fd;
    }
    closedir(d);
    return top;
}

static void set_nofile(rlim_t soft) {
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = soft;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "setrlimit: %s", strerror(errno));
}

/* n ints through a kernel, with CPU writes before and CPU reads after; all checked. */
static void round_trip(size_t n) {
    int *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c);
    cr_assert(a && c, "adsm_alloc: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) a[i] = (int)i;
    cr_assert_eq(ADSM_CALL(lim_fill, adsm_grid_1d((uint32_t)((n + 63) / 64), 64), c, a, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(c[i], 2 * (int)i + 1, "c[%zu] = %d", i, c[i]);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
}

/* The peak resident memory of this process so far (VmHWM), in KiB. */
static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* An object larger than the whole device is refused before its bookkeeping is made: with 4 KiB
 * blocks that is 48 bytes a block, so 60 GiB asked of a 256 MiB device cost about 700 MiB of
 * memory and a second before the refusal (and a request a terabyte device let through could
 * bring the OOM killer). */
Test(limits, an_object_larger_than_the_device_is_refused_before_its_bookkeeping) {
    cr_assert_eq(init_emu(), ADSM_OK, "%s", adsm_last_error());
    long before = peak_rss_kib();
    cr_assert_gt(before, 0);
    cr_assert_null(adsm_alloc((size_t)60 << 30));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    long grew = peak_rss_kib() - before;
    cr_assert_lt(grew, 64 << 10, "the refused request took %ld KiB first", grew);
    round_trip(10000);
    adsm_shutdown();
}

Test(limits, no_descriptor_left_at_init) {
    int before = open_fds();
    set_nofile((rlim_t)highest_fd() + 1);
    int fillers[64], nfill = 0; /* take the free numbers below the limit too */
    while (nfill < 64 && (fillers[nfill] = dup(0)) >= 0) nfill++;
    cr_assert_eq(errno, EMFILE);
    adsm_result r = init_emu();
    while (nfill > 0) close(fillers[--nfill]);
    cr_assert_neq(r, ADSM_OK, "adsm_init cannot work without a descriptor");
    cr_assert_eq(r, ADSM_ERROR_BACKEND_UNAVAILABLE, "%d: %s", r, adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "Too many open files") != NULL, "%s", adsm_last_error());
    set_nofile(1024);
    cr_assert_eq(open_fds(), before, "the failed init leaked descriptors");
    cr_assert_eq(init_emu(), ADSM_OK, "%s", adsm_last_error());
    round_trip(10000);
    adsm_shutdown();
    cr_assert_eq(open_fds(), before, "shutdown left descriptors open");
}

/* Where /proc/self/mem cannot be opened (no descriptor left for it, no /proc mounted), fetches
 * into protected pages move whole pages instead (copy.h); results stay right. /proc/self/mem is
 * opened first at init, so a descriptor limit cannot take it away alone: the test closes it. */
Test(limits, without_proc_self_mem) {
    cr_assert_eq(init_emu(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_geq(adsm__rt.fill.procmem.fd, 0);
    close(adsm__rt.fill.procmem.fd);
    adsm__rt.fill.procmem.fd = -1;
    round_trip(50000);
    adsm_shutdown();
}

Test(limits, descriptors_exhausted_after_init) {
    cr_assert_eq(init_emu(), ADSM_OK, "%s", adsm_last_error());
    char path[] = "/tmp/adsm_limits_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    unlink(path);
    set_nofile((rlim_t)highest_fd() + 1);
    int fillers[64], nfill = 0;
    while (nfill < 64 && (fillers[nfill] = dup(0)) >= 0) nfill++;
    cr_assert_eq(dup(0), -1, "the limit is in force");
    /* objects, kernels, faults: no descriptor per object */
    void *objects[500];
    for (int i = 0; i < 500; i++) cr_assert_not_null(objects[i] = adsm_alloc(8192), "%s", adsm_last_error());
    round_trip(20000);
    /* I/O on a descriptor that is already open */
    size_t n = 64 << 10;
    int *buf = adsm_alloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] = (int)(i * 7);
    cr_assert_eq(adsm_pwrite(fd, buf, n * sizeof *buf, 0), (ssize_t)(n * sizeof *buf));
    cr_assert_eq(adsm_memset(buf, 0, n * sizeof *buf), ADSM_OK);
    cr_assert_eq(adsm_pread(fd, buf, n * sizeof *buf, 0), (ssize_t)(n * sizeof *buf));
    for (size_t i = 0; i < n; i++) cr_assert_eq(buf[i], (int)(i * 7));
    for (int i = 0; i < 500; i++) cr_assert_eq(adsm_free(objects[i]), ADSM_OK);
    cr_assert_eq(adsm_free(buf), ADSM_OK);
    adsm_shutdown();
    while (nfill > 0) close(fillers[--nfill]);
    close(fd);
}

/* adsm locks no memory (the cuda backend's pinned buffers are the driver's, and fall back to
 * pageable ones: test_backend_cuda.c::pageable_fallback_when_pinning_fails). */
Test(limits, no_locked_memory) {
    struct rlimit rl = {0, 0};
    cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
    cr_assert_eq(init_emu(), ADSM_OK, "%s", adsm_last_error());
    round_trip(100000);
    adsm_shutdown();
}

/* Under AddressSanitizer its shadow memory alone is terabytes of address space: no limit leaves
 * room, and what is checked there is the clear refusal. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* ---- programs that lock their future mappings (mlockall with MCL_FUTURE) ---------------------- */
/* Kilobytes of a /proc/self/status field ("RssShmem"), -1 if absent. */
static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kib = -1;
    size_t len = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0 && line[len] == ':') kib = atol(line + len + 1);
    fclose(f);
    return kib;
}

/* Whether this process holds CAP_IPC_LOCK (locked memory unlimited whatever RLIMIT_MEMLOCK says),
 * and taking it out of the effective set, so that the limit binds even as root (0, or -1). */
static int has_ipc_lock(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    return syscall(SYS_capget, &h, d) == 0 && (d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32)));
}

static int drop_ipc_lock(void) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    return (int)syscall(SYS_capset, &h, d);
}

/* mlockall(MCL_FUTURE) with unlimited locked memory (*limited == 0: needs root: the limit raised,
 * or CAP_IPC_LOCK) or with a 64 KiB limit binding (*limited == 1); a smaller reservation (about
 * 2 GiB), so that a view filled by mistake fails the check instead of filling the machine (not
 * under ASan, whose shadow needs terabytes). */
static int lock_future_mappings(const void *arg) {
    int limited = *(const int *)arg;
    struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY}, low = {64 << 10, 64 << 10};
    struct rlimit as = {(rlim_t)6 << 30, (rlim_t)6 << 30};
    if (limited ? drop_ipc_lock() != 0 || setrlimit(RLIMIT_MEMLOCK, &low) != 0
                : setrlimit(RLIMIT_MEMLOCK, &rl) != 0 && !has_ipc_lock())
        return -1;
    if (!UNDER_ASAN && setrlimit(RLIMIT_AS, &as) != 0) return -1;
    return (int)syscall(SYS_mlockall, MCL_FUTURE); /* not mlockall(): ASan makes that a no-op */
}

/* The shared memory this process maps holds under 32 MiB resident. */
static int little_shared_memory_resident(int pipe_fd) {
    long shmem = status_kib("RssShmem");
    if (shmem >= 0 && shmem < 32 << 10) return 0;
    dprintf(pipe_fd, "%ld KiB of shared memory resident", shmem);
    return -1;
}

static int run_locking_future_mappings(int limited, char *msg, size_t msg_size) {
    child_plan plan = {lock_future_mappings, &limited, emu_config(), little_shared_memory_resident};
    return run_in_child(&plan, msg, msg_size);
}

/* Every mapping the program makes after mlockall(MCL_FUTURE) is locked and, when accessible,
 * filled at once: adsm's view of the whole emulated device memory filled the host's RAM (the
 * default 12 GiB device got the process OOM-killed). adsm maps it unlocked. Needs root (the
 * locked-memory limit raised to unlimited), as CI runs. */
Test(limits, locking_future_mappings_fills_no_device_memory, .timeout = 60) {
    char msg[512];
    int rc = run_locking_future_mappings(0, msg, sizeof msg);
    cr_assert_neq(rc, 3, "unlimited locked memory needs root (CAP_IPC_LOCK)");
    cr_assert_eq(rc, 0, "exit %d: %s", rc, msg);
}

/* With a locked-memory limit, the kernel counts adsm's address reservation (which holds no
 * memory) against it and refuses the mapping: adsm_init says so and what to change. */
Test(limits, locking_future_mappings_under_a_limit_says_what_to_change, .timeout = 60) {
    char msg[512];
    int rc = run_locking_future_mappings(1, msg, sizeof msg);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, msg);
    cr_assert(strstr(msg, "mlockall with MCL_FUTURE") != NULL, "message: %s", msg);
    cr_assert(strstr(msg, "ulimit -l") != NULL, "message: %s", msg);
}

/* ---- address-space limits (ulimit -v; issue 11, item 9) ------------------------------------ */
static int lower_address_limit(const void *arg) {
    struct rlimit rl = {*(const size_t *)arg, *(const size_t *)arg};
    return setrlimit(RLIMIT_AS, &rl);
}

/* In a forked child: RLIMIT_AS lowered, adsm initialised with the default emulated device size (or
 * `emu_memory`), a kernel run; run_in_child's exit codes. */
static int run_under_limit(size_t limit, size_t emu_memory, char *msg, size_t msg_size) {
    child_plan plan = {lower_address_limit, &limit, {0}, NULL};
    plan.cfg.backend = ADSM_BACKEND_EMU;
    plan.cfg.emu_memory = emu_memory;
    return run_in_child(&plan, msg, msg_size);
}


ParameterizedTestParameters(limits, default_device_fits_the_address_limit) {
    static size_t gib[] = {6, 8, 16, 32, 48, 64, 100};
    return cr_make_param_array(size_t, gib, sizeof gib / sizeof gib[0]);
}

/* With the default emulated device size, every limit from 6 GiB up works (the device shrinks). */
ParameterizedTest(size_t *gib, limits, default_device_fits_the_address_limit, .timeout = 60) {
    char msg[600];
    int rc = run_under_limit(*gib << 30, 0, msg, sizeof msg);
    if (UNDER_ASAN) {
        cr_assert_eq(rc, 1, "exit %d", rc);
        cr_assert(strstr(msg, "ulimit -v"), "%s", msg);
    } else {
        cr_assert_eq(rc, 0, "limit %zu GiB: exit %d: %s", *gib, rc, msg);
    }
}

/* An emulated device the program sized too large for the limit is refused with the remedy. */
Test(limits, sized_device_beyond_the_address_limit_says_what_to_lower, .timeout = 60) {
    char msg[600];
    int rc = run_under_limit((size_t)16 << 30, (size_t)32 << 30, msg, sizeof msg);
    cr_assert_eq(rc, 1, "exit %d", rc);
    cr_assert(strstr(msg, "ulimit -v"), "%s", msg);
    if (!UNDER_ASAN) cr_assert(strstr(msg, "lower ADSM_EMU_MEMORY"), "%s", msg);
}

/* ---- the file-size limit -------------------------------------------------------------------- */
static int lower_file_size_limit(const void *arg) {
    struct rlimit rl = {*(const size_t *)arg, *(const size_t *)arg};
    return setrlimit(RLIMIT_FSIZE, &rl);
}

/* The emulated device's memory is a sparse memory file spanning its address range. Under a
 * file-size limit (ulimit -f) below that, adsm_init says which limit to raise. Growing the file
 * past the limit sends SIGXFSZ, which used to end the process inside adsm_init without a word. */
Test(limits, a_file_size_limit_below_the_device_file_names_it, .timeout = 60) {
    size_t limit = (size_t)1 << 30;
    child_plan plan = {lower_file_size_limit, &limit, emu_config(), NULL};
    char msg[600];
    int rc = run_in_child(&plan, msg, sizeof msg);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, msg);
    cr_assert(strstr(msg, "ulimit -f"), "%s", msg);
}
