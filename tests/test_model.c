#define ADSM_IMPLEMENTATION
#include "adsm.h"
/* tests/test_model.c -- randomized model-based test of the whole runtime.
 *
 * Random sequences of operations (alloc, free, CPU stores and loads, adsm_memset, adsm_memcpy,
 * kernel calls, adsm_sync) run against shared objects and, in parallel, against a reference model
 * made of ordinary malloc'd shadow buffers. Every CPU read of a shared object is compared with the
 * model byte for byte. One Criterion test per protocol and block size on the emu backend, plus one
 * on the host backend.
 *
 * Rules that keep the model valid (the documented programming model):
 *   - after a kernel call and before adsm_sync, the CPU does not touch the objects the kernels in
 *     flight use, except reads of OUT/INOUT objects under lazy and rolling (the runtime waits for
 *     the kernel); later kernels may use them (the device runs launches in order);
 *   - under batch every call is followed by adsm_sync (batch copies every object back at sync);
 *   - adsm_free is allowed at any time.
 *
 * Environment:
 *   ADSM_MODEL_SEED=<n>|random   base seed (default fixed); printed on failure with the failing
 *                                operation's index, so `ADSM_MODEL_SEED=<n> ./test_model
 *                                --filter 'model/<test>'` replays it.
 *   ADSM_MODEL_OPS=<n>           operations per test (overrides the defaults below);
 *   ADSM_MODEL_OPS=x<k>          multiplies the default counts by k (also "<k>x").
 * Defaults: about 100k operations per protocol on emu (split over its variants), 20k on host. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#ifdef TEST_ON_CUDA_DOUBLE /* built a second time to run on the cuda backend over the driver double */
#include "tests/cuda_double_bridge.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the kernel: 4 OUT, 4 INOUT and 4 IN slots, NULL when unused ---------------------------- */
typedef struct mix_info {
    size_t olen[4], xlen[4], ilen[4]; /* bytes each slot covers from its pointer */
    uint32_t seed, skip_mod, skip_rem; /* threads i with i % skip_mod == skip_rem write nothing */
} mix_info;

/* Threads [begin, end): thread i reads bytes of the IN slots, writes byte i of the OUT slots and
 * reads and writes byte i of the INOUT slots, unless i % skip_mod == skip_rem (it then writes
 * nothing). Per thread:
 *     acc   = seed + 131 i + 7 (i >> 8), then for each IN slot k: acc = 3 acc + in_k[(i (2k+1) + 977 k) % ilen_k]
 *     out_k[i]   = acc + 29 k + (i >> 3)
 *     inout_k[i] = 5 inout_k[i] + acc + k + 1
 * Threads are independent (no thread reads what another writes), so the threads of a range are
 * computed slot by slot, in pieces, to keep the kernel and the model fast. Shared by the kernel
 * body (one chunk of the grid per worker) and the model (the whole grid). */
#define MIX_PIECE 4096
static void mix_range(size_t begin, size_t end, uint8_t *const o[4], uint8_t *const x[4],
                      const uint8_t *const in[4], const mix_info *m) {
    uint8_t acc[MIX_PIECE], keep[MIX_PIECE]; /* keep: only read when skip_mod != 0 */
    for (size_t base = begin; base < end; base += MIX_PIECE) {
        size_t n = end - base < MIX_PIECE ? end - base : MIX_PIECE;
        for (size_t j = 0; j < n; j++) {
            size_t i = base + j;
            acc[j] = (uint8_t)(m->seed + i * 131u + (i >> 8) * 7u);
        }
        if (m->skip_mod) {
            size_t r = base % m->skip_mod;
            for (size_t j = 0; j < n; j++) {
                keep[j] = r != m->skip_rem;
                if (++r == m->skip_mod) r = 0;
            }
        }
        for (unsigned k = 0; k < 4; k++) {
            if (!in[k] || !m->ilen[k]) continue;
            size_t len = m->ilen[k], step = (2 * k + 1) % len, idx = (base * (2 * k + 1) + 977u * k) % len;
            const uint8_t *p = in[k];
            for (size_t j = 0; j < n; j++) {
                acc[j] = (uint8_t)(acc[j] * 3u + p[idx]);
                idx += step;
                if (idx >= len) idx -= len;
            }
        }
        for (unsigned k = 0; k < 4; k++) {
            if (!o[k] || base >= m->olen[k]) continue;
            size_t lim = m->olen[k] - base < n ? m->olen[k] - base : n;
            uint8_t *q = o[k] + base;
            if (m->skip_mod) {
                for (size_t j = 0; j < lim; j++)
                    if (keep[j]) q[j] = (uint8_t)(acc[j] + 29u * k + (uint8_t)((base + j) >> 3));
            } else {
                for (size_t j = 0; j < lim; j++) q[j] = (uint8_t)(acc[j] + 29u * k + (uint8_t)((base + j) >> 3));
            }
        }
        for (unsigned k = 0; k < 4; k++) {
            if (!x[k] || base >= m->xlen[k]) continue;
            size_t lim = m->xlen[k] - base < n ? m->xlen[k] - base : n;
            uint8_t *q = x[k] + base;
            if (m->skip_mod) {
                for (size_t j = 0; j < lim; j++)
                    if (keep[j]) q[j] = (uint8_t)(q[j] * 5u + acc[j] + k + 1u);
            } else {
                for (size_t j = 0; j < lim; j++) q[j] = (uint8_t)(q[j] * 5u + acc[j] + k + 1u);
            }
        }
    }
}

ADSM_KERNEL(mix, ADSM_OUT(uint8_t, o0), ADSM_OUT(uint8_t, o1), ADSM_OUT(uint8_t, o2), ADSM_OUT(uint8_t, o3),
            ADSM_INOUT(uint8_t, x0), ADSM_INOUT(uint8_t, x1), ADSM_INOUT(uint8_t, x2), ADSM_INOUT(uint8_t, x3),
            ADSM_IN(uint8_t, i0), ADSM_IN(uint8_t, i1), ADSM_IN(uint8_t, i2), ADSM_IN(uint8_t, i3),
            ADSM_VALUE(mix_info, info));

void mix(adsm_grid g, uint8_t *o0, uint8_t *o1, uint8_t *o2, uint8_t *o3, uint8_t *x0, uint8_t *x1, uint8_t *x2,
         uint8_t *x3, const uint8_t *i0, const uint8_t *i1, const uint8_t *i2, const uint8_t *i3, mix_info info) {
    uint8_t *const o[4] = {o0, o1, o2, o3};
    uint8_t *const x[4] = {x0, x1, x2, x3};
    const uint8_t *const in[4] = {i0, i1, i2, i3};
    mix_range(g.begin, g.end, o, x, in, &info);
}

