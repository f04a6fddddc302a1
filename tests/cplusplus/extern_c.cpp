// tests/cplusplus/extern_c.cpp -- adsm.h included inside extern "C" { }, a habit with C headers in
// C++ programs: it must compile (its C++-only parts keep C++ linkage). Compiled only
// (tests/cplusplus_test.sh); the kernel's body and the implementation live elsewhere.
extern "C" {
#include "adsm.h"
}

ADSM_KERNEL(fill_ones, ADSM_OUT(int, y), ADSM_VALUE(size_t, n));

adsm_result launch_fill_ones(int *y, size_t n) {
    return ADSM_CALL(fill_ones, adsm_grid_1d(static_cast<uint32_t>((n + 255) / 256), 256), y, n);
}
