/* adsm_impl/config.h -- defaults, environment variables and their validation.
 *
 * Resolves an adsm_config (fields left zero take the environment, then the default) into the
 * settings the runtime uses, rejecting bad values with ADSM_ERROR_INVALID_CONFIG and a message
 * that names the variable. Runs once, in normal thread context, during initialisation. */
#ifndef ADSM__CONFIG_INCLUDED
#define ADSM__CONFIG_INCLUDED

#include "common.h"
#include "os.h"
#include "arena.h"
#include "prepare.h"

/* 2 MiB: the size of a transparent huge page. Tracking a 2 MiB huge-page block costs one fault
 * and one PMD update, which keeps tracked CPU writes far above PCIe line rate; see docs/design.md
 * for the measurements behind this choice. */
#ifndef ADSM_DEFAULT_BLOCK_SIZE
#define ADSM_DEFAULT_BLOCK_SIZE ((size_t)2 << 20)
#endif
#define ADSM__MAX_BLOCK_SIZE ((size_t)1 << 30)
#define ADSM__MAX_EMU_MEMORY ((size_t)1 << 40)
#define ADSM__DEFAULT_ROLLING_STEP 2
#define ADSM__DEFAULT_CUDA_STAGING ((size_t)8 << 20)
#define ADSM__CUDA_MAP_AHEAD_AUTO SIZE_MAX /* ADSM_CUDA_MAP_AHEAD unset: the backend's default */

typedef struct adsm__settings {
    adsm_backend_kind backend;
    adsm_protocol_kind protocol;
    size_t block_size;
    unsigned block_shift;
    size_t rolling_size; /* 0: adaptive */
    size_t rolling_step;
    size_t emu_memory;
    int emu_memory_given; /* set by the program (config or ADSM_EMU_MEMORY), not defaulted */
    unsigned emu_workers;
    unsigned emu_devices;    /* emu: emulated devices (ADSM_EMU_DEVICES) */
    unsigned streams;        /* kernels one device may run at once (ADSM_STREAMS); 0: 4 with several
                                devices, 1 with one (backend_emu.h, backend_cuda.h) */
    adsm_log_level log_level;
    int device;              /* cuda device ordinal (one device) */
    unsigned cuda_devices;   /* cuda: how many ordinals cuda_ordinals lists; 0: every visible GPU */
    int cuda_ordinals[8];    /* cuda: the GPUs adsm drives, device 0 first (ADSM_DEVICES) */
    size_t cuda_staging;     /* bytes per pinned staging buffer */
    int cuda_same_address;   /* 0: always translate device addresses (ADSM_CUDA_SAME_ADDRESS=0) */
    int cuda_dma_view;       /* 0: no host alias under shared addresses; copies staged (ADSM_CUDA_DMA_VIEW=0) */
    int cuda_alias_collapse; /* 0: never ask the kernel for the alias's huge pages (ADSM_CUDA_ALIAS_COLLAPSE=0) */
    int cuda_collapse_shared; /* 0: the 2 MiB pages objects share keep 4 KiB pages (ADSM_CUDA_COLLAPSE_SHARED=0) */
    size_t cuda_map_ahead;   /* bytes of device memory mapped at start for the first objects
                                (ADSM_CUDA_MAP_AHEAD; cuda_memory.h), or ADSM__CUDA_MAP_AHEAD_AUTO */
    char cuda_driver[256];   /* driver library to dlopen; empty: libcuda.so.1, then libcuda.so */
    char nvrtc_library[256]; /* NVRTC library to dlopen; empty: the usual names */
    char trace_path[512];    /* ADSM_TRACE / adsm_config.trace; empty: no trace */
    int block_exact;         /* rolling: one block per fault (protocol_rolling.h) */
    int write_through, drop_replicas; /* copy policies (directory.h) */
    size_t affinity_block;   /* objects per device, dealt in turn (directory.h); 0: none */
    adsm_fault_engine_kind fault_engine; /* AUTO, MPROTECT or USERFAULTFD (protection.h) */
    int emu_check_bounds;    /* emu: guard pages between objects, out-of-bounds kernel accesses
                                reported (ADSM_EMU_CHECK_BOUNDS; backend_emu.h) */
    unsigned prepare_threads; /* threads that prepare a large range of host memory (prepare.h;
                                 ADSM_PREPARE_THREADS, 0: automatic), resolved: at least 1 */
    int host_on_first_use;   /* cuda, shared addresses, lazy and rolling: an object's host pages are made
                                the first time the CPU or a copy needs them, not at adsm_alloc
                                (ADSM_HOST_ON_FIRST_USE; host_pages.h) */
    int sync_home;           /* lazy, rolling: adsm_sync brings home small outputs the CPU reads after
                                each sync (protocol.h); ADSM_SYNC_HOME=0 leaves every output to faults */
    int emu_same_address;    /* emu: 0 puts device memory at addresses of its own, as a GPU that
                                translates (ADSM_EMU_SAME_ADDRESS=0; backend_emu.h) */
    int translate;           /* how declared pointer fields are rewritten (ADSM_TRANSLATE; translate.h):
                                ADSM__TRANSLATE_AUTO, ADSM__TRANSLATE_STAGED or ADSM__TRANSLATE_IN_PLACE */
} adsm__settings;

