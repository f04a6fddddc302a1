/* tests/test_backend_cuda.c -- the cuda backend without a GPU: the toolkit's stub library and
 * missing drivers are reported as "not available"; against the driver test double
 * (tests/cuda/libcudadouble.so) it must keep one address per object (or translate when told to),
 * compile CUDA C with the real NVRTC, find kernels by name, check their parameters, stage copies
 * through pinned memory in pipelined chunks, and turn driver errors into adsm errors that carry
 * the driver's own name for them. Each Test runs in its own process (Criterion), so environment
 * knobs of the double (CUDADOUBLE_*) are set per test before adsm_init. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/cuda_double_bridge.h"
#include "tests/child.h"
#include "tests/death.h"
#include "tests/seccomp.h"
#include "tests/signal_stack.h"

#define MIB ((size_t)1 << 20)

ADSM_KERNEL(vadd, ADSM_OUT(float, c), ADSM_IN(float, a), ADSM_IN(float, b), ADSM_VALUE(size_t, n));
void vadd(adsm_grid g, float *c, const float *a, const float *b, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = a[i] + b[i];
    }
}
static const char *vadd_cuda = ADSM_CUDA_SOURCE(
    extern "C" __global__ void vadd(float *c, const float *a, const float *b, unsigned long long n) {
        unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
        if (i < n) c[i] = a[i] + b[i];
    });

/* Single-source kernels (ADSM_KERNEL_DEF): one body, compiled by the real NVRTC at the first
 * launch on the double, which runs the same body as the PTX entry's host function. */
ADSM_SHARED(typedef struct scale { float mul, add; } scale;
            static inline float apply(scale s, float x) { return s.mul * x + s.add; });
ADSM_KERNEL_DEF(ss_axpb, (ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(scale, s), ADSM_VALUE(uint32_t, n)),
                g, {
                    ADSM_FOR_EACH_THREAD(g, i) {
                        if (i < n) y[i] = apply(s, x[i]);
                    }
                });
/* C accepts it; NVRTC does not (a host call in a device body). */
ADSM_KERNEL_DEF(ss_host_call, (ADSM_OUT(int, y)), g, {
    ADSM_FOR_EACH_THREAD(g, i) y[i] = puts("from a kernel");
});

/* A kernel the double fails like a GPU fault (registered below instead of the body). */
ADSM_KERNEL(faulty, ADSM_OUT(int, x), ADSM_VALUE(size_t, n));
void faulty(adsm_grid g, int *x, size_t n) { (void)g, (void)x, (void)n; }

static const char *const stub_library = "/usr/local/cuda/lib64/stubs/libcuda.so";
static const char *const nvrtc_library = "/usr/local/cuda/lib64/libnvrtc.so";

static void clear_env(void) {
    static const char *const vars[] = {"ADSM_BACKEND", "ADSM_PROTOCOL", "ADSM_BLOCK_SIZE", "ADSM_ROLLING_SIZE",
                                       "ADSM_EMU_MEMORY", "ADSM_LOG", "ADSM_DEVICE", "ADSM_CUDA_STAGING",
                                       "ADSM_CUDA_SAME_ADDRESS", "ADSM_CUDA_DMA_VIEW", "ADSM_CUDA_DRIVER",
                                       "ADSM_CUDA_ALIAS_COLLAPSE", "ADSM_PREPARE_THREADS",
                                       "ADSM_CUDA_COLLAPSE_SHARED", "ADSM_CUDA_MAP_AHEAD"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    setenv("ADSM_NVRTC_LIBRARY", nvrtc_library, 1);
}

static adsm_result init_cuda(adsm_protocol_kind protocol, size_t block, size_t staging) {
    clear_env();
    cuda_double_use();
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = protocol;
    cfg.block_size = block;
    cfg.cuda_staging = staging;
    return adsm_init(&cfg);
}

static void init_ok(adsm_protocol_kind protocol, size_t block, size_t staging) {
    adsm_result r = init_cuda(protocol, block, staging);
    cr_assert_eq(r, ADSM_OK, "adsm_init(cuda on the double): %s", adsm_last_error());
    cr_assert_str_eq(adsm_backend_name(), "cuda");
}

static void attach(void) {
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd()};
    cr_assert_eq(cuda_double_attach(kernels, 1), 0, "attach: %s", adsm_last_error());
}

/* The cuda backend on the double with one setting from the environment (var=value), kernels
 * attached; block 0: the default block size. */
static void init_setting(const char *var, const char *value, adsm_protocol_kind protocol, size_t block) {
    clear_env();
    cuda_double_use();
    setenv(var, value, 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = protocol;
    cfg.block_size = block;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    attach();
}

/* Translated addresses (ADSM_CUDA_SAME_ADDRESS=0). */
static void init_translated(size_t block) { init_setting("ADSM_CUDA_SAME_ADDRESS", "0", 0, block); }

/* Shared addresses without the host alias (ADSM_CUDA_DMA_VIEW=0). */
static void init_without_alias(adsm_protocol_kind protocol, size_t block) {
    init_setting("ADSM_CUDA_DMA_VIEW", "0", protocol, block);
    cr_assert_eq(adsm__rt.host_alias, 0, "a host alias under ADSM_CUDA_DMA_VIEW=0");
}

static void expect_message(const char *needle) {
    cr_assert(strstr(adsm_last_error(), needle) != NULL, "message '%s' lacks '%s'", adsm_last_error(), needle);
}

/* c = a + b over n floats; checks every element. */
static void run_vadd(size_t n) {
    float *a = adsm_alloc(n * sizeof *a), *b = adsm_alloc(n * sizeof *b), *c = adsm_alloc(n * sizeof *c);
    cr_assert(a && b && c, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) {
        a[i] = (float)i;
        b[i] = (float)(3 * i);
    }
    adsm_result r = ADSM_CALL(vadd, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), c, a, b, n);
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(c[i], (float)(4 * i), "c[%zu] = %f", i, (double)c[i]);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
}

/* ---- no driver ------------------------------------------------------------------------------- */
Test(cuda_unavailable, stub_library_is_no_driver) {
    clear_env();
    setenv("ADSM_CUDA_DRIVER", stub_library, 1);
    cr_assert(access(stub_library, R_OK) == 0, "the CUDA toolkit's stub library is missing: %s", stub_library);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_BACKEND_UNAVAILABLE);
    expect_message("no CUDA driver");
    expect_message("stub");
    cfg.backend = ADSM_BACKEND_AUTO; /* auto moves on to the emulator */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_backend_name(), "emu");
    adsm_shutdown();
}

Test(cuda_unavailable, missing_library) {
    clear_env();
    setenv("ADSM_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_BACKEND_UNAVAILABLE);
    expect_message("no CUDA driver");
    expect_message("/nonexistent/libcuda.so.1");
}

Test(cuda_unavailable, no_device_and_old_driver) {
    setenv("CUDADOUBLE_DEVICES", "0", 1);
    cr_assert_eq(init_cuda(0, 0, 0), ADSM_ERROR_BACKEND_UNAVAILABLE);
    expect_message("no device");
    setenv("CUDADOUBLE_DEVICES", "1", 1);
    setenv("CUDADOUBLE_DRIVER_VERSION", "11080", 1);
    cr_assert_eq(init_cuda(0, 0, 0), ADSM_ERROR_BACKEND_UNAVAILABLE);
    expect_message("11.8");
    expect_message("12.0");
}

Test(cuda_unavailable, device_ordinal_out_of_range) {
    setenv("ADSM_DEVICE", "3", 1);
    clear_env();
    cuda_double_use();
    setenv("ADSM_DEVICE", "3", 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    expect_message("ADSM_DEVICE=3");
}

/* The cuda backend's 0/1 switches refuse anything else, naming the variable. */
ParameterizedTestParameters(cuda_unavailable, switches_refuse_other_values) {
    static char vars[][32] = {"ADSM_CUDA_SAME_ADDRESS", "ADSM_CUDA_DMA_VIEW", "ADSM_CUDA_ALIAS_COLLAPSE",
                              "ADSM_CUDA_COLLAPSE_SHARED"};
    return cr_make_param_array(char[32], vars, sizeof vars / sizeof vars[0]);
}

/* adsm_init on the double with var=value refuses it as a configuration error naming var. */
static void expect_setting_refused(const char *var, const char *value) {
    clear_env();
    cuda_double_use();
    setenv(var, value, 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG, "%s=%s: %s", var, value, adsm_last_error());
    expect_message(var);
}

ParameterizedTest(char (*var)[32], cuda_unavailable, switches_refuse_other_values) {
    expect_setting_refused(*var, "yes");
}

/* ---- addresses ------------------------------------------------------------------------------- */
Test(cuda_double, same_address_on_both_sides) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    float *a = adsm_alloc(4096);
    cr_assert_not_null(a);
    cr_assert_eq(adsm_safe(a), (void *)a, "the device address of a shared object is its host address");
    run_vadd(100000);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.translated_args, 0);
    adsm_shutdown();
}

Test(cuda_double, translated_addresses_when_told) {
    init_translated(0);
    float *a = adsm_alloc(4096);
    void *dev = adsm_safe(a);
    cr_assert(dev != NULL && dev != (void *)a, "adsm_safe gives the (different) device address");
    cr_assert_not_null(cuda_double.host_view((unsigned long long)(uintptr_t)dev, 4096),
                       "adsm_safe's address is device memory of the driver");
    run_vadd(50000);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.translated_args, 3, "c, a and b were translated (%llu)", (unsigned long long)s.translated_args);
    /* explicit device buffers hand out device addresses too, and launches take them */
    float *d = adsm_dev_alloc(4096);
    cr_assert_not_null(cuda_double.host_view((unsigned long long)(uintptr_t)d, 4096));
    float host[1024];
    for (int i = 0; i < 1024; i++) host[i] = (float)i;
    cr_assert_eq(adsm_copy_to_device(d, host, sizeof host), ADSM_OK, "%s", adsm_last_error());
    float *c = adsm_alloc(4096);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(4, 256), c, d, d, (size_t)1024), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < 1024; i++) cr_assert_eq(c[i], (float)(2 * i));
    cr_assert_eq(adsm_dev_free(d), ADSM_OK);
    adsm_shutdown();
}

/* ---- kernels ------------------------------------------------------------------------------------ */
Test(cuda_double, nvrtc_compiles_cuda_c_for_the_device) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert(access(nvrtc_library, R_OK) == 0, "NVRTC is missing: %s", nvrtc_library);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("vadd", cuda_double_run_body, (void *)adsm__kernel_vadd()), 0);
    adsm_result r = adsm_module_load_source(vadd_cuda, NULL); /* real NVRTC -> real PTX -> the double */
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    run_vadd(70000);
    adsm_shutdown();
}

Test(cuda_double, nvrtc_errors_carry_the_compiler_log) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    const char *broken = "extern \"C\" __global__ void k(int *x) { x[0] = undeclared_name; }";
    cr_assert_eq(adsm_module_load_source(broken, NULL), ADSM_ERROR_INVALID_MODULE);
    expect_message("undeclared_name");
    adsm_shutdown();
}

Test(cuda_double, unknown_kernel_and_bad_image) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    float *c = adsm_alloc(4096);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(1, 32), c, c, c, (size_t)32), ADSM_ERROR_KERNEL_NOT_FOUND);
    expect_message("'vadd'");
    cr_assert_eq(adsm_module_load_image("this is not PTX", 0), ADSM_ERROR_INVALID_MODULE);
    expect_message("CUDA_ERROR_INVALID_IMAGE");
    cr_assert_eq(adsm_module_load_image(NULL, 0), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_module_load_file("/nonexistent.ptx"), ADSM_ERROR_SYSTEM);
    attach(); /* the runtime stays usable */
    run_vadd(1000);
    adsm_shutdown();
}

Test(cuda_double, module_from_a_file) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("vadd", cuda_double_run_body, (void *)adsm__kernel_vadd()), 0);
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd()};
    char *ptx = cuda_double_ptx(kernels, 1);
    char path[] = "/tmp/adsm_module_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, ptx, strlen(ptx)), (ssize_t)strlen(ptx));
    close(fd);
    free(ptx);
    cr_assert_eq(adsm_module_load_file(path), ADSM_OK, "%s", adsm_last_error());
    unlink(path);
    run_vadd(5000);
    adsm_shutdown();
}

/* The declaration says size_t n; a module whose kernel takes a 32-bit n would read garbage. */
Test(cuda_double, parameter_size_mismatch_is_refused) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("vadd", cuda_double_run_body, (void *)adsm__kernel_vadd()), 0);
    const char *ptx = ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry vadd(\n"
                      "\t.param .u64 vadd_param_0,\n\t.param .u64 vadd_param_1,\n\t.param .u64 vadd_param_2,\n"
                      "\t.param .u32 vadd_param_3\n)\n{\n\tret;\n}\n";
    cr_assert_eq(adsm_module_load_image(ptx, 0), ADSM_OK, "%s", adsm_last_error());
    float *c = adsm_alloc(4096);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(1, 32), c, c, c, (size_t)32), ADSM_ERROR_INVALID_VALUE);
    expect_message("'n'");
    expect_message("4 bytes");
    const char *three = ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry vadd(\n"
                        "\t.param .u64 vadd_param_0,\n\t.param .u64 vadd_param_1,\n\t.param .u64 vadd_param_2\n)\n"
                        "{\n\tret;\n}\n";
    cr_assert_eq(adsm_module_load_image(three, 0), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(1, 32), c, c, c, (size_t)32), ADSM_ERROR_INVALID_VALUE);
    expect_message("takes 3");
    adsm_shutdown();
}

/* A driver that cannot tell (cuFuncGetParamInfo answers CUDA_ERROR_NOT_SUPPORTED, or anything
 * but INVALID_VALUE, which ends the list) does not make every kernel "take 0 parameters": the
 * check is skipped and the kernel runs. */
Test(cuda_double, param_info_not_supported_skips_the_check) {
    setenv("CUDADOUBLE_PARAM_INFO_ERROR", "801", 1); /* CUDA_ERROR_NOT_SUPPORTED */
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    run_vadd(1000);
    adsm_shutdown();
}

Test(cuda_double, launch_refused_by_the_driver_is_reported_at_sync) {
    setenv("CUDADOUBLE_KERNEL_MAX_THREADS", "512", 1); /* as a kernel using many registers */
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    float *c = adsm_alloc(4096);
    /* 1024 threads fit every device's blocks, but not this kernel's */
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(1, 1024), c, c, c, (size_t)1), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_LAUNCH_FAILED);
    expect_message("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES");
    expect_message("'vadd'");
    run_vadd(1000); /* not sticky: the device keeps working */
    adsm_shutdown();
}

/* A launch with nothing queued before it is made on the calling thread, not handed to the engine
 * thread (a wake-up), with the GPU's context current only for the call: the thread's own (none
 * here, as adsm_init left it) is put back. */
Test(cuda_double, a_launch_on_an_idle_gpu_is_made_from_the_calling_thread) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    const size_t n = 1000;
    float *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c);
    cr_assert(a && c, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK); /* nothing queued: both objects are fresh */
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(4, 256), c, a, a, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(cuda_double_counters().last_launch_thread, (unsigned long long)syscall(SYS_gettid),
                 "the launch was made on another thread");
    adsm__cu_context now = (adsm__cu_context)1;
    adsm__cuda *g = (adsm__cuda *)adsm__rt.dev_ctx[0];
    cr_assert_eq(g->cu.cuCtxGetCurrent(&now), 0);
    cr_assert_null(now, "the calling thread was left with adsm's context current");
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(c[i], 0.0f);
    run_vadd(4096); /* and the engine's launches behind copies still run */
    adsm_shutdown();
}

/* Shapes no CUDA device runs are refused at the call, with the same code as on emu (issue 11,
 * item 10; test_misuse.c::launch_shapes_a_gpu_refuses). */
Test(cuda_double, launch_shapes_no_device_runs_are_refused_at_the_call) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    float *c = adsm_alloc(4096);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d(1, 2048), c, c, c, (size_t)1), ADSM_ERROR_INVALID_VALUE);
    expect_message("1024");
    adsm_grid z128 = adsm_grid_3d(adsm_dim3_make(1, 1, 1), adsm_dim3_make(1, 1, 128));
    cr_assert_eq(ADSM_CALL(vadd, z128, c, c, c, (size_t)1), ADSM_ERROR_INVALID_VALUE);
    expect_message("64");
    adsm_shutdown();
}

