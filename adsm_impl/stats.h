/* adsm_impl/stats.h -- the counters behind adsm_get_stats.
 *
 * Counters are plain uint64_t updated with relaxed atomic adds, so the fault handler, the DMA
 * thread and API calls may all bump them from any context, the signal handler included. */
#ifndef ADSM__STATS_INCLUDED
#define ADSM__STATS_INCLUDED

#include "common.h"
#include "os.h"

typedef struct adsm__stats {
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes;
    uint64_t h2d_copies, d2h_copies, d2d_copies;
    uint64_t read_faults, write_faults, evictions, launches, fault_ns;
    uint64_t h2d_ns, d2h_ns;
    uint64_t translated_args;
    uint64_t d2h_moved_bytes, d2h_forced_bytes, staged_bytes;
    uint64_t rolling_regrets;
    uint64_t map_limit_merges;
    uint64_t translated_fields, translation_bytes;
    uint64_t protection_changes;
    uint64_t sync_fetches;
} adsm__stats;

ADSM__PRIVATE void adsm__stats_h2d(adsm__stats *s, size_t bytes) {
    ADSM__ADD(&s->h2d_bytes, bytes);
    ADSM__ADD(&s->h2d_copies, 1);
}

ADSM__PRIVATE void adsm__stats_d2h(adsm__stats *s, size_t bytes) {
    ADSM__ADD(&s->d2h_bytes, bytes);
    ADSM__ADD(&s->d2h_copies, 1);
}

ADSM__PRIVATE void adsm__stats_read(const adsm__stats *s, adsm_stats *out) {
    out->h2d_bytes = ADSM__LOAD(&s->h2d_bytes);
    out->d2h_bytes = ADSM__LOAD(&s->d2h_bytes);
    out->d2d_bytes = ADSM__LOAD(&s->d2d_bytes);
    out->h2d_copies = ADSM__LOAD(&s->h2d_copies);
    out->d2h_copies = ADSM__LOAD(&s->d2h_copies);
    out->d2d_copies = ADSM__LOAD(&s->d2d_copies);
    out->read_faults = ADSM__LOAD(&s->read_faults);
    out->write_faults = ADSM__LOAD(&s->write_faults);
    out->evictions = ADSM__LOAD(&s->evictions);
    out->launches = ADSM__LOAD(&s->launches);
    out->fault_ns = ADSM__LOAD(&s->fault_ns);
    out->h2d_ns = ADSM__LOAD(&s->h2d_ns);
    out->d2h_ns = ADSM__LOAD(&s->d2h_ns);
    out->translated_args = ADSM__LOAD(&s->translated_args);
    out->d2h_moved_bytes = ADSM__LOAD(&s->d2h_moved_bytes);
    out->d2h_forced_bytes = ADSM__LOAD(&s->d2h_forced_bytes);
    out->staged_bytes = ADSM__LOAD(&s->staged_bytes);
    out->rolling_regrets = ADSM__LOAD(&s->rolling_regrets);
    out->map_limit_merges = ADSM__LOAD(&s->map_limit_merges);
    out->translated_fields = ADSM__LOAD(&s->translated_fields);
    out->translation_bytes = ADSM__LOAD(&s->translation_bytes);
    out->protection_changes = ADSM__LOAD(&s->protection_changes);
    out->sync_fetches = ADSM__LOAD(&s->sync_fetches);
}

ADSM__PRIVATE void adsm__stats_reset(adsm__stats *s) {
    uint64_t *fields = &s->h2d_bytes;
    size_t n = sizeof *s / sizeof(uint64_t);
    for (size_t i = 0; i < n; i++) ADSM__STORE(&fields[i], 0);
}

#endif /* ADSM__STATS_INCLUDED */
