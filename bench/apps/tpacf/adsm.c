/* bench/apps/tpacf/adsm.c -- tpacf on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/tpacf/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "tpacf", "adsm", argc, argv);
    if (run.gen) {
        tpacf_generate(&run);
        return 0;
    }
    tpacf_size s = tpacf_size_of(&run);
    int nall = s.n * (s.sets + 1);
    size_t sph_bytes = 2 * (size_t)nall * sizeof(float), pts_bytes = 3 * (size_t)nall * sizeof(float);
    size_t binb_bytes = (TPACF_BINS + 1) * sizeof(float), hist_bytes = (2 * (size_t)s.sets + 1) * TPACF_BINS * 4;
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    tpacf_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    float *sph = malloc(sph_bytes), *pts = adsm_alloc(pts_bytes), *binb = adsm_alloc(binb_bytes);
    unsigned *hists = adsm_alloc(hist_bytes);
    FILE *in = app_open(&run, "data.bin", "rb");
    if (fread(sph, 1, sph_bytes / (s.sets + 1), in) != sph_bytes / (s.sets + 1)) app_die("tpacf: short read");
    fclose(in);
    in = app_open(&run, "random.bin", "rb");
    if (fread(sph + 2 * (size_t)s.n, 1, sph_bytes / (s.sets + 1) * s.sets, in) != sph_bytes / (s.sets + 1) * s.sets)
        app_die("tpacf: short read");
    fclose(in);

    app_phase(&run, APP_CPU);
    for (int i = 0; i < nall; i++) {
        double v[3];
        tpacf_unit(sph + 2 * (size_t)i, v);
        pts[i] = (float)v[0];
        pts[nall + i] = (float)v[1];
        pts[2 * (size_t)nall + i] = (float)v[2];
    }
    for (int k = 0; k <= TPACF_BINS; k++) binb[k] = (float)tpacf_boundary(k);

    app_phase(&run, APP_KERNEL);
    adsm_memset(hists, 0, hist_bytes);
    ADSM_CALL(tpacf_hist, tpacf_grid(s), hists, pts, binb, s.n, nall, 0, 0);
    for (int set = 1; set <= s.sets; set++) {
        ADSM_CALL(tpacf_hist, tpacf_grid(s), hists + set * TPACF_BINS, pts, binb, s.n, nall, set, set);
        ADSM_CALL(tpacf_hist, tpacf_grid(s), hists + (s.sets + set) * TPACF_BINS, pts, binb, s.n, nall, 0, set);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_CPU);
    unsigned result[3 * TPACF_BINS] = {0}; /* DD, DR, RR of each bin */
    for (int k = 0; k < TPACF_BINS; k++) {
        result[3 * k] = hists[k];
        for (int set = 1; set <= s.sets; set++) {
            result[3 * k + 1] += hists[(s.sets + set) * TPACF_BINS + k];
            result[3 * k + 2] += hists[set * TPACF_BINS + k];
        }
    }

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "tpacf.out", "w");
    for (int i = 0; i < 3 * TPACF_BINS; i++) fprintf(out, "%u\n", result[i]);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, tpacf_check(&run, result));
    free(sph);
    adsm_free(pts);
    adsm_free(binb);
    adsm_free(hists);
    adsm_shutdown();
    return rc;
}
