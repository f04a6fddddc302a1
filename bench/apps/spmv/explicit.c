/* bench/apps/spmv/explicit.c -- spmv with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/spmv/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "spmv", "explicit", argc, argv);
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
    float *data = adsm_host_alloc(data_bytes), *x = adsm_host_alloc(vec_bytes), *ax = adsm_host_alloc(vec_bytes);
    int *index = adsm_host_alloc(index_bytes), *ptr = adsm_host_alloc(ptr_bytes), *perm = adsm_host_alloc(perm_bytes),
        *nzcnt = adsm_host_alloc(nzcnt_bytes);
    if (fread(data, 1, data_bytes, in) != data_bytes || fread(index, 1, index_bytes, in) != index_bytes ||
        fread(ptr, 1, ptr_bytes, in) != ptr_bytes || fread(perm, 1, perm_bytes, in) != perm_bytes ||
        fread(nzcnt, 1, nzcnt_bytes, in) != nzcnt_bytes)
        app_die("spmv: short read");
    fclose(in);
    in = app_open(&run, "x.bin", "rb");
    if (fread(x, 1, vec_bytes, in) != vec_bytes) app_die("spmv: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    float *d_data = adsm_dev_alloc(data_bytes), *d_x = adsm_dev_alloc(vec_bytes), *d_ax = adsm_dev_alloc(vec_bytes);
    int *d_index = adsm_dev_alloc(index_bytes), *d_ptr = adsm_dev_alloc(ptr_bytes), *d_perm = adsm_dev_alloc(perm_bytes),
        *d_nzcnt = adsm_dev_alloc(nzcnt_bytes);
    if (!d_data || !d_x || !d_ax || !d_index || !d_ptr || !d_perm || !d_nzcnt) app_die(adsm_last_error());
    adsm_copy_to_device(d_data, data, data_bytes);
    adsm_copy_to_device(d_index, index, index_bytes);
    adsm_copy_to_device(d_ptr, ptr, ptr_bytes);
    adsm_copy_to_device(d_perm, perm, perm_bytes);
    adsm_copy_to_device(d_nzcnt, nzcnt, nzcnt_bytes);
    adsm_copy_to_device(d_x, x, vec_bytes);
    for (int it = 0; it < s.iterations; it++)
        ADSM_CALL(spmv_jds, spmv_grid(s), d_ax, d_data, d_index, d_perm, d_x, d_nzcnt, d_ptr, s.dim);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(ax, d_ax, vec_bytes);
    adsm_dev_free(d_data);
    adsm_dev_free(d_x);
    adsm_dev_free(d_ax);
    adsm_dev_free(d_index);
    adsm_dev_free(d_ptr);
    adsm_dev_free(d_perm);
    adsm_dev_free(d_nzcnt);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "ax.out", "wb");
    app_fwrite(ax, 1, vec_bytes, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, spmv_check(&run, ax));
    adsm_host_free(data);
    adsm_host_free(x);
    adsm_host_free(ax);
    adsm_host_free(index);
    adsm_host_free(ptr);
    adsm_host_free(perm);
    adsm_host_free(nzcnt);
    adsm_shutdown();
    return rc;
}