/* ---- random numbers ------------------------------------------------------------------------- */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the model ------------------------------------------------------------------------------ */
#define MAX_OBJS 24
#define MAX_SIZE ((size_t)256 << 10)
#define SCRATCH_SIZE ((size_t)4 << 20) /* >= the largest object (2 MiB block multiples) */
#define TRACE_LEN 24
#define TRACE_TEXT 200

enum { ROLE_IN = 1, ROLE_OUT, ROLE_INOUT };
enum { BUSY_NONE = 0, BUSY_READ, BUSY_WRITE }; /* what kernels in flight do with an object */

typedef struct variant {
    const char *name;
    adsm_backend_kind backend;
    adsm_protocol_kind protocol;
    size_t block_size, rolling_size;
    size_t default_ops;
    unsigned devices; /* emu: ADSM_EMU_DEVICES (0: one); kernels then run on random devices */
    int write_through, drop_replicas; /* adsm_config's copy policies */
    size_t emu_memory; /* emu: each device's capacity (0: the default); small, launches evict */
    unsigned streams;  /* ADSM_STREAMS (0: the default, 1 with one device); the model's kernels name
                          every object they touch, so one device may run them at once too */
} variant;

typedef struct object {
    uint8_t *p;   /* shared object */
    uint8_t *ref; /* model */
    size_t size;
    int busy;
    unsigned id;
} object;

typedef struct model {
    const variant *v;
    uint64_t base_seed, rng;
    size_t ops, op;
    object objs[MAX_OBJS];
    size_t n;
    unsigned next_id;
    uint8_t *scratch, *plain, *plain_ref;
    int in_flight; /* a kernel launched since the last sync */
    uint64_t launches, syncs, allocs, frees, reads, writes, kernel_reads_in_flight;
    uint64_t refused; /* launches refused for want of device memory (small emu_memory only) */
    char trace[TRACE_LEN][TRACE_TEXT];
} model;

static size_t below(model *m, size_t n) { return n ? (size_t)(splitmix64(&m->rng) % n) : 0; }
static int chance(model *m, unsigned percent) { return below(m, 100) < percent; }

static void trace(model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void trace(model *m, const char *fmt, ...) {
    char *t = m->trace[m->op % TRACE_LEN];
    int k = snprintf(t, TRACE_TEXT, "#%zu ", m->op);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t + k, TRACE_TEXT - (size_t)k, fmt, ap);
    va_end(ap);
}

static void dump_trace(model *m) {
    cr_log_error("[%s] seed: ADSM_MODEL_SEED=%" PRIu64 ", failing operation #%zu; last operations:", m->v->name,
                 m->base_seed, m->op);
    size_t first = m->op + 1 > TRACE_LEN ? m->op + 1 - TRACE_LEN : 0;
    for (size_t i = first; i <= m->op; i++)
        if (m->trace[i % TRACE_LEN][0]) cr_log_error("  %s", m->trace[i % TRACE_LEN]);
}

#define FAIL(m, ...)                                                                                  \
    do {                                                                                              \
        dump_trace(m);                                                                                \
        cr_assert_fail("[%s seed %" PRIu64 " op #%zu] %s", (m)->v->name, (m)->base_seed, (m)->op,    \
                       fail_text(__VA_ARGS__));                                                       \
    } while (0)

static __thread char fail_buf[1024];
static const char *fail_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *fail_text(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fail_buf, sizeof fail_buf, fmt, ap);
    va_end(ap);
    return fail_buf;
}

#define CHECK_OK(m, call)                                                                              \
    do {                                                                                               \
        adsm_result r_ = (call);                                                                       \
        if (r_ != ADSM_OK) FAIL(m, "%s returned %s (%s)", #call, adsm_result_string(r_), adsm_last_error()); \
    } while (0)

/* Compares [off, off+len) of o with the model; reading o is allowed by the caller. */
static void check_range(model *m, object *o, size_t off, size_t len, const char *what) {
    if (len == 0 || memcmp(o->p + off, o->ref + off, len) == 0) return;
    size_t i = off;
    while (i < off + len && o->p[i] == o->ref[i]) i++;
    size_t j = i;
    while (j < off + len && o->p[j] != o->ref[j]) j++;
    FAIL(m,
         "%s: object %u (%zu bytes at %p) differs from the model at byte %zu (checked [%zu, %zu)): got 0x%02x, "
         "expected 0x%02x (%zu consecutive bytes differ); block state '%c', block size %zu",
         what, o->id, o->size, (void *)o->p, i, off, off + len, o->p[i], o->ref[i], j - i,
         adsm_block_state(o->p + i) ? adsm_block_state(o->p + i) : '?', adsm_block_size());
}

static int unified(const model *m) {
    return m->v->protocol == ADSM_PROTOCOL_UM || m->v->protocol == ADSM_PROTOCOL_UM_PREFETCH ||
           m->v->protocol == ADSM_PROTOCOL_HMM;
}
/* Reads of a kernel's outputs while it runs: lazy and rolling wait for the kernel (a fault);
 * batch and unified memory do not (the CPU would race the device), so the model leaves them. */
static int tracked_reads_ok(const model *m) {
    return m->v->backend == ADSM_BACKEND_HOST || (m->v->protocol != ADSM_PROTOCOL_BATCH && !unified(m));
}
static int can_write(const object *o) { return o->busy == BUSY_NONE; }
static int can_read(const model *m, const object *o) {
    return o->busy == BUSY_NONE || (o->busy == BUSY_WRITE && tracked_reads_ok(m));
}

/* A random object for which ok() holds, or NULL. */
static object *pick(model *m, int write) {
    if (m->n == 0) return NULL;
    size_t start = below(m, m->n);
    for (size_t k = 0; k < m->n; k++) {
        object *o = &m->objs[(start + k) % m->n];
        if (write ? can_write(o) : can_read(m, o)) return o;
    }
    return NULL;
}

/* Objects of 16 MiB and more ("large" variants: LARGE_MIN and up, at most LARGE_LIVE of them at
 * once) are where a CPU store into a kernel's output does not make the object's host pages
 * (protocol.h, adsm__sparse_use). The model keeps its work on them bounded: an access or a
 * kernel's slot covers a window of at most MAX_SIZE bytes somewhere in them. */
#define LARGE_MIN ((size_t)16 << 20)
#define LARGE_LIVE 2
static int large(size_t size) { return size > MAX_SIZE; }

static void pick_small_range(model *m, size_t size, size_t *off, size_t *len);

/* A random non-empty range of an object of `size` bytes, biased to page and block boundaries;
 * in a large object, within a window of MAX_SIZE bytes starting on a block (or ending the
 * object). */
static void pick_range(model *m, size_t size, size_t *off, size_t *len) {
    if (!large(size)) {
        pick_small_range(m, size, off, len);
        return;
    }
    size_t bs = adsm_block_size(), base = chance(m, 10) ? size - MAX_SIZE : bs * below(m, (size - MAX_SIZE) / bs + 1);
    pick_small_range(m, MAX_SIZE, off, len);
    *off += base;
}

static void pick_small_range(model *m, size_t size, size_t *off, size_t *len) {
    size_t unit = chance(m, 50) ? 4096 : adsm_block_size();
    unsigned r = (unsigned)below(m, 100);
    if (r < 30) { /* small */
        *len = 1 + below(m, size < 64 ? size : 64);
        *off = below(m, size - *len + 1);
    } else if (r < 55 && size > unit) { /* across a boundary */
        size_t b = unit * (1 + below(m, size / unit));
        if (b >= size) b = size - 1;
        *off = b - below(m, b < 100 ? b + 1 : 100);
        size_t max = size - *off;
        *len = 1 + below(m, max < 2 * unit + 200 ? max : 2 * unit + 200);
    } else if (r < 70) { /* whole units */
        *off = (below(m, size) / unit) * unit;
        size_t max = size - *off;
        *len = chance(m, 50) ? max : (max < unit ? max : unit * (1 + below(m, max / unit)));
    } else if (r < 92) { /* anywhere */
        *off = below(m, size);
        *len = 1 + below(m, size - *off);
    } else { /* everything */
        *off = 0;
        *len = size;
    }
}

static void fill_random(model *m, uint8_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = splitmix64(&m->rng);
        memcpy(dst + i, &r, 8);
    }
    for (; i < n; i++) dst[i] = (uint8_t)splitmix64(&m->rng);
}

