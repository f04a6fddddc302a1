/* bench/apps/sgemm/adsm.c -- sgemm on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/sgemm/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "sgemm", "adsm", argc, argv);
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
    float *a = adsm_alloc(a_bytes), *bt = adsm_alloc(bt_bytes), *c = adsm_alloc(c_bytes);
    FILE *in = app_open(&run, "a.bin", "rb");
    if (fread(a, 1, a_bytes, in) != a_bytes) app_die("sgemm: short read");
    fclose(in);
    in = app_open(&run, "bt.bin", "rb");
    if (fread(bt, 1, bt_bytes, in) != bt_bytes) app_die("sgemm: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    ADSM_CALL(sgemm_nt, sgemm_grid(s), c, a, bt, s.m, s.n, s.k, s.alpha, s.beta);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "c.out", "wb");
    app_fwrite(c, 1, c_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, sgemm_check(&run, c));
    adsm_free(a);
    adsm_free(bt);
    adsm_free(c);
    adsm_shutdown();
    return rc;
}
