/* adsm_impl/lifecycle.h -- starting and stopping the runtime: settings, the address
 * reservation, the backend (cuda if a GPU answers, else the emulator, unless told) and its
 * devices, the protocol, the fault handler; and at shutdown everything in the reverse order.
 *
 * Normal thread context. adsm__start and adsm__stop run under the initialisation mutex
 * (adsm_init, adsm_shutdown and adsm__ensure in api.h take it); adsm__stop first waits until no
 * call is using the runtime (runtime.h), then takes the runtime lock to drop the objects. */
#ifndef ADSM__LIFECYCLE_INCLUDED
#define ADSM__LIFECYCLE_INCLUDED

#include "common.h"
#include "os.h"
#include "blocktree.h"
#include "stats.h"
#include "config.h"
#include "object.h"
#include "protection.h"
#include "copy.h"
#include "trace.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "host_pages.h"
#include "protocol_vtbl.h"
#include "protocol.h"
#include "protocol_batch.h"
#include "protocol_lazy.h"
#include "protocol_rolling.h"
#include "protocol_um.h"
#include "backend_host.h"
#include "emu/backend_emu.h"
#include "cuda/backend_cuda.h"
#include "fault.h"
#include "io.h"
#include "bounce.h"
#include "object_life.h"
#include "xlate_stage.h"

/* Writes the ADSM_TRACE file, saying what went wrong. */
ADSM__PRIVATE void adsm__close_trace(adsm__runtime *rt) {
    uint64_t dropped;
    int err = adsm__trace_close(&rt->trace, &dropped);
    if (err) adsm__log(ADSM_LOG_WARN, "ADSM_TRACE: cannot write %s: %s", rt->trace.path, strerror(err));
    if (dropped)
        adsm__log(ADSM_LOG_WARN, "ADSM_TRACE: %llu events past the first %zu were dropped", (unsigned long long)dropped,
                  ADSM__TRACE_EVENTS);
}

/* At exit, for a program that ends without adsm_shutdown (README's own example does): its
 * ADSM_TRACE file is written from what was recorded so far, and says so at info. adsm's threads
 * are left running, as the process is ending; the buffer stays mapped, so a late event lands
 * there. Not in a forked child that exits (the trace is its parent's). Normal context. */
static void adsm__trace_at_exit(void) {
    adsm__runtime *rt = &adsm__rt;
    uint64_t dropped = 0;
    if (!rt->trace.events || rt->trace.pid != getpid()) return;
    int err = adsm__trace_write(&rt->trace, &dropped);
    if (err) adsm__log(ADSM_LOG_WARN, "ADSM_TRACE: cannot write %s at exit: %s", rt->trace.path, strerror(err));
    else adsm__log(ADSM_LOG_INFO, "ADSM_TRACE: %s written at exit (adsm_shutdown was not called)", rt->trace.path);
}

/* The address reservation, the fetch staging slots, the bounce buffers and the trace buffer,
 * made by adsm__start (the trace file is written here, after the backend's threads stopped). */
ADSM__PRIVATE void adsm__release_memory(adsm__runtime *rt) {
    adsm__release_reservation(rt);
    adsm__bounce_release_all(rt);
    adsm__filler_release(&rt->fill);
    adsm__close_trace(rt);
    adsm__protection_close(&rt->protection); /* its registrations went with the reservation */
}

ADSM__PRIVATE const adsm__protocol_vtbl *adsm__protocol_for(adsm_protocol_kind kind) {
    switch (kind) {
    case ADSM_PROTOCOL_BATCH: return &adsm__protocol_batch;
    case ADSM_PROTOCOL_LAZY: return &adsm__protocol_lazy;
    case ADSM_PROTOCOL_UM: return &adsm__protocol_um;
    case ADSM_PROTOCOL_UM_PREFETCH: return &adsm__protocol_um_prefetch;
    case ADSM_PROTOCOL_HMM: return &adsm__protocol_hmm;
    default: return &adsm__protocol_rolling;
    }
}

