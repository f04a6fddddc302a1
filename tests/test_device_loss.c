/* tests/test_device_loss.c -- the emulated device process dying (killed from outside) turns
 * later launches and syncs into ADSM_ERROR_DEVICE_LOST, while the program can still read its data
 * (Dirty and ReadOnly blocks on the host; Invalid ones as the device memory stands), free it, shut
 * down, and start again with a new device. A program that closes the device's descriptors behind
 * adsm's back gets the same, never a hang, and the files it opens at their numbers are left
 * alone. */
#define ADSM_IMPLEMENTATION
#include "adsm.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

ADSM_KERNEL(fill, ADSM_OUT(int, c), ADSM_VALUE(int, v), ADSM_VALUE(size_t, n));

void fill(adsm_grid g, int *c, int v, size_t n) {
    ADSM_FOR_EACH_THREAD(g, i) {
        if (i < n) c[i] = v + (int)i;
    }
}

static void init(adsm_protocol_kind protocol) {
    adsm_config cfg = {0};
    cfg.backend = ADSM_BACKEND_EMU;
    cfg.protocol = protocol;
    cfg.block_size = 4096;
    cr_assert_eq(adsm_init(&cfg), ADSM_OK, "%s", adsm_last_error());
}

/* White-box: the device process's pid. */
static void kill_device(void) {
    adsm__emu *e = (adsm__emu *)adsm__rt.be_ctx;
    cr_assert_eq(kill(e->child, SIGKILL), 0);
    for (int i = 0; i < 500 && !ADSM__LOAD(&e->lost); i++) usleep(10000); /* the completion thread notices */
    cr_assert(ADSM__LOAD(&e->lost), "the runtime did not notice the device process died");
}

static void scenario(adsm_protocol_kind protocol) {
    enum { N = 4096 };
    init(protocol);
    int *dirty = adsm_alloc(N * sizeof(int)), *clean = adsm_alloc(N * sizeof(int));
    int *result = adsm_alloc(N * sizeof(int));
    for (int i = 0; i < N; i++) clean[i] = 3 * i;
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), result, 100, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    for (int i = 0; i < N; i++) cr_assert_eq(clean[i], 3 * i); /* ReadOnly after the flush */
    for (int i = 0; i < N; i++) dirty[i] = 7 * i;                /* Dirty on the host */
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), result, 500, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error()); /* result is Invalid on the host now */
    kill_device();

    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(1, 64), result, 1, (size_t)64), ADSM_ERROR_DEVICE_LOST);
    cr_assert(strstr(adsm_last_error(), "device") != NULL, "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST);
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST, "a lost device stays lost");
    cr_assert_null(adsm_alloc(4096));
    cr_assert_eq(adsm_last_result(), ADSM_ERROR_DEVICE_LOST);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(dirty[i], 7 * i, "Dirty data readable");
        cr_assert_eq(clean[i], 3 * i, "ReadOnly data readable");
        cr_assert_eq(result[i], 500 + i, "the last completed kernel's results are readable");
    }
    dirty[5] = 1; /* still writable */
    cr_assert_eq(dirty[5], 1);
    cr_assert_eq(adsm_free(dirty), ADSM_OK);
    cr_assert_eq(adsm_free(clean), ADSM_OK);
    cr_assert_eq(adsm_free(result), ADSM_OK);
    adsm_shutdown();

    init(protocol); /* a new device */
    int *again = adsm_alloc(N * sizeof(int));
    cr_assert_not_null(again, "%s", adsm_last_error());
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), again, 9, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    cr_assert_eq(again[N - 1], 9 + N - 1);
    adsm_shutdown();
}

Test(device_loss, lazy) { scenario(ADSM_PROTOCOL_LAZY); }
Test(device_loss, rolling) { scenario(ADSM_PROTOCOL_ROLLING); }
Test(device_loss, batch) { scenario(ADSM_PROTOCOL_BATCH); }

/* ---- a program that closes the device's descriptors ----------------------------------------- */

/* What the program puts at the number of adsm's descriptor. */
enum { NOTHING, A_FILE, A_SOCKET };

/* A file of the program's at `fd` (a memfd holding "program"), or the first end of a socket pair
 * whose other end is *peer. */
