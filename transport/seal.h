/*
 * seal.h — sealed records over a socket: the tcp transport's encryption (TEMPO_ENCRYPT=1).
 *
 * Each direction of a connection has its own 256-bit key, derived at the mesh handshake from the
 * job key and both ends' challenges (transport/tcp.c). Bytes go as records of at most
 * TEMPO__SEAL_REC plaintext bytes: a 4-byte length (little-endian), the ciphertext, and a 16-byte
 * tag: AES-256-GCM with a 96-bit nonce that counts records (so a record replayed, dropped or
 * reordered fails too) and the length as additional data. A record that fails its tag ends the
 * connection with -EBADMSG: nothing of it is delivered.
 *
 * The interface mirrors the pipe's (transport/stream.h): a write takes plaintext into one record
 * and sends what the socket takes (at most one record waits in this layer, so a full socket still
 * refuses more, as it would unsealed); a read returns plaintext as recv() would.
 */
#ifndef TEMPO_TRANSPORT_SEAL_H
#define TEMPO_TRANSPORT_SEAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define TEMPO__SEAL_KEY 32
#define TEMPO__SEAL_REC (64 * 1024) /* plaintext bytes per record at most */

typedef struct tempo__seal tempo__seal_t;

/** A sealed connection with these keys (tx: this end's records, rx: the peer's); NULL with the
 *  message when libcrypto cannot (or the build has none). */
tempo__seal_t *tempo__seal_new(const uint8_t tx[TEMPO__SEAL_KEY], const uint8_t rx[TEMPO__SEAL_KEY]);
void tempo__seal_free(tempo__seal_t *s);

/** Seal up to TEMPO__SEAL_REC bytes of iov into a record and send what fd takes: the plaintext
 *  bytes taken (0: the socket is still full with the last record), or -errno. */
ssize_t tempo__seal_writev(tempo__seal_t *s, int fd, const struct iovec *iov, int iovcnt);
/** Send what is left of the last record: 1 if some remains, 0 if none, or -errno. */
int tempo__seal_flush(tempo__seal_t *s, int fd);
/** Whether a record waits to be sent. */
int tempo__seal_out_pending(const tempo__seal_t *s);

/** Up to len bytes of plaintext: bytes, 0 if none now, TEMPO_PIPE_EOF at the end, -EBADMSG for a
 *  record that fails (tampered with, or not sealed with this key), or -errno. */
ssize_t tempo__seal_read(tempo__seal_t *s, int fd, void *buf, size_t len);
/** Whether opened plaintext waits to be read (no socket event will say so). */
int tempo__seal_in_pending(const tempo__seal_t *s);

#endif /* TEMPO_TRANSPORT_SEAL_H */
