/* tests/cuda/test_driver_double.c -- checks libcudadouble.so, the CUDA driver test double.
 *
 * The library is dlopen'ed from the runfiles ($TEST_SRCDIR/adsm/tests/cuda/libcudadouble.so),
 * cuGetProcAddress_v2 comes from dlsym and every other entry point through it (version 12000;
 * cuFuncGetParamInfo 12040), exactly as adsm's cuda backend does. Each Criterion test runs in its
 * own process, so the CUDADOUBLE_* knobs are set with setenv before cuInit per test. Runs on the
 * test's main thread plus the threads some tests start themselves. */
#include "adsm_impl/cuda/cuda_driver.h"
#include "tests/cuda/driver_double.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <criterion/redirect.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)

static void *lib;
static adsm__pfn_cuGetProcAddress getproc;
static struct {
#define T_FIELD(name, version, required, ret, params) adsm__pfn_##name name;
    ADSM__CU_FUNCS(T_FIELD)
#undef T_FIELD
} cu;
static int (*reg_kernel)(const char *, cudadouble_kernel_fn, void *);
static void *(*host_view)(unsigned long long, size_t);
static void (*kernel_fault)(int);
static void (*get_counters)(cudadouble_counters *);

static const char *lib_path(void) {
    static char path[4096];
    const char *dir = getenv("TEST_SRCDIR");
    snprintf(path, sizeof path, "%s/adsm/tests/cuda/libcudadouble.so", dir ? dir : ".");
    return path;
}

