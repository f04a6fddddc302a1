/* fuzz/fuzz_protocol.c -- libFuzzer target for the coherence protocols on the emu backend.
 *
 * The runtime is initialised once per process (LLVMFuzzerInitialize): emu backend, block size 4096
 * (ADSM_FUZZ_BLOCK_SIZE), protocol from ADSM_FUZZ_PROTOCOL (batch | lazy | rolling; default
 * rolling), rolling size from ADSM_FUZZ_ROLLING_SIZE (default 0, adaptive). Each input is decoded
 * into operations on at most MAX_OBJS small shared objects (at most MAX_SIZE bytes; some of them
 * "safe" objects): alloc, free, CPU writes and reads of ranges, adsm_memset, adsm_memcpy (object to
 * object, plain to object, object to plain, within an object), a kernel call with OUT / INOUT / IN
 * sets, adsm_sync, a full verification, and error probes (interior and double free, adsm_alloc(0),
 * a kernel given a plain pointer, a kernel that writes its IN parameter). Every operation is
 * replayed on a reference model (malloc'd shadow buffers, the kernel run on the CPU) and every byte
 * the CPU reads from a shared object is compared with it. Any mismatch or unexpected result aborts
 * after printing the recent operations. At the end of each input everything is synced, verified
 * and freed, so inputs are independent.
 *
 * The rules of tests/test_model.c keep the model valid (the documented programming model):
 *   - after a call and before adsm_sync the CPU leaves the objects of kernels in flight alone,
 *     except for reads of OUT/INOUT objects under lazy and rolling (the runtime waits);
 *   - under batch every call is followed at once by adsm_sync.
 *
 * ADSM_FUZZ_TRACE=1 prints every decoded operation (handy to read a crash input:
 * `ADSM_FUZZ_TRACE=1 ./fuzz_protocol crash-...`). ADSM_FUZZ_NO_PLAIN_KERNEL=1 turns the
 * "kernel given a plain pointer" probe off, to fuzz past the known bug it finds (see
 * fuzz/repro/refused_launch.c).
 *
 * Under ASan run with ASAN_OPTIONS=handle_segv=0: adsm resolves CPU accesses to protected shared
 * memory in its own SIGSEGV handler (fuzz/run.sh sets it).
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -fno-sanitize=null -g -O1 -I. \
 *            fuzz/fuzz_protocol.c -pthread -ldl */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <stdarg.h>
#include "fuzz/fuzz_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OBJS 6
#define MAX_SIZE ((size_t)40 << 10)
#define MAX_OPS 160
#define PLAIN_SIZE (MAX_SIZE * 2)

/* ---- the kernel --------------------------------------------------------------------------- */
typedef struct kinfo {
    size_t olen[2], xlen[2], ilen[2]; /* bytes each slot covers from its pointer */
    uint32_t seed, skip_mod, skip_rem; /* threads i with i % skip_mod == skip_rem write nothing */
} kinfo;

/* Thread i reads bytes of the IN slots, writes byte i of the OUT slots, and reads and writes byte i
 * of the INOUT slots. Threads are independent (IN objects are never OUT/INOUT in the same call). */
static void mix_thread(size_t i, uint8_t *const o[2], uint8_t *const x[2], const uint8_t *const in[2],
                       const kinfo *k) {
    uint8_t acc = (uint8_t)(k->seed + i * 131u + (i >> 8) * 7u);
    for (unsigned s = 0; s < 2; s++)
        if (in[s] && k->ilen[s]) acc = (uint8_t)(acc * 3u + in[s][(i * (2 * s + 1) + 977u * s) % k->ilen[s]]);
    if (k->skip_mod && i % k->skip_mod == k->skip_rem) return;
    for (unsigned s = 0; s < 2; s++)
        if (o[s] && i < k->olen[s]) o[s][i] = (uint8_t)(acc + 29u * s + (uint8_t)(i >> 3));
    for (unsigned s = 0; s < 2; s++)
        if (x[s] && i < k->xlen[s]) x[s][i] = (uint8_t)(x[s][i] * 5u + acc + s + 1u);
}

