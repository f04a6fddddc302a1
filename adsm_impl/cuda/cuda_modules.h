/* adsm_impl/cuda/cuda_modules.h -- device code on a GPU: modules loaded from images or CUDA source
 * (compiled with NVRTC, opened at run time), single-source kernels (ADSM_KERNEL_DEF) compiled the
 * first time they run, and a kernel's function found by name, checked against its ADSM_KERNEL
 * declaration where the driver can tell.
 *
 * Contexts: normal context only: module loading and single-source compiles under the backend's
 * module mutex, the function lookup under the runtime lock. */
#ifndef ADSM__CUDA_MODULES_INCLUDED
#define ADSM__CUDA_MODULES_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../runtime.h"
#include "../backend.h"
#include "cuda_driver.h"
#include "cuda_device.h"

/* ---- modules --------------------------------------------------------------------------------- */
/* Pure: the NVRTC library names to try for a driver of `driver_version` (cuDriverGetVersion),
 * best first. NVRTC N emits PTX of an ISA that drivers older than CUDA N refuse
 * (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so only the versioned sonames from the driver's major down
 * to 12 (the oldest driver adsm runs on), newest first; then the unversioned name, whose version
 * is checked once loaded. Writes at most cap names; returns how many. */
ADSM__PRIVATE size_t adsm__nvrtc_names(int driver_version, char (*names)[32], size_t cap) {
    size_t n = 0;
    for (int major = driver_version / 1000; major >= ADSM__CU_ABI_VERSION / 1000 && n + 1 < cap; major--)
        snprintf(names[n++], sizeof names[0], "libnvrtc.so.%d", major);
    if (n < cap) snprintf(names[n++], sizeof names[0], "libnvrtc.so");
    return n;
}

/* Pure: whether an NVRTC of this major version may be used with the driver. Sonames carry the
 * major alone, so that is what the choice goes by; a newer minor of the driver's own major
 * compiles to cubins (adsm__nvrtc_wants_cubin). */
ADSM__PRIVATE int adsm__nvrtc_fits(int major, int driver_version) { return major <= driver_version / 1000; }

/* Pure: whether NVRTC major.minor should compile to a cubin for the driver rather than to PTX.
 * The driver refuses PTX of an ISA newer than its own (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): an
 * NVRTC of a later minor release of the driver's major emits such PTX. Cubins built by any minor
 * release of a major load on every driver of that major (minor version compatibility), so that
 * case gets a cubin for the device's own architecture. PTX otherwise: it also runs on GPUs newer
 * than the NVRTC (the driver compiles it). */
ADSM__PRIVATE int adsm__nvrtc_wants_cubin(int major, int minor, int driver_version) {
    return major == driver_version / 1000 && minor > driver_version % 1000 / 10;
}

/* Whether this runtime's NVRTC compiles to cubins (adsm__nvrtc_wants_cubin, and it can). */
ADSM__PRIVATE int adsm__nvrtc_cubin(const adsm__cuda *c) {
    return c->nvrtc.nvrtcGetCUBINSize && c->nvrtc.nvrtcGetCUBIN &&
           adsm__nvrtc_wants_cubin(c->nvrtc.major, c->nvrtc.minor, c->driver_version);
}

