// tests/cplusplus/strict_user.cpp -- every public macro and inline function of adsm.h, used the
// way a C++ code base with strict warnings uses them (-Wold-style-cast, -Wzero-as-null-pointer-
// constant, -Wcast-qual, -Wuseless-cast...): their expansions must add no warning of their own.
// Compiled only (tests/cplusplus_test.sh); kernel bodies of ADSM_KERNEL and the implementation
// live elsewhere, as in a program's other files. Also compiled as C++03 (no nullptr there).
#include "adsm.h"

#include <stdint.h> // not <cstdint>: this file compiles as C++03 too

typedef struct tree {
    struct tree *kids[2]; // an array of pointers to the declared type
    struct tree *parent;  // never NULL
    float *weights;       // into a plain-data object
    int value;
} tree;
ADSM_DECLARE_TYPE(tree);
ADSM_TYPE(tree, ADSM_PTR(kids, tree), ADSM_PTR_NONNULL(parent, tree), ADSM_PTR_DATA(weights));

ADSM_KERNEL(walk, ADSM_INOUT(tree, t), ADSM_IN(float, w), ADSM_OUT(uint32_t, count),
            ADSM_VALUE(size_t, n));

ADSM_SHARED(struct step { float by; };
            static inline float stepped(step s, float v) { return v + s.by; });

ADSM_KERNEL_DEF(shift, (ADSM_INOUT(float, y), ADSM_OUT(uint32_t, hist), ADSM_VALUE(step, s),
                        ADSM_VALUE(size_t, n)),
                g, {
                    ADSM_FOR_EACH_THREAD(g, i) {
                        if (i < n) {
                            y[i] = stepped(s, y[i]);
                            adsm_atomic_add_u32(&hist[i % 4], 1u);
                            adsm_atomic_max_u32(&hist[4], static_cast<uint32_t>(i));
                            adsm_atomic_add_f32(&y[0], 0.0f);
                        }
                    }
                });

static const char *const walk_cuda = ADSM_CUDA_SOURCE(extern "C" __global__ void walk(void) {});

adsm_result strict_user(size_t n) {
    tree *t = ADSM_ALLOC(tree, n);
    float *w = static_cast<float *>(adsm_alloc(n * sizeof(float)));
    uint32_t *count = static_cast<uint32_t *>(adsm_alloc(8 * sizeof(uint32_t)));
    if (!t || !w || !count || !walk_cuda[0]) return adsm_last_result();
    adsm_grid g1 = adsm_grid_1d(static_cast<uint32_t>((n + 255) / 256), 256);
    adsm_grid g3 = adsm_grid_3d(adsm_dim3_make(1, 1, 1), adsm_dim3_make(8, 8, 4));
    step s = {1.0f};
    adsm_result r = ADSM_PREPARE(walk);
    if (r == ADSM_OK) r = ADSM_CALL(walk, g1, t, w, count, n);
    if (r == ADSM_OK) r = ADSM_CALL_ON(0, shift, g3, w, count, s, adsm_grid_threads(g3));
    if (r == ADSM_OK && adsm_set_type(t, ADSM_TYPE_OF(tree)) != ADSM_OK) r = adsm_last_result();
    return r;
}