ADSM_KERNEL(fz_mix, ADSM_OUT(uint8_t, o0), ADSM_OUT(uint8_t, o1), ADSM_INOUT(uint8_t, x0), ADSM_INOUT(uint8_t, x1),
            ADSM_IN(uint8_t, i0), ADSM_IN(uint8_t, i1), ADSM_VALUE(kinfo, info));

void fz_mix(adsm_grid g, uint8_t *o0, uint8_t *o1, uint8_t *x0, uint8_t *x1, const uint8_t *i0, const uint8_t *i1,
            kinfo info) {
    uint8_t *const o[2] = {o0, o1}, *const x[2] = {x0, x1};
    const uint8_t *const in[2] = {i0, i1};
    ADSM_FOR_EACH_THREAD(g, i) mix_thread(i, o, x, in, &info);
}

/* A kernel that writes the object it may only read: the launch must fail at sync. */
ADSM_KERNEL(fz_bad, ADSM_IN(uint8_t, in), ADSM_VALUE(size_t, at));

void fz_bad(adsm_grid g, const uint8_t *in, size_t at) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i == 0) ((volatile uint8_t *)in)[at] = (uint8_t)(in[at] + 1);
    }
}

/* ---- model ------------------------------------------------------------------------------------ */
enum { BUSY_NONE = 0, BUSY_READ, BUSY_WRITE };

typedef struct object {
    uint8_t *p, *ref;
    size_t size;
    int busy, safe;
    unsigned id;
} object;

static object objs[MAX_OBJS];
static size_t nobjs;
static unsigned next_id;
static int in_flight;
static adsm_protocol_kind protocol;
static size_t block;
static uint8_t scratch[PLAIN_SIZE], plain[PLAIN_SIZE];

/* ---- trace of recent operations, printed on failure ---------------------------------------- */
#define TRACE_LEN 32
static char trace_buf[TRACE_LEN][200];
static size_t op_no;
static int trace_all; /* ADSM_FUZZ_TRACE=1: print every operation (to read a reproducer) */
static int no_plain_kernel; /* ADSM_FUZZ_NO_PLAIN_KERNEL=1: skip the refused-launch probe */

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...) {
    char *t = trace_buf[op_no % TRACE_LEN];
    int k = snprintf(t, sizeof trace_buf[0], "#%zu ", op_no);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t + k, sizeof trace_buf[0] - (size_t)k, fmt, ap);
    va_end(ap);
    if (trace_all) fprintf(stderr, "  %s\n", t);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "fuzz_protocol [%s, block %zu]: last operations:\n", adsm_protocol_name(), block);
    size_t first = op_no + 1 > TRACE_LEN ? op_no + 1 - TRACE_LEN : 0;
    for (size_t i = first; i <= op_no; i++)
        if (trace_buf[i % TRACE_LEN][0]) fprintf(stderr, "  %s\n", trace_buf[i % TRACE_LEN]);
    fprintf(stderr, "fuzz_protocol: FAILED at operation #%zu: ", op_no);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#define EXPECT(call, want)                                                                                  \
    do {                                                                                                    \
        adsm_result r_ = (call);                                                                            \
        if (r_ != (want))                                                                                   \
            fail("%s returned %s (%s), expected %s", #call, adsm_result_string(r_), adsm_last_error(),      \
                 adsm_result_string(want));                                                                 \
    } while (0)

static void check_range(object *o, size_t off, size_t len, const char *what) {
    if (len == 0 || memcmp(o->p + off, o->ref + off, len) == 0) return;
    size_t i = off;
    while (i < off + len && o->p[i] == o->ref[i]) i++;
    size_t j = i;
    while (j < off + len && o->p[j] != o->ref[j]) j++;
    fail("%s: object %u (%zu bytes%s at %p) differs from the model at byte %zu (checked [%zu, %zu)): got 0x%02x, "
         "expected 0x%02x, %zu bytes differ; block state '%c'",
         what, o->id, o->size, o->safe ? ", safe" : "", (void *)o->p, i, off, off + len, o->p[i], o->ref[i], j - i,
         adsm_block_state(o->p + i) ? adsm_block_state(o->p + i) : '?');
}