typedef struct sticky_case {
    int code;
    char name[40];
} sticky_case;

static void fault_kernel(const cudadouble_launch *l, void *user) {
    (void)l;
    cuda_double.kernel_fault(((const sticky_case *)user)->code);
}

/* Every error CUDA makes sticky (the context is unusable after it) is a crashed kernel at the
 * next sync, then a lost device; never "a launch refused, the device fine". */
ParameterizedTestParameters(cuda_double, a_sticky_error_at_sync_then_device_lost) {
    static sticky_case cases[] = {
        {700, "CUDA_ERROR_ILLEGAL_ADDRESS"}, {718, "CUDA_ERROR_INVALID_PC"},
        {214, "CUDA_ERROR_ECC_UNCORRECTABLE"}, {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"},
    };
    return cr_make_param_array(sticky_case, cases, sizeof cases / sizeof *cases);
}

ParameterizedTest(sticky_case *sc, cuda_double, a_sticky_error_at_sync_then_device_lost) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd(), adsm__kernel_faulty()};
    cr_assert_eq(cuda_double_attach(kernels, 2), 0, "%s", adsm_last_error());
    cr_assert_eq(cuda_double.register_kernel("faulty", fault_kernel, sc), 0);
    int *keep = adsm_alloc(4096), *x = adsm_alloc(4096);
    keep[0] = 42; /* Dirty on the host */
    cr_assert_eq(ADSM_CALL(faulty, adsm_grid_1d(1, 1), x, (size_t)1), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "%s", adsm_last_error());
    expect_message(sc->name);
    expect_message("'faulty'");
    cr_assert_eq(keep[0], 42, "host data survives the device");
    cr_assert_eq(ADSM_CALL(faulty, adsm_grid_1d(1, 1), x, (size_t)1), ADSM_ERROR_DEVICE_LOST);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST);
    cr_assert_eq(adsm_free(keep), ADSM_OK);
    adsm_shutdown();
}

/* A kernel that faults after one that ran fine: the fault is sticky, so the completion thread,
 * lagging behind, may meet it at the earlier kernel's event; the message names the kernel that
 * faulted all the same (as the earlier one's, or as the last of a range). It named the earlier
 * kernel alone in most runs, with "(or device work queued before it)", which rules out the
 * culprit. Several rounds: which event meets the fault first is timing. */
Test(cuda_double, a_fault_names_the_last_kernel_launched_before_it_surfaced) {
    static sticky_case illegal = {700, "CUDA_ERROR_ILLEGAL_ADDRESS"};
    for (int round = 0; round < 8; round++) {
        init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
        const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd(), adsm__kernel_faulty()};
        cr_assert_eq(cuda_double_attach(kernels, 2), 0, "%s", adsm_last_error());
        cr_assert_eq(cuda_double.register_kernel("faulty", fault_kernel, &illegal), 0);
        size_t n = 1 << 16;
        float *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c);
        int *x = adsm_alloc(4096);
        cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, a, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(ADSM_CALL(faulty, adsm_grid_1d(1, 1), x, (size_t)1), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "%s", adsm_last_error());
        cr_assert(strstr(adsm_last_error(), "'faulty'"), "round %d: the faulting kernel is not named: %s", round,
                  adsm_last_error());
        adsm_shutdown();
    }
}

/* After the device is lost, a launch says so under every protocol, also one whose objects the CPU
 * wrote (its flush met the lost device first and came back ADSM_ERROR_SYSTEM, "flushing dirty
 * blocks ... failed" with whatever errno was left; batch's every time). */
ParameterizedTestParameters(cuda_double, a_launch_after_the_device_is_lost_says_so) {
    static adsm_protocol_kind kinds[] = {ADSM_PROTOCOL_BATCH, ADSM_PROTOCOL_LAZY, ADSM_PROTOCOL_ROLLING};
    return cr_make_param_array(adsm_protocol_kind, kinds, sizeof kinds / sizeof *kinds);
}

ParameterizedTest(adsm_protocol_kind *protocol, cuda_double, a_launch_after_the_device_is_lost_says_so) {
    static sticky_case illegal = {700, "CUDA_ERROR_ILLEGAL_ADDRESS"};
    init_ok(*protocol, 0, 0);
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd(), adsm__kernel_faulty()};
    cr_assert_eq(cuda_double_attach(kernels, 2), 0, "%s", adsm_last_error());
    cr_assert_eq(cuda_double.register_kernel("faulty", fault_kernel, &illegal), 0);
    int *x = adsm_alloc(4096), *y = adsm_alloc(4096);
    y[0] = 5;
    cr_assert_eq(ADSM_CALL(faulty, adsm_grid_1d(1, 1), x, (size_t)1), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_KERNEL_CRASHED, "%s", adsm_last_error());
    y[0] = 6; /* Dirty (its only copy is the host's): the next launch would send it */
    cr_assert_eq(ADSM_CALL(faulty, adsm_grid_1d(1, 1), y, (size_t)1), ADSM_ERROR_DEVICE_LOST, "%s", adsm_last_error());
    expect_message("lost");
    cr_assert_eq(y[0], 6, "the host's data stays");
    adsm_shutdown();
}

/* ---- small signal stacks ----------------------------------------------------------------------------- */
/* Faults handled on an 8 KiB alternate signal stack, the classic SIGSTKSZ, which Rust gives every
 * thread: the fault path's copy commands used to carry a launch's 4 KiB argument block, twice, on
 * the stack (13.7 KiB used in all), and the program died of a stack overflow in the handler. */
Test(cuda_double, faults_fit_an_8_kib_signal_stack) {
    init_translated(64 << 10); /* page-locked objects: downloads are the engine's DMA */
    guarded_stack g = guarded_stack_on(8192);
    run_vadd(300000); /* write faults on a and b, read faults fetching c */
    guarded_stack_off(&g);
    adsm_shutdown();
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0); /* shared addresses: downloads through staging */
    attach();
    g = guarded_stack_on(8192);
    run_vadd(300000);
    guarded_stack_off(&g);
    adsm_shutdown();
}

/* ---- fork ------------------------------------------------------------------------------------------ */
static char *forked_object;

static void child_reads_device_data(void) {
    printf("%d\n", forked_object[7]);
}

/* A forked child that reads data only the device holds: the engine thread that would fetch it is
 * not in the child, where the fetch used to wait for ever; now the child is told and dies, and the
 * parent's device goes on. */
Test(cuda_double, a_forked_child_touching_shared_memory_is_told_why_and_dies) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    size_t n = 4 << 20;
    forked_object = adsm_alloc(n);
    cr_assert_not_null(forked_object, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(forked_object, 7, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_state(forked_object + 7), 'I', "the bytes are on the device only");
    expect_death_message(child_reads_device_data, "a forked child may only exec or _exit");
    cr_assert_eq(forked_object[7], 7, "the parent fetches them");
    cr_assert_eq(adsm_free(forked_object), ADSM_OK);
    adsm_shutdown();
}

/* A signal handler of the program's that runs while adsm holds a unit busy for this same thread
 * (here: waiting in the fault handler for the object's first use, its page-locking made slow) and
 * touches that unit: the copy cannot end before the handler returns, so adsm can resolve neither.
 * It used to die without a word (the nested SIGSEGV was blocked in adsm's handler, and the kernel
 * kills for a blocked fault) or, outside the fault handler, to wait for ever; now it says why. */
static unsigned char *own_copy_object;
static volatile pthread_t own_copy_thread;

static void touch_own_copy(int sig) {
    (void)sig;
    ((volatile unsigned char *)own_copy_object)[1] = 2; /* a write: a new object starts ReadOnly */
}

static void *signal_when_busy(void *arg) {
    (void)arg;
    for (;;) { /* until the first use has marked the object busy (the access waits then) */
        adsm__lock(&adsm__rt.lock);
        adsm__object *o = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)own_copy_object));
        int busy = o && o->blocks[0].busy;
        adsm__unlock(&adsm__rt.lock);
        if (busy) break;
        usleep(1000);
    }
    pthread_kill(own_copy_thread, SIGUSR1);
    return NULL;
}

static void child_touches_its_own_first_use_in_a_handler(void) {
    alarm(50); /* a child that hangs (the wait this test is about) dies of SIGALRM, before the timeout */
    cuda_double_use();
    setenv("CUDADOUBLE_REGISTER_US_PER_MIB", "2000000", 1); /* 8 MiB: 16 s of page-locking */
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = ADSM_PROTOCOL_LAZY;
    if (adsm_init(&cfg) != ADSM_OK || !(own_copy_object = adsm_alloc(8 * MIB))) {
        fprintf(stderr, "setup failed: %s\n", adsm_last_error());
        _exit(2);
    }
    signal(SIGUSR1, touch_own_copy);
    own_copy_thread = pthread_self();
    pthread_t helper;
    if (pthread_create(&helper, NULL, signal_when_busy, NULL) != 0) _exit(2);
    own_copy_object[0] = 1; /* the first use: the handler runs while it waits */
    fprintf(stderr, "the first use completed\n");
}

Test(cuda_double, a_signal_handler_touching_a_unit_its_thread_is_copying_is_told_why, .timeout = 60) {
    expect_death_message(child_touches_its_own_first_use_in_a_handler,
                         "a signal handler touched shared memory that this same thread was bringing to the CPU");
}

/* ---- no silent caps ------------------------------------------------------------------------------ */
ADSM_KERNEL(mark, ADSM_INOUT(int, x), ADSM_VALUE(size_t, i));
void mark(adsm_grid g, int *x, size_t i) {
    (void)g;
    x[i] += 1;
}

#define MANY_KERNELS 300 /* more than the 256 the cache once held */
static adsm_kernel_desc many[MANY_KERNELS];
static char many_names[MANY_KERNELS][16];

/* Launches many[k] on x[k] through adsm_launch (a hand-filled argument block). */
static void launch_mark(size_t k, int *x) {
    _Alignas(16) unsigned char args[64];
    memset(args, 0, sizeof args);
    memcpy(args + many[k].params[0].offset, &x, sizeof x);
    memcpy(args + many[k].params[1].offset, &k, sizeof k);
    cr_assert_eq(adsm_launch(&many[k], adsm_grid_1d(1, 1), args), ADSM_OK, "%s", adsm_last_error());
}

/* Every kernel is looked up in the modules once: the second round of launches of 300 distinct
 * kernels makes no cuModuleGetFunction call. */
Test(cuda_double, more_than_256_kernels_are_all_cached) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    const adsm_kernel_desc *all[MANY_KERNELS];
    for (size_t k = 0; k < MANY_KERNELS; k++) {
        many[k] = *adsm__kernel_mark();
        snprintf(many_names[k], sizeof many_names[k], "mark%zu", k);
        many[k].name = many_names[k];
        all[k] = &many[k];
    }
    cr_assert_eq(cuda_double_attach(all, MANY_KERNELS), 0, "%s", adsm_last_error());
    int *x = adsm_alloc(MANY_KERNELS * sizeof *x);
    unsigned long long lookups[2];
    cudadouble_counters start = cuda_double_counters();
    for (int round = 0; round < 2; round++) {
        cudadouble_counters before = cuda_double_counters();
        for (size_t k = 0; k < MANY_KERNELS; k++) launch_mark(k, x);
        cudadouble_counters after = cuda_double_counters(); /* lookups happen in adsm_launch */
        lookups[round] = after.function_lookups - before.function_lookups;
    }
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(cuda_double_counters().launches - start.launches, 2 * MANY_KERNELS);
    for (size_t k = 0; k < MANY_KERNELS; k++) cr_assert_eq(x[k], 2, "x[%zu] = %d", k, x[k]);
    cr_assert_geq(lookups[0], MANY_KERNELS, "the first round looked every kernel up");
    cr_assert_eq(lookups[1], 0, "the second round looked %llu kernels up again", lookups[1]);
    adsm_shutdown();
}

static const char *fake_nvrtc_path(void) {
    static char path[4096];
    const char *srcdir = getenv("TEST_SRCDIR");
    snprintf(path, sizeof path, "%s/adsm/tests/cuda/libfakenvrtc.so", srcdir ? srcdir : ".");
    return path;
}

/* The cuda backend on the double with the recording NVRTC stand-in (tests/cuda/fake_nvrtc.c). */
static void *init_fake_nvrtc(void) {
    clear_env();
    cuda_double_use();
    setenv("ADSM_NVRTC_LIBRARY", fake_nvrtc_path(), 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    void *lib = dlopen(fake_nvrtc_path(), RTLD_NOW | RTLD_LOCAL);
    cr_assert_not_null(lib, "%s", dlerror());
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("vadd", cuda_double_run_body, (void *)adsm__kernel_vadd()), 0);
    return lib;
}

/* Options to adsm_module_load_source all reach nvrtcCompileProgram, in order, after the device's
 * architecture; none is dropped (there were 62 at most). */
Test(cuda_double, every_nvrtc_option_reaches_nvrtc) {
    void *lib = init_fake_nvrtc();
    int (*count)(void);
    const char *(*option)(int);
    *(void **)&count = dlsym(lib, "fakenvrtc_option_count");
    *(void **)&option = dlsym(lib, "fakenvrtc_option");
    cr_assert(count && option);
    enum { N = 100 };
    static char text[N][32];
    const char *opts[N + 1];
    for (int i = 0; i < N; i++) {
        snprintf(text[i], sizeof text[i], "-DADSM_TEST_OPTION_%d=1", i);
        opts[i] = text[i];
    }
    opts[N] = NULL;
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd()};
    char *ptx = cuda_double_ptx(kernels, 1); /* the stand-in hands the "source" back as PTX */
    cr_assert_eq(adsm_module_load_source(ptx, opts), ADSM_OK, "%s", adsm_last_error());
    free(ptx);
    cr_assert_eq(count(), N + 1, "NVRTC got %d options", count());
    cr_assert_str_eq(option(0), "--gpu-architecture=compute_90");
    for (int i = 0; i < N; i++) cr_assert_str_eq(option(i + 1), text[i]);
    run_vadd(1000);
    adsm_shutdown();
}

/* ---- which NVRTC ------------------------------------------------------------------------------------ */
typedef struct nvrtc_names_case {
    int driver;
    size_t n;
    char names[4][32]; /* no pointers: Criterion copies parameters into the test's process */
} nvrtc_names_case;

ParameterizedTestParameters(cuda_nvrtc, names_never_exceed_the_driver) {
    static nvrtc_names_case cases[] = {
        {12000, 2, {"libnvrtc.so.12", "libnvrtc.so"}},
        {12080, 2, {"libnvrtc.so.12", "libnvrtc.so"}},
        {13000, 3, {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}},
        {14020, 4, {"libnvrtc.so.14", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}},
    };
    return cr_make_param_array(nvrtc_names_case, cases, sizeof cases / sizeof *cases);
}

/* The names tried for a driver: versioned ones from its major down, newest first, never one
 * newer than the driver (NVRTC 13's PTX is refused by a 12.x driver); the unversioned name last. */
ParameterizedTest(nvrtc_names_case *t, cuda_nvrtc, names_never_exceed_the_driver) {
    char names[8][32];
    size_t n = adsm__nvrtc_names(t->driver, names, 8);
    cr_assert_eq(n, t->n, "driver %d: %zu names", t->driver, n);
    for (size_t i = 0; i < n; i++) cr_assert_str_eq(names[i], t->names[i], "driver %d, name %zu", t->driver, i);
    cr_assert_eq(adsm__nvrtc_names(t->driver, names, 1), 1, "the list stops at cap");
}

Test(cuda_nvrtc, version_check_by_major) {
    cr_assert(adsm__nvrtc_fits(12, 12080));
    cr_assert(adsm__nvrtc_fits(12, 13000));
    cr_assert_not(adsm__nvrtc_fits(13, 12080), "NVRTC 13 emits PTX a 12.x driver refuses");
}

/* Pure: a cubin exactly where the driver would refuse the NVRTC's PTX and would load its cubin. */
Test(cuda_nvrtc, cubins_for_a_newer_minor_release) {
    cr_assert(adsm__nvrtc_wants_cubin(12, 9, 12080), "NVRTC 12.9's PTX is refused by a 12.8 driver");
    cr_assert_not(adsm__nvrtc_wants_cubin(12, 8, 12080));
    cr_assert_not(adsm__nvrtc_wants_cubin(12, 4, 12080), "an older NVRTC's PTX loads, on newer GPUs too");
    cr_assert_not(adsm__nvrtc_wants_cubin(13, 0, 12080), "a cubin of another major does not load either");
    cr_assert(adsm__nvrtc_wants_cubin(13, 1, 13000));
}

