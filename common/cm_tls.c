/*
 * cm_tls — see cm_tls.h. Start-up only (reads files), before the loop runs.
 */
#include "cm_tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>

static void last_error(const char *what, const char *path, char *err, size_t errlen)
{
    char buf[256];
    unsigned long e = ERR_peek_last_error();
    ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errlen, "%s %s: %s", what, path ? path : "", e ? buf : "failed");
    ERR_clear_error();
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
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_NO_COMPRESSION);
    /* Session tickets stay on (the OpenSSL default): stateless resumption works the
     * same on every gateway process sharing no cache. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        last_error("certificate", cert_file, err, errlen);
        goto err;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        last_error("private key", key_file, err, errlen);
        goto err;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        last_error("key does not match certificate", key_file, err, errlen);
        goto err;
    }
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

void cm_tls_free(cm_tls_ctx_t *ctx)
{
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