static int tracked(void) { return protocol != ADSM_PROTOCOL_BATCH; }
static int can_write(const object *o) { return o->busy == BUSY_NONE; }
static int can_read(const object *o) { return o->busy == BUSY_NONE || (o->busy == BUSY_WRITE && tracked()); }

/* ---- input ------------------------------------------------------------------------------------ */

/* The object in slot `k` (mod the live count) that satisfies the rule, or NULL. */
static object *pick(uint8_t k, int write) {
    if (!nobjs) return NULL;
    for (size_t t = 0; t < nobjs; t++) {
        object *o = &objs[(k + t) % nobjs];
        if (write ? can_write(o) : can_read(o)) return o;
    }
    return NULL;
}

/* A non-empty range of an object of `size` bytes, biased to block boundaries. */
static void pick_range(reader *r, size_t size, size_t *off, size_t *len) {
    size_t nblocks = (size + block - 1) / block;
    switch (rd8(r) % 5) {
    case 0: /* anywhere */
        *off = rd16(r) % size;
        *len = 1 + rd16(r) % (size - *off);
        break;
    case 1: /* everything */
        *off = 0;
        *len = size;
        break;
    case 2: { /* whole blocks (the last one may be short) */
        size_t b = rd8(r) % nblocks, k = 1 + rd8(r) % 3;
        *off = b * block;
        *len = ((b + k) * block < size ? (b + k) * block : size) - *off;
        break;
    }
    case 3: { /* across a block boundary */
        size_t b = (1 + rd8(r) % nblocks) * block;
        if (b >= size) b = size - 1;
        size_t back = rd8(r) % 64;
        *off = back > b ? 0 : b - back;
        *len = 1 + rd8(r) % 128;
        if (*len > size - *off) *len = size - *off;
        break;
    }
    default: /* a few bytes */
        *off = rd16(r) % size;
        *len = 1 + rd8(r) % 16;
        if (*len > size - *off) *len = size - *off;
        break;
    }
}

/* ---- operations ------------------------------------------------------------------------------- */
static void op_sync(void) {
    trace("adsm_sync");
    EXPECT(adsm_sync(), ADSM_OK);
    for (size_t i = 0; i < nobjs; i++) objs[i].busy = BUSY_NONE;
    in_flight = 0;
}

static void check_stats(void) {
    adsm_stats st;
    EXPECT(adsm_get_stats(&st), ADSM_OK);
    uint64_t bytes = 0;
    for (size_t i = 0; i < nobjs; i++) bytes += objs[i].size;
    if (st.objects != nobjs || st.object_bytes != bytes)
        fail("stats: %llu objects of %llu bytes, the model has %zu of %llu", (unsigned long long)st.objects,
             (unsigned long long)st.object_bytes, nobjs, (unsigned long long)bytes);
}

static void op_alloc(reader *r, uint8_t op) {
    if (nobjs == MAX_OBJS) return;
    uint8_t k = rd8(r);
    size_t size;
    switch (k % 4) {
    case 0: size = 1 + rd16(r) % 4096; break;
    case 1: size = block * (1 + rd8(r) % (MAX_SIZE / block)); break;
    case 2: size = block * (1 + rd8(r) % (MAX_SIZE / block - 1)) + (rd8(r) % 3) - 1; break; /* around a block end */
    default: size = 1 + rd16(r) % MAX_SIZE; break;
    }
    int safe = (op & 0x80) != 0;
    object *o = &objs[nobjs];
    trace("%s(%zu) -> object %u", safe ? "adsm_safe_alloc" : "adsm_alloc", size, next_id);
    o->p = (uint8_t *)(safe ? adsm_safe_alloc(size) : adsm_alloc(size));
    if (!o->p) fail("adsm_alloc(%zu) failed: %s", size, adsm_last_error());
    o->ref = (uint8_t *)calloc(1, size);
    if (!o->ref) fail("out of memory");
    o->size = size;
    o->busy = BUSY_NONE;
    o->safe = safe;
    o->id = next_id++;
    nobjs++;
    if (op & 0x40) check_range(o, 0, size, "new object is not zero-filled");
    check_stats();
}

