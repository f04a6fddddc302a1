/* adsm_impl/launch.h -- an ADSM_CALL from the call to the backend, and adsm_sync.
 *
 * Binding: the object behind every pointer argument (safe objects translated to their device
 * addresses), the device ranges the kernel may write and those it may only read. The launch:
 * its device (the program's, or placement's: directory.h), room there (capacity.h), its inputs
 * brought there from other devices (peer.h) and from the host (directory.h), the protocol's
 * release of what the CPU wrote, then the backend's launch. Sync waits for every device and lets
 * the protocol acquire.
 *
 * Normal thread context. A launch holds launch_mutex (launches and evictions take turns) and the
 * runtime lock, which the eviction and copy steps let go and take again, looking everything up
 * again afterwards; binding runs with the lock held and neither allocates nor calls a backend. */
#ifndef ADSM__LAUNCH_INCLUDED
#define ADSM__LAUNCH_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "object.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "kernel.h"
#include "directory.h"
#include "protocol.h"
#include "capacity.h"
#include "peer.h"
#include "lifecycle.h"
#include "module.h"
#include "explicit.h"
#include "translate.h"

ADSM__PRIVATE void adsm__add_range(adsm__range *ranges, size_t *n, uintptr_t addr, size_t len, const char *param) {
    for (size_t i = 0; i < *n; i++)
        if (ranges[i].addr == addr) return;
    ranges[*n].addr = addr;
    ranges[*n].len = len;
    ranges[*n].param = param;
    (*n)++;
}

/* Finds the object behind a pointer argument, translating host addresses of safe objects into
 * device addresses in place. */
ADSM__PRIVATE adsm_result adsm__bind_pointer(adsm__runtime *rt, const adsm_kernel_desc *k, const adsm_param_desc *p,
                                             unsigned char *args, adsm__object **out) {
    void *value;
    memcpy(&value, args + p->offset, sizeof value);
    uintptr_t a = (uintptr_t)value;
    *out = NULL;
    if (!value) return ADSM_OK;
    adsm__object *o = adsm__object_of(adsm__tree_find(&rt->objects, a));
    if (o && o->safe) {
        void *dev = (void *)(o->dev + (a - o->host));
        memcpy(args + p->offset, &dev, sizeof dev);
    } else if (!o) { /* already a device address (adsm_safe's, a device buffer's) */
        uintptr_t d = adsm__dev_in(rt, a);
        adsm__tree_node *n = adsm__tree_find(&rt->safe_dev, d);
        adsm__object *plain = n || !rt->dev_delta ? NULL : adsm__object_of(adsm__tree_find(&rt->objects, d));
        if (n) o = ADSM__CONTAINER_OF(n, adsm__object, dev_node);
        else if (plain && !plain->safe && plain->dev == plain->host) o = plain; /* adsm_safe of an ordinary object */
        if (o) {
            void *dev = (void *)d; /* the backend translates it back */
            memcpy(args + p->offset, &dev, sizeof dev);
        }
    }
    if (!o)
        return adsm__fail(ADSM_ERROR_NOT_SHARED,
                          "kernel '%s': parameter '%s' (%s) is %p, which is not inside a shared object", k->name,
                          p->name, adsm__access_names[p->access], value);
    *out = o;
    return ADSM_OK;
}

ADSM__PRIVATE int adsm__in_list(adsm__object *const *list, size_t n, const adsm__object *o) {
    for (size_t i = 0; i < n; i++)
        if (list[i] == o) return 1;
    return 0;
}

/* Binds every pointer argument; writes gets the shared objects the kernel may write (with their
 * writer before this launch), used every shared object it names (directory.h moves them). */
