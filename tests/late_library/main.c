/* tests/late_library/main.c -- a kernel in a library loaded after adsm_init, on emu (the device
 * is a process made at adsm_init, without that library): its launch is refused, saying why, and
 * the device keeps working; loaded before adsm_init it runs. Usage: main PLUGIN.so before|after.
 * Exit 0 when everything behaved, 1 with a line saying what did not. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

ADSM_KERNEL(main_add_two, ADSM_INOUT(int, x), ADSM_VALUE(size_t, n));
void main_add_two(adsm_grid g, int *x, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) x[i] += 2;
    }
}

typedef adsm_result (*plugin_run_fn)(int *x, size_t n);

static int fail(const char *what) {
    printf("FAIL: %s (%s)\n", what, adsm_last_error());
    return 1;
}

static plugin_run_fn load(const char *path) {
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) printf("dlopen: %s\n", dlerror());
    return lib ? (plugin_run_fn)dlsym(lib, "plugin_run") : NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return fail("usage: main PLUGIN.so before|after");
    int before = strcmp(argv[2], "before") == 0;
    plugin_run_fn run = before ? load(argv[1]) : NULL;
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    if (adsm_init(&cfg) != ADSM_OK) return fail("adsm_init");
    if (!before) run = load(argv[1]);
    if (!run) return fail("no plugin_run");
    enum { N = 100 };
    int *x = adsm_alloc(N * sizeof *x);
    if (!x) return fail("adsm_alloc");
    for (int i = 0; i < N; i++) x[i] = i;
    adsm_result r = run(x, N);
    if (before && r != ADSM_OK) return fail("the plugin's kernel, loaded before adsm_init");
    if (!before) {
        if (r != ADSM_ERROR_UNSUPPORTED) return fail("the plugin's kernel, loaded after adsm_init, was not refused");
        if (!strstr(adsm_last_error(), "plugin") || !strstr(adsm_last_error(), "before adsm_init"))
            return fail("the refusal does not name the library and the remedy");
        printf("refused: %s\n", adsm_last_error());
    }
    if (ADSM_CALL(main_add_two, adsm_grid_1d(1, 256), x, (size_t)N) != ADSM_OK || adsm_sync() != ADSM_OK)
        return fail("the device no longer runs the program's own kernels");
    for (int i = 0; i < N; i++)
        if (x[i] != i + 2 + before) {
            printf("FAIL: x[%d] = %d, not %d\n", i, x[i], i + 2 + before);
            return 1;
        }
    adsm_free(x);
    adsm_shutdown();
    printf("ok (%s)\n", argv[2]);
    return 0;
}