static void free_at(size_t i) {
    object *o = &objs[i];
    trace("free object %u (%zu bytes, busy %d)", o->id, o->size, o->busy);
    EXPECT(adsm_free(o->p), ADSM_OK);
    free(o->ref);
    objs[i] = objs[--nobjs];
}

static void op_free(reader *r, uint8_t op) {
    if (!nobjs) return;
    size_t i = rd8(r) % nobjs;
    uint8_t *p = objs[i].p;
    free_at(i);
    if (op & 0x80) { /* a second free of the same pointer: nothing new was allocated there */
        trace("free again %p", (void *)p);
        EXPECT(adsm_free(p), ADSM_ERROR_NOT_SHARED);
    }
    check_stats();
}

static void op_cpu_write(reader *r) {
    object *o = pick(rd8(r), 1);
    if (!o) return;
    size_t off, len;
    pick_range(r, o->size, &off, &len);
    unsigned how = rd8(r) % 3;
    trace("cpu write object %u [%zu, %zu) method %u", o->id, off, off + len, how);
    if (how == 0) {
        size_t src = rd16(r) % (PLAIN_SIZE - len + 1);
        memcpy(o->p + off, scratch + src, len);
        memcpy(o->ref + off, scratch + src, len);
    } else if (how == 1) {
        uint8_t a = rd8(r), b = (uint8_t)(rd8(r) | 1);
        volatile uint8_t *p = o->p;
        for (size_t i = off; i < off + len; i++) {
            p[i] = (uint8_t)(a + b * i);
            o->ref[i] = (uint8_t)(a + b * i);
        }
    } else { /* read-modify-write */
        uint8_t d = (uint8_t)(1 + rd8(r) % 255);
        volatile uint8_t *p = o->p;
        for (size_t i = off; i < off + len; i++) {
            p[i] = (uint8_t)(p[i] + d);
            o->ref[i] = (uint8_t)(o->ref[i] + d);
        }
    }
}

static void op_cpu_read(reader *r) {
    object *o = pick(rd8(r), 0);
    if (!o) return;
    size_t off, len;
    pick_range(r, o->size, &off, &len);
    unsigned how = rd8(r) % 3;
    trace("cpu read object %u [%zu, %zu) method %u (busy %d)", o->id, off, off + len, how, o->busy);
    if (how == 0) {
        check_range(o, off, len, "cpu read (memcmp)");
    } else if (how == 1) { /* strided byte loads */
        size_t stride = 1 + rd16(r) % 5000;
        for (size_t i = off; i < off + len; i += stride)
            if (((volatile uint8_t *)o->p)[i] != o->ref[i]) check_range(o, i, 1, "cpu read (byte load)");
    } else {
        size_t i = off + len - 1;
        if (((volatile uint8_t *)o->p)[i] != o->ref[i]) check_range(o, i, 1, "cpu read (single load)");
    }
}

static void op_memset(reader *r, uint8_t op) {
    object *o = pick(rd8(r), 1);
    if (!o) return;
    size_t off, len;
    pick_range(r, o->size, &off, &len);
    if (op & 0x80) len = 0;
    int v = rd8(r);
    trace("adsm_memset object %u [%zu, %zu) = 0x%02x", o->id, off, off + len, v);
    EXPECT(adsm_memset(o->p + off, v, len), ADSM_OK);
    memset(o->ref + off, v, len);
}