/* dlopen's one NVRTC and fills api with its entry points: the handle, or NULL. */
ADSM__PRIVATE void *adsm__nvrtc_load(const char *name, adsm__nvrtc_api *api) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#define ADSM__NVRTC_RESOLVE(fn, ret, params) \
    if (lib && !(*(void **)&api->fn = dlsym(lib, #fn))) {      \
        dlclose(lib);                                          \
        lib = NULL;                                            \
    }
    ADSM__NVRTC_FUNCS(ADSM__NVRTC_RESOLVE)
#undef ADSM__NVRTC_RESOLVE
    if (lib) {
        *(void **)&api->nvrtcGetCUBINSize = dlsym(lib, "nvrtcGetCUBINSize");
        *(void **)&api->nvrtcGetCUBIN = dlsym(lib, "nvrtcGetCUBIN");
    }
    return lib;
}

/* The NVRTC ADSM_NVRTC_LIBRARY names wins, whatever its version (with a warning if the driver
 * may refuse its PTX); otherwise the newest one the driver can load (adsm__nvrtc_names). */
ADSM__PRIVATE adsm_result adsm__nvrtc_open(adsm__cuda *c) {
    const char *configured = c->rt->cfg.nvrtc_library;
    char names[8][32], refused[400] = "";
    int major = 0, minor = 0, dv = c->driver_version;
    size_t n = configured[0] ? 1 : adsm__nvrtc_names(dv, names, 8);
    if (c->nvrtc_lib) return ADSM_OK;
    for (size_t i = 0; i < n && !c->nvrtc_lib; i++) {
        const char *name = configured[0] ? configured : names[i];
        adsm__nvrtc_api api;
        void *lib = adsm__nvrtc_load(name, &api);
        if (!lib || api.nvrtcVersion(&major, &minor) != ADSM__NVRTC_SUCCESS) {
            if (lib) dlclose(lib);
            continue;
        }
        if (!configured[0] && !adsm__nvrtc_fits(major, dv)) { /* PTX the driver would refuse */
            snprintf(refused, sizeof refused, " (%s is NVRTC %d.%d, newer than the CUDA %d.%d driver)", name, major,
                     minor, dv / 1000, dv % 1000 / 10);
            dlclose(lib);
            continue;
        }
        api.major = major;
        api.minor = minor;
        c->nvrtc = api;
        c->nvrtc_lib = lib;
        snprintf(c->nvrtc_name, sizeof c->nvrtc_name, "NVRTC %d.%d (%s)", major, minor, name);
    }
    if (!c->nvrtc_lib)
        return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE,
                          "adsm_module_load_source: no NVRTC the CUDA %d.%d driver can use: tried %s%s%s%s; set "
                          "ADSM_NVRTC_LIBRARY",
                          dv / 1000, dv % 1000 / 10, configured[0] ? configured : names[0],
                          configured[0] || n < 2 ? "" : " ... ", configured[0] || n < 2 ? "" : names[n - 1], refused);
    int newer = major * 1000 + minor * 10 > dv, cubin = adsm__nvrtc_cubin(c);
    adsm__log(newer && !cubin ? ADSM_LOG_WARN : ADSM_LOG_INFO, "cuda: %s for a CUDA %d.%d driver%s", c->nvrtc_name,
              dv / 1000, dv % 1000 / 10,
              cubin ? ": newer than the driver, so kernels are compiled to cubins (sm_XY), which it loads"
              : newer ? ": newer than the driver, which may refuse its PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)" : "");
    return ADSM_OK;
}

/* The architecture NVRTC compiles for: compute_XY (PTX) or sm_XY (a cubin). */
ADSM__PRIVATE void adsm__nvrtc_arch(const adsm__cuda *c, char *out, size_t n) {
    snprintf(out, n, "--gpu-architecture=%s_%d%d", adsm__nvrtc_cubin(c) ? "sm" : "compute", c->cc_major, c->cc_minor);
}

/* A compiled module image (PTX, NUL-terminated, or a cubin) and its size. */
ADSM__PRIVATE adsm__image *adsm__image_new(size_t size) {
    adsm__image *im = (adsm__image *)malloc(sizeof *im + size + 1);
    if (!im) return NULL;
    im->size = size;
    im->bytes = (unsigned char *)(im + 1);
    im->bytes[size] = 0;
    return im;
}

ADSM__PRIVATE adsm__image *adsm__image_dup(const adsm__image *im) {
    adsm__image *copy = im ? adsm__image_new(im->size) : NULL;
    if (copy) memcpy(copy->bytes, im->bytes, im->size);
    return copy;
}

/* The compiled program's image: its cubin where adsm__nvrtc_cubin, else its PTX. NULL on failure. */
ADSM__PRIVATE adsm__image *adsm__nvrtc_image(adsm__cuda *c, adsm__nvrtc_program prog) {
    int cubin = adsm__nvrtc_cubin(c);
    size_t size = 0;
    if ((cubin ? c->nvrtc.nvrtcGetCUBINSize(prog, &size) : c->nvrtc.nvrtcGetPTXSize(prog, &size)) != 0) return NULL;
    adsm__image *im = adsm__image_new(size);
    if (im && (cubin ? c->nvrtc.nvrtcGetCUBIN(prog, (char *)im->bytes) : c->nvrtc.nvrtcGetPTX(prog, (char *)im->bytes)) != 0) {
        free(im);
        im = NULL;
    }
    return im;
}