/* The unified-memory protocols need the backend's managed memory (cuda), hmm a device that
 * reaches pageable host memory, and they drive one device: elsewhere they are refused, not
 * quietly replaced. */
ADSM__PRIVATE adsm_result adsm__protocol_fits(const adsm__runtime *rt) {
    const adsm__protocol_vtbl *asked = adsm__protocol_for(rt->cfg.protocol);
    if (!asked->managed) return ADSM_OK;
    if (!rt->be->managed_alloc)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_PROTOCOL=%s: unified memory is the CUDA driver's; the %s "
                          "backend has none (batch, lazy and rolling run everywhere)", asked->name, rt->be->name);
    if (rt->ndev > 1)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_PROTOCOL=%s drives one GPU; %u are in use (ADSM_DEVICES)",
                          asked->name, rt->ndev);
    if (asked->system_memory && !(rt->be->pageable_access && rt->be->pageable_access(rt->be_ctx)))
        return adsm__fail(ADSM_ERROR_UNSUPPORTED, "ADSM_PROTOCOL=%s: this GPU does not reach pageable host memory "
                          "(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS is 0: no HMM in the kernel and driver, nor "
                          "ATS); um and um-prefetch use managed memory instead", asked->name);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__backend_start(adsm__runtime *rt) {
    const adsm__backend_vtbl *choice;
    switch (rt->cfg.backend) {
    case ADSM_BACKEND_HOST: choice = &adsm__backend_host; break;
    case ADSM_BACKEND_CUDA: choice = &adsm__backend_cuda; break;
    case ADSM_BACKEND_EMU: choice = &adsm__backend_emu; break;
    default: /* auto: a GPU if one answers, else the emulator */
        if (adsm__backend_cuda.init(rt, &rt->be_ctx) == ADSM_OK) {
            rt->be = &adsm__backend_cuda;
            return ADSM_OK;
        }
        adsm__log(ADSM_LOG_INFO, "no CUDA device (%s); using the emulated device", adsm__tls_error);
        choice = &adsm__backend_emu;
        break;
    }
    adsm_result r = choice->init(rt, &rt->be_ctx);
    if (r == ADSM_OK) rt->be = choice;
    return r;
}

/* Ends every device's context (each backend's shutdown runs what is still queued first). */
ADSM__PRIVATE void adsm__devices_stop(adsm__runtime *rt) {
    for (unsigned d = rt->ndev; d-- > 1;) rt->be->shutdown(rt->dev_ctx[d]);
    rt->be->shutdown(rt->dev_ctx[0]);
    memset(rt->dev_ctx, 0, sizeof rt->dev_ctx);
    rt->ndev = 0;
}

/* The backend's first context is device 0; the backend says how many it drives (emu starts
 * ADSM_EMU_DEVICES - 1 more device processes, each with its own memory at the same addresses;
 * cuda a context per GPU ADSM_DEVICES lists). Several devices need a tracking protocol: the
 * directory (directory.h) follows lazy's and rolling's units. */
