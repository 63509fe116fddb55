/*
 * keys — see keys.h. The thumbprint and the signatures are computed here the long way
 * (OpenSSL's EC parameters, DER ECDSA converted to R || S) so the code under test is
 * checked against an independent computation.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "keys.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_parse.h"

void tkey_new(tkey_t *k)
{
    k->pk = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(k->pk);
    BIGNUM *x = NULL, *y = NULL;
    unsigned char bx[32], by[32];
    assert_int_equal(EVP_PKEY_get_bn_param(k->pk, OSSL_PKEY_PARAM_EC_PUB_X, &x), 1);
    assert_int_equal(EVP_PKEY_get_bn_param(k->pk, OSSL_PKEY_PARAM_EC_PUB_Y, &y), 1);
    BN_bn2binpad(x, bx, 32);
    BN_bn2binpad(y, by, 32);
    BN_free(x);
    BN_free(y);
    cm_base64url_encode(bx, 32, k->x);
    cm_base64url_encode(by, 32, k->y);
    /* RFC 7638: the required members in lexicographic order, no white space */
    char canon[200];
    unsigned char d[32];
    unsigned int dlen;
    int n = snprintf(canon, sizeof(canon),
                     "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"%s\",\"y\":\"%s\"}", k->x, k->y);
    EVP_Digest(canon, (size_t)n, d, &dlen, EVP_sha256(), NULL);
    cm_base64url_encode(d, 32, k->jkt);
}

void tkey_es256(const tkey_t *k, const char *input, char *sig)
{
    unsigned char der[80], raw[64];
    size_t derlen = sizeof(der);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k->pk), 1);
    assert_int_equal(EVP_DigestSign(md, der, &derlen, (const unsigned char *)input, strlen(input)),
                     1);
    EVP_MD_CTX_free(md);
    const unsigned char *p = der;
    ECDSA_SIG *s = d2i_ECDSA_SIG(NULL, &p, (long)derlen);
    BN_bn2binpad(ECDSA_SIG_get0_r(s), raw, 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(s), raw + 32, 32);
    ECDSA_SIG_free(s);
    cm_base64url_encode(raw, 64, sig);
}

void tkey_jws(const tkey_t *k, const char *header, const char *claims, char *out, size_t outlen)
{
    char h[600], c[900], input[1600], sig[90];
    cm_base64url_encode((const unsigned char *)header, strlen(header), h);
    cm_base64url_encode((const unsigned char *)claims, strlen(claims), c);
    snprintf(input, sizeof(input), "%s.%s", h, c);
    tkey_es256(k, input, sig);
    snprintf(out, outlen, "%s.%s", input, sig);
}

char *tkey_pem(EVP_PKEY *pk, bool private_key)
{
    BIO *bio = BIO_new(BIO_s_mem());
    char *data;
    assert_non_null(bio);
    assert_int_equal(private_key ? PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL)
                                 : PEM_write_bio_PUBKEY(bio, pk),
                     1);
    long n = BIO_get_mem_data(bio, &data);
    char *out = malloc((size_t)n + 1); /* BIO memory is not NUL-terminated */
    assert_non_null(out);
    memcpy(out, data, (size_t)n);
    out[n] = '\0';
    BIO_free(bio);
    return out;
}

char *tkey_new_pem(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    char *pem = tkey_pem(k, true);
    EVP_PKEY_free(k);
    return pem;
}
