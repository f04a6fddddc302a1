/* adsm_impl/directory.h -- which devices hold a current copy of each unit, when the runtime drives
 * several (ADSM_EMU_DEVICES, ADSM_DEVICES), and the moves a launch on one device needs.
 *
 * The host's view of a unit stays its block state (Invalid / ReadOnly / Dirty, protocol.h); each
 * unit head adds `dev_valid`, one bit per device holding a current copy. Together they are the
 * MESI-like directory of the Nanos6 paper, host plus N devices:
 *   - host Dirty: the host holds the only current copy (dev_valid is 0; a CPU write clears it);
 *   - host ReadOnly: host and the devices in dev_valid are current (Shared);
 *   - host Invalid: only the devices in dev_valid are (one after a kernel wrote the unit there:
 *     Modified on that device; more once other devices took replicas of it).
 * A flush sends a Dirty unit to one device (the launch's at a call, the object's home device for
 * rolling's evictions). Before a launch on device d, every object the kernel names (IN, OUT,
 * INOUT) is made current on d: from the host when the host copy is current, else from a device
 * that holds it (device to device: never through the CPU's pages); copies taken stay as read
 * replicas. A kernel that writes an object leaves d its only holder. A CPU fetch reads from a
 * holder. With several devices a call sends the CPU's changes to the objects its kernel names
 * only (protocol.h, adsm__release_dirty): the others stay Dirty on the host until a kernel names
 * them, so each goes straight to the device that uses it, and a kernel may follow stored pointers
 * only into objects it names, or reaches through declared pointer fields (translate.h, adsm__reach:
 * those join the launch's list).
 *
 * Two policies change when copies move (the multi-GPU paper's versions): write-through
 * (ADSM_WRITE_THROUGH) brings every kernel's output home before the next call or sync instead of
 * leaving it on its device until someone needs it; dropped replicas (ADSM_DROP_REPLICAS) keep no
 * copy on a device of what a kernel only read there when another copy exists.
 *
 * Contexts: adsm__dev_source and adsm__drain_all may run in the SIGSEGV handler (no allocation,
 * only signal-safe backend verbs); the rest runs in normal context, runtime lock held, in a
 * launch (rt->launch_mutex held) or a sync. With one device and the default policies every unit
 * stays current on it, and none of this moves a byte. */
#ifndef ADSM__DIRECTORY_INCLUDED
#define ADSM__DIRECTORY_INCLUDED

#include "common.h"
#include "os.h"
#include "stats.h"
#include "object.h"
#include "runtime.h"
#include "reservation.h"
#include "backend.h"
#include "protocol_vtbl.h"

ADSM__PRIVATE uint8_t adsm__dev_bit(unsigned d) { return (uint8_t)(1u << d); }

ADSM__PRIVATE uint8_t adsm__all_devices(const adsm__runtime *rt) { return (uint8_t)((1u << rt->ndev) - 1u); }

/* Devices found lost (several devices only; one lost device is the backend's to report). */
ADSM__PRIVATE uint8_t adsm__lost_devices(const adsm__runtime *rt) { return ADSM__LOAD(&rt->dev_lost); }

ADSM__PRIVATE uint8_t adsm__live_devices(const adsm__runtime *rt) {
    return (uint8_t)(adsm__all_devices(rt) & ~adsm__lost_devices(rt));
}

ADSM__PRIVATE void adsm__mark_lost(adsm__runtime *rt, unsigned d) {
    if (rt->ndev > 1) __atomic_fetch_or(&rt->dev_lost, adsm__dev_bit(d), __ATOMIC_RELAXED);
}

/* Signal-safe. Whether device d is lost: marked (several devices), or its backend says so (a lone
 * device's loss is the backend's to know, and a loss not marked yet is the backend's too). */
ADSM__PRIVATE int adsm__dev_is_lost(const adsm__runtime *rt, unsigned d) {
    return (adsm__lost_devices(rt) & adsm__dev_bit(d)) || rt->be->wait(rt->dev_ctx[d], 0) != 0;
}

