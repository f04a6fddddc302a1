/* tests/test_safe.c -- "safe" objects (adsm_safe_alloc): a host address distinct from the device
 * address, translation with adsm_safe(), automatic translation of host pointers at ADSM_CALL, and
 * freeing. Emu backend; each test is its own process with its own runtime. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

ADSM_KERNEL(copy_bytes, ADSM_OUT(unsigned char, dst), ADSM_IN(unsigned char, src), ADSM_VALUE(size_t, n));

void copy_bytes(adsm_grid g, unsigned char *dst, const unsigned char *src, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) dst[i] = src[i];
    }
}

/* records the addresses the kernel got */
ADSM_KERNEL(show_addresses, ADSM_OUT(uintptr_t, out), ADSM_IN(unsigned char, p));

void show_addresses(adsm_grid g, uintptr_t *out, const unsigned char *p) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) {
            out[0] = (uintptr_t)p;
            out[1] = p[0];
        }
    }
}

static void start(void) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
}

static size_t blocks_for(size_t n) { return (n + 255) / 256; }

Test(safe, distinct_addresses_map_every_byte) {
    start();
    const size_t n = 3 * 4096 + 123;
    unsigned char *p = adsm_safe_alloc(n);
    cr_assert(p, "adsm_safe_alloc: %s", adsm_last_error());
    unsigned char *d = adsm_safe(p);
    cr_assert(d, "adsm_safe: %s", adsm_last_error());
    cr_assert_neq((uintptr_t)d, (uintptr_t)p, "a safe object's device address is its host address");
    for (size_t k = 0; k < n; k++) {
        unsigned char *dk = adsm_safe(p + k);
        cr_assert_eq((uintptr_t)dk, (uintptr_t)(d + k), "adsm_safe(p + %zu) = %p, want %p", k, (void *)dk,
                     (void *)(d + k));
    }
    /* the device address is not a host address of any object */
    cr_assert_eq(adsm_block_state(d), 0);
    cr_assert_eq(adsm_block_state(p), 'R');
    /* the host side is ordinary, zero-filled memory */
    for (size_t k = 0; k < n; k++) cr_assert_eq(p[k], 0);
    /* two safe objects get different device addresses */
    unsigned char *q = adsm_safe_alloc(n);
    cr_assert(q);
    unsigned char *dq = adsm_safe(q);
    cr_assert(dq && dq != d && dq != q);
    cr_assert(dq >= d + n || dq + n <= d, "device ranges overlap");
    cr_assert_eq(adsm_free(p), ADSM_OK);
    cr_assert_eq(adsm_free(q), ADSM_OK);
    adsm_shutdown();
}

Test(safe, past_the_end_is_not_shared) {
    start();
    unsigned char *p = adsm_safe_alloc(100);
    cr_assert(p);
    cr_assert_null(adsm_safe(p + 100), "adsm_safe of one past the object's size");
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    adsm_free(p);
    adsm_shutdown();
}

Test(safe, normal_object_is_its_own_device_address) {
    start();
    char *p = adsm_alloc(10000);
    cr_assert(p);
    cr_assert_eq((uintptr_t)adsm_safe(p), (uintptr_t)p);
    cr_assert_eq((uintptr_t)adsm_safe(p + 9999), (uintptr_t)(p + 9999));
    adsm_free(p);
    adsm_shutdown();
}

Test(safe, non_shared_pointer) {
    start();
    char *heap = malloc(64);
    char local[16];
    cr_assert(heap);
    cr_assert_null(adsm_safe(heap));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    cr_assert(adsm_last_error()[0] != 0);
    adsm_alloc(0); /* sets another error in between */
    cr_assert_null(adsm_safe(local));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    cr_assert_null(adsm_safe(NULL));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    /* a freed safe object no longer translates */
    char *p = adsm_safe_alloc(64);
    cr_assert(p);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    cr_assert_null(adsm_safe(p));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_NOT_SHARED);
    free(heap);
    adsm_shutdown();
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed);
}

static void expect(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(p[i], (unsigned char)(i * 31 + seed), "byte %zu is %u, want %u", i, p[i],
                     (unsigned char)(i * 31 + seed));
}

Test(safe, call_translates_host_pointers) {
    start();
    const size_t n = 100000;
    unsigned char *src = adsm_safe_alloc(n), *dst = adsm_safe_alloc(n);
    cr_assert(src && dst);
    fill(src, n, 3);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), dst, src, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_block_state(dst), 'I');
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(dst, n, 3);
    expect(src, n, 3);
    /* the kernel got the device address, and the data behind it */
    uintptr_t *seen = adsm_alloc(2 * sizeof *seen);
    cr_assert(seen);
    cr_assert_eq(ADSM_CALL(show_addresses, adsm_grid_1d(1, 1), seen, src), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[0], (uintptr_t)adsm_safe(src));
    cr_assert_eq(seen[1], 3);
    /* interior host pointers translate too */
    cr_assert_eq(ADSM_CALL(show_addresses, adsm_grid_1d(1, 1), seen, src + 5000), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(seen[0], (uintptr_t)adsm_safe(src) + 5000);
    cr_assert_eq(seen[1], src[5000]);
    adsm_free(src);
    adsm_free(dst);
    adsm_free(seen);
    adsm_shutdown();
}

