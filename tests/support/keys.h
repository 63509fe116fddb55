/*
 * keys — P-256 key fixtures for the unit tests: a fresh key with its public point and
 * RFC 7638 thumbprint in base64url, ES256 signatures and compact JWS made here with
 * OpenSSL (independently of cm_jwt, which the tests check), and PEM texts of a key.
 * Failures are cmocka assertions. Any thread.
 */
#ifndef TEST_SUPPORT_KEYS_H
#define TEST_SUPPORT_KEYS_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct tkey {
    EVP_PKEY *pk;               /* owned: EVP_PKEY_free(k.pk) when done */
    char x[44], y[44], jkt[44]; /* base64url of the point's x, y and of the thumbprint */
} tkey_t;

/** A new P-256 key in k. */
void tkey_new(tkey_t *k);

/** ES256 over input by k, JOSE form (base64url of R || S), into sig (at least 87 bytes). */
void tkey_es256(const tkey_t *k, const char *input, char *sig);

/** A compact JWS of header and claims (JSON texts) signed by k, into out (outlen bytes). */
void tkey_jws(const tkey_t *k, const char *header, const char *claims, char *out, size_t outlen);

/** pk as PEM: the private key (PKCS#8) or the public key (SPKI). Heap, free(). */
char *tkey_pem(EVP_PKEY *pk, bool private_key);

/** A new P-256 private key as PEM (the key itself is not kept). Heap, free(). */
char *tkey_new_pem(void);

#endif
