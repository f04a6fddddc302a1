/* bench/apps/spmv/adsm.c -- spmv on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/spmv/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "spmv", "adsm", argc, argv);
    if (run.gen) {
        spmv_generate(&run);
        return 0;
    }
    spmv_size s = spmv_size_of(&run);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    spmv_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    int header[4];
    FILE *in = app_open(&run, "matrix.jds", "rb");
    if (fread(header, sizeof *header, 4, in) != 4 || header[0] != s.dim) app_die("spmv: bad matrix header");
    size_t data_bytes = (size_t)header[1] * sizeof(float), index_bytes = (size_t)header[1] * sizeof(int),
           ptr_bytes = (size_t)header[2] * sizeof(int), perm_bytes = (size_t)s.dim * sizeof(int),
           nzcnt_bytes = (size_t)header[3] * sizeof(int), vec_bytes = (size_t)s.dim * sizeof(float);
    float *data = adsm_alloc(data_bytes), *x = adsm_alloc(vec_bytes), *ax = adsm_alloc(vec_bytes);
    int *index = adsm_alloc(index_bytes), *ptr = adsm_alloc(ptr_bytes), *perm = adsm_alloc(perm_bytes),
        *nzcnt = adsm_alloc(nzcnt_bytes);
    if (fread(data, 1, data_bytes, in) != data_bytes || fread(index, 1, index_bytes, in) != index_bytes ||
        fread(ptr, 1, ptr_bytes, in) != ptr_bytes || fread(perm, 1, perm_bytes, in) != perm_bytes ||
        fread(nzcnt, 1, nzcnt_bytes, in) != nzcnt_bytes)
        app_die("spmv: short read");
    fclose(in);
    in = app_open(&run, "x.bin", "rb");
    if (fread(x, 1, vec_bytes, in) != vec_bytes) app_die("spmv: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    for (int it = 0; it < s.iterations; it++)
        ADSM_CALL(spmv_jds, spmv_grid(s), ax, data, index, perm, x, nzcnt, ptr, s.dim);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "ax.out", "wb");
    app_fwrite(ax, 1, vec_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, spmv_check(&run, ax));
    adsm_free(data);
    adsm_free(x);
    adsm_free(ax);
    adsm_free(index);
    adsm_free(ptr);
    adsm_free(perm);
    adsm_free(nzcnt);
    adsm_shutdown();
    return rc;
}