/* dlopen + resolve everything; no cuInit. */
static void load(void) {
    lib = dlopen(lib_path(), RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib, "dlopen: %s", dlerror());
    getproc = (adsm__pfn_cuGetProcAddress)dlsym(lib, ADSM__CU_GET_PROC_ADDRESS_SYMBOL);
    cr_assert_not_null(getproc);
#define T_RESOLVE(name, version, required, ret, params)                                          \
    {                                                                                            \
        void *p = NULL;                                                                          \
        adsm__cu_proc_query_result st = -1;                                                      \
        int v = version > 12000 ? version : 12000;                                               \
        if (getproc(#name, &p, v, 0, &st) == 0) cu.name = (adsm__pfn_##name)p;                  \
        else cr_assert(!required, "cuGetProcAddress(%s) failed, status %d", #name, (int)st);     \
    }
    ADSM__CU_FUNCS(T_RESOLVE)
#undef T_RESOLVE
    reg_kernel = (int (*)(const char *, cudadouble_kernel_fn, void *))dlsym(lib, "cudadouble_register_kernel");
    host_view = (void *(*)(unsigned long long, size_t))dlsym(lib, "cudadouble_host_view");
    kernel_fault = (void (*)(int))dlsym(lib, "cudadouble_kernel_fault");
    get_counters = (void (*)(cudadouble_counters *))dlsym(lib, "cudadouble_get_counters");
    cr_assert(reg_kernel && host_view && kernel_fault && get_counters);
}

static adsm__cu_context ctx;

/* load + cuInit + primary context current on this thread */
static void up(void) {
    load();
    cr_assert_eq(cu.cuInit(0), 0);
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
    cr_assert_eq(cu.cuCtxSetCurrent(ctx), 0);
}

static adsm__cu_mem_alloc_prop prop0(void) {
    adsm__cu_mem_alloc_prop p;
    memset(&p, 0, sizeof p);
    p.type = ADSM__CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = ADSM__CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requested_handle_types = ADSM__CU_MEM_HANDLE_TYPE_NONE;
    return p;
}

static adsm__cu_mem_access_desc rw0(void) {
    adsm__cu_mem_access_desc d = {{ADSM__CU_MEM_LOCATION_TYPE_DEVICE, 0}, ADSM__CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return d;
}

struct devmem {
    adsm__cu_deviceptr d;
    size_t size;
    adsm__cu_mem_handle h;
};

/* reserve + create + map + read-write access */
static struct devmem dalloc(size_t size) {
    struct devmem m = {0, size, 0};
    adsm__cu_mem_alloc_prop p = prop0();
    adsm__cu_mem_access_desc a = rw0();
    cr_assert_eq(cu.cuMemAddressReserve(&m.d, size, 0, 0, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&m.h, size, &p, 0), 0);
    cr_assert_eq(cu.cuMemMap(m.d, size, 0, m.h, 0), 0);
    cr_assert_eq(cu.cuMemSetAccess(m.d, size, &a, 1), 0);
    return m;
}

static void dfree(struct devmem m) {
    cr_assert_eq(cu.cuMemUnmap(m.d, m.size), 0);
    cr_assert_eq(cu.cuMemRelease(m.h), 0);
    cr_assert_eq(cu.cuMemAddressFree(m.d, m.size), 0);
}

static unsigned long long rejected(void) {
    cudadouble_counters c;
    get_counters(&c);
    return c.rejected;
}

/* ------------------------------------------------------------------ cuGetProcAddress, exports */

Test(proc, lookup_rules) {
    load();
    void *p = (void *)1;
    adsm__cu_proc_query_result st = -1;
    cr_assert_eq(getproc("cuNoSuchThing", &p, 12000, 0, &st), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_null(p);
    cr_assert_eq(st, ADSM__CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    p = (void *)1;
    cr_assert_eq(getproc("cuFuncGetParamInfo", &p, 12000, 0, &st), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_null(p);
    cr_assert_eq(st, ADSM__CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    cr_assert_eq(getproc("cuMemCreate", &p, 10010, 0, &st), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, ADSM__CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    cr_assert_eq(getproc("cuFuncGetParamInfo", &p, 12040, 0, &st), 0);
    cr_assert_eq(st, ADSM__CU_GET_PROC_ADDRESS_SUCCESS);
    cr_assert_eq(p, dlsym(lib, "cuFuncGetParamInfo"));
    cr_assert_eq(getproc("cuInit", &p, 12000, 1, &st), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(getproc("cuInit", NULL, 12000, 0, &st), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(getproc(NULL, &p, 12000, 0, &st), ADSM__CUDA_ERROR_INVALID_VALUE);
    /* every entry point is resolvable at its version and exported under its plain name */
#define T_EXPORTED(name, version, required, ret, params)                       \
    cr_assert_eq(getproc(#name, &p, version, 0, &st), 0, "%s", #name);         \
    cr_assert_not_null(dlsym(lib, #name), "%s not exported", #name);           \
    cr_assert_eq(p, dlsym(lib, #name), "%s", #name);
    ADSM__CU_FUNCS(T_EXPORTED)
#undef T_EXPORTED
    /* internals are hidden */
    const char *hidden[] = {"note", "lex", "g", "run_op", "stream_worker", "parse_ptx", "submit", "dev_view"};
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
        cr_assert_null(dlsym(lib, hidden[i]), "%s is exported", hidden[i]);
}

Test(proc, no_param_info_knob) {
    setenv("CUDADOUBLE_NO_PARAM_INFO", "1", 1);
    load();
    cr_assert_eq(cu.cuInit(0), 0);
    void *p = (void *)1;
    adsm__cu_proc_query_result st = -1;
    cr_assert_eq(getproc("cuFuncGetParamInfo", &p, 12040, 0, &st), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_null(p);
    cr_assert_eq(st, ADSM__CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

/* ------------------------------------------------------------------ init, versions, errors */

Test(init, before_cuinit) {
    load();
    int n = 0, v = 0;
    adsm__cu_stream s;
    void *h;
    size_t f, t;
    cr_assert_eq(cu.cuDriverGetVersion(&v), 0);
    cr_assert_eq(v, 12080);
    const char *name = NULL;
    cr_assert_eq(cu.cuGetErrorName(ADSM__CUDA_ERROR_NOT_INITIALIZED, &name), 0);
    cr_assert_str_eq(name, "CUDA_ERROR_NOT_INITIALIZED");
    cr_assert_eq(cu.cuDeviceGetCount(&n), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(&ctx, 0), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuCtxSetCurrent(NULL), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuStreamCreate(&s, 0), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuMemAllocHost(&h, 16), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuMemGetInfo(&f, &t), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuCtxSynchronize(), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuInit(1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDeviceGetCount(&n), ADSM__CUDA_ERROR_NOT_INITIALIZED);
    cr_assert_eq(cu.cuDriverGetVersion(NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuInit(0), 0);
    cr_assert_eq(cu.cuInit(0), 0);
    cr_assert_eq(cu.cuDeviceGetCount(&n), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(cu.cuDeviceGetCount(NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
}

Test(init, no_device) {
    setenv("CUDADOUBLE_DEVICES", "0", 1);
    load();
    cr_assert_eq(cu.cuInit(0), ADSM__CUDA_ERROR_NO_DEVICE);
    int n;
    cr_assert_eq(cu.cuDeviceGetCount(&n), ADSM__CUDA_ERROR_NOT_INITIALIZED);
}

Test(init, knobs) {
    setenv("CUDADOUBLE_DEVICES", "3", 1);
    setenv("CUDADOUBLE_DRIVER_VERSION", "12000", 1);
    setenv("CUDADOUBLE_MEMORY", "8388608", 1);
    up();
    int n, v;
    size_t total;
    cr_assert_eq(cu.cuDeviceGetCount(&n), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(cu.cuDriverGetVersion(&v), 0);
    cr_assert_eq(v, 12000);
    cr_assert_eq(cu.cuDeviceTotalMem(&total, 2), 0);
    cr_assert_eq(total, 8 * MiB);
}

Test(init, error_names_and_strings) {
    load();
    const char *s;
#define T_ERR(name, value)                                                 \
    cr_assert_eq(cu.cuGetErrorName(value, &s), 0);                         \
    cr_assert_str_eq(s, #name);                                            \
    s = NULL;                                                              \
    cr_assert_eq(cu.cuGetErrorString(value, &s), 0);                       \
    cr_assert(s && *s);
    ADSM__CU_RESULTS(T_ERR)
#undef T_ERR
    s = "x";
    cr_assert_eq(cu.cuGetErrorName(12345, &s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
    s = "x";
    cr_assert_eq(cu.cuGetErrorString(12345, &s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
    cr_assert_eq(cu.cuGetErrorName(0, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuGetErrorString(0, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
}

/* ------------------------------------------------------------------ devices, contexts */

Test(device, queries) {
    up();
    adsm__cu_device d = -1;
    cr_assert_eq(cu.cuDeviceGet(&d, 0), 0);
    cr_assert_eq(d, 0);
    cr_assert_eq(cu.cuDeviceGet(&d, 1), ADSM__CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cu.cuDeviceGet(&d, -1), ADSM__CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cu.cuDeviceGet(NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    char name[64];
    cr_assert_eq(cu.cuDeviceGetName(name, sizeof name, 0), 0);
    cr_assert_str_eq(name, "adsm driver double");
    cr_assert_eq(cu.cuDeviceGetName(name, 5, 0), 0);
    cr_assert_str_eq(name, "adsm");
    cr_assert_eq(cu.cuDeviceGetName(NULL, 5, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDeviceGetName(name, 5, 7), ADSM__CUDA_ERROR_INVALID_DEVICE);
    size_t total;
    cr_assert_eq(cu.cuDeviceTotalMem(&total, 0), 0);
    cr_assert_eq(total, (size_t)1 << 30);
    cr_assert_eq(cu.cuDeviceTotalMem(NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDeviceTotalMem(&total, 1), ADSM__CUDA_ERROR_INVALID_DEVICE);
    struct {
        int attr, value;
    } attrs[] = {
        {ADSM__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
        {ADSM__CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
        {ADSM__CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
        {ADSM__CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2},
        {ADSM__CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {ADSM__CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        int v = -1;
        cr_assert_eq(cu.cuDeviceGetAttribute(&v, attrs[i].attr, 0), 0);
        cr_assert_eq(v, attrs[i].value, "attribute %d", attrs[i].attr);
    }
    int v;
    cr_assert_eq(cu.cuDeviceGetAttribute(&v, 9999, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDeviceGetAttribute(NULL, 1, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDeviceGetAttribute(&v, 1, 3), ADSM__CUDA_ERROR_INVALID_DEVICE);
}

static void *no_ctx_thread(void *arg) {
    (void)arg;
    adsm__cu_stream s;
    size_t f, t;
    long bad = 0;
    bad += cu.cuStreamCreate(&s, 0) != ADSM__CUDA_ERROR_INVALID_CONTEXT;
    bad += cu.cuMemGetInfo(&f, &t) != ADSM__CUDA_ERROR_INVALID_CONTEXT;
    bad += cu.cuCtxSynchronize() != ADSM__CUDA_ERROR_INVALID_CONTEXT;
    bad += cu.cuCtxSetCurrent(ctx) != 0;
    bad += cu.cuMemGetInfo(&f, &t) != 0;
    return (void *)bad;
}

Test(context, current_context_required) {
    up();
    adsm__cu_context c2;
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(&c2, 0), 0);
    cr_assert_eq(c2, ctx, "one primary context per device");
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(&c2, 4), ADSM__CUDA_ERROR_INVALID_DEVICE);
    cr_assert_eq(cu.cuDevicePrimaryCtxRelease(4), ADSM__CUDA_ERROR_INVALID_DEVICE);
    /* another thread that forgot cuCtxSetCurrent */
    pthread_t t;
    void *bad;
    pthread_create(&t, NULL, no_ctx_thread, NULL);
    pthread_join(t, &bad);
    cr_assert_eq((long)bad, 0);
    /* this thread, after clearing its context */
    cr_assert_eq(cu.cuCtxSetCurrent(NULL), 0);
    adsm__cu_stream s;
    adsm__cu_event e;
    void *h;
    adsm__cu_deviceptr d;
    adsm__cu_module m;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuEventCreate(&e, 0), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuMemAllocHost(&h, 10), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuMemAddressReserve(&d, GRAN, 0, 0, 0), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuModuleLoadDataEx(&m, ".version 8.0\n.target sm_90\n", 0, NULL, NULL),
                 ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuMemsetD8Async(0x1000, 0, 1, NULL), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuCtxSynchronize(), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuCtxSetCurrent((adsm__cu_context)&s), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuCtxSetCurrent(ctx), 0);
    cr_assert_eq(cu.cuCtxSynchronize(), 0);
    /* released twice (retained twice): the context is gone, then a third release fails */
    cr_assert_eq(cu.cuDevicePrimaryCtxRelease(0), 0);
    cr_assert_eq(cu.cuDevicePrimaryCtxRelease(0), 0);
    cr_assert_eq(cu.cuCtxSynchronize(), ADSM__CUDA_ERROR_INVALID_CONTEXT);
    cr_assert_eq(cu.cuDevicePrimaryCtxRelease(0), ADSM__CUDA_ERROR_INVALID_CONTEXT);
}

/* ------------------------------------------------------------------ virtual memory */

Test(vmm, granularity_and_props) {
    up();
    adsm__cu_mem_alloc_prop p = prop0();
    size_t gr = 0;
    cr_assert_eq(cu.cuMemGetAllocationGranularity(&gr, &p, ADSM__CU_MEM_ALLOC_GRANULARITY_MINIMUM), 0);
    cr_assert_eq(gr, GRAN);
    cr_assert_eq(cu.cuMemGetAllocationGranularity(&gr, &p, ADSM__CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), 0);
    cr_assert_eq(gr, GRAN);
    cr_assert_eq(cu.cuMemGetAllocationGranularity(&gr, &p, 7), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemGetAllocationGranularity(NULL, &p, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemGetAllocationGranularity(&gr, NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    adsm__cu_mem_handle h;
    adsm__cu_mem_alloc_prop bad[4] = {p, p, p, p};
    bad[0].type = 2;
    bad[1].location.type = 2;
    bad[2].location.id = 1;
    bad[3].requested_handle_types = 1;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(cu.cuMemGetAllocationGranularity(&gr, &bad[i], 0), ADSM__CUDA_ERROR_INVALID_VALUE, "%d", i);
        cr_assert_eq(cu.cuMemCreate(&h, GRAN, &bad[i], 0), ADSM__CUDA_ERROR_INVALID_VALUE, "%d", i);
    }
    cr_assert_eq(cu.cuMemCreate(&h, GRAN + 4096, &p, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemCreate(&h, 0, &p, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemCreate(&h, GRAN, &p, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemCreate(NULL, GRAN, &p, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemRelease(0xdead), ADSM__CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, reserve_and_hints) {
    up();
    adsm__cu_deviceptr d = 0, d2 = 0;
    cr_assert_eq(cu.cuMemAddressReserve(&d, 0, 0, 0, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressReserve(&d, GRAN + 1, 0, 0, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressReserve(&d, GRAN, 0, 0, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressReserve(NULL, GRAN, 0, 0, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressReserve(&d, 4 * GRAN, 4 * GRAN, 0, 0), 0);
    cr_assert_eq(d % (4 * GRAN), 0);
    /* a hint on an existing host mapping is refused: the range goes elsewhere */
    size_t sz = 4 * GRAN;
    char *host = mmap(NULL, 2 * sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(host, MAP_FAILED);
    uintptr_t hint = ((uintptr_t)host + GRAN - 1) / GRAN * GRAN;
    host[hint - (uintptr_t)host] = 42;
    cr_assert_eq(cu.cuMemAddressReserve(&d2, GRAN, 0, hint, 0), 0);
    cr_assert_neq(d2, hint);
    cr_assert_eq(d2 % GRAN, 0);
    cr_assert_eq(host[hint - (uintptr_t)host], 42, "the host mapping is untouched");
    cr_assert_eq(cu.cuMemAddressFree(d2, GRAN), 0);
    /* a free hint is honoured */
    munmap(host, 2 * sz);
    cr_assert_eq(cu.cuMemAddressReserve(&d2, GRAN, 0, hint, 0), 0);
    cr_assert_eq(d2, hint);
    /* the placeholder keeps the host out of the range */
    void *q = mmap((void *)hint, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    cr_assert(q == MAP_FAILED || q != (void *)hint);
    cudadouble_counters c;
    get_counters(&c);
    cr_assert_eq(c.reservations, 2);
    /* free must match exactly */
    cr_assert_eq(cu.cuMemAddressFree(d, 2 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressFree(d + GRAN, 3 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressFree(d, 4 * GRAN), 0);
    cr_assert_eq(cu.cuMemAddressFree(d, 4 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemAddressFree(d2, GRAN), 0);
}

Test(vmm, map_access_unmap) {
    up();
    adsm__cu_mem_alloc_prop p = prop0();
    adsm__cu_mem_access_desc a = rw0();
    size_t free0, total;
    cr_assert_eq(cu.cuMemGetInfo(&free0, &total), 0);
    cr_assert_eq(total, (size_t)1 << 30);
    cr_assert_eq(free0, total);
    cr_assert_eq(cu.cuMemGetInfo(NULL, &total), ADSM__CUDA_ERROR_INVALID_VALUE);
    adsm__cu_deviceptr d;
    adsm__cu_mem_handle h, h2;
    cr_assert_eq(cu.cuMemAddressReserve(&d, 4 * GRAN, 0, 0, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&h, 2 * GRAN, &p, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&h2, GRAN, &p, 0), 0);
    size_t f;
    cr_assert_eq(cu.cuMemGetInfo(&f, &total), 0);
    cr_assert_eq(f, free0 - 3 * GRAN);
    /* map rejections */
    cr_assert_eq(cu.cuMemMap(d, 2 * GRAN, GRAN, h, 0), ADSM__CUDA_ERROR_INVALID_VALUE);  /* offset */
    cr_assert_eq(cu.cuMemMap(d, 2 * GRAN, 0, h, 1), ADSM__CUDA_ERROR_INVALID_VALUE);     /* flags */
    cr_assert_eq(cu.cuMemMap(d + 4096, GRAN, 0, h, 0), ADSM__CUDA_ERROR_INVALID_VALUE);  /* alignment */
    cr_assert_eq(cu.cuMemMap(d, GRAN + 4096, 0, h, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemMap(d + 3 * GRAN, 2 * GRAN, 0, h, 0), ADSM__CUDA_ERROR_INVALID_VALUE); /* outside */
    cr_assert_eq(cu.cuMemMap(d, 2 * GRAN, 0, h2, 0), ADSM__CUDA_ERROR_INVALID_VALUE);    /* > handle */
    cr_assert_eq(cu.cuMemMap(d, GRAN, 0, 0xbad, 0), ADSM__CUDA_ERROR_INVALID_VALUE);     /* handle */
    cr_assert_eq(cu.cuMemMap(d, 2 * GRAN, 0, h, 0), 0);
    cr_assert_eq(cu.cuMemMap(d + GRAN, GRAN, 0, h2, 0), ADSM__CUDA_ERROR_INVALID_VALUE); /* already mapped */
    cr_assert_eq(cu.cuMemMap(d + 2 * GRAN, GRAN, 0, h2, 0), 0);
    /* mapped but no access yet: not valid device memory */
    cr_assert_null(host_view(d, 16));
    cr_assert_eq(cu.cuMemsetD8Async(d, 0, 16, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    /* access rejections */
    cr_assert_eq(cu.cuMemSetAccess(d, 4 * GRAN, &a, 1), ADSM__CUDA_ERROR_INVALID_VALUE); /* not all mapped */
    cr_assert_eq(cu.cuMemSetAccess(d, GRAN, NULL, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemSetAccess(d, GRAN, &a, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    adsm__cu_mem_access_desc badd = a;
    badd.location.id = 3;
    cr_assert_eq(cu.cuMemSetAccess(d, GRAN, &badd, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    badd = a;
    badd.flags = 2;
    cr_assert_eq(cu.cuMemSetAccess(d, GRAN, &badd, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemSetAccess(d, 3 * GRAN, &a, 1), 0);
    cudadouble_counters c;
    get_counters(&c);
    cr_assert_eq(c.device_bytes_mapped, 3 * GRAN);
    /* fresh memory is garbage, not zeros */
    unsigned char *v = host_view(d, 3 * GRAN);
    cr_assert_not_null(v);
    for (size_t i = 0; i < 3 * GRAN; i += 4093) cr_assert_eq(v[i], 0xA5, "byte %zu", i);
    cr_assert_null(host_view(d + 3 * GRAN - 8, 16), "runs past the mapped range");
    /* unmap must cover whole mappings */
    cr_assert_eq(cu.cuMemUnmap(d, GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemUnmap(d + GRAN, 2 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemUnmap(d, 4 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE); /* includes unmapped */
    /* free with mappings in it */
    cr_assert_eq(cu.cuMemAddressFree(d, 4 * GRAN), ADSM__CUDA_ERROR_INVALID_VALUE);
    /* release while mapped: freed when the mapping goes */
    cr_assert_eq(cu.cuMemRelease(h), 0);
    cr_assert_eq(cu.cuMemRelease(h), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemGetInfo(&f, &total), 0);
    cr_assert_eq(f, free0 - 3 * GRAN);
    cr_assert_not_null(host_view(d, 16));
    cr_assert_eq(cu.cuMemUnmap(d, 2 * GRAN), 0);
    cr_assert_null(host_view(d, 16));
    cr_assert_eq(cu.cuMemGetInfo(&f, &total), 0);
    cr_assert_eq(f, free0 - GRAN);
    cr_assert_eq(cu.cuMemSetAccess(d, GRAN, &a, 1), ADSM__CUDA_ERROR_INVALID_VALUE); /* unmapped now */
    cr_assert_eq(cu.cuMemUnmap(d + 2 * GRAN, GRAN), 0);
    cr_assert_eq(cu.cuMemRelease(h2), 0);
    cr_assert_eq(cu.cuMemGetInfo(&f, &total), 0);
    cr_assert_eq(f, free0);
    /* memory recycled from the pool is garbage again */
    struct devmem m = dalloc(GRAN);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 0, GRAN, NULL), 0);
    dfree(m);
    m = dalloc(GRAN);
    v = host_view(m.d, GRAN);
    cr_assert_eq(v[0], 0xA5);
    cr_assert_eq(v[GRAN - 1], 0xA5);
    dfree(m);
    cr_assert_eq(cu.cuMemAddressFree(d, 4 * GRAN), 0);
    get_counters(&c);
    cr_assert_eq(c.device_bytes_mapped, 0);
    cr_assert_eq(c.reservations, 0);
}

Test(vmm, out_of_memory) {
    setenv("CUDADOUBLE_MEMORY", "8388608", 1);
    up();
    adsm__cu_mem_alloc_prop p = prop0();
    adsm__cu_mem_handle h, h2;
    cr_assert_eq(cu.cuMemCreate(&h, 6 * MiB, &p, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&h2, 4 * MiB, &p, 0), ADSM__CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(cu.cuMemCreate(&h2, 2 * MiB, &p, 0), 0);
    cr_assert_eq(cu.cuMemRelease(h), 0);
    cr_assert_eq(cu.cuMemCreate(&h, 6 * MiB, &p, 0), 0);
}

/* ------------------------------------------------------------------ host memory */

Test(host, alloc_free) {
    up();
    void *p = NULL;
    cr_assert_eq(cu.cuMemAllocHost(&p, 100), 0);
    cr_assert_eq((uintptr_t)p % 4096, 0);
    memset(p, 1, 100);
    cr_assert_eq(cu.cuMemAllocHost(NULL, 100), ADSM__CUDA_ERROR_INVALID_VALUE);
    char local[16];
    cr_assert_eq(cu.cuMemFreeHost(local), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemFreeHost((char *)p + 8), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemFreeHost(p), 0);
    cr_assert_eq(cu.cuMemFreeHost(p), ADSM__CUDA_ERROR_INVALID_VALUE);
}

Test(host, no_pinned_knob) {
    setenv("CUDADOUBLE_NO_PINNED", "1", 1);
    up();
    void *p;
    cr_assert_eq(cu.cuMemAllocHost(&p, 100), ADSM__CUDA_ERROR_OUT_OF_MEMORY);
}

/* Registration pins pages for writing: a PROT_NONE or read-only range is refused, a read-write
 * one is taken, and once pinned its pages take DMA whatever their protection becomes. */
Test(host, register_needs_writable_pages) {
    up();
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 4 * page;
    unsigned char *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    cr_assert_eq(cu.cuMemHostRegister(p, n, 0), ADSM__CUDA_ERROR_INVALID_VALUE, "PROT_NONE pages");
    cr_assert_eq(mprotect(p, n, PROT_READ), 0);
    cr_assert_eq(cu.cuMemHostRegister(p, n, 0), ADSM__CUDA_ERROR_INVALID_VALUE, "read-only pages");
    cr_assert_eq(mprotect(p + page, page, PROT_READ | PROT_WRITE), 0);
    cr_assert_eq(cu.cuMemHostRegister(p, n, 0), ADSM__CUDA_ERROR_INVALID_VALUE, "one page of four writable");
    cr_assert_eq(mprotect(p, n, PROT_READ | PROT_WRITE), 0);
    cr_assert_eq(cu.cuMemHostRegister(p, n, 0), 0, "read-write pages");
    cr_assert_eq(mprotect(p, n, PROT_NONE), 0);
    struct devmem m = dalloc(2 * MiB);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 0x5a, n, NULL), 0);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(p, m.d, n, NULL), 0, "DMA into pinned PROT_NONE pages");
    cr_assert_eq(cu.cuCtxSynchronize(), 0);
    cr_assert_eq(mprotect(p, n, PROT_READ), 0);
    cr_assert_eq(p[0], 0x5a);
    cr_assert_eq(p[n - 1], 0x5a);
    cr_assert_eq(cu.cuMemHostUnregister(p), 0);
    dfree(m);
    munmap(p, n);
}

/* An asynchronous upload from registered pages reads them when it runs, whatever their
 * protection then: a program may protect the pages PROT_NONE while the copy is queued (DMA
 * ignores the CPU's page tables). The copy is delayed, so it runs after the mprotect. */
Test(host, upload_from_pinned_pages_ignores_their_protection) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    up();
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 4 * page;
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    memset(p, 0x3c, n);
    cr_assert_eq(cu.cuMemHostRegister(p, n, 0), 0);
    struct devmem m = dalloc(2 * MiB);
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, ADSM__CU_STREAM_NON_BLOCKING), 0);
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, p, n, s), 0);
    cr_assert_eq(mprotect(p, n, PROT_NONE), 0); /* before the delayed copy runs */
    cr_assert_eq(cu.cuStreamSynchronize(s), 0, "the upload from PROT_NONE pinned pages failed");
    unsigned char back[64];
    cr_assert_eq(cu.cuMemcpyDtoHAsync(back, m.d + n - sizeof back, sizeof back, s), 0);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    for (size_t i = 0; i < sizeof back; i++) cr_assert_eq(back[i], 0x3c, "byte %zu: %#x", i, back[i]);
    cr_assert_eq(mprotect(p, n, PROT_READ | PROT_WRITE), 0);
    cr_assert_eq(cu.cuMemHostUnregister(p), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    dfree(m);
    munmap(p, n);
}

/* ------------------------------------------------------------------ copies */

Test(copy, roundtrip_and_rejections) {
    up();
    struct devmem m = dalloc(2 * GRAN);
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)i;
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d + 10, src, sizeof src, s), 0);
    cr_assert_eq(cu.cuMemcpyDtoDAsync(m.d + GRAN - 100, m.d + 10, sizeof src, s), 0); /* across granules */
    cr_assert_eq(cu.cuMemsetD8Async(m.d + GRAN - 100, 7, 3, s), 0);
    memset(dst, 0, sizeof dst);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(dst, m.d + GRAN - 100, sizeof dst, s), 0);
    /* pageable DtoH returns with the data in place */
    cr_assert_eq(dst[0], 7);
    cr_assert_eq(dst[2], 7);
    cr_assert_eq(memcmp(dst + 3, src + 3, sizeof dst - 3), 0);
    /* n = 0 */
    cr_assert_eq(cu.cuMemcpyHtoDAsync(0, NULL, 0, s), 0);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(NULL, 0, 0, s), 0);
    cr_assert_eq(cu.cuMemcpyDtoDAsync(0, 0, 0, s), 0);
    cr_assert_eq(cu.cuMemsetD8Async(0, 0, 0, s), 0);
    unsigned long long rej = rejected();
    /* device ranges that are not valid */
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d + 2 * GRAN - 10, src, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(dst, m.d - 4096, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyDtoDAsync(m.d, 0x1234, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyDtoDAsync(0x1234, m.d, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemsetD8Async(m.d + 2 * GRAN, 0, 1, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyHtoDAsync((adsm__cu_deviceptr)(uintptr_t)src, src, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    /* a device address passed as a host pointer */
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, (void *)(uintptr_t)(m.d + 64), 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyDtoHAsync((void *)(uintptr_t)(m.d + 64), m.d, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, NULL, 20, s), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(rejected(), rej + 9);
    /* bad stream */
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, src, 20, (adsm__cu_stream)src), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cudadouble_counters c;
    get_counters(&c);
    cr_assert_eq(c.h2d_bytes, 1000);
    cr_assert_eq(c.d2h_bytes, 1000);
    cr_assert_eq(c.d2d_bytes, 1000);
    cr_assert_eq(c.memset_bytes, 3);
    cr_assert_eq(c.h2d_pageable, 1);
    cr_assert_eq(c.d2h_pageable, 1);
    cr_assert_eq(c.h2d_async, 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    dfree(m);
}

Test(copy, pinned_is_asynchronous_pageable_is_not) {
    setenv("CUDADOUBLE_DELAY_US", "100000", 1);
    up();
    struct devmem m = dalloc(GRAN);
    adsm__cu_stream s;
    adsm__cu_event e;
    cr_assert_eq(cu.cuStreamCreate(&s, ADSM__CU_STREAM_NON_BLOCKING), 0);
    cr_assert_eq(cu.cuEventCreate(&e, ADSM__CU_EVENT_DISABLE_TIMING), 0);
    unsigned char *pin;
    cr_assert_eq(cu.cuMemAllocHost((void **)&pin, 4096), 0);
    /* pinned DtoH: buffer untouched right after the call, right after the event */
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 0x11, 4096, s), 0);
    memset(pin, 0, 4096);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(pin, m.d, 4096, s), 0);
    cr_assert_eq(cu.cuEventRecord(e, s), 0);
    cr_assert_eq(pin[0], 0);
    cr_assert_eq(pin[4095], 0);
    cr_assert_eq(cu.cuEventSynchronize(e), 0);
    cr_assert_eq(pin[0], 0x11);
    cr_assert_eq(pin[4095], 0x11);
    /* pinned HtoD: the source is read later, so reusing it too early corrupts the copy */
    memset(pin, 0x22, 4096);
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, pin, 4096, s), 0);
    memset(pin, 0x33, 4096);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cr_assert_eq(((unsigned char *)host_view(m.d, 4096))[100], 0x33);
    /* pageable HtoD: staged at the call, so reuse is safe */
    unsigned char *pg = malloc(4096);
    memset(pg, 0x44, 4096);
    cr_assert_eq(cu.cuMemcpyHtoDAsync(m.d, pg, 4096, s), 0);
    memset(pg, 0x55, 4096);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cr_assert_eq(((unsigned char *)host_view(m.d, 4096))[100], 0x44);
    /* pageable DtoH: complete when the call returns, after earlier work on the stream */
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 0x66, 4096, s), 0);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(pg, m.d, 4096, s), 0);
    cr_assert_eq(pg[0], 0x66);
    cr_assert_eq(pg[4095], 0x66);
    /* a host range only partly pinned is pageable (when the page after `pin` can be had) */
    unsigned long long partial = 0;
    void *next = mmap(pin + 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (next == (void *)(pin + 4096)) {
        memset(pin + 4000, 0, 200);
        cr_assert_eq(cu.cuMemcpyDtoHAsync(pin + 4000, m.d, 200, s), 0);
        cr_assert_eq(pin[4000], 0x66, "pageable: complete at return");
        cr_assert_eq(pin[4199], 0x66);
        munmap(next, 4096);
        partial = 1;
    } else if (next != MAP_FAILED) {
        munmap(next, 4096);
    }
    cudadouble_counters c;
    get_counters(&c);
    cr_assert_eq(c.d2h_async, 1);
    cr_assert_eq(c.h2d_async, 1);
    cr_assert_eq(c.h2d_pageable, 1);
    cr_assert_eq(c.d2h_pageable, 1 + partial);
    free(pg);
    cr_assert_eq(cu.cuMemFreeHost(pin), 0);
    cr_assert_eq(cu.cuEventDestroy(e), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    dfree(m);
}

Test(copy, null_stream_is_synchronous) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    up();
    struct devmem m = dalloc(GRAN);
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    unsigned char *pin;
    cr_assert_eq(cu.cuMemAllocHost((void **)&pin, 4096), 0);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 0x5a, 4096, s), 0); /* delayed on s */
    cr_assert_eq(cu.cuMemcpyDtoHAsync(pin, m.d, 4096, NULL), 0);
    cr_assert_eq(pin[7], 0x5a, "the NULL stream waited for s, then ran in the caller");
    cr_assert_eq(cu.cuStreamSynchronize(NULL), 0);
    cr_assert_eq(cu.cuMemFreeHost(pin), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    dfree(m);
}

/* ------------------------------------------------------------------ streams and events */

Test(stream, handles) {
    up();
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 2), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuStreamCreate(NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuStreamSynchronize(s), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuMemsetD8Async(0, 0, 1, s), ADSM__CUDA_ERROR_INVALID_HANDLE);
    int junk;
    cr_assert_eq(cu.cuStreamSynchronize((adsm__cu_stream)&junk), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuStreamDestroy(NULL), ADSM__CUDA_ERROR_INVALID_HANDLE);
}

Test(stream, destroy_waits_for_queued_work) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    up();
    struct devmem m = dalloc(GRAN);
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 9, 64, s), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    cr_assert_eq(((unsigned char *)host_view(m.d, 64))[63], 9);
    dfree(m);
}

Test(event, semantics) {
    up();
    adsm__cu_event e;
    adsm__cu_stream s;
    cr_assert_eq(cu.cuEventCreate(&e, 4), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuEventCreate(NULL, 0), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuEventCreate(&e, ADSM__CU_EVENT_BLOCKING_SYNC | ADSM__CU_EVENT_DISABLE_TIMING), 0);
    cr_assert_eq(cu.cuEventSynchronize(e), 0, "never recorded: complete");
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    cr_assert_eq(cu.cuStreamWaitEvent(s, e, 1), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuStreamWaitEvent(s, e, 0), 0);
    cr_assert_eq(cu.cuEventRecord(e, s), 0);
    cr_assert_eq(cu.cuEventRecord(e, NULL), 0);
    cr_assert_eq(cu.cuEventSynchronize(e), 0);
    cr_assert_eq(cu.cuEventRecord(e, (adsm__cu_stream)&e), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuEventDestroy(e), 0);
    cr_assert_eq(cu.cuEventDestroy(e), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuEventSynchronize(e), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuEventRecord(e, s), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuStreamWaitEvent(s, e, 0), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
}

/* kernel that appends its tag (first parameter, u32) to a log */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned order_log[64];
static int order_n;
static void k_tag(const cudadouble_launch *l, void *user) {
    (void)user;
    unsigned tag;
    memcpy(&tag, l->param[0], 4);
    pthread_mutex_lock(&log_mu);
    order_log[order_n++] = tag;
    pthread_mutex_unlock(&log_mu);
}

static const char *tag_ptx = ".version 8.0\n.target sm_90\n.address_size 64\n"
                             ".visible .entry tag(\n\t.param .u32 tag_param_0\n)\n{\n\tret;\n}\n";

static adsm__cu_function load_fn(const char *ptx, const char *name) {
    adsm__cu_module mod;
    adsm__cu_function f;
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, ptx, 0, NULL, NULL), 0);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, name), 0);
    return f;
}

static void launch_tag(adsm__cu_function f, unsigned tag, adsm__cu_stream s) {
    void *params[] = {&tag};
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), 0);
}

Test(event, stream_wait_event_orders_two_streams) {
    setenv("CUDADOUBLE_DELAY_US", "30000", 1);
    up();
    reg_kernel("tag", k_tag, NULL);
    adsm__cu_function f = load_fn(tag_ptx, "tag");
    adsm__cu_stream a, b;
    adsm__cu_event e;
    cr_assert_eq(cu.cuStreamCreate(&a, 0), 0);
    cr_assert_eq(cu.cuStreamCreate(&b, 0), 0);
    cr_assert_eq(cu.cuEventCreate(&e, 0), 0);
    launch_tag(f, 1, a);
    launch_tag(f, 2, a);
    launch_tag(f, 3, a);
    cr_assert_eq(cu.cuEventRecord(e, a), 0);
    cr_assert_eq(cu.cuStreamWaitEvent(b, e, 0), 0);
    launch_tag(f, 4, a); /* after the record: b need not wait for it */
    cr_assert_eq(cu.cuEventRecord(e, a), 0); /* a new generation: b's wait is unaffected */
    launch_tag(f, 10, b);
    cr_assert_eq(cu.cuStreamSynchronize(b), 0);
    pthread_mutex_lock(&log_mu);
    int pos10 = -1;
    for (int i = 0; i < order_n; i++)
        if (order_log[i] == 10) pos10 = i;
    cr_assert_geq(pos10, 3, "b's kernel ran before a reached the event (pos %d)", pos10);
    for (int i = 0; i < pos10; i++) cr_assert_neq(order_log[i], 10);
    pthread_mutex_unlock(&log_mu);
    cr_assert_eq(cu.cuCtxSynchronize(), 0);
    cr_assert_eq(order_n, 5);
    cr_assert_eq(cu.cuStreamDestroy(a), 0);
    cr_assert_eq(cu.cuStreamDestroy(b), 0);
    cr_assert_eq(cu.cuEventDestroy(e), 0);
}

Test(event, independent_streams_overlap) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    up();
    reg_kernel("tag", k_tag, NULL);
    adsm__cu_function f = load_fn(tag_ptx, "tag");
    adsm__cu_stream a, b;
    cr_assert_eq(cu.cuStreamCreate(&a, 0), 0);
    cr_assert_eq(cu.cuStreamCreate(&b, 0), 0);
    for (unsigned i = 0; i < 4; i++) launch_tag(f, 1, a);
    launch_tag(f, 2, b);
    cr_assert_eq(cu.cuStreamSynchronize(b), 0);
    pthread_mutex_lock(&log_mu);
    int n = order_n;
    pthread_mutex_unlock(&log_mu);
    cr_assert_lt(n, 5, "b waited for a without being asked to");
    cr_assert_eq(cu.cuCtxSynchronize(), 0);
    cr_assert_eq(order_n, 5);
    cr_assert_eq(cu.cuStreamDestroy(a), 0);
    cr_assert_eq(cu.cuStreamDestroy(b), 0);
}

/* ------------------------------------------------------------------ modules */

/* What NVRTC 13 emits for two kernels (abridged bodies). */
static const char *real_ptx =
    "//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-36424714\n"
    "// Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n"
    ".version 9.0\n.target sm_90\n.address_size 64\n\n\t// .globl\tvecadd\n\n"
    ".visible .entry vecadd(\n\t.param .u64 vecadd_param_0,\n\t.param .u64 vecadd_param_1,\n"
    "\t.param .u64 vecadd_param_2\n)\n{\n\t.reg .f32 \t%f<4>;\n\t.reg .b32 \t%r<2>;\n\t.reg .b64 \t%rd<11>;\n\n\n"
    "\tld.param.u64 \t%rd1, [vecadd_param_0];\n\tret;\n\n}\n\t// .globl\tmixed\n"
    ".visible .entry mixed(\n\t.param .u8 mixed_param_0,\n\t.param .u16 mixed_param_1,\n"
    "\t.param .u32 mixed_param_2,\n\t.param .f64 mixed_param_3,\n\t.param .align 8 .b8 mixed_param_4[16],\n"
    "\t.param .u64 mixed_param_5,\n\t.param .u64 mixed_param_6\n)\n{\n\t.reg .pred \t%p<2>;\n\tret;\n\n}\n"
    "/* .entry commented_out(.param .u32 x) */\n"
    ".weak .entry noargs()\n{\n\tret;\n}\n"
    ".entry odd(.param .b16 a, .param .align 4 .b8 s[12], .param .s8 c, .param .f32 x)\n{\n\tret;\n}\n";

Test(module, parses_real_ptx) {
    up();
    adsm__cu_module mod;
    adsm__cu_function f;
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, real_ptx, 0, NULL, NULL), 0);
    size_t off, size;
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "vecadd"), 0);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(cu.cuFuncGetParamInfo(f, i, &off, &size), 0);
        cr_assert_eq(off, 8 * i);
        cr_assert_eq(size, 8);
    }
    cr_assert_eq(cu.cuFuncGetParamInfo(f, 3, &off, &size), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuFuncGetParamInfo(f, 0, NULL, &size), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuFuncGetParamInfo(f, 0, &off, NULL), 0);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "mixed"), 0);
    size_t want_off[] = {0, 2, 4, 8, 16, 32, 40}, want_size[] = {1, 2, 4, 8, 16, 8, 8};
    for (size_t i = 0; i < 7; i++) {
        cr_assert_eq(cu.cuFuncGetParamInfo(f, i, &off, &size), 0);
        cr_assert_eq(off, want_off[i], "mixed param %zu offset %zu", i, off);
        cr_assert_eq(size, want_size[i], "mixed param %zu", i);
    }
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "noargs"), 0);
    cr_assert_eq(cu.cuFuncGetParamInfo(f, 0, &off, &size), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "odd"), 0);
    size_t odd_off[] = {0, 4, 16, 20}, odd_size[] = {2, 12, 1, 4};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(cu.cuFuncGetParamInfo(f, i, &off, &size), 0);
        cr_assert_eq(off, odd_off[i], "odd param %zu offset %zu", i, off);
        cr_assert_eq(size, odd_size[i]);
    }
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "commented_out"), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "nope"), ADSM__CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuModuleGetFunction(NULL, mod, "vecadd"), ADSM__CUDA_ERROR_INVALID_VALUE);
    adsm__cu_function vec;
    cr_assert_eq(cu.cuModuleGetFunction(&vec, mod, "vecadd"), 0);
    cr_assert_eq(cu.cuModuleUnload(mod), 0);
    cr_assert_eq(cu.cuModuleUnload(mod), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "vecadd"), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuFuncGetParamInfo(vec, 0, &off, &size), ADSM__CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(cu.cuLaunchKernel(vec, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), ADSM__CUDA_ERROR_INVALID_HANDLE);
}

Test(module, rejects_bad_images) {
    up();
    adsm__cu_module mod;
    char log[128];
    adsm__cu_jit_option opts[] = {ADSM__CU_JIT_ERROR_LOG_BUFFER, ADSM__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)sizeof log};
    memset(log, 0, sizeof log);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, "\x7f" "ELF binary", 2, opts, vals), ADSM__CUDA_ERROR_INVALID_IMAGE);
    cr_assert_neq(log[0], 0);
    cr_assert_null(strchr(log, '\n'));
    cr_assert_lt((uintptr_t)vals[1], sizeof log);
    /* the log size is respected */
    memset(log, 'x', sizeof log);
    void *vals4[] = {log, (void *)(uintptr_t)4};
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, ".target sm_90\n", 2, opts, vals4), ADSM__CUDA_ERROR_INVALID_IMAGE);
    cr_assert_eq(log[3], 0);
    cr_assert_eq(log[4], 'x');
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, ".version 8.0\n.target sm_90\n.entry broken(.param .u32\n", 0, NULL, NULL),
                 ADSM__CUDA_ERROR_INVALID_PTX);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, ".version 8.0\n.target sm_90\n.entry t(.param .texref x)\n", 0, NULL, NULL),
                 ADSM__CUDA_ERROR_INVALID_PTX);
    cr_assert_eq(cu.cuModuleLoadDataEx(NULL, real_ptx, 0, NULL, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, NULL, 0, NULL, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, real_ptx, 1, NULL, NULL), ADSM__CUDA_ERROR_INVALID_VALUE);
    int junk;
    cr_assert_eq(cu.cuModuleUnload((adsm__cu_module)&junk), ADSM__CUDA_ERROR_INVALID_HANDLE);
    adsm__cu_function f;
    cr_assert_eq(cu.cuModuleGetFunction(&f, (adsm__cu_module)&junk, "x"), ADSM__CUDA_ERROR_INVALID_HANDLE);
}

/* ------------------------------------------------------------------ launches */

struct seen {
    unsigned grid[3], block[3];
    size_t nparams, sizes[8];
    unsigned char bytes[8][16];
    int calls;
};

static void k_record(const cudadouble_launch *l, void *user) {
    struct seen *s = user;
    memcpy(s->grid, l->grid, sizeof s->grid);
    memcpy(s->block, l->block, sizeof s->block);
    s->nparams = l->nparams;
    for (size_t i = 0; i < l->nparams && i < 8; i++) {
        s->sizes[i] = l->param_size[i];
        memcpy(s->bytes[i], l->param[i], l->param_size[i] < 16 ? l->param_size[i] : 16);
    }
    s->calls++;
}

/* vecadd: c[i] = a[i] + b[i] over device pointers translated with host_view */
static void k_vecadd(const cudadouble_launch *l, void *user) {
    (void)user;
    unsigned long long c, a, b;
    memcpy(&c, l->param[0], 8);
    memcpy(&a, l->param[1], 8);
    memcpy(&b, l->param[2], 8);
    size_t n = (size_t)l->grid[0] * l->block[0];
    float *pc = host_view(c, n * 4), *pa = host_view(a, n * 4), *pb = host_view(b, n * 4);
    if (!pc || !pa || !pb) {
        kernel_fault(ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    for (size_t i = 0; i < n; i++) pc[i] = pa[i] + pb[i];
}

Test(launch, runs_registered_function_with_copied_params) {
    setenv("CUDADOUBLE_DELAY_US", "50000", 1);
    up();
    struct seen seen;
    memset(&seen, 0, sizeof seen);
    cr_assert_eq(reg_kernel("mixed", k_record, &seen), 0);
    cr_assert_eq(reg_kernel(NULL, k_record, &seen), -1);
    adsm__cu_module mod;
    adsm__cu_function f;
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, real_ptx, 0, NULL, NULL), 0);
    cr_assert_eq(cu.cuModuleGetFunction(&f, mod, "mixed"), 0);
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    unsigned char p0 = 0xab;
    unsigned short p1 = 0x1234;
    unsigned p2 = 0xdeadbeef;
    double p3 = 2.5;
    unsigned char p4[16];
    for (int i = 0; i < 16; i++) p4[i] = (unsigned char)(i + 1);
    unsigned long long p5 = 0x1111222233334444ull, p6 = 77;
    void *params[] = {&p0, &p1, &p2, &p3, p4, &p5, &p6};
    cr_assert_eq(cu.cuLaunchKernel(f, 3, 2, 1, 32, 4, 2, 1024, s, params, NULL), 0);
    p2 = 0; /* copied at the call: the kernel must see the old value */
    p6 = 0;
    cr_assert_eq(seen.calls, 0, "launches are asynchronous");
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.grid[0], 3);
    cr_assert_eq(seen.grid[1], 2);
    cr_assert_eq(seen.block[0], 32);
    cr_assert_eq(seen.block[2], 2);
    cr_assert_eq(seen.nparams, 7);
    cr_assert_eq(seen.sizes[4], 16);
    cr_assert_eq(seen.bytes[0][0], 0xab);
    unsigned got2;
    memcpy(&got2, seen.bytes[2], 4);
    cr_assert_eq(got2, 0xdeadbeef);
    unsigned long long got6;
    memcpy(&got6, seen.bytes[6], 8);
    cr_assert_eq(got6, 77);
    cr_assert_eq(memcmp(seen.bytes[4], p4, 16), 0);
    /* the same through `extra` with a packed buffer */
    unsigned char buf[48];
    memset(buf, 0, sizeof buf);
    buf[0] = 0xcd;
    size_t bufsize = sizeof buf;
    void *extra[] = {(void *)1, buf, (void *)2, &bufsize, (void *)0};
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra), 0);
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cr_assert_eq(seen.calls, 2);
    cr_assert_eq(seen.bytes[0][0], 0xcd);
    size_t badsize = 40;
    void *extra_bad[] = {(void *)1, buf, (void *)2, &badsize, (void *)0};
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra_bad), ADSM__CUDA_ERROR_INVALID_VALUE);
    void *extra_key[] = {(void *)7, buf, (void *)0};
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra_key), ADSM__CUDA_ERROR_INVALID_VALUE);
    /* validation */
    int junk;
    struct {
        unsigned g[3], b[3], shmem;
        void **params, **extra;
        adsm__cu_stream s;
        adsm__cu_function f;
        int want;
    } bad[] = {
        {{0, 1, 1}, {1, 1, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 0, 1}, {1, 1, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 0}, {1, 1, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {0, 1, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 0, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 0}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1025, 1, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1025, 1}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 65}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {64, 8, 4}, 0, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 1}, 48 * 1024 + 1, params, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 1}, 0, params, extra, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 1}, 0, NULL, NULL, s, f, ADSM__CUDA_ERROR_INVALID_VALUE},
        {{1, 1, 1}, {1, 1, 1}, 0, params, NULL, (adsm__cu_stream)&junk, f, ADSM__CUDA_ERROR_INVALID_HANDLE},
        {{1, 1, 1}, {1, 1, 1}, 0, params, NULL, s, (adsm__cu_function)&junk, ADSM__CUDA_ERROR_INVALID_HANDLE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(cu.cuLaunchKernel(bad[i].f, bad[i].g[0], bad[i].g[1], bad[i].g[2], bad[i].b[0], bad[i].b[1],
                                       bad[i].b[2], bad[i].shmem, bad[i].s, bad[i].params, bad[i].extra),
                     bad[i].want, "case %zu", i);
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1024, 1, 1, 48 * 1024, s, params, NULL), 0, "the limits themselves are fine");
    cr_assert_eq(cu.cuStreamSynchronize(s), 0);
    cudadouble_counters c;
    get_counters(&c);
    cr_assert_eq(c.launches, 3);
    /* a kernel without parameters needs neither */
    adsm__cu_function na;
    cr_assert_eq(cu.cuModuleGetFunction(&na, mod, "noargs"), 0);
    reg_kernel("noargs", k_record, &seen);
    cr_assert_eq(cu.cuLaunchKernel(na, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), 0);
    cr_assert_eq(seen.nparams, 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    cr_assert_eq(cu.cuModuleUnload(mod), 0);
}

Test(launch, vecadd_end_to_end) {
    up();
    reg_kernel("vecadd", k_vecadd, NULL);
    adsm__cu_function f = load_fn(real_ptx, "vecadd");
    size_t n = 1024;
    struct devmem m = dalloc(GRAN);
    adsm__cu_deviceptr a = m.d, b = m.d + n * 4, c = m.d + 2 * n * 4;
    float *ha;
    cr_assert_eq(cu.cuMemAllocHost((void **)&ha, 2 * n * 4), 0);
    for (size_t i = 0; i < 2 * n; i++) ha[i] = (float)i;
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    cr_assert_eq(cu.cuMemcpyHtoDAsync(a, ha, 2 * n * 4, s), 0);
    void *params[] = {&c, &a, &b};
    cr_assert_eq(cu.cuLaunchKernel(f, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, s, params, NULL), 0);
    float *out = malloc(n * 4);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(out, c, n * 4, s), 0);
    for (size_t i = 0; i < n; i++) cr_assert_eq(out[i], (float)i + (float)(n + i));
    free(out);
    cr_assert_eq(cu.cuMemFreeHost(ha), 0);
    cr_assert_eq(cu.cuStreamDestroy(s), 0);
    dfree(m);
}

Test(launch, unregistered_kernel_is_a_sticky_launch_failure, .init = cr_redirect_stderr) {
    up();
    adsm__cu_function f = load_fn(tag_ptx, "tag");
    adsm__cu_stream s;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    unsigned tag = 1;
    void *params[] = {&tag};
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), 0);
    cr_assert_eq(cu.cuStreamSynchronize(s), ADSM__CUDA_ERROR_LAUNCH_FAILED);
    cr_assert_eq(cu.cuCtxSynchronize(), ADSM__CUDA_ERROR_LAUNCH_FAILED);
    fflush(stderr);
    cr_assert_stderr_eq_str("cudadouble: no host function registered for kernel 'tag'\n");
}

/* ------------------------------------------------------------------ sticky faults */

static void k_fault(const cudadouble_launch *l, void *user) {
    (void)l;
    (void)user;
    kernel_fault(ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
}

Test(sticky, fault_breaks_the_context) {
    setenv("CUDADOUBLE_DELAY_US", "20000", 1);
    up();
    reg_kernel("tag", k_fault, NULL);
    adsm__cu_function f = load_fn(tag_ptx, "tag");
    struct devmem m = dalloc(GRAN);
    adsm__cu_stream s;
    adsm__cu_event e;
    cr_assert_eq(cu.cuStreamCreate(&s, 0), 0);
    cr_assert_eq(cu.cuEventCreate(&e, 0), 0);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 1, 16, s), 0);
    launch_tag(f, 0, s);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 2, 16, s), 0); /* dropped */
    cr_assert_eq(cu.cuEventRecord(e, s), 0);
    kernel_fault(ADSM__CUDA_ERROR_ASSERT); /* not on a kernel thread: ignored */
    cr_assert_eq(cu.cuEventSynchronize(e), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuStreamSynchronize(s), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuCtxSynchronize(), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    adsm__cu_stream s2;
    size_t fr, tot;
    void *h;
    cr_assert_eq(cu.cuStreamCreate(&s2, 0), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuMemGetInfo(&fr, &tot), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuMemAllocHost(&h, 16), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuMemsetD8Async(m.d, 3, 16, s), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), ADSM__CUDA_ERROR_ILLEGAL_ADDRESS);
    unsigned char *v = host_view(m.d, 16);
    cr_assert_eq(v[0], 1, "work queued after the fault was dropped");
    /* the device-less queries still work */
    int count;
    cr_assert_eq(cu.cuDeviceGetCount(&count), 0);
}

/* ------------------------------------------------------------------ threads */

struct thr_arg {
    adsm__cu_deviceptr d;
    int id;
    int failures;
};

static void *copy_thread(void *p) {
    struct thr_arg *a = p;
    if (cu.cuCtxSetCurrent(ctx) != 0) a->failures++;
    adsm__cu_stream s;
    if (cu.cuStreamCreate(&s, 0) != 0) {
        a->failures++;
        return NULL;
    }
    unsigned char buf[4096], out[4096];
    for (int it = 0; it < 50; it++) {
        memset(buf, a->id * 50 + it, sizeof buf);
        if (cu.cuMemcpyHtoDAsync(a->d, buf, sizeof buf, s)) a->failures++;
        if (cu.cuMemcpyDtoHAsync(out, a->d, sizeof out, s)) a->failures++;
        if (memcmp(buf, out, sizeof buf) != 0) a->failures++;
    }
    if (cu.cuStreamDestroy(s)) a->failures++;
    return NULL;
}

Test(threads, concurrent_streams) {
    setenv("CUDADOUBLE_DELAY_US", "100", 1);
    up();
    struct devmem m = dalloc(GRAN);
    pthread_t t[4];
    struct thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thr_arg){m.d + (adsm__cu_deviceptr)i * 8192, i, 0};
        pthread_create(&t[i], NULL, copy_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(args[i].failures, 0, "thread %d", i);
    }
    cr_assert_eq(cu.cuCtxSynchronize(), 0);
    dfree(m);
}

/* ---- several devices: memory pools, access, peer copies ---------------------------------------- */
/* reserve + create on device `dev` + map; access as `access` lists (devices, read-write) */
static struct devmem dalloc_on(int dev, size_t size, const int *access, size_t naccess) {
    struct devmem m = {0, size, 0};
    adsm__cu_mem_alloc_prop p = prop0();
    p.location.id = dev;
    adsm__cu_mem_access_desc a[4];
    for (size_t i = 0; i < naccess; i++) {
        a[i] = rw0();
        a[i].location.id = access[i];
    }
    cr_assert_eq(cu.cuMemAddressReserve(&m.d, size, 0, 0, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&m.h, size, &p, 0), 0);
    cr_assert_eq(cu.cuMemMap(m.d, size, 0, m.h, 0), 0);
    cr_assert_eq(cu.cuMemSetAccess(m.d, size, a, naccess), 0);
    return m;
}

static adsm__cu_context up_two(void) {
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    setenv("CUDADOUBLE_MEMORY", "8388608", 1); /* 4 granules per device */
    up();
    adsm__cu_context c1;
    cr_assert_eq(cu.cuDevicePrimaryCtxRetain(&c1, 1), 0);
    return c1;
}

/* Each device has its own compute capability (CUDADOUBLE_COMPUTE), and a module whose PTX targets
 * a newer architecture than its context's device is refused there, as the JIT refuses it. */
Test(several_devices, compute_capability_per_device) {
    setenv("CUDADOUBLE_COMPUTE", "90,80", 1);
    adsm__cu_context c1 = up_two();
    int major[2], minor[2];
    for (int d = 0; d < 2; d++) {
        cr_assert_eq(cu.cuDeviceGetAttribute(&major[d], ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d), 0);
        cr_assert_eq(cu.cuDeviceGetAttribute(&minor[d], ADSM__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d), 0);
    }
    cr_assert(major[0] == 9 && minor[0] == 0 && major[1] == 8 && minor[1] == 0, "%d.%d and %d.%d", major[0],
              minor[0], major[1], minor[1]);
    static const char sm90[] = ".version 8.0\n.target sm_90\n.address_size 64\n";
    static const char sm80[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
    adsm__cu_module mod;
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, sm90, 0, NULL, NULL), 0, "device 0 (9.0) takes sm_90");
    cr_assert_eq(cu.cuCtxSetCurrent(c1), 0);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, sm90, 0, NULL, NULL), ADSM__CUDA_ERROR_INVALID_PTX);
    cr_assert_eq(cu.cuModuleLoadDataEx(&mod, sm80, 0, NULL, NULL), 0, "device 1 (8.0) takes sm_80");
}

/* Each device has its own granules: one device full leaves the other's memory, and cuMemGetInfo
 * answers for the current context's device. */
Test(several_devices, each_device_has_its_own_memory) {
    adsm__cu_context c1 = up_two();
    adsm__cu_mem_alloc_prop p = prop0();
    adsm__cu_mem_handle h0, h1, more;
    cr_assert_eq(cu.cuMemCreate(&h0, 4 * GRAN, &p, 0), 0);
    cr_assert_eq(cu.cuMemCreate(&more, GRAN, &p, 0), ADSM__CUDA_ERROR_OUT_OF_MEMORY);
    size_t free_bytes, total;
    cr_assert_eq(cu.cuMemGetInfo(&free_bytes, &total), 0);
    cr_assert(free_bytes == 0 && total == 4 * GRAN, "device 0: %zu of %zu free", free_bytes, total);
    p.location.id = 1;
    cr_assert_eq(cu.cuMemCreate(&h1, GRAN, &p, 0), 0);
    cr_assert_eq(cu.cuCtxSetCurrent(c1), 0);
    cr_assert_eq(cu.cuMemGetInfo(&free_bytes, &total), 0);
    cr_assert_eq(free_bytes, 3 * GRAN, "device 1: %zu free", free_bytes);
    cr_assert_eq(cu.cuMemRelease(h1), 0);
    cr_assert_eq(cu.cuMemRelease(h0), 0);
}

/* A device touches another device's memory only once cuMemSetAccess grants it, which needs peer
 * capability: copies on its streams are refused before, accepted after. */
Test(several_devices, access_is_per_device) {
    adsm__cu_context c1 = up_two();
    int can = -1;
    cr_assert_eq(cu.cuDeviceCanAccessPeer(&can, 1, 0), 0);
    cr_assert_eq(can, 1);
    cr_assert_eq(cu.cuDeviceCanAccessPeer(&can, 0, 0), 0);
    cr_assert_eq(can, 0, "a device is not its own peer");
    int only0[] = {0}, both[] = {0, 1};
    struct devmem m = dalloc_on(0, GRAN, only0, 1);
    char buf[64];
    cr_assert_eq(cu.cuCtxSetCurrent(c1), 0);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(buf, m.d, sizeof buf, NULL), ADSM__CUDA_ERROR_INVALID_VALUE,
                 "device 1 read device 0's memory without access");
    adsm__cu_mem_access_desc a[2] = {rw0(), rw0()};
    a[1].location.id = both[1];
    cr_assert_eq(cu.cuMemSetAccess(m.d, m.size, a, 2), 0);
    cr_assert_eq(cu.cuMemcpyDtoHAsync(buf, m.d, sizeof buf, NULL), 0);
    cr_assert_eq(cu.cuCtxSetCurrent(ctx), 0);
    dfree(m);
}

Test(several_devices, no_peer_access_when_told) {
    setenv("CUDADOUBLE_NO_PEER", "1", 1);
    up_two();
    int can = -1;
    cr_assert_eq(cu.cuDeviceCanAccessPeer(&can, 1, 0), 0);
    cr_assert_eq(can, 0);
    int only0[] = {0};
    struct devmem m = dalloc_on(0, GRAN, only0, 1);
    adsm__cu_mem_access_desc a = rw0();
    a.location.id = 1;
    cr_assert_eq(cu.cuMemSetAccess(m.d, m.size, &a, 1), ADSM__CUDA_ERROR_INVALID_DEVICE);
    dfree(m);
}

ParameterizedTestParameters(several_devices, peer_copies) {
    static int granted[] = {1, 0};
    return cr_make_param_array(int, granted, 2);
}

/* cuMemcpyPeerAsync copies between two devices' memory whatever the access (each side needs its
 * own device's); it is direct when the destination device may read the source, else staged. */
ParameterizedTest(int *granted, several_devices, peer_copies) {
    adsm__cu_context c1 = up_two();
    int src_access[] = {0, 1}, dst_access[] = {1};
    struct devmem src = dalloc_on(0, GRAN, src_access, *granted ? 2 : 1);
    struct devmem dst = dalloc_on(1, GRAN, dst_access, 1);
    unsigned char *s = host_view(src.d, GRAN);
    cr_assert_not_null(s);
    for (size_t i = 0; i < 4096; i++) s[i] = (unsigned char)(i * 7);
    cudadouble_counters before, after;
    get_counters(&before);
    cr_assert_eq(cu.cuCtxSetCurrent(c1), 0);
    cr_assert_eq(cu.cuMemcpyPeerAsync(dst.d, c1, src.d, ctx, 4096, NULL), 0);
    cr_assert_eq(cu.cuMemcpyPeerAsync(dst.d, ctx, src.d, ctx, 4096, NULL), ADSM__CUDA_ERROR_INVALID_VALUE,
                 "device 0 may not write device 1's memory");
    get_counters(&after);
    cr_assert_eq(after.peer_bytes - before.peer_bytes, 4096);
    cr_assert_eq(after.peer_direct_bytes - before.peer_direct_bytes, *granted ? 4096u : 0u);
    unsigned char *d = host_view(dst.d, GRAN);
    for (size_t i = 0; i < 4096; i++) cr_assert_eq(d[i], (unsigned char)(i * 7), "[%zu]", i);
    cr_assert_eq(cu.cuCtxSetCurrent(ctx), 0);
    dfree(dst);
    dfree(src);
}