static void op_memcpy(reader *r) {
    unsigned kind = rd8(r) % 4;
    size_t off, len;
    if (kind == 0) { /* object -> object */
        object *d = pick(rd8(r), 1), *s = pick(rd8(r), 0);
        if (!d || !s || d == s) return;
        pick_range(r, s->size < d->size ? s->size : d->size, &off, &len);
        size_t soff = rd16(r) % (s->size - len + 1), doff = rd16(r) % (d->size - len + 1);
        trace("adsm_memcpy object %u [%zu, +%zu) <- object %u [%zu, +%zu) (src busy %d)", d->id, doff, len, s->id,
              soff, len, s->busy);
        EXPECT(adsm_memcpy(d->p + doff, s->p + soff, len), ADSM_OK);
        memcpy(d->ref + doff, s->ref + soff, len);
    } else if (kind == 1) { /* plain -> object */
        object *d = pick(rd8(r), 1);
        if (!d) return;
        pick_range(r, d->size, &off, &len);
        size_t src = rd16(r) % (PLAIN_SIZE - len + 1);
        trace("adsm_memcpy object %u [%zu, %zu) <- plain", d->id, off, off + len);
        EXPECT(adsm_memcpy(d->p + off, scratch + src, len), ADSM_OK);
        memcpy(d->ref + off, scratch + src, len);
    } else if (kind == 2) { /* object -> plain */
        object *s = pick(rd8(r), 0);
        if (!s) return;
        pick_range(r, s->size, &off, &len);
        size_t dst = rd16(r) % (PLAIN_SIZE - len + 1);
        trace("adsm_memcpy plain <- object %u [%zu, %zu) (busy %d)", s->id, off, off + len, s->busy);
        EXPECT(adsm_memcpy(plain + dst, s->p + off, len), ADSM_OK);
        if (memcmp(plain + dst, s->ref + off, len) != 0) {
            size_t i = 0;
            while (plain[dst + i] == s->ref[off + i]) i++;
            fail("adsm_memcpy to plain memory from object %u [%zu, %zu): byte %zu is 0x%02x, expected 0x%02x", s->id,
                 off, off + len, off + i, plain[dst + i], s->ref[off + i]);
        }
    } else { /* within one object, non-overlapping */
        object *o = pick(rd8(r), 1);
        if (!o || o->size < 2) return;
        len = 1 + rd16(r) % (o->size / 2);
        size_t a = rd16(r) % (o->size - 2 * len + 1);
        size_t gap = rd16(r) % (o->size - 2 * len - a + 1);
        size_t b = a + len + gap;
        size_t doff = rd8(r) & 1 ? a : b, soff = doff == a ? b : a;
        trace("adsm_memcpy object %u [%zu, +%zu) <- [%zu, +%zu)", o->id, doff, len, soff, len);
        EXPECT(adsm_memcpy(o->p + doff, o->p + soff, len), ADSM_OK);
        memcpy(o->ref + doff, o->ref + soff, len);
    }
}

/* Decodes a kernel call: up to 4 distinct objects with roles, a grid. With `plain_slot` in 1..6,
 * that pointer slot gets a plain (non-shared) pointer instead and the call must be refused. */