ADSM__PRIVATE adsm_result adsm__prepare_launch(adsm__runtime *rt, adsm__launch *l, unsigned char *args,
                                               adsm__object **writes, uint64_t *writer_before, size_t *nwrites,
                                               adsm__object **used, size_t *nused) {
    const adsm_kernel_desc *k = l->kernel;
    for (unsigned i = 0; i < k->nparams; i++) {
        const adsm_param_desc *p = &k->params[i];
        adsm__object *o;
        if (!adsm__access_is_pointer(p->access)) continue;
        adsm_result r = adsm__bind_pointer(rt, k, p, args, &o);
        if (r != ADSM_OK) return r;
        if (!o) continue;
        if (!adsm__in_list(used, *nused, o)) used[(*nused)++] = o;
        if (adsm__access_writes(p->access)) {
            size_t before = l->nwritable;
            adsm__add_range(l->writable, &l->nwritable, o->dev, o->span, p->name);
            if (l->nwritable > before && !o->device_only) {
                writer_before[*nwrites] = o->writer_seq;
                writes[(*nwrites)++] = o;
            }
        } else {
            adsm__add_range(l->inputs, &l->ninputs, o->dev, o->span, p->name);
        }
    }
    return ADSM_OK;
}

ADSM__PRIVATE size_t adsm__count(adsm__object *const *list) { return (size_t)stbds_arrlen(list); }

/* The objects a launch makes current on its device, into *all: those it names, and with several
 * devices those it reaches through declared pointer fields (translate.h), since only what a launch
 * lists goes there (with one device every object is current at a launch). What it reaches it may
 * read: one input range covers it, so a device's streams order the kernel after those that write
 * any of it, and before those that will. */
ADSM__PRIVATE adsm_result adsm__launch_list(adsm__runtime *rt, adsm__launch *l, adsm__object *const *used,
                                            size_t nused, adsm__object ***all) {
    stbds_arrsetlen(*all, 0);
    for (size_t i = 0; i < nused; i++) stbds_arrput(*all, used[i]);
    if (rt->ndev == 1 || !rt->typed_objects) return ADSM_OK;
    adsm_result r = adsm__reach(rt, used, nused, all, l->kernel->name);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = nused; i < adsm__count(*all); i++) {
        lo = ADSM__MIN(lo, (*all)[i]->dev);
        hi = ADSM__MAX(hi, (*all)[i]->dev + (*all)[i]->span);
    }
    if (r == ADSM_OK && hi > lo) adsm__add_range(l->inputs, &l->ninputs, lo, hi - lo, "(what it reaches through "
                                                 "pointer fields)");
    return r;
}

/* Before the locks: on a backend whose device memory the CPU cannot reach (cuda), once typed
 * objects exist, the patch kernel is compiled and its fault record allocated (translate.h), so
 * that translations run on the device; where that fails they stay staged, said once. */
ADSM__PRIVATE void adsm__xlate_ready_patch(adsm__runtime *rt) {
    if (!rt->typed_objects || rt->xlate_fault || rt->xlate_patch_refused || rt->be->device_window ||
        !rt->be->module_load || !rt->be->moves_data || !adsm__xlate_patch_pays(rt))
        return;
    void *fault = NULL;
    adsm_result r = adsm__prepare_everywhere(rt, adsm__kernel_adsm__xlate_patch());
    if (r == ADSM_OK) fault = adsm__dev_alloc_unguarded(0, ADSM__XLATE_FAULT_BYTES);
    if (fault) {
        rt->xlate_fault = adsm__dev_in(rt, (uintptr_t)fault);
        return;
    }
    rt->xlate_patch_refused = 1;
    adsm__log(ADSM_LOG_INFO, "pointer fields: the device patch kernel is not available (%s); they are translated "
              "through host memory", adsm_last_error());
    adsm__clear_error();
}

ADSM__PRIVATE int adsm__any_busy(adsm__object *const *objects, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (objects[i]->busy_units) return 1;
    return 0;
}

