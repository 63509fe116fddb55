/*
 * Shared by the JWT fuzz targets: a keyset holding the public half of one fresh P-256
 * key, under kid (NULL: its thumbprint). The fuzzer never sees the private half.
 */
#ifndef ONSALE_FUZZ_KEYS_H
#define ONSALE_FUZZ_KEYS_H

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdlib.h>

#include "cm_jwt.h"

static cm_jwt_keyset_t *fuzz_keyset(const char *kid)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(b, k);
    char *pem = NULL;
    long n = BIO_get_mem_data(b, &pem);
    char err[256];
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (cm_jwt_keyset_add_pem(ks, kid, pem, (size_t)n, err, sizeof(err)) != 0)
        abort();
    BIO_free(b);
    EVP_PKEY_free(k);
    return ks;
}

#endif
