/*
 * fuzz_seal.c — sealed records (transport/seal.h, TEMPO_ENCRYPT=1) as the receiving end reads
 * them off a socket: a record's length, ciphertext and tag from the wire, whole, cut short, too
 * long, or not sealed at all; and the round trip of plaintext cut into writes of any size.
 *
 * Input: a flag byte. Bit 0 clear: the rest is what arrives on the socket (then its end): reads
 * through tempo__seal_read (lengths from the input) must end in 0, TEMPO_PIPE_EOF or -EBADMSG,
 * never deliver more bytes than arrived, and after -EBADMSG deliver nothing more. Bit 0 set: the
 * rest is plaintext, written through tempo__seal_writev in pieces (sizes from the input) and read
 * back through the other end: exactly the same bytes, in order. The keys are fixed (the seeds are
 * sealed with them, so that mutations start from valid records).
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "transport/seal.h"
#include "transport/stream.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static const uint8_t KEY_A[TEMPO__SEAL_KEY] = {0x11, 0x22, 0x33}, KEY_B[TEMPO__SEAL_KEY] = {0x44};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("TEMPO_DEBUG", "NONE", 1);
    return 0;
}

/* Read from rx until nothing more: bytes into out (cap), result of the last read in *last. */
static size_t drain(tempo__seal_t *rx, int fd, uint8_t *out, size_t cap, fuzz_in_t *sizes,
                    ssize_t *last)
{
    size_t got = 0;
    for (;;) {
        size_t want = 1 + fuzz_u8(sizes) * 257u;
        if (want > cap - got) {
            want = cap - got;
        }
        ssize_t r = want ? tempo__seal_read(rx, fd, out + got, want) : 0;
        *last = r;
        if (r <= 0) {
            return got;
        }
        got += (size_t)r;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    uint8_t flags = fuzz_u8(&in);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        return 0;
    }
    tempo__seal_t *a = tempo__seal_new(KEY_A, KEY_B), *b = tempo__seal_new(KEY_B, KEY_A);
    if (!a || !b) {
#if TEMPO_HAVE_CRYPTO
        abort();
#else
        close(sv[0]);
        close(sv[1]);
        return 0; /* (a build without libcrypto has no sealing: nothing to read) */
#endif
    }
    if (!(flags & 1)) {
        size_t n;
        const uint8_t *wire = fuzz_rest(&in, &n);
        uint8_t *out = malloc(n + 1);
        size_t off = 0, got = 0;
        ssize_t last = 0;
        fuzz_in_t sizes = {data, size, 0};
        while (off < n) {
            ssize_t w = write(sv[0], wire + off, n - off);
            if (w > 0) {
                off += (size_t)w;
            }
            got += drain(b, sv[1], out + got, n + 1 - got, &sizes, &last);
            if (last == -EBADMSG) {
                break;
            }
        }
        shutdown(sv[0], SHUT_WR);
        if (last != -EBADMSG) {
            got += drain(b, sv[1], out + got, n + 1 - got, &sizes, &last);
        }
        if (got > n || (last != 0 && last != TEMPO_PIPE_EOF && last != -EBADMSG)) {
            abort();
        }
        if (last == -EBADMSG) {
            ssize_t again = tempo__seal_read(b, sv[1], out, n + 1);
            if (again != -EBADMSG) {
                abort(); /* a failed record leaves the connection failed */
            }
        }
        free(out);
    } else {
        size_t n;
        const uint8_t *plain = fuzz_rest(&in, &n);
        uint8_t *out = malloc(n + 1);
        size_t off = 0, got = 0;
        ssize_t last = 0;
        fuzz_in_t sizes = {data, size, 0};
        int spins = 0;
        while ((off < n || tempo__seal_out_pending(a)) && spins < 100000) {
            size_t piece = 1 + (size_t)fuzz_u8(&sizes) * 97u;
            struct iovec v[2] = {{(void *)(plain + off), 0}, {(void *)(plain + off), 0}};
            size_t k = piece < n - off ? piece : n - off;
            v[0].iov_len = k / 2;
            v[1].iov_base = (void *)(plain + off + k / 2);
            v[1].iov_len = k - k / 2;
            ssize_t w = off < n ? tempo__seal_writev(a, sv[0], v, 2) : tempo__seal_flush(a, sv[0]);
            if (w < 0) {
                abort();
            }
            if (off < n) {
                off += (size_t)w;
            }
            got += drain(b, sv[1], out + got, n + 1 - got, &sizes, &last);
            if (last < 0) {
                abort();
            }
            spins++;
        }
        got += drain(b, sv[1], out + got, n + 1 - got, &sizes, &last);
        if (got != n || (n && memcmp(out, plain, n) != 0)) {
            abort();
        }
        free(out);
    }
    tempo__seal_free(a);
    tempo__seal_free(b);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

#ifdef FUZZ_SEEDS
/* Seeds: records sealed with KEY_A as they arrive (flag 0: one, three, one cut short, one with a
 * changed byte), and plaintext round trips (flag 1: short, and longer than a record). */
static void fuzz_seeds(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) {
        exit(1);
    }
    static uint8_t buf[4 * 1024 + 1];
    static const char *const texts[] = {"a frame header and its payload", "x", "0123456789abcdef"};
    for (int k = 0; k < 4; k++) {
        tempo__seal_t *a = tempo__seal_new(KEY_A, KEY_B); /* (each seed's records from nonce 0) */
        size_t len = 1;
        buf[0] = 0;
        int records = k == 1 ? 3 : 1;
        for (int r = 0; r < records; r++) {
            struct iovec v = {(void *)texts[r], strlen(texts[r])};
            if (tempo__seal_writev(a, sv[0], &v, 1) <= 0) {
                exit(1);
            }
            ssize_t got = read(sv[1], buf + len, sizeof(buf) - len);
            len += got > 0 ? (size_t)got : 0;
        }
        if (k == 2) {
            len -= 5; /* cut short */
        }
        if (k == 3) {
            buf[8] ^= 0x40; /* a byte of ciphertext changed */
        }
        fuzz_seed(buf, len);
        tempo__seal_free(a);
    }
    buf[0] = 1;
    memcpy(buf + 1, "plaintext in pieces", 19);
    fuzz_seed(buf, 20);
    for (size_t i = 1; i < 3000; i++) {
        buf[i] = (uint8_t)(i * 7);
    }
    fuzz_seed(buf, 3000);
}
#endif
