/*
 * Fuzz target: cm_jwt_verify and cm_jwt_inspect on arbitrary tokens against a fixed key.
 * Nothing but a token signed by that key may ever verify; the fuzzer has no key, so every
 * input must be refused (and nothing may crash or leak). cm_jwt_inspect makes the same
 * checks but the signature's: it never answers "bad signature", and where verification
 * refused a token before its signature was looked at, inspection refuses it for the same
 * reason.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_jwt.h"
#include "fuzz_keys.h"

static cm_jwt_keyset_t *keys;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (keys == NULL)
        keys = fuzz_keyset(NULL);
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
