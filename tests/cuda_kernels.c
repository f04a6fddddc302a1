/* tests/cuda_kernels.c -- checks a program's CUDA C kernels against its ADSM_KERNEL declarations
 * with the real CUDA tools. Driven by tests/cuda_kernels_test.sh, which documents the convention
 * the programs follow; in short: for every `ADSM_KERNEL(k, ...)` the file defines a string `k_cuda`
 * (ADSM_CUDA_SOURCE, next to the CPU body) holding `extern "C" __global__ void k(...)`.
 *
 * Built once per program source file, with that file #included (its main renamed):
 *   cc -std=c11 -D_GNU_SOURCE -I<repo> -DPROGRAM_FILE='"examples/vecadd.c"' \
 *      -DPROGRAM_KERNELS='X(vecadd)' tests/cuda_kernels.c -pthread -ldl -o check
 * or without PROGRAM_FILE, as a self-test of the checker with its own small kernels: one that
 * matches (the control) and several mismatches that must be rejected.
 *
 *   check LIBNVRTC PTXAS OUTDIR
 * For each kernel k: compiles k_cuda with NVRTC (dlopen'd LIBNVRTC) to PTX for compute_90, writes
 * OUTDIR/k.ptx, checks that the PTX has `.entry k` whose parameters have the count and byte sizes
 * of adsm__kernel_k()->params[], then assembles it with `PTXAS -v -arch=sm_90` into OUTDIR/k.cubin
 * and checks that ptxas compiled entry function 'k'. Exits 0 when every check passes (program
 * mode) or when the control passes and every mismatch is rejected (self-test mode); prints one
 * line per kernel either way.
 *
 *   check LIBNVRTC PTXAS OUTDIR LIBCUDADOUBLE
 * Program mode, also: every single-source kernel (ADSM_KERNEL_DEF) runs through adsm's own cuda
 * backend on the driver test double: ADSM_PREPARE compiles it with NVRTC and loads the PTX into the
 * double (which checks the entry and its parameters), then one launch of one thread, with every
 * pointer argument a zeroed shared object and every value zero, runs its CPU body behind the PTX
 * entry (tests/cuda_double_bridge.h) and must sync cleanly. */
#ifdef PROGRAM_FILE
#define main adsm_program_main
#include PROGRAM_FILE
#undef main
#else
#define ADSM_IMPLEMENTATION
#include "adsm.h"
#endif

#ifdef PROGRAM_FILE
#include "tests/cuda_double_bridge.h"
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PROGRAM_FILE
/* ---- self-test kernels: the declarations the checker compares against --------------------- */
/* control: matches its declaration */
ADSM_KERNEL(good, ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(size_t, n), ADSM_VALUE(unsigned, m));
static const char good_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void good(float *y, const float *x, size_t n, unsigned m) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] * (float)m;
    });
/* int where the declaration has size_t */
ADSM_KERNEL(narrow, ADSM_OUT(float, y), ADSM_VALUE(size_t, n));
static const char narrow_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void narrow(float *y, int n) {
        if (threadIdx.x < n) y[threadIdx.x] = 1.0f;
    });
/* a parameter missing */
ADSM_KERNEL(fewer, ADSM_OUT(float, y), ADSM_VALUE(size_t, n), ADSM_VALUE(float, a));
static const char fewer_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void fewer(float *y, size_t n) {
        if (threadIdx.x < n) y[threadIdx.x] = 1.0f;
    });
/* a struct by value of the wrong size */
typedef struct pair { double a, b; } pair;
ADSM_KERNEL(by_value, ADSM_OUT(double, y), ADSM_VALUE(pair, p));
static const char by_value_cuda[] = ADSM_CUDA_SOURCE(
    struct pair { float a, b; };
    extern "C" __global__ void by_value(double *y, pair p) { *y = p.a + p.b; });
