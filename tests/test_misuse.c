#define ADSM_IMPLEMENTATION
#include "adsm.h"

/* tests/test_misuse.c -- misuse of every public call: NULL and foreign pointers, sizes that
 * overflow or exceed the device, malformed kernel descriptors, frees and shutdowns while a kernel
 * is in flight, calls after adsm_shutdown, bad configuration. Each test asserts the exact result
 * code (and a message where a call returns a pointer), then that the runtime still works: an
 * allocation, a kernel call, a sync and correct data, with the live object count back where it
 * was. docs/misuse.md is the table of these cases; cases already tested elsewhere (test_errors,
 * test_config, test_explicit, test_kernel, test_safe, test_io) are referenced there, not repeated
 * here. Emu backend unless stated; each test is its own process. */

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static const char *const all_vars[] = {"ADSM_BACKEND",      "ADSM_PROTOCOL",     "ADSM_BLOCK_SIZE",
                                       "ADSM_ROLLING_SIZE", "ADSM_ROLLING_STEP", "ADSM_EMU_MEMORY",
                                       "ADSM_EMU_WORKERS",  "ADSM_LOG",          "ADSM_BLOCK_EXACT",
                                       "ADSM_EMU_DEVICES",  "ADSM_WRITE_THROUGH", "ADSM_DROP_REPLICAS"};

/* no ADSM_* variable from the caller: implicit initialisation means defaults */
static void clean_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++) unsetenv(all_vars[i]);
}

/* one timeout for the suite: a test that overrides the suite's timeout makes Criterion 2.4's runner
 * leak 48 bytes, which fails the run under LeakSanitizer */
TestSuite(misuse, .init = clean_env, .timeout = 120);

/* ---- kernels ---------------------------------------------------------------------------------- */

ADSM_KERNEL(add_one, ADSM_OUT(int, dst), ADSM_IN(int, src), ADSM_VALUE(size_t, n));

void add_one(adsm_grid g, int *dst, const int *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i] + 1;
    }
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for the program and the emu device process */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Every thread spins until `until` (CLOCK_MONOTONIC ns), then writes victim[i] and, in `log`, its
 * result (src[i] + 1) and the time it finished. */
ADSM_KERNEL(slow_stamp, ADSM_OUT(int, victim), ADSM_IN(int, src), ADSM_OUT(long long, log),
            ADSM_VALUE(long long, until), ADSM_VALUE(size_t, n));

void slow_stamp(adsm_grid g, int *victim, const int *src, long long *log, long long until, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= n) continue;
        while (now_ns() < until) {
        }
        victim[i] = src[i] * 2;
        log[2 * i] = src[i] + 1;
        log[2 * i + 1] = now_ns();
    }
}

/* a by-value parameter larger than the emu backend's 4 KiB argument block */
typedef struct big_value {
    unsigned char bytes[5000];
} big_value;

ADSM_KERNEL(take_big, ADSM_OUT(int, dst), ADSM_VALUE(big_value, v));

void take_big(adsm_grid g, int *dst, big_value v) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < 16) dst[i] = v.bytes[i * 300];
    }
}

/* ---- hand-built descriptors (static storage: on emu the device process, forked at adsm_init,
 * reads the descriptor at the same address) ----------------------------------------------------- */

typedef struct fill_args {
    int *out;
    size_t n;
} fill_args;

static void fill_entry(adsm_grid g, const void *p) {
    const fill_args *a = (const fill_args *)p;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < a->n) a->out[i] = 7;
    }
}

static void body_marker(void) {}

#define OUT_PARAM {"out", ADSM_ACCESS_OUT, offsetof(fill_args, out), sizeof(int *)}
#define N_PARAM {"n", ADSM_ACCESS_VALUE, offsetof(fill_args, n), sizeof(size_t)}

static const adsm_param_desc good_params[2] = {OUT_PARAM, N_PARAM};
static const adsm_param_desc seventeen_params[17] = {OUT_PARAM, N_PARAM, N_PARAM, N_PARAM, N_PARAM, N_PARAM,
                                                     N_PARAM,   N_PARAM, N_PARAM, N_PARAM, N_PARAM, N_PARAM,
                                                     N_PARAM,   N_PARAM, N_PARAM, N_PARAM, N_PARAM};
static const adsm_param_desc past_end_params[2] = {OUT_PARAM, {"n", ADSM_ACCESS_VALUE, sizeof(fill_args), 8}};
static const adsm_param_desc straddling_params[2] = {OUT_PARAM, {"n", ADSM_ACCESS_VALUE, sizeof(fill_args) - 4, 8}};
static const adsm_param_desc bad_access_params[2] = {{"out", (adsm_access)9, 0, sizeof(int *)}, N_PARAM};
static const adsm_param_desc short_pointer_params[2] = {{"out", ADSM_ACCESS_OUT, 0, 4}, N_PARAM};
/* offset + size wraps around to 7 */
static const adsm_param_desc wrapping_params[2] = {{"out", ADSM_ACCESS_IN, SIZE_MAX, 8}, N_PARAM};

#define DESC(name, nparams, params, entry) {name, nparams, sizeof(fill_args), params, entry, body_marker, NULL, NULL}

static const adsm_kernel_desc good_desc = DESC("hand_fill", 2, good_params, fill_entry);

static const struct {
    const char *what;
    adsm_kernel_desc desc;
} malformed[] = {
    {"nparams 0", DESC("k", 0, good_params, fill_entry)},
    {"nparams 17", DESC("k", 17, seventeen_params, fill_entry)},
    {"NULL name", DESC(NULL, 2, good_params, fill_entry)},
    {"NULL entry", DESC("k", 2, good_params, NULL)},
    {"NULL params", DESC("k", 2, NULL, fill_entry)},
    {"offset at args_size", DESC("k", 2, past_end_params, fill_entry)},
    {"parameter straddles args_size", DESC("k", 2, straddling_params, fill_entry)},
    {"access 9", DESC("k", 2, bad_access_params, fill_entry)},
    {"pointer of 4 bytes", DESC("k", 2, short_pointer_params, fill_entry)},
};

static const adsm_kernel_desc wrapping_desc = DESC("k", 2, wrapping_params, fill_entry);

/* ---- helpers -------------------------------------------------------------------------------- */