static void op_kernel(reader *r, int plain_slot) {
    uint8_t *o[2] = {0}, *x[2] = {0}, *ro[2] = {0}, *rx[2] = {0};
    const uint8_t *in[2] = {0}, *rin[2] = {0};
    object *chosen[4];
    int roles[4];
    size_t nchosen = 0, nthreads = 1;
    unsigned no = 0, nx = 0, ni = 0;
    kinfo info;
    char desc[160];
    int dl = 0;
    memset(&info, 0, sizeof info);
    desc[0] = 0;
    info.seed = rd32(r);
    uint8_t sk = rd8(r);
    if (sk & 1) {
        info.skip_mod = 2 + sk % 15;
        info.skip_rem = (uint32_t)(rd8(r) % info.skip_mod);
    }
    size_t want = rd8(r) % 5;
    for (size_t t = 0; t < want && nchosen < nobjs; t++) {
        object *ob = &objs[rd8(r) % nobjs];
        int dup = 0;
        for (size_t k = 0; k < nchosen; k++) dup |= chosen[k] == ob;
        uint8_t rb = rd8(r);
        int role = rb % 3; /* 0 IN, 1 OUT, 2 INOUT */
        if (dup || (role == 0 && ni == 2) || (role == 1 && no == 2) || (role == 2 && nx == 2)) continue;
        size_t off = rb & 0x10 ? rd16(r) % ob->size : 0, rest = ob->size - off;
        size_t len = rb & 0x20 ? rd16(r) % (rest + 1) : rest;
        if (role == 0) {
            if (len == 0) len = 1;
            in[ni] = ob->p + off;
            rin[ni] = ob->ref + off;
            info.ilen[ni++] = len;
        } else if (role == 1) {
            o[no] = ob->p + off;
            ro[no] = ob->ref + off;
            info.olen[no++] = len;
        } else {
            x[nx] = ob->p + off;
            rx[nx] = ob->ref + off;
            info.xlen[nx++] = len;
        }
        if (role != 0 && len > nthreads) nthreads = len;
        roles[nchosen] = role;
        chosen[nchosen++] = ob;
        if (dl < (int)sizeof desc - 40)
            dl += snprintf(desc + dl, sizeof desc - (size_t)dl, " %s %u+%zu/%zu",
                           role == 0 ? "IN" : role == 1 ? "OUT" : "INOUT", ob->id, off, len);
    }
    static const uint32_t tpbs[] = {1, 32, 64, 256};
    uint32_t tpb = tpbs[rd8(r) % 4];
    if (tpb == 1 && nthreads > 4096) tpb = 256;
    uint32_t blocks = (uint32_t)((nthreads + tpb - 1) / tpb) + (uint32_t)(rd8(r) & 1);

    if (plain_slot) { /* a plain pointer in one slot: refused before anything happens */
        uint8_t **slot = plain_slot == 1 ? &o[0] : plain_slot == 2 ? &o[1] : plain_slot == 3 ? &x[0]
                       : plain_slot == 4 ? &x[1] : plain_slot == 5 ? (uint8_t **)&in[0] : (uint8_t **)&in[1];
        *slot = plain;
        trace("kernel fz_mix with a plain pointer in slot %d, grid %ux%u:%s", plain_slot, blocks, tpb, desc);
        EXPECT(ADSM_CALL(fz_mix, adsm_grid_1d(blocks, tpb), o[0], o[1], x[0], x[1], in[0], in[1], info),
               ADSM_ERROR_NOT_SHARED);
        return;
    }
    trace("kernel fz_mix seed %u skip %u/%u grid %ux%u:%s", info.seed, info.skip_rem, info.skip_mod, blocks, tpb,
          desc);
    EXPECT(ADSM_CALL(fz_mix, adsm_grid_1d(blocks, tpb), o[0], o[1], x[0], x[1], in[0], in[1], info), ADSM_OK);
    in_flight = 1;
    size_t total = (size_t)blocks * tpb;
    for (size_t i = 0; i < total; i++) mix_thread(i, ro, rx, rin, &info);
    for (size_t k = 0; k < nchosen; k++) {
        int busy = roles[k] == 0 ? BUSY_READ : BUSY_WRITE;
        if (busy > chosen[k]->busy) chosen[k]->busy = busy;
    }
    if (!tracked()) op_sync(); /* batch copies every object back at sync: sync at once */
}

static void op_verify_all(void) {
    trace("verify every readable object");
    for (size_t i = 0; i < nobjs; i++) {
        object *o = &objs[i];
        if (!can_read(o)) continue;
        check_range(o, 0, o->size, "full check");
        for (size_t b = 0; b < o->size; b += block) {
            char s = adsm_block_state(o->p + b);
            if (s != 'I' && s != 'R' && s != 'D') fail("object %u: block state of byte %zu is %d", o->id, b, s);
        }
    }
    check_stats();
}

