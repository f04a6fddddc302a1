/* adsm_impl/translate.h -- declared pointer fields (ADSM_TYPE), moved between host and device
 * addresses at a kernel's boundary.
 *
 * An object given a type (adsm_alloc_typed, adsm_set_type) holds structs whose declared fields
 * point into shared objects. Where a device's kernels see other addresses than the host's (the
 * backend's address_delta: cuda translating, emu with ADSM_EMU_SAME_ADDRESS=0; and safe objects,
 * whose device address is their own), those fields must hold that device's addresses while its
 * kernels run, and host addresses everywhere else. adsm translates at the kernel's boundary:
 * before a launch on such a device it lets the device go idle and rewrites, in device memory,
 * every typed object current there into device addresses; once the kernel finished it rewrites
 * them back, and a field the kernel left pointing into no shared object is an error naming the
 * kernel, object, element and field. So the device copy holds host addresses whenever anything
 * but a kernel reads it: every copy (flushes, rolling's evictions and fetches block by block,
 * device to device, I/O, MPI) moves raw bytes and needs no translation, and where the addresses
 * agree no pass runs at all. Each object is translated once per pass whatever points at it, so
 * cycles and shared targets need nothing special.
 *
 * The rewrite is done where the fields are when it can be (through emu's window; on one GPU by a
 * patch kernel, the paper's PCPY), else through a host staging buffer: a piece of device memory
 * is copied home, translated, and sent back if it changed (the paper's TCPY). Structs larger
 * than 4 KiB whose pointer fields take less than a quarter of them move only the span of their
 * fields (a 1 MB node moves its `next`, not its payload). With several devices, the objects a
 * kernel reaches through declared fields are found here too, so launch.h makes them current on
 * its device beside the ones it names.
 *
 * Normal thread context: launch.h calls it with launch_mutex and the runtime lock held (it waits
 * for the device and allocates the staging buffer); the typing calls take the lock themselves. */
#ifndef ADSM__TRANSLATE_INCLUDED
#define ADSM__TRANSLATE_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "stats.h"
#include "object.h"
#include "runtime.h"
#include "backend.h"
#include "directory.h"
#include "lifecycle.h"
#include "copy.h"
#include "protocol.h"
#include "xlate_stage.h"

#define ADSM__XLATE_AHEAD 8                 /* elements between a prefetch and its use */

/* ---- types ----------------------------------------------------------------------------------- */
/* A descriptor ADSM_TYPE made is right by construction; one written by hand may not be. */
ADSM__PRIVATE adsm_result adsm__type_check(const adsm_type_desc *t, const char *fn) {
    if (!t->name || t->size == 0 || t->nfields == 0 || !t->fields)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: the type descriptor %p is incomplete (name, size and at "
                          "least one field; declare types with ADSM_TYPE)", fn, (const void *)t);
    /* every element's fields aligned: a slot straddling a piece's edge would be skipped by both */
    if (t->size % sizeof(void *) != 0)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: type '%s' is %zu bytes, not a whole number of pointers (a "
                          "packed struct?): the pointer fields of its structs after the first would not be aligned",
                          fn, t->name, t->size);
    for (unsigned i = 0; i < t->nfields; i++) {
        const adsm_field_desc *f = &t->fields[i];
        if (f->count == 0 || f->offset % sizeof(void *) != 0 || f->offset > t->size ||
            f->count > (t->size - f->offset) / sizeof(void *))
            return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: field '%s' of type '%s' (offset %zu, %zu pointers) is "
                              "not an aligned pointer field inside its %zu-byte struct", fn,
                              f->name ? f->name : "?", t->name, f->offset, f->count, t->size);
        for (unsigned j = 0; j < i; j++) { /* a slot translated twice would be moved twice */
            const adsm_field_desc *g = &t->fields[j];
            if (f->offset < g->offset + g->count * sizeof(void *) && g->offset < f->offset + f->count * sizeof(void *))
                return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: fields '%s' and '%s' of type '%s' overlap (a union's "
                                  "members? declare one of them)", fn, g->name ? g->name : "?",
                                  f->name ? f->name : "?", t->name);
        }
    }
    return ADSM_OK;
}

/* Under lock. Gives o a type, or takes it away (NULL). */
ADSM__PRIVATE adsm_result adsm__object_set_type(adsm__runtime *rt, adsm__object *o, const adsm_type_desc *t,
                                                const char *fn) {
    if (t && o->size % t->size != 0)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s: the object at %p holds %zu bytes, not a whole number of "
                          "'%s' structs (%zu bytes each)", fn, (void *)o->host, o->size, t->name, t->size);
    if (o->device_only)
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "%s(%p): an adsm_dev_alloc buffer has no host copy to type",
                          fn, (void *)o->host);
    if (!o->type && t) {
        rt->typed_objects++;
        rt->typed_bytes += o->size;
    }
    if (o->type && !t) {
        rt->typed_objects--;
        rt->typed_bytes -= o->size;
    }
    o->type = t;
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__set_type_unguarded(void *ptr, const adsm_type_desc *t) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (t && (r = adsm__type_check(t, "adsm_set_type")) != ADSM_OK) return r;
    adsm__lock(&rt->lock);
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, (uintptr_t)ptr));
    if (!o) r = adsm__fail(ADSM_ERROR_NOT_SHARED, "adsm_set_type(%p): not inside a live shared object", ptr);
    else if ((uintptr_t)ptr != o->host)
        r = adsm__fail(ADSM_ERROR_NOT_OBJECT_START, "adsm_set_type(%p): inside the object at %p, not its start", ptr,
                       (void *)o->host);
    else r = adsm__object_set_type(rt, o, t, "adsm_set_type");
    adsm__unlock(&rt->lock);
    return r;
}

/* ---- one address ---------------------------------------------------------------------------
 * A value found inside an object is moved by that object's shift; the pass remembers the last
 * object found (a pool's pointers mostly point into the pool), so most fields take no lookup. */
typedef struct adsm__xlate_hit {
    uintptr_t lo;
    size_t len;    /* 0: nothing remembered */
    uintptr_t shift; /* added (mod 2^64) to a value in [lo, lo + len) */
} adsm__xlate_hit;

/* The object holding host address v, as device d sees it (delta: its address_delta). 0: none. */
ADSM__PRIVATE int adsm__xlate_find_out(const adsm__runtime *rt, uintptr_t v, intptr_t delta, adsm__xlate_hit *h) {
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, v));
    if (!o || o->device_only) return 0;
    h->lo = o->host;
    h->len = o->span;
    h->shift = o->managed ? 0 : o->dev + (uintptr_t)delta - o->host; /* managed: one address everywhere */
    return 1;
}

/* The inverse: the object holding device address v of device d. 0: none. */
ADSM__PRIVATE int adsm__xlate_find_in(const adsm__runtime *rt, uintptr_t v, intptr_t delta, adsm__xlate_hit *h) {
    uintptr_t a = v - (uintptr_t)delta;
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    if (!(o && !o->safe && !o->managed && !o->device_only)) { /* not at its host address */
        adsm__tree_node *n = adsm__tree_find(&rt->safe_dev, a);
        o = n ? ADSM__CONTAINER_OF(n, adsm__object, dev_node) : NULL;
        if (o && o->device_only) o = NULL;
        if (!o) {
            o = adsm__object_of(adsm__tree_find(&rt->objects, v));
            if (!o || !o->managed) return 0;
            h->lo = o->host;
            h->len = o->span;
            h->shift = 0;
            return 1;
        }
    }
    h->lo = o->dev + (uintptr_t)delta;
    h->len = o->span;
    h->shift = o->host - h->lo;
    return 1;
}