static void check_stats_objects(model *m) {
    adsm_stats st;
    CHECK_OK(m, adsm_get_stats(&st));
    uint64_t bytes = 0;
    for (size_t i = 0; i < m->n; i++) bytes += m->objs[i].size;
    if (st.objects != m->n || st.object_bytes != bytes)
        FAIL(m, "stats: %" PRIu64 " objects of %" PRIu64 " bytes, the model has %zu of %" PRIu64, st.objects,
             st.object_bytes, m->n, bytes);
}

/* ---- operations ------------------------------------------------------------------------------- */
static size_t live_large(const model *m) {
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) k += large(m->objs[i].size);
    return k;
}

static void op_kernel_writing(model *m, object *writes, size_t *woff, size_t *wlen);
static object *alloc_object(model *m, size_t size);

static void op_alloc(model *m) {
    size_t size, bs = adsm_block_size();
    unsigned r = (unsigned)below(m, 100);
    if (r < 25) size = 1 + below(m, 4096);
    else if (r < 50) size = 1 + below(m, 64 << 10);
    else if (r < 75) size = 1 + below(m, MAX_SIZE);
    else if (r < 87) size = 4096 * (1 + below(m, MAX_SIZE / 4096)); /* page multiples */
    else if (bs > MAX_SIZE && r < 98) size = MAX_SIZE - 4096 * below(m, 3); /* 2 MiB blocks: keep it cheap */
    else if (r < 97) size = bs * (1 + below(m, bs >= MAX_SIZE ? 1 : MAX_SIZE / bs)); /* block multiples */
    else size = bs * (1 + below(m, bs >= MAX_SIZE ? 1 : 2)) + below(m, 3) - 1; /* a byte around block ends */
    if (strstr(m->v->name, "large") && chance(m, 15) && live_large(m) < LARGE_LIVE)
        size = LARGE_MIN + below(m, 8 << 20); /* pages made on first use, or kept waiting by stores */
    object *o = alloc_object(m, size);
    int written_first = large(size) && chance(m, 60); /* a kernel's output before the CPU touches it */
    if (!written_first && chance(m, 30)) check_range(m, o, 0, size, "new object is not zero-filled");
    if (m->v->devices > 1 && chance(m, 30)) { /* placement may follow a fixed affinity: same bytes */
        int dev = (int)below(m, m->v->devices + 1) - 1;
        trace(m, "  affinity device %d", dev);
        CHECK_OK(m, adsm_set_affinity(o->p + below(m, size), dev));
    }
    if (written_first) op_kernel_writing(m, o, NULL, NULL);
}

/* A new object of `size` bytes, in the model too. */
static object *alloc_object(model *m, size_t size) {
    trace(m, "alloc %zu (object %u)", size, m->next_id);
    object *o = &m->objs[m->n];
    o->p = (uint8_t *)adsm_alloc(size);
    if (!o->p) FAIL(m, "adsm_alloc(%zu) failed: %s", size, adsm_last_error());
    o->ref = (uint8_t *)calloc(1, size);
    cr_assert_not_null(o->ref);
    o->size = size;
    o->busy = BUSY_NONE;
    o->id = m->next_id++;
    m->n++;
    m->allocs++;
    trace(m, "alloc %zu -> object %u at %p", size, o->id, (void *)o->p);
    check_stats_objects(m);
    return o;
}

static void op_free(model *m) {
    size_t i = below(m, m->n);
    object *o = &m->objs[i];
    trace(m, "free object %u (%zu bytes, busy %d)", o->id, o->size, o->busy);
    CHECK_OK(m, adsm_free(o->p));
    free(o->ref);
    m->objs[i] = m->objs[--m->n];
    m->frees++;
    check_stats_objects(m);
}

