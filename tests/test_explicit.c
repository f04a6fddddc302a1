/* tests/test_explicit.c -- the explicit path: device-only buffers, synchronous copies ordered
 * after launches, and device pointers as kernel arguments, on emu and host. This is what the
 * benchmarks' hand-written baselines are made of, and what programs mixing both styles use. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <sys/mman.h>
#include <errno.h>

ADSM_KERNEL(vadd, ADSM_OUT(int, c), ADSM_IN(int, a), ADSM_IN(int, b), ADSM_VALUE(size_t, n));

void vadd(adsm_grid g, int *c, const int *a, const int *b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
}

static void init(adsm_backend_kind backend) {
    adsm_config cfg = {0};
    cfg.backend = backend;
    cfg.emu_memory = (size_t)64 << 20;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

static adsm_stats stats(void) {
    adsm_stats s;
    adsm_get_stats(&s);
    return s;
}

static void round_trip(adsm_backend_kind backend) {
    enum { N = 100000 };
    static int ha[N], hb[N], hc[N];
    init(backend);
    for (int i = 0; i < N; i++) {
        ha[i] = i;
        hb[i] = 3 * i;
    }
    int *da = adsm_dev_alloc(sizeof ha), *db = adsm_dev_alloc(sizeof hb), *dc = adsm_dev_alloc(sizeof hc);
    cr_assert(da && db && dc, "%s", adsm_last_error());
    cr_assert_neq(da, db);
    cr_assert_eq(adsm_copy_to_device(da, ha, sizeof ha), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(db, hb, sizeof hb), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((N + 255) / 256, 256), dc, da, db, N), ADSM_OK, "%s", adsm_last_error());
    /* the copy back is ordered after the kernel without an adsm_sync */
    cr_assert_eq(adsm_copy_from_device(hc, dc, sizeof hc), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < N; i++) cr_assert_eq(hc[i], 4 * i, "element %d", i);
    adsm_stats s = stats();
    if (backend == ADSM_BACKEND_EMU) {
        cr_assert_eq(s.h2d_bytes, 2 * sizeof ha);
        cr_assert_eq(s.d2h_bytes, sizeof hc);
    }
    cr_assert_eq(s.read_faults + s.write_faults, 0, "the explicit path never faults");
    cr_assert_eq(adsm_sync(), ADSM_OK);
    cr_assert_eq(adsm_dev_free(da), ADSM_OK);
    cr_assert_eq(adsm_dev_free(db), ADSM_OK);
    cr_assert_eq(adsm_dev_free(dc), ADSM_OK);
    adsm_shutdown();
}

Test(explicit, round_trip_emu) { round_trip(ADSM_BACKEND_EMU); }
Test(explicit, round_trip_host) { round_trip(ADSM_BACKEND_HOST); }

Test(explicit, partial_copies_at_offsets) {
    init(ADSM_BACKEND_EMU);
    unsigned char *d = adsm_dev_alloc(10000), in[300], out[10000];
    for (int i = 0; i < 300; i++) in[i] = (unsigned char)(i * 7 + 1);
    cr_assert_eq(adsm_copy_to_device(d + 4000, in, sizeof in), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_from_device(out, d, sizeof out), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(out[i], i >= 4000 && i < 4300 ? in[i - 4000] : 0, "byte %d (device buffers start zeroed)", i);
    adsm_shutdown();
}

Test(explicit, mixing_with_shared_objects) {
    init(ADSM_BACKEND_EMU);
    enum { N = 5000 };
    int *shared_a = adsm_alloc(N * sizeof(int)), *dev_b = adsm_dev_alloc(N * sizeof(int));
    int *shared_c = adsm_alloc(N * sizeof(int)), hb[N];
    for (int i = 0; i < N; i++) {
        shared_a[i] = i;
        hb[i] = 10;
    }
    cr_assert_eq(adsm_copy_to_device(dev_b, hb, sizeof hb), ADSM_OK);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(N, 1), shared_c, shared_a, dev_b, N), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK);
    for (int i = 0; i < N; i++) cr_assert_eq(shared_c[i], i + 10);
    adsm_shutdown();
}

/* adsm_shutdown frees the adsm_host_alloc buffers still live, as it frees objects: kept mapped,
 * they could never be freed (adsm_host_free refused them once the runtime that made them was
 * gone), and each init and shutdown round of a program leaked them. */
