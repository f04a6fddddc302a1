/* adsm_impl/cuda/cuda_engine.h -- the engine and the completion thread of one GPU. The engine is the
 * worker of a copy_queue.h queue: it makes every driver call that moves data, maps memory or
 * launches, in queue order, direct DMA where the host pages are page-locked and through pinned
 * staging otherwise, and keeps the streams ordered with events (copies after the kernels queued
 * before them, kernels after the copies queued before them). The completion thread waits for
 * kernel events and publishes finished launches.
 *
 * Contexts: the engine thread and the completion thread only (adsm__cuda_run and
 * adsm__cuda_range_cmd also in the callers that queue commands, the fault handler's included: a
 * queued command and a futex wait). Neither thread ever takes the runtime lock. */
#ifndef ADSM__CUDA_ENGINE_INCLUDED
#define ADSM__CUDA_ENGINE_INCLUDED

#include "../common.h"
#include "../os.h"
#include "../copy.h"
#include "../copy_queue.h"
#include "../trace.h"
#include "../device_error.h"
#include "../backend.h"
#include "cuda_driver.h"
#include "cuda_device.h"
#include "cuda_memory.h"

/* Engine thread: waits until everything queued on the stream so far has run. Through a
 * blocking-sync event: cuStreamSynchronize spins a core under the primary context's default
 * scheduling (CU_CTX_SCHED_AUTO), which adsm must not change for the application. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_stream_wait(adsm__cuda *c, adsm__cu_stream stream) {
    adsm__cu_result r = c->cu.cuEventRecord(c->drained, stream);
    return r == 0 ? c->cu.cuEventSynchronize(c->drained) : r;
}

/* Engine: calls fn for each launch on this device still in flight (issued, not yet seen done)
 * numbered up to `upto`, oldest first. At most ADSM__CUDA_EVENTS of them (the launch guard). */
ADSM__PRIVATE void adsm__cuda_in_flight(adsm__cuda *c, uint64_t upto, void (*fn)(adsm__cuda *c, unsigned slot, void *arg),
                                        void *arg) {
    uint64_t last = ADSM__MIN(upto, ADSM__LOAD(&c->issued_seq));
    for (uint64_t seq = ADSM__LOAD(&c->completed_seq) + 1; seq <= last; seq++) {
        unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS);
        if (c->kev_seq[slot] == seq) fn(c, slot, arg);
    }
}

/* The newest in-flight launch on each stream, by event slot (-1: none). */
ADSM__PRIVATE void adsm__cuda_newest_per_stream(adsm__cuda *c, unsigned slot, void *arg) {
    ((int *)arg)[c->kev_stream[slot]] = (int)slot;
}

/* Engine: makes `stream` (the upload stream) wait for the memsets, device copies and maps queued
 * so far and for the launches numbered up to `after` (an upload changes what they may read):
 * every launch queued so far for ADSM__EVERY_LAUNCH or with one kernel stream; with several, the
 * newest such launch on each stream (a stream runs in order). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_after_launches(adsm__cuda *c, adsm__cu_stream stream, uint64_t after) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(stream, c->ops_last, 0);
    if (after == ADSM__EVERY_LAUNCH || c->nstreams == 1) {
        for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamWaitEvent(stream, c->ks_last[i], 0);
        return r;
    }
    int newest[ADSM__CUDA_MAX_STREAMS];
    for (unsigned i = 0; i < c->nstreams; i++) newest[i] = -1;
    adsm__cuda_in_flight(c, after, adsm__cuda_newest_per_stream, newest);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++)
        if (newest[i] >= 0) r = c->cu.cuStreamWaitEvent(stream, c->kev[newest[i]], 0);
    return r;
}

/* A direct copy: the driver's DMA reads or writes the host pages themselves, whatever their page
 * protection. A download, and an upload somebody waits for, is waited for before the engine
 * retires the command. An asynchronous upload (an eviction, a launch's flush) is not: the engine
 * goes on to the next command while the DMA runs, so back-to-back evictions keep the link busy
 * instead of idling one wake-up per block, and the next drain waits for the upload stream
 * (ADSM__CMD_SETTLE), so a drain still means "no copy reads host pages any more" (the protocols
 * rely on it before a CPU write). Everything later on the device is ordered after it by events. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_direct(adsm__cuda *c, const adsm__cuda_op *op, int to_device) {
    adsm__cu_result r;
    if (to_device) {
        r = adsm__cuda_after_launches(c, c->h2d, op->seq);
        if (r == 0) r = c->cu.cuMemcpyHtoDAsync(adsm__cuda_dptr(c, op->dst), (const void *)op->src, op->n, c->h2d);
        if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
        if (r == 0 && op->async) ADSM__STORE(&c->h2d_reading, 1); /* before the command retires */
        else if (r == 0) r = adsm__cuda_stream_wait(c, c->h2d);
    } else {
        r = c->cu.cuStreamWaitEvent(c->d2h, c->h2d_last, 0);
        if (r == 0) r = c->cu.cuStreamWaitEvent(c->d2h, c->ops_last, 0);
        if (r == 0) r = c->cu.cuMemcpyDtoHAsync((void *)op->dst, adsm__cuda_dptr(c, op->src), op->n, c->d2h);
        if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
    }
    return r;
}

