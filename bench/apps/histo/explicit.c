/* bench/apps/histo/explicit.c -- histo with device buffers and copies by hand (the original's shape). */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/histo/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "histo", "explicit", argc, argv);
    if (run.gen) {
        histo_generate(&run);
        return 0;
    }
    histo_size s = histo_size_of(&run);
    uint32_t n = histo_pixels(s), bins = histo_bins(s);
    size_t image_bytes = (size_t)n * sizeof(uint32_t), counts_bytes = (size_t)bins * sizeof(uint32_t);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    histo_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    uint32_t *image = adsm_host_alloc(image_bytes), *ranges = adsm_host_alloc(2 * sizeof(uint32_t));
    uint8_t *histo = adsm_host_alloc(bins);
    FILE *in = app_open(&run, "image.bin", "rb");
    if (fread(image, 1, image_bytes, in) != image_bytes) app_die("histo: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    uint32_t *d_image = adsm_dev_alloc(image_bytes), *d_ranges = adsm_dev_alloc(2 * sizeof(uint32_t));
    uint32_t *d_mappings = adsm_dev_alloc(image_bytes), *d_counts = adsm_dev_alloc(counts_bytes);
    uint8_t *d_histo = adsm_dev_alloc(bins);
    if (!d_image || !d_ranges || !d_mappings || !d_counts || !d_histo) app_die(adsm_last_error());
    adsm_copy_to_device(d_image, image, image_bytes);
    for (int it = 0; it < s.iterations; it++) {
        ranges[0] = UINT32_MAX;
        ranges[1] = 0;
        adsm_copy_to_device(d_ranges, ranges, 2 * sizeof(uint32_t));
        ADSM_CALL(histo_prescan, histo_prescan_grid(), d_ranges, d_image, n);
        if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
        adsm_copy_from_device(ranges, d_ranges, 2 * sizeof(uint32_t));
        adsm_memset(d_counts, 0, counts_bytes);
        ADSM_CALL(histo_intermediates, histo_grid(n), d_mappings, d_image, n, ranges[0]);
        ADSM_CALL(histo_main, histo_grid(n), d_counts, d_mappings, n, ranges[0], ranges[1]);
        ADSM_CALL(histo_final, histo_grid(bins), d_histo, d_counts, bins);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_copy_from_device(histo, d_histo, bins);
    adsm_dev_free(d_image);
    adsm_dev_free(d_ranges);
    adsm_dev_free(d_mappings);
    adsm_dev_free(d_counts);
    adsm_dev_free(d_histo);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "histo.out", "wb");
    app_fwrite(histo, 1, bins, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, histo_check(&run, histo));
    adsm_host_free(image);
    adsm_host_free(ranges);
    adsm_host_free(histo);
    adsm_shutdown();
    return rc;
}
