/* tests/cuda_double_bridge.h -- runs adsm's cuda backend against the driver test double.
 *
 * Include after "adsm.h" in a test translation unit. cuda_double_use() points ADSM_CUDA_DRIVER at
 * tests/cuda/libcudadouble.so (from the Bazel runfiles, or $CUDA_DOUBLE_LIB); after adsm_init
 * with the cuda backend, cuda_double_attach() registers each ADSM_KERNEL's CPU body with the double
 * as the host function behind the PTX entry of the same name, and loads a PTX module whose entry
 * parameters are laid out from the kernel descriptors (what NVRTC would emit for the CUDA C twin).
 * A launch on the double then runs the CPU body on the double's stream worker, with pointer
 * arguments translated to the double's view of device memory: a kernel only ever sees device
 * memory, as on a GPU. Runs in the test's threads and the double's stream workers. */
#ifndef TESTS_CUDA_DOUBLE_BRIDGE_H
#define TESTS_CUDA_DOUBLE_BRIDGE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/driver_double.h"

static inline const char *cuda_double_path(void) {
    static char path[4096];
    const char *explicit_path = getenv("CUDA_DOUBLE_LIB");
    const char *srcdir = getenv("TEST_SRCDIR");
    if (explicit_path && *explicit_path) return explicit_path;
    snprintf(path, sizeof path, "%s/adsm/tests/cuda/libcudadouble.so", srcdir ? srcdir : ".");
    return path;
}

/* The next adsm_init with the cuda backend loads the double. */
static inline void cuda_double_use(void) { setenv("ADSM_CUDA_DRIVER", cuda_double_path(), 1); }

typedef struct cuda_double_api {
    void *lib;
    int (*register_kernel)(const char *, cudadouble_kernel_fn, void *);
    void *(*host_view)(unsigned long long, size_t);
    void (*kernel_fault)(int);
    void (*get_counters)(cudadouble_counters *);
    void (*set_address_hook)(void (*)(int, unsigned long long, size_t, void *), void *);
    void (*release_registers)(void);
} cuda_double_api;

static cuda_double_api cuda_double;

/* The double as adsm loaded it (same path, so the same instance). 0 or -1. */
static inline int cuda_double_open(void) {
    if (cuda_double.lib) return 0;
    cuda_double.lib = dlopen(cuda_double_path(), RTLD_NOW | RTLD_LOCAL);
    if (!cuda_double.lib) return -1;
    *(void **)&cuda_double.register_kernel = dlsym(cuda_double.lib, "cudadouble_register_kernel");
    *(void **)&cuda_double.host_view = dlsym(cuda_double.lib, "cudadouble_host_view");
    *(void **)&cuda_double.kernel_fault = dlsym(cuda_double.lib, "cudadouble_kernel_fault");
    *(void **)&cuda_double.get_counters = dlsym(cuda_double.lib, "cudadouble_get_counters");
    *(void **)&cuda_double.set_address_hook = dlsym(cuda_double.lib, "cudadouble_set_address_hook");
    *(void **)&cuda_double.release_registers = dlsym(cuda_double.lib, "cudadouble_release_registers");
    return cuda_double.register_kernel && cuda_double.host_view && cuda_double.kernel_fault &&
                   cuda_double.get_counters && cuda_double.set_address_hook && cuda_double.release_registers
               ? 0
               : -1;
}

/* Runs an adsm kernel body as a "device" kernel: unpacks the launch's parameter copies into the
 * descriptor's argument struct, maps pointers to device memory, runs the whole grid. */
static void cuda_double_run_body(const cudadouble_launch *l, void *user) {
    const adsm_kernel_desc *k = (const adsm_kernel_desc *)user;
    unsigned char args[4096];
    if (l->nparams != k->nparams || k->args_size > sizeof args) {
        cuda_double.kernel_fault(719); /* CUDA_ERROR_LAUNCH_FAILED */
        return;
    }
    memset(args, 0, sizeof args);
    for (unsigned i = 0; i < k->nparams; i++) {
        size_t size = l->param_size[i] < k->params[i].size ? l->param_size[i] : k->params[i].size;
        memcpy(args + k->params[i].offset, l->param[i], size);
        if (k->params[i].access == ADSM_ACCESS_VALUE) continue;
        unsigned long long dptr;
        memcpy(&dptr, args + k->params[i].offset, sizeof dptr);
        if (dptr == 0) continue;
        void *view = cuda_double.host_view(dptr, 1);
        if (!view) { /* the kernel would touch memory that is not device memory */
            cuda_double.kernel_fault(700); /* CUDA_ERROR_ILLEGAL_ADDRESS */
            return;
        }
        memcpy(args + k->params[i].offset, &view, sizeof view);
    }
    adsm_grid g = adsm_grid_3d(adsm_dim3_make(l->grid[0], l->grid[1], l->grid[2]),
                               adsm_dim3_make(l->block[0], l->block[1], l->block[2]));
    k->entry(g, args);
}

/* PTX text with one entry per kernel, parameters sized as in the descriptors. */
static inline char *cuda_double_ptx(const adsm_kernel_desc *const *kernels, size_t n) {
    size_t cap = 4096 + n * 2048, len = 0;
    char *ptx = (char *)malloc(cap);
    if (!ptx) return NULL;
    len += (size_t)snprintf(ptx + len, cap - len, "//\n// adsm test module\n//\n.version 8.8\n.target sm_90\n"
                                                  ".address_size 64\n\n");
    for (size_t i = 0; i < n; i++) {
        const adsm_kernel_desc *k = kernels[i];
        len += (size_t)snprintf(ptx + len, cap - len, ".visible .entry %s(\n", k->name);
        for (unsigned p = 0; p < k->nparams; p++) {
            size_t size = k->params[p].size;
            const char *sep = p + 1 < k->nparams ? "," : "";
            if (size == 8 || size == 4 || size == 2 || size == 1)
                len += (size_t)snprintf(ptx + len, cap - len, "\t.param .u%zu %s_param_%u%s\n", size * 8, k->name, p, sep);
            else
                len += (size_t)snprintf(ptx + len, cap - len, "\t.param .align 8 .b8 %s_param_%u[%zu]%s\n", k->name, p,
                                        size, sep);
        }
        len += (size_t)snprintf(ptx + len, cap - len, ")\n{\n\tret;\n}\n\n");
    }
    return ptx;
}

/* After adsm_init(cuda): registers the kernels with the double and loads their module. 0 or -1. */
static inline int cuda_double_attach(const adsm_kernel_desc *const *kernels, size_t n) {
    if (cuda_double_open() != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (cuda_double.register_kernel(kernels[i]->name, cuda_double_run_body, (void *)kernels[i]) != 0) return -1;
    char *ptx = cuda_double_ptx(kernels, n);
    if (!ptx) return -1;
    adsm_result r = adsm_module_load_image(ptx, 0);
    free(ptx);
    return r == ADSM_OK ? 0 : -1;
}

static inline cudadouble_counters cuda_double_counters(void) {
    cudadouble_counters c;
    memset(&c, 0, sizeof c);
    if (cuda_double_open() == 0) cuda_double.get_counters(&c);
    return c;
}

/* Lets every page-locking in flight (CUDADOUBLE_REGISTER_US_PER_MIB) finish now. */
static inline void cuda_double_release_registers(void) {
    if (cuda_double_open() == 0) cuda_double.release_registers();
}

#endif /* TESTS_CUDA_DOUBLE_BRIDGE_H */
