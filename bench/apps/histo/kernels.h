/* bench/apps/histo/kernels.h -- histo (Parboil): the 2D histogram of a large image with 8-bit
 * saturating bins (a bin holds min(count, 255)). The image (one histogram bin index per pixel) goes
 * to the device once; each of the iterations then, as Parboil does, resets the value range on the
 * CPU and sends it, finds the range of the values (prescan kernel), brings the range back to the
 * CPU (which passes it to the next kernels), clears the 32-bit counters with a device memset,
 * maps each pixel to its place in the range (intermediates kernel), counts (main kernel) and
 * saturates the counters into the 8-bit histogram (final kernel). The histogram comes back once,
 * after the last iteration. Parboil's sub-histograms and overflow buffers are folded into one array
 * of 32-bit counters.
 *
 * Shared by explicit.c and adsm.c: the kernels (single-source, atomics through adsm_atomic_*),
 * the sizes, the input generator, the reference and the check. Input: image.bin (width x
 * height uint32 bin indices). Reference: histo.ref (histo_width x histo_height bytes). Tolerance:
 * none; Parboil's compare-output for histo compares the two files byte for byte (cmp). */
#ifndef BENCH_APPS_HISTO_KERNELS_H
#define BENCH_APPS_HISTO_KERNELS_H

#include "bench/apps/common.h"

/* Each thread folds the pixels i, i + threads, ... into its own minimum and maximum, then merges
 * them into ranges[0] (minimum) and ranges[1] (maximum) atomically. */
ADSM_KERNEL_DEF(histo_prescan, (ADSM_INOUT(uint32_t, ranges), ADSM_IN(uint32_t, image), ADSM_VALUE(uint32_t, n)), g, {
    const size_t threads = (size_t)g.grid.x * g.block.x;
    ADSM_FOR_EACH_THREAD(g, i) {
        uint32_t lo = UINT32_MAX, hi = 0;
        for (size_t j = i; j < n; j += threads) {
            lo = image[j] < lo ? image[j] : lo;
            hi = image[j] > hi ? image[j] : hi;
        }
        adsm_atomic_min_u32(&ranges[0], lo);
        adsm_atomic_max_u32(&ranges[1], hi);
    }
});

/* Each pixel's offset from the start of the range. */
ADSM_KERNEL_DEF(histo_intermediates, (ADSM_OUT(uint32_t, mappings), ADSM_IN(uint32_t, image), ADSM_VALUE(uint32_t, n),
                                      ADSM_VALUE(uint32_t, lo)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) mappings[i] = image[i] - lo;
    }
});

/* Counts each pixel in its bin, lo + its offset (offsets past the range are dropped). */
ADSM_KERNEL_DEF(histo_main, (ADSM_INOUT(uint32_t, counts), ADSM_IN(uint32_t, mappings), ADSM_VALUE(uint32_t, n),
                             ADSM_VALUE(uint32_t, lo), ADSM_VALUE(uint32_t, hi)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n && mappings[i] <= hi - lo) adsm_atomic_add_u32(&counts[lo + mappings[i]], 1u);
    }
});

/* The 8-bit saturating histogram. */
ADSM_KERNEL_DEF(histo_final, (ADSM_OUT(uint8_t, histo), ADSM_IN(uint32_t, counts), ADSM_VALUE(uint32_t, bins)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < bins) histo[i] = (uint8_t)(counts[i] < 255 ? counts[i] : 255);
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void histo_load_kernels(void) {
    if (ADSM_PREPARE(histo_prescan) != ADSM_OK || ADSM_PREPARE(histo_intermediates) != ADSM_OK ||
        ADSM_PREPARE(histo_main) != ADSM_OK || ADSM_PREPARE(histo_final) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct histo_size {
    uint32_t width, height, histo_width, histo_height;
    int iterations;
} histo_size;

/* Quick: a 996 x 1040 image (the size of Parboil's default one) into a 4096 x 256 histogram, about
 * one input per bin as Parboil describes its data, 30 iterations. Full: an image four times that
 * (1992 x 2080) into a histogram four times that (4096 x 1024), 100 iterations. */
static inline histo_size histo_size_of(const app_run *r) {
    histo_size s = {996, 1040, 4096, 256, 30};
    if (r->full) s = (histo_size){1992, 2080, 4096, 1024, 100};
    return s;
}

static inline uint32_t histo_pixels(histo_size s) { return s.width * s.height; }
static inline uint32_t histo_bins(histo_size s) { return s.histo_width * s.histo_height; }
static inline adsm_grid histo_prescan_grid(void) { return adsm_grid_1d(64, 512); }
static inline adsm_grid histo_grid(uint32_t n) { return adsm_grid_1d((n + 255) / 256, 256); }

/* Values concentrated near the centre of the histogram, at a place and extent not known in
 * advance: 90% of the pixels fall in a broad 2D Gaussian, 10% in a narrow one (whose bins saturate). */
static inline void histo_generate(const app_run *r) {
    histo_size s = histo_size_of(r);
    uint32_t n = histo_pixels(s), bins = histo_bins(s);
    uint32_t *image = malloc((size_t)n * sizeof *image), *counts = calloc(bins, sizeof *counts);
    uint8_t *ref = malloc(bins);
    app_rng g = {0xa54ff53a5f1d36f1ull};
    for (uint32_t i = 0; i < n; i++) {
        double narrow = app_rng_unit(&g) < 0.1 ? 0.05 : 1.0;
        double radius = sqrt(-2.0 * log(1.0 - app_rng_unit(&g))), angle = 6.283185307179586 * app_rng_unit(&g);
        double y = 0.45 * s.histo_height + narrow * s.histo_height / 12.0 * radius * cos(angle);
        double x = 0.55 * s.histo_width + narrow * s.histo_width / 12.0 * radius * sin(angle);
        y = y < 0 ? 0 : y > s.histo_height - 1 ? s.histo_height - 1 : y;
        x = x < 0 ? 0 : x > s.histo_width - 1 ? s.histo_width - 1 : x;
        image[i] = (uint32_t)y * s.histo_width + (uint32_t)x;
        counts[image[i]]++;
    }
    for (uint32_t b = 0; b < bins; b++) ref[b] = (uint8_t)(counts[b] < 255 ? counts[b] : 255);
    app_write_file(r, "image.bin", image, (size_t)n * sizeof *image);
    app_write_file(r, "histo.ref", ref, bins);
    free(image);
    free(counts);
    free(ref);
}

static inline int histo_check(const app_run *r, const uint8_t *histo) {
    histo_size s = histo_size_of(r);
    uint32_t bins = histo_bins(s);
    uint8_t *ref = app_read_plain(r, "histo.ref", bins);
    size_t bad = 0;
    for (uint32_t b = 0; b < bins; b++) bad += histo[b] != ref[b];
    free(ref);
    if (bad) fprintf(stderr, "histo: %zu of %u bins differ from the reference\n", bad, bins);
    return bad == 0;
}

#endif /* BENCH_APPS_HISTO_KERNELS_H */