/* Signal-safe. The device to read a unit from: the lowest live one that holds a current copy,
 * else the lowest lost one (its memory is taken as it stands, as after a lost device's last
 * kernel), else device 0 (only a unit the host holds current has no holder). */
ADSM__PRIVATE unsigned adsm__dev_source(const adsm__runtime *rt, const adsm__block *head) {
    uint8_t live = (uint8_t)(head->dev_valid & ~adsm__lost_devices(rt));
    uint8_t from = live ? live : head->dev_valid;
    return from ? (unsigned)__builtin_ctz(from) : 0u;
}

/* Signal-safe. Waits until every queued copy of every device ran (they may read host pages). */
ADSM__PRIVATE void adsm__drain_all(adsm__runtime *rt) {
    ADSM__ADD(&rt->drains, 1);
    for (unsigned d = 0; d < rt->ndev; d++) rt->be->drain(rt->dev_ctx[d]);
}

/* Waits for every launch issued so far, on every device; -1 when one is lost. */
ADSM__PRIVATE int adsm__wait_all(adsm__runtime *rt) {
    int rc = 0;
    for (unsigned d = 0; d < rt->ndev; d++) rc |= rt->be->wait(rt->dev_ctx[d], ADSM__LOAD(&rt->launch_seq));
    return rc;
}

/* Sets dev_valid of the unit heads among blocks [first, first + count): every block under
 * rolling, the first under lazy and batch (the object is one unit). */
ADSM__PRIVATE void adsm__units_set_valid(const adsm__runtime *rt, adsm__object *o, size_t first, size_t count,
                                         uint8_t valid) {
    size_t heads = rt->proto->whole_object ? 1 : count;
    for (size_t k = 0; k < heads; k++) o->blocks[first + k].dev_valid = valid;
}

/* An asynchronous copy will read the host pages of units [first, first + count): stamps their
 * heads with its ticket, so a CPU write or a protection change waits for it (protocol.h,
 * adsm__flushing). */
ADSM__PRIVATE void adsm__stamp_copy(adsm__runtime *rt, adsm__object *o, size_t first, size_t count) {
    uint64_t ticket = ++rt->flushes_queued;
    size_t heads = rt->proto->whole_object ? 1 : count;
    for (size_t k = 0; k < heads; k++) o->blocks[first + k].flush_ticket = ticket;
}

/* Whether shared objects have memory on a device only while resident there (the backend maps it
 * when one is charged and frees it when it leaves or is freed: cuda), rather than on every device
 * from adsm_alloc on (emu, whose untouched pages cost nothing). */
ADSM__PRIVATE int adsm__mapped_on_charge(const adsm__runtime *rt) { return rt->ndev > 1 && rt->be->dev_map; }

/* Signal-safe. The device memory o takes on a device: its span, in whole granules where the
 * backend's device memory comes in units larger than pages (cuda maps 2 MiB granules; one a
 * neighbour shares counts for both, so the count errs on the side of evicting early). */
ADSM__PRIVATE size_t adsm__footprint(const adsm__runtime *rt, const adsm__object *o) {
    uintptr_t g = rt->dev_granule;
    if (g <= 1) return o->span;
    return (size_t)(ADSM__ALIGN_UP(o->dev + o->span, g) - (o->dev & ~(g - 1)));
}

/* Signal-safe. Device d's memory will hold (part of) o: counted in d's bytes, once (and mapped
 * there when memory follows residence), and o becomes d's most recently used object. Rolling's
 * evictions in the fault handler may take d past its capacity; the next launch there evicts back
 * under it (capacity.h). 0, or -1 when d has no memory for o (or is lost). */
ADSM__PRIVATE int adsm__charge(adsm__runtime *rt, adsm__object *o, unsigned d) {
    if (rt->ndev == 1) return 0; /* one device holds every object from adsm_alloc on */
    if (o->dev_leaving & adsm__dev_bit(d)) return -1; /* its memory there is being unmapped */
    o->dev_stamp[d] = ++rt->lru_clock;
    if (o->dev_resident & adsm__dev_bit(d)) return 0;
    if (adsm__mapped_on_charge(rt) && rt->be->dev_map(rt->dev_ctx[d], o->dev, o->span) != 0) return -1;
    o->dev_resident |= adsm__dev_bit(d);
    rt->dev_bytes[d] += adsm__footprint(rt, o);
    return 0;
}

