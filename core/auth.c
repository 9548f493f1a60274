/*
 * auth.c — the job's secret key and HMAC-SHA-256 (auth.h).
 */
#include "config.h"

#include "core/auth.h"

#include "core/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#if TEMPO_HAVE_CRYPTO
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#endif

#define KEY_MAX 4096

static pthread_once_t once = PTHREAD_ONCE_INIT;
#if TEMPO_HAVE_CRYPTO
static EVP_MAC *hmac; /* OpenSSL's HMAC, fetched with the key (NULL: none, or the fetch failed) */
#endif
static unsigned char key[KEY_MAX];
static size_t key_len;
static int key_state; /* 1: a key, 0: none, < 0: the error */
static char key_error[TEMPO_ERRMSG_LEN];

static int fail(tempo_status_t st, const char *fmt, const char *a, const char *b)
{
    snprintf(key_error, sizeof(key_error), fmt, a, b);
    return st;
}

/* The key file's bytes: a regular file of this user, private to it (opened without following a
 * link), 1 to KEY_MAX bytes. */
static int load_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return fail(TEMPO_ERR_INVALID, "TEMPO_AUTH_KEY_FILE=%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        close(fd);
        return fail(TEMPO_ERR_INVALID, "TEMPO_AUTH_KEY_FILE=%s: %s", path,
                    "not a regular file of this user that no one else may read or write (chmod "
                    "600 it)");
    }
    ssize_t n = read(fd, key, sizeof(key));
    char extra;
    int more = n == (ssize_t)sizeof(key) && read(fd, &extra, 1) == 1;
    close(fd);
    if (n <= 0 || more) {
        return fail(TEMPO_ERR_INVALID, "TEMPO_AUTH_KEY_FILE=%s: %s", path,
                    n < 0 ? strerror(errno) : more ? "longer than 4096 bytes" : "empty");
    }
    key_len = (size_t)n;
    return 1;
}

static void load(void)
{
    const char *text = tempo__cfg.auth_key, *file = tempo__cfg.auth_key_file;
    if (text[0] && file[0]) {
        key_state = fail(TEMPO_ERR_INVALID, "%s%s", "TEMPO_AUTH_KEY and TEMPO_AUTH_KEY_FILE are "
                         "both set: set one", "");
    } else if (!text[0] && !file[0]) {
        key_state = 0;
    } else if (text[0]) {
        key_len = strlen(text);
        memcpy(key, text, key_len);
        key_state = 1;
    } else {
        key_state = load_file(file);
    }
#if TEMPO_HAVE_CRYPTO
    if (key_state == 1 && !(hmac = EVP_MAC_fetch(NULL, "HMAC", NULL))) {
        memset(key, 0, sizeof(key));
        key_state = fail(TEMPO_ERR_SYSTEM, "%s%s", "OpenSSL's libcrypto has no HMAC "
                         "(EVP_MAC_fetch failed): this rank cannot authenticate", "");
    }
#else
    if (key_state == 1) {
        memset(key, 0, sizeof(key));
        key_state = fail(TEMPO_ERR_UNSUPPORTED, "%s%s", "an authentication key is set "
                         "(TEMPO_AUTH_KEY or TEMPO_AUTH_KEY_FILE), but this build has no libcrypto "
                         "(configure found no OpenSSL libcrypto): it cannot authenticate", "");
    }
#endif
}

int tempo__auth_key(void)
{
    pthread_once(&once, load);
    if (key_state < 0) {
        return tempo__err((tempo_status_t)key_state, "%s", key_error);
    }
    return key_state;
}

int tempo__auth_random(void *out, size_t n)
{
    char *p = out;
    while (n > 0) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            return tempo__err(TEMPO_ERR_SYSTEM, "getrandom(): %s", strerror(errno)), -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

void tempo__auth_mac(const char *label, int nparts, const void *const *p, const size_t *n,
                     uint8_t out[TEMPO__AUTH_MAC])
{
    memset(out, 0, TEMPO__AUTH_MAC);
#if TEMPO_HAVE_CRYPTO
    if (tempo__auth_key() != 1) {
        return;
    }
    /* (OpenSSL 3's EVP_MAC: HMAC with SHA-256) */
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(hmac);
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    size_t len = 0;
    int ok = c && EVP_MAC_init(c, key, key_len, params) == 1 &&
             EVP_MAC_update(c, (const unsigned char *)label, strlen(label) + 1) == 1;
    for (int i = 0; i < nparts && ok; i++) {
        ok = EVP_MAC_update(c, p[i], n[i]) == 1;
    }
    if (!ok || EVP_MAC_final(c, out, &len, TEMPO__AUTH_MAC) != 1 || len != TEMPO__AUTH_MAC) {
        memset(out, 0, TEMPO__AUTH_MAC);
    }
    EVP_MAC_CTX_free(c);
#else
    (void)label, (void)nparts, (void)p, (void)n;
#endif
}

int tempo__auth_equal(const uint8_t *a, const uint8_t *b)
{
    unsigned char d = 0;
    for (int i = 0; i < TEMPO__AUTH_MAC; i++) {
        d |= (unsigned char)(a[i] ^ b[i]);
    }
    return d == 0;
}
