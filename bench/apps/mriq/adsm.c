/* bench/apps/mriq/adsm.c -- mri-q on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/mriq/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "mri-q", "adsm", argc, argv);
    if (run.gen) {
        mriq_generate(&run);
        return 0;
    }
    mriq_size s = mriq_size_of(&run);
    size_t kbytes = (size_t)s.numk * sizeof(float), xbytes = (size_t)s.numx * sizeof(float);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    mriq_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    float *k = adsm_alloc(3 * kbytes), *phi = adsm_alloc(2 * kbytes), *vox = adsm_alloc(3 * xbytes);
    float *phimag = adsm_alloc(kbytes), *kvals = adsm_alloc(4 * kbytes), *q = adsm_alloc(2 * xbytes);
    FILE *in = app_open(&run, "input.bin", "rb");
    if (fread(k, 1, 3 * kbytes, in) != 3 * kbytes || fread(phi, 1, 2 * kbytes, in) != 2 * kbytes ||
        fread(vox, 1, 3 * xbytes, in) != 3 * xbytes)
        app_die("mri-q: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    ADSM_CALL(mriq_phimag, mriq_grid(s.numk), phimag, phi, phi + s.numk, s.numk);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_CPU);
    for (int j = 0; j < s.numk; j++) {
        kvals[4 * j] = k[j];
        kvals[4 * j + 1] = k[s.numk + j];
        kvals[4 * j + 2] = k[2 * s.numk + j];
        kvals[4 * j + 3] = phimag[j];
    }

    app_phase(&run, APP_KERNEL);
    adsm_memset(q, 0, 2 * xbytes);
    for (int first = 0; first < s.numk; first += s.chunk) {
        int count = s.numk - first < s.chunk ? s.numk - first : s.chunk;
        ADSM_CALL(mriq_q, mriq_grid(s.numx), q, q + s.numx, vox, vox + s.numx, vox + 2 * (size_t)s.numx,
                  kvals + 4 * (size_t)first, count, s.numx);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "q.out", "wb");
    app_fwrite(q, 1, 2 * xbytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, mriq_check(&run, q, q + s.numx));
    adsm_free(k);
    adsm_free(phi);
    adsm_free(vox);
    adsm_free(phimag);
    adsm_free(kvals);
    adsm_free(q);
    adsm_shutdown();
    return rc;
}