/* Signal-safe. The last launch on device d a copy of o to d must wait for. With several devices a
 * kernel uses only the objects it names, so that is the last launch there that named o
 * (o->dev_launch[d]); with one, kernels may follow stored pointers into any object, so it is
 * every launch sent there so far. */
ADSM__PRIVATE uint64_t adsm__copy_after(const adsm__runtime *rt, const adsm__object *o, unsigned d) {
    return rt->ndev > 1 ? o->dev_launch[d] : ADSM__EVERY_LAUNCH;
}

/* A launch on device d names the objects in used[]: copies of them to d come after it. */
ADSM__PRIVATE void adsm__note_users(adsm__object *const *used, size_t nused, unsigned d, uint64_t seq) {
    for (size_t i = 0; i < nused; i++) used[i]->dev_launch[d] = seq;
}

/* Device d's memory holds nothing of o any more: its bytes there no longer count. Returns
 * whether the memory itself is still to be given back (memory follows residence: cuda), which
 * the caller does with the runtime lock let go (capacity.h, object_life.h: unmapping waits for
 * the GPU). */
ADSM__PRIVATE int adsm__uncount(adsm__runtime *rt, adsm__object *o, unsigned d) {
    if (!(o->dev_resident & adsm__dev_bit(d))) return 0;
    o->dev_resident &= (uint8_t)~adsm__dev_bit(d);
    rt->dev_bytes[d] -= adsm__footprint(rt, o);
    return adsm__mapped_on_charge(rt);
}

/* Waits for the last kernel that may write o, on the device it ran on. Signal-safe. */
ADSM__PRIVATE int adsm__dev_wait_writer(adsm__runtime *rt, const adsm__object *o) {
    return rt->be->wait(rt->dev_ctx[o->writer_dev], o->writer_seq);
}

/* ---- placement ---------------------------------------------------------------------------- */
/* Bytes of o current on device d. */
ADSM__PRIVATE size_t adsm__bytes_on(const adsm__runtime *rt, const adsm__object *o, unsigned d) {
    if (rt->proto->whole_object) return o->blocks[0].dev_valid & adsm__dev_bit(d) ? o->size : 0;
    size_t n = 0;
    for (size_t b = 0; b < o->nblocks; b++)
        if (o->blocks[b].dev_valid & adsm__dev_bit(d)) n += adsm__blocks_len(b, 1, rt->cfg.block_shift, o->size);
    return n;
}

/* Bytes of o that count for device d in placement: all of them on the device o belongs to when
 * it has an affinity, else those current there. */
ADSM__PRIVATE size_t adsm__claim(const adsm__runtime *rt, const adsm__object *o, unsigned d) {
    if (o->affinity >= 0) return (unsigned)o->affinity == d ? o->size : 0;
    return adsm__bytes_on(rt, o, d);
}

/* ADSM_AFFINITY_BLOCK=B: the k-th shared object allocated belongs to device (k / B) mod N, and
 * rolling sends its blocks there until a kernel elsewhere uses it. */
ADSM__PRIVATE void adsm__deal_affinity(adsm__runtime *rt, adsm__object *o) {
    if (rt->ndev == 1 || rt->cfg.affinity_block == 0) return;
    o->affinity = (int)((rt->objects_dealt++ / rt->cfg.affinity_block) % rt->ndev);
    o->home_dev = (unsigned)o->affinity;
}

/* Owner computes: the live device holding most of the bytes the kernel writes, or to which most
 * of them belong (adsm__claim); ties, and kernels that write nothing, go to the lowest live
 * device; a kernel given device buffers runs where its first one lives. */
