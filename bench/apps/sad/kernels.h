/* bench/apps/sad/kernels.h -- sad (Parboil): the sums of absolute differences of H.264 motion
 * estimation. For every 16x16 macroblock of the current frame and every search position within
 * +-16 pixels in the reference frame (33 x 33 positions, edges clamped), a first kernel computes
 * the SADs of the macroblock's sixteen 4x4 blocks; a second one adds them up into the 8x4, 4x8 and
 * 8x8 blocks, and a third adds those into the 16x8, 8x16 and 16x16 blocks. All 41 SAD vectors of
 * every macroblock live in one array that stays on the device from the first kernel to the last
 * and then comes back whole.
 *
 * Shared by explicit.c and adsm.c: the kernels (single-source: one body each), the sizes, the input
 * generator, the reference and the check. Inputs: ref.bin and cur.bin (width x height 16-bit
 * pixels). Output: sads.out, as Parboil's: the SADs of six rows of macroblocks (the top two, the
 * middle two and the bottom two), here for each row and block type the row's vectors (padded to
 * SAD_POS_PADDED) as they lie in memory. Reference: sads.ref (same layout). Tolerance: exact, as
 * Parboil's sad check (integer SADs). */
#ifndef BENCH_APPS_SAD_KERNELS_H
#define BENCH_APPS_SAD_KERNELS_H

#include "bench/apps/common.h"

#define SAD_RANGE 16
#define SAD_POS 1089        /* (2 * SAD_RANGE + 1)^2 search positions */
#define SAD_POS_PADDED 1096 /* one SAD vector, padded to 16 bytes */

/* Block types 1..7 (16x16, 16x8, 8x16, 8x8, 8x4, 4x8, 4x4): vectors per macroblock, and where each
 * type's vectors start, in units of SAD_POS_PADDED * macroblocks. */
static const int sad_type_count[8] = {0, 1, 2, 2, 4, 8, 8, 16};
static const int sad_type_start[8] = {0, 0, 1, 3, 5, 9, 17, 25};

ADSM_KERNEL_DEF(sad_4x4, (ADSM_OUT(unsigned short, sads), ADSM_IN(unsigned short, cur), ADSM_IN(unsigned short, ref),
                          ADSM_VALUE(int, mbw), ADSM_VALUE(int, mbh)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        size_t mbs = (size_t)mbw * (size_t)mbh;
        if (i >= mbs * 16 * SAD_POS) continue;
        int pos = (int)(i % SAD_POS), blk = (int)(i / SAD_POS % 16), mb = (int)(i / SAD_POS / 16);
        int w = mbw * 16, h = mbh * 16;
        int x0 = mb % mbw * 16 + blk % 4 * 4, y0 = mb / mbw * 16 + blk / 4 * 4;
        int dx = pos % 33 - SAD_RANGE, dy = pos / 33 - SAD_RANGE;
        unsigned sad = 0;
        for (int y = 0; y < 4; y++) {
            int ry = y0 + y + dy < 0 ? 0 : y0 + y + dy >= h ? h - 1 : y0 + y + dy;
            for (int x = 0; x < 4; x++) {
                int rx = x0 + x + dx < 0 ? 0 : x0 + x + dx >= w ? w - 1 : x0 + x + dx;
                int d = (int)cur[(size_t)(y0 + y) * w + x0 + x] - (int)ref[(size_t)ry * w + rx];
                sad += (unsigned)(d < 0 ? -d : d);
            }
        }
        sads[(25 * mbs + (size_t)mb * 16 + blk) * SAD_POS_PADDED + pos] = (unsigned short)sad;
    }
});

/* 4x8 (type 6: vertical pairs of 4x4), 8x4 (type 5: horizontal pairs) and 8x8 (type 4: vertical
 * pairs of 8x4) from the 4x4 SADs; one thread per macroblock and search position. */
