/* fuzz/repro/rolling_size_1.c -- minimal reproducer of a livelock found by fuzz/fuzz_protocol.c
 * (rolling, ADSM_ROLLING_SIZE=1, which adsm accepts).
 *
 * One CPU instruction that writes across a block boundary (an unaligned vector store in memcpy)
 * needs both blocks Dirty at once. With a rolling size of 1 the fault on the second block makes it
 * Dirty and eagerly evicts the first (now ReadOnly); the store is retried, faults on the first,
 * which evicts the second, and so on forever: the program hangs at 100% CPU inside the SIGSEGV
 * handler. Any rolling size >= 2 lets both blocks stay Dirty. The adaptive size hits it too:
 * ADSM_ROLLING_STEP=1 (rolling size 0) with one live object gives a limit of 1 and hangs the same
 * way (checked by replacing `cfg.rolling_size = 1` with `cfg.rolling_step = 1` below). Fix idea: never keep fewer than 2
 * dirty units (clamp the limit, or reject ADSM_ROLLING_SIZE=1 in config.h), or do not evict the
 * unit made Dirty by the previous fault of the same thread.
 *
 *   cc -std=c11 -O1 -I. fuzz/repro/rolling_size_1.c -o /tmp/rolling_size_1 -pthread -ldl
 *   timeout 10 /tmp/rolling_size_1; echo $?     # 124: hung (stats printed by the watchdog)
 */
#define ADSM_IMPLEMENTATION
#include "adsm.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *watchdog(void *arg) {
    (void)arg;
    sleep(3);
    adsm_stats st;
    adsm_get_stats(&st);
    fprintf(stderr, "still in the copy after 3 s: %llu write faults, %llu evictions\n",
            (unsigned long long)st.write_faults, (unsigned long long)st.evictions);
    return NULL;
}

int main(void) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = ADSM_PROTOCOL_ROLLING;
    cfg.block_size = 4096;
    cfg.rolling_size = 1;
    if (adsm_init(&cfg) != ADSM_OK) return 2;
    unsigned char *a = adsm_alloc(2 * 4096);
    static unsigned char src[64];
    memset(src, 1, sizeof src);
    pthread_t t;
    pthread_create(&t, NULL, watchdog, NULL);
    /* 32 bytes ending 16 bytes into the second block: one unaligned 32-byte store with AVX */
    volatile size_t n = 32;
    memcpy(a + 4096 - 16, src, n);
    printf("copy finished: a[4095] = %u, a[4096] = %u\n", a[4095], a[4096]);
    return 0;
}