typedef struct image_kind_case {
    char nvrtc[8]; /* FAKENVRTC_VERSION, against the double's 12.8 driver */
    char arch[40], output[8];
} image_kind_case;

ParameterizedTestParameters(cuda_nvrtc, a_newer_minor_nvrtc_compiles_to_a_cubin) {
    static image_kind_case cases[] = {
        {"12080", "--gpu-architecture=compute_90", "ptx"},
        {"12050", "--gpu-architecture=compute_90", "ptx"},
        {"12090", "--gpu-architecture=sm_90", "cubin"},
    };
    return cr_make_param_array(image_kind_case, cases, sizeof cases / sizeof *cases);
}

/* Both kinds of module and single-source kernel load and run; the cubin one compiles for the
 * device's own architecture (sm_90), the PTX one for its virtual one. */
ParameterizedTest(image_kind_case *t, cuda_nvrtc, a_newer_minor_nvrtc_compiles_to_a_cubin) {
    setenv("FAKENVRTC_VERSION", t->nvrtc, 1);
    void *lib = init_fake_nvrtc();
    const char *(*option)(int);
    const char *(*output)(void);
    *(void **)&option = dlsym(lib, "fakenvrtc_option");
    *(void **)&output = dlsym(lib, "fakenvrtc_output");
    cr_assert(option && output);
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd()};
    char *ptx = cuda_double_ptx(kernels, 1);
    cr_assert_eq(adsm_module_load_source(ptx, NULL), ADSM_OK, "%s", adsm_last_error());
    free(ptx);
    cr_assert_str_eq(option(0), t->arch);
    cr_assert_str_eq(output(), t->output);
    run_vadd(1000);
    adsm_shutdown();
}

/* ADSM_NVRTC_LIBRARY wins even when its NVRTC (13.0) is newer than the driver (12.8). */
Test(cuda_nvrtc, configured_library_wins) {
    setenv("FAKENVRTC_VERSION", "13000", 1);
    init_fake_nvrtc();
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_vadd()};
    char *ptx = cuda_double_ptx(kernels, 1);
    cr_assert_eq(adsm_module_load_source(ptx, NULL), ADSM_OK, "%s", adsm_last_error());
    free(ptx);
    adsm__cuda *c = (adsm__cuda *)adsm__rt.be_ctx;
    cr_assert(strstr(c->nvrtc_name, "libfakenvrtc.so") && strstr(c->nvrtc_name, "NVRTC 13.0"), "picked %s",
              c->nvrtc_name);
    run_vadd(1000);
    adsm_shutdown();
}

/* Without ADSM_NVRTC_LIBRARY, the system's NVRTC is taken only where the driver can load its PTX:
 * on this machine NVRTC 13 (libnvrtc.so.13 and libnvrtc.so) against a driver of 12.8 (refused,
 * with a message naming both versions) and of 13.0 (libnvrtc.so.13 picked). */
static void system_nvrtc(const char *driver_version) {
    void *probe = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!probe) cr_skip_test("no libnvrtc.so.13 on this machine");
    dlclose(probe);
    setenv("CUDADOUBLE_DRIVER_VERSION", driver_version, 1);
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    unsetenv("ADSM_NVRTC_LIBRARY");
    adsm__rt.cfg.nvrtc_library[0] = 0; /* as if never set */
}

Test(cuda_nvrtc, newer_nvrtc_than_the_driver_is_refused) {
    system_nvrtc("12080");
    cr_assert_eq(adsm_module_load_source(vadd_cuda, NULL), ADSM_ERROR_BACKEND_UNAVAILABLE);
    expect_message("NVRTC 13.");
    expect_message("CUDA 12.8 driver");
    expect_message("ADSM_NVRTC_LIBRARY");
    adsm_shutdown();
}

Test(cuda_nvrtc, matching_nvrtc_is_picked_by_version) {
    system_nvrtc("13000");
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("vadd", cuda_double_run_body, (void *)adsm__kernel_vadd()), 0);
    cr_assert_eq(adsm_module_load_source(vadd_cuda, NULL), ADSM_OK, "%s", adsm_last_error());
    adsm__cuda *c = (adsm__cuda *)adsm__rt.be_ctx;
    cr_assert(strstr(c->nvrtc_name, "NVRTC 13.0 (libnvrtc.so.13)") != NULL, "picked %s", c->nvrtc_name);
    run_vadd(1000);
    adsm_shutdown();
}

/* ---- the application's own CUDA context ------------------------------------------------------ */
typedef struct app_cuda {
    int (*init)(unsigned);
    int (*retain)(adsm__cu_context *, int);
    int (*release)(int);
    int (*set)(adsm__cu_context);
    int (*get)(adsm__cu_context *);
} app_cuda;

/* The program's own driver calls, on the library adsm loads (the double). */
static app_cuda app_cuda_open(void) {
    app_cuda a;
    cuda_double_use();
    cr_assert_eq(cuda_double_open(), 0);
    *(void **)&a.init = dlsym(cuda_double.lib, "cuInit");
    *(void **)&a.retain = dlsym(cuda_double.lib, "cuDevicePrimaryCtxRetain");
    *(void **)&a.release = dlsym(cuda_double.lib, "cuDevicePrimaryCtxRelease");
    *(void **)&a.set = dlsym(cuda_double.lib, "cuCtxSetCurrent");
    *(void **)&a.get = dlsym(cuda_double.lib, "cuCtxGetCurrent");
    cr_assert(a.init && a.retain && a.release && a.set && a.get);
    return a;
}

static void expect_current(const app_cuda *a, adsm__cu_context want, const char *after) {
    adsm__cu_context now = NULL;
    cr_assert_eq(a->get(&now), 0);
    cr_assert_eq(now, want, "after %s the thread's current context is %p, not the program's %p", after, (void *)now,
                 (void *)want);
}

/* A program that drives CUDA itself keeps its current context across adsm's calls on the same
 * thread: initialisation, module loading, kernel lookup at launch and shutdown all set adsm's
 * context and put the program's back. Its context is device 1's (adsm runs on device 0), and
 * then none at all. */
static void context_survives(int app_device) {
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    app_cuda a = app_cuda_open();
    adsm__cu_context mine = NULL;
    cr_assert_eq(a.init(0), 0);
    if (app_device >= 0) cr_assert_eq(a.retain(&mine, app_device), 0);
    cr_assert_eq(a.set(mine), 0);
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    expect_current(&a, mine, "adsm_init");
    attach();
    expect_current(&a, mine, "adsm_module_load_image");
    run_vadd(1000);
    expect_current(&a, mine, "a launch");
    adsm_shutdown();
    expect_current(&a, mine, "adsm_shutdown");
    if (app_device >= 0) cr_assert_eq(a.release(app_device), 0);
}

Test(cuda_double, application_context_survives) { context_survives(1); }
Test(cuda_double, no_context_stays_none) { context_survives(-1); }

/* ---- memory ------------------------------------------------------------------------------------ */
Test(cuda_double, device_memory_starts_zeroed) {
    init_ok(ADSM_PROTOCOL_ROLLING, 4096, 0);
    attach();
    /* the double fills fresh device memory with 0xA5; adsm must clear it */
    float *a = adsm_alloc(3 * MIB), *c = adsm_alloc(3 * MIB);
    size_t n = 3 * MIB / sizeof(float);
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, a, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(c[i], 0.0f, "c[%zu] = %f", i, (double)c[i]);
    adsm_shutdown();
}

/* A 64 MiB object is backed with O(1) driver calls (one cuMemCreate/cuMemMap/cuMemSetAccess per
 * run of granules it covers alone, plus its edges), not 32 of each; with nothing mapped ahead
 * (ADSM_CUDA_MAP_AHEAD=0) it maps all of it, and its free gives all of it back. */
Test(cuda_double, large_allocation_takes_constant_driver_calls) {
    init_setting("ADSM_CUDA_MAP_AHEAD", "0", ADSM_PROTOCOL_ROLLING, 0);
    cudadouble_counters before = cuda_double_counters();
    void *big = adsm_alloc(64 * MIB);
    cr_assert_not_null(big, "%s", adsm_last_error());
    cudadouble_counters after = cuda_double_counters();
    cr_assert_leq(after.mem_creates - before.mem_creates, 3, "%llu cuMemCreate", after.mem_creates - before.mem_creates);
    cr_assert_leq(after.mem_maps - before.mem_maps, 3, "%llu cuMemMap", after.mem_maps - before.mem_maps);
    cr_assert_leq(after.mem_set_access - before.mem_set_access, 3, "%llu cuMemSetAccess",
                  after.mem_set_access - before.mem_set_access);
    cr_assert_geq(after.device_bytes_mapped - before.device_bytes_mapped, 64 * MIB);
    cr_assert_eq(adsm_free(big), ADSM_OK);
    cr_assert_eq(cuda_double_counters().device_bytes_mapped, before.device_bytes_mapped, "all of it unmapped");
    adsm_shutdown();
}

/* Under an address-space limit (ulimit -v 8G) the device range, which the driver reserves in the
 * process's address space, does not fit: adsm_init names the limit and the way out, where it
 * used to pass on the driver's bare CUDA_ERROR_OUT_OF_MEMORY. In a child: the limit is the
 * process's. */
static void init_under_8_gib(int fd) {
    struct rlimit rl = {(rlim_t)8 << 30, (rlim_t)8 << 30};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    adsm_result r = init_cuda(0, 0, 0);
    const char *said = r == ADSM_OK ? "adsm_init succeeded" : adsm_last_error();
    _exit(write(fd, said, strlen(said)) > 0 && r != ADSM_OK ? 1 : 2);
}

Test(cuda_double, an_address_space_limit_too_small_for_the_device_range_is_named) {
    char said[600];
    int status = run_child(init_under_8_gib, said, sizeof said);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d: %s", status, said);
    cr_assert(strstr(said, "ulimit -v"), "%s", said);
}

/* Device memory mapped ahead (ADSM_CUDA_MAP_AHEAD): the first objects, and the explicit path's
 * buffers, take granules mapped at start and map nothing; a freed one gives nothing back, and the
 * next object there starts zeroed on both sides; past the run, objects map their own; shutdown
 * unmaps it all. (The setting at 0: large_allocation_takes_constant_driver_calls.) The double's
 * device memory is 1 GiB: the default run is 16 MiB there (1/64). */
static void expect_mapped(cudadouble_counters since, unsigned long long creates, size_t bytes, const char *what) {
    cudadouble_counters now = cuda_double_counters();
    cr_assert_eq(now.mem_creates - since.mem_creates, creates, "%s: %llu cuMemCreate, expected %llu", what,
                 now.mem_creates - since.mem_creates, creates);
    cr_assert_eq(now.device_bytes_mapped - since.device_bytes_mapped, bytes, "%s: %llu bytes mapped, expected %zu",
                 what, now.device_bytes_mapped - since.device_bytes_mapped, bytes);
}

Test(cuda_double, device_memory_mapped_ahead_serves_the_first_objects) {
    cudadouble_counters before_init = cuda_double_counters();
    init_ok(ADSM_PROTOCOL_ROLLING, 4096, 0);
    attach();
    cr_assert_eq(cuda_double_counters().device_bytes_mapped - before_init.device_bytes_mapped, 16 * MIB,
                 "adsm_init maps 16 MiB ahead");
    cudadouble_counters start = cuda_double_counters();
    size_t n = MIB / sizeof(float);
    float *a = adsm_alloc(MIB), *b = adsm_alloc(MIB), *c = adsm_alloc(MIB);
    void *buffer = adsm_dev_alloc(MIB);
    cr_assert(a && b && c && buffer, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) a[i] = b[i] = 1.0f;
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, b, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(c[n - 1], 2.0f);
    expect_mapped(start, 0, 0, "three objects and a buffer in the run");
    cr_assert_eq(adsm_free(c), ADSM_OK);
    expect_mapped(start, 0, 0, "a free in the run");
    float *again = adsm_alloc(MIB); /* where c was: the double does not clear it, adsm must */
    cr_assert_eq((void *)again, (void *)c, "the arena gave the freed range back");
    float *twice = adsm_alloc(MIB); /* what a kernel reads in it (after the zeroing, in stream order) */
    cr_assert_not_null(twice, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)(n / 256), 256), twice, again, again, n), ADSM_OK, "%s",
                 adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(twice[i], 0.0f, "device copy [%zu] = %f", i, (double)twice[i] / 2);
    for (size_t i = 0; i < n; i++) cr_assert_eq(again[i], 0.0f, "host copy [%zu] = %f", i, (double)again[i]);
    char *past = adsm_alloc(32 * MIB); /* runs past the 16 MiB run: maps the rest */
    cr_assert_not_null(past, "%s", adsm_last_error());
    cr_assert_gt(cuda_double_counters().mem_creates, start.mem_creates, "an object past the run maps its own");
    cr_assert_eq(adsm_free(past), ADSM_OK);
    expect_mapped(start, cuda_double_counters().mem_creates - start.mem_creates, 0, "past the run, freed");
    /* every object in the run freed, the one on its first granule last: it stays, and serves the
     * next ones */
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(adsm_free(again), ADSM_OK);
    cr_assert_eq(adsm_free(twice), ADSM_OK);
    cr_assert_eq(adsm_dev_free(buffer), ADSM_OK);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cudadouble_counters emptied = cuda_double_counters();
    cr_assert_eq(emptied.device_bytes_mapped, start.device_bytes_mapped, "the run stays mapped, empty");
    run_vadd(MIB / sizeof(float));
    expect_mapped(emptied, 0, 0, "new objects in the emptied run");
    adsm_shutdown();
    cr_assert_eq(cuda_double_counters().device_bytes_mapped, before_init.device_bytes_mapped, "shutdown unmaps all");
}

/* A run larger than half the device's free memory is refused, naming the setting; so is a value
 * that is no size. */
ParameterizedTestParameters(cuda_double, map_ahead_refuses_bad_values) {
    static char values[][16] = {"768M", "lots"};
    return cr_make_param_array(char[16], values, sizeof values / sizeof values[0]);
}

ParameterizedTest(char (*value)[16], cuda_double, map_ahead_refuses_bad_values) {
    expect_setting_refused("ADSM_CUDA_MAP_AHEAD", *value);
}

/* adsm_memcpy within one device buffer, the ranges overlapping either way, acts as memmove (the
 * double refuses an overlapping cuMemcpyDtoDAsync, as the driver promises nothing there). */
Test(cuda_double, overlapping_copies_in_a_device_buffer_act_as_memmove) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    size_t n = 3 * MIB;
    unsigned char *d = adsm_dev_alloc(n), *mirror = malloc(n), *back = malloc(n);
    cr_assert(d && mirror && back, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) mirror[i] = (unsigned char)(i * 7 + i / 4096);
    cr_assert_eq(adsm_copy_to_device(d, mirror, n), ADSM_OK, "%s", adsm_last_error());
    const struct {
        size_t to, from, len;
    } moves[] = {{1000, 0, 2 * MIB}, {8, MIB + 12, 2 * MIB - 100}};
    for (size_t k = 0; k < sizeof moves / sizeof moves[0]; k++) {
        memmove(mirror + moves[k].to, mirror + moves[k].from, moves[k].len);
        cr_assert_eq(adsm_memcpy(d + moves[k].to, d + moves[k].from, moves[k].len), ADSM_OK, "move %zu: %s", k,
                     adsm_last_error());
        cr_assert_eq(adsm_copy_from_device(back, d, n), ADSM_OK, "%s", adsm_last_error());
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(back[i], mirror[i], "move %zu: byte %zu is %u, memmove gives %u", k, i, back[i], mirror[i]);
    }
    cr_assert_eq(adsm_dev_free(d), ADSM_OK);
    free(mirror);
    free(back);
    adsm_shutdown();
}

/* Granules shared by neighbouring objects stay mapped while one of them lives, whatever the
 * order of frees; a large object's own granules go with it. */