static void take_number(int fd, int what, int *peer) {
    int mine = -1;
    if (what == A_FILE) {
        mine = memfd_create("program-file", 0);
        cr_assert_eq(write(mine, "program", 7), 7);
    }
    if (what == A_SOCKET) {
        int sv[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
        mine = sv[0];
        *peer = sv[1];
    }
    if (what == NOTHING) cr_assert_eq(close(fd), 0);
    else cr_assert_eq(dup2(mine, fd), fd);
    if (mine >= 0) close(mine);
}

/* The program's file or socket at fd is as it left it, and still open after adsm_shutdown. */
static void expect_untouched(int fd, int what, int peer) {
    if (what == A_FILE) {
        struct stat st;
        char text[8] = {0};
        cr_assert_eq(fstat(fd, &st), 0, "adsm closed the program's file");
        cr_assert_eq(st.st_size, 7, "adsm changed the program's file: %lld bytes", (long long)st.st_size);
        cr_assert_eq(pread(fd, text, 7, 0), 7);
        cr_assert_str_eq(text, "program");
    }
    if (what == A_SOCKET) {
        char byte;
        cr_assert_eq(recv(peer, &byte, 1, MSG_DONTWAIT), -1, "adsm sent to the program's socket");
        cr_assert_eq(errno, EAGAIN, "the program's socket: %s", strerror(errno));
    }
}

ParameterizedTestParameters(device_loss, a_closed_device_socket_is_a_lost_device) {
    static int what[] = {NOTHING, A_FILE, A_SOCKET};
    return cr_make_param_array(int, what, 3);
}

/* The socket to the device process: launches cannot reach it, so the device is lost (a sync
 * says so instead of waiting for ever); the program's data stays readable. */
ParameterizedTest(int *what, device_loss, a_closed_device_socket_is_a_lost_device, .timeout = 30) {
    enum { N = 4096 };
    init(ADSM_PROTOCOL_ROLLING);
    int *c = adsm_alloc(N * sizeof(int)), peer = -1;
    cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), c, 5, (size_t)N), ADSM_OK);
    cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
    int sock = ((adsm__emu *)adsm__rt.be_ctx)->sock.fd;
    take_number(sock, *what, &peer);
    adsm_result r = ADSM_CALL(fill, adsm_grid_1d(N / 64, 64), c, 7, (size_t)N);
    if (r == ADSM_OK) r = adsm_sync();
    cr_assert_eq(r, ADSM_ERROR_DEVICE_LOST, "%s", adsm_last_error());
    cr_assert(strstr(adsm_last_error(), "socket") || strstr(adsm_last_error(), "device"), "%s", adsm_last_error());
    cr_assert_eq(adsm_sync(), ADSM_ERROR_DEVICE_LOST, "a lost device stays lost");
    for (int i = 0; i < N; i++) cr_assert_eq(c[i], 5 + i, "the last completed kernel's results are readable");
    adsm_free(c);
    adsm_shutdown();
    expect_untouched(sock, *what, peer);
}

ParameterizedTestParameters(device_loss, a_closed_device_memory_descriptor_changes_nothing) {
    static int what[] = {NOTHING, A_FILE};
    return cr_make_param_array(int, what, 2);
}

/* The memfd behind device memory is only needed to back and free its pages (the mappings stay):
 * without it adsm goes on, the device memory right, and a file at its number is never punched. */
ParameterizedTest(int *what, device_loss, a_closed_device_memory_descriptor_changes_nothing, .timeout = 30) {
    enum { N = 1 << 20 };
    init(ADSM_PROTOCOL_LAZY);
    int devfd = ((adsm__emu *)adsm__rt.be_ctx)->devfd.fd, peer = -1;
    take_number(devfd, *what, &peer);
    for (int round = 0; round < 3; round++) { /* backed, freed (punched), backed again */
        int *c = adsm_alloc(N * sizeof(int));
        cr_assert_not_null(c, "%s", adsm_last_error());
        for (int i = 0; i < N; i += 1000) cr_assert_eq(c[i], 0, "round %d: a new object is not zero", round);
        for (int i = 0; i < N; i++) c[i] = i; /* copied into device memory at the call */
        cr_assert_eq(ADSM_CALL(fill, adsm_grid_1d(1, 64), c, -1, (size_t)64), ADSM_OK);
        cr_assert_eq(adsm_sync(), ADSM_OK, "%s", adsm_last_error());
        for (int i = 0; i < N; i += 997) cr_assert_eq(c[i], i < 64 ? i - 1 : i, "round %d: c[%d]", round, i);
        cr_assert_eq(adsm_free(c), ADSM_OK);
    }
    adsm_shutdown();
    expect_untouched(devfd, *what, peer);
}
