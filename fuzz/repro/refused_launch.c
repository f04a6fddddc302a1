/* fuzz/repro/refused_launch.c -- minimal reproducer of a bug found by fuzz/fuzz_protocol.c (lazy
 * and rolling, emu backend).
 *
 * A launch refused by adsm_launch (here: ADSM_ERROR_NOT_SHARED, a plain pointer after an OUT
 * object) resets writer_seq of the OUT/INOUT objects it had already bound to 0 (api.h,
 * adsm_launch: "writes[i]->writer_seq = 0"), although the refusal happened in
 * adsm__prepare_launch, before release ever set it. An earlier launch still in flight that writes
 * the object is forgotten: the next CPU touch before adsm_sync fetches the device copy without
 * waiting for that kernel, and the stale bytes stay on the host (the block is ReadOnly, so
 * adsm_sync does not bring the kernel's result back either).
 *
 * Fix idea: remember each object's writer_seq before release and restore that value (not 0) when
 * the launch fails, and only for the objects release actually touched.
 *
 *   cc -std=c11 -I. fuzz/repro/refused_launch.c -o /tmp/refused_launch -pthread -ldl
 *   /tmp/refused_launch                     # rolling (default) or ADSM_PROTOCOL=lazy
 *   -> exit 1 on nearly every run: a[0] = 0 before and after adsm_sync, expected 7.
 * (Under batch a read before adsm_sync is outside the programming model, so it does not apply.)
 */
#define ADSM_IMPLEMENTATION
#include "adsm.h"
#include <stdio.h>

ADSM_KERNEL(fill, ADSM_OUT(unsigned char, dst), ADSM_OUT(unsigned char, other), ADSM_VALUE(size_t, n));
void fill(adsm_grid g, unsigned char *dst, unsigned char *other, size_t n) {
    (void)other;
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) {
            volatile unsigned spin = 0;
            for (int k = 0; k < 20000; k++) spin += k; /* the kernel takes a while */
            dst[i] = 7;
        }
    }
}

int main(void) {
    static unsigned char not_shared[16];
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) return 2;
    size_t n = 1 << 16;
    unsigned char *a = adsm_alloc(n);
    adsm_result r1 = ADSM_CALL(fill, adsm_grid_1d(n / 256, 256), a, NULL, n); /* K1 writes a */
    adsm_result r2 = ADSM_CALL(fill, adsm_grid_1d(1, 1), a, not_shared, 1);  /* refused */
    unsigned char before_sync = a[0]; /* must wait for K1 */
    adsm_sync();
    printf("K1 %s, K2 %s (expected ADSM_ERROR_NOT_SHARED); a[0] = %u before sync, %u after (expected 7)\n",
           adsm_result_string(r1), adsm_result_string(r2), before_sync, a[0]);
    return before_sync == 7 && a[0] == 7 ? 0 : 1;
}
