/*
 * fuzz_bootstrap.c — the rendezvous's messages (core/bootstrap.c) from a hostile peer.
 *
 * Input: a mode byte, then
 *   even: rank 0's side: auth (1 byte), size n (2..9), blob length (1..512), which ranks joined
 *         (a mask), then the greeting (hello, blob, MAC; zeros past the input) handed to
 *         tempo__bs_hello_check, the checks rank 0 applies to every greeting before it trusts it;
 *   odd:  a rank's side: rank 1 of 2 connects to a listener of this process over loopback and
 *         runs the whole rendezvous (tempo__bootstrap_allgather), reading the input as what
 *         rank 0 answers (challenge, reply header, table or error text, MAC), then the end of the
 *         connection. Without a job key: the MACs are not checked, so every byte after them is
 *         reached.
 * What must hold: no crash, no read or write out of bounds, nothing leaked; a verdict that a
 * rank joined names a rank in range that had not joined, any other says why.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/cfg.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static tempo__launch_t launch; /* rank 1 of 2, rendezvous at lfd */
static int lfd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_no_key();
    tempo__addr_t any, bound;
    if (tempo__config_load() != TEMPO_OK || tempo__addr_parse("127.0.0.1:0", &any) != TEMPO_OK ||
        tempo__sock_listen(&any, &lfd, &bound) != TEMPO_OK) {
        fprintf(stderr, "fuzz_bootstrap: %s\n", tempo__errmsg());
        exit(1);
    }
    launch.rank = 1;
    launch.size = 2;
    launch.local_size = -1;
    launch.source = "fuzz";
    launch.has_root = 1;
    snprintf(launch.job_key, sizeof(launch.job_key), "job:fuzz");
    tempo__addr_str(&bound, launch.root_text, sizeof(launch.root_text));
    return 0;
}

static void root_side(fuzz_in_t *in)
{
    int auth = fuzz_u8(in) & 1, n = 2 + fuzz_u8(in) % 8;
    size_t len = 1 + (size_t)(fuzz_u8(in) | fuzz_u8(in) << 8) % 512;
    uint8_t joined = fuzz_u8(in);
    int fds[9];
    for (int r = 0; r < n; r++) {
        fds[r] = r > 0 && (joined >> r & 1) ? 100 + r : -1;
    }
    uint8_t nonce[TEMPO__AUTH_NONCE];
    memset(nonce, 0x5a, sizeof(nonce));
    size_t total = TEMPO__BS_HELLO_BYTES + len + TEMPO__AUTH_MAC;
    uint8_t *msg = malloc(total); /* exactly the greeting: ASan sees any read past it */
    fuzz_take(in, msg, total);
    char why[TEMPO_ERRMSG_LEN];
    int v = tempo__bs_hello_check(msg, len, nonce, auth, tempo__hash64("job:fuzz", 8, 0), fds, n,
                                  why, sizeof(why));
    if (v == TEMPO__HELLO_JOINED) {
        int32_t rank;
        memcpy(&rank, msg + 16, sizeof(rank)); /* hello_t.rank */
        if (rank <= 0 || rank >= n || fds[rank] >= 0) {
            abort();
        }
    } else if (v < TEMPO__HELLO_NOT_TEMPO || v > TEMPO__HELLO_BROKEN || !why[0]) {
        abort();
    }
    free(msg);
}

static void rank_side(fuzz_in_t *in)
{
    size_t n;
    const uint8_t *answer = fuzz_rest(in, &n);
    n = n < 16384 ? n : 16384; /* fits the socket buffers: written before rank 1 reads */
    tempo__bootstrap_t *bs;
    tempo__addr_t local;
    uint64_t deadline = tempo__now_ns() + 5000000000ull;
    if (tempo__bootstrap_open(&launch, deadline, &bs, &local) != TEMPO_OK) {
        fprintf(stderr, "fuzz_bootstrap: %s\n", tempo__errmsg());
        abort();
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0 || write(fd, answer, n) != (ssize_t)n) {
        abort();
    }
    shutdown(fd, SHUT_WR); /* then the end of the connection: nothing waits for a deadline */
    char blob[16] = "rank 1's blob";
    void *all = NULL;
    if (tempo__bootstrap_allgather(bs, blob, sizeof(blob), deadline, &all) == TEMPO_OK) {
        tempo__free(all); /* (2 x 16 bytes, as rank 0 sent them) */
    }
    close(fd);
    tempo__bootstrap_close(bs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    if (fuzz_u8(&in) & 1) {
        rank_side(&in);
    } else {
        root_side(&in);
    }
    return 0;
}

#ifdef FUZZ_SEEDS
/* The messages' layouts (core/bootstrap.c: hello_t, chal_t, reply_t) as the seeds write them. */
static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void fuzz_seeds(void)
{
    /* rank 0's side: rank r of n joins with a 16-byte blob (auth: a zero MAC, which is what the
     * MAC is without a key); a stranger; another job */
    for (int k = 0; k < 4; k++) {
        uint8_t b[8 + 64 + 16 + 32] = {0, (uint8_t)(k & 1), 2, 15, 0, 0x02};
        uint8_t *h = b + 6;
        uint64_t kh = tempo__hash64("job:fuzz", 8, k == 3);
        put32(h, k == 2 ? 0x12345678u : 0x544d5042u);
        put32(h + 4, 2);
        memcpy(h + 8, &kh, 8);
        put32(h + 16, 1 + (uint32_t)k % 2);
        put32(h + 20, 4);
        put32(h + 24, 16);
        memcpy(h + 64, "a rank's blob...", 16);
        fuzz_seed(b, 6 + 64 + 16 + 32);
    }
    /* a rank's side: a challenge, then a table of two 16-byte entries, or an error text */
    for (int k = 0; k < 3; k++) {
        uint8_t b[1 + 48 + 16 + 32 + 32] = {1};
        put32(b + 1, 0x544d5043u);
        put32(b + 5, 2);
        put32(b + 9, k == 2); /* auth: refused by a rank without a key */
        put32(b + 49, 0x544d5052u);
        size_t n = 32;
        if (k == 1) {
            put32(b + 53, (uint32_t)TEMPO_ERR_BOOTSTRAP);
            put32(b + 57, 11);
            memcpy(b + 65, "go away now", 11);
            n = 11;
        } else {
            memcpy(b + 65, "rank 0's blob...rank 1's blob...", 32);
        }
        fuzz_seed(b, 65 + n + 32);
    }
}
#endif