ADSM__PRIVATE adsm_result adsm__devices_start(adsm__runtime *rt) {
    unsigned want = rt->be->device_count ? rt->be->device_count(rt->be_ctx) : 1;
    rt->ndev = 1;
    rt->dev_ctx[0] = rt->be_ctx;
    rt->release_dev = -1;
    rt->dev_lost = rt->dev_loss_reported = 0;
    memset(rt->dev_stats, 0, sizeof rt->dev_stats);
    memset(rt->dev_bytes, 0, sizeof rt->dev_bytes);
    memset(rt->dev_done_seq, 0, sizeof rt->dev_done_seq);
    memset(rt->dev_last_launch, 0, sizeof rt->dev_last_launch);
    rt->translate_error = ADSM_OK;
    rt->lru_clock = rt->objects_dealt = 0;
    if (rt->cfg.emu_devices > 1 && rt->be != &adsm__backend_emu)
        adsm__log(ADSM_LOG_WARN, "ADSM_EMU_DEVICES=%u applies to the emu backend; %s drives %u device%s",
                  rt->cfg.emu_devices, rt->be->name, want, want == 1 ? "" : "s");
    if (want > 1 && rt->cfg.protocol == ADSM_PROTOCOL_BATCH)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "%s=%u devices: the batch protocol drives one device; "
                          "use lazy or rolling", rt->be == &adsm__backend_emu ? "ADSM_EMU_DEVICES" : "ADSM_DEVICES",
                          want);
    for (unsigned d = 1; d < want; d++) {
        adsm_result r = rt->be->init(rt, &rt->dev_ctx[d]);
        rt->be_ctx = rt->dev_ctx[0]; /* emu's init points it at the device it starts */
        if (r != ADSM_OK) return r;
        rt->ndev++;
    }
    for (unsigned d = 0; d < rt->ndev && rt->be->start; d++) { /* threads after every fork */
        adsm_result r = rt->be->start(rt->dev_ctx[d]);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

/* Which engine sees CPU writes (protection.h). auto is mprotect: userfaultfd keeps one thread's
 * write faults flat in the object size, but un-protecting a page costs every other CPU running
 * the process a TLB shootdown, so threads faulting at once scale worse than with mprotect
 * (docs/design.md section 4 has the figures); the program asks for it (ADSM_FAULT_ENGINE) where
 * that trade pays. Not on cuda: write-protection of page-locked object pages is not verified on
 * a real driver. Opened after the devices start: their processes are forked without it. */
ADSM__PRIVATE adsm_result adsm__protection_start(adsm__runtime *rt) {
    int asked = rt->cfg.fault_engine == ADSM_FAULT_ENGINE_USERFAULTFD;
    const char *why = "";
    if (asked && rt->be == &adsm__backend_cuda)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_FAULT_ENGINE=userfaultfd: the cuda backend uses mprotect "
                          "(write-protection of page-locked object pages is not verified on a GPU yet)");
    /* untracked (host backend, batch): nothing is protected, so no engine is needed */
    if (adsm__protection_open(&rt->protection, asked && adsm__tracking(rt), &why) != 0)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_FAULT_ENGINE=userfaultfd: %s", why);
    return ADSM_OK;
}

/* Runs in the child of a fork(), before fork returns there (one thread; a store only). A runtime
 * that was running belongs to the parent: its engine and completion threads are not in the child,
 * so a fetch or a launch there would wait for ever (cuda), and the emu device's socket and memory
 * are the parent's, which the child's copies would disturb. The child sees FORKED instead: calls
 * fail saying why, and a fault on shared memory is explained before the child dies. */
static void adsm__forked(void) {
    if (adsm__ready() || ADSM__LOAD(&adsm__rt.lifecycle_busy)) ADSM__STORE(&adsm__rt.state, ADSM__RT_FORKED);
}

/* init_mutex, taken by adsm_init, adsm_shutdown and a first use's start, with lifecycle_busy
 * raised while it is held: a child forked meanwhile (by another thread) would find the mutex
 * held for ever, so adsm__forked tells it it is a forked child, whose calls fail saying so
 * before they take the mutex (they waited for ever). The emu device's processes, forked from a
 * start, set their own state. */
ADSM__PRIVATE void adsm__lifecycle_lock(void) {
    pthread_mutex_lock(&adsm__rt.init_mutex);
    ADSM__STORE(&adsm__rt.lifecycle_busy, 1);
}

ADSM__PRIVATE void adsm__lifecycle_unlock(void) {
    ADSM__STORE(&adsm__rt.lifecycle_busy, 0);
    pthread_mutex_unlock(&adsm__rt.init_mutex);
}

