/* tests/test_emu_bounds.c -- ADSM_EMU_CHECK_BOUNDS: on the emulated device a kernel that reads or
 * writes just past the end of a shared object, or just before its start, fails its launch with
 * ADSM_ERROR_KERNEL_CRASHED and a message naming the kernel, the object (address, size, parameter)
 * and the offset, where without the check it reads or writes its neighbour's device copy. A write
 * into the rest of a small object's last page is found after the kernel; kernels that stay inside
 * their objects work and give the right answers; without the check the layout is as before
 * (objects packed, no guard page) and the overrun is as silent as it was. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dst[i] = src[i + shift] for i < n: shift 1 reads one element past src's end, -1 one before */
ADSM_KERNEL(shifted_read, ADSM_OUT(int, dst), ADSM_IN(int, src), ADSM_VALUE(size_t, n), ADSM_VALUE(long, shift));
void shifted_read(adsm_grid g, int *dst, const int *src, size_t n, long shift) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[(long)i + shift];
    }
}

/* dst[i + shift] = v for i < n */
ADSM_KERNEL(shifted_write, ADSM_OUT(int, dst), ADSM_VALUE(size_t, n), ADSM_VALUE(long, shift), ADSM_VALUE(int, v));
void shifted_write(adsm_grid g, int *dst, size_t n, long shift, int v) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[(long)i + shift] = v;
    }
}

/* c[i] = a[i] + b[i] */
ADSM_KERNEL(vec_add, ADSM_OUT(int, c), ADSM_IN(int, a), ADSM_IN(int, b), ADSM_VALUE(size_t, n));
void vec_add(adsm_grid g, int *c, const int *a, const int *b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
}

/* reads the int at `where`, an address the kernel was not given as a parameter */
ADSM_KERNEL(read_at, ADSM_OUT(int, dst), ADSM_VALUE(uintptr_t, where));
void read_at(adsm_grid g, int *dst, uintptr_t where) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) dst[0] = *(const int *)where;
    }
}

static void start(int check) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.emu_check_bounds = check;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

static adsm_grid grid_for(size_t n) { return adsm_grid_1d((uint32_t)((n + 127) / 128), 128); }

/* adsm_sync fails with a crash whose message has every one of the NULL-terminated pieces. */
static void expect_reported(const char *first, ...) {
    adsm_result r = adsm_sync();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", adsm_last_error());
    cr_assert_eq(r, ADSM_ERROR_KERNEL_CRASHED, "adsm_sync: %d (%s)", r, msg);
    va_list ap;
    va_start(ap, first);
    for (const char *piece = first; piece; piece = va_arg(ap, const char *))
        cr_assert(strstr(msg, piece) != NULL, "'%s' not in the message: %s", piece, msg);
    va_end(ap);
    cr_assert_eq(adsm_sync(), ADSM_OK, "reported once: %s", adsm_last_error());
}

static const char *addr_text(const void *p) {
    static char text[8][64];
    static int next;
    char *t = text[next++ % 8];
    snprintf(t, 64, "object %p ", p);
    return t;
}

static int *filled(size_t n, int base) {
    int *p = adsm_alloc(n * sizeof *p);
    cr_assert(p, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) p[i] = base + (int)i;
    return p;
}

/* a kernel that stays inside its objects still works on them, and its results are right */
static void check_in_bounds(int *a, int *b, size_t n) {
    int *c = adsm_alloc(n * sizeof *c);
    cr_assert(c, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) a[i] = (int)i, b[i] = 3 * (int)i;
    cr_assert_eq(ADSM_CALL(vec_add, grid_for(n), c, a, b, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(c[i], 4 * (int)i, "c[%zu] = %d", i, c[i]);
    adsm_free(c);
}

Test(emu_bounds, read_one_past_the_end_is_reported) {
    start(1);
    const size_t n = 1024; /* 4096 bytes: the object ends on a page boundary */
    int *src = filled(n, 1), *neighbour = filled(n, 5000), *dst = filled(n, 0);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, src, n, 1L), ADSM_OK, "%s", adsm_last_error());
    expect_reported("kernel 'shifted_read' read past the end of ", addr_text(src),
                    "(4096 bytes, its parameter 'src') at offset 4096", NULL);
    check_in_bounds(src, neighbour, n);
    adsm_free(src);
    adsm_free(neighbour);
    adsm_free(dst);
    adsm_shutdown();
}

