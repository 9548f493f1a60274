/*
 * auth.h — the job's secret and the message authentication of its peers (core/auth.c).
 *
 * A job may have a secret key, shared by its ranks and no one else: TEMPO_AUTH_KEY (the text is
 * the key) or TEMPO_AUTH_KEY_FILE (the file's bytes; the file must be a regular file of this
 * user that no one else may read). tempo-run makes one per job. With a key, every connection at
 * the rendezvous is a challenge and response: rank 0 sends a fresh random challenge, a rank
 * answers with its hello and an HMAC-SHA-256 under the key over the challenge and everything it
 * sends; rank 0 answers with an HMAC over the rank's own challenge and everything it sends back,
 * so that each side knows the other holds the key, and a recorded exchange cannot be replayed.
 * HMAC comes from OpenSSL's libcrypto (configure --with-crypto).
 */
#ifndef TEMPO_CORE_AUTH_H
#define TEMPO_CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/tempo_int.h"

#define TEMPO__AUTH_NONCE 32 /* bytes of a challenge */
#define TEMPO__AUTH_MAC 32   /* bytes of an HMAC-SHA-256 */

/** Load the key (once; the configuration must be loaded): 1 with a key, 0 without one, or an
 *  error with the message (an unreadable or unsafe key file, an empty key, a key in a build
 *  without libcrypto). */
int tempo__auth_key(void);

/** n random bytes for a challenge (getrandom). 0, or -1 with the message. */
int tempo__auth_random(void *out, size_t n);

/** out = HMAC-SHA-256 under the key of: label (with its 0), then each part (p[i], n[i]), for
 *  nparts parts; zeros without a key. */
void tempo__auth_mac(const char *label, int nparts, const void *const *p, const size_t *n,
                     uint8_t out[TEMPO__AUTH_MAC]);

/** Whether two MACs are equal, in time that does not depend on where they differ. */
int tempo__auth_equal(const uint8_t *a, const uint8_t *b);

#endif /* TEMPO_CORE_AUTH_H */