ADSM_KERNEL_DEF(sad_8x8, (ADSM_INOUT(unsigned short, sads), ADSM_VALUE(int, mbs)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)mbs * SAD_POS) continue;
        size_t pos = i % SAD_POS, mb = i / SAD_POS, n = (size_t)mbs;
        const unsigned short *s4 = sads + (25 * n + mb * 16) * SAD_POS_PADDED + pos;
        unsigned short *s48 = sads + (17 * n + mb * 8) * SAD_POS_PADDED + pos;
        unsigned short *s84 = sads + (9 * n + mb * 8) * SAD_POS_PADDED + pos;
        unsigned short *s8 = sads + (5 * n + mb * 4) * SAD_POS_PADDED + pos;
        for (int b = 0; b < 8; b++) {
            int r = b / 4, c = b % 4; /* 4x8: 2 rows of 4 */
            s48[b * SAD_POS_PADDED] =
                (unsigned short)(s4[(8 * r + c) * SAD_POS_PADDED] + s4[(8 * r + c + 4) * SAD_POS_PADDED]);
            r = b / 2, c = b % 2; /* 8x4: 4 rows of 2 */
            s84[b * SAD_POS_PADDED] =
                (unsigned short)(s4[(4 * r + 2 * c) * SAD_POS_PADDED] + s4[(4 * r + 2 * c + 1) * SAD_POS_PADDED]);
        }
        for (int b = 0; b < 4; b++) /* 8x8: 2 rows of 2, from the 8x4 rows 2r and 2r + 1 */
            s8[b * SAD_POS_PADDED] = (unsigned short)(s84[(4 * (b / 2) + b % 2) * SAD_POS_PADDED] +
                                                      s84[(4 * (b / 2) + b % 2 + 2) * SAD_POS_PADDED]);
    }
});

/* 8x16 (type 3: vertical pairs of 8x8), 16x8 (type 2: horizontal pairs) and 16x16 (type 1) from the
 * 8x8 SADs; one thread per macroblock and search position. */
ADSM_KERNEL_DEF(sad_16x16, (ADSM_INOUT(unsigned short, sads), ADSM_VALUE(int, mbs)), g, {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i >= (size_t)mbs * SAD_POS) continue;
        size_t pos = i % SAD_POS, mb = i / SAD_POS, n = (size_t)mbs;
        const unsigned short *s8 = sads + (5 * n + mb * 4) * SAD_POS_PADDED + pos;
        unsigned short *s816 = sads + (3 * n + mb * 2) * SAD_POS_PADDED + pos;
        unsigned short *s168 = sads + (1 * n + mb * 2) * SAD_POS_PADDED + pos;
        unsigned short *s16 = sads + mb * SAD_POS_PADDED + pos;
        for (int b = 0; b < 2; b++) {
            s816[b * SAD_POS_PADDED] = (unsigned short)(s8[b * SAD_POS_PADDED] + s8[(b + 2) * SAD_POS_PADDED]);
            s168[b * SAD_POS_PADDED] = (unsigned short)(s8[2 * b * SAD_POS_PADDED] + s8[(2 * b + 1) * SAD_POS_PADDED]);
        }
        s16[0] = (unsigned short)(s168[0] + s168[SAD_POS_PADDED]);
    }
});

/* Compiles the single-source kernels now on cuda (NVRTC), not inside the first timed call. */
static inline void sad_load_kernels(void) {
    if (ADSM_PREPARE(sad_4x4) != ADSM_OK ||
        ADSM_PREPARE(sad_8x8) != ADSM_OK ||
        ADSM_PREPARE(sad_16x16) != ADSM_OK)
        app_die(adsm_last_error());
}

typedef struct sad_size {
    int mbw, mbh; /* frame size in 16x16 macroblocks */
} sad_size;

/* Quick: 4CIF (704 x 576); --full: 1920 x 1072, as Parboil's large frames. */
static inline sad_size sad_size_of(const app_run *r) {
    sad_size s = {44, 36};
    if (r->full) s = (sad_size){120, 67};
    return s;
}

static inline size_t sad_count(sad_size s) { return 41 * (size_t)SAD_POS_PADDED * (size_t)s.mbw * (size_t)s.mbh; }

static inline adsm_grid sad_grid(size_t threads) { return adsm_grid_1d((uint32_t)((threads + 255) / 256), 256); }

/* The six macroblock rows the output holds, as Parboil's. */
static inline int sad_out_row(sad_size s, int k) {
    const int rows[6] = {0, 1, s.mbh / 2 - 1, s.mbh / 2, s.mbh - 2, s.mbh - 1};
    return rows[k];
}

/* Where row k's vectors of block type t lie in the SAD array, and how many values they hold. */
static inline size_t sad_out_start(sad_size s, int k, int t) {
    size_t mbs = (size_t)s.mbw * s.mbh;
    return ((size_t)sad_type_start[t] * mbs + (size_t)sad_out_row(s, k) * s.mbw * sad_type_count[t]) * SAD_POS_PADDED;
}

static inline size_t sad_out_len(sad_size s, int t) { return (size_t)s.mbw * sad_type_count[t] * SAD_POS_PADDED; }

/* A textured reference frame (8-bit values in 16-bit pixels) and a current frame that is the
 * reference moved by a few pixels, with noise; the reference SADs of the six output rows by the
 * direct definition (every block's pixels summed). */