/* CUDA C -> PTX or a cubin for this device's architecture. *image is malloc'ed. */
/* Copies a compiler log into out (of size n), its error lines first: the message a program gets
 * is short, and warnings about the prelude must not push the line that matters out of it. */
ADSM__PRIVATE void adsm__errors_first(const char *log, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const char *line = log; *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
            const char *err = strstr(line, "error");
            int is_error = err && err < line + len;
            if (is_error == (pass == 0) && used + 1 < n) {
                size_t take = ADSM__MIN(len, n - 1 - used);
                memcpy(out + used, line, take);
                used += take;
                out[used] = 0;
            }
            line += len;
        }
    }
}

ADSM__PRIVATE adsm_result adsm__nvrtc_compile(adsm__cuda *c, const char *source, const char *const *options,
                                              const char *file, const char *what, adsm__image **image) {
    adsm_result r = adsm__nvrtc_open(c);
    if (r != ADSM_OK) return r;
    c->nvrtc_compiles++;
    const char **opts = NULL; /* stb_ds array: the architecture, then every option given */
    char arch[64];
    adsm__nvrtc_arch(c, arch, sizeof arch);
    stbds_arrput(opts, arch);
    for (; options && *options; options++) stbds_arrput(opts, *options);
    adsm__nvrtc_program prog = NULL;
    adsm__nvrtc_result nr = c->nvrtc.nvrtcCreateProgram(&prog, source, file, 0, NULL, NULL);
    if (nr != ADSM__NVRTC_SUCCESS) {
        stbds_arrfree(opts);
        return adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: nvrtcCreateProgram: %s", what,
                          c->nvrtc.nvrtcGetErrorString(nr));
    }
    nr = c->nvrtc.nvrtcCompileProgram(prog, (int)stbds_arrlen(opts), opts);
    stbds_arrfree(opts);
    if (nr != ADSM__NVRTC_SUCCESS) {
        char log[700] = "";
        size_t log_size = 0;
        if (c->nvrtc.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 0) {
            char *full = (char *)malloc(log_size);
            if (full && c->nvrtc.nvrtcGetProgramLog(prog, full) == 0) adsm__errors_first(full, log, sizeof log);
            free(full);
        }
        r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: NVRTC: %s\n%s", what, c->nvrtc.nvrtcGetErrorString(nr), log);
    } else if (!(*image = adsm__nvrtc_image(c, prog))) {
        r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "%s: NVRTC produced no %s", what, adsm__nvrtc_cubin(c) ? "cubin" : "PTX");
    }
    c->nvrtc.nvrtcDestroyProgram(&prog);
    return r;
}