ADSM__PRIVATE unsigned adsm__place(const adsm__runtime *rt, adsm__object *const *writes, size_t nwrites,
                                   adsm__object *const *used, size_t nused) {
    uint8_t live = adsm__live_devices(rt);
    unsigned best = live ? (unsigned)__builtin_ctz(live) : 0u;
    size_t most = 0;
    for (size_t i = 0; i < nused; i++)
        if (used[i]->device_only) return used[i]->home_dev; /* explicit buffers stay where they live */
    for (unsigned d = 0; d < rt->ndev && nwrites > 0; d++) {
        if (!(live & adsm__dev_bit(d))) continue;
        size_t bytes = 0;
        for (size_t i = 0; i < nwrites; i++) bytes += adsm__claim(rt, writes[i], d);
        if (bytes > most) most = bytes, best = d;
    }
    return best;
}

/* ---- making a launch's objects current on its device ---------------------------------------- */
/* Bytes device d sent to the host, in the totals and in d's own counters. Signal-safe. */
ADSM__PRIVATE void adsm__count_from_device(adsm__runtime *rt, unsigned d, size_t n) {
    adsm__stats_d2h(&rt->stats, n);
    ADSM__ADD(&rt->dev_stats[d].d2h_bytes, n);
}

ADSM__PRIVATE void adsm__count_to_device(adsm__runtime *rt, unsigned d, int from_device, size_t n) {
    if (from_device) {
        ADSM__ADD(&rt->stats.d2d_bytes, n);
        ADSM__ADD(&rt->stats.d2d_copies, 1);
        ADSM__ADD(&rt->dev_stats[d].d2d_bytes, n);
    } else {
        adsm__stats_h2d(&rt->stats, n);
        ADSM__ADD(&rt->dev_stats[d].h2d_bytes, n);
    }
}

/* Copies blocks [first, first + count) of o, current on device s (host Invalid), to device d,
 * after the kernel that wrote them on s finished. Synchronous: the launch on d, and any later
 * kernel on s that would overwrite the source, come after it. */
ADSM__PRIVATE int adsm__copy_peer(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, unsigned s,
                                  unsigned d) {
    size_t off = first << rt->cfg.block_shift, len = adsm__blocks_len(first, count, rt->cfg.block_shift, o->size);
    if (len == 0) return 0;
    (void)adsm__dev_wait_writer(rt, o); /* a lost writer never finishes: its memory as it stands */
    if (rt->be->peer_copy) { /* the backend's own device-to-device path (cuda) */
        if (rt->be->peer_copy(rt->dev_ctx[d], rt->dev_ctx[s], o->dev + off, len) != 0) return -1;
        adsm__count_to_device(rt, d, 1, len);
        return 0;
    }
    const void *src = rt->be->device_view ? rt->be->device_view(rt->dev_ctx[s], o->dev + off, len) : NULL;
    adsm__tls_copy_between_devices = 1; /* synchronous: timed on this thread (the trace's label) */
    int rc = !src || rt->be->to_device(rt->dev_ctx[d], o->dev + off, (uintptr_t)src, len, 0,
                                       adsm__copy_after(rt, o, d)) != 0;
    adsm__tls_copy_between_devices = 0;
    if (rc) return -1;
    adsm__count_to_device(rt, d, 1, len);
    return 0;
}

/* Blocks [first, first + count) of o, a unit the host holds ReadOnly (current), to device d,
 * queued behind d's earlier work like a flush. */
ADSM__PRIVATE int adsm__copy_replica(adsm__runtime *rt, adsm__object *o, size_t first, size_t count, unsigned d) {
    size_t off = first << rt->cfg.block_shift, len = adsm__blocks_len(first, count, rt->cfg.block_shift, o->size);
    if (len == 0) return 0;
    adsm__stamp_copy(rt, o, first, count);
    if (rt->be->to_device(rt->dev_ctx[d], o->dev + off, adsm__host_dma(rt, o->host + off), len, 1,
                          adsm__copy_after(rt, o, d)) != 0)
        return -1;
    adsm__count_to_device(rt, d, 0, len);
    return 0;
}

