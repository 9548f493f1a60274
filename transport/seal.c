/*
 * seal.c — sealed records over a socket (see seal.h): AES-256-GCM from OpenSSL's libcrypto.
 *
 * Send side: one record buffer [4-byte length][ciphertext][tag]; a write seals the iovecs straight
 * into it (EVP_EncryptUpdate per iovec, no copy of the plaintext) and sends from it; until it is
 * all sent, writes only send the rest and take nothing (the socket is full: back-pressure as
 * unsealed). Receive side: the record being read, then its plaintext, handed out as asked; a read
 * goes on to the next record until the caller has what it asked for or the socket has no more.
 */
#include "config.h"

#include "transport/seal.h"
#include "transport/stream.h"
#include "core/tempo_int.h"

#include <errno.h>
#include <sys/socket.h>

#if TEMPO_HAVE_CRYPTO
#include <openssl/evp.h>

#define HDR 4
#define TAG 16
#define NONCE 12

struct tempo__seal {
    EVP_CIPHER_CTX *tx, *rx;
    uint64_t tx_n, rx_n; /* records sealed, opened: the nonces */
    /* send: the record [0, wlen), sent up to wpos */
    unsigned char *wbuf;
    size_t wlen, wpos;
    /* receive: the record being read [0, cfill), then its plaintext [ppos, plen) */
    unsigned char *cbuf, *pbuf;
    size_t cfill, ppos, plen;
    int eof; /* the peer closed its end (reported once the plaintext is read) */
    int bad; /* a record failed: -EBADMSG from now on */
};

static void nonce_of(uint64_t n, unsigned char iv[NONCE])
{
    memset(iv, 0, NONCE);
    for (int i = 0; i < 8; i++) {
        iv[4 + i] = (unsigned char)(n >> (8 * i));
    }
}

static EVP_CIPHER_CTX *ctx_new(const uint8_t key[TEMPO__SEAL_KEY], int enc)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (c && EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, key, NULL, enc) == 1) {
        return c;
    }
    EVP_CIPHER_CTX_free(c);
    return NULL;
}

tempo__seal_t *tempo__seal_new(const uint8_t tx[TEMPO__SEAL_KEY], const uint8_t rx[TEMPO__SEAL_KEY])
{
    tempo__seal_t *s = tempo__calloc(1, sizeof(*s), "sealed connection");
    if (!s) {
        return NULL;
    }
    s->tx = ctx_new(tx, 1);
    s->rx = ctx_new(rx, 0);
    s->wbuf = tempo__malloc(HDR + TEMPO__SEAL_REC + TAG, "sealed connection");
    s->cbuf = tempo__malloc(HDR + TEMPO__SEAL_REC + TAG, "sealed connection");
    s->pbuf = tempo__malloc(TEMPO__SEAL_REC, "sealed connection");
    if (!s->tx || !s->rx) {
        tempo__err(TEMPO_ERR_SYSTEM, "TEMPO_ENCRYPT: libcrypto has no AES-256-GCM here");
    }
    if (!s->tx || !s->rx || !s->wbuf || !s->cbuf || !s->pbuf) {
        tempo__seal_free(s);
        return NULL;
    }
    return s;
}

void tempo__seal_free(tempo__seal_t *s)
{
    if (!s) {
        return;
    }
    EVP_CIPHER_CTX_free(s->tx);
    EVP_CIPHER_CTX_free(s->rx);
    tempo__free(s->wbuf);
    tempo__free(s->cbuf);
    tempo__free(s->pbuf);
    tempo__free(s);
}

int tempo__seal_flush(tempo__seal_t *s, int fd)
{
    while (s->wpos < s->wlen) {
        ssize_t r = send(fd, s->wbuf + s->wpos, s->wlen - s->wpos, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                return 1;
            }
            return -errno;
        }
        s->wpos += (size_t)r;
    }
    s->wlen = s->wpos = 0;
    return 0;
}

int tempo__seal_out_pending(const tempo__seal_t *s)
{
    return s->wpos < s->wlen;
}

ssize_t tempo__seal_writev(tempo__seal_t *s, int fd, const struct iovec *iov, int iovcnt)
{
    int f = tempo__seal_flush(s, fd);
    if (f != 0) {
        return f > 0 ? 0 : f;
    }
    size_t n = 0;
    for (int i = 0; i < iovcnt && n < TEMPO__SEAL_REC; i++) {
        n += TEMPO_MIN(iov[i].iov_len, TEMPO__SEAL_REC - n);
    }
    if (n == 0) {
        return 0;
    }
    unsigned char iv[NONCE];
    nonce_of(s->tx_n++, iv);
    uint32_t len = (uint32_t)n;
    for (int i = 0; i < HDR; i++) {
        s->wbuf[i] = (unsigned char)(len >> (8 * i));
    }
    int outl = 0, ok = EVP_EncryptInit_ex(s->tx, NULL, NULL, NULL, iv) == 1 &&
                       EVP_EncryptUpdate(s->tx, NULL, &outl, s->wbuf, HDR) == 1;
    size_t o = HDR, left = n;
    for (int i = 0; i < iovcnt && left > 0 && ok; i++) {
        int k = (int)TEMPO_MIN(iov[i].iov_len, left);
        ok = EVP_EncryptUpdate(s->tx, s->wbuf + o, &outl, iov[i].iov_base, k) == 1;
        o += (size_t)outl;
        left -= (size_t)k;
    }
    ok = ok && EVP_EncryptFinal_ex(s->tx, s->wbuf + o, &outl) == 1;
    o += (size_t)outl;
    ok = ok && EVP_CIPHER_CTX_ctrl(s->tx, EVP_CTRL_GCM_GET_TAG, TAG, s->wbuf + o) == 1;
    if (!ok || o != HDR + n) {
        return -EIO; /* (libcrypto failed: the connection cannot go on) */
    }
    s->wlen = o + TAG;
    s->wpos = 0;
    f = tempo__seal_flush(s, fd);
    return f < 0 ? f : (ssize_t)n;
}

