/* bench/apps/sgemm/explicit.c -- sgemm with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/sgemm/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "sgemm", "explicit", argc, argv);
    if (run.gen) {
        sgemm_generate(&run);
        return 0;
    }
    sgemm_size s = sgemm_size_of(&run);
    size_t a_bytes = (size_t)s.m * s.k * sizeof(float), bt_bytes = (size_t)s.n * s.k * sizeof(float),
           c_bytes = (size_t)s.m * s.n * sizeof(float);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    sgemm_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    float *a = adsm_host_alloc(a_bytes), *bt = adsm_host_alloc(bt_bytes), *c = adsm_host_alloc(c_bytes);
    FILE *in = app_open(&run, "a.bin", "rb");
    if (fread(a, 1, a_bytes, in) != a_bytes) app_die("sgemm: short read");
    fclose(in);
    in = app_open(&run, "bt.bin", "rb");
    if (fread(bt, 1, bt_bytes, in) != bt_bytes) app_die("sgemm: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    float *d_a = adsm_dev_alloc(a_bytes), *d_bt = adsm_dev_alloc(bt_bytes), *d_c = adsm_dev_alloc(c_bytes);
    if (!d_a || !d_bt || !d_c) app_die(adsm_last_error());
    adsm_copy_to_device(d_a, a, a_bytes);
    adsm_copy_to_device(d_bt, bt, bt_bytes);
    ADSM_CALL(sgemm_nt, sgemm_grid(s), d_c, d_a, d_bt, s.m, s.n, s.k, s.alpha, s.beta);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(c, d_c, c_bytes);
    adsm_dev_free(d_a);
    adsm_dev_free(d_bt);
    adsm_dev_free(d_c);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "c.out", "wb");
    app_fwrite(c, 1, c_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, sgemm_check(&run, c));
    adsm_host_free(a);
    adsm_host_free(bt);
    adsm_host_free(c);
    adsm_shutdown();
    return rc;
}
