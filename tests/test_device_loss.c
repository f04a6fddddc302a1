/* tests/test_device_loss.c -- the emulated device process dying (killed from outside) turns
 * later launches and syncs into ADSM_ERROR_DEVICE_LOST, while the program can still read its data
 * (Dirty and ReadOnly blocks on the host; Invalid ones as the device memory stands), free it, shut
 * down, and start again with a new device. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>

ADSM_KERNEL(fill, ADSM_OUT(int, c), ADSM_VALUE(int, v), ADSM_VALUE(size_t, n));

void fill(adsm_grid g, int *c, int v, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = v + (int)i;
    }
}

static void init(adsm_protocol_kind protocol) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = protocol;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

/* White-box: the device process's pid. */
static void kill_device(void) {
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx;
    cr_assert_eq(kill(e->child, SIGKILL), 0);
    for (int i = 0; i < 500 && !ADSM__LOAD(&e->lost); i++) usleep(10000); /* the completion thread notices */
    cr_assert(ADSM__LOAD(&e->lost), "the runtime did not notice the device process died");
}

static void scenario(adsm_protocol_kind protocol) {
    enum { N = 4096 };
    init(protocol);
    int *dirty = adsm_alloc(N * sizeof(int)), *clean = adsm_alloc(N * sizeof(int));
    int *result = adsm_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) clean[i] = 3 * i;
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), result, 100, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < N; i++) cr_assert_eq(clean[i], 3 * i); /* ReadOnly after the flush */
    for (int i = 0; i < N; i++) dirty[i] = 7 * i;                /* Dirty on the host */
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), result, 500, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error()); /* result is Invalid on the host now */
    kill_device();

    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(1, 64), result, 1, (size_t)64), ADSM_ERROR_DEVICE_LOST);
    cr_assert(strstr(adsm_last_error(), "device") != NULL, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST, "a lost device stays lost");
    cr_assert_null(adsm_alloc(4096));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_LOST);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(dirty[i], 7 * i, "Dirty data readable");
        cr_assert_eq(clean[i], 3 * i, "ReadOnly data readable");
        cr_assert_eq(result[i], 500 + i, "the last completed kernel's results are readable");
    }
    dirty[5] = 1; /* still writable */
    cr_assert_eq(dirty[5], 1);
    cr_assert_eq(adsm_free(dirty), ADSM_OK);
    cr_assert_eq(adsm_free(clean), ADSM_OK);
    cr_assert_eq(adsm_free(result), ADSM_OK);
    adsm_shutdown();

    init(protocol); /* a new device */
    int *again = adsm_alloc(N * sizeof(int));
    cr_assert_not_null(again, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), again, 9, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(again[N - 1], 9 + N - 1);
    adsm_shutdown();
}

Test(device_loss, lazy) { scenario(ADSM_PROTOCOL_LAZY); }
Test(device_loss, rolling) { scenario(ADSM_PROTOCOL_ROLLING); }
Test(device_loss, batch) { scenario(ADSM_PROTOCOL_BATCH); }