enum { ADSM__TRANSLATE_AUTO = 1, ADSM__TRANSLATE_STAGED = 2, ADSM__TRANSLATE_IN_PLACE = 3 };

typedef struct adsm__name_value {
    const char *name;
    int value;
} adsm__name_value;

static const adsm__name_value adsm__backend_names[] = {
    {"auto", ADSM_BACKEND_AUTO}, {"emu", ADSM_BACKEND_EMU}, {"host", ADSM_BACKEND_HOST},
    {"cuda", ADSM_BACKEND_CUDA}, {NULL, 0}};
static const adsm__name_value adsm__protocol_names[] = {
    {"batch", ADSM_PROTOCOL_BATCH}, {"lazy", ADSM_PROTOCOL_LAZY},
    {"rolling", ADSM_PROTOCOL_ROLLING}, {"um", ADSM_PROTOCOL_UM}, {"um-prefetch", ADSM_PROTOCOL_UM_PREFETCH},
    {"hmm", ADSM_PROTOCOL_HMM},
    {NULL, 0}};
static const adsm__name_value adsm__log_names[] = {
    {"error", ADSM_LOG_ERROR}, {"warn", ADSM_LOG_WARN}, {"info", ADSM_LOG_INFO},
    {"debug", ADSM_LOG_DEBUG}, {NULL, 0}};
static const adsm__name_value adsm__translate_names[] = {
    {"auto", ADSM__TRANSLATE_AUTO}, {"staged", ADSM__TRANSLATE_STAGED}, {"in-place", ADSM__TRANSLATE_IN_PLACE},
    {NULL, 0}};
static const adsm__name_value adsm__engine_names[] = {
    {"auto", ADSM_FAULT_ENGINE_AUTO}, {"mprotect", ADSM_FAULT_ENGINE_MPROTECT},
    {"userfaultfd", ADSM_FAULT_ENGINE_USERFAULTFD}, {"uffd", ADSM_FAULT_ENGINE_USERFAULTFD}, {NULL, 0}};

#define ADSM__MAX_ROLLING_SIZE ((size_t)1 << 24)
#define ADSM__MAX_ROLLING_STEP ((size_t)4096)
#define ADSM__MAX_EMU_WORKERS 256
#define ADSM__MAX_STREAMS 16
#define ADSM__DEFAULT_STREAMS 4
#define ADSM__MAX_AFFINITY_BLOCK (1 << 20)
#define ADSM__MAX_DEVICES 8 /* a unit's device copies are one byte of flags (directory.h) */

