# crypto.m4 — optional dependency: OpenSSL's libcrypto (3.0 or later: EVP_MAC), for HMAC-SHA-256 in the authentication of
# a job's peers (core/auth.c: TEMPO_AUTH_KEY). Without it a job runs unauthenticated, and a key
# set in the environment is refused with the reason.
AC_DEFUN([TEMPO_CHECK_CRYPTO], [
    TEMPO_DEP_ARG([crypto], [OpenSSL's libcrypto (HMAC-SHA-256: authenticated peers)])
    TEMPO_DEP_PKG([crypto], [CRYPTO], [libcrypto], [openssl/evp.h], [crypto], [EVP_MAC_fetch])
])
