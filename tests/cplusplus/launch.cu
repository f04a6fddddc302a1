/* tests/cplusplus/launch.cu -- a CUDA project's only source file: the adsm implementation compiled
 * by nvcc (C++17), a single-source kernel, and ADSM_CALL. tests/cplusplus_test.sh compiles and
 * links it with nvcc and runs it on emu (no GPU needed). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <cstdio>

ADSM_KERNEL_DEF(triple, (ADSM_OUT(int, y), ADSM_IN(int, x), ADSM_VALUE(uint32_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) y[i] = 3 * x[i];
    }
});

int main() {
    const uint32_t n = 4096;
    int *x = static_cast<int *>(adsm_alloc(n * sizeof(int)));
    int *y = static_cast<int *>(adsm_alloc(n * sizeof(int)));
    if (!x || !y) return 1;
    for (uint32_t i = 0; i < n; i++) x[i] = static_cast<int>(i);
    adsm_result r = ADSM_CALL(triple, adsm_grid_1d(n / 128, 128), y, x, n);
    if (r == ADSM_OK) r = adsm_sync();
    if (r != ADSM_OK) {
        std::fprintf(stderr, "triple: %s\n", adsm_last_error());
        return 1;
    }
    uint32_t wrong = 0;
    for (uint32_t i = 0; i < n; i++) wrong += y[i] != 3 * static_cast<int>(i);
    std::printf("nvcc: %u elements on %s, %u wrong\n", n, adsm_backend_name(), wrong);
    adsm_shutdown();
    return wrong != 0;
}
