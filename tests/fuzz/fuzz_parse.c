/*
 * Fuzz target: every pure parser of cm_parse on arbitrary bytes. Properties checked
 * beyond "no crash": base64url round-trips, RFC 3339 output parses back to the same
 * instant, accepted identifiers are 1-64 characters of the allowed set.
 */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';

    if (cm_parse_ident_n(s, size)) {
        CHECK(size >= 1 && size <= CM_IDENT_MAX);
        CHECK(strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
              size);
    }
    (void)cm_parse_idem_key(s);
    int64_t ms, back;
    if (cm_parse_rfc3339(s, &ms) == 0 && ms > -62135596800000LL && ms < 253402300799000LL) {
        char out[32];
        size_t n = cm_format_rfc3339(ms, out, sizeof(out));
        CHECK(n > 0);
        CHECK(cm_parse_rfc3339(out, &back) == 0 && back == ms);
    }
    int64_t v;
    if (cm_parse_i64(s, -1000, 1000, &v) == 0)
        CHECK(v >= -1000 && v <= 1000);
    bool b = false;
    if (cm_parse_bool(s, &b) == 0)
        CHECK(b == true || b == false);
    size_t tlen = 0;
    const char *tok = cm_parse_bearer(s, &tlen);
    if (tok)
        CHECK(tok >= s && tok + tlen <= s + size);

    unsigned char *dec = malloc(size + 1);
    long dn = cm_base64url_decode(s, size, dec, size + 1);
    if (dn >= 0) {
        char *enc = malloc(4 * ((size_t)dn / 3 + 1) + 1);
        size_t en = cm_base64url_encode(dec, (size_t)dn, enc);
        CHECK(en == size && memcmp(enc, s, size) == 0);
        free(enc);
    }
    free(dec);
    free(s);
    return 0;
}