/* ---- a pass over the typed objects of one device --------------------------------------------- */
typedef struct adsm__xlate_pass {
    adsm__runtime *rt;
    unsigned d;
    intptr_t delta;
    int to_device;
    const char *kernel;
    unsigned char *stage;
    adsm_result r;             /* the first error */
    const adsm__object *stop;  /* a failed pass to the device stopped in this object ... */
    size_t stop_off;           /* ... having written back its pieces below this offset */
    const adsm__object *limit; /* a rollback goes up to here (NULL: every object) */
    size_t limit_off;
    int dry;                   /* check every field, change nothing (before a patch kernel's pass) */
    uint64_t patched_fields;   /* fields the patch launches of the pass rewrite (counted once it succeeded) */
    int in_place;              /* the piece being translated is the device's memory itself */
    adsm__xlate_hit hit;       /* the object the last field pointed into */
    uint64_t kernel_seq;       /* coming home: the launch whose kernel the pass waits for before it
                                  first touches device memory (0: done waiting) */
    int lost;                  /* that wait found the device lost */
} adsm__xlate_pass;

/* Coming home, before the pass first reads or rewrites device memory: its kernel has finished.
 * A pass that needs none of it (every piece left on the device as the kernel saw it, below) never
 * waits, so the launch returns at once. 0, or -1 when the device is lost. */
ADSM__PRIVATE int adsm__xlate_settle(adsm__xlate_pass *x) {
    if (x->kernel_seq && x->rt->be->wait(x->rt->dev_ctx[x->d], x->kernel_seq) != 0) x->lost = 1;
    x->kernel_seq = 0;
    return x->lost ? -1 : 0;
}

/* v translated, or 0 when it points into no shared object. */
ADSM__PRIVATE uintptr_t adsm__xlate_value(adsm__xlate_pass *x, uintptr_t v) {
    if (!(x->hit.len && v - x->hit.lo < x->hit.len) &&
        !(x->to_device ? adsm__xlate_find_out(x->rt, v, x->delta, &x->hit)
                       : adsm__xlate_find_in(x->rt, v, x->delta, &x->hit)))
        return 0;
    return v + x->hit.shift;
}

/* Whether v lies in a buffer from adsm_dev_alloc (for the message: no field may point there). */
ADSM__PRIVATE int adsm__is_device_buffer(const adsm__runtime *rt, uintptr_t v) {
    adsm__tree_node *n = adsm__tree_find(&rt->safe_dev, adsm__dev_in(rt, v));
    return n && ADSM__CONTAINER_OF(n, adsm__object, dev_node)->device_only;
}

ADSM__PRIVATE void adsm__xlate_error(adsm__xlate_pass *x, const adsm__object *o, size_t elem, const adsm_field_desc *f,
                                     size_t k, uintptr_t v) {
    char field[96];
    if (x->r != ADSM_OK) return;
    if (f->count > 1) snprintf(field, sizeof field, "%s[%zu]", f->name, k);
    else snprintf(field, sizeof field, "%s", f->name);
    if (!v && x->to_device)
        x->r = adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': field '%s' of '%s' %zu in the object at %p is NULL, "
                          "declared ADSM_PTR_NONNULL", x->kernel, field, o->type->name, elem, (void *)o->host);
    else if (!v) /* on the way back: the kernel wrote it */
        x->r = adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s' left field '%s' of '%s' %zu in the object at %p "
                          "NULL, declared ADSM_PTR_NONNULL", x->kernel, field, o->type->name, elem, (void *)o->host);
    else if (x->to_device && adsm__is_device_buffer(x->rt, v))
        x->r = adsm__fail(ADSM_ERROR_NOT_SHARED, "kernel '%s': field '%s' of '%s' %zu in the object at %p holds %p, "
                          "a device buffer from adsm_dev_alloc (a declared pointer field holds NULL or a pointer into "
                          "a shared object; pass device buffers as arguments)", x->kernel, field, o->type->name, elem,
                          (void *)o->host, (void *)v);
    else if (x->to_device)
        x->r = adsm__fail(ADSM_ERROR_NOT_SHARED, "kernel '%s': field '%s' of '%s' %zu in the object at %p holds %p, "
                          "which is inside no shared object (a declared pointer field holds NULL or a pointer into "
                          "a shared object%s)", x->kernel, field, o->type->name, elem, (void *)o->host, (void *)v,
                          x->rt->ndev == 1 ? "; with one device every typed object goes to it translated at each "
                                             "launch, also those the kernel does not name" : "");
    else
        x->r = adsm__fail(ADSM_ERROR_NOT_SHARED, "kernel '%s' left field '%s' of '%s' %zu in the object at %p "
                          "holding %p, which is inside no shared object of device %u", x->kernel, field,
                          o->type->name, elem, (void *)o->host, (void *)v, x->d);
}

/* The span of an element its pointer fields take, [*lo, *hi). */
ADSM__PRIVATE void adsm__type_field_span(const adsm_type_desc *t, size_t *lo, size_t *hi) {
    *lo = t->size;
    *hi = 0;
    for (unsigned i = 0; i < t->nfields; i++) {
        *lo = ADSM__MIN(*lo, t->fields[i].offset);
        *hi = ADSM__MAX(*hi, t->fields[i].offset + t->fields[i].count * sizeof(void *));
    }
}

/* The pointer-field slots of element e of an object of type t that lie wholly inside [lo, hi)
 * (object offsets), in declaration order: what a pass rewrites and the reach walk reads. */
typedef struct adsm__slots {
    const adsm_type_desc *t;
    size_t base, lo, hi;
    unsigned i; /* the field ... */
    size_t k;   /* ... and its element, next to look at */
} adsm__slots;

ADSM__PRIVATE adsm__slots adsm__slots_of(const adsm_type_desc *t, size_t e, size_t lo, size_t hi) {
    adsm__slots s = {t, e * t->size, lo, hi, 0, 0};
    return s;
}

/* The next slot: its field *f, element *k of that field and offset *at in the object; 0 when
 * none is left. */
ADSM__PRIVATE int adsm__next_slot(adsm__slots *s, const adsm_field_desc **f, size_t *k, size_t *at) {
    for (; s->i < s->t->nfields; s->i++, s->k = 0) {
        const adsm_field_desc *field = &s->t->fields[s->i];
        while (s->k < field->count) {
            size_t slot = s->k++, a = s->base + field->offset + slot * sizeof(void *);
            if (a < s->lo || a + sizeof(void *) > s->hi) continue;
            *f = field;
            *k = slot;
            *at = a;
            return 1;
        }
    }
    return 0;
}

/* The pointer fields of element e wholly inside piece [p0, p1) of o, held at buf: checked, and
 * translated when `write` (then added to *fields). Returns -1 when one cannot be translated (the
 * pass's error names it; it is left as it is), else whether any changed. */
ADSM__PRIVATE int adsm__xlate_element(adsm__xlate_pass *x, const adsm__object *o, unsigned char *buf, size_t p0,
                                      size_t p1, size_t e, int write, uint64_t *fields) {
    const adsm_type_desc *t = o->type;
    int changed = 0, bad = 0;
    size_t hi = ADSM__MIN((e + 1) * t->size, p1);
    if (x->limit == o) hi = ADSM__MIN(hi, x->limit_off); /* a rollback: the rest never went translated */
    adsm__slots slots = adsm__slots_of(t, e, p0, hi);
    const adsm_field_desc *f;
    size_t k, at, seen = 0;
    while (adsm__next_slot(&slots, &f, &k, &at)) {
        uintptr_t v, w;
        memcpy(&v, buf + (at - p0), sizeof v);
        seen++;
        if (!v) {
            if (!f->nullable) adsm__xlate_error(x, o, e, f, k, v), bad = 1;
            continue;
        }
        if (!(w = adsm__xlate_value(x, v))) {
            adsm__xlate_error(x, o, e, f, k, v);
            bad = 1;
            continue;
        }
        if (w == v || !write) continue;
        memcpy(buf + (at - p0), &w, sizeof w);
        changed = 1;
    }
    if (write) *fields += seen;
    return bad ? -1 : changed;
}

/* Translates the pointer fields wholly inside piece [p0, p1) of o, held at buf (the stage, or
 * the device memory itself). Returns whether any changed; a field that cannot be translated is
 * left as it is. In place on the way to the device (x->in_place), each element is checked before
 * it is written, and the first element that cannot go stops the pass there (x->stop, x->stop_off:
 * a rollback takes back exactly the fields below), so no pass over everything is needed first. */