/* ---- the engine: every copy and launch, in queue order ------------------------------------- */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_h2d(adsm__cuda *c, const adsm__cuda_op *op) {
    if (adsm__cuda_is_locked(c, op->src, op->n)) return adsm__cuda_direct(c, op, 1);
    ADSM__ADD(&c->rt->stats.staged_bytes, op->n);
    adsm__cu_result r = adsm__cuda_after_launches(c, c->h2d, op->seq);
    for (size_t off = 0; r == 0 && off < op->n; off += c->stage_size) {
        size_t len = ADSM__MIN(c->stage_size, op->n - off);
        int s = c->h2d_next;
        c->h2d_next = (s + 1) % ADSM__CUDA_SLOTS;
        if ((r = c->cu.cuEventSynchronize(c->h2d_slot_ev[s])) != 0) break; /* the slot's last DMA is done */
        adsm__copy_out(c->h2d_stage[s], (const void *)(op->src + off), len);
        if ((r = c->cu.cuMemcpyHtoDAsync(adsm__cuda_dptr(c, op->dst + off), c->h2d_stage[s], len, c->h2d)) != 0)
            break;
        r = c->cu.cuEventRecord(c->h2d_slot_ev[s], c->h2d);
    }
    if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
    return r;
}

/* Device -> staging in chunks, each chunk's DMA overlapping the copy-out of the one before. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_d2h(adsm__cuda *c, const adsm__cuda_op *op) {
    if (adsm__cuda_is_locked(c, op->dst, op->n)) return adsm__cuda_direct(c, op, 0);
    ADSM__ADD(&c->rt->stats.staged_bytes, op->n);
    /* Sees every earlier upload, memset and device copy. Kernels are not waited for here: the
     * protocols wait for the kernel that may write a block before fetching it, and fetches of
     * other objects may overlap a running kernel. */
    adsm__cu_result r = c->cu.cuStreamWaitEvent(c->d2h, c->h2d_last, 0);
    if (r == 0) r = c->cu.cuStreamWaitEvent(c->d2h, c->ops_last, 0);
    size_t nchunks = (op->n + c->stage_size - 1) / c->stage_size;
    for (size_t k = 0; r == 0 && k <= nchunks; k++) {
        if (k < nchunks) { /* issue chunk k */
            size_t off = k * c->stage_size, len = ADSM__MIN(c->stage_size, op->n - off);
            int s = (int)(k % ADSM__CUDA_SLOTS);
            r = c->cu.cuMemcpyDtoHAsync(c->d2h_stage[s], adsm__cuda_dptr(c, op->src + off), len, c->d2h);
            if (r == 0) r = c->cu.cuEventRecord(c->d2h_slot_ev[s], c->d2h);
        }
        if (r == 0 && k > 0) { /* drain chunk k - 1 */
            size_t off = (k - 1) * c->stage_size, len = ADSM__MIN(c->stage_size, op->n - off);
            int s = (int)((k - 1) % ADSM__CUDA_SLOTS);
            r = c->cu.cuEventSynchronize(c->d2h_slot_ev[s]);
            if (r == 0) memcpy((void *)(op->dst + off), c->d2h_stage[s], len); /* writable: copy.h */
        }
    }
    return r;
}