/* Read the rest of the record being read (its length from its header): 1 when it is whole, 0 if
 * the socket has no more now, or TEMPO_PIPE_EOF / -errno / -EBADMSG. */
static int fill_record(tempo__seal_t *s, int fd)
{
    for (;;) {
        size_t need = HDR;
        if (s->cfill >= HDR) {
            uint32_t len = 0;
            for (int i = 0; i < HDR; i++) {
                len |= (uint32_t)s->cbuf[i] << (8 * i);
            }
            if (len == 0 || len > TEMPO__SEAL_REC) {
                return -EBADMSG; /* not a record of this layer */
            }
            need = HDR + len + TAG;
        }
        if (s->cfill == need) {
            return 1;
        }
        ssize_t r = recv(fd, s->cbuf + s->cfill, need - s->cfill, MSG_DONTWAIT);
        if (r > 0) {
            s->cfill += (size_t)r;
            continue;
        }
        if (r == 0) {
            s->eof = 1;
            return TEMPO_PIPE_EOF;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            return 0;
        }
        return -errno;
    }
}

/* Open the whole record in cbuf into pbuf: 0, or -EBADMSG. */
static int open_record(tempo__seal_t *s)
{
    size_t len = s->cfill - HDR - TAG;
    unsigned char iv[NONCE];
    nonce_of(s->rx_n++, iv);
    int outl = 0, fin = 0;
    int ok = EVP_DecryptInit_ex(s->rx, NULL, NULL, NULL, iv) == 1 &&
             EVP_DecryptUpdate(s->rx, NULL, &outl, s->cbuf, HDR) == 1 &&
             EVP_DecryptUpdate(s->rx, s->pbuf, &outl, s->cbuf + HDR, (int)len) == 1 &&
             EVP_CIPHER_CTX_ctrl(s->rx, EVP_CTRL_GCM_SET_TAG, TAG, s->cbuf + HDR + len) == 1 &&
             EVP_DecryptFinal_ex(s->rx, s->pbuf + outl, &fin) == 1;
    s->cfill = 0;
    if (!ok) {
        s->plen = s->ppos = 0;
        return -EBADMSG;
    }
    s->plen = len;
    s->ppos = 0;
    return 0;
}

ssize_t tempo__seal_read(tempo__seal_t *s, int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        if (s->ppos < s->plen) {
            size_t n = TEMPO_MIN(len - got, s->plen - s->ppos);
            memcpy((char *)buf + got, s->pbuf + s->ppos, n);
            s->ppos += n;
            got += n;
            continue;
        }
        if (s->eof || s->bad) {
            break;
        }
        int r = fill_record(s, fd);
        if (r == 1) {
            r = open_record(s);
            if (r == 0) {
                continue;
            }
        }
        if (r == -EBADMSG) {
            s->bad = 1; /* (the plaintext before it is delivered first) */
        }
        if (r < 0 && r != TEMPO_PIPE_EOF && r != -EBADMSG) {
            return got ? (ssize_t)got : r;
        }
        break; /* nothing more now, the end, or a record that failed */
    }
    if (got > 0) {
        return (ssize_t)got;
    }
    return s->bad ? -EBADMSG : s->eof ? TEMPO_PIPE_EOF : 0;
}

int tempo__seal_in_pending(const tempo__seal_t *s)
{
    return s->ppos < s->plen;
}

#else /* no libcrypto */

tempo__seal_t *tempo__seal_new(const uint8_t tx[TEMPO__SEAL_KEY], const uint8_t rx[TEMPO__SEAL_KEY])
{
    (void)tx;
    (void)rx;
    tempo__err(TEMPO_ERR_UNSUPPORTED, "TEMPO_ENCRYPT: this build has no libcrypto");
    return NULL;
}
void tempo__seal_free(tempo__seal_t *s)
{
    (void)s;
}
ssize_t tempo__seal_writev(tempo__seal_t *s, int fd, const struct iovec *iov, int iovcnt)
{
    (void)s, (void)fd, (void)iov, (void)iovcnt;
    return -ENOSYS;
}
int tempo__seal_flush(tempo__seal_t *s, int fd)
{
    (void)s, (void)fd;
    return 0;
}
int tempo__seal_out_pending(const tempo__seal_t *s)
{
    (void)s;
    return 0;
}
ssize_t tempo__seal_read(tempo__seal_t *s, int fd, void *buf, size_t len)
{
    (void)s, (void)fd, (void)buf, (void)len;
    return -ENOSYS;
}
int tempo__seal_in_pending(const tempo__seal_t *s)
{
    (void)s;
    return 0;
}

#endif
