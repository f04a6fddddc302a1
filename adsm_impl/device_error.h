/* adsm_impl/device_error.h -- the first device error since the last adsm_sync, shared by the
 * device backends (emu, cuda).
 *
 * Errors of asynchronous device work (a kernel that crashed, a launch the device refused, a
 * device that went away) surface where the program asks for them, at the next adsm_sync, as on a
 * GPU: the backend's threads record the first one, adsm_sync takes it. A lost device stays lost:
 * once the backend says so, every later sync reports ADSM_ERROR_DEVICE_LOST. Normal thread
 * context only (a pthread mutex guards it): the completion and engine threads and adsm_sync. */
#ifndef ADSM__DEVICE_ERROR_INCLUDED
#define ADSM__DEVICE_ERROR_INCLUDED

#include "common.h"
#include "os.h"

typedef struct adsm__device_error {
    pthread_mutex_t mutex;
    adsm_result code; /* ADSM_OK: nothing since the last take */
    char text[400];
} adsm__device_error;

ADSM__PRIVATE void adsm__device_error_init(adsm__device_error *e) {
    pthread_mutex_init(&e->mutex, NULL);
    e->code = ADSM_OK;
    e->text[0] = 0;
}

ADSM__PRIVATE void adsm__device_error_destroy(adsm__device_error *e) { pthread_mutex_destroy(&e->mutex); }

/* Keeps the first error; later ones until the next take are dropped. */
ADSM__PRIVATE void adsm__device_error_record(adsm__device_error *e, adsm_result code, const char *text) {
    pthread_mutex_lock(&e->mutex);
    if (e->code == ADSM_OK) {
        e->code = code;
        snprintf(e->text, sizeof e->text, "%.*s", (int)sizeof e->text - 1, text);
    }
    pthread_mutex_unlock(&e->mutex);
}

/* What adsm_sync reports: the recorded error (with its text as the calling thread's last error),
 * or ADSM_OK. It is forgotten, unless the device is lost: then every later take reports
 * ADSM_ERROR_DEVICE_LOST with `lost_text`. */
ADSM__PRIVATE adsm_result adsm__device_error_take(adsm__device_error *e, int lost, const char *lost_text) {
    pthread_mutex_lock(&e->mutex);
    adsm_result r = e->code;
    if (r != ADSM_OK) adsm__fail(r, "%s", e->text);
    if (lost) {
        e->code = ADSM_ERROR_DEVICE_LOST;
        if (r != ADSM_OK) snprintf(e->text, sizeof e->text, "%s", lost_text);
    } else {
        e->code = ADSM_OK;
    }
    pthread_mutex_unlock(&e->mutex);
    return r;
}

#endif /* ADSM__DEVICE_ERROR_INCLUDED */
