/* tests/test_errors.c -- bad input: each mistake returns its documented code with a message, and
 * the runtime stays usable (a normal allocation and kernel call work afterwards). Also the cost of
 * many objects: allocation and free must not leak or slow down. Emu backend unless stated; each
 * test is its own process. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

ADSM_KERNEL(add_one, ADSM_OUT(int, dst), ADSM_IN(int, src), ADSM_VALUE(size_t, n));

void add_one(adsm_grid g, int *dst, const int *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i] + 1;
    }
}

#define MiB ((size_t)1 << 20)

static void start_with(size_t emu_memory) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_memory = emu_memory;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
}

static void start(void) { start_with(0); }

static uint64_t live_objects(void) {
    adsm_stats s;
    cr_assert_eq(adsm_get_stats(&s), ADSM_OK);
    return s.objects;
}

/* the error left a message behind */
static void expect_message(const char *what) {
    const char *m = adsm_last_error();
    cr_assert(m && m[0] != 0, "%s: empty message", what);
}

/* a normal allocation and kernel call still work */
static void check_usable(void) {
    const size_t n = 5000;
    uint64_t before = live_objects();
    int *src = adsm_alloc(n * sizeof *src), *dst = adsm_alloc(n * sizeof *dst);
    cr_assert(src && dst, "alloc after an error: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) src[i] = (int)i * 2;
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), dst, src, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(dst[i], (int)i * 2 + 1, "dst[%zu] = %d", i, dst[i]);
    cr_assert_eq(adsm_free(src), ADSM_OK);
    cr_assert_eq(adsm_free(dst), ADSM_OK);
    cr_assert_eq(live_objects(), before);
}

/* ---- free ----------------------------------------------------------------------------------- */

Test(errors, free_null_is_ok) {
    cr_assert_eq(adsm_free(NULL), ADSM_OK, "before initialisation");
    start();
    cr_assert_eq(adsm_free(NULL), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(errors, free_malloc_pointer) {
    start();
    void *heap = malloc(100);
    cr_assert(heap);
    adsm_result r = adsm_free(heap);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "%d (%s)", r, adsm_last_error());
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    expect_message("adsm_free(malloc)");
    free(heap); /* still the program's */
    check_usable();
    adsm_shutdown();
}

Test(errors, free_stack_pointer) {
    start();
    int local[8] = {0};
    adsm_result r = adsm_free(local);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "%d (%s)", r, adsm_last_error());
    expect_message("adsm_free(stack)");
    check_usable();
    adsm_shutdown();
}

Test(errors, free_before_init) {
    int local;
    cr_assert_eq(adsm_free(&local), ADSM_ERROR_NOT_SHARED);
    expect_message("adsm_free before init");
}

Test(errors, double_free) {
    start();
    int *p = adsm_alloc(1000);
    cr_assert(p);
    p[0] = 5;
    cr_assert_eq(adsm_free(p), ADSM_OK);
    adsm_result r = adsm_free(p);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "%d (%s)", r, adsm_last_error());
    expect_message("double free");
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