/* ---- the launch: binding, placement, room, copies, release, the backend's launch ------------ */
ADSM__PRIVATE adsm_result adsm__launch_body(int dev, const adsm_kernel_desc *k, adsm_grid grid, const void *args) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r;
    if ((r = adsm__ensure()) != ADSM_OK) return r;
    if (dev != ADSM_ANY_DEVICE && (dev < 0 || (unsigned)dev >= rt->ndev))
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': device %d; adsm drives %u (0..%u)",
                          k ? k->name : "?", dev, rt->ndev, rt->ndev - 1);
    if ((r = adsm__check_kernel_desc(k, "adsm_launch")) != ADSM_OK) return r;
    if (!k->body && !rt->be->module_load) /* cuda finds kernels in modules instead */
        return adsm__fail(ADSM_ERROR_NO_KERNEL_BODY, "kernel '%s' has no body: define void %s(adsm_grid, ...) "
                          "(in C++, where its ADSM_KERNEL declaration is seen: the body has C linkage)",
                          k->name, k->name);
    if (!args) return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': NULL argument block", k->name);
    if (rt->be->max_args && k->args_size > rt->be->max_args) /* refused before anything moves */
        return adsm__fail(ADSM_ERROR_INVALID_VALUE, "kernel '%s': %zu bytes of arguments, the %s backend takes %zu",
                          k->name, k->args_size, rt->be->name, rt->be->max_args);
    if ((r = adsm__check_launch_shape(k, grid)) != ADSM_OK) return r;
    if ((r = adsm__prepare_everywhere(rt, k)) != ADSM_OK) return r;
    adsm__xlate_ready_patch(rt);
    size_t threads = adsm_grid_threads(grid); /* counted without overflow: checked above */
    grid.begin = 0;
    grid.end = threads;
    unsigned char *buf = (unsigned char *)malloc(k->args_size ? k->args_size : 1);
    if (!buf) return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "kernel '%s': out of memory", k->name);
    adsm__launch l;
    adsm__object *writes[ADSM__MAX_PARAMS], *used[ADSM__MAX_PARAMS];
    adsm__object **all = NULL; /* stb_ds: the objects it names, then those it reaches (several devices) */
    uint64_t writer_before[ADSM__MAX_PARAMS];
    unsigned writer_dev_before[ADSM__MAX_PARAMS];
    size_t nwrites = 0, nused = 0;
    unsigned d = 0;
    pthread_mutex_lock(&rt->launch_mutex);
    adsm__lock(&rt->lock);
    if (adsm__bring_outputs_home(rt) != 0) /* write-through: the last calls' outputs first */
        r = adsm__fail(ADSM_ERROR_SYSTEM, "write-through: bringing a kernel's output home failed");
    for (; r == ADSM_OK;) {
        memcpy(buf, args, k->args_size); /* binding translates pointers in place */
        memset(&l, 0, sizeof l);
        l.kernel = k;
        l.grid = grid;
        l.args = buf;
        l.seq = rt->launch_seq + 1;
        nwrites = nused = 0;
        r = adsm__prepare_launch(rt, &l, buf, writes, writer_before, &nwrites, used, &nused);
        if (r == ADSM_OK) r = adsm__launch_list(rt, &l, used, nused, &all);
        if (r != ADSM_OK) break;
        if (adsm__any_busy(all, adsm__count(all))) {
            /* a fault is fetching an object this kernel writes (let it finish), or a free is
             * settling one it uses (it is gone afterwards) */
            adsm__await_copies(rt);
            continue;
        }
        d = dev == ADSM_ANY_DEVICE ? adsm__place(rt, writes, nwrites, used, nused) : (unsigned)dev;
        /* lost: known with several devices; with one, the backend knows (a copy meeting it first
         * failed with whatever errno was left) */
        if (adsm__dev_is_lost(rt, d)) {
            r = adsm__fail(ADSM_ERROR_DEVICE_LOST, "kernel '%s': device %u is lost", k->name, d);
            break;
        }
        int again = 0; /* an eviction or a peer copy let the lock go: look everything up again */
        r = adsm__room_for_launch(rt, all, adsm__count(all), d, k->name, &again);
        if (r == ADSM_OK && !again) r = adsm__peer_copies(rt, all, adsm__count(all), d, &again);
        if (r != ADSM_OK || !again) break;
    }
    for (size_t i = 0; i < nwrites; i++) writer_dev_before[i] = writes[i]->writer_dev;
    /* the lock goes at times from here until the kernel is issued: its objects are held (protocol.h) */
    int held = r == ADSM_OK;
    if (held) adsm__launch_hold(all, adsm__count(all));
    rt->release_dev = (int)d; /* flushes at this call go to d */
    /* declared pointer fields (translate.h) */
    int xlate = r == ADSM_OK && adsm__xlate_needed(rt, d, all, adsm__count(all));
    if (xlate) adsm__xlate_take_flushes(rt, d);
    if (r == ADSM_OK) r = adsm__gather(rt, all, adsm__count(all), d);
    if (r == ADSM_OK) r = rt->proto->release(rt, writes, nwrites, all, adsm__count(all), l.seq);
    rt->release_dev = -1;
    adsm__kept_error why; /* a failure's, kept across the clean-ups below, which may fail too */
    if (xlate && r != ADSM_OK) {
        adsm__keep_error(&why);
        (void)adsm__xlate_give_back_flushes(rt, d, k->name, NULL, 0, 1);
        adsm__restore_error(&why);
    }
    xlate = xlate && r == ADSM_OK;
    if (xlate) {
        while (adsm__xlate_busy(rt)) adsm__await_copies(rt); /* the objects stay held meanwhile */
        if ((r = adsm__xlate_before(rt, d, k->name)) != ADSM_OK) xlate = 0;
        if (rt->launch_seq >= l.seq) { /* patch kernels ran under this number: the kernel takes the next */
            uint64_t next = rt->launch_seq + 1;
            for (size_t i = 0; i < nwrites; i++)
                if (writes[i]->writer_seq == l.seq) writes[i]->writer_seq = next;
            l.seq = next;
        }
    }
    uint64_t flushes_before = rt->flushes_queued; /* they run before this launch (stream order) */
    if (r == ADSM_OK && (r = rt->be->launch(rt->dev_ctx[d], &l)) == ADSM_ERROR_DEVICE_LOST) adsm__mark_lost(rt, d);
    if (r == ADSM_OK) { /* before the translation back: its patch kernels take the next numbers */
        rt->dev_last_launch[d] = l.seq;
        ADSM__STORE(&rt->launch_seq, l.seq);
        if (rt->ndev == 1) rt->flushes_before_launch = flushes_before;
    }
    adsm_result after = ADSM_OK;
    if (xlate && r == ADSM_OK) after = adsm__xlate_after(rt, d, k->name, l.seq);
    if (xlate && r != ADSM_OK) {
        adsm__keep_error(&why);
        (void)adsm__xlate_home(rt, d, k->name, NULL, 0, 0);
        adsm__restore_error(&why);
    }
    for (size_t i = 0; i < nwrites; i++) writes[i]->host_kept = 0; /* its kernel may have run */
    if (r == ADSM_OK) {
        adsm__note_users(all, adsm__count(all), d, l.seq);
        ADSM__ADD(&rt->stats.launches, 1);
        ADSM__ADD(&rt->dev_stats[d].launches, 1);
        if (adsm__tracking(rt)) {
            adsm__drop_replicas(rt, all, adsm__count(all), writes, nwrites, d);
            adsm__note_outputs(rt, writes, nwrites);
            adsm__note_small_outputs(rt, writes, nwrites);
        }
    } else {
        /* this launch will not write them; an earlier one still may */
        for (size_t i = 0; i < nwrites; i++) {
            writes[i]->writer_seq = writer_before[i];
            writes[i]->writer_dev = writer_dev_before[i];
        }
    }
    if (held) adsm__launch_let_go(rt, all, adsm__count(all));
    adsm__unlock(&rt->lock);
    pthread_mutex_unlock(&rt->launch_mutex);
    free(buf);
    stbds_arrfree(all);
    return r != ADSM_OK ? r : after;
}