Test(emu_bounds, write_one_past_the_end_is_reported) {
    start(1);
    const size_t n = 1024;
    int *dst = filled(n, 0), *neighbour = filled(n, 5000);
    cr_assert_eq(ADSM_CALL(shifted_write, grid_for(n), dst, n, 1L, -7), ADSM_OK, "%s", adsm_last_error());
    expect_reported("kernel 'shifted_write' wrote past the end of ", addr_text(dst),
                    "(4096 bytes, its parameter 'dst') at offset 4096", NULL);
    /* the neighbour was not written, on the host or on the device */
    int *copy = filled(n, 0);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), copy, neighbour, n, 0L), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(neighbour[i], 5000 + (int)i);
        cr_assert_eq(copy[i], 5000 + (int)i, "device copy of the neighbour [%zu] = %d", i, copy[i]);
    }
    check_in_bounds(dst, neighbour, n);
    adsm_free(copy);
    adsm_free(dst);
    adsm_free(neighbour);
    adsm_shutdown();
}

Test(emu_bounds, read_and_write_before_the_start_are_reported) {
    start(1);
    const size_t n = 1024;
    int *before = filled(n, 9000), *obj = filled(n, 1), *dst = filled(n, 0);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, obj, n, -1L), ADSM_OK);
    expect_reported("kernel 'shifted_read' read before the start of ", addr_text(obj),
                    "(4096 bytes, its parameter 'src') at offset -4", NULL);
    cr_assert_eq(ADSM_CALL(shifted_write, grid_for(n), obj, n, -1L, -7), ADSM_OK);
    expect_reported("kernel 'shifted_write' wrote before the start of ", addr_text(obj),
                    "(4096 bytes, its parameter 'dst') at offset -4", NULL);
    for (size_t i = 0; i < n; i++) cr_assert_eq(before[i], 9000 + (int)i);
    check_in_bounds(obj, before, n);
    adsm_free(before);
    adsm_free(obj);
    adsm_free(dst);
    adsm_shutdown();
}

/* 1000 bytes: the last page has 3096 bytes past the object's end. A write there is found after the
 * kernel; an access past the page is caught at once, and the message gives the object's size. */
Test(emu_bounds, object_not_ending_on_a_page_boundary) {
    start(1);
    const size_t n = 250;
    int *obj = filled(n, 1), *neighbour = filled(1024, 5000), *dst = filled(2048, 0);
    cr_assert_eq(ADSM_CALL(shifted_write, grid_for(n), obj, n, 1L, 9), ADSM_OK);
    expect_reported("kernel 'shifted_write' wrote past the end of ", addr_text(obj),
                    "(1000 bytes, its parameter 'dst') at offset 1000", "within its last page", NULL);
    /* 1025 ints from obj run past its page: reads in the rest of the page go unseen, the one past
     * it faults */
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(1025), dst, obj, (size_t)1025, 0L), ADSM_OK);
    expect_reported("kernel 'shifted_read' read past the end of ", addr_text(obj),
                    "(1000 bytes, its parameter 'src') at offset 4096", NULL);
    /* the slack was cleared after the report: an in-bounds kernel passes, and the next overrun is
     * seen again */
    check_in_bounds(obj, neighbour, n);
    cr_assert_eq(ADSM_CALL(shifted_write, grid_for(n), obj, n, 3L, 9), ADSM_OK);
    expect_reported("wrote past the end of ", addr_text(obj), "at offset 1000", NULL);
    adsm_free(obj);
    adsm_free(neighbour);
    adsm_free(dst);
    adsm_shutdown();
}

/* The CPU may scribble in the rest of an object's last page (no protection is that fine): the
 * device then finds those bytes non-zero before the kernel and does not blame it. */