/* A device-to-device copy into this device, on its upload stream: after the kernels queued here
 * before it (one may still read the old bytes), before the ones after it, landed when it returns
 * (the source device may overwrite its side next). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_do_peer(adsm__cuda *c, const adsm__cuda_op *op) {
    adsm__cuda *src = op->peer;
    adsm__cu_result r = adsm__cuda_after_launches(c, c->h2d, ADSM__EVERY_LAUNCH);
    if (r == 0)
        r = c->cu.cuMemcpyPeerAsync(adsm__cuda_dptr(c, op->dst), c->ctx, adsm__cuda_dptr(src, op->src), src->ctx,
                                    op->n, c->h2d);
    if (r == 0) r = c->cu.cuEventRecord(c->h2d_last, c->h2d);
    if (r == 0) r = adsm__cuda_stream_wait(c, c->h2d);
    return r;
}

/* Work on a kernel stream (launches, memsets, device copies) waits for earlier uploads, memsets,
 * device copies and maps. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_kernel_stream_ready(adsm__cuda *c, adsm__cu_stream stream) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(stream, c->h2d_last, 0);
    return r == 0 ? c->cu.cuStreamWaitEvent(stream, c->ops_last, 0) : r;
}

/* Memsets and device copies run on the ops stream, after the earlier ones (stream order) and
 * after every upload and launch queued before them (they carry no accesses to order them more
 * finely). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_ops_ready(adsm__cuda *c) {
    adsm__cu_result r = c->cu.cuStreamWaitEvent(c->ops, c->h2d_last, 0);
    for (unsigned i = 0; r == 0 && i < c->nstreams; i++) r = c->cu.cuStreamWaitEvent(c->ops, c->ks_last[i], 0);
    return r;
}

/* Whether launch a writes anything launch b reads or writes. */
ADSM__PRIVATE int adsm__cuda_writes_into(const adsm__cuda_launch_access *a, const adsm__cuda_launch_access *b) {
    return adsm__ranges_meet(a->writable, a->nwritable, b->writable, b->nwritable) ||
           adsm__ranges_meet(a->writable, a->nwritable, b->inputs, b->ninputs);
}

typedef struct adsm__cuda_ordering {
    const adsm__cuda_launch_access *access;
    unsigned stream;
    adsm__cu_result r;
} adsm__cuda_ordering;

/* A launch on another stream whose accesses conflict with the new one's: the new one waits. */
ADSM__PRIVATE void adsm__cuda_order_after(adsm__cuda *c, unsigned slot, void *arg) {
    adsm__cuda_ordering *o = (adsm__cuda_ordering *)arg;
    const adsm__cuda_launch_access *earlier = &c->kev_access[slot];
    if (o->r != 0 || c->kev_stream[slot] == o->stream) return; /* same stream: in order anyway */
    if (adsm__cuda_writes_into(earlier, o->access) || adsm__cuda_writes_into(o->access, earlier))
        o->r = c->cu.cuStreamWaitEvent(c->ks[o->stream], c->kev[slot], 0);
}

/* Engine: the stream a launch runs on (in turn), made to wait for the earlier launches in flight
 * whose accesses conflict with its own (read after write, write after read, write after write). */
ADSM__PRIVATE adsm__cu_result adsm__cuda_launch_stream(adsm__cuda *c, adsm__cuda_cmd *cmd, unsigned *stream) {
    *stream = c->next_stream;
    c->next_stream = (c->next_stream + 1) % c->nstreams;
    adsm__cu_result r = adsm__cuda_kernel_stream_ready(c, c->ks[*stream]);
    if (r != 0 || c->nstreams == 1) return r;
    adsm__cuda_ordering o = {&cmd->access, *stream, 0};
    adsm__cuda_in_flight(c, cmd->op.seq, adsm__cuda_order_after, &o);
    return o.r;
}

