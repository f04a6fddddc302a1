/* tests/test_config.c -- configuration from the environment and from adsm_config. Each Criterion
 * test is its own process, so setenv before adsm_init affects that test only. Bad values fail
 * initialisation with ADSM_ERROR_INVALID_CONFIG and a message naming the variable. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <stddef.h>
#include <criterion/parameterized.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const all_vars[] = {"ADSM_BACKEND",      "ADSM_PROTOCOL",     "ADSM_BLOCK_SIZE",
                                       "ADSM_ROLLING_SIZE", "ADSM_ROLLING_STEP", "ADSM_EMU_MEMORY",
                                       "ADSM_EMU_WORKERS",  "ADSM_LOG",          "ADSM_BLOCK_EXACT",
                                       "ADSM_EMU_DEVICES",  "ADSM_WRITE_THROUGH", "ADSM_DROP_REPLICAS",
                                       "ADSM_AFFINITY_BLOCK", "ADSM_STREAMS",      "ADSM_TRANSLATE",
                                       "ADSM_PREPARE_THREADS", "ADSM_HOST_ON_FIRST_USE"};

/* every test starts from a clean environment: no ADSM_* variable from the caller */
static void clean_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof *all_vars; i++) unsetenv(all_vars[i]);
}

TestSuite(config, .init = clean_env);

static adsm_config emu_config(void) {
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.backend = ADSM_BACKEND_EMU;
    return cfg;
}

/* init with `var=value` must fail, naming var, and leave nothing behind */
static void expect_bad(const char *var, const char *value) {
    cr_assert_eq(setenv(var, value, 1), 0);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (strcmp(var, "ADSM_BACKEND") != 0) cfg.backend = ADSM_BACKEND_EMU;
    adsm_result r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_ERROR_INVALID_CONFIG, "%s=%s: adsm_init returned %d (%s)", var, value, r,
                 adsm_last_error());
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_CONFIG);
    const char *msg = adsm_last_error();
    cr_assert(strstr(msg, var) != NULL, "%s=%s: the message does not name the variable: %s", var, value, msg);
    /* nothing half-initialised: no handler, and calls that need the runtime fail the same way */
    struct sigaction cur;
    sigaction(SIGSEGV, NULL, &cur);
    cr_assert(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL, "a failed init left a SIGSEGV handler");
    cr_assert_null(adsm_alloc(64));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_CONFIG);
    /* with the variable gone, init works */
    cr_assert_eq(unsetenv(var), 0);
    r = adsm_init(&cfg);
    cr_assert_eq(r, ADSM_OK, "init after fixing %s: %s", var, adsm_last_error());
    int *p = adsm_alloc(4096);
    cr_assert(p, "%s", adsm_last_error());
    p[0] = 1;
    cr_assert_eq(p[0], 1);
    cr_assert_eq(adsm_free(p), ADSM_OK);
    adsm_shutdown();
}

Test(config, block_size_3000) { expect_bad("ADSM_BLOCK_SIZE", "3000"); }
Test(config, block_size_hex) { expect_bad("ADSM_BLOCK_SIZE", "0x10"); }
Test(config, block_size_12K) { expect_bad("ADSM_BLOCK_SIZE", "12K"); }
Test(config, block_size_2G) { expect_bad("ADSM_BLOCK_SIZE", "2G"); }
Test(config, block_size_abc) { expect_bad("ADSM_BLOCK_SIZE", "abc"); }
Test(config, block_size_below_page) { expect_bad("ADSM_BLOCK_SIZE", "1K"); }
Test(config, block_size_negative) { expect_bad("ADSM_BLOCK_SIZE", "-4096"); }
Test(config, block_size_trailing_junk) { expect_bad("ADSM_BLOCK_SIZE", "4Kx"); }
Test(config, block_size_overflow) { expect_bad("ADSM_BLOCK_SIZE", "99999999999999999999999"); }
Test(config, protocol_fast) { expect_bad("ADSM_PROTOCOL", "fast"); }
Test(config, protocol_case) { expect_bad("ADSM_PROTOCOL", "LAZY"); }
Test(config, backend_gpu) { expect_bad("ADSM_BACKEND", "gpu"); }
Test(config, log_loud) { expect_bad("ADSM_LOG", "loud"); }
Test(config, emu_memory_1) { expect_bad("ADSM_EMU_MEMORY", "1"); }
Test(config, emu_memory_huge) { expect_bad("ADSM_EMU_MEMORY", "2T"); }
Test(config, rolling_size_negative) { expect_bad("ADSM_ROLLING_SIZE", "-1"); }
Test(config, rolling_step_junk) { expect_bad("ADSM_ROLLING_STEP", "two"); }
Test(config, emu_workers_junk) { expect_bad("ADSM_EMU_WORKERS", "many"); }
Test(config, block_size_zero) { expect_bad("ADSM_BLOCK_SIZE", "0"); }
Test(config, device_5000) { expect_bad("ADSM_DEVICE", "5000"); }

