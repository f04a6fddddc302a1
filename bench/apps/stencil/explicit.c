/* bench/apps/stencil/explicit.c -- stencil with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/stencil/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "stencil", "explicit", argc, argv);
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
    float *a0 = adsm_host_alloc(grid_bytes), *anext = adsm_host_alloc(grid_bytes);
    FILE *in = app_open(&run, "grid.bin", "rb");
    if (fread(a0, 1, grid_bytes, in) != grid_bytes) app_die("stencil: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    float *d_a0 = adsm_dev_alloc(grid_bytes), *d_anext = adsm_dev_alloc(grid_bytes);
    if (!d_a0 || !d_anext) app_die(adsm_last_error());
    adsm_copy_to_device(d_a0, a0, grid_bytes);
    adsm_memcpy(d_anext, d_a0, grid_bytes);
    for (int t = 0; t < s.steps; t++) {
        ADSM_CALL(stencil_jacobi, stencil_grid(s), d_anext, d_a0, s.nx, s.ny, s.nz, s.c0, s.c1);
        float *d_swap = d_a0;
        d_a0 = d_anext;
        d_anext = d_swap;
    }
    float *d_swap = d_a0;
    d_a0 = d_anext;
    d_anext = d_swap;
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(anext, d_anext, grid_bytes);
    adsm_dev_free(d_a0);
    adsm_dev_free(d_anext);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "grid.out", "wb");
    app_fwrite(anext, 1, grid_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, stencil_check(&run, anext));
    adsm_host_free(a0);
    adsm_host_free(anext);
    adsm_shutdown();
    return rc;
}
