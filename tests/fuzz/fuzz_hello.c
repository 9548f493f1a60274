/*
 * fuzz_hello.c — the tcp mesh's handshake (transport/tcp.c) from a stranger or a hostile rank:
 * the hello a connecting rank answers a challenge with (magic, rank, job uuid, nonce, MAC), which
 * the accepting rank checks (tempo__tcp_hello_check), and the accepting rank's answer (magic,
 * rank, MAC), which the connecting rank checks (tempo__tcp_ack_ok).
 *
 * Input: a flag byte (bit 0: the connecting side; bit 1: a job key is in use, so MACs are
 * compared: without a key loaded they are all zeros, which the seeds send), this rank (a byte)
 * and the world size (a byte, 2..257), the job uuid (8 bytes), the challenge (32 bytes), then the
 * message: the hello; or for the connecting side the rank it connected to (a byte), this rank's
 * hello, then the answer (zeros past the input). What must hold: no crash or overrun; an accepted
 * hello has the magic and the job's uuid and comes from a higher rank in range; an accepted
 * answer has the magic and names the rank connected to; with a key, neither is accepted with a
 * MAC other than the right one (here: zeros).
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "core/auth.h"
#include "transport/tl_int.h"

/* The layouts of tcp.c's hello_t and mack_t, as this target reads them. */
#define MAGIC 0x544d5043u
#define HELLO_BYTES (16 + TEMPO__AUTH_NONCE + TEMPO__AUTH_MAC)
#define ACK_BYTES (8 + TEMPO__AUTH_MAC)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_no_key();
    return 0;
}

static int zeros(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return 0;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    uint8_t flags = fuzz_u8(&in);
    int connecting = flags & 1, auth = flags >> 1 & 1;
    int rank = fuzz_u8(&in), n = 2 + fuzz_u8(&in);
    uint64_t uuid;
    uint8_t chal[TEMPO__AUTH_NONCE];
    fuzz_take(&in, &uuid, 8);
    fuzz_take(&in, chal, sizeof(chal));
    uint32_t magic;
    int32_t r;
    if (!connecting) {
        uint8_t *h = malloc(HELLO_BYTES); /* exactly a hello: ASan sees reads past it */
        fuzz_take(&in, h, HELLO_BYTES);
        const char *bad = tempo__tcp_hello_check(h, chal, uuid, rank, n, auth);
        memcpy(&magic, h, 4);
        memcpy(&r, h + 4, 4);
        if (bad ? !bad[0]
                : magic != MAGIC || memcmp(h + 8, &uuid, 8) || r <= rank || r >= n ||
                      (auth && !zeros(h + HELLO_BYTES - TEMPO__AUTH_MAC, TEMPO__AUTH_MAC))) {
            abort();
        }
        free(h);
        return 0;
    }
    int p = fuzz_u8(&in);
    uint8_t *h = malloc(HELLO_BYTES), *ack = malloc(ACK_BYTES);
    fuzz_take(&in, h, HELLO_BYTES);
    fuzz_take(&in, ack, ACK_BYTES);
    memcpy(&magic, ack, 4);
    memcpy(&r, ack + 4, 4);
    if (tempo__tcp_ack_ok(ack, h, p, auth) &&
        (magic != MAGIC || r != p || (auth && !zeros(ack + 8, TEMPO__AUTH_MAC)))) {
        abort();
    }
    free(h);
    free(ack);
    return 0;
}

#ifdef FUZZ_SEEDS
static void fuzz_seeds(void)
{
    /* the accepting rank 1 of 4: rank 2's hello, with and without a key; a stranger's (another
     * uuid); the connecting rank 3's answer from rank 1, with and without a key */
    for (int k = 0; k < 5; k++) {
        uint8_t b[3 + 8 + TEMPO__AUTH_NONCE + 1 + HELLO_BYTES + ACK_BYTES];
        memset(b, 0, sizeof(b));
        uint64_t uuid = 0x1234abcd5678ef01ull, other = uuid ^ (k == 2);
        uint32_t magic = MAGIC;
        int32_t r = 2, p = 1;
        b[0] = (uint8_t)((k >= 3) | (k % 2) << 1);
        b[1] = k >= 3 ? 3 : 1;
        b[2] = 2;
        memcpy(b + 3, &uuid, 8);
        memset(b + 11, 0xa5, TEMPO__AUTH_NONCE);
        uint8_t *m = b + 11 + TEMPO__AUTH_NONCE;
        size_t len = 11 + TEMPO__AUTH_NONCE + HELLO_BYTES;
        if (k >= 3) {
            *m++ = 1;
            r = 3;
            len += 1 + ACK_BYTES;
        }
        memcpy(m, &magic, 4);
        memcpy(m + 4, &r, 4);
        memcpy(m + 8, &other, 8);
        memset(m + 16, 0x3c, TEMPO__AUTH_NONCE);
        if (k >= 3) {
            memcpy(m + HELLO_BYTES, &magic, 4);
            memcpy(m + HELLO_BYTES + 4, &p, 4);
        }
        fuzz_seed(b, len);
    }
}
#endif