ADSM__PRIVATE adsm__cu_result adsm__cuda_do_launch(adsm__cuda *c, adsm__cuda_cmd *cmd, unsigned stream, char *text,
                                                   size_t size) {
    const adsm__cuda_op *op = &cmd->op;
    const adsm_kernel_desc *k = op->kernel;
    void *params[ADSM__MAX_PARAMS + 1];
    for (unsigned i = 0; i < k->nparams; i++) params[i] = cmd->args + k->params[i].offset;
    params[k->nparams] = NULL;
    adsm__cu_result r = c->cu.cuLaunchKernel(op->fn, op->grid[0], op->grid[1], op->grid[2], op->block[0], op->block[1],
                                             op->block[2], 0, c->ks[stream], params, NULL);
    if (r != 0) {
        char what[160];
        snprintf(what, sizeof what, "kernel '%s': cuLaunchKernel", k->name);
        adsm__cu_describe(c, r, what, text, size);
    }
    return r;
}

/* Engine thread: a memset or a device-to-device copy, after the kernels that may use the range. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_device_op(adsm__cuda *c, const adsm__cuda_op *op) {
    adsm__cu_result r = adsm__cuda_ops_ready(c);
    if (r == 0 && op->type == ADSM__CMD_D2D)
        r = c->cu.cuMemcpyDtoDAsync(adsm__cuda_dptr(c, op->dst), adsm__cuda_dptr(c, op->src), op->n, c->ops);
    else if (r == 0)
        r = c->cu.cuMemsetD8Async(adsm__cuda_dptr(c, op->dst), (unsigned char)op->value, op->n, c->ops);
    return r == 0 ? c->cu.cuEventRecord(c->ops_last, c->ops) : r;
}

/* Engine thread: backs [dst, dst + n) with device memory, zeroed. Out of memory is not a device
 * error (the allocation fails): op->status says so. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_map(adsm__cuda *c, adsm__cuda_op *op) {
    adsm__cu_result r = adsm__cuda_map(c, op->dst, op->n);
    /* starts zeroed; nothing else can use a range just mapped, so this waits for nothing */
    if (r == 0) r = c->cu.cuMemsetD8Async(adsm__cuda_dptr(c, op->dst), 0, op->n, c->ops);
    if (r == 0) r = c->cu.cuEventRecord(c->ops_last, c->ops);
    op->status = r == ADSM__CUDA_ERROR_OUT_OF_MEMORY ? 1 : 0;
    return r;
}

/* Engine thread: gives [dst, dst + n) back. Copies in flight may still use the range; no kernel
 * does (dev_free's callers waited for those using it), and the kernels using other objects keep
 * running. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_unmap(adsm__cuda *c, const adsm__cuda_op *op) {
    adsm__cu_result r = adsm__cuda_stream_wait(c, c->h2d);
    if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
    if (r == 0) r = adsm__cuda_stream_wait(c, c->ops);
    if (r == 0) adsm__cuda_unmap(c, op->dst, op->n);
    return r;
}

/* Engine thread: the driver lets go of page-locked host pages, once no copy in flight reads or
 * writes them. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_unregister(adsm__cuda *c, const adsm__cuda_op *op) {
    adsm__cu_result r = adsm__cuda_stream_wait(c, c->h2d);
    if (r == 0) r = adsm__cuda_stream_wait(c, c->d2h);
    (void)c->cu.cuMemHostUnregister((void *)op->dst);
    return r;
}

/* Engine thread: a drain's settle: asynchronous direct uploads are done reading host pages. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_settle(adsm__cuda *c) {
    adsm__cu_result r = ADSM__LOAD(&c->h2d_reading) ? adsm__cuda_stream_wait(c, c->h2d) : 0;
    if (r == 0) ADSM__STORE(&c->h2d_reading, 0);
    return r;
}

/* Whether launch `seq` may take its event slot: the completion thread is past the launch that
 * held it (or none did, or the device is lost). Launch numbers count every device's launches,
 * and the completion thread goes only as far as this device's last: asking for it to be within
 * ADSM__CUDA_EVENTS numbers of `seq` made a device that sat idle through 256 launches elsewhere
 * wait for ever. */
ADSM__PRIVATE int adsm__cuda_slot_free(adsm__cuda *c, uint64_t seq) {
    return ADSM__LOAD(&c->kev_seq[seq % ADSM__CUDA_EVENTS]) <= ADSM__LOAD(&c->completed_seq) || ADSM__LOAD(&c->lost);
}