static void op_cpu_write(model *m) {
    object *o = pick(m, 1);
    if (!o) return;
    size_t off, len;
    pick_range(m, o->size, &off, &len);
    unsigned how = (unsigned)below(m, 4);
    trace(m, "cpu write object %u [%zu, %zu) method %u", o->id, off, off + len, how);
    switch (how) {
    case 0: { /* memcpy from random bytes */
        size_t src = below(m, SCRATCH_SIZE - len + 1);
        memcpy(o->p + off, m->scratch + src, len);
        memcpy(o->ref + off, m->scratch + src, len);
        break;
    }
    case 1: { /* byte stores */
        uint8_t a = (uint8_t)below(m, 256), b = (uint8_t)(1 + 2 * below(m, 128));
        volatile uint8_t *p = o->p;
        for (size_t i = off; i < off + len; i++) {
            p[i] = (uint8_t)(a + b * i);
            o->ref[i] = (uint8_t)(a + b * i);
        }
        break;
    }
    case 2: { /* read-modify-write */
        uint8_t d = (uint8_t)(1 + below(m, 255));
        volatile uint8_t *p = o->p;
        for (size_t i = off; i < off + len; i++) {
            p[i] = (uint8_t)(p[i] + d);
            o->ref[i] = (uint8_t)(o->ref[i] + d);
        }
        break;
    }
    default: { /* sparse stores: one byte every stride, many blocks touched */
        size_t stride = chance(m, 50) ? 4096 : 1 + below(m, 10000);
        uint8_t v = (uint8_t)below(m, 256);
        for (size_t i = off; i < off + len; i += stride) {
            ((volatile uint8_t *)o->p)[i] = v;
            o->ref[i] = v;
            v = (uint8_t)(v * 13 + 5);
        }
        break;
    }
    }
    m->writes++;
}

static void op_cpu_read(model *m) {
    object *o = pick(m, 0);
    if (!o) return;
    size_t off, len;
    pick_range(m, o->size, &off, &len);
    unsigned how = (unsigned)below(m, 3);
    trace(m, "cpu read object %u [%zu, %zu) method %u (busy %d)", o->id, off, off + len, how, o->busy);
    if (o->busy) m->kernel_reads_in_flight++;
    if (how == 0) {
        check_range(m, o, off, len, "cpu read (memcmp)");
    } else if (how == 1) { /* byte loads, strided */
        size_t stride = 1 + below(m, 5000);
        for (size_t i = off; i < off + len; i += stride) {
            uint8_t got = ((volatile uint8_t *)o->p)[i];
            if (got != o->ref[i]) check_range(m, o, i, 1, "cpu read (byte load)");
        }
    } else { /* a single load */
        uint8_t got = ((volatile uint8_t *)o->p)[off + len - 1];
        if (got != o->ref[off + len - 1]) check_range(m, o, off + len - 1, 1, "cpu read (single load)");
    }
    m->reads++;
}

static void op_memset(model *m) {
    object *o = pick(m, 1);
    if (!o) return;
    size_t off, len;
    pick_range(m, o->size, &off, &len);
    if (chance(m, 3)) len = 0;
    int v = (int)below(m, 256);
    trace(m, "adsm_memset object %u [%zu, %zu) = 0x%02x", o->id, off, off + len, v);
    CHECK_OK(m, adsm_memset(o->p + off, v, len));
    memset(o->ref + off, v, len);
}

static void op_memcpy(model *m) {
    unsigned kind = (unsigned)below(m, 4);
    size_t off, len;
    if (kind == 0) { /* object -> object */
        object *d = pick(m, 1), *s = pick(m, 0);
        if (!d || !s || d == s) return;
        size_t soff, doff;
        pick_range(m, s->size < d->size ? s->size : d->size, &off, &len);
        soff = below(m, s->size - len + 1);
        doff = below(m, d->size - len + 1);
        trace(m, "adsm_memcpy object %u [%zu, +%zu) <- object %u [%zu, +%zu) (src busy %d)", d->id, doff, len,
              s->id, soff, len, s->busy);
        CHECK_OK(m, adsm_memcpy(d->p + doff, s->p + soff, len));
        memcpy(d->ref + doff, s->ref + soff, len);
    } else if (kind == 1) { /* plain -> object */
        object *d = pick(m, 1);
        if (!d) return;
        pick_range(m, d->size, &off, &len);
        size_t src = below(m, SCRATCH_SIZE - len + 1);
        trace(m, "adsm_memcpy object %u [%zu, %zu) <- plain", d->id, off, off + len);
        CHECK_OK(m, adsm_memcpy(d->p + off, m->scratch + src, len));
        memcpy(d->ref + off, m->scratch + src, len);
    } else if (kind == 2) { /* object -> plain */
        object *s = pick(m, 0);
        if (!s) return;
        pick_range(m, s->size, &off, &len);
        size_t dst = below(m, SCRATCH_SIZE - len + 1);
        trace(m, "adsm_memcpy plain <- object %u [%zu, %zu) (busy %d)", s->id, off, off + len, s->busy);
        CHECK_OK(m, adsm_memcpy(m->plain + dst, s->p + off, len));
        if (memcmp(m->plain + dst, s->ref + off, len) != 0) {
            size_t i = 0;
            while (m->plain[dst + i] == s->ref[off + i]) i++;
            FAIL(m, "adsm_memcpy to plain memory from object %u [%zu, %zu): byte %zu is 0x%02x, expected 0x%02x",
                 s->id, off, off + len, off + i, m->plain[dst + i], s->ref[off + i]);
        }
    } else { /* within one object, non-overlapping */
        object *o = pick(m, 1);
        if (!o || o->size < 2) return;
        len = 1 + below(m, (large(o->size) ? MAX_SIZE : o->size) / 2);
        size_t a = below(m, o->size - 2 * len + 1);
        size_t gap = below(m, o->size - 2 * len - a + 1);
        size_t b = a + len + gap;
        size_t doff = chance(m, 50) ? a : b, soff = doff == a ? b : a;
        trace(m, "adsm_memcpy object %u [%zu, +%zu) <- [%zu, +%zu)", o->id, doff, len, soff, len);
        CHECK_OK(m, adsm_memcpy(o->p + doff, o->p + soff, len));
        memcpy(o->ref + doff, o->ref + soff, len);
    }
}

static void op_sync(model *m) {
    trace(m, "adsm_sync");
    CHECK_OK(m, adsm_sync());
    for (size_t i = 0; i < m->n; i++) m->objs[i].busy = BUSY_NONE;
    m->in_flight = 0;
    m->syncs++;
}

/* A kernel over up to four random objects; `writes`, when not NULL, among them as an output, at
 * least one byte of it: its window in *woff and *wlen (either NULL). */