Test(explicit, shutdown_frees_live_host_buffers) {
    for (int round = 0; round < 2; round++) {
        init(ADSM_BACKEND_EMU);
        unsigned char *h = adsm_host_alloc((size_t)8 << 20), resident;
        cr_assert_not_null(h, "%s", adsm_last_error());
        memset(h, 1, (size_t)8 << 20);
        adsm_shutdown();
        cr_assert_eq(mincore(h, 4096, &resident), -1, "round %d: the buffer at %p outlived adsm_shutdown", round,
                     (void *)h);
        cr_assert_eq(errno, ENOMEM);
    }
}

Test(explicit, bad_input) {
    init(ADSM_BACKEND_EMU);
    int plain[16] = {0};
    int *d = adsm_dev_alloc(64), *shared = adsm_alloc(64);
    cr_assert_null(adsm_dev_alloc(0));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_VALUE);
    cr_assert_null(adsm_dev_alloc((size_t)1 << 50));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY);
    cr_assert_eq(adsm_copy_to_device(plain, plain, 16), ADSM_ERROR_NOT_SHARED, "host memory is no device buffer");
    cr_assert_eq(adsm_copy_to_device(shared, plain, 16), ADSM_ERROR_NOT_SHARED, "shared objects use adsm_memcpy");
    cr_assert_eq(adsm_copy_to_device(d, shared, 16), ADSM_ERROR_INVALID_VALUE, "a shared host side is refused");
    cr_assert_eq(adsm_copy_to_device(d + 8, plain, 64), ADSM_ERROR_INVALID_VALUE, "past the end");
    cr_assert(strstr(adsm_last_error(), "past the end") != NULL, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_from_device(NULL, d, 4), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_dev_free(d + 1), ADSM_ERROR_NOT_OBJECT_START);
    cr_assert_eq(adsm_dev_free(plain), ADSM_ERROR_NOT_SHARED);
    cr_assert_eq(adsm_dev_free(d), ADSM_OK);
    cr_assert_eq(adsm_dev_free(d), ADSM_ERROR_NOT_SHARED, "double free");
    cr_assert_eq(adsm_dev_free(NULL), ADSM_OK);
    adsm_stats s = stats();
    cr_assert_eq(s.h2d_bytes + s.d2h_bytes, 0, "refused copies move nothing");
    adsm_shutdown();
}

/* A 100-byte buffer's span is a page: the bytes past its size are no part of it. A range starting
 * there, in any copy or memset, is refused like one running past the end (the length check
 * wrapped around and let any length through, into the next buffer); a device buffer is no host
 * side of an explicit copy (the backend's copy faulted under the runtime lock). Nothing moves. */
Test(explicit, past_a_buffers_size_and_device_buffers_as_host_sides_are_refused) {
    init(ADSM_BACKEND_EMU);
    enum { SIZE = 100 };
    unsigned char *a = adsm_dev_alloc(SIZE), *b = adsm_dev_alloc(SIZE), junk[4096], back[SIZE];
    cr_assert(a && b, "%s", adsm_last_error());
    memset(junk, 0xab, sizeof junk);
    cr_assert_eq(adsm_memset(a, 1, SIZE), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(b, 2, SIZE), ADSM_OK, "%s", adsm_last_error());
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    cr_assert_eq(adsm_copy_to_device(a + 200, junk, page - 200), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "past the end"), "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(a + SIZE, junk, 1), ADSM_ERROR_INVALID_VALUE, "one past the end");
    cr_assert_eq(adsm_copy_to_device(a + SIZE, junk, 0), ADSM_OK, "nothing, at its end");
    cr_assert_eq(adsm_copy_from_device(junk, a + 200, page - 200), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_memset(a + 150, 0xcd, page - 150), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_memcpy(a + 150, junk, page - 150), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_memcpy(junk, a + 150, page - 150), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_copy_from_device(b, a, SIZE), ADSM_ERROR_INVALID_VALUE, "a device buffer as the host side");
    cr_assert(strstr(adsm_last_error(), "is a device buffer"), "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(a, b, SIZE), ADSM_ERROR_INVALID_VALUE, "a device buffer as the host side");
    cr_assert_eq(adsm_copy_from_device(back, a, SIZE), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < SIZE; i++) cr_assert_eq(back[i], 1, "a[%d] = %#x", i, back[i]);
    cr_assert_eq(adsm_copy_from_device(back, b, SIZE), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < SIZE; i++) cr_assert_eq(back[i], 2, "b[%d] = %#x: written through a's padding", i, back[i]);
    adsm_stats st = stats();
    cr_assert_eq(st.h2d_bytes, 0, "refused copies move nothing");
    cr_assert_eq(adsm_dev_free(a), ADSM_OK);
    cr_assert_eq(adsm_dev_free(b), ADSM_OK);
    adsm_shutdown();
}

Test(explicit, device_memory_is_accounted) {
    init(ADSM_BACKEND_EMU); /* 64 MiB device */
    void *a = adsm_dev_alloc((size_t)40 << 20);
    cr_assert_not_null(a, "%s", adsm_last_error());
    cr_assert_null(adsm_alloc((size_t)40 << 20), "shared objects and device buffers share the capacity");
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY);
    cr_assert_eq(adsm_dev_free(a), ADSM_OK);
    void *b = adsm_alloc((size_t)40 << 20);
    cr_assert_not_null(b, "%s", adsm_last_error());
    adsm_shutdown();
}