ADSM__PRIVATE int adsm__xlate_piece(adsm__xlate_pass *x, const adsm__object *o, unsigned char *buf, size_t p0,
                                    size_t p1) {
    const adsm_type_desc *t = o->type;
    int changed = 0, checked_first = x->in_place && x->to_device && !x->dry;
    size_t lo, hi;
    uint64_t fields = 0;
    adsm__type_field_span(t, &lo, &hi);
    for (size_t e = p0 / t->size; e * t->size < p1; e++) {
        /* Structs of a few hundred bytes and more put each element's fields on lines of their own,
         * which the CPU does not fetch ahead by itself: a pass over 1 KB nodes waited on a miss for
         * nearly every element. The fields some elements ahead are asked for now. */
        size_t ahead = (e + ADSM__XLATE_AHEAD) * t->size + lo;
        if (t->size >= 256 && ahead >= p0 && ahead < p1) ADSM__PREFETCH_WRITE(buf + (ahead - p0));
        if (checked_first && adsm__xlate_element(x, o, buf, p0, p1, e, 0, &fields) < 0) {
            x->stop = o;
            x->stop_off = ADSM__MAX(e * t->size, p0);
            break;
        }
        changed |= adsm__xlate_element(x, o, buf, p0, p1, e, !x->dry, &fields) > 0;
    }
    ADSM__ADD(&x->rt->stats.translated_fields, fields);
    return changed;
}

/* The pass's staging buffer, taken at its first staged piece (in place and on the device, a pass
 * needs none). NULL when out of memory: the pass's error says so. */
ADSM__PRIVATE unsigned char *adsm__xlate_stage(adsm__xlate_pass *x) {
    if (!x->stage && !(x->stage = adsm__xlate_stage_take(x->rt)) && x->r == ADSM_OK)
        x->r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "kernel '%s': no memory to stage pointer fields", x->kernel);
    return x->stage;
}

/* Whether passes rewrite device memory where it is, through the backend's window (emu), rather
 * than through the stage: ADSM_TRANSLATE=staged asks for the stage there too (to measure it). */
ADSM__PRIVATE int adsm__xlate_window(const adsm__runtime *rt) {
    return rt->be->device_window && rt->cfg.translate != ADSM__TRANSLATE_STAGED;
}

/* Going to the device, piece [p0, p1) of o read from the host into dst, where the host's bytes
 * are the device's: every block current on the host (none Invalid or being copied, not left newer
 * on the device by batch), or Invalid only because this launch's release made a kernel's output
 * Invalid after flushing it (o->host_kept: its pages still hold those bytes; read through the
 * alias, or /proc/self/mem where the program's view is protected). The launch's flushes have
 * reached the device by then (adsm__xlate_before waits), so the device copy equals them: the
 * staged technique's copy each way before a launch becomes one, the paper's TCPY. 1 when read, 0
 * when the piece must be copied home. */
ADSM__PRIVATE int adsm__xlate_read_host(const adsm__xlate_pass *x, const adsm__object *o, size_t p0, size_t p1,
                                        unsigned char *dst) {
    adsm__runtime *rt = x->rt;
    if (!x->to_device || o->device_newer || o->safe) return 0;
    unsigned shift = rt->cfg.block_shift;
    int hidden = 0; /* a block the program's view protects */
    for (size_t b = p0 >> shift; b < o->nblocks && (b << shift) < p1; b++) {
        if (o->blocks[b].busy || (o->blocks[b].state == ADSM__INVALID && !o->host_kept)) return 0;
        hidden |= o->blocks[b].state == ADSM__INVALID;
    }
    uintptr_t at = adsm__host_dma(rt, o->host + p0); /* the alias is always readable */
    if (hidden && at == o->host + p0) return adsm__filler_peek(&rt->fill, dst, at, p1 - p0) == 0;
    memcpy(dst, (const void *)at, p1 - p0);
    return 1;
}

/* ---- coming home: the host copy made current, the device's left as the kernel saw it ----------
 * After a staged pass's kernel, a piece of whole blocks (one device, lazy or rolling, not a safe
 * object) is not rewritten back on the device: its host copy is made current instead (the blocks a
 * kernel wrote, Invalid there, take the translated bytes a fetch would have brought) and every
 * block of it Dirty, which marks the device copy stale. The next launch's release would flush it;
 * a staged pass takes that flush over and sends it translated (adsm__xlate_take_flushes). So a
 * structure a kernel only reads costs one copy a launch, and one it writes a copy each way, as a
 * hand-written deep copy does, and the CPU reads and writes it after without a fault. What holds:
 * a device copy marked current has host addresses in its fields outside kernels. */

/* Whether piece [p0, p1) of o is left so (above); *copy: whether a block of it must come home
 * (Invalid on the host). */
ADSM__PRIVATE int adsm__xlate_keepable(const adsm__xlate_pass *x, const adsm__object *o, size_t p0, size_t p1,
                                       int *copy) {
    const adsm__runtime *rt = x->rt;
    unsigned shift = rt->cfg.block_shift;
    size_t block = (size_t)1 << shift;
    if (x->to_device || !adsm__tracking(rt) || rt->ndev != 1 || o->safe || o->device_newer) return 0;
    if (p0 % block != 0 || (p1 % block != 0 && p1 < o->size)) return 0;
    if (rt->proto->whole_object && (p0 != 0 || p1 < o->size)) return 0; /* lazy: one unit */
    *copy = 0;
    for (size_t b = p0 >> shift; b < o->nblocks && (b << shift) < p1; b++) {
        if (o->blocks[b].busy) return 0;
        *copy |= o->blocks[b].state == ADSM__INVALID;
    }
    return 1;
}

/* Piece [p0, p1) of o current and Dirty on the host, its Invalid blocks filled from buf (the
 * translated bytes; NULL where none is Invalid). 0, or -1 with nothing marked: the caller
 * rewrites the device copy back then. */
ADSM__PRIVATE int adsm__xlate_keep(adsm__xlate_pass *x, adsm__object *o, const unsigned char *buf, size_t p0,
                                   size_t p1) {
    adsm__runtime *rt = x->rt;
    unsigned shift = rt->cfg.block_shift;
    size_t first = p0 >> shift, end = first;
    while (end < o->nblocks && (end << shift) < p1) end++;
    for (size_t b = first; b < end;) {
        size_t run = b;
        while (run < end && o->blocks[run].state == ADSM__INVALID) run++;
        if (run == b) {
            b++;
            continue;
        }
        size_t off = b << shift, len = ADSM__MIN(run << shift, o->size) - off;
        if (!buf || adsm__fill_range(rt, o->host + off, buf + (off - p0), len, PROT_NONE) != 0) return -1;
        b = run;
    }
    if (adsm__set_state(rt, o, first, end - first, ADSM__DIRTY) != 0) return -1;
    for (size_t b = first; b < end; b++) adsm__fifo_push(rt, &o->blocks[b]);
    return 0;
}

/* One piece: in place where the CPU reaches device memory (emu), else into the stage (from the
 * host where its bytes are the same, else copied home), translated, and sent back if it changed
 * (or its flush was left to the pass); coming home, left on the device where the host copy can
 * be made current instead (above). 0, or -1 when a copy failed (or no stage could be made). */