/* ---- waiting for launches (adsm_sync) ------------------------------------------------------ */
/* Waits for every device and returns the first error, naming its device when there are several.
 * With several devices a lost one is reported once and then left alone, so the others keep
 * working; with one (or once every device is lost) the loss is reported at every sync. */
ADSM__PRIVATE adsm_result adsm__devices_synchronize(adsm__runtime *rt) {
    adsm_result first = ADSM_OK;
    char text[512] = "";
    for (unsigned d = 0; d < rt->ndev; d++) {
        if (ADSM__LOAD(&rt->dev_loss_reported) & adsm__dev_bit(d)) continue; /* reported already */
        adsm_result r = rt->be->synchronize(rt->dev_ctx[d]);
        if (r == ADSM_OK && (adsm__lost_devices(rt) & adsm__dev_bit(d))) /* found lost elsewhere */
            r = adsm__fail(ADSM_ERROR_DEVICE_LOST, "device %u is lost", d);
        if (r == ADSM_OK) continue;
        if (first == ADSM_OK) {
            first = r;
            if (rt->ndev > 1) snprintf(text, sizeof text, "device %u: %.480s", d, adsm_last_error());
            else snprintf(text, sizeof text, "%s", adsm_last_error());
        }
        /* lost, or a crash its device does not recover from (a CUDA context's; wait says lost) */
        if (r == ADSM_ERROR_DEVICE_LOST || rt->be->wait(rt->dev_ctx[d], 0) != 0) adsm__mark_lost(rt, d);
        if (adsm__lost_devices(rt) & adsm__dev_bit(d)) __atomic_fetch_or(&rt->dev_loss_reported, adsm__dev_bit(d), __ATOMIC_RELAXED);
    }
    if (first == ADSM_OK && rt->ndev > 1 && adsm__live_devices(rt) == 0) {
        first = ADSM_ERROR_DEVICE_LOST;
        snprintf(text, sizeof text, "every device is lost");
    }
    if (first != ADSM_OK) adsm__fail(first, "%s", text);
    return first;
}