/* A device number out of range is reported as given, naming where it came from (both used to say
 * "ADSM_DEVICE: 1024", a value clamped before the check, whatever was given and wherever). */
Test(config, a_device_out_of_range_is_reported_as_given) {
    cr_assert_eq(setenv("ADSM_DEVICE", "99999999999", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_DEVICE='99999999999'"), "%s", adsm_last_error());
    cr_assert_eq(unsetenv("ADSM_DEVICE"), 0);
    cfg.device = 1025;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "adsm_config.device: 1025"), "%s", adsm_last_error());
    cfg.device = 1024; /* device 1023: the last one allowed */
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    adsm_shutdown();
}
Test(config, emu_memory_zero) { expect_bad("ADSM_EMU_MEMORY", "0"); }
Test(config, rolling_step_zero) { expect_bad("ADSM_ROLLING_STEP", "0"); }

/* The message quotes the value given and asks for the right kind of value (issue 11, item 11). */
static void expect_bad_saying(const char *var, const char *value, const char *says) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "%s='%s'", var, value);
    cr_assert_eq(setenv(var, value, 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG, "%s", quoted);
    const char *msg = adsm_last_error();
    cr_assert(strstr(msg, quoted), "message does not quote %s: %s", quoted, msg);
    cr_assert(strstr(msg, says), "message does not say '%s': %s", says, msg);
}

Test(config, emu_workers_5000_is_quoted) { expect_bad_saying("ADSM_EMU_WORKERS", "5000", "count from 1 to 256"); }
Test(config, emu_workers_size_is_not_a_count) { expect_bad_saying("ADSM_EMU_WORKERS", "4K", "count"); }
Test(config, emu_workers_junk_asks_for_a_count) { expect_bad_saying("ADSM_EMU_WORKERS", "many", "count"); }
Test(config, affinity_block_junk) { expect_bad_saying("ADSM_AFFINITY_BLOCK", "rows", "count"); }
Test(config, affinity_block_huge) { expect_bad_saying("ADSM_AFFINITY_BLOCK", "2000000", "count from 1 to 1048576"); }
Test(config, streams_zero) { expect_bad_saying("ADSM_STREAMS", "0", "count from 1 to 16"); }
Test(config, streams_17) { expect_bad_saying("ADSM_STREAMS", "17", "count from 1 to 16"); }
Test(config, prepare_threads_17) { expect_bad_saying("ADSM_PREPARE_THREADS", "17", "count from 1 to 16 (or 0)"); }
Test(config, prepare_threads_abc) { expect_bad_saying("ADSM_PREPARE_THREADS", "abc", "ADSM_PREPARE_THREADS"); }
Test(config, host_on_first_use_2) {
    expect_bad_saying("ADSM_HOST_ON_FIRST_USE", "2", "1 (an object's host pages are made and page-locked when the CPU");
}
Test(config, translate_names_its_three_choices) {
    expect_bad_saying("ADSM_TRANSLATE", "patch", "auto (in place where it pays), staged (through host memory) or in-place");
}
Test(config, rolling_size_1_is_refused) { expect_bad_saying("ADSM_ROLLING_SIZE", "1", "count from 2"); }
Test(config, rolling_step_junk_asks_for_a_count) { expect_bad_saying("ADSM_ROLLING_STEP", "x", "count from 1"); }
Test(config, block_size_junk_asks_for_a_size) { expect_bad_saying("ADSM_BLOCK_SIZE", "big", "size such as"); }

Test(config, rolling_size_1_in_the_config_is_refused) {
    adsm_config cfg = emu_config();
    cfg.rolling_size = 1;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "rolling_size: 1 "), "%s", adsm_last_error());
}