ADSM__PRIVATE adsm_result adsm__start(const adsm_config *cfg) {
    adsm__runtime *rt = &adsm__rt;
    adsm_result r; /* a forked child never gets here: adsm_init and adsm__ensure refuse before the mutex */
    if (!rt->atfork_registered) rt->atfork_registered = pthread_atfork(NULL, NULL, adsm__forked) == 0;
    if (!adsm__real_sigaction()) return adsm__fail(ADSM_ERROR_UNSUPPORTED, "%s", ADSM__NO_DLSYM_TEXT);
    rt->page = (size_t)sysconf(_SC_PAGESIZE);
    if ((r = adsm__settings_resolve(cfg, rt->page, &rt->cfg)) != ADSM_OK) return r;
    if ((r = adsm__reserve(rt)) != ADSM_OK) {
        adsm__release_memory(rt);
        return r;
    }
    if (adsm__filler_init(&rt->fill, rt->page) != 0) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "cannot map %zu MiB of staging for fetches: %s",
                       ADSM__FILL_BYTES >> 20, strerror(errno));
        adsm__release_memory(rt);
        return r;
    }
    if (adsm__bounce_pool_ready(rt) != 0) {
        adsm__release_memory(rt);
        return adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "out of memory for the bounce buffers' pool");
    }
    if (adsm__trace_open(&rt->trace, rt->cfg.trace_path) != 0) {
        r = adsm__fail(ADSM_ERROR_OUT_OF_MEMORY, "ADSM_TRACE: cannot map the event buffer: %s", strerror(errno));
        adsm__release_memory(rt);
        return r;
    }
    int trace_err = rt->trace.events ? adsm__trace_writable(rt->trace.path) : 0;
    if (trace_err) /* the run goes on: the trace is a diagnosis, not the program's work */
        adsm__log(ADSM_LOG_WARN, "ADSM_TRACE: %s cannot be written (%s): the trace will be lost unless that changes "
                  "before the run ends", rt->trace.path, strerror(trace_err));
    if (rt->trace.events && !rt->trace_exit_registered) rt->trace_exit_registered = atexit(adsm__trace_at_exit) == 0;
    adsm__tree_init(&rt->objects);
    adsm__tree_init(&rt->safe_dev);
    adsm__tree_init(&rt->host_buffers);
    rt->dev_delta = 0; /* a backend whose device addresses differ sets it */
    rt->ndev = 0;      /* the index of the device whose context starts next (cuda reads it) */
    rt->dev_granule = 0;
    /* under um and hmm objects live in managed or host memory: device memory mapped ahead for
     * them would sit unused (adsm_dev_alloc buffers map their own); asked for, it is still mapped */
    if (adsm__protocol_for(rt->cfg.protocol)->managed && rt->cfg.cuda_map_ahead == ADSM__CUDA_MAP_AHEAD_AUTO)
        rt->cfg.cuda_map_ahead = 0;
    if ((r = adsm__backend_start(rt)) != ADSM_OK) {
        adsm__release_memory(rt);
        return r;
    }
    if ((r = adsm__devices_start(rt)) != ADSM_OK) {
        adsm__devices_stop(rt);
        adsm__release_memory(rt);
        return r;
    }
    rt->proto = rt->be->moves_data ? adsm__protocol_for(rt->cfg.protocol) : &adsm__protocol_untracked;
    if ((r = adsm__protocol_fits(rt)) != ADSM_OK || (r = adsm__protection_start(rt)) != ADSM_OK ||
        (r = adsm__fault_install(rt)) != ADSM_OK) {
        adsm__fault_uninstall(rt);
        adsm__devices_stop(rt);
        adsm__release_memory(rt);
        return r;
    }
    adsm__preparer_start(rt);
    adsm__log(ADSM_LOG_INFO, "backend %s, protocol %s, block size %zu, fault engine %s", rt->be->name,
              adsm__protocol_for(rt->cfg.protocol)->name, rt->cfg.block_size, adsm__protection_name(&rt->protection));
    ADSM__ADD(&rt->generation, 1);
    ADSM__STORE(&rt->state, ADSM__RT_READY);
    return ADSM_OK;
}

/* Initialises on first use. The caller's uses are let go meanwhile: a shutdown in progress holds
 * the initialisation mutex and waits for them. */