Test(explicit, cpu_touching_a_device_buffer_crashes, .signal = SIGSEGV) {
    init(ADSM_BACKEND_EMU);
    volatile int *d = adsm_dev_alloc(4096);
    d[0] = 1; /* device memory is not host memory, as on a GPU */
}

/* Shutdown with many live device buffers and safe objects frees all of them (LeakSanitizer and
 * ASan runs check the "all" and the "no use after free"). */
Test(explicit, shutdown_with_live_buffers) {
    init(ADSM_BACKEND_EMU);
    for (int i = 0; i < 64; i++) {
        cr_assert_not_null(adsm_dev_alloc(4096 * (size_t)(i % 5 + 1)), "%s", adsm_last_error());
        cr_assert_not_null(adsm_safe_alloc(1000), "%s", adsm_last_error());
    }
    adsm_shutdown();
    init(ADSM_BACKEND_EMU);
    cr_assert_not_null(adsm_dev_alloc((size_t)60 << 20), "the whole device is free again: %s", adsm_last_error());
    adsm_shutdown();
}

/* adsm_host_alloc (3 MiB: 2 MiB aligned), plain writable memory the copies use like any other,
 * freed by adsm_host_free; a pointer it did not give is refused with a message, and nothing is
 * lost. */
Test(explicit, host_alloc_round_trip) {
    init(ADSM_BACKEND_EMU);
    size_t n = 3 << 20; /* not a multiple of a huge page */
    unsigned char *h = adsm_host_alloc(n), *back = adsm_host_alloc(n);
    cr_assert(h && back, "%s", adsm_last_error());
    cr_assert_eq((uintptr_t)h % (2u << 20), 0, "2 MiB aligned");
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7);
    unsigned char *d = adsm_dev_alloc(n);
    cr_assert_not_null(d, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(d, h, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_from_device(back, d, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(memcmp(h, back, n), 0);
    cr_assert_eq(adsm_host_free(h + 4096), ADSM_ERROR_INVALID_VALUE, "the inside of a buffer is not a buffer");
    cr_assert(strstr(adsm_last_error(), "adsm_host_alloc") != NULL, "%s", adsm_last_error());
    int on_stack = 0;
    cr_assert_eq(adsm_host_free(&on_stack), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(back[n - 1], (unsigned char)((n - 1) * 7), "a refused free frees nothing");
    cr_assert_eq(adsm_host_free(h), ADSM_OK);
    cr_assert_eq(adsm_host_free(h), ADSM_ERROR_INVALID_VALUE, "freed twice");
    cr_assert_eq(adsm_host_free(NULL), ADSM_OK);
    cr_assert_null(adsm_host_alloc(0));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_host_free(back), ADSM_OK);
    cr_assert_eq(adsm_dev_free(d), ADSM_OK);
    adsm_shutdown();
}

/* Resident memory of this process, from /proc/self/statm, in bytes. */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long total = 0, resident = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &total, &resident), 2);
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* adsm_host_alloc sizes a buffer as adsm sizes an object: page granular, huge pages only from
 * 2 MiB up. 256 written 64-byte buffers took 512 MiB when every buffer was a huge page; a page
 * each is 1 MiB. The large one keeps its huge-page alignment. */
