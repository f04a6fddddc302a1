/* adsm_impl/kernel.h -- running kernel bodies on a pool of CPU worker threads, and checking
 * launch requests against their declarations.
 *
 * The pool splits a grid's flattened thread range into one contiguous chunk per worker and runs
 * the kernel's entry trampoline on each; a small grid (or any, with one worker) runs whole on the
 * calling thread instead. It serves the emu device process (where each chunk is
 * wrapped in crash recovery) and the host backend. All of it runs in normal thread context,
 * never in a signal handler. */
#ifndef ADSM__KERNEL_INCLUDED
#define ADSM__KERNEL_INCLUDED

#include "common.h"
#include "os.h"
#include "backend.h"

struct adsm__pool;
/* Runs one chunk; returns 0, or an adsm_result after writing a message into `msg`. */
typedef int (*adsm__chunk_runner)(struct adsm__pool *p, unsigned worker, adsm_grid chunk, char *msg,
                                  size_t msg_size);

typedef struct adsm__pool {
    pthread_t *threads;
    unsigned nthreads, started;
    pthread_mutex_t mutex;
    pthread_cond_t go, done;
    uint64_t generation;
    unsigned remaining;
    int quit;
    adsm__chunk_runner runner;
    const adsm_kernel_desc *kernel;
    adsm_grid grid;
    const void *args;
    int status;      /* first failure of the current kernel */
    char message[256];
} adsm__pool;

typedef struct adsm__worker_arg {
    adsm__pool *pool;
    unsigned index;
} adsm__worker_arg;

/* A C++ CPU body that throws: the entry trampoline (adsm.h) catches the exception, which must not
 * unwind through the pool and the backend's locks, and says so here, on the thread that ran it;
 * the chunk's runner then fails the launch. */
static __thread int adsm__tls_kernel_threw;

ADSM_API void adsm__kernel_threw(void) { adsm__tls_kernel_threw = 1; }

/* After a chunk ran: 0, or ADSM_ERROR_KERNEL_CRASHED with its message if the body threw. */
ADSM__PRIVATE int adsm__chunk_threw(const adsm_kernel_desc *k, char *msg, size_t msg_size) {
    if (!adsm__tls_kernel_threw) return 0;
    adsm__tls_kernel_threw = 0;
    snprintf(msg, msg_size, "kernel '%s' crashed: its CPU body threw a C++ exception", k->name);
    return ADSM_ERROR_KERNEL_CRASHED;
}

ADSM__PRIVATE int adsm__run_chunk_plain(adsm__pool *p, unsigned worker, adsm_grid chunk, char *msg,
                                        size_t msg_size) {
    (void)worker;
    p->kernel->entry(chunk, p->args);
    return adsm__chunk_threw(p->kernel, msg, msg_size);
}

ADSM__PRIVATE adsm_grid adsm__chunk_of(adsm_grid g, unsigned worker, unsigned n) {
    size_t total = g.end - g.begin, per = (total + n - 1) / n;
    adsm_grid c = g;
    c.begin = g.begin + ADSM__MIN(total, per * worker);
    c.end = g.begin + ADSM__MIN(total, per * (worker + 1));
    return c;
}