ADSM__PRIVATE int adsm__xlate_move(adsm__xlate_pass *x, adsm__object *o, size_t p0, size_t p1) {
    adsm__runtime *rt = x->rt;
    void *ctx = rt->dev_ctx[x->d];
    size_t n = p1 - p0;
    unsigned char *in_place = adsm__xlate_window(rt) ? (unsigned char *)rt->be->device_window(ctx, o->dev + p0, n) : NULL;
    if (in_place && adsm__xlate_settle(x) != 0) return -1;
    if (in_place) {
        x->in_place = 1;
        (void)adsm__xlate_piece(x, o, in_place, p0, p1);
        x->in_place = 0;
        return 0;
    }
    if (!adsm__xlate_stage(x)) return -1;
    int copy = 1, keep = adsm__xlate_keepable(x, o, p0, p1, &copy);
    if (keep && !copy && adsm__xlate_keep(x, o, NULL, p0, p1) == 0) return 0; /* current on the host */
    if (!adsm__xlate_read_host(x, o, p0, p1, x->stage)) {
        if (x->to_device && o->flush_skipped) return -1; /* its device bytes are stale: cannot happen */
        if (adsm__xlate_settle(x) != 0 || rt->be->from_device(ctx, (uintptr_t)x->stage, o->dev + p0, n) != 0)
            return -1;
        adsm__count_from_device(rt, x->d, n);
        ADSM__ADD(&rt->stats.translation_bytes, n);
    }
    adsm_result before = x->r;
    int changed = adsm__xlate_piece(x, o, x->stage, p0, p1);
    if (x->to_device && before == ADSM_OK && x->r != ADSM_OK) return 0; /* not written: rolled back */
    if (keep && x->r == before && adsm__xlate_keep(x, o, x->stage, p0, p1) == 0) return 0;
    if (!changed && !(x->to_device && o->flush_skipped)) return 0; /* the device has these bytes */
    if (rt->be->to_device(ctx, o->dev + p0, (uintptr_t)x->stage, n, 0, ADSM__EVERY_LAUNCH) != 0) return -1;
    adsm__count_to_device(rt, x->d, 0, n);
    ADSM__ADD(&rt->stats.translation_bytes, n);
    return 0;
}

/* Whether the fields are a small part of large structs: each struct's field span moves alone. */
ADSM__PRIVATE int adsm__type_sparse(const adsm_type_desc *t) {
    size_t lo, hi;
    adsm__type_field_span(t, &lo, &hi);
    return t->size > 4096 && (hi - lo) * 4 < t->size;
}

/* The pieces bytes [off, end) of an object of type t move in through the stage: up to its size
 * each, or each element's field span where the fields are a small part of large structs. */
typedef struct adsm__pieces {
    const adsm_type_desc *t;
    size_t off, end, lo, hi;
    int sparse;
} adsm__pieces;

ADSM__PRIVATE adsm__pieces adsm__pieces_of(const adsm_type_desc *t, size_t off, size_t end) {
    adsm__pieces it = {t, off, end, 0, 0, adsm__type_sparse(t)};
    adsm__type_field_span(t, &it.lo, &it.hi);
    return it;
}

/* The next piece, [*p0, *p1); 0 when none is left. */
ADSM__PRIVATE int adsm__next_piece(adsm__pieces *it, size_t *p0, size_t *p1) {
    while (it->off < it->end) {
        if (!it->sparse) {
            *p0 = it->off;
            *p1 = it->off = ADSM__MIN(it->end, it->off + ADSM__XLATE_STAGE);
            return 1;
        }
        size_t e = it->off / it->t->size, span_end = ADSM__MIN(it->end, e * it->t->size + it->hi);
        *p0 = ADSM__MAX(it->off, e * it->t->size + it->lo);
        *p1 = ADSM__MIN(span_end, *p0 + ADSM__XLATE_STAGE); /* a span larger than the stage: in pieces */
        it->off = *p1 < span_end ? *p1 : (e + 1) * it->t->size;
        if (*p0 < *p1) return 1;
    }
    return 0;
}

/* Bytes [off, end) of o: whole pieces through the stage, or each element's field span where the
 * fields are a small part of large structs. 0 or -1. */
ADSM__PRIVATE int adsm__xlate_range(adsm__xlate_pass *x, adsm__object *o, size_t off, size_t end) {
    adsm__pieces it = adsm__pieces_of(o->type, off, end);
    size_t p0, p1;
    while (!(x->stop == o) && adsm__next_piece(&it, &p0, &p1)) {
        if (x->limit == o && p0 >= x->limit_off) return 0;
        adsm_result before = x->r;
        int rc = adsm__xlate_move(x, o, p0, p1);
        if (x->to_device && !x->stop && (rc != 0 || (before == ADSM_OK && x->r != ADSM_OK))) {
            x->stop = o; /* the pieces below p0 went to the device translated, this one did not */
            x->stop_off = p0;
        }
        if (rc != 0) return -1;
    }
    return 0;
}

/* Every unit of o current on the pass's device. 0 or -1. */
ADSM__PRIVATE int adsm__xlate_object(adsm__xlate_pass *x, adsm__object *o) {
    adsm__runtime *rt = x->rt;
    if (rt->ndev == 1) return adsm__xlate_range(x, o, 0, o->size);
    if (!(o->dev_resident & adsm__dev_bit(x->d))) return 0;
    size_t unit = rt->proto->whole_object ? o->nblocks : 1;
    for (size_t b = 0; b < o->nblocks; b += unit) {
        if (!(o->blocks[b].dev_valid & adsm__dev_bit(x->d))) continue;
        size_t off = b << rt->cfg.block_shift, len = adsm__blocks_len(b, unit, rt->cfg.block_shift, o->size);
        if (adsm__xlate_range(x, o, off, off + len) != 0) return -1;
    }
    return 0;
}

/* ---- small objects end to end, staged together -------------------------------------------------
 * Staged, a program that makes each node an object of its own (a few KiB each) would cost two
 * copies per object and launch. Whole typed objects that lie end to end in device memory go
 * through the stage together instead: one copy home, each translated at its place, one copy back. */
typedef struct adsm__xlate_batch {
    uintptr_t lo, next, end; /* [lo, end) is copied; the next member must start at `next` */
    adsm__object **members; /* stb_ds array */
} adsm__xlate_batch;

ADSM__PRIVATE int adsm__xlate_batchable(const adsm__xlate_pass *x, const adsm__object *o) {
    return x->rt->ndev == 1 && !adsm__xlate_window(x->rt) && !o->safe && !adsm__type_sparse(o->type) &&
           o->size <= ADSM__XLATE_STAGE / 4;
}

/* Member i's bytes from the host into its place in the stage (adsm__xlate_read_host: its whole
 * span up to the batch's end, so the gaps between members go back as they were). 1 when read. */
ADSM__PRIVATE int adsm__xlate_member_in(adsm__xlate_pass *x, const adsm__xlate_batch *b, ptrdiff_t i) {
    const adsm__object *o = b->members[i];
    return adsm__xlate_read_host(x, o, 0, ADSM__MIN(o->span, b->end - o->dev), x->stage + (o->dev - b->lo));
}

/* The batch's device bytes into the stage: from the host where every member's are the same
 * there, else copied home, and then the members whose flushes the pass took over (their device
 * bytes are stale) from the host all the same. 0, or -1 when a copy failed. */
ADSM__PRIVATE int adsm__xlate_batch_in(adsm__xlate_pass *x, const adsm__xlate_batch *b) {
    adsm__runtime *rt = x->rt;
    ptrdiff_t k = stbds_arrlen(b->members), i = 0;
    size_t n = b->end - b->lo;
    while (i < k && adsm__xlate_member_in(x, b, i)) i++;
    if (i == k) return 0;
    if (adsm__xlate_settle(x) != 0 || rt->be->from_device(rt->dev_ctx[x->d], (uintptr_t)x->stage, b->lo, n) != 0)
        return -1;
    adsm__count_from_device(rt, x->d, n);
    ADSM__ADD(&rt->stats.translation_bytes, n);
    for (i = 0; i < k; i++)
        if (b->members[i]->flush_skipped && !adsm__xlate_member_in(x, b, i)) return -1;
    return 0;
}

/* Coming home, whether every member of the batch is left on the device as the kernel saw it
 * (adsm__xlate_keepable); *copy: whether one must come home for it. */
ADSM__PRIVATE int adsm__xlate_batch_keepable(const adsm__xlate_pass *x, const adsm__xlate_batch *b, int *copy) {
    *copy = 0;
    for (ptrdiff_t i = 0; i < stbds_arrlen(b->members); i++) {
        int c = 1;
        if (!adsm__xlate_keepable(x, b->members[i], 0, b->members[i]->size, &c)) return 0;
        *copy |= c;
    }
    return 1;
}