Test(explicit, small_host_buffers_take_a_page_each) {
    init(ADSM_BACKEND_EMU);
    enum { N = 256 };
    unsigned char *small[N];
    size_t before = resident_bytes();
    for (int i = 0; i < N; i++) {
        small[i] = adsm_host_alloc(64);
        cr_assert_not_null(small[i], "%s", adsm_last_error());
        cr_assert_eq((uintptr_t)small[i] % (uintptr_t)sysconf(_SC_PAGESIZE), 0, "page aligned");
        memset(small[i], i, 64);
    }
    size_t grown = resident_bytes() - before;
    cr_assert_lt(grown, (size_t)32 << 20, "256 buffers of 64 bytes made the process %zu MiB larger", grown >> 20);
    unsigned char *large = adsm_host_alloc((2u << 20) + 1);
    cr_assert_not_null(large, "%s", adsm_last_error());
    cr_assert_eq((uintptr_t)large % (2u << 20), 0, "2 MiB aligned from a huge page up");
    large[2u << 20] = 1; /* its last byte is writable */
    for (int i = 0; i < N; i++) {
        cr_assert_eq(small[i][63], (unsigned char)i);
        cr_assert_eq(adsm_host_free(small[i]), ADSM_OK);
    }
    cr_assert_eq(adsm_host_free(large), ADSM_OK);
    adsm_shutdown();
}

/* adsm_memset / adsm_memcpy on device buffers (issue 11, item 7): done on the device, in every
 * direction, with plain and shared memory on the other side; the results read back exactly. */
static void memops_on_device_buffers(adsm_backend_kind backend) {
    enum { N = 300000 }; /* more than one bounce piece */
    init(backend);
    int *d1 = adsm_dev_alloc(N * sizeof(int)), *d2 = adsm_dev_alloc(N * sizeof(int));
    int *shared = adsm_alloc(N * sizeof(int)), *plain = malloc(N * sizeof(int));
    cr_assert(d1 && d2 && shared && plain, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(d1, 0x11, N * sizeof(int)), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_from_device(plain, d1, N * sizeof(int)), ADSM_OK);
    for (int i = 0; i < N; i += 997) cr_assert_eq(plain[i], 0x11111111);
    for (int i = 0; i < N; i++) plain[i] = i;
    cr_assert_eq(adsm_memcpy(d1, plain, N * sizeof(int)), ADSM_OK, "%s", adsm_last_error()); /* host to device */
    cr_assert_eq(adsm_memcpy(d2, d1, N * sizeof(int)), ADSM_OK, "%s", adsm_last_error());    /* device to device */
    cr_assert_eq(adsm_memcpy(shared, d2, N * sizeof(int)), ADSM_OK, "%s", adsm_last_error()); /* into shared */
    for (int i = 0; i < N; i++) cr_assert_eq(shared[i], i, "shared[%d]", i);
    for (int i = 0; i < N; i++) shared[i] = -i;
    cr_assert_eq(adsm_memcpy(d1, shared, N * sizeof(int)), ADSM_OK, "%s", adsm_last_error()); /* out of shared */
    memset(plain, 0, N * sizeof(int));
    cr_assert_eq(adsm_memcpy(plain + 1, d1 + 1, 10 * sizeof(int)), ADSM_OK, "%s", adsm_last_error()); /* to plain */
    cr_assert_eq(plain[0], 0);
    for (int i = 1; i <= 10; i++) cr_assert_eq(plain[i], -i);
    cr_assert_eq(plain[11], 0);
    cr_assert_eq(adsm_memcpy(plain, d1 + N - 5, 10 * sizeof(int)), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "edge of a device buffer"), "%s", adsm_last_error());
    /* onto itself, or overlapping, across the edge: refused too, nothing moved */
    cr_assert_eq(adsm_memcpy(d1 + N - 5, d1 + N - 5, 10 * sizeof(int)), ADSM_ERROR_INVALID_VALUE);
    cr_assert(strstr(adsm_last_error(), "edge of a device buffer"), "%s", adsm_last_error());
    cr_assert_eq(adsm_memcpy(d1 + N - 5, d1 + N - 7, 10 * sizeof(int)), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_memcpy(d1 + 1, d1 - 1, (1 << 20) + 100000), ADSM_ERROR_INVALID_VALUE); /* across its start */
    cr_assert_eq(adsm_copy_from_device(plain, d1, N * sizeof(int)), ADSM_OK);
    for (int i = 0; i < N; i++) cr_assert_eq(plain[i], -i, "d1[%d] moved by a refused copy", i);
    cr_assert_eq(adsm_memset(d2 + N - 1, 0, 8), ADSM_ERROR_INVALID_VALUE);
    free(plain);
    adsm_free(shared);
    adsm_dev_free(d1);
    adsm_dev_free(d2);
    adsm_shutdown();
}

Test(explicit, memops_on_device_buffers_emu, .timeout = 30) { memops_on_device_buffers(ADSM_BACKEND_EMU); }
Test(explicit, memops_on_device_buffers_host, .timeout = 30) { memops_on_device_buffers(ADSM_BACKEND_HOST); }