/* On the host backend kernels run on the host pages and nothing is copied, so a safe object is an
 * ordinary one there (its device address is its host address): what the CPU writes a kernel
 * reads, and what a kernel writes the CPU reads. It used to get a device range of its own, which
 * nobody filled: the kernel read zeros, and the CPU never saw the kernel's writes. */
Test(safe, on_the_host_backend_safe_objects_are_ordinary) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_HOST;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "adsm_init: %s", adsm_last_error());
    const size_t n = 10000;
    unsigned char *s = adsm_safe_alloc(n), *plain = adsm_alloc(n), *out = adsm_safe_alloc(n);
    cr_assert(s && plain && out, "%s", adsm_last_error());
    cr_assert_eq((uintptr_t)adsm_safe(s), (uintptr_t)s);
    fill(s, n, 5);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), plain, s, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(plain, n, 5);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), out, plain, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(out, n, 5);
    adsm_shutdown();
}

Test(safe, call_with_explicit_device_pointers) {
    start();
    const size_t n = 50000;
    unsigned char *src = adsm_safe_alloc(n), *dst = adsm_safe_alloc(n);
    cr_assert(src && dst);
    fill(src, n, 11);
    /* explicit device address for the IN parameter */
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), dst, adsm_safe(src), n),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(dst, n, 11);
    /* explicit device address for the OUT parameter: it must still be invalidated and fetched */
    fill(src, n, 77);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), adsm_safe(dst), src, n),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(dst), 'I');
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(dst, n, 77);
    /* both explicit, at an offset */
    fill(src, n, 200);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d(4, 256), adsm_safe(dst + 1000), adsm_safe(src + 2000), 1000),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < 1000; i++) cr_assert_eq(dst[1000 + i], src[2000 + i], "dst[%zu]", 1000 + i);
    cr_assert_eq(dst[999], (unsigned char)(999 * 31 + 77), "bytes outside the copy changed");
    cr_assert_eq(dst[2000], (unsigned char)(2000 * 31 + 77), "bytes outside the copy changed");
    adsm_free(src);
    adsm_free(dst);
    adsm_shutdown();
}

/* Where the device's addresses differ (ADSM_EMU_SAME_ADDRESS=0), adsm_safe of an ordinary object
 * is a device address too: as an argument it is the object, as a safe object's is (it was refused
 * as "not inside a shared object"), and an output named that way is still invalidated. */
Test(safe, device_addresses_of_ordinary_objects_as_arguments) {
    setenv("ADSM_EMU_SAME_ADDRESS", "0", 1);
    start();
    const size_t n = 50000;
    unsigned char *src = adsm_alloc(n), *dst = adsm_alloc(n);
    cr_assert(src && dst);
    cr_assert_neq((uintptr_t)adsm_safe(src), (uintptr_t)src, "the addresses should differ in this test");
    fill(src, n, 11);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), adsm_safe(dst), adsm_safe(src), n),
                 ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(dst), 'I');
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(dst, n, 11);
    adsm_free(src);
    adsm_free(dst);
    adsm_shutdown();
    unsetenv("ADSM_EMU_SAME_ADDRESS");
}

Test(safe, safe_and_normal_objects_mix) {
    start();
    const size_t n = 20000;
    unsigned char *src = adsm_alloc(n), *dst = adsm_safe_alloc(n), *back = adsm_alloc(n);
    cr_assert(src && dst && back);
    fill(src, n, 5);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), dst, src, n), ADSM_OK);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d((uint32_t)blocks_for(n), 256), back, dst, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(dst, n, 5);
    expect(back, n, 5);
    adsm_free(src);
    adsm_free(dst);
    adsm_free(back);
    adsm_shutdown();
}

Test(safe, free_and_double_free) {
    start();
    unsigned char *p = adsm_safe_alloc(8192);
    cr_assert(p);
    p[0] = 1;
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.objects, 1);
    cr_assert_eq(adsm_free(p + 1), ADSM_ERROR_NOT_OBJECT_START);
    cr_assert_eq(adsm_free(adsm_safe(p)), ADSM_ERROR_NOT_SHARED, "the device address is not the object: %s",
                 adsm_last_error());
    cr_assert_eq(adsm_free(p), ADSM_OK, "%s", adsm_last_error());
    adsm_get_stats(&s);
    cr_assert_eq(s.objects, 0);
    adsm_result r = adsm_free(p);
    cr_assert_eq(r, ADSM_ERROR_NOT_SHARED, "double free: %d (%s)", r, adsm_last_error());
    cr_assert(adsm_last_error()[0] != 0);
    /* still usable afterwards */
    unsigned char *q = adsm_safe_alloc(4096), *r2 = adsm_safe_alloc(4096);
    cr_assert(q && r2);
    fill(q, 4096, 9);
    cr_assert_eq(ADSM_CALL(copy_bytes, adsm_grid_1d(16, 256), r2, q, 4096), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    expect(r2, 4096, 9);
    cr_assert_eq(adsm_free(q), ADSM_OK);
    cr_assert_eq(adsm_free(r2), ADSM_OK);
    adsm_shutdown();
}
