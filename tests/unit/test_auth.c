/*
 * test_auth.c — the job key's MACs (core/auth.c) and the tcp mesh's checks of them
 * (tempo__tcp_hello_check, tempo__tcp_ack_ok in transport/tcp.c), with a real key: a peer that
 * knows everything but the key (the job uuid too, as one who listened to the rendezvous would) is
 * refused.
 *
 *   construction  tempo__auth_mac is HMAC-SHA-256 under the key over the label with its 0 and then
 *                 the parts, as OpenSSL's one-shot HMAC() computes it here;
 *   hello         the accepting rank takes a hello with the MAC over its challenge; refuses one
 *                 bit flipped, a MAC under another key, the zeros a keyless peer sends, a MAC over
 *                 another challenge (a replay), another job's uuid, and a rank not above its own;
 *   ack           the connecting rank takes the answer with the MAC over its own challenge and
 *                 the hello, and refuses one bit flipped, another key's, and another rank's;
 *   no key        without a key the MACs are zeros and are not compared.
 * The key is loaded once per process, so each case runs in a forked child (tu_fork) that sends
 * back its verdicts. Without libcrypto: the key cases are skipped, saying why.
 */
#include "config.h"

#include "core/auth.h"
#include "core/cfg.h"
#include "core/tempo_int.h"
#include "transport/tl_int.h"
#include "tests/unit/tu.h"

#if TEMPO_HAVE_CRYPTO
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif

/* tcp.c's hello_t and mack_t, byte for byte (the MACs cover the bytes before mac). */
typedef struct {
    uint32_t magic;
    int32_t rank;
    uint64_t uuid;
    uint8_t nonce[TEMPO__AUTH_NONCE];
    uint8_t mac[TEMPO__AUTH_MAC];
} hello_t;
typedef struct {
    uint32_t magic;
    int32_t rank;
    uint8_t mac[TEMPO__AUTH_MAC];
} ack_t;
#define MAGIC 0x544d5043u
#define UUID 0x1234567890abcdefull
#define HELLO_SIGNED offsetof(hello_t, mac)

enum {
    V_CONSTRUCTION,
    V_HELLO_OK,
    V_HELLO_FLIP,
    V_HELLO_OTHER_KEY,
    V_HELLO_ZEROS,
    V_HELLO_REPLAY,
    V_HELLO_UUID,
    V_HELLO_LOW_RANK,
    V_ACK_OK,
    V_ACK_FLIP,
    V_ACK_OTHER_KEY,
    V_ACK_RANK,
    V_NOKEY_ZEROS,
    V_NOKEY_HELLO,
    V_N
};

typedef struct {
    int key_state;
    int ok[V_N]; /* 1: the verdict was the expected one */
    char why[V_N][96];
} result_t;

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(seed + 37 * i);
    }
}

#if TEMPO_HAVE_CRYPTO
/* HMAC-SHA-256 under key of label (with its 0) and the parts, with OpenSSL's one-shot HMAC(). */
static void openssl_mac(const char *key, const char *label, int nparts, const void *const *p,
                        const size_t *n, uint8_t out[TEMPO__AUTH_MAC])
{
    uint8_t msg[1024];
    size_t len = strlen(label) + 1;
    memcpy(msg, label, len);
    for (int i = 0; i < nparts; i++) {
        memcpy(msg + len, p[i], n[i]);
        len += n[i];
    }
    unsigned int olen = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), msg, len, out, &olen);
}
#endif

static void hello_mac(const char *key, const uint8_t *chal, hello_t *h)
{
    const void *parts[] = {chal, h};
    size_t lens[] = {TEMPO__AUTH_NONCE, HELLO_SIGNED};
#if TEMPO_HAVE_CRYPTO
    if (key) {
        openssl_mac(key, "tempo tcp hello", 2, parts, lens, h->mac);
        return;
    }
#endif
    (void)key;
    tempo__auth_mac("tempo tcp hello", 2, parts, lens, h->mac);
}

static void ack_mac(const char *key, const hello_t *h, ack_t *a)
{
    const void *parts[] = {h->nonce, h, &a->rank};
    size_t lens[] = {TEMPO__AUTH_NONCE, HELLO_SIGNED, sizeof(a->rank)};
#if TEMPO_HAVE_CRYPTO
    if (key) {
        openssl_mac(key, "tempo tcp ack", 3, parts, lens, a->mac);
        return;
    }
#endif
    (void)key;
    tempo__auth_mac("tempo tcp ack", 3, parts, lens, a->mac);
}

