/*
 * cm_tls — see cm_tls.h. Contexts are made at start-up (reading files), before any
 * loop runs; certificate reloads run on cm_reload's thread.
 *
 * Reload state hangs off the SSL_CTX (ex_data, freed with the context): the file names
 * and, once a reload succeeded, the pair to use, under a mutex held only to copy
 * references. Until the first reload the certificate callback does nothing — the
 * context's own pair serves, at no cost per handshake.
 */
#include "cm_tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_config.h"
#include "cm_mem.h"
#include "cm_reload.h"

typedef struct certs {
    pthread_mutex_t mu;
    char *cert_file, *key_file;
    X509 *cert; /* NULL until a reload: the context's own pair serves */
    STACK_OF(X509) * chain;
    EVP_PKEY *key;
    bool hooked;
} certs_t;

static int certs_idx = -1;
static pthread_once_t certs_once = PTHREAD_ONCE_INIT;

static void certs_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    certs_t *c = ptr;
    if (c == NULL)
        return;
    X509_free(c->cert);
    sk_X509_pop_free(c->chain, X509_free);
    EVP_PKEY_free(c->key);
    free(c->cert_file);
    free(c->key_file);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void certs_index(void)
{
    certs_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, certs_free);
}

static void last_error(const char *what, const char *path, char *err, size_t errlen)
{
    char buf[256];
    unsigned long e = ERR_peek_last_error();
    ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errlen, "%s %s: %s", what, path ? path : "", e ? buf : "failed");
    ERR_clear_error();
}

/* Every handshake, on the thread of its loop: the reloaded pair, if there is one. */
static int on_cert(SSL *ssl, void *arg)
{
    certs_t *c = arg;
    pthread_mutex_lock(&c->mu);
    X509 *cert = c->cert;
    if (cert == NULL) {
        pthread_mutex_unlock(&c->mu);
        return 1;
    }
    X509_up_ref(cert);
    EVP_PKEY *key = c->key;
    EVP_PKEY_up_ref(key);
    STACK_OF(X509) *chain = X509_chain_up_ref(c->chain);
    pthread_mutex_unlock(&c->mu);
    int ok = SSL_use_cert_and_key(ssl, cert, key, chain, 1); /* takes its own references */
    X509_free(cert);
    EVP_PKEY_free(key);
    sk_X509_pop_free(chain, X509_free);
    return ok == 1 ? 1 : 0;
}

/* The private key from key_file, read like a secret (cm_config_read_secret: a file
 * readable by group or others is refused, naming it and its mode). NULL + err. */
static EVP_PKEY *read_key(const char *what, const char *key_file, char *err, size_t errlen)
{
    size_t len = 0;
    char *pem = cm_config_read_secret(what, key_file, 1, 65536, &len, err, errlen);
    if (pem == NULL)
        return NULL;
    EVP_PKEY *key = NULL;
    BIO *kb = BIO_new_mem_buf(pem, (int)len);
    if (kb == NULL || (key = PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL)) == NULL)
        last_error("private key", key_file, err, errlen);
    BIO_free(kb);
    OPENSSL_cleanse(pem, len);
    free(pem);
    return key;
}

int cm_tls_server_reload(cm_tls_ctx_t *ctx, char *err, size_t errlen)
{
    certs_t *c = certs_idx >= 0 ? SSL_CTX_get_ex_data(ctx, certs_idx) : NULL;
    if (c == NULL) {
        snprintf(err, errlen, "not a server context made by cm_tls_server_new");
        return -1;
    }
    X509 *cert = NULL, *extra;
    STACK_OF(X509) *chain = sk_X509_new_null();
    EVP_PKEY *key = NULL;
    int rc = -1;
    BIO *cb = BIO_new_file(c->cert_file, "r");
    if (cb == NULL || (cert = PEM_read_bio_X509(cb, NULL, NULL, NULL)) == NULL) {
        last_error("certificate", c->cert_file, err, errlen);
        goto out;
    }
    while ((extra = PEM_read_bio_X509(cb, NULL, NULL, NULL)) != NULL)
        sk_X509_push(chain, extra);
    ERR_clear_error(); /* the end of the file */
    if ((key = read_key("tls_key", c->key_file, err, errlen)) == NULL)
        goto out;
    if (X509_check_private_key(cert, key) != 1) {
        last_error("key does not match certificate", c->key_file, err, errlen);
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    X509 *old_cert = c->cert;
    STACK_OF(X509) *old_chain = c->chain;
    EVP_PKEY *old_key = c->key;
    c->cert = cert, c->chain = chain, c->key = key;
    pthread_mutex_unlock(&c->mu);
    cert = old_cert, chain = old_chain, key = old_key; /* freed below */
    rc = 0;
out:
    BIO_free(cb);
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    return rc;
}

static int on_reload(void *arg, char *err, size_t errlen)
{
    return cm_tls_server_reload(arg, err, errlen);
}

cm_tls_ctx_t *cm_tls_server_new(const char *cert_file, const char *key_file, char *err,
                                size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        last_error("SSL_CTX_new", NULL, err, errlen);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* Forward secrecy and AEAD only for TLS 1.2; TLS 1.3 suites are all fine. */
    if (SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20") != 1) {
        last_error("cipher list", NULL, err, errlen);
        goto err;
    }
    /* No session tickets (see cm_tls.h): resumption from the server-side cache only. */
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    /* TLS 1.3 sends session tickets after every full handshake (OpenSSL's default: two),
     * each a copy of the session put into the cache; a fan reconnecting needs one. One
     * saves ~15% of the server's CPU per new connection (a handshake loop over memory
     * BIOs, docs/performance.md). */
    SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        last_error("certificate", cert_file, err, errlen);
        goto err;
    }
    EVP_PKEY *key = read_key("tls_key", key_file, err, errlen);
    if (key == NULL)
        goto err;
    int used = SSL_CTX_use_PrivateKey(ctx, key); /* takes its own reference */
    EVP_PKEY_free(key);
    if (used != 1) {
        last_error("private key", key_file, err, errlen);
        goto err;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        last_error("key does not match certificate", key_file, err, errlen);
        goto err;
    }
    pthread_once(&certs_once, certs_index);
    certs_t *c = cm_xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->cert_file = cm_xstrdup(cert_file);
    c->key_file = cm_xstrdup(key_file);
    if (certs_idx < 0 || SSL_CTX_set_ex_data(ctx, certs_idx, c) != 1) {
        certs_free(NULL, c, NULL, 0, 0, NULL);
        snprintf(err, errlen, "cannot attach reload state to the TLS context");
        goto err;
    }
    SSL_CTX_set_cert_cb(ctx, on_cert, c);
    if (cm_reload_add("TLS certificate", on_reload, ctx) != 0) {
        snprintf(err, errlen, "cannot install the SIGHUP reload of %s", cert_file);
        goto err;
    }
    c->hooked = true;
    return ctx;
err:
    SSL_CTX_free(ctx);
    return NULL;
}