ADSM__PRIVATE void *adsm__pool_worker(void *arg) {
    adsm__worker_arg wa = *(adsm__worker_arg *)arg;
    adsm__pool *p = wa.pool;
    free(arg);
    uint64_t seen = 0;
    char msg[256];
    adsm__tls_passthrough = 1; /* kernel bodies touch device (or host-backend) memory directly */
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->go, &p->mutex);
        if (p->quit) break;
        seen = p->generation;
        adsm_grid chunk = adsm__chunk_of(p->grid, wa.index, p->nthreads);
        pthread_mutex_unlock(&p->mutex);
        int status = chunk.begin < chunk.end ? p->runner(p, wa.index, chunk, msg, sizeof msg) : 0;
        pthread_mutex_lock(&p->mutex);
        if (status != 0 && p->status == 0) {
            p->status = status;
            snprintf(p->message, sizeof p->message, "%s", msg);
        }
        if (--p->remaining == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

ADSM__PRIVATE int adsm__pool_start(adsm__pool *p, unsigned nthreads, adsm__chunk_runner runner) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->runner = runner ? runner : adsm__run_chunk_plain;
    p->threads = (pthread_t *)calloc(nthreads, sizeof *p->threads);
    if (!p->threads) return -1;
    p->nthreads = nthreads;
    for (unsigned i = 0; i < nthreads; i++) {
        adsm__worker_arg *wa = (adsm__worker_arg *)malloc(sizeof *wa);
        if (!wa) return -1;
        wa->pool = p;
        wa->index = i;
        if (adsm__thread_start(&p->threads[i], adsm__pool_worker, wa) != 0) {
            free(wa);
            p->nthreads = i; /* run with the workers we got */
            return i > 0 ? 0 : -1;
        }
        p->started++;
    }
    return 0;
}

/* Grids of at most this many threads run on the calling thread: waking the workers and waiting
 * for them (two thread switches, several microseconds each on a VM) costs more than such a grid's
 * work when its threads do what GPU threads do. So does any grid when the pool has one worker. */
#define ADSM__POOL_INLINE_THREADS 256

/* The whole grid on the calling thread, as a worker would run it (kernel bodies touch device
 * memory directly). Returns 0 or its failure, with the message in msg. */
ADSM__PRIVATE int adsm__pool_run_here(adsm__pool *p, adsm_grid g, char *msg, size_t msg_size) {
    int passthrough = adsm__tls_passthrough;
    adsm__tls_passthrough = 1;
    int status = g.begin < g.end ? p->runner(p, p->nthreads, g, msg, msg_size) : 0;
    adsm__tls_passthrough = passthrough;
    if (status == 0 && msg_size > 0) msg[0] = 0;
    return status;
}

/* Runs the kernel over the whole grid and waits; returns 0 or the first chunk's failure. */
ADSM__PRIVATE int adsm__pool_run(adsm__pool *p, const adsm_kernel_desc *k, adsm_grid g, const void *args,
                                 char *msg, size_t msg_size) {
    pthread_mutex_lock(&p->mutex);
    p->kernel = k;
    p->grid = g;
    p->args = args;
    p->status = 0;
    p->message[0] = 0;
    if (p->nthreads == 1 || g.end - g.begin <= ADSM__POOL_INLINE_THREADS) {
        pthread_mutex_unlock(&p->mutex); /* the workers wait for a generation that does not come */
        return adsm__pool_run_here(p, g, msg, msg_size);
    }
    p->remaining = p->nthreads;
    p->generation++;
    pthread_cond_broadcast(&p->go);
    while (p->remaining > 0) pthread_cond_wait(&p->done, &p->mutex);
    int status = p->status;
    snprintf(msg, msg_size, "%s", p->message);
    pthread_mutex_unlock(&p->mutex);
    return status;
}

ADSM__PRIVATE void adsm__pool_stop(adsm__pool *p) {
    if (!p->threads) return;
    pthread_mutex_lock(&p->mutex);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mutex);
    for (unsigned i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    p->threads = NULL;
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
}

/* ---- launch requests ------------------------------------------------------------------------ */
static const char *const adsm__access_names[] = {"VALUE", "IN", "OUT", "INOUT"};

ADSM__PRIVATE int adsm__access_is_pointer(adsm_access a) { return a != ADSM_ACCESS_VALUE; }

/* A launch's pointer arguments inside adsm's range [base, base + half) moved by delta to the
 * device's own addresses (cuda translating, emu with addresses of its own), each counted in
 * adsm_stats.translated_args; NULL stays. args: the packed argument block. */
