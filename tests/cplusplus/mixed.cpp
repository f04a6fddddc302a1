/* tests/cplusplus/mixed.cpp -- the C++ half: launches impl.c's C kernel and a single-source kernel
 * of its own (shared declarations included); exits non-zero on a wrong element. */
#include "adsm.h"

#include <cstdio>
#include <vector>

#include "tests/cplusplus/kernels.h"

ADSM_SHARED(struct offset { float by; };
            static inline float shifted(offset o, float v) { return v + o.by; });

ADSM_KERNEL_DEF(shift, (ADSM_INOUT(float, y), ADSM_VALUE(offset, o), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) y[i] = shifted(o, y[i]);
    }
});

int main() {
    const size_t n = 100000;
    float *x = static_cast<float *>(adsm_alloc(n * sizeof(float)));
    float *y = static_cast<float *>(adsm_alloc(n * sizeof(float)));
    if (!x || !y) {
        std::fprintf(stderr, "adsm_alloc: %s\n", adsm_last_error());
        return 1;
    }
    for (size_t i = 0; i < n; i++) x[i] = static_cast<float>(i);
    adsm_grid grid = adsm_grid_1d(static_cast<uint32_t>((n + 255) / 256), 256);
    offset o = {0.5f};
    adsm_result r = ADSM_CALL(scale, grid, y, x, 2.0f, n);
    if (r == ADSM_OK) r = ADSM_CALL(shift, grid, y, o, n);
    if (r == ADSM_OK) r = adsm_sync();
    if (r != ADSM_OK) {
        std::fprintf(stderr, "launch: %s\n", adsm_last_error());
        return 1;
    }
    std::vector<size_t> wrong;
    for (size_t i = 0; i < n; i++)
        if (y[i] != 2.0f * static_cast<float>(i) + 0.5f) wrong.push_back(i);
    std::printf("mixed C/C++: %zu elements on %s, %zu wrong\n", n, adsm_backend_name(), wrong.size());
    adsm_free(x);
    adsm_free(y);
    adsm_shutdown();
    return wrong.empty() ? 0 : 1;
}
