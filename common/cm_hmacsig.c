/*
 * cm_hmacsig — the timestamped HMAC-SHA256 webhook signature (see cm_hmacsig.h for the
 * scheme). Signing and verifying share one HMAC over "<t>." then the body, fed in two
 * updates so the body is never copied. Verification parses the whole header first and
 * refuses anything outside the grammar before any HMAC is computed; then every v1 is
 * compared with CRYPTO_memcmp against the expected MAC of every secret, so the time taken
 * does not depend on how many leading bytes of a forged signature were right. The
 * timestamp is checked after a match (a replay of a genuine old event is "stale", a forged
 * one "mismatch"), in both directions: a timestamp far in the future is refused too.
 *
 * Pure: OpenSSL's EVP_MAC only, no allocation of ours, any thread.
 */
#include "cm_hmacsig.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#define MAC_LEN 32

static const char *const result_names[CM_HMACSIG_RESULT_COUNT] = {
    [CM_HMACSIG_OK] = "ok",
    [CM_HMACSIG_MALFORMED] = "malformed",
    [CM_HMACSIG_NO_TIMESTAMP] = "no_timestamp",
    [CM_HMACSIG_NO_SIGNATURE] = "no_signature",
    [CM_HMACSIG_MISMATCH] = "mismatch",
    [CM_HMACSIG_STALE] = "stale",
};

const char *cm_hmacsig_result_name(cm_hmacsig_result_t r)
{
    if ((unsigned)r >= CM_HMACSIG_RESULT_COUNT)
        return "unknown";
    return result_names[r];
}

/* HMAC-SHA256(secret, "<t>." || body) into mac. */
static int mac_of(const cm_hmacsig_secret_t *secret, int64_t t, const void *body, size_t body_len,
                  unsigned char mac[MAC_LEN])
{
    char prefix[24];
    int plen = snprintf(prefix, sizeof(prefix), "%lld.", (long long)t);
    EVP_MAC *alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = alg != NULL ? EVP_MAC_CTX_new(alg) : NULL;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    size_t out_len = 0;
    int rc = -1;
    /* HMAC with an empty key is well defined, but EVP_MAC_init wants a non-NULL pointer. */
    static const unsigned char empty_key[1];
    const unsigned char *key = secret->len > 0 ? secret->key : empty_key;
    if (ctx == NULL || plen <= 0 || !EVP_MAC_init(ctx, key, secret->len, params))
        goto out;
    if (!EVP_MAC_update(ctx, (const unsigned char *)prefix, (size_t)plen))
        goto out;
    if (body_len > 0 && !EVP_MAC_update(ctx, body, body_len))
        goto out;
    if (!EVP_MAC_final(ctx, mac, &out_len, MAC_LEN) || out_len != MAC_LEN)
        goto out;
    rc = 0;
out:
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(alg);
    return rc;
}

int cm_hmacsig_sign(const cm_hmacsig_secret_t *secret, int64_t t, const void *body, size_t body_len,
                    char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char mac[MAC_LEN];
    char sig[CM_HMACSIG_HEX_LEN + 1];
    if (t < 0 || mac_of(secret, t, body, body_len, mac) != 0)
        return -1;
    for (size_t i = 0; i < MAC_LEN; i++) {
        sig[2 * i] = hex[mac[i] >> 4];
        sig[2 * i + 1] = hex[mac[i] & 0xf];
    }
    sig[CM_HMACSIG_HEX_LEN] = '\0';
    int n = snprintf(out, outlen, "t=%lld,v1=%s", (long long)t, sig);
    OPENSSL_cleanse(mac, sizeof(mac));
    return n > 0 && (size_t)n < outlen ? 0 : -1;
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* What the parse found: the timestamp and the decoded v1 signatures. */
typedef struct parsed {
    int64_t t;
    bool have_t;
    size_t nv1;
    unsigned char v1[CM_HMACSIG_V1_MAX][MAC_LEN];
} parsed_t;

static cm_hmacsig_result_t take_t(parsed_t *p, const char *v, size_t n)
{
    if (p->have_t || n < 1 || n > 18)
        return CM_HMACSIG_NO_TIMESTAMP;
    int64_t t = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return CM_HMACSIG_NO_TIMESTAMP;
        t = t * 10 + (v[i] - '0');
    }
    p->t = t;
    p->have_t = true;
    return CM_HMACSIG_OK;
}

