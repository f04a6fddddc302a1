/* bench/apps/mriq/explicit.c -- mri-q with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/mriq/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "mri-q", "explicit", argc, argv);
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
    float *k = adsm_host_alloc(3 * kbytes), *phi = adsm_host_alloc(2 * kbytes), *vox = adsm_host_alloc(3 * xbytes);
    float *phimag = adsm_host_alloc(kbytes), *kvals = adsm_host_alloc(4 * kbytes), *q = adsm_host_alloc(2 * xbytes);
    FILE *in = app_open(&run, "input.bin", "rb");
    if (fread(k, 1, 3 * kbytes, in) != 3 * kbytes || fread(phi, 1, 2 * kbytes, in) != 2 * kbytes ||
        fread(vox, 1, 3 * xbytes, in) != 3 * xbytes)
        app_die("mri-q: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    float *d_phi = adsm_dev_alloc(2 * kbytes), *d_phimag = adsm_dev_alloc(kbytes);
    if (!d_phi || !d_phimag) app_die(adsm_last_error());
    adsm_copy_to_device(d_phi, phi, 2 * kbytes);
    ADSM_CALL(mriq_phimag, mriq_grid(s.numk), d_phimag, d_phi, d_phi + s.numk, s.numk);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(phimag, d_phimag, kbytes);
    adsm_dev_free(d_phi);
    adsm_dev_free(d_phimag);

    app_phase(&run, APP_CPU);
    for (int j = 0; j < s.numk; j++) {
        kvals[4 * j] = k[j];
        kvals[4 * j + 1] = k[s.numk + j];
        kvals[4 * j + 2] = k[2 * s.numk + j];
        kvals[4 * j + 3] = phimag[j];
    }

    app_phase(&run, APP_KERNEL);
    float *d_vox = adsm_dev_alloc(3 * xbytes), *d_q = adsm_dev_alloc(2 * xbytes);
    float *d_kvals = adsm_dev_alloc((size_t)s.chunk * 4 * sizeof(float));
    if (!d_vox || !d_q || !d_kvals) app_die(adsm_last_error());
    adsm_copy_to_device(d_vox, vox, 3 * xbytes);
    adsm_memset(d_q, 0, 2 * xbytes);
    for (int first = 0; first < s.numk; first += s.chunk) {
        int count = s.numk - first < s.chunk ? s.numk - first : s.chunk;
        adsm_copy_to_device(d_kvals, kvals + 4 * (size_t)first, (size_t)count * 4 * sizeof(float));
        ADSM_CALL(mriq_q, mriq_grid(s.numx), d_q, d_q + s.numx, d_vox, d_vox + s.numx, d_vox + 2 * (size_t)s.numx,
                  d_kvals, count, s.numx);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(q, d_q, 2 * xbytes);
    adsm_dev_free(d_vox);
    adsm_dev_free(d_q);
    adsm_dev_free(d_kvals);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "q.out", "wb");
    app_fwrite(q, 1, 2 * xbytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, mriq_check(&run, q, q + s.numx));
    adsm_host_free(k);
    adsm_host_free(phi);
    adsm_host_free(vox);
    adsm_host_free(phimag);
    adsm_host_free(kvals);
    adsm_host_free(q);
    adsm_shutdown();
    return rc;
}