/* Every member kept (adsm__xlate_keep), buf NULL or the batch's translated bytes. 0, or -1 when
 * one could not be: the batch is rewritten back on the device then. */
ADSM__PRIVATE int adsm__xlate_batch_keep(adsm__xlate_pass *x, const adsm__xlate_batch *b, const unsigned char *buf) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(b->members); i++) {
        adsm__object *o = b->members[i];
        if (adsm__xlate_keep(x, o, buf ? buf + (o->dev - b->lo) : NULL, 0, o->size) != 0) return -1;
    }
    return 0;
}

ADSM__PRIVATE int adsm__xlate_batch_skipped(const adsm__xlate_batch *b) {
    for (ptrdiff_t i = 0; i < stbds_arrlen(b->members); i++)
        if (b->members[i]->flush_skipped) return 1;
    return 0;
}

/* 0, or -1 when a copy failed. A field that cannot go to the device stops the pass before this
 * batch: none of it is written. */
ADSM__PRIVATE int adsm__xlate_flush(adsm__xlate_pass *x, adsm__xlate_batch *b) {
    adsm__runtime *rt = x->rt;
    void *ctx = rt->dev_ctx[x->d];
    ptrdiff_t k = stbds_arrlen(b->members);
    if (k == 0) return 0;
    size_t n = b->end - b->lo;
    int changed = 0, rc = -1, copy = 1, keep = adsm__xlate_batch_keepable(x, b, &copy);
    adsm_result before = x->r;
    if (keep && !copy && adsm__xlate_batch_keep(x, b, NULL) == 0) {
        rc = 0; /* current on the host: nothing comes home */
    } else if (adsm__xlate_stage(x) && adsm__xlate_batch_in(x, b) == 0) {
        for (ptrdiff_t i = 0; i < k; i++) {
            adsm__object *o = b->members[i];
            changed |= adsm__xlate_piece(x, o, x->stage + (o->dev - b->lo), 0, o->size);
        }
        rc = 0;
        int refused = x->to_device && before == ADSM_OK && x->r != ADSM_OK; /* not written: stop below */
        int kept = !refused && keep && x->r == before && adsm__xlate_batch_keep(x, b, x->stage) == 0;
        if (!refused && !kept && (changed || (x->to_device && adsm__xlate_batch_skipped(b)))) {
            rc = rt->be->to_device(ctx, b->lo, (uintptr_t)x->stage, n, 0, ADSM__EVERY_LAUNCH) == 0 ? 0 : -1;
            if (rc == 0) {
                adsm__count_to_device(rt, x->d, 0, n);
                ADSM__ADD(&rt->stats.translation_bytes, n);
            }
        }
    }
    if (x->to_device && (rc != 0 || (before == ADSM_OK && x->r != ADSM_OK))) {
        x->stop = b->members[0]; /* a rollback goes up to this batch: none of it was written */
        x->stop_off = 0;
    }
    stbds_arrsetlen(b->members, 0);
    return rc;
}

/* Whether a pass rewrites o: typed, with a copy of its own on the device (a managed object's is the
 * driver's, an adsm_dev_alloc buffer is never typed). */
ADSM__PRIVATE int adsm__xlate_rewrites(const adsm__object *o) {
    return o->type && !o->managed && !o->device_only;
}

/* Every typed object, in address order, up to x->limit. 0 or -1. */
ADSM__PRIVATE int adsm__xlate_all(adsm__xlate_pass *x) {
    adsm__xlate_batch b;
    memset(&b, 0, sizeof b);
    int rc = 0;
    for (adsm__tree_node *n = adsm__tree_first(&x->rt->objects); n && rc == 0 && !x->stop; n = adsm__tree_next(n)) {
        adsm__object *o = adsm__object_of(n);
        if (!adsm__xlate_rewrites(o)) continue;
        if (x->limit == o && x->limit_off == 0) break; /* nothing of it went translated */
        if (adsm__xlate_batchable(x, o)) {
            if (stbds_arrlen(b.members) && (b.next != o->dev || o->dev + o->size - b.lo > ADSM__XLATE_STAGE))
                rc = adsm__xlate_flush(x, &b);
            if (rc != 0 || x->stop) break;
            if (!stbds_arrlen(b.members)) b.lo = o->dev;
            stbds_arrput(b.members, o);
            b.next = o->dev + o->span;
            b.end = o->dev + o->size;
            continue;
        }
        if ((rc = adsm__xlate_flush(x, &b)) != 0 || x->stop) break;
        rc = adsm__xlate_object(x, o);
        if (x->limit == o) break;
    }
    if (rc == 0 && !x->stop) rc = adsm__xlate_flush(x, &b);
    stbds_arrfree(b.members);
    return rc;
}

/* ---- on the device itself: a patch kernel (cuda) -----------------------------------------------
 * Where the CPU cannot reach device memory and every shared object sits at its host address plus
 * the device's delta (one device, no safe objects), a kernel rewrites the fields where they are:
 * no copy at all (the paper's PCPY). Its check is coarser than the other techniques': a value must
 * lie in adsm's shared range (of host addresses going, of the device's coming back), not in a live
 * object; a stale pointer into a freed object's range is moved like the others, and faults where
 * it is followed (a kernel: launch failed; the CPU: adsm's message about memory no object holds).
 * Each thread rewrites one struct's fields: up to 64 words from first_word, those set in mask.
 * The first bad field is recorded in fault[0..4] (count, element, word, value, tag). Modes:
 * ADSM__PATCH_CHECK checks and changes nothing; ADSM__PATCH_REWRITE checks and rewrites the good
 * fields; ADSM__PATCH_AFTER_CHECK, queued behind a check pass over every typed object, rewrites
 * unless that pass recorded a bad field, so a launch's check and rewrite cost one wait, not two. */
ADSM_KERNEL_DEF(adsm__xlate_patch,
                (ADSM_INOUT(uint64_t, words), ADSM_INOUT(uint64_t, fault), ADSM_VALUE(uint64_t, nelem),
                 ADSM_VALUE(uint64_t, stride_words), ADSM_VALUE(uint64_t, first_word), ADSM_VALUE(uint64_t, mask),
                 ADSM_VALUE(uint64_t, nonnull_mask), ADSM_VALUE(uint64_t, lo), ADSM_VALUE(uint64_t, len),
                 ADSM_VALUE(uint64_t, shift), ADSM_VALUE(uint64_t, mode), ADSM_VALUE(uint64_t, tag)),
                g, {
                    ADSM_FOR_EACH_THREAD(g, i) {
                        /* after a check pass that found a bad field: nothing changes */
                        if (i < nelem && !(mode == 2 && fault[0] != 0)) {
                            uint64_t *e = words + i * stride_words + first_word;
                            for (int b = 0; b < 64; b++) {
                                if (((mask >> b) & 1) == 0) continue;
                                uint64_t v = e[b];
                                int bad = v == 0 ? (int)((nonnull_mask >> b) & 1) : v - lo >= len;
                                if (bad && mode != 2) {
                                    if (adsm_atomic_add_u64(fault, 1) == 0) {
                                        fault[1] = i;
                                        fault[2] = first_word + (uint64_t)b;
                                        fault[3] = v;
                                        fault[4] = tag;
                                    }
                                } else if (!bad && v != 0 && mode != 1) {
                                    e[b] = v + shift;
                                }
                            }
                        }
                    }
                });

#define ADSM__XLATE_FAULT_BYTES 64 /* the patch kernel's fault record, in a device buffer of adsm's */

/* The struct's fields as the patch kernel takes them: 0 where they span more than 64 words. */
ADSM__PRIVATE int adsm__type_words(const adsm_type_desc *t, uint64_t *first, uint64_t *mask, uint64_t *nonnull) {
    size_t lo, hi;
    adsm__type_field_span(t, &lo, &hi);
    if (hi - lo > 64 * sizeof(void *) || t->size % sizeof(uint64_t) != 0) return 0;
    *first = lo / sizeof(void *);
    *mask = *nonnull = 0;
    for (unsigned i = 0; i < t->nfields; i++)
        for (size_t k = 0; k < t->fields[i].count; k++) {
            uint64_t bit = (uint64_t)1 << ((t->fields[i].offset + k * sizeof(void *)) / sizeof(void *) - *first);
            *mask |= bit;
            if (!t->fields[i].nullable) *nonnull |= bit;
        }
    return 1;
}