static void op_kernel_writing(model *m, object *writes, size_t *woff, size_t *wlen) {
    uint8_t *o[4] = {0}, *x[4] = {0}, *ro[4] = {0}, *rx[4] = {0};
    const uint8_t *in[4] = {0}, *rin[4] = {0};
    mix_info info;
    memset(&info, 0, sizeof info);
    info.seed = (uint32_t)splitmix64(&m->rng);
    if (chance(m, 30)) {
        info.skip_mod = 2 + (uint32_t)below(m, 15);
        info.skip_rem = (uint32_t)below(m, info.skip_mod);
    }
    size_t want = below(m, 5), chosen[4], nchosen = 0, nthreads = 1;
    unsigned no = 0, nx = 0, ni = 0;
    int roles[4];
    char desc[160];
    int dl = 0;
    desc[0] = 0;
    if (writes && want == 0) want = 1;
    for (size_t t = 0; t < 8 && nchosen < want && nchosen < m->n; t++) {
        size_t i = writes && t == 0 ? (size_t)(writes - m->objs) : below(m, m->n);
        int dup = 0;
        for (size_t k = 0; k < nchosen; k++) dup |= chosen[k] == i;
        if (dup) continue;
        object *ob = &m->objs[i];
        size_t off = chance(m, large(ob->size) ? 90 : 25) ? below(m, ob->size) : 0, rest = ob->size - off;
        if (rest > MAX_SIZE) rest = MAX_SIZE; /* a large object: a window of it */
        size_t len = chance(m, 60) ? rest : below(m, rest + 1);
        int role = writes == ob ? ROLE_OUT + (int)below(m, 2) : ROLE_IN + (int)below(m, 3);
        if (writes == ob) {
            if (len == 0) len = 1; /* off < size */
            if (woff) *woff = off;
            if (wlen) *wlen = len;
        }
        if (role == ROLE_IN) {
            if (len == 0) len = 1;
            in[ni] = ob->p + off;
            rin[ni] = ob->ref + off;
            info.ilen[ni++] = len;
        } else if (role == ROLE_OUT) {
            o[no] = ob->p + off;
            ro[no] = ob->ref + off;
            info.olen[no++] = len;
        } else {
            x[nx] = ob->p + off;
            rx[nx] = ob->ref + off;
            info.xlen[nx++] = len;
        }
        if (role != ROLE_IN && len > nthreads) nthreads = len;
        roles[nchosen] = role;
        chosen[nchosen++] = i;
        if (dl < (int)sizeof desc - 40)
            dl += snprintf(desc + dl, sizeof desc - (size_t)dl, " %s %u+%zu/%zu",
                           role == ROLE_IN ? "IN" : role == ROLE_OUT ? "OUT" : "INOUT", ob->id, off, len);
    }
    static const uint32_t tpbs[] = {1, 32, 64, 256, 1024};
    uint32_t tpb = tpbs[below(m, 5)];
    if (tpb == 1 && nthreads > 4096) tpb = 256;
    uint32_t blocks = (uint32_t)((nthreads + tpb - 1) / tpb) + (uint32_t)below(m, 2);
    trace(m, "kernel mix seed %u skip %u/%u grid %ux%u:%s", info.seed, info.skip_rem, info.skip_mod, blocks, tpb,
          desc);
    /* several devices: a random one, or adsm's choice (where most of the written bytes are) */
    int dev = m->v->devices > 1 && chance(m, 75) ? (int)below(m, m->v->devices) : ADSM_ANY_DEVICE;
    trace(m, "  on device %d", dev);
    adsm_result lr = ADSM_CALL_ON(dev, mix, adsm_grid_1d(blocks, tpb), o[0], o[1], o[2], o[3], x[0], x[1], x[2],
                                  x[3], in[0], in[1], in[2], in[3], info);
    if (lr == ADSM_ERROR_DEVICE_OUT_OF_MEMORY && m->v->emu_memory) { /* its objects together do not fit */
        trace(m, "  refused: %s", adsm_last_error());
        m->refused++;
        return; /* nothing ran: the model stays as it is, and so must every byte */
    }
    CHECK_OK(m, lr);
    m->launches++;
    m->in_flight = 1;
    /* the model runs the same threads */
    mix_range(0, (size_t)blocks * tpb, ro, rx, rin, &info);
    for (size_t k = 0; k < nchosen; k++) {
        object *ob = &m->objs[chosen[k]];
        int busy = roles[k] == ROLE_IN ? BUSY_READ : BUSY_WRITE;
        if (busy > ob->busy) ob->busy = busy;
    }
    /* batch copies every object back at sync, so sync at once; the others sync now and then */
    if ((m->v->protocol == ADSM_PROTOCOL_BATCH && m->v->backend != ADSM_BACKEND_HOST) || chance(m, 40)) op_sync(m);
}

static void op_kernel(model *m) { op_kernel_writing(m, NULL, NULL, NULL); }

/* "large" variants: once at least, whatever the random operations did, a CPU store into a kernel's
 * output in a large object whose pages wait for their first use; the final check reads it. */
static void store_into_large_output(model *m) {
    while (m->n >= MAX_OBJS) op_free(m);
    object *o = alloc_object(m, LARGE_MIN);
    size_t off = 0, len = 0;
    op_kernel_writing(m, o, &off, &len);
    op_sync(m);
    size_t at = off + below(m, len);
    trace(m, "cpu store object %u byte %zu (into the kernel's output)", o->id, at);
    ((volatile uint8_t *)o->p)[at] = 0x5a;
    o->ref[at] = 0x5a;
    m->writes++;
}

static void op_verify_all(model *m) {
    trace(m, "verify every readable object");
    for (size_t i = 0; i < m->n; i++)
        if (can_read(m, &m->objs[i])) check_range(m, &m->objs[i], 0, m->objs[i].size, "full check");
}

/* ---- a hang watchdog ------------------------------------------------------------------------ */
typedef struct watchdog {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int done;
    double seconds;
    model *m;
} watchdog;