/* Record whether the hello check's verdict was the expected one (NULL: accepted). */
static void hello_case(result_t *r, int v, const hello_t *h, const uint8_t *chal, int want_ok)
{
    const char *bad = tempo__tcp_hello_check(h, chal, UUID, 0, 4, 1);
    r->ok[v] = want_ok ? bad == NULL : bad != NULL;
    snprintf(r->why[v], sizeof(r->why[v]), "%s", bad ? bad : "accepted");
}

static void ack_case(result_t *r, int v, const ack_t *a, const hello_t *h, int p, int want_ok)
{
    int ok = tempo__tcp_ack_ok(a, h, p, 1);
    r->ok[v] = want_ok ? ok : !ok;
    snprintf(r->why[v], sizeof(r->why[v]), "%s", ok ? "accepted" : "refused");
}

/* With TEMPO_AUTH_KEY=arg: every key case. */
static int keyed_child(void *arg, int fd)
{
    result_t r;
    memset(&r, 0, sizeof(r));
    tu_clean_env();
    setenv("TEMPO_AUTH_KEY", (const char *)arg, 1);
    if (tempo__config_load() != TEMPO_OK) {
        return 1;
    }
    r.key_state = tempo__auth_key();
    uint8_t chal[TEMPO__AUTH_NONCE], other[TEMPO__AUTH_NONCE];
    fill(chal, sizeof(chal), 1);
    fill(other, sizeof(other), 2);

    hello_t h = {MAGIC, 2, UUID, {0}, {0}};
    fill(h.nonce, sizeof(h.nonce), 3);
#if TEMPO_HAVE_CRYPTO
    uint8_t mine[TEMPO__AUTH_MAC], theirs[TEMPO__AUTH_MAC];
    hello_mac(NULL, chal, &h);
    memcpy(mine, h.mac, sizeof(mine));
    hello_mac((const char *)arg, chal, &h);
    memcpy(theirs, h.mac, sizeof(theirs));
    r.ok[V_CONSTRUCTION] = !memcmp(mine, theirs, sizeof(mine));
    snprintf(r.why[V_CONSTRUCTION], sizeof(r.why[0]), "%s", r.ok[V_CONSTRUCTION] ? "equal" : "differ");
#endif
    hello_mac(NULL, chal, &h);
    hello_case(&r, V_HELLO_OK, &h, chal, 1);
    hello_t t = h;
    t.mac[7] ^= 0x10;
    hello_case(&r, V_HELLO_FLIP, &t, chal, 0);
    t = h;
#if TEMPO_HAVE_CRYPTO
    hello_mac("another key", chal, &t);
#endif
    hello_case(&r, V_HELLO_OTHER_KEY, &t, chal, 0);
    t = h;
    memset(t.mac, 0, sizeof(t.mac));
    hello_case(&r, V_HELLO_ZEROS, &t, chal, 0);
    hello_case(&r, V_HELLO_REPLAY, &h, other, 0); /* the MAC over chal, checked against other */
    t = h;
    t.uuid ^= 1;
    hello_mac(NULL, chal, &t);
    hello_case(&r, V_HELLO_UUID, &t, chal, 0);
    t = h;
    t.rank = 0;
    hello_mac(NULL, chal, &t);
    hello_case(&r, V_HELLO_LOW_RANK, &t, chal, 0);

    ack_t a = {MAGIC, 1, {0}};
    ack_mac(NULL, &h, &a);
    ack_case(&r, V_ACK_OK, &a, &h, 1, 1);
    ack_t b = a;
    b.mac[0] ^= 1;
    ack_case(&r, V_ACK_FLIP, &b, &h, 1, 0);
    b = a;
#if TEMPO_HAVE_CRYPTO
    ack_mac("another key", &h, &b);
#endif
    ack_case(&r, V_ACK_OTHER_KEY, &b, &h, 1, 0);
    b = a;
    b.rank = 3;
    ack_mac(NULL, &h, &b);
    ack_case(&r, V_ACK_RANK, &b, &h, 1, 0); /* a true MAC, but from rank 3, not the one asked */
    tu_write(fd, &r, sizeof(r));
    return 0;
}