/* Parses "4096", "4K", "256k", "1M", "2G" (binary units) into *out, rejecting junk and overflow. */
ADSM__PRIVATE int adsm__parse_size(const char *text, size_t *out) {
    const char *p = text;
    unsigned long long value = 0;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned digit = (unsigned)(*p - '0');
        if (value > (ULLONG_MAX - digit) / 10) return -1;
        value = value * 10 + digit;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; p++; break;
    case 'm': case 'M': shift = 20; p++; break;
    case 'g': case 'G': shift = 30; p++; break;
    case 't': case 'T': shift = 40; p++; break;
    default: break;
    }
    if (*p == 'i' && shift) p++;          /* accept "KiB"-style "Ki" */
    if ((*p == 'b' || *p == 'B') && shift) p++;
    if (*p != 0) return -1;
    if (shift && value > (SIZE_MAX >> shift)) return -1;
    if (value > SIZE_MAX) return -1;
    *out = (size_t)value << shift;
    return 0;
}

ADSM__PRIVATE int adsm__parse_name(const char *text, const adsm__name_value *table, int *out) {
    for (; table->name; table++) {
        if (strcmp(text, table->name) == 0) {
            *out = table->value;
            return 0;
        }
    }
    return -1;
}

ADSM__PRIVATE adsm_result adsm__bad_env(const char *var, const char *value, const char *why) {
    return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "%s='%s': %s", var, value, why);
}

/* Fills *field from environment variable `var` when it is still zero. */
ADSM__PRIVATE adsm_result adsm__env_name(const char *var, const adsm__name_value *table, int *field,
                                         const char *expected) {
    const char *v = getenv(var);
    if (*field != 0 || v == NULL || *v == 0) return ADSM_OK;
    if (adsm__parse_name(v, table, field) != 0) return adsm__bad_env(var, v, expected);
    return ADSM_OK;
}

/* zero_ok: 0 is a meaningful value (ADSM_ROLLING_SIZE=0 means adaptive); elsewhere it is refused
 * rather than silently meaning "default". */
ADSM__PRIVATE adsm_result adsm__env_size(const char *var, size_t *field, int zero_ok) {
    const char *v = getenv(var);
    if (*field != 0 || v == NULL || *v == 0) return ADSM_OK;
    if (adsm__parse_size(v, field) != 0)
        return adsm__bad_env(var, v, "expected a size such as 4096, 4K, 2M or 1G");
    if (*field == 0 && !zero_ok) return adsm__bad_env(var, v, "must not be 0");
    return ADSM_OK;
}

/* A count (workers, blocks): plain digits within [min, max], or 0 where zero_ok. The message
 * quotes what was given and asks for a count, not a size. */
ADSM__PRIVATE adsm_result adsm__env_count(const char *var, size_t *field, size_t min, size_t max, int zero_ok) {
    const char *v = getenv(var);
    char why[120];
    if (*field != 0 || v == NULL || *v == 0) return ADSM_OK;
    size_t n;
    int digits = strspn(v, "0123456789") == strlen(v);
    if (!digits || adsm__parse_size(v, &n) != 0 || (n == 0 && !zero_ok) || (n != 0 && (n < min || n > max))) {
        snprintf(why, sizeof why, "expected a count from %zu to %zu%s", min, max, zero_ok ? " (or 0)" : "");
        return adsm__bad_env(var, v, why);
    }
    *field = n;
    return ADSM_OK;
}

/* A 0/1 switch from the environment, `fallback` when unset. */
ADSM__PRIVATE adsm_result adsm__env_switch(const char *name, int *out, int fallback, const char *meaning) {
    const char *v = getenv(name);
    *out = fallback;
    if (!v || !*v) return ADSM_OK;
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) return adsm__bad_env(name, v, meaning);
    *out = v[0] == '1';
    return ADSM_OK;
}

/* A 0/1 environment variable, read when the program left the field 0. */
ADSM__PRIVATE adsm_result adsm__env_flag(const char *var, int *field) {
    return *field != 0 ? ADSM_OK : adsm__env_switch(var, field, 0, "expected 0 or 1");
}

