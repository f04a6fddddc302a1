/* examples/vecadd.c -- the GMAC paper's Figure 4 with adsm: allocate shared vectors, initialise
 * them on the CPU, call a kernel, sync, read the result on the CPU. No copies in sight.
 * Exits non-zero if any element is wrong.
 *
 *   cc -std=c11 -I. examples/vecadd.c -pthread -ldl && ./a.out
 *   g++ -std=c++17 -x c++ -I. examples/vecadd.c -pthread -ldl && ./a.out */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <stdio.h>

/* One body for every backend: the CPU runs it on emu and host; on cuda NVRTC compiles the same
 * text at the first launch, where ADSM_FOR_EACH_THREAD is the thread's own global index. */
ADSM_KERNEL_DEF(vecadd, (ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(size_t, n)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
});

int main(void) {
    const size_t n = (size_t)1 << 22;
    /* the casts make this file C++ too (tests/cplusplus_test.sh builds it with g++ and clang++) */
    float *a = (float *)adsm_alloc(n * sizeof *a), *b = (float *)adsm_alloc(n * sizeof *b);
    float *c = (float *)adsm_alloc(n * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "adsm_alloc failed: %s\n", adsm_last_error());
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = 2.0f * (float)i;
    }
    adsm_result r = ADSM_CALL(vecadd, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), c, a, b, n);
    if (r == ADSM_OK) r = adsm_sync();
    if (r != ADSM_OK) {
        fprintf(stderr, "vecadd failed: %s\n", adsm_last_error());
        return 1;
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += c[i] != 3.0f * (float)i;
    adsm_stats s;
    adsm_get_stats(&s);
    printf("vecadd: %zu elements on %s/%s, %zu wrong; %llu bytes to device, %llu back, %llu faults\n", n,
           adsm_backend_name(), adsm_protocol_name(), wrong, (unsigned long long)s.h2d_bytes,
           (unsigned long long)s.d2h_bytes, (unsigned long long)(s.read_faults + s.write_faults));
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
    adsm_shutdown();
    return wrong != 0;
}
