/* fuzz/fuzz_config.c -- libFuzzer target for configuration parsing (adsm_impl/config.h), white box.
 *
 * Input layout:
 *   byte 0       which of the 8 ADSM_* variables are set (bit i: variable i; else it is unset)
 *   byte 1       bits 0-2: page size 4K << (b % 5); bit 6: cfg is NULL; bit 7: an adsm_config
 *                follows (otherwise a zeroed one is passed)
 *   [config]     backend, protocol, log level (signed bytes: out-of-range values included), then
 *                block_size, rolling_size, rolling_step, emu_memory, emu_workers (one byte each
 *                choosing 0, a power of two, or a raw 32-bit value)
 *   the rest     values of the variables, separated by '\n', in the order of `vars` below
 *
 * Every field is also parsed by adsm__parse_size and compared with a reference parser written
 * here. Then adsm__settings_resolve runs and is compared with a reference resolver: it must never
 * crash, return ADSM_OK with exactly the expected, valid settings (block size a power of two in
 * page..1G with the right shift, rolling size <= 16M, step 1..4096, emulated memory 1M..1T,
 * workers 1..256, enums in range), or ADSM_ERROR_INVALID_CONFIG with the message naming the
 * expected ADSM_ variable ("adsm_config" for out-of-range enum fields of the struct).
 * Any disagreement aborts.
 *
 * Build: clang -fsanitize=fuzzer,address,undefined -g -O1 -I. fuzz/fuzz_config.c -pthread -ldl */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "fuzz/fuzz_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


enum { V_BACKEND, V_PROTOCOL, V_BLOCK, V_RSIZE, V_RSTEP, V_EMUMEM, V_WORKERS, V_LOG, NVARS };
static const char *const vars[NVARS] = {"ADSM_BACKEND",      "ADSM_PROTOCOL",     "ADSM_BLOCK_SIZE",
                                        "ADSM_ROLLING_SIZE", "ADSM_ROLLING_STEP", "ADSM_EMU_MEMORY",
                                        "ADSM_EMU_WORKERS",  "ADSM_LOG"};

/* ---- reference size parser -----------------------------------------------------------------
 * Decimal digits, then optionally a binary unit K, M, G or T (either case), which may be followed
 * by 'i' and then by 'b' or 'B' ("4K", "4KiB", "4kb"); nothing else, and the value times the
 * unit must fit in size_t. */
static int ref_parse_size(const char *s, size_t *out) {
    unsigned __int128 v = 0;
    int overflow = 0;
    const char *p = s;
    if (!(*p >= '0' && *p <= '9')) return -1;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (unsigned)(*p++ - '0');
        if (v > SIZE_MAX) overflow = 1, v = (unsigned __int128)SIZE_MAX + 1; /* saturate */
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        p++;
        if (*p == 'i') p++;
        if (*p == 'b' || *p == 'B') p++;
    }
    if (*p) return -1;
    if (overflow || (v << shift) > SIZE_MAX) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