/* A 0/1 setting: the program's adsm_config field, else the environment variable. */
ADSM__PRIVATE adsm_result adsm__flag_setting(const char *var, const char *field_name, int *field) {
    adsm_result r = adsm__env_flag(var, field);
    if (r != ADSM_OK) return r;
    if (*field != 0 && *field != 1)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.%s: %d; expected 0 or 1", field_name, *field);
    return ADSM_OK;
}

/* Copies a path-like environment variable into a fixed buffer, refusing values that do not fit. */
ADSM__PRIVATE adsm_result adsm__env_path(const char *var, char *out, size_t cap) {
    const char *v = getenv(var);
    out[0] = 0;
    if (v == NULL || *v == 0) return ADSM_OK;
    if (strlen(v) >= cap) return adsm__bad_env(var, v, "path too long");
    memcpy(out, v, strlen(v) + 1);
    return ADSM_OK;
}

/* "all", or a list of distinct CUDA ordinals such as "0,2": the GPUs adsm drives. */
ADSM__PRIVATE adsm_result adsm__parse_devices(const char *what, const char *v, adsm__settings *s) {
    const char *why = "expected all, or distinct device numbers such as 0,1 (at most 8)";
    if (strcmp(v, "all") == 0) {
        s->cuda_devices = 0;
        return ADSM_OK;
    }
    s->cuda_devices = 0;
    for (const char *p = v;;) {
        char *end;
        if (*p < '0' || *p > '9') return adsm__bad_env(what, v, why);
        unsigned long n = strtoul(p, &end, 10);
        if (n > 1023 || s->cuda_devices == ADSM__MAX_DEVICES) return adsm__bad_env(what, v, why);
        for (unsigned i = 0; i < s->cuda_devices; i++)
            if (s->cuda_ordinals[i] == (int)n) return adsm__bad_env(what, v, why);
        s->cuda_ordinals[s->cuda_devices++] = (int)n;
        if (*end == 0) return ADSM_OK;
        if (*end != ',') return adsm__bad_env(what, v, why);
        p = end + 1;
    }
}

/* Which GPUs: adsm_config.devices, else adsm_config.device, else ADSM_DEVICES or ADSM_DEVICE
 * (not both), else GPU 0 alone. */
ADSM__PRIVATE adsm_result adsm__cuda_device_list(const adsm_config *c, adsm__settings *s) {
    const char *list = getenv("ADSM_DEVICES"), *one = getenv("ADSM_DEVICE");
    if (c->devices) return adsm__parse_devices("adsm_config.devices", c->devices, s);
    if (c->device == 0 && list && *list) {
        if (one && *one)
            return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_DEVICES=%s and ADSM_DEVICE=%s are both set; set one",
                              list, one);
        return adsm__parse_devices("ADSM_DEVICES", list, s);
    }
    s->cuda_devices = 1;
    s->cuda_ordinals[0] = s->device;
    return ADSM_OK;
}

/* The cuda backend's settings: ADSM_DEVICE(S), ADSM_CUDA_STAGING, ADSM_CUDA_SAME_ADDRESS,
 * ADSM_CUDA_DMA_VIEW, ADSM_CUDA_ALIAS_COLLAPSE, ADSM_CUDA_COLLAPSE_SHARED, ADSM_CUDA_MAP_AHEAD,
 * ADSM_CUDA_DRIVER and ADSM_NVRTC_LIBRARY. */