/* Without a key: zeros, not compared. */
static int keyless_child(void *arg, int fd)
{
    (void)arg;
    result_t r;
    memset(&r, 0, sizeof(r));
    tu_clean_env();
    if (tempo__config_load() != TEMPO_OK) {
        return 1;
    }
    r.key_state = tempo__auth_key();
    uint8_t chal[TEMPO__AUTH_NONCE], mac[TEMPO__AUTH_MAC], zeros[TEMPO__AUTH_MAC] = {0};
    fill(chal, sizeof(chal), 1);
    const void *parts[] = {chal};
    size_t lens[] = {sizeof(chal)};
    tempo__auth_mac("tempo tcp hello", 1, parts, lens, mac);
    r.ok[V_NOKEY_ZEROS] = !memcmp(mac, zeros, sizeof(mac));
    hello_t h = {MAGIC, 2, UUID, {0}, {0}};
    const char *bad = tempo__tcp_hello_check(&h, chal, UUID, 0, 4, 0);
    r.ok[V_NOKEY_HELLO] = bad == NULL;
    snprintf(r.why[V_NOKEY_HELLO], sizeof(r.why[0]), "%s", bad ? bad : "accepted");
    tu_write(fd, &r, sizeof(r));
    return 0;
}

int main(void)
{
    static const char *const names[V_N] = {
        [V_CONSTRUCTION] = "tempo__auth_mac is OpenSSL's HMAC-SHA-256 over the label, its 0 and the parts",
        [V_HELLO_OK] = "a hello with the MAC over the challenge under the key is accepted",
        [V_HELLO_FLIP] = "a hello with one bit of its MAC flipped is refused",
        [V_HELLO_OTHER_KEY] = "a hello with its MAC under another key is refused",
        [V_HELLO_ZEROS] = "a hello with the zeros a keyless peer sends is refused",
        [V_HELLO_REPLAY] = "a hello with the MAC over another challenge (a replay) is refused",
        [V_HELLO_UUID] = "a hello of another job's uuid (its MAC right) is refused",
        [V_HELLO_LOW_RANK] = "a hello from a rank not above the accepting one is refused",
        [V_ACK_OK] = "an answer with the MAC over the connecting rank's challenge is accepted",
        [V_ACK_FLIP] = "an answer with one bit of its MAC flipped is refused",
        [V_ACK_OTHER_KEY] = "an answer with its MAC under another key is refused",
        [V_ACK_RANK] = "an answer from another rank than the one connected to is refused",
        [V_NOKEY_ZEROS] = "without a key, MACs are zeros",
        [V_NOKEY_HELLO] = "without a key, a hello is checked without its MAC",
    };
    result_t r;
#if TEMPO_HAVE_CRYPTO
    const char *key = "test-auth key 1";
    int got = tu_fork(keyed_child, (void *)key, &r, sizeof(r)) == (ssize_t)sizeof(r);
    TAP_OK(got && r.key_state == 1, "TEMPO_AUTH_KEY: the key is loaded (state %d)",
           got ? r.key_state : -99);
    for (int v = V_CONSTRUCTION; v <= V_ACK_RANK; v++) {
        TAP_OK(got && r.ok[v], "%s (%s)", names[v], got && r.why[v][0] ? r.why[v] : "-");
    }
#else
    for (int v = V_CONSTRUCTION; v <= V_ACK_RANK + 1; v++) {
        tap_skip("no libcrypto in this build: a key is refused", "the key case %d", v);
    }
#endif
    int got2 = tu_fork(keyless_child, NULL, &r, sizeof(r)) == (ssize_t)sizeof(r);
    TAP_OK(got2 && r.key_state == 0, "without TEMPO_AUTH_KEY: no key (state %d)",
           got2 ? r.key_state : -99);
    TAP_OK(got2 && r.ok[V_NOKEY_ZEROS], "%s", names[V_NOKEY_ZEROS]);
    TAP_OK(got2 && r.ok[V_NOKEY_HELLO], "%s (%s)", names[V_NOKEY_HELLO],
           got2 ? r.why[V_NOKEY_HELLO] : "-");
    return tap_done();
}