static void *watchdog_main(void *arg) {
    watchdog *w = (watchdog *)arg;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)w->seconds;
    pthread_mutex_lock(&w->mutex);
    while (!w->done) {
        if (pthread_cond_timedwait(&w->cond, &w->mutex, &ts) == ETIMEDOUT && !w->done) {
            fprintf(stderr, "test_model [%s]: no progress after %.0f s: hung at operation #%zu "
                            "(ADSM_MODEL_SEED=%" PRIu64 "): %s\n",
                    w->m->v->name, w->seconds, __atomic_load_n(&w->m->op, __ATOMIC_RELAXED), w->m->base_seed,
                    w->m->trace[__atomic_load_n(&w->m->op, __ATOMIC_RELAXED) % TRACE_LEN]);
            abort();
        }
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

/* ---- the driver ----------------------------------------------------------------------------- */
static size_t ops_for(size_t default_ops) {
    const char *e = getenv("ADSM_MODEL_OPS");
    if (!e || !*e) return default_ops;
    char *end;
    if (*e == 'x' || *e == 'X') {
        double k = strtod(e + 1, &end);
        return k > 0 ? (size_t)(default_ops * k) : default_ops;
    }
    double k = strtod(e, &end);
    if (*end == 'x' || *end == 'X') return k > 0 ? (size_t)(default_ops * k) : default_ops;
    return k > 0 ? (size_t)k : default_ops;
}

static uint64_t seed_for(void) {
    const char *e = getenv("ADSM_MODEL_SEED");
    if (!e || !*e) return 20260101;
    if (strcmp(e, "random") == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid() << 40;
    }
    return strtoull(e, NULL, 0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Small devices: launches made room by evicting objects (each device's stats count them), and
 * most of them fitted. */
static void check_capacity(model *m) {
    uint64_t evictions = 0;
    for (int d = 0; d < adsm_device_count(); d++) {
        adsm_device_stats ds;
        CHECK_OK(m, adsm_get_device_stats(d, &ds));
        evictions += ds.evictions;
    }
    cr_log_info("[%s] %" PRIu64 " objects evicted from devices, %" PRIu64 " launches refused", m->v->name, evictions,
                m->refused);
    cr_expect_gt(evictions, 0, "[%s] devices of %zu bytes never evicted anything", m->v->name, m->v->emu_memory);
    cr_expect_lt(m->refused, m->launches, "[%s] most launches should fit", m->v->name);
}

static void run_model(const variant *v) {
    static model mm;
    model *m = &mm;
    memset(m, 0, sizeof *m);
    m->v = v;
    m->base_seed = seed_for();
    m->rng = m->base_seed;
    for (const char *c = v->name; *c; c++) m->rng = m->rng * 1099511628211ull + (uint8_t)*c; /* per test */
    m->ops = ops_for(v->default_ops);
    m->scratch = (uint8_t *)malloc(SCRATCH_SIZE);
    m->plain = (uint8_t *)malloc(SCRATCH_SIZE);
    cr_assert(m->scratch && m->plain);
    fill_random(m, m->scratch, SCRATCH_SIZE);

    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = v->backend;
    cfg.protocol = v->protocol;
    cfg.block_size = v->block_size;
    cfg.rolling_size = v->rolling_size;
    cfg.write_through = v->write_through;
    cfg.drop_replicas = v->drop_replicas;
    cfg.emu_memory = v->emu_memory;
    cfg.streams = v->streams;
#ifdef TEST_ON_CUDA_DOUBLE
    cuda_double_use();
    /* every stream operation of the double late: a missing event dependency shows as a wrong byte */
    if (strstr(v->name, "delayed")) setenv("CUDADOUBLE_DELAY_US", "200", 1);
    /* several GPUs of the double, each of emu_memory bytes; "nopeer": without peer access */
    char count[16], bytes[32];
    snprintf(count, sizeof count, "%u", v->devices ? v->devices : 1);
    setenv("CUDADOUBLE_DEVICES", count, 1);
    if (v->devices > 1) cfg.devices = "all";
    if (v->emu_memory) snprintf(bytes, sizeof bytes, "%zu", v->emu_memory), setenv("CUDADOUBLE_MEMORY", bytes, 1);
    if (strstr(v->name, "nopeer")) setenv("CUDADOUBLE_NO_PEER", "1", 1);
    if (v->protocol == ADSM_PROTOCOL_HMM) setenv("CUDADOUBLE_PAGEABLE", "1", 1); /* the GPU reaches host pages */
#else
    cfg.emu_devices = v->devices;
    /* "translated": each emulated device's memory at addresses of its own (pointer arguments and
     * launch ranges moved there at each launch) */
    setenv("ADSM_EMU_SAME_ADDRESS", strstr(v->name, "translated") ? "0" : "1", 1);
#endif
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "adsm_init: %s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), v->block_size);
#ifdef TEST_ON_CUDA_DOUBLE
    const adsm_kernel_desc *const kernels[] = {adsm__kernel_mix()};
    cr_assert_eq(cuda_double_attach(kernels, 1), 0, "attaching to the driver double: %s", adsm_last_error());
#endif
    cr_log_info("[%s] backend %s, protocol %s, block size %zu, %zu operations, ADSM_MODEL_SEED=%" PRIu64, v->name,
                adsm_backend_name(), adsm_protocol_name(), adsm_block_size(), m->ops, m->base_seed);

    watchdog w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mutex, NULL);
    pthread_cond_init(&w.cond, NULL);
    w.m = m;
    w.seconds = 60.0 + (double)m->ops / 200.0;
    cr_assert_eq(pthread_create(&w.thread, NULL, watchdog_main, &w), 0);

    /* batch copies every object both ways at each call: fewer calls keep its run time in line */
    unsigned kernel_cut = v->protocol == ADSM_PROTOCOL_BATCH && v->backend != ADSM_BACKEND_HOST ? 70 : 0;
    double t0 = now_s();
    for (m->op = 0; m->op < m->ops; __atomic_add_fetch(&m->op, 1, __ATOMIC_RELAXED)) {
        m->trace[m->op % TRACE_LEN][0] = 0;
        unsigned r = (unsigned)below(m, 1000);
        if (m->n == 0 || (r < 60 && m->n < MAX_OBJS)) op_alloc(m);
        else if (r < 100) op_free(m);
        else if (r < 330) op_cpu_write(m);
        else if (r < 530) op_cpu_read(m);
        else if (r < 620) op_memset(m);
        else if (r < 760) op_memcpy(m);
        else if (r < 900 - kernel_cut) op_kernel(m);
        else if (r < 980) op_sync(m);
        else op_verify_all(m);
    }
    if (strstr(v->name, "large")) store_into_large_output(m);
    op_sync(m);
    op_verify_all(m);
    double elapsed = now_s() - t0;

    adsm_stats st;
    CHECK_OK(m, adsm_get_stats(&st));
    cr_log_info("[%s] %.2f s: %" PRIu64 " launches, %" PRIu64 " syncs, %" PRIu64 " allocs, %" PRIu64
                " frees; h2d %" PRIu64 " B in %" PRIu64 ", d2h %" PRIu64 " B in %" PRIu64 ", faults %" PRIu64
                "r/%" PRIu64 "w, %" PRIu64 " evictions, %" PRIu64 " reads of objects in flight",
                v->name, elapsed, m->launches, m->syncs, m->allocs, m->frees, st.h2d_bytes, st.h2d_copies,
                st.d2h_bytes, st.d2h_copies, st.read_faults, st.write_faults, st.evictions,
                m->kernel_reads_in_flight);
    check_stats_objects(m);
    if (v->emu_memory) check_capacity(m);
    cr_expect_eq(st.launches, m->launches, "[%s] launches: stats %" PRIu64 ", model %" PRIu64, v->name,
                 st.launches, m->launches);
#ifdef TEST_ON_CUDA_DOUBLE
    /* the large objects' point of being here: some stores kept their pages waiting (where pages
     * wait for first use at all: shared addresses with the alias, ADSM_HOST_ON_FIRST_USE; under
     * rolling, whose units are blocks: lazy's unit is the whole object, which a store fetches) */
    if (strstr(v->name, "large"))
        cr_log_info("[%s] %" PRIu64 " stores kept pages waiting, %" PRIu64 " objects' pages made on first use", v->name,
                    adsm__rt.sparse_stores, adsm__rt.first_uses);
    if (strstr(v->name, "large") && v->protocol == ADSM_PROTOCOL_ROLLING && adsm__rt.host_alias &&
        adsm__rt.cfg.host_on_first_use)
        cr_expect_gt(adsm__rt.sparse_stores, 0, "[%s] no store went on without making a large object's pages",
                     v->name);
#endif
    if (strstr(v->name, "translated") && m->launches)
        cr_expect_gt(st.translated_args, 0, "[%s] no pointer argument was moved to device addresses", v->name);
    if (v->backend == ADSM_BACKEND_HOST) {
        cr_expect_eq(st.h2d_bytes + st.d2h_bytes, 0, "[%s] the host backend copied data", v->name);
        cr_expect_eq(st.read_faults + st.write_faults, 0, "[%s] the host backend took faults", v->name);
    } else if (unified(m)) { /* the driver moves the data; adsm sees only its prefetches */
        cr_expect_eq(st.read_faults + st.write_faults, 0, "[%s] faults under unified memory", v->name);
        cr_expect_eq(st.evictions, 0, "[%s] evictions under unified memory", v->name);
        if (v->protocol != ADSM_PROTOCOL_UM_PREFETCH)
            cr_expect_eq(st.h2d_bytes + st.d2h_bytes, 0, "[%s] %s prefetched", v->name, adsm_protocol_name());
        else if (m->ops >= 1000)
            cr_expect_gt(st.h2d_bytes, 0, "[%s] um-prefetch prefetched nothing", v->name);
    } else if (m->ops >= 1000) {
        cr_expect_gt(st.h2d_bytes, 0, "[%s] nothing went to the device", v->name);
        cr_expect_gt(st.d2h_bytes, 0, "[%s] nothing came back from the device", v->name);
        if (v->protocol == ADSM_PROTOCOL_BATCH) {
            cr_expect_eq(st.read_faults + st.write_faults, 0, "[%s] batch took faults", v->name);
        } else {
            cr_expect_gt(st.read_faults, 0, "[%s] no read faults", v->name);
            cr_expect_gt(st.write_faults, 0, "[%s] no write faults", v->name);
        }
        if (v->protocol == ADSM_PROTOCOL_ROLLING && v->rolling_size)
            cr_expect_gt(st.evictions, 0, "[%s] rolling size %zu but no evictions", v->name, v->rolling_size);
        if (v->protocol != ADSM_PROTOCOL_ROLLING)
            cr_expect_eq(st.evictions, 0, "[%s] evictions outside rolling", v->name);
    }

    pthread_mutex_lock(&w.mutex);
    w.done = 1;
    pthread_cond_signal(&w.cond);
    pthread_mutex_unlock(&w.mutex);
    pthread_join(w.thread, NULL);

    while (m->n > 0) op_free(m);
    adsm_shutdown();
    free(m->scratch);
    free(m->plain);
}

/* ---- the tests ---------------------------------------------------------------------------------- */
#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define MODEL_TEST(tname, backend, protocol, bs, rs, ops)                                           \
    Test(model, tname) {                                                                            \
        static const variant v = {#tname, backend, protocol, bs, rs, ops};                          \
        run_model(&v);                                                                              \
    }

/* one device running ADSM_STREAMS kernels at once, ordered by the kernels' conflicts */
#define MODEL_TEST_STREAMS(tname, backend, protocol, bs, rs, ops, streams)                          \
    Test(model, tname) {                                                                            \
        static const variant v = {#tname, backend, protocol, bs, rs, ops, 0, 0, 0, 0, streams};       \
        run_model(&v);                                                                              \
    }

#ifdef TEST_ON_CUDA_DOUBLE
/* the cuda backend over the driver double: ~20k operations per protocol */
MODEL_TEST(cuda_batch_4k, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_BATCH, 4 * KIB, 0, 10000)
MODEL_TEST(cuda_batch_64k, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_BATCH, 64 * KIB, 0, 10000)
MODEL_TEST(cuda_lazy_4k, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 10000)
MODEL_TEST(cuda_lazy_2m, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_LAZY, 2 * MIB, 0, 10000)
MODEL_TEST(cuda_rolling_4k_rs3, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 10000)
MODEL_TEST(cuda_rolling_64k, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 10000)
MODEL_TEST(cuda_rolling_4k_rs3_delayed, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 3000)
MODEL_TEST(cuda_lazy_64k_delayed, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 3000)
/* objects of 16-24 MiB beside the small ones: CPU stores into kernels' outputs there go on without
 * making the objects' host pages (protocol.h, adsm__sparse_use); rolling at small blocks maps the
 * program's view 4 KiB at a time, where the CPU goes (host_pages.h) */
MODEL_TEST(cuda_lazy_64k_large, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 2500)
MODEL_TEST(cuda_rolling_256k_large, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 256 * KIB, 0, 2500)
MODEL_TEST(cuda_rolling_4k_rs3_large, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 2500)
/* CUDA managed memory (the double's: host pages every device reaches), the driver's coherence */
MODEL_TEST(cuda_um, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_UM, 2 * MIB, 0, 5000)
MODEL_TEST(cuda_um_prefetch, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_UM_PREFETCH, 2 * MIB, 0, 5000)
MODEL_TEST(cuda_um_prefetch_delayed, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_UM_PREFETCH, 2 * MIB, 0, 2000)
/* plain host memory the double's GPU reaches (pageable memory access, as HMM gives) */
MODEL_TEST(cuda_hmm, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_HMM, 2 * MIB, 0, 5000)
/* several GPUs of the double: kernels on random GPUs, replicas, peer copies; every policy; GPUs
 * of 16 MiB (8 granules: objects take whole granules there) that must evict */
#define MODEL_TEST_GPUS(tname, protocol, bs, rs, ops, devices, through, drop, memory)                \
    Test(model, tname) {                                                                            \
        static const variant v = {#tname, ADSM_BACKEND_CUDA, protocol, bs, rs, ops, devices, through, drop, memory, 0}; \
        run_model(&v);                                                                              \
    }
MODEL_TEST_GPUS(cuda3_lazy_64k, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 5000, 3, 0, 0, 0)
MODEL_TEST_GPUS(cuda2_rolling_4k_rs3, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 5000, 2, 0, 0, 0)
MODEL_TEST_GPUS(cuda2_rolling_64k_nopeer, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 4000, 2, 0, 0, 0)
MODEL_TEST_GPUS(cuda3_rolling_64k_through_drop, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 4000, 3, 1, 1, 0)
MODEL_TEST_GPUS(cuda2_lazy_4k_through, ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 4000, 2, 1, 0, 0)
MODEL_TEST_GPUS(cuda3_lazy_64k_16m, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 5000, 3, 0, 0, 16 * MIB)
MODEL_TEST_GPUS(cuda2_rolling_4k_rs3_16m_drop, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 5000, 2, 0, 1, 16 * MIB)
MODEL_TEST_GPUS(cuda2_lazy_64k_delayed, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 2000, 2, 0, 0, 0)
/* one GPU running 4 kernels at once (CUDA streams) */
MODEL_TEST_STREAMS(cuda_lazy_64k_streams4, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 5000, 4)
MODEL_TEST_STREAMS(cuda_rolling_4k_rs3_streams4_delayed, ADSM_BACKEND_CUDA, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 2000, 4)
#else
/* ~100k operations per protocol: 3 x 34k for batch and lazy, 4 x 25k for rolling */
MODEL_TEST(emu_batch_4k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, 4 * KIB, 0, 34000)
MODEL_TEST(emu_batch_64k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, 64 * KIB, 0, 34000)
MODEL_TEST(emu_batch_2m, ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, 2 * MIB, 0, 34000)
MODEL_TEST(emu_lazy_4k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 34000)
MODEL_TEST(emu_lazy_64k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 34000)
MODEL_TEST(emu_lazy_2m, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 2 * MIB, 0, 34000)
MODEL_TEST(emu_rolling_4k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0, 25000)
MODEL_TEST(emu_rolling_4k_rs3, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 25000)
MODEL_TEST(emu_rolling_64k_rs3, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 64 * KIB, 3, 25000)
MODEL_TEST(emu_rolling_64k, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 25000)
MODEL_TEST(emu_rolling_2m, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 2 * MIB, 0, 25000)
MODEL_TEST(host, ADSM_BACKEND_HOST, ADSM_PROTOCOL_ROLLING, 4 * KIB, 0, 20000)
/* one emulated device running 4 kernels at once */
MODEL_TEST_STREAMS(emu_lazy_64k_streams4, ADSM_BACKEND_EMU, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 15000, 4)
MODEL_TEST_STREAMS(emu_rolling_4k_rs3_streams4, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 15000, 4)
/* device memory at addresses of their own, one device and three */
MODEL_TEST(emu_rolling_4k_rs3_translated, ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 8000)
MODEL_TEST(emu_batch_64k_translated, ADSM_BACKEND_EMU, ADSM_PROTOCOL_BATCH, 64 * KIB, 0, 5000)
/* several emulated devices: kernels on random devices, replicas, device-to-device copies */
#define MODEL_TEST_DEVICES(tname, protocol, bs, rs, ops, devices)                                   \
    MODEL_TEST_POLICY(tname, protocol, bs, rs, ops, devices, 0, 0)
#define MODEL_TEST_POLICY(tname, protocol, bs, rs, ops, devices, through, drop)                     \
    Test(model, tname) {                                                                            \
        static const variant v = {#tname, ADSM_BACKEND_EMU, protocol, bs, rs, ops, devices, through, drop}; \
        run_model(&v);                                                                              \
    }
MODEL_TEST_DEVICES(emu3_lazy_64k, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 20000, 3)
MODEL_TEST_DEVICES(emu3_rolling_4k_rs3, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 20000, 3)
MODEL_TEST_DEVICES(emu2_rolling_64k, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 20000, 2)
MODEL_TEST_DEVICES(emu3_lazy_64k_translated, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 8000, 3)
/* ... with the other copy policies: write-through, and read replicas dropped after each use */
MODEL_TEST_POLICY(emu3_rolling_64k_through_drop, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0, 15000, 3, 1, 1)
MODEL_TEST_POLICY(emu2_lazy_4k_through, ADSM_PROTOCOL_LAZY, 4 * KIB, 0, 15000, 2, 1, 0)
MODEL_TEST_POLICY(emu2_rolling_4k_rs3_drop, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 15000, 2, 0, 1)
/* ... with devices of 1 MiB: launches evict what other launches left there */
#define MODEL_TEST_CAPACITY(tname, protocol, bs, rs, ops, devices, memory)                          \
    Test(model, tname) {                                                                            \
        static const variant v = {#tname, ADSM_BACKEND_EMU, protocol, bs, rs, ops, devices, 0, 0, memory, 0}; \
        run_model(&v);                                                                              \
    }
MODEL_TEST_CAPACITY(emu3_lazy_64k_1m, ADSM_PROTOCOL_LAZY, 64 * KIB, 0, 15000, 3, 1 * MIB)
MODEL_TEST_CAPACITY(emu2_rolling_4k_rs3_1m, ADSM_PROTOCOL_ROLLING, 4 * KIB, 3, 15000, 2, 1 * MIB)
/* ... and everything at once: small devices, write-through, dropped replicas */
Test(model, emu3_rolling_64k_1m_through_drop) {
    static const variant v = {"emu3_rolling_64k_1m_through_drop", ADSM_BACKEND_EMU, ADSM_PROTOCOL_ROLLING, 64 * KIB, 0,
                              10000, 3, 1, 1, 1 * MIB, 0};
    run_model(&v);
}
#endif