Test(cuda_double, shared_granules_outlive_their_neighbours) {
    init_ok(ADSM_PROTOCOL_ROLLING, 4096, 0);
    attach();
    cudadouble_counters start = cuda_double_counters();
    char *a = adsm_alloc(4096), *b = adsm_alloc(9 * MIB + 4096), *c = adsm_alloc(4096);
    cr_assert(a && b && c, "%s", adsm_last_error());
    a[0] = 'a', c[0] = 'c';
    memset(b, 'b', 9 * MIB + 4096);
    cr_assert_not_null(cuda_double.host_view((uintptr_t)adsm_safe(b) + 4 * MIB, 1), "b's middle is device memory");
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_not_null(cuda_double.host_view((uintptr_t)adsm_safe(a), 4096), "a keeps its device memory");
    cr_assert_not_null(cuda_double.host_view((uintptr_t)adsm_safe(c), 4096), "c keeps its device memory");
    run_vadd(300000); /* reuses b's addresses */
    cr_assert_eq(a[0], 'a');
    cr_assert_eq(c[0], 'c');
    cr_assert_eq(adsm_free(c), ADSM_OK);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(cuda_double_counters().device_bytes_mapped, start.device_bytes_mapped, "nothing left mapped");
    adsm_shutdown();
}

Test(cuda_double, out_of_device_memory) {
    setenv("CUDADOUBLE_MEMORY", "67108864", 1); /* 64 MiB */
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    cr_assert_null(adsm_alloc(100 * MIB));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    void *objects[64];
    size_t n = 0;
    while (n < 64 && (objects[n] = adsm_alloc(2 * MIB)) != NULL) n++;
    cr_assert(n > 0 && n < 64, "the 64 MiB device fills up (%zu objects)", n);
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(adsm_free(objects[i]), ADSM_OK);
    run_vadd(100000); /* everything freed: room again */
    adsm_shutdown();
}

/* Copies larger than the staging buffers go in chunks through both slots; with every driver
 * operation delayed, a slot reused before its DMA finished would show up as wrong data. */
Test(cuda_double, chunked_copies_through_pinned_staging, .timeout = 60) {
    setenv("CUDADOUBLE_DELAY_US", "200", 1);
    init_ok(ADSM_PROTOCOL_LAZY, 0, 256 << 10);
    attach();
    cudadouble_counters before = cuda_double_counters();
    run_vadd((size_t)3 * MIB); /* 12 MiB objects, 48 chunks each way */
    cudadouble_counters after = cuda_double_counters();
    cr_assert_gt(after.h2d_async, before.h2d_async);
    cr_assert_gt(after.d2h_async, before.d2h_async);
    cr_assert_eq(after.h2d_pageable, before.h2d_pageable, "every upload went through pinned memory");
    cr_assert_eq(after.d2h_pageable, before.d2h_pageable, "every download went through pinned memory");
    adsm_shutdown();
}

/* The engine and completion threads wait with cuEventSynchronize (staging slots, launches) and
 * for whole streams (direct copies, frees). An event made without CU_EVENT_BLOCKING_SYNC, or
 * cuStreamSynchronize on a primary context (scheduling AUTO), makes a real driver spin a core for
 * the whole wait; the double counts those waits. Staged copies at shared addresses, then direct
 * copies of page-locked objects (translated addresses). */
static void expect_no_spinning(void) {
    cudadouble_counters before = cuda_double_counters();
    run_vadd((size_t)1 * MIB); /* 4 MiB objects: 16 chunks each way through 256 KiB slots */
    cudadouble_counters after = cuda_double_counters();
    cr_assert_gt(after.d2h_async - before.d2h_async, 0, "downloads ran (%llu)", after.d2h_async - before.d2h_async);
    cr_assert_eq(after.spin_waits - before.spin_waits, 0, "%llu waits spun", after.spin_waits - before.spin_waits);
}

Test(cuda_double, engine_waits_sleep_staged) {
    init_ok(ADSM_PROTOCOL_LAZY, 0, 256 << 10);
    attach();
    expect_no_spinning();
    adsm_shutdown();
}

Test(cuda_double, engine_waits_sleep_direct) {
    init_translated(0);
    expect_no_spinning();
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.staged_bytes, 0, "the copies were direct");
    adsm_shutdown();
}

Test(cuda_double, pageable_fallback_when_pinning_fails) {
    setenv("CUDADOUBLE_NO_PINNED", "1", 1);
    init_without_alias(ADSM_PROTOCOL_ROLLING, 0); /* objects not page-locked: copies through staging */
    attach();
    run_vadd(300000);
    cudadouble_counters c = cuda_double_counters();
    cr_assert_gt(c.h2d_pageable, 0);
    cr_assert_eq(c.h2d_async, 0);
    adsm_shutdown();
}

/* adsm's byte counts are what the driver saw. */
Test(cuda_double, bytes_moved_match_the_driver) {
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
    attach();
    adsm_reset_stats();
    cudadouble_counters before = cuda_double_counters();
    run_vadd(200000);
    cudadouble_counters after = cuda_double_counters();
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(after.h2d_bytes - before.h2d_bytes, s.h2d_bytes);
    cr_assert_eq(after.d2h_bytes - before.d2h_bytes, s.d2h_bytes);
    cr_assert_eq(after.launches - before.launches, 1);
    adsm_shutdown();
}

Test(cuda_double, explicit_path) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    size_t n = 100000;
    float *ha = malloc(n * sizeof *ha), *hc = malloc(n * sizeof *hc);
    for (size_t i = 0; i < n; i++) ha[i] = (float)i;
    float *da = adsm_dev_alloc(n * sizeof *da), *dc = adsm_dev_alloc(n * sizeof *dc);
    cr_assert(da && dc, "%s", adsm_last_error());
    cr_assert_eq(adsm_copy_to_device(da, ha, n * sizeof *ha), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), dc, da, da, n), ADSM_OK);
    cr_assert_eq(adsm_copy_from_device(hc, dc, n * sizeof *hc), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(hc[i], (float)(2 * i));
    cr_assert_eq(adsm_dev_free(da), ADSM_OK);
    cr_assert_eq(adsm_dev_free(dc), ADSM_OK);
    free(ha);
    free(hc);
    adsm_shutdown();
}

/* On emu the module calls only check their arguments, so one program runs on every backend. */
Test(cuda_backend, module_calls_on_emu) {
    clear_env();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK);
    cr_assert_eq(adsm_module_load_source(vadd_cuda, NULL), ADSM_OK);
    cr_assert_eq(adsm_module_load_image("anything", 0), ADSM_OK);
    cr_assert_eq(adsm_module_load_source(NULL, NULL), ADSM_ERROR_INVALID_VALUE);
    cr_assert_eq(adsm_module_load_file("/nonexistent.ptx"), ADSM_ERROR_SYSTEM);
    expect_message("/nonexistent.ptx");
    run_vadd(1000);
    adsm_shutdown();
}

/* A device-side memset (adsm_memset of Invalid blocks) runs on the kernel stream; a fetch right
 * after it must see its bytes, not what the kernel left, however late the memset runs. */
Test(cuda_double, fetch_after_device_memset_sees_it, .timeout = 60) {
    setenv("CUDADOUBLE_DELAY_US", "2000", 1);
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
    attach();
    size_t n = 256 << 10;
    float *a = adsm_alloc(n * sizeof *a), *c = adsm_alloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    cr_assert_eq(ADSM_CALL(vadd, adsm_grid_1d((uint32_t)(n / 256), 256), c, a, a, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    adsm_reset_stats();
    cr_assert_eq(adsm_memset(c, 0, n * sizeof *c), ADSM_OK, "%s", adsm_last_error());
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.d2h_bytes, 0, "the memset ran on the device only");
    for (size_t i = 0; i < n; i += 997) cr_assert_eq(c[i], 0.0f, "c[%zu] = %f", i, (double)c[i]);
    adsm_shutdown();
}

/* A driver that keeps device ranges out of the host's address space grants the hint: the device
 * range then sits exactly under adsm's host reservation (first of the three placements). */
Test(cuda_double, same_address_by_hint) {
    setenv("CUDADOUBLE_NO_PLACEHOLDER", "1", 1);
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    adsm__cuda *c = (adsm__cuda *)adsm__rt.be_ctx;
    cr_assert_eq(c->va, (adsm__cu_deviceptr)adsm__rt.base, "the device range starts at adsm's reservation");
    cr_assert_eq(c->va_moved_host, 0, "the host reservation stayed where it was");
    float *a = adsm_alloc(4096);
    cr_assert_eq(adsm_safe(a), (void *)a);
    run_vadd(100000);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.translated_args, 0);
    adsm_shutdown();
}

/* Without that, the host reservation moves onto the range the driver chose (GMAC's order). */
Test(cuda_double, same_address_by_moving_the_host_reservation) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    adsm__cuda *c = (adsm__cuda *)adsm__rt.be_ctx;
    cr_assert_eq(c->va_moved_host, 1);
    cr_assert_eq(c->va, (adsm__cu_deviceptr)adsm__rt.base);
    adsm_shutdown();
}

/* Without /proc/self/mem, downloads into protected pages are moved by pages, as on emu. */
Test(cuda_double, downloads_without_proc_self_mem) {
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
    attach();
    close(adsm__rt.fill.procmem.fd);
    adsm__rt.fill.procmem.fd = -1;
    run_vadd(200000);
    adsm_shutdown();
}

/* ---- the reservation and the driver's ranges ---------------------------------------------------- */
/* Device ranges the driver holds (from cuMemAddressReserve to cuMemAddressFree, told by the
 * double's address hook), and munmap calls from outside the driver that touched one of them. */
static struct {
    uintptr_t base[16];
    size_t size[16];
    int n, watch, violations, map_after_free;
    void *mapped; /* the program's page, mapped where a freed range was */
} ranges;

/* The program's munmap: adsm's calls come here (the executable's definition interposes libc's).
 * A driver range may only be unmapped by the driver (its own cuMemAddressFree). */
int munmap(void *addr, size_t len) {
    Dl_info info;
    int from_driver = dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
                      strstr(info.dli_fname, "libcudadouble") != NULL;
    for (int i = 0; ranges.watch && !from_driver && i < ranges.n; i++)
        if ((uintptr_t)addr < ranges.base[i] + ranges.size[i] && ranges.base[i] < (uintptr_t)addr + len)
            ranges.violations++;
    return (int)syscall(SYS_munmap, addr, len);
}

static void track_range(int reserved, unsigned long long base, size_t size, void *user) {
    (void)user;
    if (reserved && ranges.n < 16) {
        ranges.base[ranges.n] = (uintptr_t)base;
        ranges.size[ranges.n++] = size;
        return;
    }
    for (int i = 0; i < ranges.n; i++)
        if (ranges.base[i] == base) {
            ranges.base[i] = ranges.base[--ranges.n];
            ranges.size[i] = ranges.size[ranges.n];
        }
    if (!ranges.map_after_free || ranges.mapped) return;
    /* what another thread of the program may do now that the range is free address space */
    void *p = mmap((void *)(uintptr_t)base, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p != (void *)(uintptr_t)base) return;
    strcpy((char *)p, "the program's");
    ranges.mapped = p;
}

static void watch_ranges(void) {
    cuda_double_use();
    cr_assert_eq(cuda_double_open(), 0); /* the instance adsm_init will load */
    cuda_double.set_address_hook(track_range, NULL);
    ranges.watch = 1;
}

/* With the host reservation moved onto the device range, shutdown turns it back into a
 * placeholder and the driver frees the range: from then on it is not adsm's. A page the program
 * maps there at once (as another thread could) survives adsm_shutdown. */
Test(cuda_double, shutdown_leaves_the_freed_range_alone) {
    watch_ranges();
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(((adsm__cuda *)adsm__rt.be_ctx)->va_moved_host, 1);
    attach();
    run_vadd(1000);
    ranges.map_after_free = 1;
    adsm_shutdown();
    cr_assert_not_null(ranges.mapped, "the program mapped a page where the device range was");
    cr_assert_eq(msync(ranges.mapped, 4096, MS_ASYNC), 0, "adsm_shutdown unmapped the program's page");
    cr_assert_str_eq((char *)ranges.mapped, "the program's");
    cr_assert_eq(ranges.violations, 0, "adsm unmapped a range the driver held");
}

/* Device memory that fails the start-up probe under the moved reservation (the double loses
 * memsets on the NULL stream): adsm takes a fresh host reservation elsewhere and gives the
 * driver its range back as a placeholder (mapped over its own reservation, no munmap: no window
 * where another thread's mapping could be overwritten), then translates addresses. */
Test(cuda_double, failed_probe_gives_the_range_back_without_unmapping_it) {
    setenv("CUDADOUBLE_LOSE_NULL_MEMSETS", "1", 1);
    watch_ranges();
    ranges.map_after_free = 1;
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    adsm__cuda *c = (adsm__cuda *)adsm__rt.be_ctx;
    cr_assert_eq(c->va_moved_host, 0);
    cr_assert_neq(c->delta, 0, "after the failed probe device addresses are translated");
    cr_assert_eq(ranges.violations, 0, "adsm unmapped a range while the driver held it");
    cr_assert_not_null(ranges.mapped, "the program mapped a page where the moved range was");
    attach();
    run_vadd(1000);
    adsm_shutdown();
    cr_assert_eq(msync(ranges.mapped, 4096, MS_ASYNC), 0, "adsm unmapped the program's page");
    cr_assert_str_eq((char *)ranges.mapped, "the program's");
    cr_assert_eq(ranges.violations, 0, "adsm unmapped a range the driver held");
}

/* ---- page-locked shared objects -------------------------------------------------------------- */
/* Where the driver page-locks the objects' host pages, every copy is DMA on those pages: no byte
 * goes through adsm's staging, in either direction, and downloads need no staging slot either (the
 * DMA writes the pages whatever the program's view allows). Under translated addresses the pages
 * themselves are locked (they are not device address space); under shared addresses they are, so
 * adsm never asks the driver to lock them (a documented use it is not; the double refuses it):
 * they get a second view, the host alias, which the driver locks, and no registration touches the
 * reservation. Counted by adsm and, independently, by the double. */
ParameterizedTestParameters(cuda_double, page_locked_objects_move_without_staging) {
    static int translated[] = {1, 0};
    return cr_make_param_array(int, translated, 2);
}

ParameterizedTest(int *translated, cuda_double, page_locked_objects_move_without_staging) {
    if (*translated) {
        init_translated(64 << 10);
    } else {
        init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
        attach();
        cr_assert_neq(adsm__rt.host_alias, 0, "no host alias under shared addresses");
    }
    adsm_reset_stats();
    cudadouble_counters before = cuda_double_counters();
    run_vadd(300000);
    cudadouble_counters after = cuda_double_counters();
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_geq(after.registrations - before.registrations, 3, "the three objects were page-locked");
    cr_assert_eq(after.register_calls - before.register_calls, after.registrations - before.registrations,
                 "a registration was refused (one over the reservation?)");
    cr_assert_gt(s.h2d_bytes, 0);
    cr_assert_gt(s.d2h_bytes, 0);
    cr_assert_eq(s.staged_bytes, 0, "adsm staged %llu bytes", (unsigned long long)s.staged_bytes);
    cr_assert_eq(after.staged_bytes - before.staged_bytes, 0, "the driver saw copies from staging");
    cr_assert_eq(after.registered_bytes - before.registered_bytes, s.h2d_bytes + s.d2h_bytes);
    cr_assert_eq(s.d2h_moved_bytes + s.d2h_forced_bytes, 0, "downloads went through a staging slot");
    adsm_shutdown();
}

/* With two GPUs the objects are page-locked once for the process (CU_MEMHOSTREGISTER_PORTABLE: a
 * plain registration is page-locked for the registering GPU's context only, and the other's copies
 * would be staged by the driver), and a download from the second GPU is DMA into the locked pages
 * too: never a staging slot moved over them with mremap, which would leave the pinned pages (the
 * ones DMA reaches) outside the object. The vector is several huge pages long, which a staging
 * slot would move. */