/* ---- good values ------------------------------------------------------------------------------ */

static void expect_block_size(const char *value, size_t want) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", value, 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "ADSM_BLOCK_SIZE=%s: %s", value, adsm_last_error());
    cr_assert_eq(adsm_block_size(), want, "ADSM_BLOCK_SIZE=%s gave %zu", value, adsm_block_size());
    /* objects of a block, less and more work */
    size_t sizes[3] = {want / 2, want, want * 2 + 4096};
    for (int k = 0; k < 3; k++) {
        unsigned char *p = adsm_alloc(sizes[k]);
        cr_assert(p, "alloc %zu: %s", sizes[k], adsm_last_error());
        p[0] = 1;
        p[sizes[k] - 1] = 2;
        cr_assert_eq(p[0] + p[sizes[k] - 1], 3);
        cr_assert_eq(adsm_block_state(p), 'D');
        cr_assert_eq(adsm_free(p), ADSM_OK);
    }
    adsm_shutdown();
}

Test(config, block_size_4K) { expect_block_size("4K", 4096); }
Test(config, block_size_256K) { expect_block_size("256K", 262144); }
Test(config, block_size_1M) { expect_block_size("1M", 1048576); }
Test(config, block_size_32M) { expect_block_size("32M", 33554432); }
Test(config, block_size_plain_bytes) { expect_block_size("65536", 65536); }
Test(config, block_size_lower_case) { expect_block_size("2m", 2097152); }

Test(config, block_size_rolling_granularity) {
    /* with 4K blocks a write makes one page Dirty, not the whole object */
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "4K", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    char *p = adsm_alloc(4 * 4096);
    cr_assert(p);
    p[4096] = 1;
    cr_assert_eq(adsm_block_state(p), 'R');
    cr_assert_eq(adsm_block_state(p + 4096), 'D');
    cr_assert_eq(adsm_block_state(p + 8192), 'R');
    adsm_free(p);
    adsm_shutdown();
}

Test(config, block_exact_from_the_environment) {
    /* rolling with 64K blocks: a read fetches its block alone, not its huge page */
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "64K", 1), 0);
    cr_assert_eq(setenv("ADSM_BLOCK_EXACT", "1", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    char *p = adsm_alloc(4 << 20);
    cr_assert(p);
    p[0] = 1;
    cr_assert_eq(adsm_block_state(p + (64 << 10)), 'R', "write-ahead is off");
    adsm_free(p);
    adsm_shutdown();
}

/* The 0/1 settings refuse anything else, from the environment and from adsm_config. */
typedef struct flag_case {
    char var[32], field[32]; /* text, not pointers: Criterion's workers are new processes */
    size_t offset;           /* of the int field in adsm_config */
} flag_case;

ParameterizedTestParameters(config, flags_refuse_other_values) {
    static flag_case cases[] = {
        {"ADSM_BLOCK_EXACT", "block_exact", offsetof(adsm_config, block_exact)},
        {"ADSM_WRITE_THROUGH", "write_through", offsetof(adsm_config, write_through)},
        {"ADSM_DROP_REPLICAS", "drop_replicas", offsetof(adsm_config, drop_replicas)},
        {"ADSM_EMU_CHECK_BOUNDS", "emu_check_bounds", offsetof(adsm_config, emu_check_bounds)},
    };
    return cr_make_param_array(flag_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(flag_case *c, config, flags_refuse_other_values) {
    cr_assert_eq(setenv(c->var, "yes", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), c->var), "%s", adsm_last_error());
    cr_assert_eq(unsetenv(c->var), 0);
    *(int *)((char *)&cfg + c->offset) = 2;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), c->field), "%s", adsm_last_error());
    *(int *)((char *)&cfg + c->offset) = 1;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    adsm_shutdown();
}

