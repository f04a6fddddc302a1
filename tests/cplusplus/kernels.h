/* tests/cplusplus/kernels.h -- a kernel declared once for both languages: its C body is in impl.c. */
#ifndef TESTS_CPLUSPLUS_KERNELS_H
#define TESTS_CPLUSPLUS_KERNELS_H
#include "adsm.h"

ADSM_KERNEL(scale, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(float, a), ADSM_VALUE(size_t, n));

#endif