/* Auto patches on the device only where the typed objects hold at least this much: a patch
 * pass costs a fixed round trip or two (about 0.3 ms a launch on the fourth GPU run, an H200),
 * a staged one a copy each way of what it rewrites (about 1.6 ms per MiB there). There the
 * dense 4-level tree of bench/deepcopy (11 and 87 KB) ran staged at 1.47x and 1.17x the
 * hand-written deep copy against 1.93x and 1.35x patched, while 8 MiB structures ran patched at
 * 0.97-1.02x and staged at up to 1.17x. */
#define ADSM__XLATE_PATCH_MIN ((size_t)128 << 10)

/* Whether a patch kernel pays for the typed objects there are now (ADSM__XLATE_PATCH_MIN). */
ADSM__PRIVATE int adsm__xlate_patch_pays(const adsm__runtime *rt) {
    return rt->cfg.translate == ADSM__TRANSLATE_IN_PLACE ||
           (rt->cfg.translate == ADSM__TRANSLATE_AUTO && rt->typed_bytes >= ADSM__XLATE_PATCH_MIN);
}

/* Whether device d's passes run the patch kernel: launch.h readied it (rt->xlate_fault), one
 * device, no safe objects, no window into device memory, and it pays. */
ADSM__PRIVATE int adsm__xlate_patching(const adsm__runtime *rt, unsigned d) {
    return rt->xlate_fault && rt->ndev == 1 && d == 0 && rt->safe_objects == 0 && !rt->be->device_window &&
           adsm__xlate_patch_pays(rt);
}

enum { ADSM__PATCH_REWRITE = 0, ADSM__PATCH_CHECK = 1, ADSM__PATCH_AFTER_CHECK = 2 }; /* the kernel's modes */

/* One patch launch over o, queued on the device's stream. 0 or -1. */
ADSM__PRIVATE int adsm__xlate_patch_object(adsm__xlate_pass *x, const adsm__object *o, uint64_t mode,
                                           uint64_t tag) {
    adsm__runtime *rt = x->rt;
    const adsm_type_desc *t = o->type;
    adsm__args_adsm__xlate_patch a;
    memset(&a, 0, sizeof a);
    a.words = (uint64_t *)o->dev;
    a.fault = (uint64_t *)rt->xlate_fault;
    a.nelem = o->size / t->size;
    a.stride_words = t->size / sizeof(uint64_t);
    (void)adsm__type_words(t, &a.first_word, &a.mask, &a.nonnull_mask);
    uintptr_t host_lo = rt->base, dev_lo = rt->base + (uintptr_t)x->delta;
    a.lo = x->to_device ? host_lo : dev_lo;
    a.len = rt->half;
    a.shift = x->to_device ? (uint64_t)x->delta : (uint64_t)0 - (uint64_t)x->delta;
    a.mode = mode;
    a.tag = tag;
    adsm__launch l;
    memset(&l, 0, sizeof l);
    l.kernel = adsm__kernel_adsm__xlate_patch();
    uint32_t blocks = (uint32_t)((a.nelem + 255) / 256);
    l.grid = adsm_grid_1d(blocks ? blocks : 1, 256);
    l.grid.begin = 0;
    l.grid.end = adsm_grid_threads(l.grid);
    l.args = &a;
    l.seq = rt->launch_seq + 1;
    l.nwritable = 2;
    l.writable[0].addr = o->dev;
    l.writable[0].len = o->span;
    l.writable[1].addr = rt->xlate_fault;
    l.writable[1].len = ADSM__XLATE_FAULT_BYTES;
    if (rt->be->launch(rt->dev_ctx[x->d], &l) != ADSM_OK) return -1;
    ADSM__STORE(&rt->launch_seq, l.seq);
    rt->dev_last_launch[x->d] = l.seq;
    if (mode != ADSM__PATCH_CHECK) x->patched_fields += a.nelem * (uint64_t)__builtin_popcountll(a.mask);
    return 0;
}

/* Whether every typed object's fields fit the patch kernel (64 words from the first). */
ADSM__PRIVATE int adsm__xlate_all_patchable(const adsm__runtime *rt) {
    uint64_t first, mask, nonnull;
    for (const adsm__object *o = rt->first_object; o; o = o->next)
        if (adsm__xlate_rewrites(o) && !adsm__type_words(o->type, &first, &mask, &nonnull))
            return 0;
    return 1;
}

/* One patch launch in `mode` over every typed object; those whose fields do not fit the kernel go
 * staged (x->dry tells whether they are only checked). 0, or -1 when the device is lost. */