static cm_hmacsig_result_t take_v1(parsed_t *p, const char *v, size_t n)
{
    if (n != CM_HMACSIG_HEX_LEN)
        return CM_HMACSIG_NO_SIGNATURE;
    if (p->nv1 == CM_HMACSIG_V1_MAX)
        return CM_HMACSIG_MALFORMED;
    for (size_t i = 0; i < MAC_LEN; i++) {
        int hi = hex_val(v[2 * i]), lo = hex_val(v[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return CM_HMACSIG_NO_SIGNATURE;
        p->v1[p->nv1][i] = (unsigned char)(hi << 4 | lo);
    }
    p->nv1++;
    return CM_HMACSIG_OK;
}

/* One element "key=value" of n bytes. */
static cm_hmacsig_result_t take_element(parsed_t *p, const char *e, size_t n)
{
    const char *eq = memchr(e, '=', n);
    if (eq == NULL || eq == e || eq == e + n - 1)
        return CM_HMACSIG_MALFORMED;
    size_t klen = (size_t)(eq - e), vlen = n - klen - 1;
    for (size_t i = 0; i < klen; i++)
        if (!((e[i] >= 'a' && e[i] <= 'z') || (e[i] >= '0' && e[i] <= '9')))
            return CM_HMACSIG_MALFORMED;
    for (size_t i = 0; i < vlen; i++)
        if (eq[1 + i] <= ' ' || eq[1 + i] > '~')
            return CM_HMACSIG_MALFORMED;
    if (klen == 1 && e[0] == 't')
        return take_t(p, eq + 1, vlen);
    if (klen == 2 && e[0] == 'v' && e[1] == '1')
        return take_v1(p, eq + 1, vlen);
    return CM_HMACSIG_OK; /* another scheme (v0): not ours to check */
}

static cm_hmacsig_result_t parse(const char *h, size_t len, parsed_t *p)
{
    if (h == NULL || len == 0 || len > CM_HMACSIG_HEADER_MAX)
        return CM_HMACSIG_MALFORMED;
    const char *end = h + len;
    while (h <= end) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *stop = comma != NULL ? comma : end;
        if (stop == h)
            return CM_HMACSIG_MALFORMED; /* empty element: ",," or a trailing comma */
        cm_hmacsig_result_t r = take_element(p, h, (size_t)(stop - h));
        if (r != CM_HMACSIG_OK)
            return r;
        if (comma == NULL)
            break;
        h = comma + 1;
    }
    if (!p->have_t)
        return CM_HMACSIG_NO_TIMESTAMP;
    if (p->nv1 == 0)
        return CM_HMACSIG_NO_SIGNATURE;
    return CM_HMACSIG_OK;
}

cm_hmacsig_result_t cm_hmacsig_verify(const char *header, size_t header_len, const void *body,
                                      size_t body_len, const cm_hmacsig_secret_t *secrets,
                                      size_t nsecrets, int64_t now, int64_t tolerance_s,
                                      size_t *which)
{
    parsed_t p = {0};
    cm_hmacsig_result_t r = parse(header, header_len, &p);
    if (r != CM_HMACSIG_OK)
        return r;
    bool matched = false;
    size_t first = 0;
    for (size_t s = 0; s < nsecrets; s++) {
        unsigned char mac[MAC_LEN];
        if (mac_of(&secrets[s], p.t, body, body_len, mac) != 0)
            continue;
        for (size_t i = 0; i < p.nv1; i++) {
            if (CRYPTO_memcmp(mac, p.v1[i], MAC_LEN) == 0 && !matched) {
                matched = true;
                first = s;
            }
        }
        OPENSSL_cleanse(mac, sizeof(mac));
    }
    if (!matched)
        return CM_HMACSIG_MISMATCH;
    int64_t age = now - p.t;
    if (tolerance_s < 0 || age > tolerance_s || age < -tolerance_s)
        return CM_HMACSIG_STALE;
    if (which != NULL)
        *which = first;
    return CM_HMACSIG_OK;
}