ADSM__PRIVATE void adsm__args_to_device(adsm__runtime *rt, const adsm_kernel_desc *k, unsigned char *args,
                                        uintptr_t base, size_t half, intptr_t delta) {
    for (unsigned i = 0; delta && i < k->nparams; i++) {
        uintptr_t p;
        if (!adsm__access_is_pointer(k->params[i].access)) continue;
        memcpy(&p, args + k->params[i].offset, sizeof p);
        if (p < base || p >= base + half) continue;
        p += (uintptr_t)delta;
        memcpy(args + k->params[i].offset, &p, sizeof p);
        ADSM__ADD(&rt->stats.translated_args, 1);
    }
}
ADSM__PRIVATE int adsm__access_writes(adsm_access a) { return a == ADSM_ACCESS_OUT || a == ADSM_ACCESS_INOUT; }

ADSM__PRIVATE adsm_result adsm__check_kernel_desc(const adsm_kernel_desc *k, const char *fn) {
    if (!k || !k->name || !k->entry || (k->nparams > 0 && !k->params))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: malformed kernel descriptor", fn);
    if (k->nparams == 0 || k->nparams > ADSM__MAX_PARAMS)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %u parameters, expected 1..%d", k->name,
                          k->nparams, ADSM__MAX_PARAMS);
    for (unsigned i = 0; i < k->nparams; i++) {
        const adsm_param_desc *p = &k->params[i];
        if ((unsigned)p->access > ADSM_ACCESS_INOUT || p->offset > k->args_size || p->size > k->args_size - p->offset ||
            (adsm__access_is_pointer(p->access) && p->size != sizeof(void *)))
            return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': parameter %u has a malformed descriptor",
                              k->name, i);
    }
    return ADSM_OK;
}

/* The launch shapes every CUDA device (compute capability 5.0 and later) accepts; every backend
 * refuses the rest with the same code, so a program tried on emu does not fail later on a GPU
 * (and emu never spends hours on a grid no GPU would run). */
#define ADSM__MAX_BLOCK_THREADS 1024u
static const adsm_dim3 adsm__max_block = {1024u, 1024u, 64u};
static const adsm_dim3 adsm__max_grid = {2147483647u, 65535u, 65535u};

ADSM__PRIVATE int adsm__dim_fits(adsm_dim3 d, adsm_dim3 max) { return d.x <= max.x && d.y <= max.y && d.z <= max.z; }

ADSM__PRIVATE adsm_result adsm__check_launch_shape(const adsm_kernel_desc *k, adsm_grid g) {
    adsm_dim3 b = g.block, n = g.grid;
    if (!n.x || !n.y || !n.z || !b.x || !b.y || !b.z)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': empty grid (grid %u x %u x %u, block %u x %u x %u)",
                          k->name, n.x, n.y, n.z, b.x, b.y, b.z);
    uint64_t per_block = (uint64_t)b.x * b.y * b.z;
    if (!adsm__dim_fits(b, adsm__max_block) || per_block > ADSM__MAX_BLOCK_THREADS)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE,
                          "kernel '%s': block %u x %u x %u (%llu threads); a block may have at most %u x %u x %u "
                          "and %u threads in all",
                          k->name, b.x, b.y, b.z, (unsigned long long)per_block, adsm__max_block.x, adsm__max_block.y,
                          adsm__max_block.z, ADSM__MAX_BLOCK_THREADS);
    if (!adsm__dim_fits(n, adsm__max_grid))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': grid %u x %u x %u blocks; at most %u x %u x %u",
                          k->name, n.x, n.y, n.z, adsm__max_grid.x, adsm__max_grid.y, adsm__max_grid.z);
    size_t total = per_block; /* a grid that fits still may not count in a size_t */
    if (__builtin_mul_overflow(total, (size_t)n.x, &total) || __builtin_mul_overflow(total, (size_t)n.y, &total) ||
        __builtin_mul_overflow(total, (size_t)n.z, &total))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': grid %u x %u x %u of %llu-thread blocks has more "
                          "threads than a size_t counts", k->name, n.x, n.y, n.z, (unsigned long long)per_block);
    return ADSM_OK;
}

#endif /* ADSM__KERNEL_INCLUDED */