/* Normal context, runtime lock held: loads a PTX/cubin/fatbin image into adsm's context. */
ADSM__PRIVATE adsm_result adsm__cuda_module_image(adsm__cuda *c, const void *image, adsm__cu_module *out) {
    char log[1024] = "", text[300];
    adsm__cu_jit_option opts[2] = {ADSM__CU_JIT_ERROR_LOG_BUFFER, ADSM__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[2] = {log, (void *)(uintptr_t)sizeof log};
    adsm__cu_module m = NULL;
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result cr = c->cu.cuModuleLoadDataEx(&m, image, 2, opts, values);
    adsm__cuda_leave(c, prev);
    if (cr != 0) {
        adsm__cu_describe(c, cr, "cuModuleLoadDataEx", text, sizeof text);
        return adsm__fail(ADSM_ERROR_INVALID_MODULE, "adsm_module_load: %s%s%s", text, log[0] ? ": " : "", log);
    }
    *out = m;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__cuda_module_add(adsm__cuda *c, const void *image) {
    adsm__cu_module m = NULL;
    adsm_result r = adsm__cuda_module_image(c, image, &m);
    if (r != ADSM_OK) return r;
    stbds_arrput(c->modules, m);
    stbds_hmfree(c->kernels); /* a newer module may now provide a kernel: look names up again */
    return ADSM_OK;
}

/* What a compiled source's PTX depends on, as one string (malloc'ed, or NULL): the architecture,
 * the options, the text. */
ADSM__PRIVATE char *adsm__cuda_source_key(const adsm__cuda *c, const char *source, const char *const *options) {
    size_t n = strlen(source) + 80;
    for (const char *const *o = options; o && *o; o++) n += strlen(*o) + 1;
    char *key = (char *)malloc(n), *at = key;
    if (!key) return NULL;
    char arch[64];
    adsm__nvrtc_arch(c, arch, sizeof arch);
    at += sprintf(at, "%s\n", arch);
    for (const char *const *o = options; o && *o; o++) at += sprintf(at, "%s\n", *o);
    sprintf(at, "\n%s", source);
    return key;
}

/* CUDA C -> PTX or cubin, once per architecture, options and text in the process: a second GPU of
 * the same generation (adsm_module_load_source loads into every GPU) or a later adsm_init reuses
 * it. NVRTC is opened first: which kind of image it makes is part of the key. */
ADSM__PRIVATE adsm_result adsm__cuda_source_image(adsm__cuda *c, const char *source, const char *const *options,
                                                  adsm__image **image) {
    adsm_result r = adsm__nvrtc_open(c);
    if (r != ADSM_OK) return r;
    char *key = adsm__cuda_source_key(c, source, options);
    if (!key) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "adsm_module_load_source: out of memory");
    adsm__lock(&c->rt->lock);
    /* the map keeps copies of its keys (set before the first lookup, which creates the map) */
    if (!c->rt->source_images) stbds_sh_new_strdup(c->rt->source_images);
    ptrdiff_t at = stbds_shgeti(c->rt->source_images, key);
    *image = at >= 0 ? adsm__image_dup(c->rt->source_images[at].value) : NULL;
    adsm__unlock(&c->rt->lock);
    if (!*image) r = adsm__nvrtc_compile(c, source, options, "adsm_module.cu", "adsm_module_load_source", image);
    adsm__image *kept = r == ADSM_OK && at < 0 ? adsm__image_dup(*image) : NULL;
    if (kept) {
        adsm__lock(&c->rt->lock);
        if (stbds_shgeti(c->rt->source_images, key) < 0) stbds_shput(c->rt->source_images, key, kept);
        else free(kept); /* another thread compiled it meanwhile */
        adsm__unlock(&c->rt->lock);
    }
    free(key);
    return r;
}

ADSM__PRIVATE adsm_result adsm__cuda_module_load(void *ctx, const void *image, size_t size, int source,
                                                 const char *const *options) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__image *compiled = NULL;
    adsm_result r = ADSM_OK;
    (void)size;
    pthread_mutex_lock(&c->module_mutex); /* NVRTC runs outside the runtime lock: it takes seconds */
    if (source) r = adsm__cuda_source_image(c, (const char *)image, options, &compiled);
    if (r == ADSM_OK) {
        adsm__lock(&c->rt->lock);
        r = adsm__cuda_module_add(c, compiled ? compiled->bytes : image);
        adsm__unlock(&c->rt->lock);
    }
    pthread_mutex_unlock(&c->module_mutex);
    free(compiled);
    return r;
}

/* ---- single-source kernels (ADSM_KERNEL_DEF) -------------------------------------------------- */
/* What a single-source body finds on the device: the fixed-width integer types (NVRTC has no
 * <stdint.h>), adsm_grid with the thread's own global index as [begin, begin + 1) (x fastest, as
 * the CPU flattens it), and C spellings the program's C preprocessor may have left in the text. */