/* Engine thread: waits until launch `seq` may take its event slot. */
ADSM__PRIVATE void adsm__cuda_await_event_slot(adsm__cuda *c, uint64_t seq) {
    for (;;) {
        int gen = ADSM__LOAD(&c->completion_gen);
        if (adsm__cuda_slot_free(c, seq)) return;
        adsm__futex_wait(&c->completion_gen, gen);
    }
}

/* Engine thread: a launch, on the stream its accesses allow, then its events, for the completion
 * thread and for the streams ordered after it. A launch the driver refuses with the context
 * still fine is recorded as ADSM_ERROR_LAUNCH_FAILED and is not a device error; a sticky fault
 * is returned. */
ADSM__PRIVATE adsm__cu_result adsm__cuda_exec_launch(adsm__cuda *c, adsm__cuda_cmd *cmd) {
    const adsm__cuda_op *op = &cmd->op;
    uint64_t seq = op->seq;
    unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS), stream = 0;
    char text[400];
    adsm__cuda_await_event_slot(c, seq);
    c->kev_kernel[slot] = op->kernel;
    ADSM__STORE(&c->launching_seq, seq); /* a fault may surface before issued_seq says it ran */
    adsm__cu_result r = adsm__cuda_launch_stream(c, cmd, &stream);
    if (r == 0)
        r = adsm__cuda_do_launch(c, cmd, stream, text, sizeof text);
    else
        adsm__cu_describe(c, r, "cuStreamWaitEvent before a launch", text, sizeof text);
    if (r != 0 && adsm__cu_code(r) != ADSM_ERROR_KERNEL_CRASHED) { /* refused, context still fine */
        adsm__cuda_record_error(c, ADSM_ERROR_LAUNCH_FAILED, text, 0);
        r = 0;
    }
    ADSM__STORE(&c->kev_seq[slot], seq);
    c->kev_stream[slot] = (unsigned char)stream;
    if (c->kev_access) c->kev_access[slot] = cmd->access;
    c->kev_issued_ns[slot] = adsm__now_ns();
    if (r == 0) r = c->cu.cuEventRecord(c->kev[slot], c->ks[stream]);
    if (r == 0) r = c->cu.cuEventRecord(c->ks_last[stream], c->ks[stream]);
    ADSM__STORE(&c->issued_seq, seq);
    ADSM__ADD(&c->issued_gen, 1);
    adsm__futex_wake_all(&c->issued_gen);
    return r;
}

/* The newest kernel handed to the driver (NULL before the first): its slot is not taken again
 * before the completion thread passes it (adsm__cuda_slot_free). Engine or completion thread. */
ADSM__PRIVATE const adsm_kernel_desc *adsm__cuda_newest_kernel(const adsm__cuda *c, uint64_t *seq) {
    *seq = ADSM__LOAD(&c->launching_seq);
    return *seq ? c->kev_kernel[*seq % ADSM__CUDA_EVENTS] : NULL;
}

/* Engine thread: records a command's failure (r from the driver, or -1: a host copy failed with
 * errno) as the device's error, which loses the device. */
ADSM__PRIVATE void adsm__cuda_record_failure(adsm__cuda *c, adsm__cu_result r, const char *what) {
    char text[400];
    uint64_t newest;
    const adsm_kernel_desc *k = adsm__cuda_newest_kernel(c, &newest);
    if (r != (adsm__cu_result)-1 && adsm__cu_code(r) == ADSM_ERROR_KERNEL_CRASHED && k) {
        /* a sticky fault surfaces at whatever call comes next: name the kernel, not the call */
        char where[200];
        snprintf(where, sizeof where, "kernel '%s' (or device work queued before it) failed, seen at %s", k->name,
                 what);
        adsm__cu_describe(c, r, where, text, sizeof text);
    } else if (r != (adsm__cu_result)-1) {
        adsm__cu_describe(c, r, what, text, sizeof text);
    } else {
        snprintf(text, sizeof text, "copying fetched data into host memory failed: %s", strerror(errno));
    }
    adsm__cuda_record_error(c, r == (adsm__cu_result)-1 ? ADSM_ERROR_SYSTEM : adsm__cu_code(r), text, 1);
}

/* Engine thread: one command. Returns 0, or -1 when it failed (the error is recorded, but for a
 * map out of memory, which op->status reports). */