Test(errors, free_interior_pointer) {
    start();
    const size_t n = 5000;
    int *p = adsm_alloc(n * sizeof *p), *out = adsm_alloc(n * sizeof *out);
    cr_assert(p && out);
    for (size_t i = 0; i < n; i++) p[i] = (int)i;
    adsm_result r = adsm_free(p + 1);
    cr_assert_eq(r, ADSM_ERROR_NOT_OBJECT_START, "%d (%s)", r, adsm_last_error());
    expect_message("interior free");
    cr_assert_eq(adsm_free((char *)p + 4096 * 2), ADSM_ERROR_NOT_OBJECT_START);
    cr_assert_eq(live_objects(), 2);
    /* the object is intact and still works on both sides */
    for (size_t i = 0; i < n; i++) cr_assert_eq(p[i], (int)i);
    cr_assert_eq(ADSM_CALL(add_one, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), out, p, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(out[i], (int)i + 1);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    cr_assert_eq(adsm_free(out), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

/* ---- alloc ---------------------------------------------------------------------------------- */

Test(errors, alloc_zero) {
    start();
    cr_assert_null(adsm_alloc(0));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_VALUE);
    expect_message("adsm_alloc(0)");
    cr_assert_null(adsm_safe_alloc(0));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

Test(errors, alloc_size_max) {
    start();
    cr_assert_null(adsm_alloc(SIZE_MAX));
    adsm_result r = adsm_last_result();
    cr_assert_lt(r, 0, "adsm_alloc(SIZE_MAX) left no error");
    expect_message("adsm_alloc(SIZE_MAX)");
    cr_assert_null(adsm_alloc(SIZE_MAX - 4095));
    cr_assert_lt(adsm_last_result(), 0);
    cr_assert_null(adsm_safe_alloc(SIZE_MAX / 2 + 1));
    cr_assert_lt(adsm_last_result(), 0);
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

Test(errors, alloc_larger_than_device) {
    start_with(64 * MiB);
    cr_assert_null(adsm_alloc(65 * MiB));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    expect_message("65 MiB on a 64 MiB device");
    cr_assert_null(adsm_safe_alloc(65 * MiB));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    cr_assert_eq(live_objects(), 0);
    check_usable();
    adsm_shutdown();
}

Test(errors, fill_the_device) {
    start_with(64 * MiB);
    char *objs[4];
    for (int k = 0; k < 4; k++) {
        objs[k] = adsm_alloc(16 * MiB);
        cr_assert(objs[k], "object %d: %s", k, adsm_last_error());
        objs[k][k * 1000] = (char)(k + 1);
    }
    cr_assert_null(adsm_alloc(16 * MiB));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    cr_assert_null(adsm_alloc(1));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    cr_assert_eq(live_objects(), 4);
    cr_assert_eq(adsm_free(objs[2]), ADSM_OK);
    objs[2] = adsm_alloc(16 * MiB);
    cr_assert(objs[2], "after a free: %s", adsm_last_error());
    cr_assert_eq(objs[2][2000], 0, "a new object starts zeroed");
    for (int k = 0; k < 4; k++)
        if (k != 2) cr_assert_eq(objs[k][k * 1000], k + 1);
    cr_assert_null(adsm_alloc(1));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY);
    /* free two, then two smaller ones and a kernel call fit */
    cr_assert_eq(adsm_free(objs[0]), ADSM_OK);
    cr_assert_eq(adsm_free(objs[3]), ADSM_OK);
    check_usable();
    cr_assert_eq(adsm_free(objs[1]), ADSM_OK);
    cr_assert_eq(adsm_free(objs[2]), ADSM_OK);
    cr_assert_eq(live_objects(), 0);
    /* the whole device in one object */
    char *all = adsm_alloc(64 * MiB);
    cr_assert(all, "%s", adsm_last_error());
    cr_assert_eq(adsm_free(all), ADSM_OK);
    adsm_shutdown();
}

/* ---- init, bulk memory, stats, strings ------------------------------------------------------ */

Test(errors, init_twice) {
    start();
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_ERROR_ALREADY_INITIALIZED, "%d (%s)", r, adsm_last_error());
    expect_message("adsm_init twice");
    cr_assert_eq(adsm_init(NULL), ADSM_ERROR_ALREADY_INITIALIZED);
    check_usable();
    adsm_shutdown();
    /* after shutdown, init works again */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    check_usable();
    adsm_shutdown();
}

Test(errors, init_after_implicit_init) {
    int *p = adsm_alloc(64);
    cr_assert(p, "implicit init: %s", adsm_last_error());
    cr_assert_eq(adsm_init(NULL), ADSM_ERROR_ALREADY_INITIALIZED);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    adsm_shutdown();
}

Test(errors, memset_memcpy_null) {
    start();
    char *p = adsm_alloc(4096);
    cr_assert(p);
    cr_assert_eq(adsm_memset(NULL, 0, 16), ADSM_ERROR_INVALID_VALUE);
    expect_message("adsm_memset(NULL)");
    cr_assert_eq(adsm_memcpy(NULL, p, 16), ADSM_ERROR_INVALID_VALUE);
    expect_message("adsm_memcpy(NULL, p)");
    cr_assert_eq(adsm_memcpy(p, NULL, 16), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_memcpy(NULL, NULL, 16), ADSM_ERROR_INVALID_VALUE);
    /* a range that wraps around the address space */
    cr_assert_eq(adsm_memset(p, 0, SIZE_MAX), ADSM_ERROR_INVALID_VALUE);
    /* the good calls still work */
    cr_assert_eq(adsm_memset(p, 7, 4096), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(p[4095], 7);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    check_usable();
    adsm_shutdown();
}

Test(errors, get_stats_null) {
    start();
    cr_assert_eq(adsm_get_stats(NULL), ADSM_ERROR_INVALID_VALUE);
    expect_message("adsm_get_stats(NULL)");
    check_usable();
    adsm_shutdown();
}

Test(errors, result_strings_name_every_code) {
    static const struct {
        adsm_result code;
        const char *name;
    } codes[] = {
#define ROW(name, value, text) {name, #name},
        ADSM_RESULT_LIST(ROW)
#undef ROW
    };
    size_t n = sizeof codes / sizeof *codes;
    cr_assert_eq(n, (size_t)-ADSM__RESULT_END_, "the list and the enum's end disagree");
    for (size_t i = 0; i < n; i++) cr_assert_eq(codes[i].code, -(int)i, "codes are 0, -1, -2, ... in order");
    for (size_t i = 0; i < n; i++) {
        const char *s = adsm_result_string(codes[i].code);
        cr_assert(s && s[0], "code %d has no string", codes[i].code);
        cr_assert(strstr(s, codes[i].name) != NULL, "adsm_result_string(%d) = '%s' does not name %s",
                  codes[i].code, s, codes[i].name);
        for (size_t j = 0; j < n; j++)
            if (j != i) cr_assert_str_neq(s, adsm_result_string(codes[j].code));
    }
    const char *unknown = adsm_result_string((adsm_result)-999);
    cr_assert(unknown && unknown[0]);
    cr_assert(adsm_result_string((adsm_result)7)[0]);
}

Test(errors, backend_cuda_unavailable) {
    setenv("ADSM_BACKEND", "cuda", 1);
    adsm_result r = adsm_init(NULL);
    cr_assert_eq(r, ADSM_ERROR_BACKEND_UNAVAILABLE, "%d (%s)", r, adsm_last_error());
    expect_message("ADSM_BACKEND=cuda");
    /* nothing was left installed */
    struct sigaction cur;
    sigaction(SIGSEGV, NULL, &cur);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL);
    /* the struct field asks for it too */
    unsetenv("ADSM_BACKEND");
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_BACKEND_UNAVAILABLE);
    /* then a good init works */
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    check_usable();
    adsm_shutdown();
}

Test(errors, backend_auto_picks_emu) {
    setenv("ADSM_BACKEND", "auto", 1);
    cr_assert_eq(adsm_init(NULL), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_backend_name(), "emu");
    check_usable();
    adsm_shutdown();
}

Test(errors, launch_errors) {
    start();
    int *p = adsm_alloc(64 * sizeof(int)), *q = adsm_alloc(64 * sizeof(int));
    cr_assert(p && q);
    adsm_grid empty = adsm_grid_1d(0, 64);
    cr_assert_eq(ADSM_CALL(add_one, empty, p, q, 64), ADSM_ERROR_INVALID_VALUE, "empty grid: %s", adsm_last_error());
    cr_assert_eq(adsm_launch(NULL, adsm_grid_1d(1, 1), p), ADSM_ERROR_INVALID_VALUE);
    expect_message("adsm_launch(NULL)");
    adsm_free(p);
    adsm_free(q);
    check_usable();
    adsm_shutdown();
}

/* ---- many objects --------------------------------------------------------------------------- */

/* .timeout is a watchdog against anything quadratic in the number of objects, not a speed target */
Test(errors, no_leak_over_many_objects, .timeout = 120) {
    start();
    for (int k = 0; k < 20000; k++) {
        int *p = adsm_alloc((size_t)(k % 7 + 1) * 100);
        cr_assert(p, "iteration %d: %s", k, adsm_last_error());
        if (k % 3 == 0) p[0] = k;
        cr_assert_eq(adsm_free(p), ADSM_OK, "iteration %d: %s", k, adsm_last_error());
    }
    cr_assert_eq(live_objects(), 0);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.object_bytes, 0);
    check_usable();
    adsm_shutdown();
}

Test(errors, many_live_objects, .timeout = 120) {
    start();
    enum { N = 50000 };
    unsigned char **objs = malloc(N * sizeof *objs);
    cr_assert(objs);
    for (int k = 0; k < N; k++) {
        objs[k] = adsm_alloc(256);
        cr_assert(objs[k], "object %d: %s", k, adsm_last_error());
    }
    cr_assert_eq(live_objects(), N);
    for (int k = 0; k < N; k++) memset(objs[k], k & 0xff, 256);
    for (int k = 0; k < N; k += 97) cr_assert_eq(objs[k][255], k & 0xff);
    /* every object is distinct (no two share a page) */
    for (int k = 1; k < N; k++) cr_assert_neq(objs[k], objs[k - 1]);
    /* a kernel call with all of them live */
    check_usable();
    for (int k = 0; k < N; k += 1013) cr_assert_eq(objs[k][0], k & 0xff, "object %d after a call", k);
    for (int k = 0; k < N; k++) cr_assert_eq(adsm_free(objs[k]), ADSM_OK, "object %d: %s", k, adsm_last_error());
    cr_assert_eq(live_objects(), 0);
    free(objs);
    check_usable();
    adsm_shutdown();
}