static const char adsm__cuda_prelude[] =
    "typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t;\n"
    "typedef unsigned short uint16_t; typedef int int32_t; typedef unsigned int uint32_t;\n"
    "typedef long long int64_t; typedef unsigned long long uint64_t;\n"
    "typedef long intptr_t; typedef unsigned long uintptr_t;\n"
    "#define restrict __restrict__\n"
    "#define _Bool bool\n"
    "#define _Static_assert static_assert\n"
    "#define _Alignof alignof\n"
    "typedef struct adsm_dim3 { uint32_t x, y, z; } adsm_dim3;\n"
    "typedef struct adsm_grid { adsm_dim3 grid, block; size_t begin, end; } adsm_grid;\n"
    "static __device__ inline size_t adsm_grid_threads(adsm_grid g) {\n"
    "    return (size_t)g.grid.x * g.block.x * g.grid.y * g.block.y * g.grid.z * g.block.z;\n"
    "}\n"
    "static __device__ inline adsm_grid adsm__device_grid(void) {\n"
    "    adsm_grid g;\n"
    "    g.grid.x = gridDim.x; g.grid.y = gridDim.y; g.grid.z = gridDim.z;\n"
    "    g.block.x = blockDim.x; g.block.y = blockDim.y; g.block.z = blockDim.z;\n"
    "    size_t nx = (size_t)gridDim.x * blockDim.x, ny = (size_t)gridDim.y * blockDim.y;\n"
    "    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    size_t y = (size_t)blockIdx.y * blockDim.y + threadIdx.y;\n"
    "    size_t z = (size_t)blockIdx.z * blockDim.z + threadIdx.z;\n"
    "    g.begin = (z * ny + y) * nx + x;\n"
    "    g.end = g.begin + 1;\n"
    "    return g;\n"
    "}\n"
    /* adsm.h's atomics under the same names */
    "static __device__ inline uint32_t adsm_atomic_add_u32(uint32_t *p, uint32_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline uint64_t adsm_atomic_add_u64(uint64_t *p, uint64_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline unsigned long long adsm_atomic_add_ull(unsigned long long *p, unsigned long long v) {\n"
    "    return atomicAdd(p, v);\n"
    "}\n"
    "static __device__ inline int32_t adsm_atomic_add_i32(int32_t *p, int32_t v) { return atomicAdd(p, v); }\n"
    "static __device__ inline float adsm_atomic_add_f32(float *p, float v) { return atomicAdd(p, v); }\n"
    "static __device__ inline uint32_t adsm_atomic_min_u32(uint32_t *p, uint32_t v) { return atomicMin(p, v); }\n"
    "static __device__ inline uint32_t adsm_atomic_max_u32(uint32_t *p, uint32_t v) { return atomicMax(p, v); }\n"
    "static __device__ inline int32_t adsm_atomic_min_i32(int32_t *p, int32_t v) { return atomicMin(p, v); }\n"
    "static __device__ inline int32_t adsm_atomic_max_i32(int32_t *p, int32_t v) { return atomicMax(p, v); }\n";

/* The whole CUDA C of a single-source kernel: the prelude, its translation unit's ADSM_SHARED
 * blocks in source order, then the kernel. malloc'ed, or NULL. */
ADSM__PRIVATE char *adsm__cuda_single_source(const adsm_kernel_desc *k) {
    size_t n = sizeof adsm__cuda_prelude + strlen(k->cuda_source) + 1;
    for (const adsm__shared *s = k->shared ? *k->shared : NULL; s; s = s->next) n += strlen(s->text) + 1;
    char *text = (char *)malloc(n), *at = text;
    if (!text) return NULL;
    at += sprintf(at, "%s", adsm__cuda_prelude);
    for (const adsm__shared *s = k->shared ? *k->shared : NULL; s; s = s->next) at += sprintf(at, "%s\n", s->text);
    sprintf(at, "%s", k->cuda_source);
    return text;
}

/* Normal context, runtime lock held: whether a loaded module has an entry of this name. */
ADSM__PRIVATE int adsm__cuda_module_has(adsm__cuda *c, const char *name) {
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_function fn = NULL;
    for (ptrdiff_t m = 0; m < stbds_arrlen(c->modules) && !fn; m++)
        if (c->cu.cuModuleGetFunction(&fn, c->modules[m], name) != 0) fn = NULL;
    adsm__cuda_leave(c, prev);
    return fn != NULL;
}