static void op_probe(reader *r) {
    unsigned kind = rd8(r) % 5;
    if (kind == 0) { /* interior pointer */
        object *o = nobjs ? &objs[rd8(r) % nobjs] : NULL;
        if (!o || o->size < 2) return;
        size_t off = 1 + rd16(r) % (o->size - 1);
        trace("free interior pointer object %u + %zu", o->id, off);
        EXPECT(adsm_free(o->p + off), ADSM_ERROR_NOT_OBJECT_START);
    } else if (kind == 1) {
        trace("adsm_alloc(0), adsm_free(plain), adsm_free(NULL)");
        if (adsm_alloc(0) != NULL || adsm_last_result() != ADSM_ERROR_INVALID_VALUE)
            fail("adsm_alloc(0): %s", adsm_last_error());
        EXPECT(adsm_free(plain), ADSM_ERROR_NOT_SHARED);
        EXPECT(adsm_free(NULL), ADSM_OK);
        if (adsm_block_state(plain) != 0) fail("plain memory has a block state");
    } else if (kind == 2) { /* a kernel that writes its input: reported by the next sync */
        object *o = pick(rd8(r), 1);
        if (!o) return;
        size_t at = rd16(r) % o->size;
        trace("kernel fz_bad writes IN object %u at %zu", o->id, at);
        EXPECT(ADSM_CALL(fz_bad, adsm_grid_1d(1, 1), o->p, at), ADSM_OK);
        trace("adsm_sync after fz_bad");
        EXPECT(adsm_sync(), ADSM_ERROR_KERNEL_WROTE_INPUT);
        for (size_t i = 0; i < nobjs; i++) objs[i].busy = BUSY_NONE;
        in_flight = 0;
        op_sync(); /* the error was reported once */
    } else { /* a kernel given a plain pointer */
        int slot = 1 + rd8(r) % 6;
        if (!no_plain_kernel) op_kernel(r, slot);
    }
}

/* ---- libFuzzer entry points ------------------------------------------------------------------ */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    const char *p = getenv("ADSM_FUZZ_PROTOCOL");
    if (!p || !*p || strcmp(p, "rolling") == 0) cfg.protocol = ADSM_PROTOCOL_ROLLING;
    else if (strcmp(p, "lazy") == 0) cfg.protocol = ADSM_PROTOCOL_LAZY;
    else if (strcmp(p, "batch") == 0) cfg.protocol = ADSM_PROTOCOL_BATCH;
    else {
        fprintf(stderr, "fuzz_protocol: ADSM_FUZZ_PROTOCOL='%s': expected batch, lazy or rolling\n", p);
        exit(2);
    }
    const char *bs = getenv("ADSM_FUZZ_BLOCK_SIZE"), *rs = getenv("ADSM_FUZZ_ROLLING_SIZE");
    cfg.block_size = bs && *bs ? strtoull(bs, NULL, 0) : 4096;
    cfg.rolling_size = rs && *rs ? strtoull(rs, NULL, 0) : 0;
    cfg.emu_memory = (size_t)256 << 20;
    cfg.emu_workers = 2;
    cfg.log_level = ADSM_LOG_ERROR;
    adsm_result r = adsm_init(&cfg);
    if (r != ADSM_OK) {
        fprintf(stderr, "fuzz_protocol: adsm_init: %s\n", adsm_last_error());
        exit(2);
    }
    protocol = cfg.protocol;
    trace_all = getenv("ADSM_FUZZ_TRACE") && atoi(getenv("ADSM_FUZZ_TRACE")) > 0;
    no_plain_kernel = getenv("ADSM_FUZZ_NO_PLAIN_KERNEL") && atoi(getenv("ADSM_FUZZ_NO_PLAIN_KERNEL")) > 0;
    block = adsm_block_size();
    for (size_t i = 0; i < PLAIN_SIZE; i++) scratch[i] = (uint8_t)(i * 2654435761u >> 13);
    fprintf(stderr, "fuzz_protocol: backend %s, protocol %s, block size %zu, rolling size %zu\n", adsm_backend_name(),
            adsm_protocol_name(), block, cfg.rolling_size);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    memset(trace_buf, 0, sizeof trace_buf);
    nobjs = 0;
    in_flight = 0;
    for (op_no = 0; r.n && op_no < MAX_OPS; op_no++) {
        uint8_t op = rd8(&r);
        switch ((op & 0x3f) % 13) { /* bits 6-7 are flags */
        case 0:
        case 1: op_alloc(&r, op); break;
        case 2: op_free(&r, op); break;
        case 3:
        case 4: op_cpu_write(&r); break;
        case 5:
        case 6: op_cpu_read(&r); break;
        case 7: op_memset(&r, op); break;
        case 8: op_memcpy(&r); break;
        case 9:
        case 10: op_kernel(&r, 0); break;
        case 11: (op & 0x80) ? op_verify_all() : op_sync(); break;
        default: op_probe(&r); break;
        }
    }
    op_sync();
    op_verify_all();
    while (nobjs) free_at(nobjs - 1);
    check_stats();
    return 0;
}