/* no extern "C": the entry name is mangled */
ADSM_KERNEL(mangled, ADSM_OUT(float, y));
static const char mangled_cuda[] = ADSM_CUDA_SOURCE(__global__ void mangled(float *y) { *y = 1.0f; });
/* another name */
ADSM_KERNEL(misnamed, ADSM_OUT(float, y));
static const char misnamed_cuda[] = ADSM_CUDA_SOURCE(extern "C" __global__ void misname(float *y) { *y = 1.0f; });
/* does not compile: uint32_t needs a header NVRTC does not have */
ADSM_KERNEL(broken, ADSM_OUT(float, y), ADSM_VALUE(uint32_t, n));
static const char broken_cuda[] = ADSM_CUDA_SOURCE(
    extern "C" __global__ void broken(float *y, uint32_t n) { y[n] = 1.0f; });
/* single-source: the control, and a body C accepts but NVRTC rejects (a host call) */
ADSM_SHARED(typedef struct span { float lo, hi; } span;
            static inline float clampf_(span s, float v) { return v < s.lo ? s.lo : v > s.hi ? s.hi : v; });
ADSM_KERNEL_DEF(good_single, (ADSM_OUT(float, y), ADSM_IN(float, x), ADSM_VALUE(span, s), ADSM_VALUE(uint32_t, n)),
                g, {
                    ADSM_FOR_EACH_THREAD(g, i) {
                        if (i < n) y[i] = clampf_(s, x[i]);
                    }
                });
/* single-source control: every adsm_atomic_* the device prelude maps onto CUDA's atomics */
ADSM_KERNEL_DEF(good_atomics, (ADSM_INOUT(uint32_t, u), ADSM_INOUT(int32_t, s), ADSM_INOUT(float, f),
                               ADSM_INOUT(uint64_t, w), ADSM_INOUT(unsigned long long, ull)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        adsm_atomic_add_u32(u, 1u);
        adsm_atomic_min_u32(u + 1, (uint32_t)i);
        adsm_atomic_max_u32(u + 2, (uint32_t)i);
        adsm_atomic_add_i32(s, -1);
        adsm_atomic_min_i32(s + 1, (int32_t)i);
        adsm_atomic_max_i32(s + 2, (int32_t)i);
        adsm_atomic_add_f32(f, 0.5f);
        adsm_atomic_add_u64(w, 2u);
        adsm_atomic_add_ull(ull, 3ull);
    }
});
ADSM_KERNEL_DEF(broken_single, (ADSM_OUT(int, y)), g, { ADSM_FOR_EACH_THREAD(g, i) y[i] = puts("host"); });
#define PROGRAM_KERNELS X(good) X(narrow) X(fewer) X(by_value) X(mangled) X(misnamed) X(broken) \
    S(good_single) S(good_atomics) S(broken_single)
#endif

#ifndef PROGRAM_KERNELS
#error "define PROGRAM_KERNELS as X(kernel) X(kernel) ... (tests/cuda_kernels_test.sh does)"
#endif

/* ---- NVRTC, through dlopen (nvrtcResult is an int enum; 0 is NVRTC_SUCCESS) ------------------ */
typedef struct nvrtc_api {
    int (*create)(void **prog, const char *src, const char *name, int nheaders, const char *const *headers,
                  const char *const *include_names);
    int (*compile)(void *prog, int nopts, const char *const *opts);
    int (*ptx_size)(void *prog, size_t *size);
    int (*ptx)(void *prog, char *ptx);
    int (*log_size)(void *prog, size_t *size);
    int (*log)(void *prog, char *log);
    int (*destroy)(void **prog);
    const char *(*error_string)(int result);
} nvrtc_api;

static nvrtc_api nvrtc;

static int load_nvrtc(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "FAIL: cannot dlopen NVRTC '%s': %s\n", path, dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"nvrtcCreateProgram", (void **)&nvrtc.create},   {"nvrtcCompileProgram", (void **)&nvrtc.compile},
        {"nvrtcGetPTXSize", (void **)&nvrtc.ptx_size},    {"nvrtcGetPTX", (void **)&nvrtc.ptx},
        {"nvrtcGetProgramLogSize", (void **)&nvrtc.log_size}, {"nvrtcGetProgramLog", (void **)&nvrtc.log},
        {"nvrtcDestroyProgram", (void **)&nvrtc.destroy}, {"nvrtcGetErrorString", (void **)&nvrtc.error_string},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            fprintf(stderr, "FAIL: %s has no %s\n", path, syms[i].name);
            return -1;
        }
    }
    return 0;
}

