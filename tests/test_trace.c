/* tests/test_trace.c -- ADSM_TRACE / adsm_config.trace: the file written at adsm_shutdown holds
 * one event per fault the runtime resolved (read and write apart), one per kernel, one per object
 * made and freed, copies whose bytes add up to adsm_stats' counts, named tracks, and no dropped events; without a path no file
 * is written, and one that cannot be written is reported at shutdown. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <unistd.h>

ADSM_KERNEL(twice, ADSM_INOUT(int, x), ADSM_VALUE(size_t, n));
void twice(adsm_grid g, int *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] *= 2;
    }
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no trace file at %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    return text;
}

static size_t count_events(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    size_t n = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) n++;
    return n;
}

/* Sum of the "bytes" arguments of the events called `name`. */
static unsigned long long sum_bytes(const char *text, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\":\"%s\"", name);
    unsigned long long sum = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        const char *b = strstr(p, "\"bytes\":");
        cr_assert_not_null(b);
        sum += strtoull(b + 8, NULL, 10);
    }
    return sum;
}

Test(trace, events_match_the_stats) {
    char path[] = "/tmp/adsm_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.rolling_size = 4;
    cfg.trace = path;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    const size_t n = 16 * 1024;
    int *x = adsm_alloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (int)i; /* 16 write faults, evictions past 4 dirty blocks */
    cr_assert_eq(ADSM_CALL(twice, adsm_grid_1d(n / 256, 256), x, n), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    long sum = 0;
    for (size_t i = 0; i < n; i += 1024) sum += x[i]; /* 16 read faults and fetches */
    cr_assert_eq(sum, 2 * (long)(1024 * 16 * 15 / 2));
    adsm_stats s;
    adsm_get_stats(&s);
    adsm_free(x);
    adsm_shutdown();
    char *text = slurp(path);
    cr_assert(strstr(text, "\"traceEvents\":["), "not a trace-event file");
    cr_assert(strstr(text, "\"dropped_events\":0"));
    cr_assert_eq(count_events(text, "fault (write)"), s.write_faults);
    cr_assert_eq(count_events(text, "fault (read)"), s.read_faults);
    cr_assert_eq(count_events(text, "kernel"), 1);
    cr_assert_eq(count_events(text, "evict"), s.evictions);
    cr_assert_gt(s.evictions, 0);
    cr_assert_eq(sum_bytes(text, "copy to device"), s.h2d_bytes);
    cr_assert_eq(sum_bytes(text, "fetch"), s.d2h_bytes);
    /* making and freeing the object are spans too, so a breakdown of the run adds up */
    cr_assert_eq(count_events(text, "alloc"), 1);
    cr_assert_eq(sum_bytes(text, "alloc"), n * sizeof *x);
    cr_assert_eq(count_events(text, "free"), 1);
    cr_assert(strstr(text, "\"name\":\"emu copy engine\""), "the copy engine's track has no name");
    cr_assert(strstr(text, "\"name\":\"device: kernels\""));
    free(text);
    unlink(path);
}

Test(trace, no_path_no_file) {
    char path[] = "/tmp/adsm_notrace_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    unsetenv("ADSM_TRACE");
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK);
    int *x = adsm_alloc(4096);
    x[0] = 1;
    adsm_free(x);
    adsm_shutdown();
    cr_assert_eq(access(path, F_OK), -1);
    cr_assert_null(adsm__rt.trace.events);
}

/* A trace file that cannot be written (its directory is missing) costs nothing but a warning at
 * adsm_shutdown naming the path and the reason. */
Test(trace, an_unwritable_path_is_reported_at_shutdown, .init = cr_redirect_stderr) {
    const char *path = "/nonexistent-adsm-dir/trace.json";
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.trace = path;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *x = adsm_alloc(4096);
    x[0] = 1;
    adsm_free(x);
    adsm_shutdown();
    fflush(stderr);
    char said[1024] = {0};
    size_t got = fread(said, 1, sizeof said - 1, cr_get_redirected_stderr());
    said[got] = 0;
    cr_assert(strstr(said, "ADSM_TRACE: cannot write /nonexistent-adsm-dir/trace.json: No such file or directory"),
              "shutdown said: %s", said);
    cr_assert_null(adsm__rt.trace.events, "the event buffer was not given back");
}
