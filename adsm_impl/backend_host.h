/* adsm_impl/backend_host.h -- the host backend: the "device" is the CPU and works on host memory.
 *
 * No copies, no tracking (the runtime pairs it with the untracked protocol); kernels run on a
 * worker pool in this process, synchronously inside the launch call. It is the zero-overhead CPU
 * baseline and the paper's integrated-memory case. Runs in normal thread context only. */
#ifndef ADSM__BACKEND_HOST_INCLUDED
#define ADSM__BACKEND_HOST_INCLUDED

#include "common.h"
#include "os.h"
#include "runtime.h"
#include "device_error.h"
#include "backend.h"
#include "kernel.h"

typedef struct adsm__host {
    adsm__pool pool;
    pthread_mutex_t mutex; /* serialises launches on the pool */
    adsm__device_error errors;
} adsm__host;

ADSM__PRIVATE adsm_result adsm__host_init(adsm__runtime *rt, void **ctx) {
    adsm__host *h = (adsm__host *)calloc(1, sizeof *h);
    if (!h) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "host backend: out of memory");
    if (adsm__pool_start(&h->pool, rt->cfg.emu_workers, NULL) != 0) {
        adsm__pool_stop(&h->pool);
        free(h);
        return adsm__fail(ADSM_ERROR_SYSTEM, "host backend: cannot start worker threads");
    }
    pthread_mutex_init(&h->mutex, NULL);
    adsm__device_error_init(&h->errors);
    *ctx = h;
    return ADSM_OK;
}

ADSM__PRIVATE void adsm__host_shutdown(void *ctx) {
    adsm__host *h = (adsm__host *)ctx;
    adsm__pool_stop(&h->pool);
    pthread_mutex_destroy(&h->mutex);
    adsm__device_error_destroy(&h->errors);
    free(h);
}

ADSM__PRIVATE size_t adsm__host_capacity(void *ctx) { (void)ctx; return adsm__phys_memory(); }
/* Device memory is host memory in the reservation, opened for the kernels that run here. */
ADSM__PRIVATE adsm_result adsm__host_dev_alloc(void *ctx, uintptr_t dev, size_t span) {
    (void)ctx;
    if (adsm__protect(dev, span, PROT_READ | PROT_WRITE) != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "host backend: opening a new object's memory failed (%s)%s", strerror(errno),
                          errno == ENOMEM ? ": " ADSM__MAP_LIMIT_HINT : "");
    return ADSM_OK;
}
ADSM__PRIVATE void adsm__host_dev_free(void *ctx, uintptr_t dev, size_t span) {
    (void)ctx;
    madvise((void *)dev, span, MADV_DONTNEED);
    adsm__protect(dev, span, PROT_NONE);
}
/* Only the explicit path copies on this backend (the protocols never track here). */
ADSM__PRIVATE int adsm__host_to_device(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async,
                                       uint64_t after) {
    (void)ctx; (void)async; (void)after;
    memmove((void *)dev, (const void *)host, n);
    return 0;
}
ADSM__PRIVATE int adsm__host_from_device(void *ctx, uintptr_t host, uintptr_t dev, size_t n) {
    (void)ctx;
    memmove((void *)host, (const void *)dev, n);
    return 0;
}
ADSM__PRIVATE void adsm__host_drain(void *ctx) { (void)ctx; }
ADSM__PRIVATE int adsm__host_wait(void *ctx, uint64_t seq) { (void)ctx; (void)seq; return 0; }

ADSM__PRIVATE adsm_result adsm__host_launch(void *ctx, const adsm__launch *l) {
    adsm__host *h = (adsm__host *)ctx;
    char msg[256];
    pthread_mutex_lock(&h->mutex);
    int status = adsm__pool_run(&h->pool, l->kernel, l->grid, l->args, msg, sizeof msg);
    pthread_mutex_unlock(&h->mutex);
    if (status != 0) adsm__device_error_record(&h->errors, (adsm_result)status, msg);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__host_synchronize(void *ctx) {
    adsm__host *h = (adsm__host *)ctx;
    return adsm__device_error_take(&h->errors, 0, "");
}

ADSM__PRIVATE int adsm__host_dev_memset(void *ctx, uintptr_t dev, int value, size_t n) {
    (void)ctx;
    memset((void *)dev, value, n);
    return 0;
}

ADSM__PRIVATE int adsm__host_dev_copy(void *ctx, uintptr_t dst, uintptr_t src, size_t n) {
    (void)ctx;
    memmove((void *)dst, (const void *)src, n);
    return 0;
}

static const adsm__backend_vtbl adsm__backend_host = {
    .name = "host",
    .moves_data = 0,
    .max_args = 0,
    .init = adsm__host_init,
    .shutdown = adsm__host_shutdown,
    .capacity = adsm__host_capacity,
    .dev_alloc = adsm__host_dev_alloc,
    .dev_free = adsm__host_dev_free,
    .to_device = adsm__host_to_device,
    .from_device = adsm__host_from_device,
    .drain = adsm__host_drain,
    .launch = adsm__host_launch,
    .wait = adsm__host_wait,
    .synchronize = adsm__host_synchronize,
    .dev_memset = adsm__host_dev_memset,
    .dev_copy = adsm__host_dev_copy,
};

#endif /* ADSM__BACKEND_HOST_INCLUDED */