Test(cuda_double, page_locked_objects_move_without_staging_on_every_gpu) {
    clear_env();
    cuda_double_use();
    setenv("ADSM_CUDA_SAME_ADDRESS", "0", 1);
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.devices = "all";
    cfg.protocol = ADSM_PROTOCOL_LAZY; /* no eviction still in flight when the counts start */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 2);
    attach();
    size_t n = 3 << 20; /* 12 MiB per vector */
    float *a = adsm_alloc(n * sizeof *a), *b = adsm_alloc(n * sizeof *b), *c = adsm_alloc(n * sizeof *c);
    cr_assert(a && b && c, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 1.0f;
    adsm_reset_stats();
    cudadouble_counters before = cuda_double_counters();
    adsm_result r = ADSM_CALL_ON(1, vadd, adsm_grid_1d((uint32_t)((n + 255) / 256), 256), c, a, b, n);
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i += 1000) cr_assert_eq(c[i], (float)i + 1.0f, "c[%zu] = %f", i, (double)c[i]);
    cudadouble_counters after = cuda_double_counters();
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_gt(s.d2h_bytes, 0);
    cr_assert_eq(s.d2h_moved_bytes + s.d2h_forced_bytes, 0, "downloads from GPU 1 went through a staging slot");
    cr_assert_eq(s.staged_bytes, 0, "adsm staged %llu bytes", (unsigned long long)s.staged_bytes);
    cr_assert_eq(after.pageable_bytes - before.pageable_bytes, 0, "GPU 1's driver context saw pageable memory");
    cr_assert_eq(after.registered_bytes - before.registered_bytes, s.h2d_bytes + s.d2h_bytes,
                 "registered %llu, pageable %llu, staged %llu; adsm h2d %llu d2h %llu",
                 after.registered_bytes - before.registered_bytes, after.pageable_bytes - before.pageable_bytes,
                 after.staged_bytes - before.staged_bytes, (unsigned long long)s.h2d_bytes,
                 (unsigned long long)s.d2h_bytes);
    adsm_free(a), adsm_free(b), adsm_free(c);
    adsm_shutdown();
}

/* Launch numbers count every device's launches: a GPU that sat idle through more launches on
 * the other than it has event slots (256) must still launch (its engine waited for its completion
 * thread to come within 256 numbers of the new launch, which it never does past the GPU's own
 * last launch: a hang), and its launches must still be waited for. */
Test(cuda_double, a_gpu_idle_through_many_launches_elsewhere_still_launches, .timeout = 120) {
    clear_env();
    cuda_double_use();
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.devices = "all";
    cfg.protocol = ADSM_PROTOCOL_LAZY;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 2);
    attach();
    size_t n = 1024;
    float *a = adsm_alloc(n * sizeof *a), *b = adsm_alloc(n * sizeof *b), *c = adsm_alloc(n * sizeof *c);
    float *d = adsm_alloc(n * sizeof *d);
    cr_assert(a && b && c && d, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 1.0f;
    adsm_grid g = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    for (int round = 0; round < 2; round++) {
        for (int l = 0; l < 300; l++) cr_assert_eq(ADSM_CALL_ON(0, vadd, g, c, a, b, n), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        cr_assert_eq(ADSM_CALL_ON(1, vadd, g, d, c, b, n), ADSM_OK, "round %d: %s", round, adsm_last_error());
        cr_assert_eq(adsm_sync(), ADSM_OK, "round %d: %s", round, adsm_last_error());
        for (size_t i = 0; i < n; i += 100) cr_assert_eq(d[i], (float)i + 2.0f, "round %d: d[%zu] = %f", round, i, (double)d[i]);
    }
    adsm_free(a), adsm_free(b), adsm_free(c), adsm_free(d);
    adsm_shutdown();
}

/* A safe object's host pages (the safe half: device address space where the host reservation
 * moved onto a device range) are not in the alias: that object is staged, never registered, and
 * the shared objects allocated after it are still page-locked. */
Test(cuda_double, a_safe_object_leaves_later_objects_locked) {
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
    attach();
    cudadouble_counters before = cuda_double_counters();
    float *s = adsm_safe_alloc(1 << 20);
    cr_assert_not_null(s, "%s", adsm_last_error());
    cudadouble_counters mid = cuda_double_counters();
    cr_assert_eq(mid.register_calls - before.register_calls, 0, "adsm asked to lock the safe half");
    adsm_reset_stats();
    run_vadd(300000);
    cudadouble_counters after = cuda_double_counters();
    adsm_stats st;
    adsm_get_stats(&st);
    cr_assert_eq(after.registrations - mid.registrations, 3, "the vectors after the safe object were not locked");
    cr_assert_eq(st.staged_bytes, 0, "adsm staged %llu bytes", (unsigned long long)st.staged_bytes);
    cr_assert_eq(adsm_free(s), ADSM_OK);
    adsm_shutdown();
}

/* Whether the first GPU's backend has [host, host + n) page-locked. */
static int host_locked(uintptr_t host, size_t n) {
    return adsm__cuda_is_locked((adsm__cuda *)adsm__rt.dev_ctx[0], host, n);
}

/* Pages of [p, p + n) resident in memory (mincore; for the alias: in its file). */
static size_t resident_pages(uintptr_t p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), count = 0;
    unsigned char *v = calloc(n / page, 1);
    cr_assert_not_null(v);
    cr_assert_eq(mincore((void *)p, n, v), 0, "mincore: %s", strerror(errno));
    for (size_t i = 0; i < n / page; i++) count += v[i] & 1;
    free(v);
    return count;
}

/* The alias's file keeps its pages through MADV_DONTNEED: a free punches them out (memory goes
 * back), and the next object at that address reads zeros, not the last one's bytes; with 2 MiB
 * pages (collapsed, where the kernel grants them) and with 4 KiB ones. */
ParameterizedTestParameters(cuda_double, a_freed_object_gives_its_alias_pages_back) {
    static char collapse[][2] = {"1", "0"};
    return cr_make_param_array(char[2], collapse, sizeof collapse / sizeof collapse[0]);
}

ParameterizedTest(char (*collapse)[2], cuda_double, a_freed_object_gives_its_alias_pages_back) {
    init_setting("ADSM_CUDA_ALIAS_COLLAPSE", *collapse, ADSM_PROTOCOL_ROLLING, 0);
    const size_t size = 8 << 20, n = size / sizeof(float), page = (size_t)sysconf(_SC_PAGESIZE);
    float *a = adsm_alloc(size);
    cr_assert_not_null(a, "%s", adsm_last_error());
    uintptr_t alias = adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert_neq(alias, (uintptr_t)a, "no host alias");
    for (size_t i = 0; i < n; i++) a[i] = 1.0f + (float)i;
    cr_assert_eq(resident_pages(alias, size), size / page, "the object's pages are not in the alias's file");
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(resident_pages(alias, size), 0, "a freed object kept its shared memory");
    float *b = adsm_alloc(size);
    cr_assert_eq(b, a, "the next object of that size did not take the same range");
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0.0f) cr_assert_fail("b[%zu] = %g: the freed object's bytes", i, b[i]);
    adsm_free(b);
    adsm_shutdown();
}

/* The setting sysfs shows for transparent huge pages (the choice in brackets) read as the kernel
 * means it: the hint adsm logs about the host alias's cost rests on it. */
typedef struct thp_setting {
    char text[64]; /* held in the parameter itself: the test runs in a fresh process */
    int huge;
} thp_setting;

ParameterizedTestParameters(cuda_double, thp_settings_read_as_the_kernel_means_them) {
    static thp_setting settings[] = {
        {"always within_size advise [never] deny force\n", 0}, {"always within_size [advise] never deny force", 1},
        {"[always] within_size advise never deny force\n", 1}, {"always [within_size] advise never deny force", 1},
        {"always within_size advise never [deny] force", 0},   {"always within_size advise never deny [force]", 1},
        {"always madvise [never]\n", 0},                        {"[always] madvise never", 1},
        {"always [madvise] never", 1}, /* the anonymous memory's file says madvise */
        {"", -1},                                               {"never", -1},
        {"[nev", -1},
    };
    return cr_make_param_array(thp_setting, settings, sizeof settings / sizeof *settings);
}

ParameterizedTest(thp_setting *t, cuda_double, thp_settings_read_as_the_kernel_means_them) {
    cr_assert_eq(adsm__thp_setting_gives_huge_pages(t->text), t->huge, "\"%s\"", t->text);
}

/* Pages of [p, p + n) the process's page table maps (/proc/self/pagemap: bit 63, present). */
static size_t mapped_pages(uintptr_t p, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), count = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY);
    cr_assert_geq(fd, 0, "/proc/self/pagemap: %s", strerror(errno));
    for (uintptr_t a = p; a < p + n; a += page) {
        uint64_t entry = 0;
        cr_assert_eq(pread(fd, &entry, sizeof entry, (off_t)(a / page * sizeof entry)), (ssize_t)sizeof entry);
        count += (size_t)(entry >> 63);
    }
    close(fd);
    return count;
}

/* KiB of shared memory mapped by 2 MiB page-table entries in the mappings that overlap
 * [p, p + n) (/proc/self/smaps, ShmemPmdMapped): the test's only object is the range's only
 * user, so this is its own. */
static size_t pmd_mapped_kib(uintptr_t p, size_t n) {
    FILE *f = fopen("/proc/self/smaps", "re");
    cr_assert_not_null(f, "/proc/self/smaps: %s", strerror(errno));
    char line[512];
    size_t kib = 0, v = 0;
    int overlaps = 0;
    unsigned long start, end;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' '))
            overlaps = start < p + n && end > p;
        else if (overlaps && sscanf(line, "ShmemPmdMapped: %zu kB", &v) == 1)
            kib += v;
    }
    fclose(f);
    return kib;
}

/* Whether this kernel collapses shared memory into 2 MiB pages on request (MADV_COLLAPSE),
 * asked here without adsm: 4 MiB of a memfd at a 2 MiB-aligned address, one page touched. */
static int kernel_collapses_shmem(void) {
    const size_t huge = 2 * MIB;
    int fd = (int)syscall(SYS_memfd_create, "probe", 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(2 * huge)), 0);
    char *raw = mmap(NULL, 3 * huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(raw, MAP_FAILED);
    char *at = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    cr_assert_neq(mmap(at, huge, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0), MAP_FAILED);
    at[0] = 1;
    int ok = madvise(at, huge, 25 /* MADV_COLLAPSE */) == 0;
    munmap(raw, 3 * huge);
    close(fd);
    return ok;
}

/* The host alias is made of 2 MiB pages where the kernel gives them (shmem_enabled, or collapsed
 * on request), so that making, first writing and DMA of an object cost what anonymous huge pages
 * cost (issue: on the first GPU machine 4 KiB shmem made vecadd 1.8-2x the explicit program). The
 * program's view maps them 2 MiB at a time too, mapped whole when the object is made, except with
 * blocks under 2 MiB: there protecting a block would drop the mapping of its whole 2 MiB page, so
 * the view maps them 4 KiB at a time, each block's when the CPU first writes it (or a fetch opens
 * it), since mapped entries are what every later protection change walks; a write to another block
 * keeps the first one's mapped. With
 * ADSM_CUDA_ALIAS_COLLAPSE=0, or where the kernel refuses, 4 KiB pages give the same results. */
typedef struct alias_case {
    char collapse[2]; /* ADSM_CUDA_ALIAS_COLLAPSE */
    size_t block;     /* 0: the default, 2 MiB */
    adsm_protocol_kind protocol;
} alias_case;

ParameterizedTestParameters(cuda_double, the_alias_has_2_mib_pages_where_the_kernel_grants_them) {
    static alias_case cases[] = {{"1", 0, ADSM_PROTOCOL_ROLLING},         {"0", 0, ADSM_PROTOCOL_ROLLING},
                                 {"1", 64 << 10, ADSM_PROTOCOL_ROLLING}, {"0", 64 << 10, ADSM_PROTOCOL_ROLLING},
                                 {"1", 64 << 10, ADSM_PROTOCOL_LAZY},    {"1", 64 << 10, ADSM_PROTOCOL_BATCH}};
    return cr_make_param_array(alias_case, cases, sizeof cases / sizeof cases[0]);
}

/* (lazy and batch change whole objects: their view keeps 2 MiB pages at any block size) */
ParameterizedTest(alias_case *t, cuda_double, the_alias_has_2_mib_pages_where_the_kernel_grants_them) {
    int small_blocks = t->block && t->block < 2 * MIB && t->protocol == ADSM_PROTOCOL_ROLLING;
    int by_setting = adsm__shmem_gets_huge_pages() == 1;
    int collapsing = !by_setting && *t->collapse == '1' && kernel_collapses_shmem();
    int huge = by_setting || collapsing;
    init_setting("ADSM_CUDA_ALIAS_COLLAPSE", t->collapse, t->protocol, t->block);
    int want = by_setting ? ADSM__ALIAS_HUGE_BY_SETTING : collapsing ? ADSM__ALIAS_HUGE_BY_COLLAPSE : ADSM__ALIAS_SMALL;
    cr_assert_eq(adsm__rt.alias_pages, want, "the alias's pages: %d, expected %d", adsm__rt.alias_pages, want);
    cr_assert_eq(adsm__rt.view_small_pages, small_blocks);
    const size_t size = 8 * MIB, page = (size_t)sysconf(_SC_PAGESIZE);
    char *a = adsm_alloc(size);
    cr_assert_not_null(a, "%s", adsm_last_error());
    uintptr_t alias = adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert_neq(alias, (uintptr_t)a, "no host alias");
    /* a write fault on one block, inside a 2 MiB page: the object's first use (its host pages are
     * made then under lazy and rolling, at adsm_alloc under batch) */
    ((volatile char *)a)[3 * MIB + (64 << 10)] = 1;
    size_t alias_kib = huge ? size >> 10 : 0, view_kib = huge && !small_blocks ? size >> 10 : 0;
    cr_assert_eq(pmd_mapped_kib(alias, size), alias_kib, "the alias maps %zu KiB by 2 MiB pages, expected %zu",
                 pmd_mapped_kib(alias, size), alias_kib);
    cr_assert_eq(pmd_mapped_kib((uintptr_t)a, size), view_kib, "the program's view maps %zu KiB by 2 MiB pages, "
                 "expected %zu", pmd_mapped_kib((uintptr_t)a, size), view_kib);
    size_t view_want = small_blocks ? t->block / page : size / page;
    cr_assert_eq(mapped_pages((uintptr_t)a, size), view_want, "after a write to one block the program's view maps "
                 "%zu of the object's %zu pages, expected %zu", mapped_pages((uintptr_t)a, size), size / page, view_want);
    ((volatile char *)a)[5 * MIB] = 2; /* another block, in another 2 MiB page */
    view_want = small_blocks ? 2 * t->block / page : size / page;
    cr_assert_eq(mapped_pages((uintptr_t)a, size), view_want, "after a write to a second block the view maps %zu pages, "
                 "expected %zu", mapped_pages((uintptr_t)a, size), view_want);
    cr_assert_eq(a[3 * MIB + (64 << 10)], 1);
    adsm_free(a);
    run_vadd(size / sizeof(float)); /* the same results either way */
    adsm_shutdown();
}

/* Objects under 2 MiB are packed, so several share a 2 MiB page of the alias: the first made that
 * covers at least half of it collapses the whole 2 MiB (its neighbours' parts kept as they are), so
 * a 1 MiB object gets a huge page's cost and DMA instead of 256 shmem pages. In the program's view
 * that region is mapped 4 KiB at a time: each object changes its own protection, which would drop
 * a 2 MiB mapping shared with its neighbour. Two 1 MiB objects fill one 2 MiB page here; a kernel
 * reading one of them (lazy and batch: its protection changes) leaves the other's pages mapped. */
typedef struct shared_page_case {
    adsm_protocol_kind protocol;
    size_t block;
    char setting[2]; /* ADSM_CUDA_COLLAPSE_SHARED */
} shared_page_case;

