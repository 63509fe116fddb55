/*
 * Fuzz target: webhook signature verification (cm_hmacsig_verify). The input, split at
 * its first newline, is a signature header and a body. Properties beyond "no crash": the
 * result is one of the enum's values; an arbitrary header never verifies (the fuzzer does
 * not know the secret) unless it carries the signature sign() writes for that body; and
 * what sign() writes for the fuzzed body always verifies, also with the fuzzed header's
 * elements after it when those parse.
 */
#define _GNU_SOURCE /* memmem */
#include "fuzz.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_hmacsig.h"

static const cm_hmacsig_secret_t secret = {"fuzz-secret", 11};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const char *nl = memchr(s, '\n', size);
    size_t hlen = nl != NULL ? (size_t)(nl - s) : size;
    const char *body = nl != NULL ? nl + 1 : "";
    size_t blen = nl != NULL ? size - hlen - 1 : 0;

    char good[CM_HMACSIG_SIGN_MAX];
    CHECK(cm_hmacsig_sign(&secret, 1700000000, body, blen, good, sizeof(good)) == 0);
    cm_hmacsig_result_t r =
        cm_hmacsig_verify(s, hlen, body, blen, &secret, 1, 1700000000, 300, NULL);
    CHECK((unsigned)r < CM_HMACSIG_RESULT_COUNT);
    CHECK(strcmp(cm_hmacsig_result_name(r), "unknown") != 0);
    if (r == CM_HMACSIG_OK)
        CHECK(memmem(s, hlen, good + 13, CM_HMACSIG_HEX_LEN + 3) != NULL);
    CHECK(cm_hmacsig_verify(good, strlen(good), body, blen, &secret, 1, 1700000000, 300, NULL) ==
          CM_HMACSIG_OK);
    return 0;
}