/* The environment-only switches refuse anything but 0 and 1, naming the variable. */
Test(config, emu_same_address_refuses_other_values) {
    cr_assert_eq(setenv("ADSM_EMU_SAME_ADDRESS", "no", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_EMU_SAME_ADDRESS"), "%s", adsm_last_error());
    cr_assert_eq(setenv("ADSM_EMU_SAME_ADDRESS", "0", 1), 0);
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    int *p = adsm_alloc(4096);
    cr_assert_neq((uintptr_t)adsm_safe(p), (uintptr_t)p, "device addresses of its own");
    adsm_shutdown();
    cr_assert_eq(unsetenv("ADSM_EMU_SAME_ADDRESS"), 0);
}

Test(config, protocol_lazy) {
    cr_assert_eq(setenv("ADSM_PROTOCOL", "lazy", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_protocol_name(), "lazy");
    adsm_shutdown();
}

Test(config, protocol_batch) {
    cr_assert_eq(setenv("ADSM_PROTOCOL", "batch", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_protocol_name(), "batch");
    adsm_shutdown();
}

Test(config, defaults) {
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_protocol_name(), "rolling");
    cr_assert_eq(adsm_block_size(), (size_t)2 << 20);
    cr_assert_str_eq(adsm_backend_name(), "emu");
    adsm_shutdown();
}

Test(config, implicit_init_defaults) {
    int *p = adsm_alloc(64);
    cr_assert(p, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_protocol_name(), "rolling");
    cr_assert_str_eq(adsm_backend_name(), "emu");
    adsm_free(p);
    adsm_shutdown();
}

Test(config, empty_value_is_unset) {
    cr_assert_eq(setenv("ADSM_PROTOCOL", "", 1), 0);
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_str_eq(adsm_protocol_name(), "rolling");
    cr_assert_eq(adsm_block_size(), (size_t)2 << 20);
    adsm_shutdown();
}

Test(config, struct_field_wins_over_environment) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "4K", 1), 0);
    cr_assert_eq(setenv("ADSM_PROTOCOL", "lazy", 1), 0);
    cr_assert_eq(setenv("ADSM_BACKEND", "host", 1), 0);
    adsm_config cfg = emu_config();
    cfg.block_size = (size_t)1 << 20;
    cfg.protocol = ADSM_PROTOCOL_BATCH;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)1 << 20);
    cr_assert_str_eq(adsm_protocol_name(), "batch");
    cr_assert_str_eq(adsm_backend_name(), "emu");
    adsm_shutdown();
}

Test(config, zero_field_takes_environment) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "64K", 1), 0);
    cr_assert_eq(setenv("ADSM_PROTOCOL", "lazy", 1), 0);
    cr_assert_eq(setenv("ADSM_BACKEND", "host", 1), 0);
    adsm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)64 << 10);
    cr_assert_str_eq(adsm_protocol_name(), "lazy");
    cr_assert_str_eq(adsm_backend_name(), "host");
    adsm_shutdown();
}

Test(config, struct_field_hides_bad_environment) {
    /* a field that is set does not read its variable at all */
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "abc", 1), 0);
    cr_assert_eq(setenv("ADSM_PROTOCOL", "fast", 1), 0);
    adsm_config cfg = emu_config();
    cfg.block_size = (size_t)256 << 10;
    cfg.protocol = ADSM_PROTOCOL_LAZY;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)256 << 10);
    cr_assert_str_eq(adsm_protocol_name(), "lazy");
    adsm_shutdown();
}

Test(config, bad_struct_values) {
    adsm_config cfg = emu_config();
    cfg.block_size = 3000;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "BLOCK_SIZE") != NULL, "%s", adsm_last_error());
    cfg = emu_config();
    cfg.protocol = (adsm_protocol_kind)99;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cfg = emu_config();
    cfg.emu_memory = 1000;
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "EMU_MEMORY") != NULL, "%s", adsm_last_error());
    cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    adsm_shutdown();
}

Test(config, good_init_after_failed_init) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "12K", 1), 0);
    adsm_config cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG);
    cr_assert_eq(adsm_init(&cfg), ADSM_ERROR_INVALID_CONFIG, "a second bad init must fail the same way");
    cr_assert(strstr(adsm_last_error(), "ADSM_BLOCK_SIZE") != NULL, "%s", adsm_last_error());
    /* a good value in the struct, with the bad environment still set */
    cfg.block_size = (size_t)128 << 10;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)128 << 10);
    int *p = adsm_alloc(1000);
    cr_assert(p);
    p[999 / sizeof(int)] = 5;
    cr_assert_eq(p[999 / sizeof(int)], 5);
    adsm_free(p);
    adsm_shutdown();
    /* and with the environment fixed, after a shutdown */
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "8K", 1), 0);
    cfg = emu_config();
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)8 << 10);
    adsm_shutdown();
}

