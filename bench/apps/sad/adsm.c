/* bench/apps/sad/adsm.c -- sad on shared memory: explicit.c with its device buffers and copies
 * deleted. Plain fread/fwrite work on shared memory through ADSM_INTERPOSE_IO. */
#define ADSM_INTERPOSE_IO
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include "bench/apps/sad/kernels.h"

int main(int argc, char **argv) {
    app_run run;
    app_parse(&run, "sad", "adsm", argc, argv);
    if (run.gen) {
        sad_generate(&run);
        return 0;
    }
    sad_size s = sad_size_of(&run);
    int mbs = s.mbw * s.mbh;
    size_t frame_bytes = (size_t)mbs * 256 * sizeof(unsigned short), sad_bytes = sad_count(s) * sizeof(unsigned short);
    if (adsm_init(NULL) != ADSM_OK) app_die(adsm_last_error());
    sad_load_kernels();
    adsm_reset_stats();
    app_start(&run);

    app_phase(&run, APP_IO);
    unsigned short *ref = adsm_alloc(frame_bytes), *cur = adsm_alloc(frame_bytes);
    unsigned short *sads = adsm_alloc(sad_bytes);
    FILE *in = app_open(&run, "ref.bin", "rb");
    if (fread(ref, 1, frame_bytes, in) != frame_bytes) app_die("sad: short read");
    fclose(in);
    in = app_open(&run, "cur.bin", "rb");
    if (fread(cur, 1, frame_bytes, in) != frame_bytes) app_die("sad: short read");
    fclose(in);

    app_phase(&run, APP_KERNEL);
    adsm_memset(sads, 0, sad_bytes);
    ADSM_CALL(sad_4x4, sad_grid((size_t)mbs * 16 * SAD_POS), sads, cur, ref, s.mbw, s.mbh);
    ADSM_CALL(sad_8x8, sad_grid((size_t)mbs * SAD_POS), sads, mbs);
    ADSM_CALL(sad_16x16, sad_grid((size_t)mbs * SAD_POS), sads, mbs);
    if (adsm_sync() != ADSM_OK) app_die(adsm_last_error());

    app_phase(&run, APP_IO);
    FILE *out = app_open(&run, "sads.out", "wb");
    for (int k = 0; k < 6; k++)
        for (int t = 1; t <= 7; t++) app_fwrite(sads + sad_out_start(s, k, t), 2, sad_out_len(s, t), out);
    app_fclose(out);
    app_stop(&run);

    int rc = app_report(&run, sad_check(&run, sads));
    adsm_free(ref);
    adsm_free(cur);
    adsm_free(sads);
    adsm_shutdown();
    return rc;
}