ParameterizedTestParameters(cuda_double, objects_sharing_a_2_mib_page_have_it_collapsed_once) {
    static shared_page_case cases[] = {{ADSM_PROTOCOL_LAZY, 0, "1"},
                                       {ADSM_PROTOCOL_BATCH, 0, "1"},
                                       {ADSM_PROTOCOL_ROLLING, 0, "1"},
                                       {ADSM_PROTOCOL_ROLLING, 64 << 10, "1"},
                                       {ADSM_PROTOCOL_LAZY, 0, "0"}};
    return cr_make_param_array(shared_page_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(shared_page_case *t, cuda_double, objects_sharing_a_2_mib_page_have_it_collapsed_once) {
    int collapsing = *t->setting == '1' && adsm__shmem_gets_huge_pages() != 1 && kernel_collapses_shmem();
    init_setting("ADSM_CUDA_COLLAPSE_SHARED", t->setting, t->protocol, t->block);
    const size_t n = MIB / sizeof(float), page = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t collapsed = adsm__rt.shared_regions_collapsed; /* batch makes them at adsm_alloc */
    float *a = adsm_alloc(MIB), *b = adsm_alloc(MIB), *c = adsm_alloc(MIB);
    cr_assert(a && b && c, "%s", adsm_last_error());
    uintptr_t region = (uintptr_t)a & ~(2 * MIB - 1);
    cr_assert(region == (uintptr_t)a && (uintptr_t)b == region + MIB, "a at %p and b at %p do not fill one 2 MiB page",
              (void *)a, (void *)b);
    uintptr_t alias = adsm__host_dma(&adsm__rt, region);
    for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 2.0f * (float)i; /* the first uses */
    /* c lies alone in the next 2 MiB page, which it covers half of */
    cr_assert_eq(adsm__rt.shared_regions_collapsed - collapsed, t->protocol == ADSM_PROTOCOL_BATCH ? 2u * collapsing : (uint64_t)collapsing,
                 "%llu shared 2 MiB pages collapsed for two objects in one",
                 (unsigned long long)(adsm__rt.shared_regions_collapsed - collapsed));
    size_t alias_kib = collapsing ? (t->protocol == ADSM_PROTOCOL_BATCH ? 4096u : 2048u) : 0u; /* (in all) */
    cr_assert_eq(pmd_mapped_kib(alias, 2 * MIB), alias_kib, "the alias maps %zu KiB by 2 MiB pages, expected %zu",
                 pmd_mapped_kib(alias, 2 * MIB), alias_kib);
    cr_assert(host_locked(alias, MIB) && host_locked(alias + MIB, MIB), "the objects are not page-locked");
    cr_assert_eq(pmd_mapped_kib(region, 2 * MIB), 0, "the program's view maps %zu KiB of shared pages 2 MiB at a time",
                 pmd_mapped_kib(region, 2 * MIB));
    adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    cr_assert_eq(ADSM_CALL(vadd, grid, c, a, a, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(mapped_pages((uintptr_t)b, MIB), MIB / page, "a kernel reading a left %zu of b's %zu pages mapped",
                 mapped_pages((uintptr_t)b, MIB), MIB / page);
    for (size_t i = 0; i < n; i += 97) {
        cr_assert_eq(c[i], 2.0f * (float)i, "c[%zu] = %f", i, (double)c[i]);
        cr_assert_eq(b[i], 2.0f * (float)i, "b[%zu] = %f", i, (double)b[i]);
    }
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(adsm_free(c), ADSM_OK);
    adsm_shutdown();
}

/* A freed object in a 2 MiB page it shared gives its bytes back (the next object there reads
 * zeros) and leaves its neighbour's alone; the next object there may collapse the page again (the
 * kernel may have split it at the free); once no object is left in it, the whole page goes back. */
Test(cuda_double, a_freed_object_in_a_shared_2_mib_page_leaves_zeros_and_its_neighbour) {
    int collapsing = adsm__shmem_gets_huge_pages() != 1 && kernel_collapses_shmem();
    init_ok(ADSM_PROTOCOL_LAZY, 0, 0);
    unsigned char *a = adsm_alloc(MIB), *b = adsm_alloc(MIB);
    cr_assert(a && b, "%s", adsm_last_error());
    cr_assert_eq((uintptr_t)b, (uintptr_t)a + MIB);
    memset(a, 0xa5, MIB);
    memset(b, 0x5a, MIB);
    uint64_t collapsed = adsm__rt.shared_regions_collapsed;
    cr_assert_eq(adsm_free(a), ADSM_OK);
    unsigned char *again = adsm_alloc(MIB);
    cr_assert_eq(again, a, "the freed range was not reused: %p, %p", (void *)again, (void *)a);
    again[MIB - 1] = 1; /* its first use */
    cr_assert_eq(adsm__rt.shared_regions_collapsed - collapsed, (uint64_t)collapsing,
                 "the page was not claimed again after the free");
    for (size_t i = 0; i < MIB - 1; i++)
        if (again[i] != 0) cr_assert_fail("byte %zu of the new object is %#x: the freed object's", i, again[i]);
    for (size_t i = 0; i < MIB; i++)
        if (b[i] != 0x5a) cr_assert_fail("byte %zu of the neighbour is %#x after the free", i, b[i]);
    cr_assert_eq(adsm_free(again), ADSM_OK);
    cr_assert_eq(adsm_free(b), ADSM_OK);
    cr_assert_eq(resident_pages(adsm__host_dma(&adsm__rt, (uintptr_t)a), 2 * MIB), 0);
    adsm_shutdown();
}

/* When the last object in a 2 MiB page it shared goes, all of the page goes back, the part the
 * collapse made for free space (or for a neighbour freed earlier) too: punching only the object's
 * part would leave the rest resident, as 4 KiB pages once the kernel splits the page, for the next
 * collapse there to copy (and a fresh 2 MiB page to find each time). */
Test(cuda_double, the_last_object_in_a_shared_2_mib_page_gives_all_of_it_back) {
    int collapsing = adsm__shmem_gets_huge_pages() != 1 && kernel_collapses_shmem();
    init_ok(ADSM_PROTOCOL_LAZY, 0, 0);
    unsigned char *a = adsm_alloc(MIB);
    cr_assert_not_null(a, "%s", adsm_last_error());
    uintptr_t alias = adsm__host_dma(&adsm__rt, (uintptr_t)a), page = (uintptr_t)sysconf(_SC_PAGESIZE);
    cr_assert_eq(alias & (2 * MIB - 1), 0, "the object does not start a 2 MiB page");
    a[0] = 1; /* its first use: its page collapsed whole, the free half too */
    cr_assert_eq(resident_pages(alias, 2 * MIB), (collapsing ? 2 * MIB : MIB) / page, "%zu pages resident",
                 resident_pages(alias, 2 * MIB));
    cr_assert_eq(adsm_free(a), ADSM_OK);
    cr_assert_eq(resident_pages(alias, 2 * MIB), 0, "%zu pages of a 2 MiB page no object uses left resident",
                 resident_pages(alias, 2 * MIB));
    adsm_shutdown();
}

/* A large new object's host pages, and a large adsm_host_alloc buffer (the explicit program's
 * memory, the same care), are allocated on ADSM_PREPARE_THREADS threads before the driver
 * page-locks them (prepare.h): the alias collapsed into 2 MiB pages in runs, one per thread, or
 * the object's own pages (translated placement) and the buffer populated. With one thread no
 * helper runs. Either way the memory starts zeroed, the alias is 2 MiB pages where the kernel
 * grants them, and kernels get the same results. */
typedef struct prepare_case {
    char threads[3];   /* ADSM_PREPARE_THREADS */
    char same_addr[2]; /* ADSM_CUDA_SAME_ADDRESS: 1, the alias; 0, translated (the objects' own pages) */
} prepare_case;

ParameterizedTestParameters(cuda_double, large_ranges_are_prepared_on_several_threads) {
    static prepare_case cases[] = {{"4", "1"}, {"4", "0"}, {"1", "1"}, {"1", "0"}};
    return cr_make_param_array(prepare_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(prepare_case *t, cuda_double, large_ranges_are_prepared_on_several_threads) {
    const size_t size = 32 * MIB;
    int threads = atoi(t->threads), aliased = *t->same_addr == '1';
    clear_env();
    cuda_double_use();
    setenv("ADSM_PREPARE_THREADS", t->threads, 1);
    setenv("ADSM_CUDA_SAME_ADDRESS", t->same_addr, 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    attach();
    cr_assert_eq(adsm__rt.cfg.prepare_threads, (unsigned)threads);
    /* 32 MiB over 4 threads: the caller and 3 helpers, 8 MiB each; where the alias is not collapsed
     * (the kernel refuses), nothing is prepared for it */
    int collapsing = adsm__rt.alias_pages == ADSM__ALIAS_HUGE_BY_COLLAPSE;
    uint64_t helpers = threads > 1 && (collapsing || !aliased) ? 3 : 0, before = adsm__rt.prepare_helpers;
    unsigned char *a = adsm_alloc(size);
    cr_assert_not_null(a, "%s", adsm_last_error());
    uintptr_t dma = adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert_eq(dma != (uintptr_t)a, aliased, "host alias %p for object %p", (void *)dma, (void *)a);
    a[size - 1] = 0; /* its first use: through the alias, its host pages are made now */
    cr_assert_eq(adsm__rt.prepare_helpers - before, helpers, "%llu threads helped make the object, expected %llu",
                 (unsigned long long)(adsm__rt.prepare_helpers - before), (unsigned long long)helpers);
    if (collapsing && aliased)
        cr_assert_eq(pmd_mapped_kib(dma, size), size >> 10, "the alias maps %zu KiB by 2 MiB pages, expected %zu",
                     pmd_mapped_kib(dma, size), size >> 10);
    for (size_t i = 0; i < size; i += 4096)
        if (a[i] || a[i + 4095]) cr_assert_fail("a new object's byte %zu is not zero", a[i] ? i : i + 4095);
    before = adsm__rt.prepare_helpers;
    unsigned char *h = adsm_host_alloc(size);
    cr_assert_not_null(h, "%s", adsm_last_error());
    cr_assert_eq(adsm__rt.prepare_helpers - before, threads > 1 ? 3u : 0u, "%llu threads helped make the buffer",
                 (unsigned long long)(adsm__rt.prepare_helpers - before));
    cr_assert_eq(resident_pages((uintptr_t)h, size), size / 4096, "the buffer's pages are not all there");
    for (size_t i = 0; i < size; i += 4096)
        if (h[i] || h[i + 4095]) cr_assert_fail("a new buffer's byte %zu is not zero", h[i] ? i : i + 4095);
    cr_assert_eq(adsm_host_free(h), ADSM_OK);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    run_vadd(size / sizeof(float)); /* the same results either way */
    adsm_shutdown();
}

/* An object's host pages (through the alias) are made when the CPU first needs them under lazy
 * and rolling (ADSM_HOST_ON_FIRST_USE, the default), at adsm_alloc with the setting off and under
 * batch. Either way, once made, the alias's pages are all there (page-locking allocated them) and
 * adsm has mapped the program's view onto them in one call, so the program's first touch of each
 * 4 KiB page of shared memory is not a page fault of its own (about 0.5 ms per MiB on a GPU
 * server). */
typedef struct first_use_case {
    char setting[2]; /* ADSM_HOST_ON_FIRST_USE */
    adsm_protocol_kind protocol;
} first_use_case;

ParameterizedTestParameters(cuda_double, an_objects_host_pages_are_made_on_first_use_or_at_alloc) {
    static first_use_case cases[] = {{"1", ADSM_PROTOCOL_LAZY},
                                     {"1", ADSM_PROTOCOL_ROLLING},
                                     {"0", ADSM_PROTOCOL_LAZY},
                                     {"0", ADSM_PROTOCOL_ROLLING},
                                     {"1", ADSM_PROTOCOL_BATCH}};
    return cr_make_param_array(first_use_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(first_use_case *t, cuda_double, an_objects_host_pages_are_made_on_first_use_or_at_alloc) {
    init_setting("ADSM_HOST_ON_FIRST_USE", t->setting, t->protocol, 0);
    const size_t size = 8 << 20, page = (size_t)sysconf(_SC_PAGESIZE), made = size / page;
    int at_alloc = *t->setting == '0' || t->protocol == ADSM_PROTOCOL_BATCH;
    float *a = adsm_alloc(size);
    cr_assert_not_null(a, "%s", adsm_last_error());
    uintptr_t alias = adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert_neq(alias, (uintptr_t)a, "no host alias");
    cr_assert_eq(resident_pages(alias, size), at_alloc ? made : 0, "a new object has %zu of %zu alias pages",
                 resident_pages(alias, size), made);
    cr_assert_eq(mapped_pages((uintptr_t)a, size), at_alloc ? made : 0, "a new object's view maps %zu of %zu pages",
                 mapped_pages((uintptr_t)a, size), made);
    cr_assert_eq(host_locked(alias, size), at_alloc, "page-locked at allocation: %d", host_locked(alias, size));
    a[5] = 1.0f; /* the first use */
    cr_assert_eq(resident_pages(alias, size), made, "page-locking did not allocate the alias's pages");
    cr_assert_eq(mapped_pages((uintptr_t)a, size), made, "the program's view of a used object is not mapped");
    cr_assert(host_locked(alias, size), "a used object is not page-locked");
    cr_assert_eq(a[5], 1.0f);
    cr_assert_eq(a[6], 0.0f);
    adsm_free(a);
    adsm_shutdown();
}

/* An object only kernels use (set by adsm_memset on the device, read and written by kernels) costs
 * no host memory and no page-locking under lazy and rolling, as a device buffer of the
 * hand-written program costs none; the object the CPU then reads gets its pages at that read (the
 * fetch is direct DMA into them), the others still have none. Their device data is right. */
ParameterizedTestParameters(cuda_double, an_object_only_kernels_use_has_no_host_pages) {
    static adsm_protocol_kind cases[] = {ADSM_PROTOCOL_LAZY, ADSM_PROTOCOL_ROLLING};
    return cr_make_param_array(adsm_protocol_kind, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(adsm_protocol_kind *protocol, cuda_double, an_object_only_kernels_use_has_no_host_pages) {
    init_ok(*protocol, 0, 0);
    attach();
    const size_t n = (4 << 20) / sizeof(float), size = n * sizeof(float);
    float *a = adsm_alloc(size), *b = adsm_alloc(size), *c = adsm_alloc(size);
    cr_assert(a && b && c, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(a, 0x3f, size), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(b, 0x40, size), ADSM_OK, "%s", adsm_last_error());
    adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    cr_assert_eq(ADSM_CALL(vadd, grid, c, a, b, n), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(vadd, grid, a, c, b, n), ADSM_OK, "%s", adsm_last_error()); /* a = a + 2b */
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    float *objects[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        uintptr_t alias = adsm__host_dma(&adsm__rt, (uintptr_t)objects[i]);
        cr_assert_eq(resident_pages(alias, size), 0, "object %d, which only kernels used, has %zu host pages", i,
                     resident_pages(alias, size));
        cr_assert_not(host_locked(alias, size), "object %d, which only kernels used, is page-locked", i);
    }
    float fa, fb;
    memset(&fa, 0x3f, sizeof fa);
    memset(&fb, 0x40, sizeof fb);
    uint64_t staged = adsm__rt.stats.staged_bytes;
    for (size_t i = 0; i < n; i += 997) cr_assert_eq(a[i], fa + fb + fb, "a[%zu] = %f", i, (double)a[i]);
    cr_assert_eq(a[n - 1], fa + fb + fb);
    uintptr_t alias_a = adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert(host_locked(alias_a, size), "the object the CPU read is not page-locked");
    cr_assert_eq(resident_pages(alias_a, size), size / (size_t)sysconf(_SC_PAGESIZE));
    cr_assert_eq(adsm__rt.stats.staged_bytes, staged, "the fetch was staged: its pages were not made first");
    for (int i = 1; i < 3; i++)
        cr_assert_eq(resident_pages(adsm__host_dma(&adsm__rt, (uintptr_t)objects[i]), size), 0,
                     "object %d got host pages when another object was read", i);
    for (int i = 0; i < 3; i++) cr_assert_eq(adsm_free(objects[i]), ADSM_OK);
    adsm_shutdown();
}

/* An object first used by a read or a write of a kernel's output (its blocks Invalid when its
 * pages were made, so the view could not be mapped onto them then) has the view mapped onto each
 * fetched block as its data comes, as allocation once mapped every object's: otherwise the CPU's
 * first touch of each page would be a fault of its own where the view maps the alias 4 KiB at a
 * time (rolling, blocks under 2 MiB): for reads, one per 64 KiB (the kernel's fault-around), for
 * writes one per page. */
ParameterizedTestParameters(cuda_double, a_first_use_of_a_kernel_output_maps_the_fetched_block) {
    static int writes[] = {0, 1};
    return cr_make_param_array(int, writes, 2);
}

ParameterizedTest(int *write, cuda_double, a_first_use_of_a_kernel_output_maps_the_fetched_block) {
    const size_t size = 4 * MIB, page = (size_t)sysconf(_SC_PAGESIZE), block = 256 << 10;
    init_ok(ADSM_PROTOCOL_ROLLING, block, 0);
    cr_assert(adsm__rt.view_small_pages, "the view maps the alias 2 MiB at a time with 256 KiB blocks");
    unsigned char *c = adsm_alloc(size);
    cr_assert_not_null(c, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(c, 9, size), ADSM_OK, "%s", adsm_last_error()); /* on the device: Invalid here */
    cr_assert_eq(mapped_pages((uintptr_t)c, size), 0);
    if (*write) ((volatile unsigned char *)c)[0] = 5; /* the first use, a fetch */
    else cr_assert_eq(((volatile unsigned char *)c)[0], 9);
    cr_assert(host_locked(adsm__host_dma(&adsm__rt, (uintptr_t)c), size), "not page-locked at its first use");
    cr_assert_eq(mapped_pages((uintptr_t)c, block), block / page, "the view maps %zu of the fetched block's %zu pages",
                 mapped_pages((uintptr_t)c, block), block / page);
    cr_assert_eq(c[0], *write ? 5 : 9);
    for (size_t i = 1; i < size; i += 4096) cr_assert_eq(c[i], 9, "c[%zu] = %u", i, c[i]);
    adsm_free(c);
    adsm_shutdown();
}

/* The view is mapped onto such a block once: a kernel's later output there, fetched again, finds
 * the mapping in place (populating mapped pages walks each one again, 0.9 ms per 28 MiB of 4 KiB
 * pages here); a block not yet opened still gets its mapping when its data comes. */
Test(cuda_double, a_block_the_view_was_mapped_onto_is_not_mapped_again) {
    const size_t size = 4 * MIB, page = (size_t)sysconf(_SC_PAGESIZE), block = 256 << 10;
    init_ok(ADSM_PROTOCOL_ROLLING, block, 0);
    unsigned char *c = adsm_alloc(size);
    cr_assert_not_null(c, "%s", adsm_last_error());
    cr_assert_eq(adsm_memset(c, 9, size), ADSM_OK, "%s", adsm_last_error()); /* Invalid here */
    uint64_t populates = adsm__rt.view_populates;
    cr_assert_eq(((volatile unsigned char *)c)[0], 9); /* the first use: pages made, block 0 fetched */
    cr_assert_eq(adsm__rt.view_populates - populates, 1, "block 0 opened with %llu calls",
                 (unsigned long long)(adsm__rt.view_populates - populates));
    for (int round = 0; round < 3; round++) {
        cr_assert_eq(adsm_memset(c, 10 + round, block), ADSM_OK, "%s", adsm_last_error()); /* Invalid again */
        cr_assert_eq(((volatile unsigned char *)c)[1], 10 + round);
        cr_assert_eq(adsm__rt.view_populates - populates, 1, "round %d mapped block 0 again", round);
        cr_assert_eq(mapped_pages((uintptr_t)c, block), block / page, "round %d: block 0's mapping is gone", round);
    }
    cr_assert_eq(((volatile unsigned char *)c)[size - 1], 9); /* a block never opened (past block 0's fetch) */
    cr_assert_eq(adsm__rt.view_populates - populates, 2, "a block opened for the first time: %llu calls in all",
                 (unsigned long long)(adsm__rt.view_populates - populates));
    cr_assert_eq(mapped_pages((uintptr_t)c + size - block, block), block / page);
    for (size_t i = block; i < size; i += 4096) cr_assert_eq(c[i], 9, "c[%zu] = %u", i, c[i]);
    adsm_free(c);
    adsm_shutdown();
}

/* With blocks under 2 MiB (the view on 4 KiB pages) the view is mapped where the CPU goes, not
 * ahead: every mapped entry is one that each later protection change of its block walks (16 us per
 * MiB on a GPU server), and mapping ahead cost 0.16 ms per MiB at the object's making. A stencil's
 * volume, made on first use or at adsm_alloc, of which the CPU writes one point and that it dumps
 * to a file: the view maps the point's block only; a dump, and a read from a file, go through the
 * alias and map nothing; the file and the object hold the right bytes. */
ParameterizedTestParameters(cuda_double, with_small_blocks_the_view_is_mapped_where_the_cpu_goes) {
    static char first_use[][2] = {"1", "0"};
    return cr_make_param_array(char[2], first_use, 2);
}

ParameterizedTest(char (*first_use)[2], cuda_double, with_small_blocks_the_view_is_mapped_where_the_cpu_goes) {
    const size_t size = 8 * MIB, page = (size_t)sysconf(_SC_PAGESIZE), block = 256 << 10;
    init_setting("ADSM_HOST_ON_FIRST_USE", *first_use, ADSM_PROTOCOL_ROLLING, block);
    cr_assert(adsm__rt.view_small_pages);
    unsigned char *v = adsm_alloc(size);
    cr_assert_not_null(v, "%s", adsm_last_error());
    v[3 * block + 5] = 7; /* the CPU's one write */
    cr_assert_eq(mapped_pages((uintptr_t)v, size), block / page, "after one write the view maps %zu pages, expected %zu",
                 mapped_pages((uintptr_t)v, size), block / page);
    cr_assert_eq(adsm_memset(v + 4 * block, 3, size - 4 * block), ADSM_OK, "%s", adsm_last_error()); /* a kernel's */
    char path[] = "/tmp/adsm_view_dump_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    cr_assert_eq(adsm_write(fd, v, size), (ssize_t)size, "dump: %s", strerror(errno)); /* fetches, through the alias */
    cr_assert_eq(mapped_pages((uintptr_t)v, size), block / page, "the dump mapped the view: %zu pages",
                 mapped_pages((uintptr_t)v, size));
    static unsigned char back[8 * MIB];
    cr_assert_eq(pread(fd, back, size, 0), (ssize_t)size);
    for (size_t i = 0; i < size; i += 4099)
        cr_assert_eq(back[i], i >= 4 * block ? 3 : 0, "file byte %zu: %u", i, back[i]);
    cr_assert_eq(back[3 * block + 5], 7);
    cr_assert_eq(adsm_memset(v, 1, size), ADSM_OK, "%s", adsm_last_error()); /* Invalid again */
    cr_assert_eq(adsm_pread(fd, v + block, 2 * block, 3 * block), (ssize_t)(2 * block), "%s", strerror(errno));
    cr_assert_eq(mapped_pages((uintptr_t)v, size), block / page, "a read from the file mapped the view: %zu pages",
                 mapped_pages((uintptr_t)v, size));
    close(fd);
    cr_assert_eq(v[block + 5], 7, "the bytes read from the file");
    cr_assert_eq(v[2 * block], 3);
    cr_assert_eq(v[0], 1);
    cr_assert_eq(v[size - 1], 1);
    adsm_free(v);
    adsm_shutdown();
}

static size_t sparse_bytes(const void *p) {
    adsm__lock(&adsm__rt.lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&adsm__rt.objects, (uintptr_t)p));
    size_t n = o ? o->sparse_bytes : 0;
    adsm__unlock(&adsm__rt.lock);
    return n;
}

/* A CPU store into a kernel's output does not make a large object's host pages (protocol.h,
 * adsm__sparse_use): a source point written into each of two 32 MiB volumes between kernels copies
 * those blocks, staged, and neither volume is collapsed, zeroed or page-locked whole; the results
 * are right. A read makes the object it reads at once, and so do stores into more than 4 MiB of
 * distinct blocks, keeping what is there. */
Test(cuda_double, a_store_into_a_large_kernel_output_does_not_make_its_pages) {
    const size_t n = 8 << 20, size = n * sizeof(float), block = 256 << 10, bf = block / sizeof(float), at = 5 * bf;
    const adsm_grid grid = adsm_grid_1d((uint32_t)((n + 255) / 256), 256);
    init_ok(ADSM_PROTOCOL_ROLLING, block, 0);
    attach();
    float *a = adsm_alloc(size), *b = adsm_alloc(size), *c = adsm_alloc(size);
    cr_assert(a && b && c, "%s", adsm_last_error());
    uintptr_t alias_a = adsm__host_dma(&adsm__rt, (uintptr_t)a), alias_c = adsm__host_dma(&adsm__rt, (uintptr_t)c);
    uint64_t made = adsm__rt.first_uses, staged = adsm__rt.stats.staged_bytes;
    cr_assert_eq(ADSM_CALL(vadd, grid, c, a, b, n), ADSM_OK, "%s", adsm_last_error()); /* c: zeros, Invalid here */
    c[at] = 5.0f; /* a source point, into the kernel's output */
    cr_assert_eq(ADSM_CALL(vadd, grid, a, c, b, n), ADSM_OK, "%s", adsm_last_error()); /* a = c */
    a[at + 1] = 1.0f;
    cr_assert_eq(ADSM_CALL(vadd, grid, b, a, c, n), ADSM_OK, "%s", adsm_last_error()); /* b = a + c */
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm__rt.first_uses, made, "%llu objects' pages were made for two stores",
                 (unsigned long long)(adsm__rt.first_uses - made));
    cr_assert(!host_locked(alias_a, size) && !host_locked(alias_c, size), "page-locked for a store");
    size_t opened = sparse_bytes(a) + sparse_bytes(c);
    cr_assert(opened >= 2 * block && opened <= 2 * (4 * MIB), "%zu bytes opened", opened);
    cr_assert_leq(resident_pages(alias_a, size) + resident_pages(alias_c, size), opened / 4096,
                  "%zu alias pages for %zu bytes opened", resident_pages(alias_a, size) + resident_pages(alias_c, size),
                  opened);
    cr_assert_geq(adsm__rt.stats.staged_bytes - staged, 2 * block, "the blocks went unstaged");
    cr_assert_eq(b[at], 10.0f, "b[at] = %f", (double)b[at]); /* a read: b made now */
    cr_assert_eq(b[at + 1], 1.0f);
    cr_assert_eq(b[0], 0.0f);
    cr_assert_eq(adsm__rt.first_uses, made + 1, "a read made %llu objects' pages", (unsigned long long)(adsm__rt.first_uses - made));
    for (size_t k = 0; k < 24; k++) c[k * bf + 3] = 7.0f; /* stores into 6 MiB of c's blocks */
    cr_assert(host_locked(alias_c, size), "stores into 6 MiB of distinct blocks did not make c's pages");
    cr_assert_eq(adsm__rt.first_uses, made + 2);
    for (size_t k = 0; k < 24; k++) cr_assert_eq(c[k * bf + 3], 7.0f, "block %zu", k);
    cr_assert_eq(c[at], 5.0f, "the sparse store's value, kept when c's pages were made");
    cr_assert(!host_locked(alias_a, size));
    adsm_free(a);
    adsm_free(b);
    adsm_free(c);
    adsm_shutdown();
}

/* Bytes that reach an object's alias before its pages are made (a translation's pass back writes
 * there, a CPU read of a fresh object allocates 4 KiB pages of it) survive the making: the
 * collapse's one touch per 2 MiB keeps what lies there, as it must for an object made on first
 * use (it used to write a zero, right only for a new object). */
Test(cuda_double, making_an_objects_pages_on_first_use_keeps_bytes_already_there) {
    init_ok(ADSM_PROTOCOL_LAZY, 0, 0);
    const size_t size = 8 * MIB;
    unsigned char *a = adsm_alloc(size);
    cr_assert_not_null(a, "%s", adsm_last_error());
    unsigned char *alias = (unsigned char *)adsm__host_dma(&adsm__rt, (uintptr_t)a);
    cr_assert_neq((uintptr_t)alias, (uintptr_t)a, "no host alias");
    cr_assert_eq(resident_pages((uintptr_t)alias, size), 0, "the object's pages were made at allocation");
    for (size_t off = 0; off < size; off += 2 * MIB) alias[off] = (unsigned char)(0xa0 + off / (2 * MIB));
    a[size - 1] = 7; /* the first use: the pages are made now */
    cr_assert(host_locked((uintptr_t)alias, size), "the used object is not page-locked");
    for (size_t off = 0; off < size; off += 2 * MIB)
        cr_assert_eq(a[off], 0xa0 + off / (2 * MIB), "byte %zu: %u after its pages were made", off, a[off]);
    cr_assert_eq(a[size - 1], 7);
    adsm_free(a);
    adsm_shutdown();
}

/* Several threads' first uses at once, each of its own object and all of one shared object: each
 * object's pages are made once (an access to an object being made waits for it), and every
 * thread's writes land. */
#define FIRST_USE_THREADS 4
typedef struct first_use_arg {
    unsigned char *own, *shared;
    size_t size;
    int index;
} first_use_arg;

static void *first_use_thread(void *p) {
    first_use_arg *t = p;
    for (size_t i = 0; i < t->size; i += 4096) t->own[i] = (unsigned char)(t->index + 1);
    t->shared[(size_t)t->index * 4096] = (unsigned char)(t->index + 1);
    return NULL;
}

Test(cuda_double, first_uses_on_several_threads_make_each_object_once) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    const size_t size = 4 * MIB;
    unsigned char *shared = adsm_alloc(size);
    cr_assert_not_null(shared, "%s", adsm_last_error());
    first_use_arg args[FIRST_USE_THREADS];
    pthread_t tids[FIRST_USE_THREADS];
    uint64_t made = adsm__rt.first_uses;
    for (int i = 0; i < FIRST_USE_THREADS; i++) {
        args[i] = (first_use_arg){adsm_alloc(size), shared, size, i};
        cr_assert_not_null(args[i].own, "%s", adsm_last_error());
    }
    for (int i = 0; i < FIRST_USE_THREADS; i++) cr_assert_eq(pthread_create(&tids[i], NULL, first_use_thread, &args[i]), 0);
    for (int i = 0; i < FIRST_USE_THREADS; i++) pthread_join(tids[i], NULL);
    cr_assert_eq(adsm__rt.first_uses - made, FIRST_USE_THREADS + 1, "%llu objects made on first use, expected %d",
                 (unsigned long long)(adsm__rt.first_uses - made), FIRST_USE_THREADS + 1);
    for (int i = 0; i < FIRST_USE_THREADS; i++) {
        cr_assert(host_locked(adsm__host_dma(&adsm__rt, (uintptr_t)args[i].own), size), "object %d is not page-locked", i);
        for (size_t k = 0; k < size; k += 4096)
            if (args[i].own[k] != i + 1) cr_assert_fail("object %d, byte %zu: %u", i, k, args[i].own[k]);
        cr_assert_eq(shared[(size_t)i * 4096], i + 1, "the shared object lost thread %d's write", i);
        cr_assert_eq(adsm_free(args[i].own), ADSM_OK);
    }
    cr_assert(host_locked(adsm__host_dma(&adsm__rt, (uintptr_t)shared), size), "the shared object is not page-locked");
    cr_assert_eq(adsm_free(shared), ADSM_OK);
    adsm_shutdown();
}

/* A first use's pages are made on a preparer thread while the faulting thread waits in the fault
 * handler, which may have interrupted the program inside its own fprintf(stderr, ...), holding
 * stdio's lock on stderr. What the preparer says then (here: the driver would not page-lock the
 * object, at ADSM_LOG=info) must not need that lock, or neither thread would go on. The test
 * holds the lock across the first use; the timeout stands for the hang. */
Test(cuda_double, a_first_use_while_the_program_holds_stderr_completes_and_is_logged, .timeout = 60) {
    setenv("CUDADOUBLE_NO_REGISTER", "1", 1); /* read by the double at cuInit */
    init_setting("ADSM_LOG", "info", ADSM_PROTOCOL_LAZY, 0);
    unsigned char *a = adsm_alloc(MIB);
    cr_assert_not_null(a, "%s", adsm_last_error());
    char path[] = "/tmp/adsm_stderr_XXXXXX";
    int log = mkstemp(path), saved = dup(2);
    cr_assert(log >= 0 && saved >= 0);
    unlink(path);
    dup2(log, 2);
    flockfile(stderr);
    a[7] = 3; /* the first use: the preparer's page-locking is refused, and it says so */
    funlockfile(stderr);
    dup2(saved, 2);
    char said[4096] = {0};
    ssize_t got = pread(log, said, sizeof said - 1, 0);
    cr_assert_gt(got, 0, "nothing was logged at the first use");
    cr_assert(strstr(said, "would not page-lock") != NULL, "the first use logged: %s", said);
    cr_assert_eq(a[7], 3);
    cr_assert_eq(adsm_free(a), ADSM_OK);
    adsm_shutdown();
}

/* An eviction's direct upload (DMA from the page-locked pages) runs while the engine goes on to
 * the next command; a CPU write to the evicted block must wait until that DMA has read the pages,
 * so the write fault's drain waits for the upload stream. Every stream operation of the double
 * is delayed, so an upload nobody waited for would still be queued when the write returns. */
Test(cuda_double, a_write_waits_for_the_eviction_reading_its_block) {
    clear_env();
    cuda_double_use();
    setenv("CUDADOUBLE_DELAY_US", "20000", 1);
    const size_t block = 64 << 10;
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = block;
    cfg.rolling_size = 2;
    cfg.block_exact = 1;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    volatile char *x = adsm_alloc(4 * block);
    cr_assert_not_null(x, "%s", adsm_last_error());
    cr_assert_neq(adsm__host_dma(&adsm__rt, (uintptr_t)x), (uintptr_t)x, "no host alias: the upload is staged");
    cudadouble_counters before = cuda_double_counters();
    x[0] = 1, x[block] = 2, x[2 * block] = 3; /* the third Dirty block evicts the first */
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.evictions, 1, "%llu evictions", (unsigned long long)s.evictions);
    x[0] = 4; /* the evicted block written again */
    cudadouble_counters after = cuda_double_counters();
    cr_assert_geq(after.h2d_landed_bytes - before.h2d_landed_bytes, block,
                  "the write went ahead while the eviction's DMA had yet to read the block");
    cr_assert_eq(adsm_free((void *)x), ADSM_OK);
    adsm_shutdown();
}

/* From the first device range on (the double made its own memfd at cuInit), memfd_create is
 * refused on this thread, as a seccomp profile would. */
static void refuse_memfd_once_reserved(int reserved, unsigned long long base, size_t size, void *done) {
    (void)base, (void)size;
    if (!reserved || *(int *)done) return;
    *(int *)done = 1;
    refuse_system_call(SYS_memfd_create, EPERM);
}

/* Where memfd_create is refused, there is no alias: adsm says why at info and stages every copy,
 * with the same results. */
Test(cuda_double, no_alias_without_memfd_stages_every_copy) {
    static int refused;
    cr_assert_eq(cuda_double_open(), 0);
    cuda_double.set_address_hook(refuse_memfd_once_reserved, &refused);
    init_ok(ADSM_PROTOCOL_ROLLING, 64 << 10, 0);
    cr_assert(refused, "the filter was never installed");
    attach();
    cr_assert_eq(adsm__rt.host_alias, 0, "a host alias without memfd_create");
    adsm_reset_stats();
    run_vadd(300000);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.staged_bytes, s.h2d_bytes + s.d2h_bytes, "staged %llu of %llu bytes",
                 (unsigned long long)s.staged_bytes, (unsigned long long)(s.h2d_bytes + s.d2h_bytes));
    adsm_shutdown();
}

/* ADSM_CUDA_DMA_VIEW=0: no alias; adsm does not ask the driver to lock the objects' pages, says so
 * once and stages every copy; the results are the same. */
Test(cuda_double, shared_addresses_without_the_alias_stage_every_copy) {
    init_without_alias(ADSM_PROTOCOL_ROLLING, 64 << 10);
    adsm_reset_stats();
    cudadouble_counters before = cuda_double_counters();
    run_vadd(300000);
    cudadouble_counters after = cuda_double_counters();
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(after.register_calls - before.register_calls, 0, "adsm asked to lock device address space");
    cr_assert_eq(s.staged_bytes, s.h2d_bytes + s.d2h_bytes);
    cr_assert_eq(after.registered_bytes - before.registered_bytes, 0);
    adsm_shutdown();
}

/* A driver that refuses to lock memory (out of lockable memory) leaves every copy staged, with
 * the same results. */
Test(cuda_double, locking_refused_by_the_driver_stages) {
    setenv("CUDADOUBLE_NO_REGISTER", "1", 1); /* read by the double at cuInit */
    init_translated(64 << 10);
    adsm_reset_stats();
    run_vadd(300000);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_gt(s.staged_bytes, 0);
    cr_assert_eq(s.staged_bytes, s.h2d_bytes + s.d2h_bytes);
    adsm_shutdown();
}

/* Out of lockable memory is one object's refusal, not the driver's for good: an object too large
 * for what is left is staged (same results), and a smaller one allocated after it is locked. */
Test(cuda_double, an_object_too_large_to_lock_leaves_later_ones_locked) {
    setenv("CUDADOUBLE_REGISTER_BUDGET", "1048576", 1); /* read by the double at cuInit */
    init_translated(64 << 10);
    cudadouble_counters before = cuda_double_counters();
    float *big = adsm_alloc(4 << 20);
    cr_assert_not_null(big, "%s", adsm_last_error());
    cudadouble_counters mid = cuda_double_counters();
    cr_assert_eq(mid.registrations - before.registrations, 0, "a 4 MiB object locked within a 1 MiB budget");
    float *small = adsm_alloc(64 << 10);
    cr_assert_not_null(small, "%s", adsm_last_error());
    cudadouble_counters after = cuda_double_counters();
    cr_assert_eq(after.registrations - mid.registrations, 1, "the small object after it was not locked");
    adsm_free(big);
    adsm_free(small);
    run_vadd(50000); /* three objects of 200 KB: locked too */
    cr_assert_eq(cuda_double_counters().registrations - after.registrations, 3);
    adsm_shutdown();
}

/* adsm_host_alloc memory is page-locked on cuda in every address placement (it is never device
 * address space): explicit copies from and to it are DMA, none of their bytes staged. */
Test(cuda_double, host_alloc_memory_is_page_locked) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0); /* shared addresses: the objects themselves stage */
    size_t n = 5 << 20;
    unsigned char *h = adsm_host_alloc(n), *d = adsm_dev_alloc(n);
    cr_assert(h && d, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 13);
    adsm_reset_stats();
    cudadouble_counters before = cuda_double_counters();
    cr_assert_eq(adsm_copy_to_device(d, h, n), ADSM_OK, "%s", adsm_last_error());
    memset(h, 0, n);
    cr_assert_eq(adsm_copy_from_device(h, d, n), ADSM_OK, "%s", adsm_last_error());
    cudadouble_counters after = cuda_double_counters();
    for (size_t i = 0; i < n; i++) cr_assert_eq(h[i], (unsigned char)(i * 13), "byte %zu", i);
    adsm_stats s;
    adsm_get_stats(&s);
    cr_assert_eq(s.staged_bytes, 0, "adsm staged %llu bytes", (unsigned long long)s.staged_bytes);
    cr_assert_eq(after.registered_bytes - before.registered_bytes, 2 * n);
    cr_assert_eq(adsm_host_free(h), ADSM_OK);
    cr_assert_eq(adsm_dev_free(d), ADSM_OK);
    adsm_shutdown();
}

/* ADSM_TRACE on cuda: a kernel span per launch on the device track, the engine's copies on the
 * "cuda engine" track, copies summing to the stats (issue 13). */
Test(cuda_double, trace_records_kernels_and_engine_copies) {
    char path[] = "/tmp/adsm_cuda_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("ADSM_TRACE", path, 1);
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    attach();
    run_vadd(100000);
    run_vadd(1000);
    adsm_stats s;
    adsm_get_stats(&s);
    adsm_shutdown();
    unsetenv("ADSM_TRACE");
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unlink(path);
    text[n] = 0;
    size_t kernels = 0;
    for (const char *p = strstr(text, "\"name\":\"kernel\""); p; p = strstr(p + 1, "\"name\":\"kernel\"")) kernels++;
    cr_assert_eq(kernels, s.launches, "%zu kernel events for %llu launches", kernels, (unsigned long long)s.launches);
    cr_assert(strstr(text, "\"name\":\"cuda engine\""), "the engine's track has no name");
    cr_assert(strstr(text, "\"name\":\"copy to device\""));
    /* making each object: its alias's huge pages, page-locking, the view mapped ahead (at the first
     * use of each, since run_vadd's CPU writes or reads them all), device memory */
    size_t objects = 0, parts[4] = {0};
    static const char *const part_names[4] = {"host pages: made", "host pages: page-lock",
                                              "host pages: view mapped", "device memory"};
    for (const char *p = strstr(text, "\"name\":\"alloc\""); p; p = strstr(p + 1, "\"name\":\"alloc\"")) objects++;
    for (int k = 0; k < 4; k++) {
        char key[64];
        snprintf(key, sizeof key, "\"name\":\"%s\"", part_names[k]);
        for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) parts[k]++;
    }
    cr_assert_gt(objects, 0);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(parts[k], objects, "%zu '%s' spans for %zu objects", parts[k], part_names[k], objects);
    cr_assert_eq(parts[3], 2 * objects, "%zu 'device memory' spans for %zu objects made and freed", parts[3], objects);
}

/* ---- single-source kernels ------------------------------------------------------------------- */
static void run_axpb(size_t n) {
    float *x = adsm_alloc(n * sizeof *x), *y = adsm_alloc(n * sizeof *y);
    cr_assert(x && y, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) x[i] = (float)i;
    scale s = {2.0f, 1.0f};
    adsm_result r = ADSM_CALL(ss_axpb, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), y, x, s, (uint32_t)n);
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(y[i], 2.0f * (float)i + 1.0f, "y[%zu] = %f", i, (double)y[i]);
    adsm_free(x);
    adsm_free(y);
}

Test(cuda_single_source, compiled_by_nvrtc_at_the_first_launch_only) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("ss_axpb", cuda_double_run_body, (void *)adsm__kernel_ss_axpb()), 0);
    unsigned long long loads = cuda_double_counters().module_loads;
    run_axpb(5000); /* no module loaded: NVRTC compiles the body, the double checks its PTX entry */
    cr_assert_eq(cuda_double_counters().module_loads, loads + 1);
    run_axpb(300);
    cr_assert_eq(cuda_double_counters().module_loads, loads + 1, "compiled again");
    adsm_shutdown();
}