static void start_full(adsm_backend_kind backend, adsm_protocol_kind protocol, size_t emu_memory) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = backend;
    cfg.protocol = protocol;
    cfg.emu_memory = emu_memory;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
}

static void start(void) { start_full(ADSM_BACKEND_EMU, ADSM_PROTOCOL_DEFAULT, 64 * MiB); }

static adsm_stats stats(void) {
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    return s;
}

static uint64_t live_objects(void) { return stats().objects; }

/* the failure left its code and a message naming what went wrong */
static void expect_failure(adsm_result want, const char *needle, const char *what) {
    const char *m = adsm_last_error();
    cr_assert_eq(adsm_last_result(), want, "%s: adsm_last_result() %d, want %d (%s)", what, adsm_last_result(), want,
                 m);
    cr_assert(m && m[0], "%s: empty message", what);
    if (needle) cr_assert(strstr(m, needle) != NULL, "%s: message '%s' lacks '%s'", what, m, needle);
}

/* An allocation, a kernel call, a sync and correct data, then the live object count back. */
static void check_usable(void) {
    const size_t n = 5000;
    uint64_t before = live_objects();
    int *src = adsm_alloc(n * sizeof *src), *dst = adsm_alloc(n * sizeof *dst);
    cr_assert(src && dst, "alloc: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) src[i] = (int)i * 3;
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), dst, src, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += dst[i] != (int)i * 3 + 1;
    cr_assert_eq(wrong, 0, "%zu of %zu results wrong", wrong, n);
    cr_assert_eq(adsm_free(src), ADSM_OK);
    cr_assert_eq(adsm_free(dst), ADSM_OK);
    cr_assert_eq(live_objects(), before, "objects leaked");
}

static char *temp_file(const char *content, size_t n) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/adsm_misuse_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
    cr_assert_eq(write(fd, content, n), (ssize_t)n);
    close(fd);
    return path;
}

/* ---- sizes ------------------------------------------------------------------------------------ */

/* Above SIZE_MAX / 2 a size is an overflow (INVALID_VALUE); below it, larger than the address
 * range adsm reserves (64 GiB here) is out of device memory. */
