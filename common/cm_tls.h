/*
 * cm_tls — OpenSSL contexts for onsale's listeners and outbound connections.
 *
 * The only module that configures SSL_CTX objects. Servers speak TLS 1.2 and 1.3
 * only and prefer ECDHE + AEAD suites. Contexts are built before the event loop starts
 * (they read files) and are read-only afterwards, so any thread may use them.
 *
 * Certificates reload on SIGHUP (cm_reload): the server context keeps the files' names,
 * the reload thread reads them again, checks that key and certificate match, and swaps
 * them in; every handshake after that presents the new pair (a certificate callback
 * hands it to the connection), connections already open keep theirs. A pair that fails
 * to load is logged and the old one stays.
 *
 * Session tickets are off (SSL_OP_NO_TICKET). A ticket key that OpenSSL makes at start
 * lives, unrotated, as long as the process, and one stolen key decrypts every session
 * resumed with it — forward secrecy gone for days; sharing and rotating keys across
 * gateways would need a secret-distribution channel of its own for a small gain. A full
 * ECDHE-ECDSA P-256 handshake costs ~0.1 ms of CPU, fans keep their connection alive
 * while they poll, and the "new TLS connections" benchmark measures full handshakes
 * anyway (wrk never resumes). What is left is OpenSSL's server-side cache (TLS 1.2
 * session IDs, TLS 1.3 stateful tickets — one per handshake, not OpenSSL's default two:
 * each is a copy of the session put into the cache), shared by the workers of one
 * process. OpenSSL drops a session from it when the SSL is freed without our
 * close_notify, which is how libevent's bufferevents close; the h1 engine sends one when
 * it closes a connection after an answer (Connection: close), so those sessions resume.
 */
#ifndef CM_TLS_H
#define CM_TLS_H

#include <stddef.h>

typedef struct ssl_ctx_st cm_tls_ctx_t;

/**
 * A server context from a PEM certificate chain and its private key (an ECDSA P-256
 * key is expected; RSA works too), reloaded from the same files on SIGHUP. The key file
 * is read as a secret (cm_config_read_secret): one readable or writable by group or
 * others is refused (at start and on reload), the message naming it and its mode.
 * Returns NULL with a message in err.
 */
cm_tls_ctx_t *cm_tls_server_new(const char *cert_file, const char *key_file, char *err,
                                size_t errlen);

/**
 * A client context that verifies peers against ca_file (NULL = the system store).
 * Returns NULL with a message in err.
 */
cm_tls_ctx_t *cm_tls_client_new(const char *ca_file, char *err, size_t errlen);

/**
 * cm_tls_client_new that also presents a client certificate (PEM chain cert_file and
 * its key key_file, checked to match; the key file is refused when group or others may
 * read it, like every private key) to servers that ask for one — Redis with
 * tls-auth-clients. cert_file and key_file both NULL: none. Read once (a restart picks
 * up new files). Returns NULL with a message in err.
 */
cm_tls_ctx_t *cm_tls_client_new_cert(const char *ca_file, const char *cert_file,
                                     const char *key_file, char *err, size_t errlen);

/** Re-reads a server context's certificate and key now (what SIGHUP does); on failure
 *  the old pair stays. Any thread. 0, or -1 with a message in err. */
__attribute__((warn_unused_result)) int cm_tls_server_reload(cm_tls_ctx_t *ctx, char *err,
                                                             size_t errlen);

/** Stops its SIGHUP reload and drops the context (OpenSSL frees it with its last SSL). */
void cm_tls_free(cm_tls_ctx_t *ctx);

/**
 * The notAfter of the certificate a server context serves now (the reloaded one after a
 * SIGHUP), in seconds since the epoch; 0 for a client context. Any thread.
 */
double cm_tls_server_not_after(const cm_tls_ctx_t *ctx);

/**
 * Handshakes a server context completed since start, and how many of them resumed a
 * cached session (OpenSSL's per-context counters; a tuning aid for clients' pooling).
 */
void cm_tls_server_counts(const cm_tls_ctx_t *ctx, long *handshakes, long *resumed);

/** SHA-256 of n bytes as 64 lower-case hex characters and a NUL. */
void cm_tls_sha256_hex(const void *data, size_t n, char out[65]);

/** n cryptographically random bytes (aborts if the system cannot provide them). */
void cm_tls_random(void *out, size_t n);
/**
 * n CSPRNG bytes like cm_tls_random, from a per-thread reserve refilled 1 KiB at a time:
 * one RAND_bytes call (and its fork check) per many small draws instead of one each, for
 * the hot paths that draw a few bytes per request (a join's visitor id and lottery score,
 * a proof-of-work challenge). Each byte is handed out once and wiped; a fork empties the
 * forking thread's reserve (pthread_atfork), so parent and child never share bytes. Any
 * thread; a draw larger than the reserve goes to RAND_bytes directly.
 */
void cm_tls_random_reserve(void *out, size_t n);

#endif