Test(cuda_single_source, the_source_has_the_shared_declarations_and_the_body) {
    const adsm_kernel_desc *k = adsm__kernel_ss_axpb();
    cr_assert(k->cuda_source && k->shared && *k->shared);
    cr_assert(strstr(k->cuda_source, "extern \"C\" __global__ void ss_axpb(float *y"), "%s", k->cuda_source);
    cr_assert(strstr(k->cuda_source, "apply(s, x[i])"), "%s", k->cuda_source);
    cr_assert(strstr((*k->shared)->text, "typedef struct scale"), "%s", (*k->shared)->text);
    cr_assert_null(adsm__kernel_vadd()->cuda_source);
}

Test(cuda_single_source, a_loaded_cuda_version_wins) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("ss_axpb", cuda_double_run_body, (void *)adsm__kernel_ss_axpb()), 0);
    static const char tuned[] = ADSM_CUDA_SOURCE(struct scale { float mul, add; };
        extern "C" __global__ void ss_axpb(float *y, const float *x, scale s, unsigned n) {
            unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = s.mul * x[i] + s.add;
        });
    cr_assert_eq(adsm_module_load_source(tuned, NULL), ADSM_OK, "%s", adsm_last_error());
    unsigned long long loads = cuda_double_counters().module_loads;
    run_axpb(1000);
    cr_assert_eq(cuda_double_counters().module_loads, loads, "the single-source body was compiled anyway");
    adsm_shutdown();
}

