/* bench/apps/stencil/adsm.c -- stencil on shared memory: explicit.c with its device buffers and
 * copies deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/stencil/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "stencil", "adsm", argc, argv);
    if (run.gen) {
        stencil_generate(&run);
        return 0;
    }
    stencil_size s = stencil_size_of(&run);
    size_t grid_bytes = stencil_points(s) * sizeof(float);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    stencil_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    float *a0 = adsm_alloc(grid_bytes), *anext = adsm_alloc(grid_bytes);
    FILE *in = app_open(&run, "grid.bin", "rb");
    if (fread(a0, 1, grid_bytes, in) != grid_bytes) app_die("stencil: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    adsm_memcpy(anext, a0, grid_bytes);
    for (int t = 0; t < s.steps; t++) {
        ADSM_CALL(stencil_jacobi, stencil_grid(s), anext, a0, s.nx, s.ny, s.nz, s.c0, s.c1);
        float *swap = a0;
        a0 = anext;
        anext = swap;
    }
    float *swap = a0;
    a0 = anext;
    anext = swap;
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "grid.out", "wb");
    app_fwrite(anext, 1, grid_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, stencil_check(&run, anext));
    adsm_free(a0);
    adsm_free(anext);
    adsm_shutdown();
    return rc;
}
