/*
 * Fuzz target: cm_jwt_verify and cm_jwt_inspect on arbitrary tokens against a fixed key.
 * Nothing but a token signed by that key may ever verify; the fuzzer has no key, so every
 * input must be refused (and nothing may crash or leak). cm_jwt_inspect makes the same
 * checks but the signature's: it never answers "bad signature", and where verification
 * refused a token before its signature was looked at, inspection refuses it for the same
 * reason.
 */
#include "fuzz.h"
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_jwt.h"

static cm_jwt_keyset_t *keys;

static void init(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(b, k);
    char *pem = NULL;
    long n = BIO_get_mem_data(b, &pem);
    char err[256];
    keys = cm_jwt_keyset_new();
    if (cm_jwt_keyset_add_pem(keys, NULL, pem, (size_t)n, err, sizeof(err)) != 0)
        abort();
    BIO_free(b);
    EVP_PKEY_free(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (keys == NULL)
        init();
    cm_jwt_claims_t c;
    static const cm_jwt_policy_t pol = {
        .issuer = "onsale-gateway", .leeway_s = 5, .max_lifetime_s = 86400};
    cm_jwt_result_t r = cm_jwt_verify(keys, (const char *)data, size, &pol, 1800000000, &c);
    CHECK(r != CM_JWT_OK && r != CM_JWT_EXPIRED);
    (void)cm_jwt_result_str(r);
    cm_jwt_result_t ri = cm_jwt_inspect(keys, (const char *)data, size, &pol, 1800000000, &c);
    CHECK(ri != CM_JWT_BAD_SIGNATURE);
    CHECK(r == CM_JWT_BAD_SIGNATURE || ri == r);
    return 0;
}