ADSM__PRIVATE int adsm__cuda_execute(adsm__cuda *c, adsm__cuda_cmd *cmd) {
    adsm__cuda_op *op = &cmd->op;
    const char *what = ""; /* the driver call a failure is reported at */
    adsm__cu_result r = 0;
    uint64_t t0 = adsm__now_ns();
    switch (op->type) {
    case ADSM__CMD_H2D:
        what = "cuMemcpyHtoDAsync";
        r = adsm__cuda_do_h2d(c, op);
        adsm__copy_timed(c->rt, 1, t0, op->dst, op->n);
        break;
    case ADSM__CMD_D2H:
        what = "cuMemcpyDtoHAsync";
        r = adsm__cuda_do_d2h(c, op);
        adsm__copy_timed(c->rt, 0, t0, op->src, op->n);
        break;
    case ADSM__CMD_D2D:
    case ADSM__CMD_MEMSET:
        what = op->type == ADSM__CMD_D2D ? "cuMemcpyDtoDAsync" : "cuMemsetD8Async";
        r = adsm__cuda_exec_device_op(c, op);
        break;
    case ADSM__CMD_PEER:
        what = "cuMemcpyPeerAsync";
        r = adsm__cuda_do_peer(c, op);
        adsm__trace_on(&c->rt->trace, 0, ADSM__TR_D2D, t0, adsm__now_ns(), op->dst, op->n);
        break;
    case ADSM__CMD_MAP:
        what = "cuMemCreate/cuMemMap";
        r = adsm__cuda_exec_map(c, op);
        if (op->status == 1) return -1; /* not fatal: the allocation fails */
        break;
    case ADSM__CMD_UNMAP:
        what = "cuMemUnmap";
        r = adsm__cuda_exec_unmap(c, op);
        break;
    case ADSM__CMD_UNREGISTER: r = adsm__cuda_exec_unregister(c, op); break;
    case ADSM__CMD_SETTLE:
        what = "cuEventSynchronize";
        r = adsm__cuda_exec_settle(c);
        break;
    case ADSM__CMD_LAUNCH:
        what = "cuEventRecord";
        r = adsm__cuda_exec_launch(c, cmd);
        break;
    default: break;
    }
    if (r == 0) return 0;
    adsm__cuda_record_failure(c, r, what);
    return -1;
}

/* Engine thread: one command in queue order; its result for the pusher (0, 1 refused, -1). On a
 * lost device only unmaps still run (a free releases its granules whatever the device did). */
ADSM__PRIVATE int adsm__cuda_engine_step(void *ctx, void *slot) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_cmd *cmd = (adsm__cuda_cmd *)slot;
    if (ADSM__LOAD(&c->lost) && cmd->op.type != ADSM__CMD_UNMAP) return -1;
    return adsm__cuda_execute(c, cmd) == 0 ? 0 : (cmd->op.status == 1 ? 1 : -1);
}

ADSM__PRIVATE void adsm__cuda_engine_begin(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__trace_name_track(&c->rt->trace, "cuda engine");
    c->cu.cuCtxSetCurrent(c->ctx);
}

/* Signal-safe. Queues a command (without its argument block); with wait, returns its result
 * once it ran. Producers are the runtime lock's holder and faults copying outside it. */
ADSM__PRIVATE int adsm__cuda_run(adsm__cuda *c, const adsm__cuda_op *op, int wait) {
    if (wait) return adsm__queue_call(&c->queue, op, sizeof *op);
    adsm__queue_push(&c->queue, op, sizeof *op, NULL);
    return 0;
}

ADSM__PRIVATE adsm__cuda_op adsm__cuda_range_cmd(int type, uintptr_t dst, uintptr_t src, size_t n) {
    adsm__cuda_op cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.type = type;
    cmd.dst = dst;
    cmd.src = src;
    cmd.n = n;
    return cmd;
}

/* ---- completion thread --------------------------------------------------------------------- */
/* ADSM_TRACE's kernel span on cuda: the events carry no timing (blocking waits need them without),
 * so a kernel runs, as far as the trace knows, from its launch or the previous kernel's end on its
 * stream (a stream runs its kernels one after another), whichever is later, to when this thread
 * saw it finish; each device and stream has its own track, where the spans follow one another. */
