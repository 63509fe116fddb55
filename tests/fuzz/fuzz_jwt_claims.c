/*
 * Fuzz target: the claims of a token whose header is ours. The input is the claims
 * segment's bytes (decoded), put between a real header (ES256, the fixed key's kid) and a
 * signature-sized run of zeros, so every input reaches the claim checks that fuzz_jwt's
 * random headers rarely pass. cm_jwt_inspect — which a hold trusts when the token's
 * record proves its bytes (docs/tokens.md) — must never crash, leak or say "bad
 * signature"; verification must refuse every input, and it must refuse for the signature
 * exactly when inspection accepted the token.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_jwt.h"
#include "fuzz_keys.h"
#include "cm_parse.h"

#define MAX_CLAIMS 2048

static cm_jwt_keyset_t *keys;
static char header[128], signature[128];

static void init(void)
{
    keys = fuzz_keyset("k1");
    static const char h[] = "{\"alg\":\"ES256\",\"typ\":\"JWT\",\"kid\":\"k1\"}";
    cm_base64url_encode((const unsigned char *)h, sizeof(h) - 1, header);
    static const unsigned char zeros[64];
    cm_base64url_encode(zeros, sizeof(zeros), signature);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (keys == NULL)
        init();
    if (size > MAX_CLAIMS)
        return 0;
    static char token[sizeof(header) + 4 * (MAX_CLAIMS / 3 + 1) + sizeof(signature) + 4];
    size_t n = strlen(header);
    memcpy(token, header, n);
    token[n++] = '.';
    n += cm_base64url_encode(data, size, token + n);
    token[n++] = '.';
    memcpy(token + n, signature, strlen(signature));
    n += strlen(signature);
    static const cm_jwt_policy_t pol = {
        .issuer = "onsale-gateway", .leeway_s = 5, .max_lifetime_s = 86400};
    cm_jwt_claims_t c;
    cm_jwt_result_t ri = cm_jwt_inspect(keys, token, n, &pol, 1800000000, &c);
    CHECK(ri != CM_JWT_BAD_SIGNATURE);
    (void)cm_jwt_result_str(ri);
    cm_jwt_result_t r = cm_jwt_verify(keys, token, n, &pol, 1800000000, &c);
    CHECK(r != CM_JWT_OK && r != CM_JWT_EXPIRED);
    CHECK(ri != CM_JWT_OK || r == CM_JWT_BAD_SIGNATURE);
    CHECK(r == CM_JWT_BAD_SIGNATURE || ri == r);
    return 0;
}