/* Normal context, runtime lock held: loads a single-source kernel's image and remembers its function. */
ADSM__PRIVATE adsm_result adsm__cuda_single_add(adsm__cuda *c, const adsm_kernel_desc *k, const adsm__image *image) {
    adsm__cu_module m = NULL;
    adsm__cu_function fn = NULL;
    adsm_result r = adsm__cuda_module_image(c, image->bytes, &m);
    if (r != ADSM_OK) return r;
    stbds_arrput(c->ss_modules, m);
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_result cr = c->cu.cuModuleGetFunction(&fn, m, k->name);
    adsm__cuda_leave(c, prev);
    if (cr != 0)
        return adsm__fail(ADSM_ERROR_KERNEL_NOT_FOUND, "kernel '%s' (ADSM_KERNEL_DEF): its compiled module has no "
                          "entry of that name", k->name);
    uint64_t key = adsm__cuda_kernel_key(k);
    stbds_hmput(c->ss_kernels, key, fn);
    return ADSM_OK;
}

/* The key of a kernel's image in rt->kernel_images: its descriptor and the architecture it was
 * compiled for (PTX for compute_90 does not load on a compute 8.x GPU, so a node with GPUs of two
 * generations compiles once for each), cubin or PTX. Bits 48-61 are free in a descriptor's key. */
ADSM__PRIVATE uint64_t adsm__cuda_image_key(const adsm__cuda *c, const adsm_kernel_desc *k) {
    uint64_t arch = (uint64_t)(c->cc_major * 10 + c->cc_minor) & 0x1fff;
    return adsm__cuda_kernel_key(k) | (arch | (uint64_t)adsm__nvrtc_cubin(c) << 13) << 48;
}

/* NVRTC, with unannotated functions (the ADSM_SHARED helpers) compiled for the device. */
ADSM__PRIVATE adsm_result adsm__cuda_single_compile(adsm__cuda *c, const adsm_kernel_desc *k) {
    static const char *const options[] = {"--device-as-default-execution-space", NULL};
    char file[300], what[300];
    snprintf(file, sizeof file, "%s.cu", k->name);
    snprintf(what, sizeof what, "kernel '%s' (ADSM_KERNEL_DEF)", k->name);
    adsm_result r = adsm__nvrtc_open(c); /* which kind of image it makes is part of the key */
    if (r != ADSM_OK) return r;
    uint64_t key = adsm__cuda_image_key(c, k);
    adsm__lock(&c->rt->lock);
    /* compiled for another GPU of this architecture, or under an earlier adsm_init */
    ptrdiff_t at = stbds_hmgeti(c->rt->kernel_images, key);
    adsm__image *image = at >= 0 ? adsm__image_dup(c->rt->kernel_images[at].value) : NULL;
    adsm__unlock(&c->rt->lock);
    if (!image) {
        char *text = adsm__cuda_single_source(k);
        if (!text) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "%s: out of memory", what);
        r = adsm__nvrtc_compile(c, text, options, file, what, &image);
        free(text);
    }
    if (r == ADSM_OK) {
        adsm__lock(&c->rt->lock);
        r = adsm__cuda_single_add(c, k, image);
        adsm__image *kept = r == ADSM_OK && stbds_hmgeti(c->rt->kernel_images, key) < 0 ? adsm__image_dup(image) : NULL;
        if (kept) stbds_hmput(c->rt->kernel_images, key, kept);
        adsm__unlock(&c->rt->lock);
    }
    free(image);
    return r;
}

/* Before a launch, no lock held: compiles a single-source kernel the first time it runs, unless
 * a loaded module has a (hand-written) kernel of its name. NVRTC runs outside the runtime lock. */