ADSM__PRIVATE adsm_result adsm__ensure(void) {
    while (!ADSM__LIKELY(adsm__ready())) { /* again if another thread shut it down meanwhile */
        /* before the mutex, which another thread of the parent may have held at the fork */
        if (adsm__in_forked_child()) return adsm__fail(ADSM_ERROR_UNSUPPORTED, "adsm: %s", ADSM__FORKED_TEXT);
        int held = adsm__uses_drop();
        adsm__lifecycle_lock();
        adsm_result r = adsm__ready() ? ADSM_OK : adsm__start(NULL);
        adsm__lifecycle_unlock();
        adsm__uses_take(held);
        if (r != ADSM_OK) return r;
    }
    return ADSM_OK;
}

/* Stops a running runtime: new calls see it off, calls in flight finish, the devices finish what
 * they were given, then every object, buffer and thread goes. Initialisation mutex held. */
ADSM__PRIVATE void adsm__stop(adsm__runtime *rt) {
    ADSM__STORE(&rt->state, ADSM__RT_OFF); /* new calls see it shut down */
    adsm__await_no_users();                /* calls in flight finish first */
    for (unsigned d = 0; d < rt->ndev; d++) rt->be->synchronize(rt->dev_ctx[d]);
    adsm__lock(&rt->lock);
    /* device buffers first: the tree also links safe objects, which the list below frees */
    for (adsm__tree_node *n; (n = adsm__tree_first(&rt->safe_dev)) != NULL;) {
        adsm__tree_remove(&rt->safe_dev, n); /* unlinked before freeing: no walk through freed nodes */
        adsm__object *o = ADSM__CONTAINER_OF(n, adsm__object, dev_node);
        if (o->device_only) free(o);
    }
    for (adsm__object *o = rt->first_object, *next; o; o = next) {
        next = o->next;
        /* managed and hmm memory lies outside the reservation released below: given back as
         * adsm_free gives it (before the devices stop: um's goes to the driver) */
        if (o->managed) adsm__object_give_back(rt, o, 0);
        adsm__object_destroy(o);
    }
    /* adsm_host_alloc buffers still live go as adsm_host_free frees them (before the devices
     * stop: cuda unlocks them): kept, they could never be freed, adsm_host_free refusing them
     * once the runtime that made them was gone */
    for (adsm__tree_node *n; (n = adsm__tree_first(&rt->host_buffers)) != NULL;) {
        adsm__tree_remove(&rt->host_buffers, n);
        adsm__host_buffer_release(rt, ADSM__CONTAINER_OF(n, adsm__host_buffer, node));
    }
    rt->first_object = rt->last_object = NULL;
    adsm__tree_init(&rt->objects); /* its nodes were in the objects just destroyed */
    rt->fifo_head = rt->fifo_tail = NULL;
    rt->fifo_len = rt->nobjects = rt->object_bytes = rt->device_used = rt->tracked_blocks = 0;
    rt->typed_objects = rt->typed_bytes = rt->safe_objects = 0;
    rt->xlate_fault = 0;
    rt->xlate_patch_refused = 0;
    rt->rolling_limit = 0;
    rt->evict_clock = rt->epoch_clock = rt->epoch_regrets = rt->epoch_touched = 0;
    rt->flushes_queued = rt->flushes_settled = rt->flushes_before_launch = 0;
    rt->ahead_sum = 0;
    rt->ahead_epoch++; /* objects are gone, but runs must never outlive a runtime */
    adsm__rolling_costs_reset(rt);
    stbds_arrfree(rt->batch_sends);
    stbds_arrfree(rt->through);
    stbds_arrfree(rt->home_at_sync);
    stbds_arrfree(rt->twins);
    adsm__xlate_stages_release(rt); /* page-locked by the backend, which stops next */
    adsm__unlock(&rt->lock);
    adsm__preparer_stop(rt);
    adsm__devices_stop(rt);
    rt->be = NULL;
    rt->be_ctx = NULL;
    adsm__fault_uninstall(rt);
    adsm__release_memory(rt);
    rt->launch_seq = 0;
    adsm__stats_reset(&rt->stats);
}

#endif /* ADSM__LIFECYCLE_INCLUDED */