ADSM__PRIVATE void adsm__cuda_trace_kernel(adsm__cuda *c, unsigned slot, uint64_t seq) {
    if (!c->rt->trace.events) return;
    unsigned stream = c->kev_stream[slot];
    uint64_t now = adsm__now_ns(), from = ADSM__MAX(c->kev_issued_ns[slot], c->last_kernel_done_ns[stream]);
    adsm__trace_on(&c->rt->trace, adsm__trace_kernel_tid(c->index, stream), ADSM__TR_KERNEL, from, now, 0, seq);
    c->last_kernel_done_ns[stream] = now;
}

/* Completion thread: the error the event of launch `seq` (in `slot`) gave. CUDA errors are
 * sticky: once the context faulted, waiting on any event says so, also on one whose kernel had
 * finished before the fault. This thread may lag behind, so the fault may come from this kernel,
 * from a later one handed to the driver meanwhile (named: the newest, launching_seq, maybe not yet
 * in issued_seq), or from work queued before it. */
ADSM__PRIVATE void adsm__cuda_kernel_failed(adsm__cuda *c, adsm__cu_result r, unsigned slot, uint64_t seq) {
    char what[240], text[480];
    const char *name = c->kev_kernel[slot] ? c->kev_kernel[slot]->name : "?";
    uint64_t newest;
    const adsm_kernel_desc *last = adsm__cuda_newest_kernel(c, &newest);
    if (newest > seq && last)
        snprintf(what, sizeof what, "kernel '%s' or one launched after it on this device (the last: '%s'), or "
                 "device work queued before them, failed", name, last->name);
    else
        snprintf(what, sizeof what, "kernel '%s' (or device work queued before it) failed", name);
    adsm__cu_describe(c, r, what, text, sizeof text);
    adsm__cuda_record_error(c, adsm__cu_code(r), text, 1);
}

ADSM__PRIVATE void *adsm__cuda_completion_main(void *arg) {
    adsm__cuda *c = (adsm__cuda *)arg;
    c->cu.cuCtxSetCurrent(c->ctx);
    for (;;) {
        int gen = ADSM__LOAD(&c->issued_gen);
        uint64_t done = ADSM__LOAD(&c->completed_seq);
        if (ADSM__LOAD(&c->issued_seq) == done) {
            if (ADSM__LOAD(&c->quitting)) return NULL;
            adsm__futex_wait(&c->issued_gen, gen);
            continue;
        }
        uint64_t seq = done + 1;
        unsigned slot = (unsigned)(seq % ADSM__CUDA_EVENTS);
        if (ADSM__LOAD(&c->kev_seq[slot]) != seq) { /* a number another device's launch took */
            ADSM__STORE(&c->completed_seq, seq);
            continue;
        }
        adsm__cu_result r = ADSM__LOAD(&c->lost) ? 0 : c->cu.cuEventSynchronize(c->kev[slot]);
        if (r != 0) adsm__cuda_kernel_failed(c, r, slot, seq);
        adsm__cuda_trace_kernel(c, slot, seq);
        ADSM__STORE(&c->completed_seq, seq);
        ADSM__ADD(&c->completion_gen, 1);
        adsm__futex_wake_all(&c->completion_gen);
    }
}

/* ---- the verbs that queue commands ------------------------------------------------------------ */
/* The vtable verbs behind copies, device memory and waits: each makes a command and queues it on
 * the engine (waiting for it where the caller needs the result), so they run wherever the caller
 * does, the fault handler included (a queued command and a futex wait), except where said. */
/* An upload follows the launches up to `after` queued on this device (all of them with one kernel
 * stream), and the memsets, device copies and maps before it. */
ADSM__PRIVATE int adsm__cuda_to_device(void *ctx, uintptr_t dev, uintptr_t host, size_t n, int async,
                                       uint64_t after) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_H2D, dev, host, n);
    cmd.seq = after;
    cmd.async = async;
    return adsm__cuda_run(c, &cmd, !async) == 0 ? 0 : -1;
}

ADSM__PRIVATE int adsm__cuda_from_device(void *ctx, uintptr_t host, uintptr_t dev, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_D2H, host, dev, n);
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