Test(config, implicit_init_with_bad_environment) {
    cr_assert_eq(setenv("ADSM_BLOCK_SIZE", "abc", 1), 0);
    cr_assert_null(adsm_alloc(100));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_BLOCK_SIZE") != NULL, "%s", adsm_last_error());
    cr_assert_null(adsm_safe_alloc(100));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_CONFIG);
    cr_assert_eq(adsm_block_size(), 0);
    cr_assert_str_eq(adsm_protocol_name(), "none");
    /* fixing the environment lets the next call initialise */
    cr_assert_eq(unsetenv("ADSM_BLOCK_SIZE"), 0);
    cr_assert_eq(setenv("ADSM_BACKEND", "emu", 1), 0);
    int *p = adsm_alloc(100);
    cr_assert(p, "%s", adsm_last_error());
    cr_assert_eq(adsm_block_size(), (size_t)2 << 20);
    adsm_free(p);
    adsm_shutdown();
}

Test(config, implicit_init_with_bad_protocol) {
    cr_assert_eq(setenv("ADSM_PROTOCOL", "fast", 1), 0);
    cr_assert_null(adsm_alloc(100));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_INVALID_CONFIG);
    cr_assert(strstr(adsm_last_error(), "ADSM_PROTOCOL") != NULL, "%s", adsm_last_error());
}

/* ---- the memory the default emulated device is sized from ------------------------------------- */
/* A cgroup layout: /proc/self/cgroup's text and the limit files under the cgroup mount (path,
 * content); the smallest limit on the process's cgroup and its ancestors is expected (0: none). */
typedef struct cgroup_case {
    char name[24];
    char proc[96];
    char files[3][2][64];
    unsigned long long expect;
} cgroup_case;

ParameterizedTestParameters(config, cgroup_memory_limit) {
    static cgroup_case cases[] = {
        {"v2, parent limits", "0::/a/b\n",
         {{"a/b/memory.max", "max\n"}, {"a/memory.max", "2147483648\n"}, {"", ""}}, 2147483648ull},
        {"v2, own limit smaller", "0::/a/b\n",
         {{"a/b/memory.max", "1073741824\n"}, {"a/memory.max", "2147483648\n"}, {"", ""}}, 1073741824ull},
        {"v2 in a namespace", "0::/\n", {{"memory.max", "536870912\n"}, {"", ""}, {"", ""}}, 536870912ull},
        {"v2, none", "0::/a\n", {{"a/memory.max", "max\n"}, {"", ""}, {"", ""}}, 0},
        {"v1 memory controller", "5:cpu,cpuacct:/x\n4:memory:/x/y\n0::/\n",
         {{"memory/x/y/memory.limit_in_bytes", "9223372036854771712\n"},
          {"memory/x/memory.limit_in_bytes", "3221225472\n"},
          {"cpu,cpuacct/x/memory.limit_in_bytes", "1024\n"}},
         3221225472ull},
        {"v1, unlimited", "4:memory:/x\n", {{"memory/x/memory.limit_in_bytes", "9223372036854771712\n"}, {"", ""}, {"", ""}},
         9223372036854771712ull},
        {"no cgroup file", "", {{"", ""}, {"", ""}, {"", ""}}, 0},
    };
    return cr_make_param_array(cgroup_case, cases, sizeof cases / sizeof *cases);
}

/* Writes `text` at dir/rel, making the folders on the way. */
static void put_file(const char *dir, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *s = strchr(path + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(path, 0755);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

ParameterizedTest(cgroup_case *c, config, cgroup_memory_limit) {
    char root[] = "/tmp/adsm_cgroup_XXXXXX", proc[600];
    cr_assert_not_null(mkdtemp(root));
    snprintf(proc, sizeof proc, "%s/proc_self_cgroup", root);
    if (c->proc[0]) put_file(root, "proc_self_cgroup", c->proc);
    char mount[600];
    snprintf(mount, sizeof mount, "%s/fs", root);
    mkdir(mount, 0755);
    for (int i = 0; i < 3; i++)
        if (c->files[i][0][0]) put_file(mount, c->files[i][0], c->files[i][1]);
    size_t got = adsm__cgroup_memory_limit(proc, mount);
    size_t want = c->expect ? (size_t)c->expect : SIZE_MAX;
    cr_assert_eq(got, want, "%s: %zu, expected %zu", c->name, got, want);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_assert_eq(system(cmd), 0);
}
