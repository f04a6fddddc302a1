/* tests/late_library/plugin.c -- a library with a kernel of its own (declared and defined here),
 * loaded with dlopen by tests/late_library/main.c; adsm's implementation is the program's. */
#include "adsm.h"

ADSM_KERNEL(plugin_add_one, ADSM_INOUT(int, x), ADSM_VALUE(size_t, n));
void plugin_add_one(adsm_grid g, int *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] += 1;
    }
}

/* Launches the kernel on x and waits: the launch's result, or adsm_sync's. */
adsm_result plugin_run(int *x, size_t n) {
    adsm_result r = ADSM_CALL(plugin_add_one, adsm_grid_1d(1, 256), x, n);
    return r != ADSM_OK ? r : adsm_sync();
}