ADSM__PRIVATE int adsm__xlate_patch_launches(adsm__xlate_pass *x, uint64_t mode) {
    uint64_t tag = 0, first, mask, nonnull;
    for (adsm__tree_node *n = adsm__tree_first(&x->rt->objects); n; n = adsm__tree_next(n), tag++) {
        adsm__object *o = adsm__object_of(n);
        if (!adsm__xlate_rewrites(o)) continue;
        if (!adsm__type_words(o->type, &first, &mask, &nonnull)) {
            if (adsm__xlate_object(x, o) != 0) return -1;
        } else if (adsm__xlate_patch_object(x, o, mode, tag) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The fault record after the launches queued: the first bad field reported (x->r), else ADSM_OK;
 * ADSM_ERROR_DEVICE_LOST when it cannot be read. */
ADSM__PRIVATE adsm_result adsm__xlate_patch_result(adsm__xlate_pass *x) {
    adsm__runtime *rt = x->rt;
    void *ctx = rt->dev_ctx[x->d];
    uint64_t fault[5] = {0, 0, 0, 0, 0}, tag = 0;
    if (rt->be->wait(ctx, rt->launch_seq) != 0 ||
        rt->be->from_device(ctx, (uintptr_t)fault, rt->xlate_fault, sizeof fault) != 0)
        return ADSM_ERROR_DEVICE_LOST;
    if (fault[0] == 0) {
        ADSM__ADD(&rt->stats.translated_fields, x->patched_fields);
        return x->r;
    }
    const adsm__object *o = NULL; /* the object the first bad field is in: fault[4] counts objects */
    for (adsm__tree_node *n = adsm__tree_first(&rt->objects); n && !o; n = adsm__tree_next(n), tag++)
        if (tag == fault[4]) o = adsm__object_of(n);
    if (!o) return x->r;
    for (unsigned i = 0; i < o->type->nfields; i++) {
        const adsm_field_desc *f = &o->type->fields[i];
        size_t word = f->offset / sizeof(void *);
        if (fault[2] >= word && fault[2] < word + f->count)
            adsm__xlate_error(x, o, (size_t)fault[1], f, (size_t)(fault[2] - word), (uintptr_t)fault[3]);
    }
    return x->r;
}

/* Every typed object through the patch kernel in `mode`, then the fault record read: the first
 * error, or ADSM_OK. With check_first, a check pass over everything goes first and the rewrite
 * follows it on the stream (ADSM__PATCH_AFTER_CHECK), so both cost one wait; that needs every
 * object on the kernel (a staged one would be rewritten before the check's answer came). */
ADSM__PRIVATE adsm_result adsm__xlate_patch_all(adsm__xlate_pass *x, int check_first) {
    adsm__runtime *rt = x->rt;
    x->patched_fields = 0;
    if (rt->be->dev_memset(rt->dev_ctx[x->d], rt->xlate_fault, 0, ADSM__XLATE_FAULT_BYTES) != 0)
        return ADSM_ERROR_DEVICE_LOST;
    if (check_first && (adsm__xlate_patch_launches(x, ADSM__PATCH_CHECK) != 0 ||
                        adsm__xlate_patch_launches(x, ADSM__PATCH_AFTER_CHECK) != 0))
        return ADSM_ERROR_DEVICE_LOST;
    if (!check_first && adsm__xlate_patch_launches(x, x->dry ? ADSM__PATCH_CHECK : ADSM__PATCH_REWRITE) != 0)
        return ADSM_ERROR_DEVICE_LOST;
    return adsm__xlate_patch_result(x);
}

/* ---- what a kernel can reach, with several devices ---------------------------------------------
 * With one device every object is current there at a launch (release sends every Dirty unit). With
 * several, a launch makes current on its device only what it needs, so the objects a kernel can
 * reach through declared pointer fields, from the objects it names and on through the typed ones
 * among them, are found here and join the launch's list. A unit current on the host is read
 * where it is; one only a device holds is read from there (after its writer), piece by piece
 * through the stage, its fields' spans alone where they are a small part of large structs. */
typedef struct adsm__reach_walk {
    adsm__runtime *rt;
    uintptr_t last_lo, last_len;  /* the object the last field pointed into: noted already */
    uint64_t mark;                /* objects already listed carry it in reach_mark */
    const adsm__object **pending; /* typed objects still to read (stb_ds array) */
    adsm__object ***found;        /* the objects reached, for the caller (stb_ds array) */
    unsigned char *stage;
} adsm__reach_walk;

ADSM__PRIVATE void adsm__reach_note(adsm__reach_walk *w, adsm__object *o, int named) {
    if (!o || o->device_only || o->managed || o->reach_mark == w->mark) return;
    o->reach_mark = w->mark;
    if (!named) stbds_arrput(*w->found, o);
    if (o->type) stbds_arrput(w->pending, o);
}

/* The fields wholly inside piece [p0, p1) of o, held at buf: their targets noted. */
ADSM__PRIVATE void adsm__reach_piece(adsm__reach_walk *w, const adsm__object *o, const unsigned char *buf, size_t p0,
                                     size_t p1) {
    const adsm_field_desc *f;
    size_t k, at;
    for (size_t e = p0 / o->type->size; e * o->type->size < p1; e++) {
        adsm__slots slots = adsm__slots_of(o->type, e, p0, p1);
        while (adsm__next_slot(&slots, &f, &k, &at)) {
            uintptr_t v;
            memcpy(&v, buf + (at - p0), sizeof v);
            if (!v || v - w->last_lo < w->last_len) continue; /* a pool's fields mostly point into it */
            adsm__object *target = adsm__object_of(adsm__tree_find(&w->rt->objects, v));
            if (!target) continue;
            w->last_lo = target->host;
            w->last_len = target->span;
            adsm__reach_note(w, target, 0);
        }
    }
}

/* Bytes [off, end) of o, current only on device s: home through the stage and read. 0 or -1. */
ADSM__PRIVATE int adsm__reach_from_device(adsm__reach_walk *w, const adsm__object *o, unsigned s, size_t off,
                                          size_t end) {
    adsm__runtime *rt = w->rt;
    if (!w->stage && !(w->stage = adsm__xlate_stage_take(rt))) return -1;
    (void)adsm__dev_wait_writer(rt, o); /* a lost writer never finishes: its memory as it stands */
    adsm__pieces it = adsm__pieces_of(o->type, off, end);
    size_t p0, p1;
    while (adsm__next_piece(&it, &p0, &p1)) {
        if (rt->be->from_device(rt->dev_ctx[s], (uintptr_t)w->stage, o->dev + p0, p1 - p0) != 0) return -1;
        adsm__count_from_device(rt, s, p1 - p0);
        ADSM__ADD(&rt->stats.translation_bytes, p1 - p0);
        adsm__reach_piece(w, o, w->stage, p0, p1);
    }
    return 0;
}

/* Every unit of o, from wherever it is current. 0 or -1. */
ADSM__PRIVATE int adsm__reach_object(adsm__reach_walk *w, const adsm__object *o) {
    adsm__runtime *rt = w->rt;
    size_t unit = rt->proto->whole_object ? o->nblocks : 1;
    for (size_t b = 0; b < o->nblocks; b += unit) {
        const adsm__block *head = &o->blocks[b];
        size_t off = b << rt->cfg.block_shift, end = off + adsm__blocks_len(b, unit, rt->cfg.block_shift, o->size);
        if (head->state != ADSM__INVALID) adsm__reach_piece(w, o, (const unsigned char *)o->host + off, off, end);
        else if (adsm__reach_from_device(w, o, adsm__dev_source(rt, head), off, end) != 0) return -1;
    }
    return 0;
}

/* Under lock, several devices: the objects reachable through declared pointer fields from the
 * `named` ones, other than those, appended to *found. ADSM_OK, or the error (a device that cannot
 * be read, no memory for the stage). */
ADSM__PRIVATE adsm_result adsm__reach(adsm__runtime *rt, adsm__object *const *named, size_t nnamed,
                                      adsm__object ***found, const char *kernel) {
    adsm__reach_walk w;
    memset(&w, 0, sizeof w);
    w.rt = rt;
    w.mark = ++rt->reach_marks;
    w.found = found;
    for (size_t i = 0; i < nnamed; i++) adsm__reach_note(&w, named[i], 1);
    int rc = 0;
    while (rc == 0 && stbds_arrlen(w.pending) > 0) rc = adsm__reach_object(&w, stbds_arrpop(w.pending));
    stbds_arrfree(w.pending);
    adsm__xlate_stage_give(rt, w.stage);
    if (rc != 0)
        return adsm__fail(ADSM_ERROR_SYSTEM, "kernel '%s': reading typed objects' pointer fields to find what it "
                          "reaches failed (no memory for a staging buffer, or a device that cannot be read)", kernel);
    return ADSM_OK;
}

/* ---- at a kernel's boundary (launch.h) -------------------------------------------------------- */
ADSM__PRIVATE intptr_t adsm__xlate_delta(const adsm__runtime *rt, unsigned d) {
    return rt->be->address_delta ? rt->be->address_delta(rt->dev_ctx[d]) : 0;
}

/* Whether a launch on device d of a kernel given the objects all[0..n) (those it names, and with
 * several devices those it reaches) must translate: d's addresses differ from the host's or some
 * objects sit at device addresses of their own (safe objects), and one of those objects is typed.
 * A kernel that names no typed object reaches none through declared fields (untyped memory holds
 * no translated pointers), so it runs with every device copy in host form, and asynchronously. */
ADSM__PRIVATE int adsm__xlate_needed(const adsm__runtime *rt, unsigned d, adsm__object *const *all, size_t n) {
    if (!rt->typed_objects || !rt->be->moves_data || (adsm__xlate_delta(rt, d) == 0 && rt->safe_objects == 0))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (all[i]->type) return 1;
    return 0;
}

/* Whether a fault's copy of a typed object runs outside the lock now (launch.h waits for it:
 * translating under it would hand the fault half-translated bytes). */
ADSM__PRIVATE int adsm__xlate_busy(const adsm__runtime *rt) {
    for (const adsm__object *o = rt->first_object; rt->typed_objects && o; o = o->next)
        if (o->type && o->busy_units) return 1;
    return 0;
}

ADSM__PRIVATE adsm__xlate_pass adsm__xlate_begin(adsm__runtime *rt, unsigned d, const char *kernel, int to_device) {
    adsm__xlate_pass x;
    memset(&x, 0, sizeof x);
    x.rt = rt;
    x.d = d;
    x.delta = adsm__xlate_delta(rt, d);
    x.to_device = to_device;
    x.kernel = kernel;
    x.r = ADSM_OK;
    return x;
}

/* Once the kernel of launch kernel_seq on d finished (0: nothing to wait for), the typed objects
 * there back to host addresses (up to a limit, when rolling a failed pass back); the pass waits
 * only where it touches device memory. The first error, or ADSM_OK (also where the device was
 * lost meanwhile: its memory is taken as it stands). */
ADSM__PRIVATE adsm_result adsm__xlate_home(adsm__runtime *rt, unsigned d, const char *kernel, const adsm__object *limit,
                                           size_t limit_off, uint64_t kernel_seq) {
    adsm__xlate_pass x = adsm__xlate_begin(rt, d, kernel, 0);
    x.limit = limit;
    x.limit_off = limit_off;
    x.kernel_seq = kernel_seq;
    int rc = 0;
    if (!limit && adsm__xlate_patching(rt, d)) { /* a rollback never follows a patch pass */
        if (adsm__xlate_settle(&x) != 0) return ADSM_OK;
        adsm_result r = adsm__xlate_patch_all(&x, 0);
        adsm__xlate_stage_give(rt, x.stage);
        if (r == ADSM_ERROR_DEVICE_LOST && x.r == ADSM_OK)
            return adsm__fail(r, "kernel '%s': translating pointer fields back on device %u failed", kernel, d);
        return x.r;
    }
    rc = adsm__xlate_all(&x);
    adsm__xlate_stage_give(rt, x.stage);
    if (x.lost) return ADSM_OK;
    if (rc != 0 && x.r == ADSM_OK)
        x.r = adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': copying pointer fields back from device %u failed",
                         kernel, d);
    return x.r;
}

/* ---- the flushes a staged pass takes over --------------------------------------------------
 * Staged, a typed object the CPU holds current is read from host memory and sent translated, so
 * the raw flush its Dirty units would take at the launch's release sends bytes the pass then
 * overwrites: before the release, such objects take their flushes over (protocol.h, adsm__flush,
 * skips them), and the pass sends every piece of them, changed or not. Only whole copies read
 * from the host: one device, lazy or rolling, staged, neither safe nor sparse, no block Invalid
 * or being copied. */
ADSM__PRIVATE void adsm__xlate_take_flushes(adsm__runtime *rt, unsigned d) {
    if (rt->ndev != 1 || !adsm__tracking(rt) || adsm__xlate_window(rt) || adsm__xlate_patching(rt, d)) return;
    for (adsm__object *o = rt->first_object; o; o = o->next)
        o->flush_by_xlate = adsm__xlate_rewrites(o) && !o->safe && !o->device_newer && !o->busy_units &&
                            !adsm__type_sparse(o->type) &&
                            !(adsm__states_in(o, 0, o->nblocks) & ADSM__HAS(ADSM__INVALID));
}

/* After the pass going to d, or where none ran (nothing_sent): no object takes its flushes any
 * more, and what the pass did not send (all of it, or from where a failed pass stopped on) goes
 * now, raw, as the skipped flushes would have sent it. The first error, or ADSM_OK. */
ADSM__PRIVATE adsm_result adsm__xlate_give_back_flushes(adsm__runtime *rt, unsigned d, const char *kernel,
                                                        const adsm__object *stop, size_t stop_off, int nothing_sent) {
    adsm__xlate_pass x = adsm__xlate_begin(rt, d, kernel, 1);
    int rc = 0;
    for (adsm__object *o = rt->first_object; o; o = o->next) {
        int skipped = o->flush_skipped;
        o->flush_by_xlate = o->flush_skipped = 0;
        size_t p0 = nothing_sent || (stop && o->host > stop->host) ? 0 : stop == o ? stop_off : o->size;
        for (; skipped && rc == 0 && p0 < o->size; p0 += ADSM__XLATE_STAGE) {
            size_t p1 = ADSM__MIN(o->size, p0 + ADSM__XLATE_STAGE);
            if (!adsm__xlate_stage(&x) || !adsm__xlate_read_host(&x, o, p0, p1, x.stage) ||
                rt->be->to_device(rt->dev_ctx[d], o->dev + p0, (uintptr_t)x.stage, p1 - p0, 0, ADSM__EVERY_LAUNCH) != 0)
                rc = -1;
            else adsm__count_to_device(rt, d, 0, p1 - p0);
        }
    }
    adsm__xlate_stage_give(rt, x.stage);
    if (rc == 0) return ADSM_OK;
    return adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': sending typed objects to device %u failed", kernel, d);
}

/* The pass going to d (below); *stop, *stop_off: where a failed staged pass stopped; *nothing_sent:
 * whether no staged pass ran. */
ADSM__PRIVATE adsm_result adsm__xlate_going(adsm__runtime *rt, unsigned d, const char *kernel,
                                            const adsm__object **stop, size_t *stop_off, int *nothing_sent) {
    void *ctx = rt->dev_ctx[d];
    rt->be->drain(ctx);
    if (rt->be->wait(ctx, rt->dev_last_launch[d]) != 0)
        return adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': device %u is lost", kernel, d);
    adsm__xlate_pass x = adsm__xlate_begin(rt, d, kernel, 1);
    int rc = 0;
    if (adsm__xlate_patching(rt, d)) { /* on the device: a check pass, then the pass that rewrites */
        adsm_result r = adsm__xlate_give_back_flushes(rt, d, kernel, NULL, 0, 1); /* none taken, normally */
        if (r != ADSM_OK) return r;
        if (adsm__xlate_all_patchable(rt)) {
            r = adsm__xlate_patch_all(&x, 1);
        } else { /* staged objects among them: the check's answer before anything changes */
            x.dry = 1;
            r = adsm__xlate_patch_all(&x, 0);
            x.dry = 0;
            if (r == ADSM_OK) r = adsm__xlate_patch_all(&x, 0);
        }
        adsm__xlate_stage_give(rt, x.stage);
        if (r == ADSM_ERROR_DEVICE_LOST && x.r == ADSM_OK)
            return adsm__fail(r, "kernel '%s': translating pointer fields on device %u failed", kernel, d);
        return x.r;
    }
    *nothing_sent = 0;
    rc = adsm__xlate_all(&x);
    adsm__xlate_stage_give(rt, x.stage);
    *stop = x.stop;
    *stop_off = x.stop_off;
    if (rc == 0 && x.r == ADSM_OK) return ADSM_OK;
    adsm_result r = x.r != ADSM_OK ? x.r
                                   : adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': copying pointer fields to "
                                                "device %u failed", kernel, d);
    adsm__kept_error why;
    adsm__keep_error(&why);
    (void)adsm__xlate_home(rt, d, kernel, x.stop, x.stop_off, 0); /* what went translated comes back */
    adsm__restore_error(&why);
    return r;
}

/* Before a launch on d (its flushes queued): d goes idle, then its typed objects take its
 * addresses. On an error nothing is left translated. */
ADSM__PRIVATE adsm_result adsm__xlate_before(adsm__runtime *rt, unsigned d, const char *kernel) {
    const adsm__object *stop = NULL;
    size_t stop_off = 0;
    int nothing_sent = 1;
    adsm_result r = adsm__xlate_going(rt, d, kernel, &stop, &stop_off, &nothing_sent);
    char text[512];
    snprintf(text, sizeof text, "%s", r != ADSM_OK ? adsm_last_error() : "");
    adsm_result given = adsm__xlate_give_back_flushes(rt, d, kernel, stop, stop_off, nothing_sent);
    if (r != ADSM_OK) return adsm__fail(r, "%s", text);
    return given;
}

/* After launch `seq` on d: its typed objects back to host addresses, waiting for its kernel only
 * where that needs the device's memory (a launch whose kernel only reads them, staged, returns at
 * once). An error is also kept for the next adsm_sync. */
ADSM__PRIVATE adsm_result adsm__xlate_after(adsm__runtime *rt, unsigned d, const char *kernel, uint64_t seq) {
    adsm_result r = adsm__xlate_home(rt, d, kernel, NULL, 0, seq);
    if (r != ADSM_OK && rt->translate_error == ADSM_OK) {
        rt->translate_error = r;
        snprintf(rt->translate_message, sizeof rt->translate_message, "%s", adsm_last_error());
    }
    return r;
}

/* adsm_sync (under lock): the first error a translation back found since the last sync. */
ADSM__PRIVATE adsm_result adsm__xlate_take_error(adsm__runtime *rt) {
    adsm_result r = rt->translate_error;
    if (r == ADSM_OK) return r;
    rt->translate_error = ADSM_OK;
    return adsm__fail(r, "%s", rt->translate_message);
}

#endif /* ADSM__TRANSLATE_INCLUDED */
