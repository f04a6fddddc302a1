/* adsm_impl/backend_cuda.h -- placeholder for the CUDA driver API backend.
 *
 * The backend table has its slot so that ADSM_BACKEND=cuda is a recognised choice; until the
 * driver backend lands, initialising it reports ADSM_ERROR_BACKEND_UNAVAILABLE and
 * ADSM_BACKEND=auto moves on to emu. Runs in normal thread context during initialisation. */
#ifndef ADSM__BACKEND_CUDA_INCLUDED
#define ADSM__BACKEND_CUDA_INCLUDED

ADSM__PRIVATE adsm_result adsm__cuda_init(adsm__runtime *rt, void **ctx) {
    (void)rt; (void)ctx;
    return adsm__fail(ADSM_ERROR_BACKEND_UNAVAILABLE, "cuda backend: not available in this build of adsm");
}

static const adsm__backend_vtbl adsm__backend_cuda = {"cuda", 1, 0, adsm__cuda_init, NULL, NULL, NULL, NULL, NULL, NULL,
                                                      NULL, NULL, NULL, NULL, NULL, NULL, NULL};

#endif /* ADSM__BACKEND_CUDA_INCLUDED */
