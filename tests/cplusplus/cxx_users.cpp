// tests/cplusplus/cxx_users.cpp -- what a C++ programmer writes, built with -pedantic -Wall
// -Wextra -Werror (tests/cplusplus_test.sh, g++ and clang++, C++11 to C++20):
//   - ADSM_VALUE of a struct with default member initialisers (a memset of the arguments warned
//     under -Wclass-memaccess);
//   - an ADSM_KERNEL_DEF body that does not use its grid (its parameter warned as unused);
//   - a CPU body that throws: the launch fails with ADSM_ERROR_KERNEL_CRASHED at adsm_sync, and
//     adsm goes on (on the host backend the exception unwound through adsm's locks: the next call
//     hung, or a worker thread ended the process);
// on the backend ADSM_BACKEND names. Exits 0 when everything holds.
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

struct scale_params {
    float factor = 2.0f;
    int offset = 1;
};

ADSM_KERNEL(scale, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(scale_params, p), ADSM_VALUE(size_t, n));
void scale(adsm_grid g, float *y, const float *x, scale_params p, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) y[i] = x[i] * p.factor + static_cast<float>(p.offset);
    }
}

ADSM_KERNEL_DEF(set_first, (ADSM_OUT(int, y), ADSM_VALUE(int, v)), g, { y[0] = v; });

ADSM_KERNEL(thrower, ADSM_OUT(int, y), ADSM_VALUE(size_t, n));
void thrower(adsm_grid g, int *y, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) y[i] = 1;
        if (i == 3) throw std::runtime_error("a kernel body that throws");
    }
}

static int failures;
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
            std::fprintf(stderr, __VA_ARGS__);                                                     \
            std::fprintf(stderr, " [adsm: %s]\n", adsm_last_error());                              \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main() {
    const size_t n = 1000;
    float *x = static_cast<float *>(adsm_alloc(n * sizeof(float)));
    float *y = static_cast<float *>(adsm_alloc(n * sizeof(float)));
    int *z = static_cast<int *>(adsm_alloc(4096 * sizeof(int)));
    EXPECT(x && y && z, "adsm_alloc");
    if (!x || !y || !z) return 1;
    for (size_t i = 0; i < n; i++) x[i] = static_cast<float>(i);
    EXPECT(ADSM_CALL(scale, adsm_grid_1d(4, 256), y, x, scale_params(), n) == ADSM_OK, "scale");
    EXPECT(ADSM_CALL(set_first, adsm_grid_1d(1, 1), z, 42) == ADSM_OK, "set_first");
    EXPECT(adsm_sync() == ADSM_OK, "sync");
    EXPECT(y[10] == 21.0f, "y[10] = %f", static_cast<double>(y[10]));
    EXPECT(z[0] == 42, "z[0] = %d", z[0]);

    // A small grid runs on the calling thread, a large one on the workers: both fail cleanly.
    const size_t grids[] = {64, 4096};
    for (size_t threads : grids) {
        EXPECT(ADSM_CALL(thrower, adsm_grid_1d(static_cast<uint32_t>(threads / 64), 64), z, threads) == ADSM_OK,
               "thrower launch (%zu threads)", threads);
        adsm_result r = adsm_sync();
        EXPECT(r == ADSM_ERROR_KERNEL_CRASHED, "sync after the throwing kernel (%zu threads): %s", threads,
               adsm_result_string(r));
        EXPECT(std::strstr(adsm_last_error(), "threw a C++ exception") != nullptr, "the message names the throw");
        EXPECT(ADSM_CALL(set_first, adsm_grid_1d(1, 1), z, 7) == ADSM_OK, "a launch after it");
        EXPECT(adsm_sync() == ADSM_OK, "sync after it");
        EXPECT(z[0] == 7, "z[0] = %d after the next kernel", z[0]);
    }
    adsm_free(x);
    adsm_free(y);
    adsm_free(z);
    adsm_shutdown();
    if (failures == 0) std::printf("cxx_users (%s): ok\n", std::getenv("ADSM_BACKEND") ? std::getenv("ADSM_BACKEND") : "default");
    return failures ? 1 : 0;
}