ADSM__PRIVATE adsm_result adsm__cuda_prepare(void *ctx, const adsm_kernel_desc *k) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (!k->cuda_source) return ADSM_OK;
    pthread_mutex_lock(&c->module_mutex);
    uint64_t key = adsm__cuda_kernel_key(k);
    adsm__lock(&c->rt->lock);
    int ready = stbds_hmgeti(c->ss_kernels, key) >= 0 || adsm__cuda_module_has(c, k->name);
    adsm__unlock(&c->rt->lock);
    ptrdiff_t failed = ready ? -1 : stbds_hmgeti(c->ss_failed, key);
    adsm_result r = ADSM_OK;
    if (failed >= 0) /* rejected before: the same text would be rejected again */
        r = adsm__fail(c->ss_failed[failed].value.code, "%s", c->ss_failed[failed].value.message);
    else if (!ready && (r = adsm__cuda_single_compile(c, k)) != ADSM_OK) {
        adsm__cuda_failure f = {r, strdup(adsm_last_error())};
        if (f.message) stbds_hmput(c->ss_failed, key, f);
    }
    pthread_mutex_unlock(&c->module_mutex);
    return r;
}

/* ---- a kernel's function -------------------------------------------------------------------- */
/* Checks the module's parameter layout against the ADSM_KERNEL declaration, where the driver can
 * tell (cuFuncGetParamInfo, CUDA 12.4): a size mismatch would hand the kernel garbage. The list
 * ends where the driver answers CUDA_ERROR_INVALID_VALUE; any other error means it cannot tell
 * (CUDA_ERROR_NOT_SUPPORTED, ...), not "no more parameters", so the check is skipped. */
ADSM__PRIVATE adsm_result adsm__cuda_check_params(adsm__cuda *c, const adsm_kernel_desc *k, adsm__cu_function fn) {
    if (!c->has_param_info) return ADSM_OK;
    size_t count = 0, off, size;
    for (; count <= ADSM__MAX_PARAMS; count++) {
        adsm__cu_result r = c->cu.cuFuncGetParamInfo(fn, count, &off, &size);
        if (r == ADSM__CUDA_ERROR_INVALID_VALUE) break;
        if (r != 0) {
            adsm__log(ADSM_LOG_INFO, "cuda: kernel '%s': parameters not checked (cuFuncGetParamInfo: %s)", k->name,
                      adsm__cu_name(c, r));
            return ADSM_OK;
        }
        if (count < k->nparams && size != k->params[count].size)
            return adsm__fail(ADSM_ERROR_INVALID_VALUE,
                              "kernel '%s': parameter %zu '%s' is %zu bytes in ADSM_KERNEL but %zu bytes in the "
                              "loaded module",
                              k->name, count + 1, k->params[count].name, k->params[count].size, size);
    }
    if (count != k->nparams)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': ADSM_KERNEL declares %u parameters, the loaded module's "
                          "kernel takes %zu", k->name, k->nparams, count);
    return ADSM_OK;
}

/* Normal context, runtime lock held: the function for a kernel, found by name once. */
ADSM__PRIVATE adsm_result adsm__cuda_function(adsm__cuda *c, const adsm_kernel_desc *k, adsm__cu_function *out) {
    uint64_t key = adsm__cuda_kernel_key(k); /* an lvalue: stb_ds takes its address in C++ */
    ptrdiff_t at = stbds_hmgeti(c->kernels, key);
    if (at >= 0) {
        *out = c->kernels[at].value;
        return ADSM_OK;
    }
    adsm__cu_context prev = adsm__cuda_enter(c);
    adsm__cu_function fn = NULL;
    adsm_result r = ADSM_OK;
    size_t nmodules = (size_t)stbds_arrlen(c->modules);
    for (size_t m = nmodules; m-- > 0 && !fn;) /* the newest module wins */
        if (c->cu.cuModuleGetFunction(&fn, c->modules[m], k->name) != 0) fn = NULL;
    ptrdiff_t ss = fn ? -1 : stbds_hmgeti(c->ss_kernels, key);
    if (ss >= 0) fn = c->ss_kernels[ss].value; /* no hand-written version: the single-source one */
    if (!fn)
        r = adsm__fail(ADSM_ERROR_KERNEL_NOT_FOUND,
                       "kernel '%s': no module loaded with adsm_module_load_* has it (%zu modules loaded)", k->name,
                       nmodules);
    if (fn) r = adsm__cuda_check_params(c, k, fn);
    adsm__cuda_leave(c, prev);
    if (r != ADSM_OK) return r;
    stbds_hmput(c->kernels, key, fn);
    *out = fn;
    return ADSM_OK;
}

#endif /* ADSM__CUDA_MODULES_INCLUDED */
