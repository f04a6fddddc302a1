/* tests/cuda/fake_nvrtc.c -- a stand-in for NVRTC (libfakenvrtc.so) that records what it is asked.
 *
 * adsm loads NVRTC with dlopen (ADSM_NVRTC_LIBRARY); pointed at this library instead, its
 * "compiler" hands the source text back as the PTX, so a test passes PTX as the source and the
 * driver double loads it. Every option of the last nvrtcCompileProgram is kept for the test to
 * read (fakenvrtc_option_count, fakenvrtc_option), and whether adsm took its PTX or its "cubin"
 * (fakenvrtc_output). nvrtcVersion answers FAKENVRTC_VERSION
 * (major*1000 + minor*10, default 13000), read at each call. Runs on whatever thread calls it;
 * one mutex guards the recorded options. */
#include "adsm_impl/cuda/cuda_driver.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct adsm__nvrtc_prog_st {
    char *source;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char **last_options; /* of the last compile, each strdup'ed */
static int last_count;
static const char *last_output = ""; /* "ptx" or "cubin": what adsm took of the last program */

EXPORT adsm__nvrtc_result nvrtcVersion(int *major, int *minor) {
    const char *v = getenv("FAKENVRTC_VERSION");
    int version = v && *v ? atoi(v) : 13000;
    *major = version / 1000;
    *minor = version % 1000 / 10;
    return ADSM__NVRTC_SUCCESS;
}

EXPORT const char *nvrtcGetErrorString(adsm__nvrtc_result result) {
    return result == ADSM__NVRTC_SUCCESS ? "NVRTC_SUCCESS" : "NVRTC_ERROR (fake)";
}

EXPORT adsm__nvrtc_result nvrtcCreateProgram(adsm__nvrtc_program *prog, const char *src, const char *name,
                                              int nheaders, const char *const *headers,
                                              const char *const *include_names) {
    (void)name, (void)nheaders, (void)headers, (void)include_names;
    struct adsm__nvrtc_prog_st *p = calloc(1, sizeof *p);
    if (!p || !src || !(p->source = strdup(src))) {
        free(p);
        return 1;
    }
    *prog = p;
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcDestroyProgram(adsm__nvrtc_program *prog) {
    if (prog && *prog) {
        free((*prog)->source);
        free(*prog);
        *prog = NULL;
    }
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcCompileProgram(adsm__nvrtc_program prog, int noptions, const char *const *options) {
    (void)prog;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < last_count; i++) free(last_options[i]);
    free(last_options);
    last_options = calloc(noptions > 0 ? (size_t)noptions : 1, sizeof *last_options);
    last_count = 0;
    for (int i = 0; last_options && i < noptions; i++) last_options[last_count++] = strdup(options[i]);
    pthread_mutex_unlock(&mu);
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcGetPTXSize(adsm__nvrtc_program prog, size_t *size) {
    *size = strlen(prog->source) + 1;
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcGetPTX(adsm__nvrtc_program prog, char *ptx) {
    memcpy(ptx, prog->source, strlen(prog->source) + 1);
    pthread_mutex_lock(&mu);
    last_output = "ptx";
    pthread_mutex_unlock(&mu);
    return ADSM__NVRTC_SUCCESS;
}

/* The "cubin" is the source too (the driver double reads it as PTX), recorded as a cubin. */
EXPORT adsm__nvrtc_result nvrtcGetCUBINSize(adsm__nvrtc_program prog, size_t *size) {
    return nvrtcGetPTXSize(prog, size);
}

EXPORT adsm__nvrtc_result nvrtcGetCUBIN(adsm__nvrtc_program prog, char *cubin) {
    memcpy(cubin, prog->source, strlen(prog->source) + 1);
    pthread_mutex_lock(&mu);
    last_output = "cubin";
    pthread_mutex_unlock(&mu);
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcGetProgramLogSize(adsm__nvrtc_program prog, size_t *size) {
    (void)prog;
    *size = 1;
    return ADSM__NVRTC_SUCCESS;
}

EXPORT adsm__nvrtc_result nvrtcGetProgramLog(adsm__nvrtc_program prog, char *log) {
    (void)prog;
    log[0] = 0;
    return ADSM__NVRTC_SUCCESS;
}

/* Test API: the options of the last compile. */
EXPORT int fakenvrtc_option_count(void) {
    pthread_mutex_lock(&mu);
    int n = last_count;
    pthread_mutex_unlock(&mu);
    return n;
}

EXPORT const char *fakenvrtc_option(int i) {
    pthread_mutex_lock(&mu);
    const char *o = i >= 0 && i < last_count ? last_options[i] : NULL;
    pthread_mutex_unlock(&mu);
    return o;
}

EXPORT const char *fakenvrtc_output(void) {
    pthread_mutex_lock(&mu);
    const char *o = last_output;
    pthread_mutex_unlock(&mu);
    return o;
}