cm_tls_ctx_t *cm_tls_client_new(const char *ca_file, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        last_error("SSL_CTX_new", NULL, err, errlen);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    int ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                     : SSL_CTX_set_default_verify_paths(ctx);
    if (ok != 1) {
        last_error("CA file", ca_file, err, errlen);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

cm_tls_ctx_t *cm_tls_client_new_cert(const char *ca_file, const char *cert_file,
                                     const char *key_file, char *err, size_t errlen)
{
    SSL_CTX *ctx = cm_tls_client_new(ca_file, err, errlen);
    EVP_PKEY *key = NULL;

    if (ctx == NULL || (cert_file == NULL && key_file == NULL))
        return ctx;
    if (cert_file == NULL || key_file == NULL) {
        snprintf(err, errlen, "a client certificate needs both its file and its key file");
        goto err;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        last_error("client certificate", cert_file, err, errlen);
        goto err;
    }
    /* read like every private key: refused when group or others may read it */
    if ((key = read_key("client key", key_file, err, errlen)) == NULL)
        goto err;
    if (SSL_CTX_use_PrivateKey(ctx, key) != 1) {
        last_error("client key", key_file, err, errlen);
        goto err;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        last_error("client key does not match its certificate", key_file, err, errlen);
        goto err;
    }
    EVP_PKEY_free(key);
    return ctx;
err:
    EVP_PKEY_free(key);
    SSL_CTX_free(ctx);
    return NULL;
}

void cm_tls_free(cm_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    certs_t *c = certs_idx >= 0 ? SSL_CTX_get_ex_data(ctx, certs_idx) : NULL;
    if (c != NULL && c->hooked)
        cm_reload_remove(on_reload, ctx);
    SSL_CTX_free(ctx);
}

void cm_tls_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    static const char hex[] = "0123456789abcdef";
    if (EVP_Digest(data, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
        abort();
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

void cm_tls_random(void *out, size_t n)
{
    if (RAND_bytes(out, (int)n) != 1)
        abort();
}

#define RANDOM_RESERVE 1024

static __thread unsigned char rnd_reserve[RANDOM_RESERVE];
static __thread size_t rnd_left;
static pthread_once_t rnd_once = PTHREAD_ONCE_INIT;

static void rnd_forget(void)
{
    rnd_left = 0;
}

static void rnd_register(void)
{
    if (pthread_atfork(NULL, NULL, rnd_forget) != 0)
        abort();
}

void cm_tls_random_reserve(void *out, size_t n)
{
    pthread_once(&rnd_once, rnd_register);
    if (n > RANDOM_RESERVE) {
        cm_tls_random(out, n);
        return;
    }
    if (rnd_left < n) {
        cm_tls_random(rnd_reserve, RANDOM_RESERVE);
        rnd_left = RANDOM_RESERVE;
    }
    unsigned char *from = rnd_reserve + RANDOM_RESERVE - rnd_left;
    memcpy(out, from, n);
    OPENSSL_cleanse(from, n);
    rnd_left -= n;
}

double cm_tls_server_not_after(const cm_tls_ctx_t *ctx)
{
    SSL_CTX *sc = (SSL_CTX *)ctx;
    certs_t *c = sc && certs_idx >= 0 ? SSL_CTX_get_ex_data(sc, certs_idx) : NULL;
    if (c == NULL)
        return 0;
    double t = 0;
    struct tm tm;
    pthread_mutex_lock(&c->mu);
    const X509 *cert = c->cert ? c->cert : SSL_CTX_get0_certificate(sc);
    if (cert && ASN1_TIME_to_tm(X509_get0_notAfter(cert), &tm) == 1)
        t = (double)timegm(&tm);
    pthread_mutex_unlock(&c->mu);
    return t;
}

void cm_tls_server_counts(const cm_tls_ctx_t *ctx, long *handshakes, long *resumed)
{
    /* The SSL_CTX_sess_* macros take a non-const context; they only read counters. */
    SSL_CTX *c = (SSL_CTX *)ctx;
    *handshakes = c ? SSL_CTX_sess_accept_good(c) : 0;
    *resumed = c ? SSL_CTX_sess_hits(c) : 0;
}