/* Signal-safe: every command queued so far has run, and every upload is done with host memory:
 * a staged one copied it out at once; where an asynchronous direct upload ran since the last
 * settle, its DMA is waited for (ADSM__CMD_SETTLE). Usually nothing is pending and the drain
 * returns at once, as before there were asynchronous direct uploads. */
ADSM__PRIVATE void adsm__cuda_drain(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__queue_drain(&c->queue); /* the engine sets h2d_reading before it retires the upload */
    if (!ADSM__LOAD(&c->h2d_reading) || ADSM__LOAD(&c->lost)) return;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_SETTLE, 0, 0, 0);
    adsm__cuda_run(c, &cmd, 1);
}

ADSM__PRIVATE int adsm__cuda_wait(void *ctx, uint64_t seq) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    /* with several devices, launch `seq` may have gone elsewhere: this device's launches up to it
     * are done once the last one it was sent is (its completion thread passes every number) */
    uint64_t sent = ADSM__LOAD(&c->sent_seq);
    if (seq > sent) seq = sent;
    return adsm__wait_launch(&c->completed_seq, &c->completion_gen, &c->lost, seq);
}

ADSM__PRIVATE adsm_result adsm__cuda_synchronize(void *ctx) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_wait(ctx, ADSM__LOAD(&c->rt->launch_seq));
    return adsm__device_error_take(&c->errors, ADSM__LOAD(&c->lost),
                                   "cuda backend: the device is lost after an earlier error");
}

ADSM__PRIVATE int adsm__cuda_dev_memset(void *ctx, uintptr_t dev, int value, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MEMSET, dev, 0, n);
    cmd.value = value;
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

ADSM__PRIVATE int adsm__cuda_dev_copy(void *ctx, uintptr_t dst, uintptr_t src, size_t n) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_D2D, dst, src, n);
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

ADSM__PRIVATE adsm_result adsm__cuda_dev_alloc(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cuda backend: the device is lost");
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MAP, dev, 0, span);
    int status = adsm__cuda_run(c, &cmd, 1);
    if (status == 1)
        return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "cuda backend: device %s has no memory left for %zu bytes",
                          c->device_name, span);
    if (status != 0) return adsm__fail(ADSM_ERROR_DEVICE_LOST, "cuda backend: %s", c->errors.text);
    return ADSM_OK;
}

ADSM__PRIVATE void adsm__cuda_dev_free(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_UNMAP, dev, 0, span);
    adsm__cuda_run(c, &cmd, 1);
}

/* Signal-safe (a queued command and a futex wait): backs a shared object on this device when it
 * becomes resident here, with several devices. 0, 1 no memory, -1 lost. */
ADSM__PRIVATE int adsm__cuda_dev_map(void *ctx, uintptr_t dev, size_t span) {
    adsm__cuda *c = (adsm__cuda *)ctx;
    if (ADSM__LOAD(&c->lost)) return -1;
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_MAP, dev, 0, span);
    return adsm__cuda_run(c, &cmd, 1);
}

/* Device to device, run by the destination's engine (after its earlier kernels, before its later
 * ones); returns once the bytes landed. Without cuMemcpyPeerAsync in the driver, through host
 * memory instead. Normal context. */
ADSM__PRIVATE int adsm__cuda_peer_copy(void *dst_ctx, void *src_ctx, uintptr_t dev, size_t n) {
    adsm__cuda *c = (adsm__cuda *)dst_ctx, *src = (adsm__cuda *)src_ctx;
    if (ADSM__LOAD(&c->lost) || ADSM__LOAD(&src->lost)) return -1;
    if (!c->cu.cuMemcpyPeerAsync) {
        void *bounce = malloc(n);
        int rc = !bounce || adsm__cuda_from_device(src, (uintptr_t)bounce, dev, n) != 0 ||
                         adsm__cuda_to_device(c, dev, (uintptr_t)bounce, n, 0, ADSM__EVERY_LAUNCH) != 0
                     ? -1
                     : 0;
        free(bounce);
        return rc;
    }
    adsm__cuda_op cmd = adsm__cuda_range_cmd(ADSM__CMD_PEER, dev, dev, n);
    cmd.peer = src;
    return adsm__cuda_run(c, &cmd, 1) == 0 ? 0 : -1;
}

#endif /* ADSM__CUDA_ENGINE_INCLUDED */