Test(misuse, alloc_sizes_that_overflow) {
    start();
    static const size_t invalid[] = {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2 + 1};
    static const size_t too_big[] = {SIZE_MAX / 2, (size_t)1 << 40};
    for (int safe = 0; safe < 2; safe++) {
        void *(*alloc)(size_t) = safe ? adsm_safe_alloc : adsm_alloc;
        for (size_t k = 0; k < 3; k++) {
            cr_assert_null(alloc(invalid[k]), "safe=%d size %zu", safe, invalid[k]);
            expect_failure(ADSM_ERROR_INVALID_VALUE, "larger than", "overflowing size");
        }
        for (size_t k = 0; k < 2; k++) {
            cr_assert_null(alloc(too_big[k]), "safe=%d size %zu", safe, too_big[k]);
            expect_failure(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "larger than", "size past the reservation");
        }
    }
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

/* adsm_dev_alloc reports every too-large size as DEVICE_OUT_OF_MEMORY (adsm_alloc says
 * INVALID_VALUE above SIZE_MAX / 2); refusals reserve nothing: the whole device still fits. */
Test(misuse, dev_alloc_sizes_that_overflow) {
    start(); /* 64 MiB device */
    static const size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, 64 * MiB + 1};
    /* sizes no allocation can have are invalid values (as for adsm_alloc); a size the device
     * could hold but has no room for is out of device memory */
    static const adsm_result want[] = {ADSM_ERROR_INVALID_VALUE, ADSM_ERROR_INVALID_VALUE,
                                       ADSM_ERROR_DEVICE_OUT_OF_MEMORY};
    for (size_t k = 0; k < 3; k++) {
        cr_assert_null(adsm_dev_alloc(sizes[k]), "size %zu", sizes[k]);
        expect_failure(want[k], "adsm_dev_alloc", "adsm_dev_alloc");
    }
    void *all = adsm_dev_alloc(64 * MiB);
    cr_assert_not_null(all, "the whole device after the refusals: %s", adsm_last_error());
    cr_assert_eq(adsm_dev_free(all), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* The host backend's device memory is the machine's RAM. */
Test(misuse, larger_than_device_host_backend) {
    start_full(ADSM_BACKEND_HOST, ADSM_PROTOCOL_DEFAULT, 0);
    size_t ram = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    cr_assert_null(adsm_alloc(ram + 1));
    expect_failure(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, NULL, "adsm_alloc(RAM + 1)");
    cr_assert_null(adsm_safe_alloc(ram + 1));
    expect_failure(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, NULL, "adsm_safe_alloc(RAM + 1)");
    cr_assert_null(adsm_dev_alloc(ram + 1));
    expect_failure(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, NULL, "adsm_dev_alloc(RAM + 1)");
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

/* ---- foreign pointers ------------------------------------------------------------------------ */

Test(misuse, free_device_pointers) {
    start();
    unsigned char host[64], back[64];
    for (int i = 0; i < 64; i++) host[i] = (unsigned char)(i + 1);
    unsigned char *dev = adsm_dev_alloc(4096);
    cr_assert_not_null(dev, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(dev, host, sizeof host), ADSM_OK);
    cr_assert_eq(adsm_free(dev), ADSM_ERROR_NOT_SHARED, "adsm_free of a device buffer");
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_free", "adsm_free(device buffer)");
    /* an address in adsm's reservation that no object holds */
    char *last = adsm_alloc(4096);
    cr_assert_not_null(last);
    cr_assert_eq(adsm_free(last + (16 * MiB)), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(live_objects(), 1);
    /* the device buffer is untouched and still freed by the right call */
    cr_assert_eq(adsm_copy_from_device(back, dev, sizeof back), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(memcmp(back, host, sizeof host), 0);
    cr_assert_eq(adsm_dev_free(dev), ADSM_OK);
    cr_assert_eq(adsm_free(last), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, dev_free_shared_pointers) {
    int local = 0;
    cr_assert_eq(adsm_dev_free(&local), ADSM_ERROR_NOT_SHARED, "before initialisation");
    expect_failure(ADSM_ERROR_NOT_SHARED, "not initialised", "adsm_dev_free before init");
    start(); /* adsm_dev_free did not initialise adsm, or this would be ALREADY_INITIALIZED */
    int *shared = adsm_alloc(4096), *safe = adsm_safe_alloc(4096);
    cr_assert(shared && safe);
    shared[0] = 11;
    safe[0] = 22;
    cr_assert_eq(adsm_dev_free(shared), ADSM_ERROR_NOT_SHARED);
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_dev_alloc", "adsm_dev_free(shared object)");
    cr_assert_eq(adsm_dev_free(safe), ADSM_ERROR_NOT_SHARED, "the host side of a safe object");
    cr_assert_eq(adsm_dev_free(adsm_safe(safe)), ADSM_ERROR_NOT_SHARED, "the device side of a safe object");
    cr_assert_eq(live_objects(), 2);
    cr_assert_eq(shared[0], 11);
    cr_assert_eq(safe[0], 22);
    /* both still work as kernel arguments */
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d(1, 1), shared, safe, 1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(shared[0], 23);
    cr_assert_eq(adsm_free(shared), ADSM_OK);
    cr_assert_eq(adsm_free(safe), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, safe_of_device_pointers) {
    int local = 0;
    /* adsm_safe initialises adsm implicitly, then finds nothing */
    cr_assert_null(adsm_safe(&local));
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_safe", "adsm_safe before init");
    cr_assert_eq(adsm_init(NULL), ADSM_ERROR_ALREADY_INITIALIZED, "adsm_safe initialised adsm");
    void *dev = adsm_dev_alloc(4096);
    char *safe = adsm_safe_alloc(4096);
    cr_assert(dev && safe);
    cr_assert_null(adsm_safe(dev), "a device buffer has no host side");
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_safe", "adsm_safe(device buffer)");
    char *d = adsm_safe(safe);
    cr_assert_not_null(d);
    cr_assert_null(adsm_safe(d), "the device address of a safe object is not a host address");
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_safe", "adsm_safe(adsm_safe(p))");
    cr_assert_eq(adsm_dev_free(dev), ADSM_OK);
    cr_assert_eq(adsm_free(safe), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, explicit_copies_null_and_foreign) {
    start();
    unsigned char plain[64] = {0};
    unsigned char *dev = adsm_dev_alloc(4096), *shared = adsm_alloc(4096), *safe = adsm_safe_alloc(4096);
    cr_assert(dev && shared && safe);
    cr_assert_eq(adsm_copy_to_device(NULL, plain, 16), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "NULL", "copy_to_device(NULL, ...)");
    cr_assert_eq(adsm_copy_to_device(dev, NULL, 16), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_copy_from_device(plain, NULL, 16), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_copy_to_device(NULL, NULL, 0), ADSM_OK, "0 bytes is a no-op");
    cr_assert_eq(adsm_copy_from_device(NULL, NULL, 0), ADSM_OK);
    cr_assert_eq(adsm_copy_from_device(plain, shared, 16), ADSM_ERROR_NOT_SHARED,
                 "a shared object is no device buffer");
    expect_failure(ADSM_ERROR_NOT_SHARED, "not a buffer from adsm_dev_alloc", "copy_from_device(shared)");
    cr_assert_eq(adsm_copy_to_device(adsm_safe(safe), plain, 16), ADSM_ERROR_NOT_SHARED,
                 "nor is a safe object's device side");
    cr_assert_eq(adsm_copy_from_device(shared, dev, 16), ADSM_ERROR_INVALID_VALUE, "shared host side");
    expect_failure(ADSM_ERROR_INVALID_VALUE, "adsm_memcpy", "copy_from_device into shared memory");
    cr_assert_eq(adsm_copy_to_device(dev, plain, SIZE_MAX), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "past the end", "copy of SIZE_MAX bytes");
    cr_assert_eq(adsm_copy_from_device(plain, dev + 100, SIZE_MAX - 50), ADSM_ERROR_INVALID_VALUE,
                 "offset + n overflows");
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes + s.d2h_bytes, 0, "a refused copy moved bytes");
    cr_assert_eq(adsm_dev_free(dev), ADSM_OK);
    cr_assert_eq(adsm_free(shared), ADSM_OK);
    cr_assert_eq(adsm_free(safe), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, memset_memcpy_edges) {
    start();
    char *p = adsm_alloc(4096);
    cr_assert(p);
    memset(p, 5, 4096);
    cr_assert_eq(adsm_memset(NULL, 0, 0), ADSM_OK, "0 bytes at NULL");
    cr_assert_eq(adsm_memcpy(NULL, NULL, 0), ADSM_OK);
    cr_assert_eq(adsm_memcpy(p, (const char *)(UINTPTR_MAX - 10), 100), ADSM_ERROR_INVALID_VALUE, "source wraps");
    expect_failure(ADSM_ERROR_INVALID_VALUE, "wraps", "adsm_memcpy source wraps");
    cr_assert_eq(adsm_memcpy((char *)(UINTPTR_MAX - 10), p, 100), ADSM_ERROR_INVALID_VALUE, "destination wraps");
    cr_assert_eq(adsm_memcpy(p, p + 2048, SIZE_MAX), ADSM_ERROR_INVALID_VALUE);
    for (int i = 0; i < 4096; i++) cr_assert_eq(p[i], 5, "byte %d changed by a refused call", i);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* NULL buffers go to libc as they are: -1 and EFAULT from the kernel. These calls never
 * initialise adsm. */
Test(misuse, io_null_buffers) {
    char *path = temp_file("0123456789abcdef", 16);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    for (int round = 0; round < 2; round++) {
        errno = 0;
        cr_assert_eq(adsm_read(fd, NULL, 16), -1);
        cr_assert_eq(errno, EFAULT, "adsm_read(NULL): errno %d", errno);
        errno = 0;
        cr_assert_eq(adsm_pread(fd, NULL, 16, 0), -1);
        cr_assert_eq(errno, EFAULT);
        errno = 0;
        cr_assert_eq(adsm_write(fd, NULL, 16), -1);
        cr_assert_eq(errno, EFAULT);
        errno = 0;
        cr_assert_eq(adsm_pwrite(fd, NULL, 16, 0), -1);
        cr_assert_eq(errno, EFAULT);
        cr_assert_eq(adsm_read(fd, NULL, 0), 0, "0 bytes");
        cr_assert_eq(lseek(fd, 0, SEEK_CUR), 0, "a refused call moved the file offset");
        if (round == 0) start(); /* would be ALREADY_INITIALIZED had the calls initialised adsm */
    }
    close(fd);
    unlink(path);
    check_usable();
    adsm_shutdown();
}

/* size * nmemb overflowing size_t: 0 items, errno EOVERFLOW, the stream and the buffer untouched
 * (glibc's own fread/fwrite return 0 without setting errno when the product wraps to 0). */
Test(misuse, fread_fwrite_size_overflow) {
    start();
    char *path = temp_file("0123456789abcdef", 16);
    unsigned char *obj = adsm_alloc(8192);
    cr_assert(obj);
    memset(obj, 0x5a, 8192);
    FILE *f = fopen(path, "r+");
    cr_assert(f);
    static const size_t sizes[][2] = {{2, SIZE_MAX / 2 + 1}, {SIZE_MAX / 2 + 2, 2}, {16, SIZE_MAX / 16 + 1}};
    for (int k = 0; k < 3; k++) {
        errno = 0;
        cr_assert_eq(adsm_fread(obj, sizes[k][0], sizes[k][1], f), 0, "fread case %d", k);
        cr_assert_eq(errno, EOVERFLOW, "fread case %d: errno %d", k, errno);
        errno = 0;
        cr_assert_eq(adsm_fwrite(obj, sizes[k][0], sizes[k][1], f), 0, "fwrite case %d", k);
        cr_assert_eq(errno, EOVERFLOW, "fwrite case %d: errno %d", k, errno);
        cr_assert_eq(ftell(f), 0);
        cr_assert(!ferror(f) && !feof(f));
    }
    for (int i = 0; i < 8192; i++) cr_assert_eq(obj[i], 0x5a, "byte %d", i);
    /* the stream still works */
    cr_assert_eq(adsm_fread(obj, 4, 4, f), 4);
    cr_assert_eq(memcmp(obj, "0123456789abcdef", 16), 0);
    fclose(f);
    unlink(path);
    cr_assert_eq(adsm_free(obj), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* A count of SIZE_MAX: -1 EFAULT as libc gives (the range wraps around), nothing read. */
Test(misuse, io_count_overflow) {
    start();
    char *path = temp_file("0123456789abcdef", 16);
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    unsigned char *obj = adsm_alloc(MiB);
    cr_assert(obj);
    volatile size_t huge = SIZE_MAX;
    errno = 0;
    cr_assert_eq(adsm_read(fd, obj, huge), -1);
    cr_assert_eq(errno, EFAULT, "adsm_read: errno %d", errno);
    errno = 0;
    cr_assert_eq(adsm_pread(fd, obj, huge, 0), -1);
    cr_assert_eq(errno, EFAULT);
    errno = 0;
    cr_assert_eq(adsm_write(fd, obj, huge), -1);
    cr_assert_eq(errno, EFAULT);
    cr_assert_eq(lseek(fd, 0, SEEK_CUR), 0);
    for (size_t i = 0; i < 64; i++) cr_assert_eq(obj[i], 0);
    close(fd);
    unlink(path);
    cr_assert_eq(adsm_free(obj), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* ---- launches ---------------------------------------------------------------------------------- */

Test(misuse, launch_malformed_descriptors) {
    start();
    int *out = adsm_alloc(64 * sizeof *out);
    cr_assert(out);
    out[0] = 3; /* Dirty: a refused launch must not flush or invalidate it */
    fill_args args = {out, 64};
    uint64_t launches = stats().launches;
    for (size_t k = 0; k < sizeof malformed / sizeof *malformed; k++) {
        adsm_result r = adsm_launch(&malformed[k].desc, adsm_grid_1d(1, 64), &args);
        cr_assert_eq(r, ADSM_ERROR_INVALID_VALUE, "%s: %d (%s)", malformed[k].what, r, adsm_last_error());
        expect_failure(ADSM_ERROR_INVALID_VALUE, NULL, malformed[k].what);
    }
    cr_assert_eq(adsm_launch(&good_desc, adsm_grid_1d(1, 64), NULL), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "NULL argument block", "NULL args");
    cr_assert_eq(stats().launches, launches, "a refused launch ran");
    cr_assert_eq(adsm_block_state(out), 'D');
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    /* the same descriptor, well formed, runs */
    cr_assert_eq(adsm_launch(&good_desc, adsm_grid_1d(1, 64), &args), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < 64; i++) cr_assert_eq(out[i], 7);
    cr_assert_eq(adsm_free(out), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* the messages say which rule the descriptor broke */
Test(misuse, launch_descriptor_messages) {
    start();
    int *out = adsm_alloc(64 * sizeof *out);
    cr_assert(out);
    fill_args args = {out, 64};
    cr_assert_eq(adsm_launch(&malformed[0].desc, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "0 parameters, expected 1..16", "nparams 0");
    cr_assert_eq(adsm_launch(&malformed[1].desc, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "17 parameters, expected 1..16", "nparams 17");
    cr_assert_eq(adsm_launch(&malformed[2].desc, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "malformed kernel descriptor", "NULL name");
    cr_assert_eq(adsm_launch(&malformed[5].desc, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "parameter 1 has a malformed descriptor", "offset past args_size");
    cr_assert_eq(adsm_launch(NULL, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "adsm_launch: malformed kernel descriptor", "NULL descriptor");
    cr_assert_eq(adsm_kernel_prepare(NULL), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "adsm_kernel_prepare: malformed kernel descriptor", "prepare, NULL");
    cr_assert_eq(adsm_free(out), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* adsm_module_load_file reads a file to its end: a /proc file (size 0 to stat, ftell's guess) is
 * read whole (emu takes any readable file), a directory says it is one (it said "Cannot allocate
 * memory", ftell's size of a directory being huge). */
Test(misuse, module_files_read_to_their_end) {
    start();
    cr_assert_eq(adsm_module_load_file("/proc/self/status"), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_module_load_file("/"), ADSM_ERROR_SYSTEM);
    expect_failure(ADSM_ERROR_SYSTEM, "Is a directory", "a directory");
    cr_assert_eq(adsm_module_load_file("/nonexistent/module.ptx"), ADSM_ERROR_SYSTEM);
    expect_failure(ADSM_ERROR_SYSTEM, "No such file", "a missing file");
    check_usable();
    adsm_shutdown();
}

/* The program unmaps part of a live object (a mistake): adsm_free maps the range again, so the
 * objects later made there work (every allocation of that size failed, the arena handing out the
 * broken range again: "mprotect of a new object failed"). */
Test(misuse, an_object_the_program_unmapped_gives_its_range_back_whole) {
    start();
    const size_t n = 256 << 10;
    unsigned char *p = adsm_alloc(n);
    cr_assert(p, "%s", adsm_last_error());
    memset(p, 1, n);
    cr_assert_eq(munmap(p + (64 << 10), 64 << 10), 0);
    cr_assert_eq(adsm_free(p), ADSM_OK, "%s", adsm_last_error());
    int reused = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char *q = adsm_alloc(n);
        cr_assert(q, "round %d: %s", k, adsm_last_error());
        reused += q == p;
        for (size_t i = 0; i < n; i += 4096) cr_assert_eq(q[i], 0, "round %d: q[%zu] = %d", k, i, q[i]);
        memset(q, 2, n);
        cr_assert_eq(q[(64 << 10) + 5], 2);
        cr_assert_eq(adsm_free(q), ADSM_OK);
    }
    cr_assert_gt(reused, 0, "the range was never handed out again");
    check_usable();
    adsm_shutdown();
}

/* The emu backend carries at most 4 KiB of packed arguments; the host backend has no limit. */
Test(misuse, by_value_arguments_over_4k_emu) {
    start();
    int *dst = adsm_alloc(16 * sizeof *dst);
    cr_assert(dst);
    dst[0] = 42;
    big_value v;
    memset(&v, 9, sizeof v);
    uint64_t launches = stats().launches;
    cr_assert_eq(ADSM_CALL(take_big, adsm_grid_1d(1, 16), dst, v), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, "the emu backend takes 4096", "5000-byte argument");
    cr_assert_eq(stats().launches, launches);
    cr_assert_eq(adsm_block_state(dst), 'D', "a refused launch leaves the OUT object's state alone");
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(dst[0], 42, "the refused call's OUT object lost its data");
    for (int i = 1; i < 16; i++) cr_assert_eq(dst[i], 0);
    cr_assert_eq(adsm_free(dst), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, by_value_arguments_over_4k_host) {
    start_full(ADSM_BACKEND_HOST, ADSM_PROTOCOL_DEFAULT, 0);
    int *dst = adsm_alloc(16 * sizeof *dst);
    cr_assert(dst);
    big_value v;
    memset(&v, 9, sizeof v);
    cr_assert_eq(ADSM_CALL(take_big, adsm_grid_1d(1, 16), dst, v), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (int i = 0; i < 16; i++) cr_assert_eq(dst[i], 9);
    cr_assert_eq(adsm_free(dst), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* Launch shapes a GPU refuses are refused on every backend with the same code, before anything
 * runs (issue 11, item 10): emu used to accept them, and a UINT32_MAX x UINT32_MAX grid hung
 * adsm_sync. 65536^4 threads (2^64) used to wrap to an "empty grid". */
typedef struct shape_case {
    unsigned grid[3], block[3];
    char needle[48]; /* not a pointer: Criterion's worker processes need not share addresses */
} shape_case;

ParameterizedTestParameters(misuse, launch_shapes_a_gpu_refuses) {
    static shape_case cases[] = {
        {{1, 1, 1}, {2048, 1, 1}, "at most 1024"},
        {{1, 1, 1}, {100000, 1, 1}, "at most 1024"},
        {{1, 1, 1}, {1, 1, 128}, "1024 x 1024 x 64"},
        {{1, 1, 1}, {32, 32, 2}, "2048 threads"},
        {{1, 100000, 1}, {32, 1, 1}, "at most 2147483647 x 65535 x 65535"},
        {{UINT32_MAX, UINT32_MAX, 1}, {1, 1, 1}, "grid 4294967295 x 4294967295"},
        {{65536, 65536, 1}, {65536, 65536, 1}, "block 65536 x 65536"},
        {{0, 1, 1}, {32, 1, 1}, "empty grid"},
    };
    return cr_make_param_array(shape_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(shape_case *c, misuse, launch_shapes_a_gpu_refuses, .timeout = 120) {
    start();
    int *a = adsm_alloc(4096), *b = adsm_alloc(4096);
    cr_assert(a && b);
    adsm_grid g = adsm_grid_3d(adsm_dim3_make(c->grid[0], c->grid[1], c->grid[2]),
                               adsm_dim3_make(c->block[0], c->block[1], c->block[2]));
    cr_assert_eq(ADSM_CALL(add_one, g, a, b, 16), ADSM_ERROR_INVALID_VALUE);
    expect_failure(ADSM_ERROR_INVALID_VALUE, c->needle, "launch shape");
    cr_assert_eq(adsm_sync(), ADSM_OK, "nothing ran: %s", adsm_last_error());
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* ---- freeing while a kernel runs --------------------------------------------------------------- */

#define SPIN_NS 300000000LL /* the kernel runs at least this long */

/* Frees the kernel's IN and OUT objects right after the launch. adsm_free must wait for the
 * kernel: every thread's finish time (written into `log`) is before the free returned. */
static void free_in_flight(adsm_protocol_kind protocol, int device_buffer) {
    start_full(ADSM_BACKEND_EMU, protocol, 64 * MiB);
    const size_t n = 256;
    int *src = adsm_alloc(n * sizeof *src);
    int *victim = device_buffer ? adsm_dev_alloc(n * sizeof *victim) : adsm_alloc(n * sizeof *victim);
    long long *log = adsm_alloc(2 * n * sizeof *log);
    cr_assert(src && victim && log, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) src[i] = (int)i * 3;
    long long until = now_ns() + SPIN_NS;
    cr_assert_eq(ADSM_CALL(slow_stamp, adsm_grid_1d(4, 64), victim, src, log, until, n), ADSM_OK, "%s",
                 adsm_last_error());
    long long called = now_ns();
    cr_assert_lt(called, until, "the launch itself took the whole kernel time; nothing was in flight");
    adsm_result r = device_buffer ? adsm_dev_free(victim) : adsm_free(victim);
    long long returned = now_ns();
    cr_assert_eq(r, ADSM_OK, "free of the OUT object in flight: %s", adsm_last_error());
    cr_assert_eq(adsm_free(src), ADSM_OK, "free of the IN object: %s", adsm_last_error());
    cr_assert_geq(returned, until, "adsm_free returned before the kernel could have finished");
    cr_assert_eq(adsm_sync(), ADSM_OK, "the kernel failed: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(log[2 * i], (long long)i * 3 + 1, "thread %zu result", i);
        cr_assert_leq(log[2 * i + 1], returned, "thread %zu finished after adsm_free returned", i);
        cr_assert_geq(log[2 * i + 1], until);
    }
    cr_assert_eq(live_objects(), 1);
    cr_assert_eq(adsm_free(log), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, free_while_kernel_in_flight_rolling) { free_in_flight(ADSM_PROTOCOL_ROLLING, 0); }
Test(misuse, free_while_kernel_in_flight_lazy) { free_in_flight(ADSM_PROTOCOL_LAZY, 0); }
Test(misuse, free_while_kernel_in_flight_batch) { free_in_flight(ADSM_PROTOCOL_BATCH, 0); }
Test(misuse, dev_free_while_kernel_in_flight) { free_in_flight(ADSM_PROTOCOL_ROLLING, 1); }

/* adsm_shutdown with live objects and a kernel running: it waits, then drops everything. */
Test(misuse, shutdown_while_kernel_in_flight) {
    start();
    const size_t n = 256;
    int *src = adsm_alloc(n * sizeof *src), *victim = adsm_alloc(n * sizeof *victim);
    long long *log = adsm_alloc(2 * n * sizeof *log);
    cr_assert(src && victim && log);
    long long until = now_ns() + SPIN_NS;
    cr_assert_eq(ADSM_CALL(slow_stamp, adsm_grid_1d(4, 64), victim, src, log, until, n), ADSM_OK);
    adsm_shutdown();
    cr_assert_geq(now_ns(), until, "adsm_shutdown returned before the kernel could have finished");
    cr_assert_eq(live_objects(), 0);
    start();
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

/* ---- init, shutdown and calls after it --------------------------------------------------------- */

Test(misuse, init_twice_keeps_first_config) {
    adsm_config first;
    memset(&first, 0, sizeof first);
    first.backend = ADSM_BACKEND_HOST;
    first.protocol = ADSM_PROTOCOL_LAZY;
    first.block_size = 64 << 10;
    cr_assert_eq(adsm_init(&first), ADSM_OK, "%s", adsm_last_error());
    int *p = adsm_alloc(4096);
    cr_assert(p);
    p[0] = 5;
    adsm_config second;
    memset(&second, 0, sizeof second);
    second.backend = ADSM_BACKEND_EMU;
    second.protocol = ADSM_PROTOCOL_BATCH;
    second.block_size = 4096;
    cr_assert_eq(adsm_init(&second), ADSM_ERROR_ALREADY_INITIALIZED);
    expect_failure(ADSM_ERROR_ALREADY_INITIALIZED, "adsm_shutdown", "second adsm_init");
    second.block_size = 3000; /* even an invalid config: the state is checked first */
    cr_assert_eq(adsm_init(&second), ADSM_ERROR_ALREADY_INITIALIZED);
    cr_assert_str_eq(adsm_backend_name(), "host");
    cr_assert_str_eq(adsm_protocol_name(), "lazy");
    cr_assert_eq(adsm_block_size(), (size_t)64 << 10);
    cr_assert_eq(p[0], 5, "the live object survived");
    cr_assert_eq(live_objects(), 1);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(misuse, shutdown_twice_and_before_init) {
    adsm_shutdown(); /* nothing to do */
    cr_assert_eq(adsm_get_stats(NULL), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_sync(), ADSM_OK, "nothing to wait for");
    cr_assert_eq(live_objects(), 0);
    start(); /* none of the calls above initialised adsm */
    int *p = adsm_alloc(4096);
    cr_assert(p);
    adsm_shutdown();
    adsm_shutdown();
    cr_assert_eq(live_objects(), 0);
    check_usable(); /* initialises again, implicitly */
    adsm_shutdown();
}

/* After adsm_shutdown every object is gone and old pointers are dangling. Calls that need the
 * runtime initialise it again, implicitly, from the defaults and the environment: the config the
 * program gave adsm_init before is not remembered. */
Test(misuse, calls_after_shutdown) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_HOST;
    cfg.block_size = 64 << 10;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *p = adsm_alloc(8192), *q = adsm_alloc(8192);
    int *dev = adsm_dev_alloc(4096);
    cr_assert(p && q && dev);
    /* freed first: adsm_shutdown leaks a live device buffer's bookkeeping (bug_shutdown_leaks_...) */
    cr_assert_eq(adsm_dev_free(dev), ADSM_OK);
    adsm_shutdown();
    /* calls that do not initialise */
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_free(p), ADSM_ERROR_NOT_SHARED);
    expect_failure(ADSM_ERROR_NOT_SHARED, "not initialised", "adsm_free after shutdown");
    cr_assert_eq(adsm_dev_free(dev), ADSM_ERROR_NOT_SHARED);
    expect_failure(ADSM_ERROR_NOT_SHARED, "not initialised", "adsm_dev_free after shutdown");
    cr_assert_eq(adsm_block_state(p), 0);
    cr_assert_eq(live_objects(), 0);
    /* a launch initialises again (emu, 2 MiB blocks: the defaults), then refuses the old pointers */
    uint64_t launches = stats().launches;
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d(1, 1), q, p, 1), ADSM_ERROR_NOT_SHARED);
    expect_failure(ADSM_ERROR_NOT_SHARED, "'dst'", "ADSM_CALL with pointers from before the shutdown");
    cr_assert_str_eq(adsm_backend_name(), "emu");
    cr_assert_eq(adsm_block_size(), (size_t)2 << 20);
    cr_assert_eq(stats().launches, launches);
    cr_assert_null(adsm_safe(p));
    expect_failure(ADSM_ERROR_NOT_SHARED, "adsm_safe", "adsm_safe after shutdown");
    cr_assert_eq(adsm_copy_to_device(dev, &cfg, 8), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_ALREADY_INITIALIZED);
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

/* Not detectable: the reservation is unmapped at shutdown, so touching an old pointer crashes as a
 * use after munmap would. */
Test(misuse, touch_after_shutdown_crashes, .signal = SIGSEGV) {
    start();
    volatile int *p = adsm_alloc(4096);
    cr_assert(p);
    p[0] = 1;
    adsm_shutdown();
    p[0] = 2;
}

/* Not detectable: a freed address reused by a new allocation is that object now, so a second free
 * of the stale pointer frees the new object, as with malloc. */
Test(misuse, stale_free_frees_reused_address) {
    start();
    char *p = adsm_alloc(4096);
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    char *q = adsm_alloc(4096);
    cr_assert(q);
    cr_assert_eq((void *)q, (void *)p, "the arena reuses the lowest free address");
    cr_assert_eq(adsm_free(p), ADSM_OK, "the stale pointer names the new object");
    cr_assert_eq(live_objects(), 0);
    cr_assert_eq(adsm_free(q), ADSM_ERROR_NOT_SHARED, "q was freed through p");
    check_usable();
    adsm_shutdown();
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    cr_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int count_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert(f);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

static int count_mappings(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert(f);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* Whether process `pid` has exited: gone, or a zombie its reaper has not collected yet (the emu
 * device is not the program's child: init, or a subreaper above the program, reaps it). */
static int process_is_gone(pid_t pid) {
    char path[64], text[512] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    int got = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    const char *close_paren = strrchr(text, ')'); /* "pid (comm) state ..." */
    return !got || !close_paren || close_paren[1] != ' ' || close_paren[2] == 'Z' || close_paren[2] == 'X';
}

/* One round of misuse: a failed init, double init, double free, a refused call, a kernel, a
 * shutdown with live objects. */
static void misuse_round(void) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "12K", 1), 0);
    cr_assert_eq(adsm_init(NULL), ADSM_ERROR_INVALID_CONFIG);
    cr_assert_eq(unsetenv("ADSM_BLOCK_SIZE"), 0);
    start();
    cr_assert_eq(adsm_init(NULL), ADSM_ERROR_ALREADY_INITIALIZED);
    int *p = adsm_alloc(4096), local[4];
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    cr_assert_eq(adsm_free(p), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d(1, 4), local, local, 4), ADSM_ERROR_NOT_SHARED);
    check_usable();
    void *dev = adsm_dev_alloc(MiB);
    cr_assert(dev && adsm_dev_free(dev) == ADSM_OK);
    cr_assert(adsm_alloc(MiB) && adsm_safe_alloc(MiB)); /* left live for adsm_shutdown */
    pid_t device = ((adsm__emu *)adsm__rt.be_ctx)->child; /* white-box */
    adsm_shutdown();
    cr_assert(process_is_gone(device), "the device process %d outlived adsm_shutdown", (int)device);
}

/* Rounds of init, misuse and shutdown leave no heap block, descriptor, thread, mapping or device
 * process. */
Test(misuse, init_shutdown_rounds_leak_nothing) {
    /* Warm-up: libc keeps state on first use, and mallinfo2 counts the chunks glibc's per-thread
     * cache holds (up to 7 per size) as in use; after enough rounds each round leaves the heap
     * exactly as it found it. */
    int fds = 0, threads = 0, maps = 0;
    for (int k = 0; k < 8; k++) {
        misuse_round();
        fds = count_fds();
        threads = count_threads();
        maps = count_mappings();
    }
    size_t heap = mallinfo2().uordblks;
    for (int k = 0; k < 10; k++) misuse_round();
    cr_assert_eq(mallinfo2().uordblks, heap, "heap grew by %zu bytes", mallinfo2().uordblks - heap);
    cr_assert_eq(count_fds(), fds, "file descriptors leaked");
    cr_assert_eq(count_threads(), threads, "threads leaked");
    /* a thread that just ended may still hold its stack (and, under ASan, its own mappings) a
     * moment, more so on a loaded machine: a leak stays, so wait for the count to settle first */
    int now = count_mappings();
    for (int tries = 0; tries < 200 && now > maps; tries++) {
        usleep(10000);
        now = count_mappings();
    }
    cr_assert_leq(now, maps, "%d mappings leaked over 10 rounds", now - maps);
    errno = 0; /* nor a child: the go-betweens that start device processes are reaped */
    cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1, "a child process was left behind");
    cr_assert_eq(errno, ECHILD);
    check_usable();
    adsm_shutdown();
}

/* ---- configuration ------------------------------------------------------------------------------- */

/* init with cfg must fail with INVALID_CONFIG naming `var`, install nothing, and leave adsm able
 * to start with a good configuration */
static void expect_bad_config(const adsm_config *cfg, const char *var, const char *what) {
    adsm_result r = adsm_init(cfg);
    cr_assert_eq(r, ADSM_ERROR_INVALID_CONFIG, "%s: %d (%s)", what, r, adsm_last_error());
    expect_failure(ADSM_ERROR_INVALID_CONFIG, var, what);
    struct sigaction cur;
    sigaction(SIGSEGV, NULL, &cur);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL, "%s: a SIGSEGV handler was left", what);
}

Test(misuse, block_size_struct_values) {
    static const size_t bad[] = {3000, 12 << 10, 1 << 10, (size_t)2 << 30, 4095, 4097, (size_t)1 << 63, SIZE_MAX};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        adsm_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.backend = ADSM_BACKEND_EMU;
        cfg.block_size = bad[k];
        char what[64];
        snprintf(what, sizeof what, "block_size %zu", bad[k]);
        expect_bad_config(&cfg, "ADSM_BLOCK_SIZE", what);
    }
    start();
    check_usable();
    adsm_shutdown();
}

Test(misuse, config_fields_out_of_range) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = (adsm_backend_kind)99;
    expect_bad_config(&cfg, "out of range", "backend 99");
    cfg.backend = (adsm_backend_kind)-1;
    expect_bad_config(&cfg, "out of range", "backend -1");
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.log_level = (adsm_log_level)99;
    expect_bad_config(&cfg, "out of range", "log_level 99");
    cfg.log_level = ADSM_LOG_DEFAULT;
    cfg.emu_workers = 300;
    expect_bad_config(&cfg, "adsm_config.emu_workers: 300", "emu_workers 300");
    cfg.emu_workers = 0;
    cfg.rolling_size = ((size_t)1 << 24) + 1;
    expect_bad_config(&cfg, "adsm_config.rolling_size", "rolling_size 16M + 1");
    start();
    check_usable();
    adsm_shutdown();
}

/* An unknown ADSM_BACKEND fails every call that initialises adsm implicitly; calls that do not
 * need the runtime still work. */
Test(misuse, unknown_backend_every_entry_point) {
    cr_assert_eq(setenv("ADSM_BACKEND", "gpu", 1), 0);
    int plain[4] = {1, 2, 3, 4}, other[4] = {0};
    cr_assert_null(adsm_safe_alloc(64));
    expect_failure(ADSM_ERROR_INVALID_CONFIG, "ADSM_BACKEND='gpu'", "adsm_safe_alloc");
    cr_assert_null(adsm_dev_alloc(64));
    expect_failure(ADSM_ERROR_INVALID_CONFIG, "ADSM_BACKEND", "adsm_dev_alloc");
    cr_assert_null(adsm_safe(plain));
    expect_failure(ADSM_ERROR_INVALID_CONFIG, "ADSM_BACKEND", "adsm_safe");
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d(1, 4), other, plain, 4), ADSM_ERROR_INVALID_CONFIG);
    cr_assert_eq(adsm_copy_to_device(other, plain, sizeof plain), ADSM_ERROR_INVALID_CONFIG);
    /* adsm_memset / adsm_memcpy on plain memory need no runtime (nothing is shared before init) */
    cr_assert_eq(adsm_memset(other, 1, sizeof other), ADSM_OK);
    cr_assert_eq(other[0], 0x01010101);
    cr_assert_eq(adsm_memcpy(other, plain, sizeof plain), ADSM_OK);
    cr_assert_eq(other[3], 4);
    other[0] = 0;
    cr_assert_str_eq(adsm_backend_name(), "none");
    cr_assert_eq(adsm_block_size(), 0);
    /* these need no runtime */
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_free(NULL), ADSM_OK);
    cr_assert_eq(adsm_free(plain), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(live_objects(), 0);
    char *path = temp_file("abcd", 4);
    int fd = open(path, O_RDONLY);
    cr_assert_eq(adsm_read(fd, other, 4), 4, "I/O on plain memory never initialises adsm");
    close(fd);
    unlink(path);
    /* with the variable fixed, the next call initialises */
    cr_assert_eq(unsetenv("ADSM_BACKEND"), 0);
    check_usable();
    cr_assert_str_eq(adsm_backend_name(), "emu");
    adsm_shutdown();
}

/* Names are matched exactly: no case folding, no trimming. */
Test(misuse, unknown_protocol_names) {
    static const char *const bad[] = {"rolling ", " lazy", "Batch", "roll", "lazy,rolling"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        cr_assert_eq(setenv("ADSM_PROTOCOL", bad[k], 1), 0);
        cr_assert_null(adsm_dev_alloc(64), "'%s'", bad[k]);
        expect_failure(ADSM_ERROR_INVALID_CONFIG, "ADSM_PROTOCOL", bad[k]);
        cr_assert_eq(adsm_launch(&good_desc, adsm_grid_1d(1, 1), &(fill_args){NULL, 0}), ADSM_ERROR_INVALID_CONFIG);
    }
    cr_assert_eq(setenv("ADSM_BACKEND", "EMU", 1), 0);
    cr_assert_eq(setenv("ADSM_PROTOCOL", "lazy", 1), 0);
    cr_assert_null(adsm_alloc(64));
    expect_failure(ADSM_ERROR_INVALID_CONFIG, "ADSM_BACKEND='EMU'", "upper-case backend");
    cr_assert_eq(setenv("ADSM_BACKEND", "emu", 1), 0);
    check_usable();
    cr_assert_str_eq(adsm_protocol_name(), "lazy");
    adsm_shutdown();
}

/* ---- regressions: bugs these tests found, fixed ---------------------------------------------- */

/* A parameter whose offset + size wraps around passes the descriptor check; adsm_launch then
 * reads the byte before its copy of the argument block (ASan: heap-buffer-overflow). */
Test(misuse, regression_descriptor_offset_wraps) {
    start();
    fill_args args = {NULL, 0};
    cr_assert_eq(adsm_launch(&wrapping_desc, adsm_grid_1d(1, 1), &args), ADSM_ERROR_INVALID_VALUE);
    adsm_shutdown();
}

/* A read whose count runs past the end of a shared object into unmapped memory: libc's read
 * returns the bytes it could store (or -1 EFAULT); adsm_read dies of SIGSEGV. */
Test(misuse, regression_read_past_object_end) {
    start();
    char data[8192];
    memset(data, 'x', sizeof data);
    char *path = temp_file(data, sizeof data);
    int fd = open(path, O_RDONLY);
    char *obj = adsm_alloc(4096); /* the only object: the next page is reserved, not mapped */
    ssize_t got = adsm_read(fd, obj, sizeof data);
    cr_assert(got == 4096 || (got == -1 && errno == EFAULT), "adsm_read returned %zd", got);
    close(fd);
    unlink(path);
    adsm_shutdown();
}

/* A size * nmemb that wraps to a large value from a shared address is taken for plain memory and
 * handed to libc (EFAULT on a protected page) instead of failing with EOVERFLOW. */
Test(misuse, regression_fread_wrapping_to_large_count) {
    start();
    char *path = temp_file("0123456789abcdef", 16);
    FILE *f = fopen(path, "r");
    char *obj = adsm_alloc(4096);
    errno = 0;
    cr_assert_eq(adsm_fread(obj, 16, SIZE_MAX / 8, f), 0);
    cr_assert_eq(errno, EOVERFLOW, "errno %d", errno);
    fclose(f);
    unlink(path);
    adsm_shutdown();
}

/* adsm_shutdown frees shared objects but not the bookkeeping of device buffers still live
 * (adsm_dev_alloc without adsm_dev_free): 176 bytes each (LeakSanitizer: adsm_dev_alloc, api.h). */
Test(misuse, regression_shutdown_leaks_device_buffers) {
    for (int k = 0; k < 8; k++) { /* warm-up, as in init_shutdown_rounds_leak_nothing */
        start();
        void *dev = adsm_dev_alloc(4096);
        cr_assert(dev && adsm_dev_free(dev) == ADSM_OK);
        adsm_shutdown();
    }
    size_t heap = mallinfo2().uordblks;
    for (int k = 0; k < 10; k++) {
        start();
        cr_assert_not_null(adsm_dev_alloc(4096));
        adsm_shutdown();
    }
    cr_assert_eq(mallinfo2().uordblks, heap, "heap grew by %zu bytes", mallinfo2().uordblks - heap);
}