/* Makes every unit of o that is not Dirty on the host current on device d. */
ADSM__PRIVATE int adsm__gather_object(adsm__runtime *rt, adsm__object *o, unsigned d) {
    size_t unit = rt->proto->whole_object ? o->nblocks : 1;
    for (size_t b = 0; b < o->nblocks; b += unit) {
        adsm__block *head = &o->blocks[b];
        if (head->state == ADSM__DIRTY || (head->dev_valid & adsm__dev_bit(d))) continue; /* release sends it */
        int rc = head->state == ADSM__INVALID ? adsm__copy_peer(rt, o, b, unit, adsm__dev_source(rt, head), d)
                                              : adsm__copy_replica(rt, o, b, unit, d);
        if (rc != 0) return -1;
        head->dev_valid |= adsm__dev_bit(d);
    }
    return 0;
}

/* Before a launch on device d, ahead of release: every object it names becomes current there,
 * except its host-Dirty units, which release protects and sends to d itself (copying them now
 * could race with CPU writes). Release then leaves d the only holder of what the kernel writes. */
ADSM__PRIVATE adsm_result adsm__gather(adsm__runtime *rt, adsm__object *const *used, size_t nused, unsigned d) {
    if (rt->ndev == 1) return ADSM_OK;
    for (size_t i = 0; i < nused; i++) {
        if (used[i]->device_only) { /* the explicit path: a buffer lives on one device, for good */
            if (used[i]->home_dev == d) continue;
            return adsm__fail(ADSM_ERROR_INVALID_VALUE, "the device buffer at %p lives on device %u; this kernel "
                              "runs on device %u", (void *)used[i]->dev, used[i]->home_dev, d);
        }
        used[i]->home_dev = d;
        if (adsm__charge(rt, used[i], d) != 0) /* capacity.h made room for it: the driver refused */
            return adsm__fail(ADSM_ERROR_DEVICE_OUT_OF_MEMORY, "device %u has no memory left for a %zu-byte object "
                              "at %p (its driver refused it, though adsm counted room for it)", d, used[i]->size,
                              (void *)used[i]->host);
        if (adsm__gather_object(rt, used[i], d) != 0)
            return adsm__fail(ADSM_ERROR_SYSTEM, "copying a %zu-byte object at %p to device %u failed (its only "
                              "current copy is on a device that cannot be read)", used[i]->size,
                              (void *)used[i]->host, d);
    }
    return ADSM_OK;
}

/* ---- policies ----------------------------------------------------------------------------- */
/* After a launch on d, with ADSM_DROP_REPLICAS: the objects it named but does not write keep no
 * copy on d that another holder (the host, or another device) also has. The kernel may still be
 * reading them: a later copy to d waits for d's earlier launches, as every copy to a device does. */
ADSM__PRIVATE void adsm__drop_replicas(const adsm__runtime *rt, adsm__object *const *used, size_t nused,
                                       adsm__object *const *writes, size_t nwrites, unsigned d) {
    if (!rt->cfg.drop_replicas) return;
    size_t unit;
    for (size_t i = 0; i < nused; i++) {
        adsm__object *o = used[i];
        int written = 0;
        for (size_t w = 0; w < nwrites; w++) written |= writes[w] == o;
        if (written || o->device_only) continue;
        unit = rt->proto->whole_object ? o->nblocks : 1;
        for (size_t b = 0; b < o->nblocks; b += unit) {
            adsm__block *head = &o->blocks[b];
            int elsewhere = head->state != ADSM__INVALID || (head->dev_valid & ~adsm__dev_bit(d));
            if (elsewhere) head->dev_valid &= (uint8_t)~adsm__dev_bit(d);
        }
    }
}

/* After a launch, with ADSM_WRITE_THROUGH: what it writes comes home at the next call or sync. */
ADSM__PRIVATE void adsm__note_outputs(adsm__runtime *rt, adsm__object *const *writes, size_t nwrites) {
    if (!rt->cfg.write_through) return;
    for (size_t i = 0; i < nwrites; i++) adsm__list_once(&rt->through, writes[i]);
}

/* A freed object is no output to bring home any more. */
ADSM__PRIVATE void adsm__forget_output(adsm__runtime *rt, const adsm__object *o) {
    adsm__unlist(&rt->through, o);
}

#endif /* ADSM__DIRECTORY_INCLUDED */
