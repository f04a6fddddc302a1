/* adsm_impl/module.h -- device code: modules (PTX, cubin, fatbin, CUDA C through NVRTC) loaded
 * into every live device's context, and kernels readied on every device before their first
 * launch (adsm_kernel_prepare; single-source kernels compile there).
 *
 * Normal thread context, no runtime lock held: the backends serialise their own module tables.
 * On emu and host kernels run from their CPU bodies, so these only check their arguments. */
#ifndef ADSM__MODULE_INCLUDED
#define ADSM__MODULE_INCLUDED

#include "common.h"
#include "os.h"
#include "runtime.h"
#include "kernel.h"
#include "directory.h"
#include "lifecycle.h"

ADSM__PRIVATE adsm_result adsm__module_load(const void *image, size_t size, int source, const char *const *options,
                                            const char *fn) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if (!image) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: NULL %s", fn, source ? "source" : "image");
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (!rt->be->module_load) return ADSM_OK; /* kernels run from their CPU bodies here */
    for (unsigned d = 0; d < rt->ndev; d++) { /* a kernel may run on any device */
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue;
        if ((r = rt->be->module_load(rt->dev_ctx[d], image, size, source, options)) != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__module_load_image_unguarded(const void *image, size_t size) {
    return adsm__module_load(image, size, 0, NULL, "adsm_module_load_image");
}

ADSM__PRIVATE adsm_result adsm__module_load_source_unguarded(const char *cuda_source, const char *const *options) {
    return adsm__module_load(cuda_source, cuda_source ? strlen(cuda_source) : 0, 1, options,
                             "adsm_module_load_source");
}

/* Reads a whole file into a NUL-terminated buffer (PTX is text). */
/* The whole file, read to its end (not sized with fseek and ftell, which tell nothing true of a
 * directory, a pipe or a /proc file): a malloc'd buffer with a 0 after it. */
ADSM__PRIVATE adsm_result adsm__read_file(const char *path, char **out, size_t *size) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int e = f ? 0 : errno;
    while (f && !e) {
        if (len + 1 >= cap) {
            char *grown = (char *)realloc(buf, cap = cap ? 2 * cap : (size_t)1 << 16);
            if (!grown) {
                e = ENOMEM;
                break;
            }
            buf = grown;
        }
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (ferror(f)) e = errno ? errno : EIO;
        else if (feof(f)) break;
    }
    if (f) fclose(f);
    if (e) {
        free(buf);
        return adsm__fail(ADSM_ERROR_SYSTEM, "adsm_module_load_file: cannot read '%s': %s", path, strerror(e));
    }
    buf[len] = 0;
    *out = buf;
    *size = len;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__module_load_file_unguarded(const char *path) {
    char *image = NULL;
    size_t size = 0;
    if (!path) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "adsm_module_load_file: NULL path");
    adsm_result r = adsm__read_file(path, &image, &size);
    if (r != ADSM_OK) return r;
    if (size == 0) r = adsm__fail(ADSM_ERROR_INVALID_MODULE, "adsm_module_load_file: '%s' is empty", path);
    else r = adsm__module_load(image, size, 0, NULL, "adsm_module_load_file");
    free(image);
    return r;
}

/* Gets a kernel's device code ready on every live device (cuda compiles single-source kernels
 * and loads them into each context), before placement picks one. No lock held. */
ADSM__PRIVATE adsm_result adsm__prepare_everywhere(adsm__runtime *rt, const adsm_kernel_desc *k) {
    for (unsigned d = 0; rt->be->prepare && d < rt->ndev; d++) {
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) continue;
        adsm_result r = rt->be->prepare(rt->dev_ctx[d], k);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__kernel_prepare_unguarded(const adsm_kernel_desc *k) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if ((r = adsm__ensure()) != ADSM_OK || (r = adsm__check_kernel_desc(k, "adsm_kernel_prepare")) != ADSM_OK) return r;
    return adsm__prepare_everywhere(rt, k);
}

#endif /* ADSM__MODULE_INCLUDED */
