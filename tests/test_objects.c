/* tests/test_objects.c -- many objects: GMAC's own tests allocate over 100k objects from 256 bytes
 * to 32 MiB. Nothing per object may stand in the way (file descriptors, mappings, linear scans),
 * and scattered protections must not break the runtime when the kernel's mapping limit
 * (vm.max_map_count, 65530 by default) is reached. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

ADSM_KERNEL(bump, ADSM_INOUT(unsigned char, p), ADSM_VALUE(size_t, n));

void bump(adsm_grid g, unsigned char *p, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) p[i]++;
    }
}

static void init(adsm_protocol_kind protocol) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = protocol;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

static size_t live_objects(void) {
    adsm_stats s;
    adsm_get_stats(&s);
    return (size_t)s.objects;
}

/* 100k live 256-byte objects, every other one written: twice as many protection runs as the
 * default mapping limit allows if nothing merged them back. */
static void scattered_writes(adsm_protocol_kind protocol) {
    enum { N = 100000 };
    static unsigned char *p[N];
    init(protocol);
    for (size_t i = 0; i < N; i++) {
        p[i] = adsm_alloc(256);
        cr_assert_not_null(p[i], "object %zu: %s", i, adsm_last_error());
    }
    for (size_t i = 0; i < N; i += 2) p[i][7] = (unsigned char)(i % 251 + 1);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(p[i][7], i % 2 == 0 ? i % 251 + 1 : 0, "object %zu", i);
    for (size_t i = 0; i < N; i += 1000) cr_assert_eq(ADSM_CALL(bump, adsm_grid_1d(1, 256), p[i], 256), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < N; i += 1000) cr_assert_eq(p[i][7], i % 2 == 0 ? i % 251 + 2 : 1, "object %zu", i);
    cr_assert_eq(live_objects(), N);
    for (size_t i = 0; i < N; i++) cr_assert_eq(adsm_free(p[i]), ADSM_OK, "object %zu: %s", i, adsm_last_error());
    cr_assert_eq(live_objects(), 0);
    adsm_shutdown();
}

Test(objects, scattered_writes_lazy, .timeout = 120) { scattered_writes(ADSM_PROTOCOL_LAZY); }
Test(objects, scattered_writes_rolling, .timeout = 120) { scattered_writes(ADSM_PROTOCOL_ROLLING); }

/* 4000 alloc/free cycles with sizes from 256 bytes to 32 MiB, a few dozen live at a time: the
 * address space and device memory are reused, nothing leaks. */
Test(objects, churn_256B_to_32MiB, .timeout = 120) {
    enum { CYCLES = 4000, LIVE = 48 };
    unsigned char *live[LIVE] = {0};
    size_t sizes[LIVE] = {0};
    unsigned seed = 12345;
    init(ADSM_PROTOCOL_ROLLING);
    for (size_t c = 0; c < CYCLES; c++) {
        size_t slot = (seed = seed * 1103515245u + 12345u) % LIVE;
        if (live[slot]) {
            cr_assert_eq(live[slot][0], (unsigned char)sizes[slot], "cycle %zu", c);
            cr_assert_eq(live[slot][sizes[slot] - 1], 0xA5, "cycle %zu", c);
            cr_assert_eq(adsm_free(live[slot]), ADSM_OK, "%s", adsm_last_error());
        }
        unsigned shift = 8 + (seed >> 8) % 18; /* 256 B .. 32 MiB */
        sizes[slot] = ((size_t)1 << shift) - (seed >> 20) % 64;
        live[slot] = adsm_alloc(sizes[slot]);
        cr_assert_not_null(live[slot], "cycle %zu, %zu bytes: %s", c, sizes[slot], adsm_last_error());
        cr_assert_eq(live[slot][sizes[slot] / 2], 0, "new objects start zeroed");
        live[slot][0] = (unsigned char)sizes[slot];
        live[slot][sizes[slot] - 1] = 0xA5;
    }
    for (size_t i = 0; i < LIVE; i++) cr_assert_eq(adsm_free(live[i]), ADSM_OK);
    cr_assert_eq(live_objects(), 0);
    adsm_shutdown();
}