/* Why the current kernel failed, kept for the report line. */
static char why[4096];

static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
}

/* Compiles src to PTX for compute_90; the PTX (malloc'd) or NULL with `why` set. */
static char *compile_ptx(const char *name, const char *src) {
    void *prog = NULL;
    char file[256];
    snprintf(file, sizeof file, "%s.cu", name);
    int r = nvrtc.create(&prog, src, file, 0, NULL, NULL);
    if (r) {
        failf("nvrtcCreateProgram: %s", nvrtc.error_string(r));
        return NULL;
    }
    /* as the cuda backend compiles single-source kernels: unannotated helpers are device code */
    const char *opts[] = {"--gpu-architecture=compute_90", "--device-as-default-execution-space"};
    r = nvrtc.compile(prog, 2, opts);
    char *ptx = NULL;
    size_t n = 0;
    if (r) {
        char *log = NULL;
        if (nvrtc.log_size(prog, &n) == 0 && (log = malloc(n + 1)) && nvrtc.log(prog, log) == 0) log[n] = 0;
        failf("NVRTC (compute_90) failed: %s\n%s", nvrtc.error_string(r), log ? log : "(no log)");
        free(log);
    } else if (nvrtc.ptx_size(prog, &n) != 0 || !(ptx = malloc(n + 1)) || nvrtc.ptx(prog, ptx) != 0) {
        failf("cannot get the PTX from NVRTC");
        free(ptx);
        ptx = NULL;
    } else {
        ptx[n] = 0;
    }
    nvrtc.destroy(&prog);
    return ptx;
}

/* ---- PTX parameter lists ------------------------------------------------------------------- */
#define MAX_PARAMS 64

typedef struct ptx_param {
    size_t size;
    char decl[160]; /* the declaration as written, for messages */
} ptx_param;

/* Bytes of one `.param` declaration: the width of its type (.u64, .f32, .b8, ...) times the array
 * length if any ("name[16]"). 0 when it cannot be read. */
static size_t param_size(const char *decl) {
    size_t width = 0, count = 1;
    char buf[160];
    snprintf(buf, sizeof buf, "%s", decl);
    for (char *tok = strtok(buf, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        if (!strcmp(tok, ".align")) {
            strtok(NULL, " \t\r\n"); /* its number */
        } else if (tok[0] == '.' && strchr("usbf", tok[1]) && tok[2] >= '0' && tok[2] <= '9') {
            width = (size_t)strtoul(tok + 2, NULL, 10) / 8;
        } else if (tok[0] != '.') { /* the name, maybe name[N] */
            const char *br = strchr(tok, '[');
            if (br) count = (size_t)strtoul(br + 1, NULL, 10);
        } /* other qualifiers: .param .ptr .global .const ... */
    }
    return width * count;
}

/* Finds `.entry name(` in the PTX and reads its parameters; -1 with `why` set when absent. */
static int entry_params(const char *ptx, const char *name, ptx_param *out, unsigned *count) {
    size_t len = strlen(name);
    for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 1, ".entry")) {
        const char *q = p + strlen(".entry");
        while (*q == ' ' || *q == '\t') q++;
        if (strncmp(q, name, len) != 0) continue;
        q += len;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '(') continue;
        const char *end = strchr(q, ')');
        if (!end) break;
        *count = 0;
        for (const char *s = q + 1; s < end;) {
            const char *comma = memchr(s, ',', (size_t)(end - s));
            const char *stop = comma ? comma : end;
            while (s < stop && strchr(" \t\r\n", *s)) s++;
            if (s < stop) {
                if (*count == MAX_PARAMS) {
                    failf("entry %s has more than %d parameters", name, MAX_PARAMS);
                    return -1;
                }
                ptx_param *pp = &out[(*count)++];
                size_t n = (size_t)(stop - s);
                while (n && strchr(" \t\r\n", s[n - 1])) n--;
                snprintf(pp->decl, sizeof pp->decl, "%.*s", (int)n, s);
                pp->size = param_size(pp->decl);
            }
            s = stop + 1;
        }
        return 0;
    }
    /* name the entries there are, to help */
    char names[1024] = "";
    for (const char *p = strstr(ptx, ".entry"); p; p = strstr(p + 1, ".entry")) {
        const char *q = p + strlen(".entry");
        while (*q == ' ' || *q == '\t') q++;
        size_t n = strcspn(q, "( \t\r\n");
        size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%.*s", used ? ", " : "", (int)n, q);
    }
    failf("the PTX has no .entry %s (entries: %s); is it extern \"C\" and spelt the same?", name,
          names[0] ? names : "none");
    return -1;
}

