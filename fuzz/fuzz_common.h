/* fuzz/fuzz_common.h -- what every fuzz target shares: a CHECK that aborts with a message (so
 * libFuzzer records the input), and a reader that turns the input bytes into small integers,
 * yielding zeros once the input runs out. Normal context only. */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static inline uint8_t rd8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static inline uint16_t rd16(reader *r) {
    uint16_t lo = rd8(r); /* little-endian, in input order */
    return (uint16_t)(lo | (uint16_t)(rd8(r) << 8));
}

static inline uint32_t rd32(reader *r) {
    uint32_t lo = rd16(r);
    return lo | (uint32_t)rd16(r) << 16;
}

#endif
