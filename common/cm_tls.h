/*
 * cm_tls — OpenSSL contexts for onsale's listeners and outbound connections.
 *
 * The only module that configures SSL_CTX objects. Servers speak TLS 1.2 and 1.3
 * only, prefer ECDHE + AEAD suites, and keep session tickets on so a returning fan
 * resumes without a full handshake. Contexts are built before the event loop starts
 * (they read files) and are read-only afterwards, so any thread may use them.
 */
#ifndef CM_TLS_H
#define CM_TLS_H

#include <stddef.h>

typedef struct ssl_ctx_st cm_tls_ctx_t;

/**
 * A server context from a PEM certificate chain and its private key (an ECDSA P-256
 * key is expected; RSA works too). Returns NULL with a message in err.
 */
cm_tls_ctx_t *cm_tls_server_new(const char *cert_file, const char *key_file, char *err,
                                size_t errlen);

/**
 * A client context that verifies peers against ca_file (NULL = the system store).
 * Returns NULL with a message in err.
 */
cm_tls_ctx_t *cm_tls_client_new(const char *ca_file, char *err, size_t errlen);

void cm_tls_free(cm_tls_ctx_t *ctx);

/** SHA-256 of n bytes as 64 lower-case hex characters and a NUL. */
void cm_tls_sha256_hex(const void *data, size_t n, char out[65]);

/** n cryptographically random bytes (aborts if the system cannot provide them). */
void cm_tls_random(void *out, size_t n);

#endif
