/* tests/cplusplus/impl.c -- the C half of a program that mixes C and C++ translation units: the
 * implementation and a kernel with a plain C body, which mixed.cpp launches. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "tests/cplusplus/kernels.h"

void scale(adsm_grid g, float *y, const float *x, float a, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) y[i] = a * x[i];
    }
}