Test(cuda_single_source, nvrtc_rejection_fails_the_launch_naming_the_kernel) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    int *y = adsm_alloc(256 * sizeof *y);
    cr_assert_eq(ADSM_CALL(ss_host_call, adsm_grid_1d(1, 256), y), ADSM_ERROR_INVALID_MODULE);
    expect_message("kernel 'ss_host_call'");
    expect_message("puts");
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    /* a second launch gets the same error without compiling the same text again */
    uint64_t compiles = ((adsm__cuda *)adsm__rt.be_ctx)->nvrtc_compiles;
    cr_assert_eq(ADSM_CALL(ss_host_call, adsm_grid_1d(1, 256), y), ADSM_ERROR_INVALID_MODULE);
    expect_message("puts");
    cr_assert_eq(((adsm__cuda *)adsm__rt.be_ctx)->nvrtc_compiles, compiles, "NVRTC ran again");
    adsm_free(y);
    adsm_shutdown();
}

Test(cuda_single_source, runs_from_the_c_body_on_emu) {
    clear_env();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    run_axpb(4096);
    adsm_shutdown();
}

/* A compiler log goes into the error message error lines first: warnings about the prelude must
 * not push the line that matters out of a short message. */
Test(cuda_single_source, compiler_errors_come_first_in_the_message) {
    char out[64];
    adsm__errors_first("a.cu(1): warning: unused\na.cu(2): warning: unused\na.cu(9): error: bad thing\n", out,
                       sizeof out);
    cr_assert(strncmp(out, "a.cu(9): error: bad thing\n", 26) == 0, "[%s]", out);
    cr_assert(strstr(out, "warning"), "the warnings follow while there is room: [%s]", out);
    adsm__errors_first("x", out, 1);
    cr_assert_eq(out[0], 0);
}

/* ADSM_PREPARE compiles ahead of the first launch; a later adsm_init loads the PTX compiled under
 * the earlier one instead of running NVRTC again. */
Test(cuda_single_source, prepared_ahead_and_compiled_once_per_process) {
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("ss_axpb", cuda_double_run_body, (void *)adsm__kernel_ss_axpb()), 0);
    cr_assert_eq(ADSM_PREPARE(ss_axpb), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(((adsm__cuda *)adsm__rt.be_ctx)->nvrtc_compiles, 1);
    unsigned long long loads = cuda_double_counters().module_loads;
    run_axpb(1000);
    cr_assert_eq(cuda_double_counters().module_loads, loads, "the first launch compiled or loaded again");
    adsm_shutdown();
    init_ok(ADSM_PROTOCOL_ROLLING, 0, 0);
    run_axpb(1000);
    cr_assert_eq(((adsm__cuda *)adsm__rt.be_ctx)->nvrtc_compiles, 0, "NVRTC ran again after a new adsm_init");
    adsm_shutdown();
}

/* Two GPUs of the double: NVRTC compiles a single-source kernel, and a module's CUDA C, once per
 * architecture. GPUs of one generation share the PTX; a compute 8.0 GPU next to a 9.0 one gets
 * PTX of its own (the 9.0 PTX would not load there: the double refuses it as the JIT does) and
 * runs the kernel right. */
typedef struct two_gpus {
    char compute[16]; /* CUDADOUBLE_COMPUTE */
    int compiles_on_second;
} two_gpus;

ParameterizedTestParameters(cuda_single_source, several_gpus_compile_once_per_architecture) {
    static two_gpus cases[] = {{"90,90", 0}, {"90,80", 1}};
    return cr_make_param_array(two_gpus, cases, 2);
}

ParameterizedTest(two_gpus *gpus, cuda_single_source, several_gpus_compile_once_per_architecture) {
    clear_env();
    cuda_double_use();
    setenv("CUDADOUBLE_DEVICES", "2", 1);
    setenv("CUDADOUBLE_COMPUTE", gpus->compute, 1);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    cfg.devices = "all";
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_device_count(), 2);
    cr_assert_eq(cuda_double_open(), 0);
    cr_assert_eq(cuda_double.register_kernel("ss_axpb", cuda_double_run_body, (void *)adsm__kernel_ss_axpb()), 0);
    cr_assert_eq(adsm_module_load_source(vadd_cuda, NULL), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_PREPARE(ss_axpb), ADSM_OK, "%s", adsm_last_error());
    adsm__cuda *first = (adsm__cuda *)adsm__rt.dev_ctx[0], *second = (adsm__cuda *)adsm__rt.dev_ctx[1];
    cr_assert_eq(first->nvrtc_compiles, 2);
    cr_assert_eq(second->nvrtc_compiles, 2 * (uint64_t)gpus->compiles_on_second, "GPU 1 (%d.%d) compiled %llu times",
                 second->cc_major, second->cc_minor, (unsigned long long)second->nvrtc_compiles);
    size_t n = 3000;
    float *x = adsm_alloc(n * sizeof *x), *y = adsm_alloc(n * sizeof *y);
    cr_assert(x && y, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) x[i] = (float)i;
    scale s = {3.0f, -1.0f};
    adsm_result r = ADSM_CALL_ON(1, ss_axpb, adsm_grid_1d((uint32_t)((n + 127) / 128), 128), y, x, s, (uint32_t)n);
    cr_assert_eq(r, ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (size_t i = 0; i < n; i++) cr_assert_eq(y[i], 3.0f * (float)i - 1.0f, "y[%zu] = %f", i, (double)y[i]);
    adsm_shutdown();
}

/* On emu ADSM_PREPARE has nothing to do and says so with ADSM_OK; a bad descriptor is refused. */
Test(cuda_single_source, prepare_on_emu_and_bad_descriptors) {
    clear_env();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(ADSM_PREPARE(ss_axpb), ADSM_OK);
    cr_assert_eq(adsm_kernel_prepare(NULL), ADSM_ERROR_INVALID_VALUE);
    adsm_shutdown();
}