ADSM__PRIVATE adsm_result adsm__cuda_settings(const adsm_config *c, adsm__settings *s) {
    adsm_result r;
    size_t device = 0, staging = c->cuda_staging;
    const char *v = getenv("ADSM_DEVICE");
    if (c->device > 0) device = (size_t)c->device - 1;
    else if (c->device < 0) return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.device: %d is negative", c->device);
    else if (v && *v && (adsm__parse_size(v, &device) != 0 || strpbrk(v, "kKmMgGtTiIbB")))
        return adsm__bad_env("ADSM_DEVICE", v, "expected a device number such as 0 or 1");
    if (device > 1023 && c->device > 0) /* the value given, and where: not a clamped one */
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.device: %d names device %zu, outside 0..1023 (the "
                          "field is the device number plus one)", c->device, device);
    if (device > 1023) return adsm__bad_env("ADSM_DEVICE", v, "expected a device number from 0 to 1023");
    if ((r = adsm__env_size("ADSM_CUDA_STAGING", &staging, 0)) != ADSM_OK) return r;
    s->device = (int)device;
    if ((r = adsm__cuda_device_list(c, s)) != ADSM_OK) return r;
    s->cuda_staging = staging ? staging : ADSM__DEFAULT_CUDA_STAGING;
    size_t ahead = 0;
    s->cuda_map_ahead = ADSM__CUDA_MAP_AHEAD_AUTO;
    if ((r = adsm__env_size("ADSM_CUDA_MAP_AHEAD", &ahead, 1)) != ADSM_OK) return r;
    if (getenv("ADSM_CUDA_MAP_AHEAD") && *getenv("ADSM_CUDA_MAP_AHEAD")) s->cuda_map_ahead = ahead;
    if ((r = adsm__env_switch("ADSM_CUDA_SAME_ADDRESS", &s->cuda_same_address, 1,
                              "expected 1 (try) or 0 (always translate)")) != ADSM_OK ||
        (r = adsm__env_switch("ADSM_CUDA_DMA_VIEW", &s->cuda_dma_view, 1,
                              "expected 1 (page-lock objects through a second view) or 0 (stage every copy)")) != ADSM_OK ||
        (r = adsm__env_switch("ADSM_CUDA_ALIAS_COLLAPSE", &s->cuda_alias_collapse, 1,
                              "expected 1 (2 MiB pages for the host alias where the kernel grants them) or 0 "
                              "(4 KiB pages unless shmem_enabled gives huge ones)")) != ADSM_OK ||
        (r = adsm__env_switch("ADSM_CUDA_COLLAPSE_SHARED", &s->cuda_collapse_shared, 1,
                              "expected 1 (collapse the 2 MiB pages objects share too) or 0 (only those "
                              "inside one object)")) != ADSM_OK)
        return r;
    if ((r = adsm__env_path("ADSM_CUDA_DRIVER", s->cuda_driver, sizeof s->cuda_driver)) != ADSM_OK) return r;
    return adsm__env_path("ADSM_NVRTC_LIBRARY", s->nvrtc_library, sizeof s->nvrtc_library);
}

ADSM__PRIVATE unsigned adsm__log2(size_t x) {
    unsigned s = 0;
    while (((size_t)1 << s) < x) s++;
    return s;
}

ADSM__PRIVATE adsm_result adsm__validate(adsm__settings *s, size_t page) {
    char why[160];
    if (!adsm__is_pow2(s->block_size) || s->block_size < page || s->block_size > ADSM__MAX_BLOCK_SIZE) {
        snprintf(why, sizeof why, "block size %zu must be a power of two between the page size (%zu) and 1G",
                 s->block_size, page);
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_BLOCK_SIZE: %s", why);
    }
    if (s->rolling_size == 1 || s->rolling_size > ADSM__MAX_ROLLING_SIZE)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.rolling_size: %zu blocks; expected a count from 2 "
                          "to %zu (or 0)", s->rolling_size, ADSM__MAX_ROLLING_SIZE);
    if (s->rolling_step > ADSM__MAX_ROLLING_STEP)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.rolling_step: %zu; expected a count from 1 to %zu",
                          s->rolling_step, ADSM__MAX_ROLLING_STEP);
    if (s->emu_memory < ((size_t)1 << 20) || s->emu_memory > ADSM__MAX_EMU_MEMORY)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "ADSM_EMU_MEMORY: %zu bytes is outside 1M..1T",
                          s->emu_memory);
    if (s->cuda_staging < ((size_t)64 << 10) || s->cuda_staging > ((size_t)1 << 30) ||
        s->cuda_staging % page)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG,
                          "ADSM_CUDA_STAGING: %zu bytes must be a multiple of the page size within 64K..1G",
                          s->cuda_staging);
    if (s->emu_workers == 0 || s->emu_workers > ADSM__MAX_EMU_WORKERS)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.emu_workers: %u; expected a count from 1 to %d",
                          s->emu_workers, ADSM__MAX_EMU_WORKERS);
    s->block_shift = adsm__log2(s->block_size);
    return ADSM_OK;
}

