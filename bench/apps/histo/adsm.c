/* bench/apps/histo/adsm.c -- histo on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/histo/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "histo", "adsm", argc, argv);
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
    uint32_t *image = adsm_alloc(image_bytes), *ranges = adsm_alloc(2 * sizeof(uint32_t));
    uint8_t *histo = adsm_alloc(bins);
    FILE *in = app_open(&run, "image.bin", "rb");
    if (fread(image, 1, image_bytes, in) != image_bytes) app_die("histo: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    uint32_t *mappings = adsm_alloc(image_bytes), *counts = adsm_alloc(counts_bytes);
    if (!mappings || !counts) app_die(adsm_last_error());
    for (int it = 0; it < s.iterations; it++) {
        ranges[0] = UINT32_MAX;
        ranges[1] = 0;
        ADSM_CALL(histo_prescan, histo_prescan_grid(), ranges, image, n);
        if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
        adsm_memset(counts, 0, counts_bytes);
        ADSM_CALL(histo_intermediates, histo_grid(n), mappings, image, n, ranges[0]);
        ADSM_CALL(histo_main, histo_grid(n), counts, mappings, n, ranges[0], ranges[1]);
        ADSM_CALL(histo_final, histo_grid(bins), histo, counts, bins);
    }
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());
    adsm_free(mappings);
    adsm_free(counts);

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "histo.out", "wb");
    app_fwrite(histo, 1, bins, out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, histo_check(&run, histo));
    adsm_free(image);
    adsm_free(ranges);
    adsm_free(histo);
    adsm_shutdown();
    return rc;
}