static int compare_params(const adsm_kernel_desc *k, const ptx_param *pp, unsigned np) {
    if (np != k->nparams) {
        failf("ADSM_KERNEL(%s) has %u parameters, the CUDA C entry has %u", k->name, k->nparams, np);
        return -1;
    }
    for (unsigned i = 0; i < np; i++) {
        if (pp[i].size != k->params[i].size) {
            failf("parameter %u '%s': %zu bytes in ADSM_KERNEL(%s), %zu in the PTX (%s)", i, k->params[i].name,
                  k->params[i].size, k->name, pp[i].size, pp[i].decl);
            return -1;
        }
    }
    return 0;
}

/* ---- files and ptxas ----------------------------------------------------------------------- */
static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) failf("cannot write %s", path);
    return ok ? 0 : -1;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* Runs `ptxas -v -arch=sm_90 ptx -o cubin` (output to log) and checks the entry was compiled. */
static int assemble(const char *ptxas, const char *name, const char *ptx_path, const char *cubin, const char *log) {
    pid_t pid = fork();
    if (pid < 0) {
        failf("fork failed");
        return -1;
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(ptxas, ptxas, "-v", "-arch=sm_90", ptx_path, "-o", cubin, (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        failf("waitpid failed");
        return -1;
    }
    char *out = read_file(log);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failf("%s -arch=sm_90 failed (status %d):\n%s", ptxas, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              out ? out : "(no output)");
        free(out);
        return -1;
    }
    char expect[300];
    snprintf(expect, sizeof expect, "Compiling entry function '%s'", name);
    struct stat st;
    int ok = out && strstr(out, expect) && stat(cubin, &st) == 0 && st.st_size > 0;
    if (!ok) failf("ptxas did not report \"%s\" or wrote no cubin:\n%s", expect, out ? out : "(no output)");
    free(out);
    return ok ? 0 : -1;
}

/* All checks of one kernel; 0 when they pass, else -1 with `why` set. */
static int check_kernel(const char *name, const char *src, const adsm_kernel_desc *k, const char *ptxas,
                        const char *outdir) {
    why[0] = 0;
    if (strcmp(k->name, name) != 0) {
        failf("descriptor name %s for kernel %s", k->name, name);
        return -1;
    }
    char *ptx = compile_ptx(name, src);
    if (!ptx) return -1;
    char ptx_path[4096], cubin[4096], log[4096];
    snprintf(ptx_path, sizeof ptx_path, "%s/%s.ptx", outdir, name);
    snprintf(cubin, sizeof cubin, "%s/%s.cubin", outdir, name);
    snprintf(log, sizeof log, "%s/%s.ptxas.log", outdir, name);
    ptx_param pp[MAX_PARAMS];
    unsigned np = 0;
    int r = write_file(ptx_path, ptx);
    if (r == 0) r = entry_params(ptx, name, pp, &np);
    if (r == 0) r = compare_params(k, pp, np);
    if (r == 0) r = assemble(ptxas, name, ptx_path, cubin, log);
    free(ptx);
    return r;
}

#ifdef PROGRAM_FILE
/* One launch of one thread of single-source kernel k on the cuda backend over the double, zeros
 * for every argument (pointers: one zeroed shared object). 0, or -1 with `why` set. */
static int run_on_double(const adsm_kernel_desc *k) {
    unsigned char args[4096] = {0};
    void *scratch = adsm_alloc(1 << 16);
    if (!scratch || k->args_size > sizeof args) return failf("no room for the arguments of %s", k->name), -1;
    for (unsigned p = 0; p < k->nparams; p++)
        if (k->params[p].access != ADSM_ACCESS_VALUE) memcpy(args + k->params[p].offset, &scratch, sizeof scratch);
    if (cuda_double.register_kernel(k->name, cuda_double_run_body, (void *)k) != 0)
        return failf("the double refused to register %s", k->name), -1;
    adsm_result r = adsm_kernel_prepare(k);
    if (r == ADSM_OK) r = adsm_launch(k, adsm_grid_1d(1, 1), args);
    if (r == ADSM_OK) r = adsm_sync();
    adsm_free(scratch);
    if (r == ADSM_OK) return 0;
    failf("on the driver double: %s", adsm_last_error());
    return -1;
}

/* adsm's cuda backend over the double, NVRTC from the checker's own library. */
static int start_on_double(const char *double_lib, const char *nvrtc_lib) {
    setenv("CUDA_DOUBLE_LIB", double_lib, 1);
    setenv("ADSM_NVRTC_LIBRARY", nvrtc_lib, 1);
    cuda_double_use();
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_CUDA;
    if (adsm_init(&cfg) != ADSM_OK || cuda_double_open() != 0) {
        fprintf(stderr, "cannot run adsm's cuda backend on the driver double %s: %s\n", double_lib, adsm_last_error());
        return -1;
    }
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s LIBNVRTC PTXAS OUTDIR [LIBCUDADOUBLE]\n", argv[0]);
        return 2;
    }
    if (load_nvrtc(argv[1]) != 0) return 1;
    struct {
        const char *name, *source;
        const adsm_kernel_desc *desc;
    } kernels[] = {
#define X(k) {#k, k##_cuda, adsm__kernel_##k()},
/* a single-source kernel: the CUDA C the cuda backend would compile at its first launch */
#define S(k) {#k, adsm__cuda_single_source(adsm__kernel_##k()), adsm__kernel_##k()},
        PROGRAM_KERNELS
#undef X
#undef S
    };
    int failures = 0;
#ifdef PROGRAM_FILE
    int on_double = argc == 5 && start_on_double(argv[4], argv[1]) == 0;
    if (argc == 5 && !on_double) failures++;
#endif
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        const adsm_kernel_desc *k = kernels[i].desc;
        int r = check_kernel(kernels[i].name, kernels[i].source, k, argv[2], argv[3]);
#ifdef PROGRAM_FILE
        int ran = 0;
        if (r == 0 && on_double && k->cuda_source) {
            r = run_on_double(k);
            ran = r == 0;
        }
        if (r == 0) {
            printf("ok: %s: %u parameters (", kernels[i].name, k->nparams);
            for (unsigned p = 0; p < k->nparams; p++) printf("%s%zu", p ? ", " : "", k->params[p].size);
            printf(" bytes), NVRTC compute_90, ptxas sm_90%s\n", ran ? ", ran on the driver double" : "");
        } else {
            printf("FAIL: %s (%s): %s\n", kernels[i].name, PROGRAM_FILE, why);
            failures++;
        }
#else
        int want_ok = strncmp(kernels[i].name, "good", 4) == 0; /* the controls; every other must fail */
        if (r == 0 && want_ok) printf("ok: control %s passes\n", kernels[i].name);
        else if (r != 0 && !want_ok) printf("ok: mismatch %s rejected: %s\n", kernels[i].name, why);
        else {
            printf("FAIL: self-test kernel %s %s%s\n", kernels[i].name, want_ok ? "failed: " : "was accepted",
                   want_ok ? why : "");
            failures++;
        }
#endif
    }
#ifdef PROGRAM_FILE
    if (on_double) adsm_shutdown();
#endif
    fflush(stdout);
    return failures ? 1 : 0;
}