static inline void sad_generate(const app_run *r) {
    sad_size s = sad_size_of(r);
    int w = s.mbw * 16, h = s.mbh * 16;
    size_t npix = (size_t)w * h, mbs = (size_t)s.mbw * s.mbh;
    unsigned short *ref = malloc(npix * sizeof *ref), *cur = malloc(npix * sizeof *cur);
    unsigned short *all = calloc(sad_count(s), sizeof *all);
    app_rng g = {0x2545f4914f6cdd1dull};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            ref[(size_t)y * w + x] = (unsigned short)(128 + 60 * sin(x * 0.11 + y * 0.05) * cos(y * 0.13 - x * 0.02) +
                                                      app_rng_unit(&g) * 40 - 20);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx = x + 3 < w ? x + 3 : w - 1, sy = y - 2 >= 0 ? y - 2 : 0;
            int v = (int)ref[(size_t)sy * w + sx] + (int)(app_rng_unit(&g) * 16) - 8;
            cur[(size_t)y * w + x] = (unsigned short)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    for (int k = 0; k < 6; k++) /* only the macroblocks of the six output rows */
        for (size_t mb = (size_t)sad_out_row(s, k) * s.mbw; mb < (size_t)(sad_out_row(s, k) + 1) * s.mbw; mb++)
            for (int pos = 0; pos < SAD_POS; pos++) {
                int dx = pos % 33 - SAD_RANGE, dy = pos / 33 - SAD_RANGE;
                unsigned px[16][16]; /* |cur - ref| of each pixel of the macroblock at this position */
                for (int y = 0; y < 16; y++)
                    for (int x = 0; x < 16; x++) {
                        int cx = (int)(mb % s.mbw) * 16 + x, cy = (int)(mb / s.mbw) * 16 + y;
                        int rx = cx + dx < 0 ? 0 : cx + dx >= w ? w - 1 : cx + dx;
                        int ry = cy + dy < 0 ? 0 : cy + dy >= h ? h - 1 : cy + dy;
                        px[y][x] = (unsigned)abs((int)cur[(size_t)cy * w + cx] - (int)ref[(size_t)ry * w + rx]);
                    }
                /* Every block type: blocks of bw x bh pixels, row by row. */
                const int bw[8] = {0, 16, 16, 8, 8, 8, 4, 4}, bh[8] = {0, 16, 8, 16, 8, 4, 8, 4};
                for (int t = 1; t <= 7; t++)
                    for (int b = 0; b < sad_type_count[t]; b++) {
                        int x0 = b % (16 / bw[t]) * bw[t], y0 = b / (16 / bw[t]) * bh[t];
                        unsigned sum = 0;
                        for (int y = 0; y < bh[t]; y++)
                            for (int x = 0; x < bw[t]; x++) sum += px[y0 + y][x0 + x];
                        all[((size_t)sad_type_start[t] * mbs + mb * sad_type_count[t] + b) * SAD_POS_PADDED + pos] =
                            (unsigned short)sum;
                    }
            }
    FILE *f = app_open(r, "sads.ref", "wb");
    for (int k = 0; k < 6; k++)
        for (int t = 1; t <= 7; t++)
            if (fwrite(all + sad_out_start(s, k, t), sizeof *all, sad_out_len(s, t), f) != sad_out_len(s, t))
                app_die("writing a data file failed");
    if (fclose(f) != 0) app_die("writing a data file failed");
    app_write_file(r, "ref.bin", ref, npix * sizeof *ref);
    app_write_file(r, "cur.bin", cur, npix * sizeof *cur);
    free(ref);
    free(cur);
    free(all);
}

/* Compares the six output rows of every block type with the reference, exactly. */
static inline int sad_check(const app_run *r, const unsigned short *sads) {
    sad_size s = sad_size_of(r);
    size_t total = 0, bad = 0;
    for (int t = 1; t <= 7; t++) total += 6 * sad_out_len(s, t);
    unsigned short *ref = app_read_plain(r, "sads.ref", total * sizeof *ref), *want = ref;
    for (int k = 0; k < 6; k++)
        for (int t = 1; t <= 7; t++) {
            const unsigned short *got = sads + sad_out_start(s, k, t);
            for (size_t j = 0; j < sad_out_len(s, t); j++) bad += got[j] != want[j];
            want += sad_out_len(s, t);
        }
    free(ref);
    if (bad) fprintf(stderr, "sad: %zu of %zu SADs differ from the reference\n", bad, total);
    return bad == 0;
}

#endif /* BENCH_APPS_SAD_KERNELS_H */