ADSM__PRIVATE adsm_result adsm__settings_resolve(const adsm_config *cfg, size_t page, adsm__settings *s) {
    adsm_config c;
    adsm_result r;
    size_t workers = 0, devices = 0, streams = 0;
    if (cfg) c = *cfg;
    else memset(&c, 0, sizeof c);
    int backend = (int)c.backend, protocol = (int)c.protocol, log = (int)c.log_level, engine = (int)c.fault_engine;
    if ((r = adsm__env_name("ADSM_BACKEND", adsm__backend_names, &backend, "expected auto, emu, host or cuda")) ||
        (r = adsm__env_name("ADSM_PROTOCOL", adsm__protocol_names, &protocol, "expected batch, lazy, rolling, um, um-prefetch or hmm")) ||
        (r = adsm__env_name("ADSM_LOG", adsm__log_names, &log, "expected error, warn, info or debug")) ||
        (r = adsm__env_name("ADSM_FAULT_ENGINE", adsm__engine_names, &engine,
                            "expected auto, mprotect or userfaultfd")) ||
        (r = adsm__env_size("ADSM_BLOCK_SIZE", &c.block_size, 0)) ||
        (r = adsm__env_count("ADSM_ROLLING_SIZE", &c.rolling_size, 2, ADSM__MAX_ROLLING_SIZE, 1)) ||
        (r = adsm__env_count("ADSM_ROLLING_STEP", &c.rolling_step, 1, ADSM__MAX_ROLLING_STEP, 0)) ||
        (r = adsm__env_size("ADSM_EMU_MEMORY", &c.emu_memory, 0)))
        return r;
    if (c.emu_workers == 0 && (r = adsm__env_count("ADSM_EMU_WORKERS", &workers, 1, ADSM__MAX_EMU_WORKERS, 0)))
        return r;
    if (c.emu_devices == 0 && (r = adsm__env_count("ADSM_EMU_DEVICES", &devices, 1, ADSM__MAX_DEVICES, 0)))
        return r;
    if (c.streams == 0 && (r = adsm__env_count("ADSM_STREAMS", &streams, 1, ADSM__MAX_STREAMS, 0)))
        return r;
    if (c.streams > ADSM__MAX_STREAMS)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.streams: %u; expected a count from 1 to %d",
                          c.streams, ADSM__MAX_STREAMS);
    if (c.emu_devices > ADSM__MAX_DEVICES)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.emu_devices: %u; expected a count from 1 to %d",
                          c.emu_devices, ADSM__MAX_DEVICES);
    if (c.affinity_block == 0 &&
        (r = adsm__env_count("ADSM_AFFINITY_BLOCK", &c.affinity_block, 1, ADSM__MAX_AFFINITY_BLOCK, 1)))
        return r;
    if (c.affinity_block > ADSM__MAX_AFFINITY_BLOCK)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.affinity_block: %zu; expected 0 to %d",
                          c.affinity_block, ADSM__MAX_AFFINITY_BLOCK);
    if ((r = adsm__flag_setting("ADSM_BLOCK_EXACT", "block_exact", &c.block_exact)) != ADSM_OK ||
        (r = adsm__flag_setting("ADSM_WRITE_THROUGH", "write_through", &c.write_through)) != ADSM_OK ||
        (r = adsm__flag_setting("ADSM_DROP_REPLICAS", "drop_replicas", &c.drop_replicas)) != ADSM_OK ||
        (r = adsm__flag_setting("ADSM_EMU_CHECK_BOUNDS", "emu_check_bounds", &c.emu_check_bounds)) != ADSM_OK)
        return r;
    if ((r = adsm__cuda_settings(&c, s)) != ADSM_OK) return r;
    size_t prepare = 0;
    if ((r = adsm__env_count("ADSM_PREPARE_THREADS", &prepare, 1, ADSM__PREPARE_MAX_THREADS, 1)) != ADSM_OK) return r;
    s->prepare_threads = prepare ? (unsigned)prepare : adsm__prepare_threads_auto(adsm__cpu_count());
    if ((r = adsm__env_switch("ADSM_HOST_ON_FIRST_USE", &s->host_on_first_use, 1,
                              "expected 1 (an object's host pages are made and page-locked when the CPU or a "
                              "copy first needs them) or 0 (at adsm_alloc)")) != ADSM_OK)
        return r;
    if ((r = adsm__env_switch("ADSM_SYNC_HOME", &s->sync_home, 1,
                              "expected 1 (small results the CPU reads after each sync come home in it) or 0 "
                              "(every kernel output waits for the CPU's fault)")) != ADSM_OK)
        return r;
    if ((r = adsm__env_switch("ADSM_EMU_SAME_ADDRESS", &s->emu_same_address, 1,
                              "expected 1 (device memory at the host's addresses) or 0 (at addresses of its "
                              "own, as a GPU that translates)")) != ADSM_OK)
        return r;
    int translate = 0;
    if ((r = adsm__env_name("ADSM_TRANSLATE", adsm__translate_names, &translate,
                            "expected auto (in place where it pays), staged (through host memory) or in-place")) != ADSM_OK)
        return r;
    s->translate = translate ? translate : ADSM__TRANSLATE_AUTO;
    if (c.trace) {
        if (strlen(c.trace) >= sizeof s->trace_path)
            return adsm__fail(ADSM_ERROR_INVALID_CONFIG, "adsm_config.trace: path too long");
        memcpy(s->trace_path, c.trace, strlen(c.trace) + 1);
    } else if ((r = adsm__env_path("ADSM_TRACE", s->trace_path, sizeof s->trace_path)) != ADSM_OK) {
        return r;
    }
    if (backend < 0 || backend > ADSM_BACKEND_CUDA || protocol < 0 || protocol > ADSM_PROTOCOL_HMM ||
        log < 0 || log > ADSM_LOG_DEBUG || engine < 0 || engine > ADSM_FAULT_ENGINE_USERFAULTFD)
        return adsm__fail(ADSM_ERROR_INVALID_CONFIG,
                          "adsm_config: backend, protocol, log_level or fault_engine out of range");
    s->backend = backend ? (adsm_backend_kind)backend : ADSM_BACKEND_AUTO;
    s->protocol = protocol ? (adsm_protocol_kind)protocol : ADSM_PROTOCOL_ROLLING;
    s->log_level = log ? (adsm_log_level)log : ADSM_LOG_WARN;
    s->fault_engine = engine ? (adsm_fault_engine_kind)engine : ADSM_FAULT_ENGINE_AUTO;
    s->block_size = c.block_size ? c.block_size : ADSM_DEFAULT_BLOCK_SIZE;
    s->rolling_size = c.rolling_size;
    s->rolling_step = c.rolling_step ? c.rolling_step : ADSM__DEFAULT_ROLLING_STEP;
    s->block_exact = c.block_exact;
    s->write_through = c.write_through;
    s->drop_replicas = c.drop_replicas;
    s->emu_check_bounds = c.emu_check_bounds;
    s->affinity_block = c.affinity_block;
    s->emu_memory = c.emu_memory ? c.emu_memory : ADSM__MIN(adsm__phys_memory() / 2, (size_t)32 << 30);
    s->emu_memory_given = c.emu_memory != 0;
    if (c.emu_workers) s->emu_workers = c.emu_workers;
    else if (workers) s->emu_workers = (unsigned)workers;
    else s->emu_workers = (unsigned)ADSM__MIN(adsm__cpu_count(), 64);
    s->emu_devices = c.emu_devices ? c.emu_devices : devices ? (unsigned)devices : 1;
    s->streams = c.streams ? c.streams : (unsigned)streams; /* 0: by device count (emu) */
    return adsm__validate(s, page);
}

#endif /* ADSM__CONFIG_INCLUDED */