/* A launch, traced as one "call" span (the CPU's cost of it; the kernel has spans of its own). */
ADSM__PRIVATE adsm_result adsm__launch_unguarded(int dev, const adsm_kernel_desc *k, adsm_grid grid,
                                                const void *args) {
    uint64_t t0 = adsm__now_ns();
    adsm_result r = adsm__launch_body(dev, k, grid, args);
    adsm__trace(&adsm__rt.trace, ADSM__TR_CALL, t0, 0, 0);
    return r;
}

ADSM__PRIVATE adsm_result adsm__sync_unguarded(void) {
    adsm__runtime *rt = &adsm__rt;
    if (!adsm__ready()) return ADSM_OK;
    uint64_t t0 = adsm__now_ns();
    adsm__lock(&rt->lock);
    uint64_t launched = rt->flushes_before_launch; /* of a launch the wait below covers */
    adsm__unlock(&rt->lock);
    adsm_result r = adsm__devices_synchronize(rt);
    adsm__lock(&rt->lock);
    /* Those flushes are done: a CPU write to, or an invalidation of, a unit they sent waits for
     * no drain (on cuda a round trip to the engine thread; histo paid one per iteration). */
    if (r == ADSM_OK) adsm__flushes_settled(rt, launched);
    if (adsm__bring_outputs_home(rt) != 0 && r == ADSM_OK)
        r = adsm__fail(ADSM_ERROR_SYSTEM, "write-through: bringing a kernel's output home failed");
    if (r == ADSM_OK) adsm__bring_small_outputs_home(rt);
    adsm_result a = rt->proto->acquire(rt);
    adsm_result x = adsm__xlate_take_error(rt);
    adsm__unlock(&rt->lock);
    adsm__trace(&rt->trace, ADSM__TR_SYNC, t0, 0, 0);
    return r != ADSM_OK ? r : a != ADSM_OK ? a : x;
}

#endif /* ADSM__LAUNCH_INCLUDED */