/* A count: plain digits within [min, max], or 0 where zero_ok. 0 ok, -1 refused. */
static int ref_parse_count(const char *s, size_t *out, size_t min, size_t max, int zero_ok) {
    size_t v;
    if (strspn(s, "0123456789") != strlen(s) || ref_parse_size(s, &v)) return -1;
    if (v == 0 ? !zero_ok : v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* ---- reference resolver ------------------------------------------------------------------- */
typedef struct expect {
    adsm_result r;
    const char *names; /* the variable (or "adsm_config") the error message must name */
    adsm__settings s;
} expect;

static int name_index(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) return i + 1;
    return -1;
}

static expect ref_resolve(const adsm_config *cfg, size_t page, const char *const env[NVARS]) {
    static const char *const backends[] = {"auto", "emu", "host", "cuda"};
    static const char *const protocols[] = {"batch", "lazy", "rolling", "um", "um-prefetch", "hmm"};
    static const char *const logs[] = {"error", "warn", "info", "debug"};
    expect e;
    adsm_config c;
    memset(&e, 0, sizeof e);
    if (cfg) c = *cfg;
    else memset(&c, 0, sizeof c);
#define SET(i) (env[i] && env[i][0])
#define BAD(i)                          \
    do {                                \
        e.r = ADSM_ERROR_INVALID_CONFIG; \
        e.names = vars[i];              \
        return e;                       \
    } while (0)
#define BAD_CONFIG()                    \
    do {                                \
        e.r = ADSM_ERROR_INVALID_CONFIG; \
        e.names = "adsm_config";        \
        return e;                       \
    } while (0)
    int backend = (int)c.backend, protocol = (int)c.protocol, log = (int)c.log_level;
    if (!backend && SET(V_BACKEND) && (backend = name_index(env[V_BACKEND], backends, 4)) < 0) BAD(V_BACKEND);
    if (!protocol && SET(V_PROTOCOL) && (protocol = name_index(env[V_PROTOCOL], protocols, 6)) < 0)
        BAD(V_PROTOCOL);
    if (!log && SET(V_LOG) && (log = name_index(env[V_LOG], logs, 4)) < 0) BAD(V_LOG);
    size_t workers = 0;
    if (!c.block_size && SET(V_BLOCK) && (ref_parse_size(env[V_BLOCK], &c.block_size) || !c.block_size))
        BAD(V_BLOCK);
    if (!c.rolling_size && SET(V_RSIZE) && ref_parse_count(env[V_RSIZE], &c.rolling_size, 2, (size_t)1 << 24, 1))
        BAD(V_RSIZE);
    if (!c.rolling_step && SET(V_RSTEP) && ref_parse_count(env[V_RSTEP], &c.rolling_step, 1, 4096, 0)) BAD(V_RSTEP);
    if (!c.emu_memory && SET(V_EMUMEM) && (ref_parse_size(env[V_EMUMEM], &c.emu_memory) || !c.emu_memory))
        BAD(V_EMUMEM);
    if (!c.emu_workers && SET(V_WORKERS) && ref_parse_count(env[V_WORKERS], &workers, 1, 256, 0)) BAD(V_WORKERS);
    if (backend < 0 || backend > 4 || protocol < 0 || protocol > 6 || log < 0 || log > 4) {
        e.r = ADSM_ERROR_INVALID_CONFIG;
        e.names = "adsm_config";
        return e;
    }
    e.s.backend = backend ? (adsm_backend_kind)backend : ADSM_BACKEND_AUTO;
    e.s.protocol = protocol ? (adsm_protocol_kind)protocol : ADSM_PROTOCOL_ROLLING;
    e.s.log_level = log ? (adsm_log_level)log : ADSM_LOG_WARN;
    e.s.block_size = c.block_size ? c.block_size : ((size_t)2 << 20);
    e.s.rolling_size = c.rolling_size;
    e.s.rolling_step = c.rolling_step ? c.rolling_step : 2;
    size_t half_ram = adsm__phys_memory() / 2;
    e.s.emu_memory = c.emu_memory ? c.emu_memory : (half_ram < ((size_t)32 << 30) ? half_ram : ((size_t)32 << 30));
    size_t cpus = adsm__cpu_count();
    e.s.emu_workers = c.emu_workers ? c.emu_workers : workers ? (unsigned)workers : (unsigned)(cpus < 64 ? cpus : 64);
    size_t bs = e.s.block_size;
    if ((bs & (bs - 1)) || bs < page || bs > ((size_t)1 << 30)) BAD(V_BLOCK);
    /* environment counts were range-checked above: what fails here came from adsm_config */
    if (e.s.rolling_size == 1 || e.s.rolling_size > ((size_t)1 << 24)) BAD_CONFIG();
    if (e.s.rolling_step > 4096) BAD_CONFIG();
    if (e.s.emu_memory < ((size_t)1 << 20) || e.s.emu_memory > ((size_t)1 << 40)) BAD(V_EMUMEM);
    if (e.s.emu_workers == 0 || e.s.emu_workers > 256) BAD_CONFIG();
    unsigned shift = 0;
    while (((size_t)1 << shift) < bs) shift++;
    e.s.block_shift = shift;
    e.r = ADSM_OK;
    return e;
#undef SET
#undef BAD
#undef BAD_CONFIG
}

/* ---- input -------------------------------------------------------------------------------- */

static size_t rd_size(reader *r) {
    uint8_t k = rd8(r);
    if (k < 64) return 0;
    if (k < 192) return (size_t)1 << (k % 64);
    size_t v = 0;
    for (int i = 0; i < 4; i++) v = v << 8 | rd8(r);
    return k & 1 ? v : v << 20;
}

static void check_parse_size(const char *s) {
    size_t got = 0x5a5a5a5a, want = 0;
    int rg = adsm__parse_size(s, &got), rw = ref_parse_size(s, &want);
    CHECK(rg == rw, "adsm__parse_size(\"%s\") returned %d, the reference %d (value %zu)", s, rg, rw, rw ? got : want);
    if (rw == 0) CHECK(got == want, "adsm__parse_size(\"%s\") = %zu, expected %zu", s, got, want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    uint8_t mask = rd8(&r), mode = rd8(&r);
    size_t page = (size_t)4096 << (mode % 5);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (mode & 0x80) {
        cfg.backend = (adsm_backend_kind)(int8_t)rd8(&r);
        cfg.protocol = (adsm_protocol_kind)(int8_t)rd8(&r);
        cfg.log_level = (adsm_log_level)(int8_t)rd8(&r);
        cfg.block_size = rd_size(&r);
        cfg.rolling_size = rd_size(&r);
        cfg.rolling_step = rd_size(&r);
        cfg.emu_memory = rd_size(&r);
        cfg.emu_workers = (unsigned)rd_size(&r);
    }

    /* the values: '\n'-separated fields, NUL-terminated copies. The environment is swapped for an
     * array of our own (setenv would leak its strings on every run): the original entries minus
     * any ADSM_*, plus the variables this input sets. */
    static char values[NVARS][256], entries[NVARS][300];
    static char **orig_env, **fuzz_env;
    static size_t norig;
    if (!fuzz_env) {
        orig_env = environ;
        for (char **e = orig_env; *e; e++) norig++;
        fuzz_env = (char **)calloc(norig + NVARS + 1, sizeof *fuzz_env);
        CHECK(fuzz_env, "out of memory");
    }
    size_t nenv = 0;
    for (size_t i = 0; i < norig; i++)
        if (strncmp(orig_env[i], "ADSM_", 5) != 0) fuzz_env[nenv++] = orig_env[i];
    const char *env[NVARS] = {0};
    for (int i = 0; i < NVARS; i++) {
        size_t len = 0;
        while (r.n && *r.p != '\n') {
            uint8_t c = rd8(&r);
            if (len < sizeof values[i] - 1) values[i][len++] = (char)c;
        }
        rd8(&r); /* the separator */
        values[i][len] = 0;
        check_parse_size(values[i]);
        if (mask >> i & 1) {
            snprintf(entries[i], sizeof entries[i], "%s=%s", vars[i], values[i]);
            fuzz_env[nenv++] = entries[i];
        }
    }
    fuzz_env[nenv] = NULL;
    environ = fuzz_env;
    for (int i = 0; i < NVARS; i++) {
        env[i] = getenv(vars[i]); /* what the runtime will see */
        CHECK(!!env[i] == (mask >> i & 1) && (!env[i] || strcmp(env[i], values[i]) == 0), "environment swap");
    }

    const adsm_config *pcfg = (mode & 0x40) ? NULL : &cfg;
    expect want = ref_resolve(pcfg, page, env);
    adsm__settings s;
    memset(&s, 0xa5, sizeof s);
    adsm__clear_error();
    adsm_result got = adsm__settings_resolve(pcfg, page, &s);
    const char *msg = adsm_last_error();

    CHECK(got == ADSM_OK || got == ADSM_ERROR_INVALID_CONFIG, "unexpected result %d (%s)", (int)got, msg);
    if (got != want.r) {
        fprintf(stderr, "fuzz_config: page %zu, cfg %s; environment:\n", page, pcfg ? "given" : "NULL");
        for (int i = 0; i < NVARS; i++)
            if (env[i]) fprintf(stderr, "  %s='%s'\n", vars[i], env[i]);
        CHECK(0, "settings_resolve returned %s (%s), the reference %s (naming %s)", adsm_result_string(got), msg,
              adsm_result_string(want.r), want.names ? want.names : "-");
    }
    if (got != ADSM_OK) {
        CHECK(adsm_last_result() == ADSM_ERROR_INVALID_CONFIG, "last result %d", (int)adsm_last_result());
        CHECK(strstr(msg, want.names) != NULL, "the message does not name %s: %s", want.names, msg);
        CHECK(strcmp(want.names, "adsm_config") == 0 || strstr(msg, "ADSM_") == msg,
              "the message does not start with the variable: %s", msg);
        return 0;
    }
    /* valid settings, and exactly the expected ones */
    CHECK(s.block_size && (s.block_size & (s.block_size - 1)) == 0 && s.block_size >= page &&
              s.block_size <= ((size_t)1 << 30),
          "block size %zu", s.block_size);
    CHECK(s.block_shift < 64 && ((size_t)1 << s.block_shift) == s.block_size, "block shift %u for %zu",
          s.block_shift, s.block_size);
    CHECK(s.backend >= ADSM_BACKEND_AUTO && s.backend <= ADSM_BACKEND_CUDA, "backend %d", (int)s.backend);
    CHECK(s.protocol >= ADSM_PROTOCOL_BATCH && s.protocol <= ADSM_PROTOCOL_HMM, "protocol %d", (int)s.protocol);
    CHECK(s.log_level >= ADSM_LOG_ERROR && s.log_level <= ADSM_LOG_DEBUG, "log level %d", (int)s.log_level);
    CHECK(s.rolling_size <= ((size_t)1 << 24), "rolling size %zu", s.rolling_size);
    CHECK(s.rolling_step >= 1 && s.rolling_step <= 4096, "rolling step %zu", s.rolling_step);
    CHECK(s.emu_memory >= ((size_t)1 << 20) && s.emu_memory <= ((size_t)1 << 40), "emu memory %zu", s.emu_memory);
    CHECK(s.emu_workers >= 1 && s.emu_workers <= 256, "emu workers %u", s.emu_workers);
    CHECK(s.backend == want.s.backend && s.protocol == want.s.protocol && s.log_level == want.s.log_level &&
              s.block_size == want.s.block_size && s.block_shift == want.s.block_shift &&
              s.rolling_size == want.s.rolling_size && s.rolling_step == want.s.rolling_step &&
              s.emu_memory == want.s.emu_memory && s.emu_workers == want.s.emu_workers,
          "settings differ from the reference: block %zu/%zu, rolling %zu/%zu step %zu/%zu, emu %zu/%zu, "
          "workers %u/%u, backend %d/%d protocol %d/%d log %d/%d",
          s.block_size, want.s.block_size, s.rolling_size, want.s.rolling_size, s.rolling_step, want.s.rolling_step,
          s.emu_memory, want.s.emu_memory, s.emu_workers, want.s.emu_workers, (int)s.backend, (int)want.s.backend,
          (int)s.protocol, (int)want.s.protocol, (int)s.log_level, (int)want.s.log_level);
    return 0;
}