Test(emu_bounds, cpu_bytes_past_the_end_are_not_blamed_on_the_kernel) {
    start(1);
    const size_t n = 250;
    int *obj = filled(n, 1);
    ((volatile char *)obj)[1000] = 1;
    cr_assert_eq(ADSM_CALL(shifted_write, grid_for(n), obj, n, 0L, 4), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(obj[i], 4);
    adsm_free(obj);
    adsm_shutdown();
}

Test(emu_bounds, device_buffer_and_unnamed_object_are_named) {
    start(1);
    const size_t n = 1024;
    int *dst = filled(n, 0), *host = malloc(n * sizeof *host);
    cr_assert(host);
    for (size_t i = 0; i < n; i++) host[i] = (int)i;
    int *buf = adsm_dev_alloc(n * sizeof *buf);
    cr_assert(buf, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(buf, host, n * sizeof *buf), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, buf, n, 0L), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "in bounds: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(dst[i], (int)i);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, buf, n, 1L), ADSM_OK);
    expect_reported("kernel 'shifted_read' read past the end of ", addr_text(buf),
                    "(4096 bytes, its parameter 'src') at offset 4096", NULL);
    /* an object reached through a pointer value, not a parameter: its pages are named */
    int *hidden = filled(n, 3);
    cr_assert_eq(ADSM_CALL(read_at, adsm_grid_1d(1, 1), dst, (uintptr_t)(hidden + n)), ADSM_OK);
    expect_reported("kernel 'read_at' read past the end of ", addr_text(hidden),
                    "(4096 bytes of pages, not one of its parameters) at offset 4096", NULL);
    adsm_dev_free(buf);
    adsm_free(hidden);
    adsm_free(dst);
    free(host);
    adsm_shutdown();
}

Test(emu_bounds, safe_object_is_named_at_its_device_address) {
    start(1);
    const size_t n = 1024;
    int *dst = filled(n, 0), *safe = adsm_safe_alloc(n * sizeof *safe);
    cr_assert(safe, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) safe[i] = (int)i;
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, safe, n, 0L), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "in bounds: %s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(dst[i], (int)i);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, safe, n, 1L), ADSM_OK);
    expect_reported("kernel 'shifted_read' read past the end of object ",
                    "(4096 bytes, its parameter 'src') at offset 4096", NULL);
    adsm_free(safe);
    adsm_free(dst);
    adsm_shutdown();
}

Test(emu_bounds, in_bounds_kernels_on_many_sizes_are_right) {
    start(1);
    size_t sizes[] = {1, 3, 250, 1024, 1025, 4096, 70000, (2 << 20) / 4, (2 << 20) / 4 + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int *a = filled(sizes[k], 0), *b = filled(sizes[k], 0);
        check_in_bounds(a, b, sizes[k]);
        adsm_free(a);
        adsm_free(b);
    }
    adsm_shutdown();
}

Test(emu_bounds, objects_are_apart_with_the_check_and_packed_without) {
    for (int check = 0; check <= 1; check++) {
        start(check);
        char *a = adsm_alloc(4096), *b = adsm_alloc(4096);
        cr_assert(a && b, "%s", adsm_last_error());
        size_t gap = (size_t)(b > a ? b - a : a - b);
        if (check) cr_assert_geq(gap, 2 * 4096, "a guard page between: %zu", gap);
        else cr_assert_eq(gap, 4096, "packed as before: %zu", gap);
        adsm_free(a);
        adsm_free(b);
        adsm_shutdown();
    }
}

/* Off (the default), a read one past the end reads the neighbour's device copy, as before. */
Test(emu_bounds, without_the_check_the_overrun_is_silent_as_before) {
    start(0);
    const size_t n = 1024;
    int *src = filled(n, 1), *neighbour = filled(n, 5000), *dst = filled(n, 0);
    cr_assert_eq((char *)neighbour, (char *)src + 4096, "packed");
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, src, n, 1L), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(dst[n - 1], 5000, "the neighbour's first element");
    adsm_free(src);
    adsm_free(neighbour);
    adsm_free(dst);
    adsm_shutdown();
}

Test(emu_bounds, environment_turns_it_on_and_refuses_other_values) {
    cr_assert_eq(setenv("ADSM_EMU_CHECK_BOUNDS", "on", 1), 0);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_EMU_CHECK_BOUNDS='on'"), "%s", adsm_last_error());
    cr_assert_eq(setenv("ADSM_EMU_CHECK_BOUNDS", "1", 1), 0);
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    const size_t n = 1024;
    int *src = filled(n, 1), *dst = filled(n, 0);
    cr_assert_eq(ADSM_CALL(shifted_read, grid_for(n), dst, src, n, 1L), ADSM_OK);
    expect_reported("kernel 'shifted_read' read past the end of ", addr_text(src), "at offset 4096", NULL);
    adsm_free(src);
    adsm_free(dst);
    adsm_shutdown();
    cr_assert_eq(unsetenv("ADSM_EMU_CHECK_BOUNDS"), 0);
}
