/*
 * Unit tests for common/cm_jwt.c: ES256 round trips and every way a forged, damaged or
 * misdirected admission token must be refused (docs/design.md invariant 9). Keys are made
 * at run time; hostile tokens are hand-built here with OpenSSL so the test does not
 * depend on the code under test to craft its own attacks. The HS256-with-public-key
 * test first checks its forgery is a correct HMAC keyed with the public PEM (what a
 * verifier trusting the header would accept), so the rejection cannot pass vacuously.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_jwt.h"
#include "cm_parse.h"
#include "keys.h"

#define NOW 1800000000LL
#define AUD CM_JWT_AUDIENCE

typedef struct fixture {
    EVP_PKEY *key, *other;
    char *priv_pem, *pub_pem, *other_priv_pem, *other_pub_pem;
    cm_jwt_signer_t *signer;
    cm_jwt_keyset_t *ks; /* holds the public half of key only */
    char err[256];
} fixture_t;

/* ---- helpers: keys and hand-made tokens ---- */

static char *b64(const void *data, size_t n)
{
    char *out = malloc(4 * (n / 3 + 1) + 1);
    cm_base64url_encode(data, n, out);
    return out;
}

/* "b64(header).b64(payload)" */
static char *signing_input(const char *header, const char *payload)
{
    char *h = b64(header, strlen(header)), *p = b64(payload, strlen(payload));
    char *out = malloc(strlen(h) + strlen(p) + 2);
    sprintf(out, "%s.%s", h, p);
    free(h);
    free(p);
    return out;
}

static char *join_sig(char *input, const unsigned char *sig, size_t siglen)
{
    char *s = b64(sig, siglen);
    char *out = malloc(strlen(input) + strlen(s) + 2);
    sprintf(out, "%s.%s", input, s);
    free(s);
    free(input);
    return out;
}

/* A correctly ES256-signed token (JOSE raw R||S) over exactly these JSON texts. */
static char *craft_es256(EVP_PKEY *pk, const char *header, const char *payload)
{
    char *input = signing_input(header, payload);
    unsigned char der[80], raw[64];
    size_t derlen = sizeof(der);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pk), 1);
    assert_int_equal(EVP_DigestSign(md, der, &derlen, (unsigned char *)input, strlen(input)), 1);
    EVP_MD_CTX_free(md);
    const unsigned char *p = der;
    ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, (long)derlen);
    assert_non_null(sig);
    assert_int_equal(BN_bn2binpad(ECDSA_SIG_get0_r(sig), raw, 32), 32);
    assert_int_equal(BN_bn2binpad(ECDSA_SIG_get0_s(sig), raw + 32, 32), 32);
    ECDSA_SIG_free(sig);
    return join_sig(input, raw, sizeof(raw));
}

static char *craft_hs256(const char *secret, size_t secret_len, const char *header,
                         const char *payload)
{
    char *input = signing_input(header, payload);
    unsigned char mac[32];
    unsigned int maclen = 0;
    assert_non_null(HMAC(EVP_sha256(), secret, (int)secret_len, (unsigned char *)input,
                         strlen(input), mac, &maclen));
    return join_sig(input, mac, maclen);
}

static char *header_for(const fixture_t *f, const char *alg)
{
    static char buf[256];
    snprintf(buf, sizeof(buf), "{\"alg\":\"%s\",\"typ\":\"JWT\",\"kid\":\"%s\"}", alg,
             cm_jwt_signer_kid(f->signer));
    return buf;
}

static const char good_payload[] =
    "{\"iss\":\"onsale-gw\",\"aud\":\"onsale-reserve\",\"sub\":\"v-1\",\"evt\":\"e1\","
    "\"jti\":\"j-1\",\"iat\":1799999990,\"nbf\":1799999990,\"exp\":1800000600}";

/* cm_jwt_verify with a policy of audience and leeway only (no issuer, no lifetime cap). */
static cm_jwt_result_t verify_with(const cm_jwt_keyset_t *ks, const char *tok, size_t len,
                                   const char *aud, int64_t now, int64_t leeway, cm_jwt_claims_t *c)
{
    cm_jwt_policy_t pol = {.audience = aud, .leeway_s = leeway};
    return cm_jwt_verify(ks, tok, len, &pol, now, c);
}

static cm_jwt_result_t verify(const fixture_t *f, const char *tok, cm_jwt_claims_t *c)
{
    return verify_with(f->ks, tok, strlen(tok), AUD, NOW, 0, c);
}

static cm_jwt_claims_t sample_claims(void)
{
    cm_jwt_claims_t c = {.iat = NOW - 10, .nbf = NOW - 10, .exp = NOW + 600};
    strcpy(c.iss, "onsale-gw");
    strcpy(c.sub, "visitor-42");
    strcpy(c.evt, "e1");
    strcpy(c.jti, "0123456789abcdef0123456789abcdef");
    return c;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->key = EVP_EC_gen("P-256");
    f->other = EVP_EC_gen("P-256");
    if (f->key == NULL || f->other == NULL)
        return -1;
    f->priv_pem = tkey_pem(f->key, true);
    f->pub_pem = tkey_pem(f->key, false);
    f->other_priv_pem = tkey_pem(f->other, true);
    f->other_pub_pem = tkey_pem(f->other, false);
    f->signer = cm_jwt_signer_new(NULL, f->priv_pem, strlen(f->priv_pem), f->err, sizeof(f->err));
    f->ks = cm_jwt_keyset_new();
    if (f->signer == NULL || cm_jwt_keyset_add_pem(f->ks, NULL, f->pub_pem, strlen(f->pub_pem),
                                                   f->err, sizeof(f->err)) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cm_jwt_keyset_free(f->ks);
    cm_jwt_signer_free(f->signer);
    free(f->priv_pem);
    free(f->pub_pem);
    free(f->other_priv_pem);
    free(f->other_pub_pem);
    EVP_PKEY_free(f->key);
    EVP_PKEY_free(f->other);
    free(f);
    return 0;
}

/* ---- tests ---- */

static void test_round_trip(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), out;
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_non_null(tok);
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_string_equal(out.iss, in.iss);
    assert_string_equal(out.sub, in.sub);
    assert_string_equal(out.evt, in.evt);
    assert_string_equal(out.jti, in.jti);
    assert_string_equal(out.kid, cm_jwt_signer_kid(f->signer));
    assert_int_equal(out.iat, in.iat);
    assert_int_equal(out.nbf, in.nbf);
    assert_int_equal(out.exp, in.exp);

    /* JOSE form: the signature segment is 64 raw bytes (R||S), not DER */
    const char *sig = strrchr(tok, '.') + 1;
    unsigned char raw[128];
    assert_int_equal(cm_base64url_decode(sig, strlen(sig), raw, sizeof(raw)), 64);

    /* the header says ES256 and carries the signer's kid */
    unsigned char hdr[256] = {0};
    long hlen = cm_base64url_decode(tok, (size_t)(strchr(tok, '.') - tok), hdr, sizeof(hdr) - 1);
    assert_true(hlen > 0);
    assert_non_null(strstr((char *)hdr, "\"alg\":\"ES256\""));
    assert_non_null(strstr((char *)hdr, cm_jwt_signer_kid(f->signer)));

    /* length-delimited: trailing bytes beyond len are not part of the token */
    size_t n = strlen(tok);
    char *padded = malloc(n + 8);
    memcpy(padded, tok, n);
    memcpy(padded + n, "garbage", 8);
    assert_int_equal(verify_with(f->ks, padded, n, AUD, NOW, 0, &out), CM_JWT_OK);
    free(padded);

    /* a token signed with a custom audience verifies only against that audience */
    char *tok2 = cm_jwt_sign(f->signer, &in, "other-service");
    assert_int_equal(verify_with(f->ks, tok2, strlen(tok2), "other-service", NOW, 0, &out),
                     CM_JWT_OK);
    assert_int_equal(verify(f, tok2, &out), CM_JWT_BAD_AUDIENCE);
    free(tok2);
    free(tok);

    /* the claims a token must carry are required when signing too */
    in.sub[0] = '\0';
    assert_null(cm_jwt_sign(f->signer, &in, AUD));
}

/* cnf.jkt (RFC 9449): written when set, read back; absent otherwise; a malformed cnf makes
 * the token malformed. The thumbprint helper agrees with the keyset's default kid. */
static void test_cnf_jkt(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), out;
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_string_equal(out.cnf_jkt, "");
    free(tok);
    snprintf(in.cnf_jkt, sizeof(in.cnf_jkt), "%s", "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I");
    tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_string_equal(out.cnf_jkt, in.cnf_jkt);
    unsigned char payload[1024] = {0};
    const char *p1 = strchr(tok, '.') + 1, *p2 = strchr(p1, '.');
    assert_true(cm_base64url_decode(p1, (size_t)(p2 - p1), payload, sizeof(payload) - 1) > 0);
    assert_non_null(strstr((char *)payload, "\"cnf\":{\"jkt\":\"0ZcOCORZNYy"));
    free(tok);
    /* the thumbprint of the signer's key is its default kid (both RFC 7638) */
    char *jwks = cm_jwt_keyset_jwks(f->ks), x[44] = "", y[44] = "", jkt[44];
    const char *xp = strstr(jwks, "\"x\":\""), *yp = strstr(jwks, "\"y\":\"");
    memcpy(x, xp + 5, 43);
    memcpy(y, yp + 5, 43);
    assert_int_equal(cm_jwt_jwk_thumbprint(x, y, jkt), 0);
    assert_string_equal(jkt, cm_jwt_signer_kid(f->signer));
    assert_int_equal(cm_jwt_jwk_thumbprint("short", y, jkt), -1);
    free(jwks);
}

static void test_hand_crafted_es256_accepted(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *tok = craft_es256(f->key, header_for(f, "ES256"), good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_OK);
    assert_string_equal(c.sub, "v-1");
    free(tok);
    /* aud may be an array containing the audience */
    tok = craft_es256(f->key, header_for(f, "ES256"),
                      "{\"aud\":[\"x\",\"onsale-reserve\"],\"sub\":\"v\",\"evt\":\"e\","
                      "\"jti\":\"j\",\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_OK);
    assert_int_equal(c.iat, 0);
    assert_string_equal(c.iss, "");
    free(tok);
    tok = craft_es256(f->key, header_for(f, "ES256"),
                      "{\"aud\":[\"x\",\"y\"],\"sub\":\"v\",\"evt\":\"e\","
                      "\"jti\":\"j\",\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_AUDIENCE);
    free(tok);
    /* with no kid and exactly one key, that key is used */
    tok = craft_es256(f->key, "{\"alg\":\"ES256\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_OK);
    assert_string_equal(c.kid, cm_jwt_signer_kid(f->signer));
    free(tok);
}

static void test_alg_none(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *input = signing_input("{\"alg\":\"none\",\"typ\":\"JWT\"}", good_payload);
    char *tok = malloc(strlen(input) + 2);
    sprintf(tok, "%s.", input);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    assert_string_equal(c.sub, "");
    free(tok);
    free(input);

    /* naming our key and carrying a real-looking signature changes nothing */
    input = signing_input(header_for(f, "none"), good_payload);
    tok = malloc(strlen(input) + 2);
    sprintf(tok, "%s.", input);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    free(tok);
    free(input);
    tok = craft_es256(f->key, header_for(f, "none"), good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    free(tok);

    /* near misses of the one accepted spelling */
    const char *algs[] = {"NONE", "es256", "ES256 ", "ES384", "RS256", "PS256", "EdDSA", ""};
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        tok = craft_es256(f->key, header_for(f, algs[i]), good_payload);
        if (verify(f, tok, &c) != CM_JWT_BAD_ALG)
            fail_msg("alg '%s' not refused as bad_alg", algs[i]);
        free(tok);
    }
    tok = craft_es256(f->key, "{\"typ\":\"JWT\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    free(tok);
    tok = craft_es256(f->key, "{\"alg\":[\"ES256\"]}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    free(tok);
}

static void test_hs256_with_public_key(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *tok = craft_hs256(f->pub_pem, strlen(f->pub_pem), header_for(f, "HS256"), good_payload);

    /* the forgery is real: the MAC keyed with the public PEM checks out */
    const char *dot = strrchr(tok, '.');
    unsigned char mac[32], got[32];
    unsigned int maclen = 0;
    assert_non_null(HMAC(EVP_sha256(), f->pub_pem, (int)strlen(f->pub_pem),
                         (const unsigned char *)tok, (size_t)(dot - tok), mac, &maclen));
    assert_int_equal(cm_base64url_decode(dot + 1, strlen(dot + 1), got, sizeof(got)), 32);
    assert_memory_equal(mac, got, 32);

    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_ALG);
    assert_string_equal(c.sub, "");
    free(tok);
}

static void test_other_key(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    /* signed by another key but claiming ours */
    char *tok = craft_es256(f->other, header_for(f, "ES256"), good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_SIGNATURE);
    assert_string_equal(c.sub, "");
    free(tok);
    /* signed by another key under its own kid */
    cm_jwt_signer_t *s2 =
        cm_jwt_signer_new(NULL, f->other_priv_pem, strlen(f->other_priv_pem), f->err, 256);
    assert_non_null(s2);
    assert_string_not_equal(cm_jwt_signer_kid(s2), cm_jwt_signer_kid(f->signer));
    cm_jwt_claims_t in = sample_claims();
    tok = cm_jwt_sign(s2, &in, AUD);
    assert_int_equal(verify(f, tok, &c), CM_JWT_UNKNOWN_KID);
    free(tok);
    /* with no kid, the only key is tried, and fails */
    tok = craft_es256(f->other, "{\"alg\":\"ES256\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_SIGNATURE);
    free(tok);
    cm_jwt_signer_free(s2);
}

static void test_time(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), c;
    in.exp = NOW - 100;
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW, 30, &c), CM_JWT_EXPIRED);
    /* expired tokens still report who they were for */
    assert_string_equal(c.sub, in.sub);
    assert_string_equal(c.evt, in.evt);
    assert_string_equal(c.jti, in.jti);
    assert_int_equal(c.exp, NOW - 100);
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW, 101, &c), CM_JWT_OK);
    free(tok);

    in.exp = NOW; /* exp is the first instant the token is no longer valid */
    tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_EXPIRED);
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW - 1, 0, &c), CM_JWT_OK);
    free(tok);

    in = sample_claims();
    in.nbf = NOW + 60;
    tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW, 30, &c), CM_JWT_NOT_YET_VALID);
    assert_string_equal(c.sub, "");
    assert_int_equal(verify_with(f->ks, tok, strlen(tok), AUD, NOW, 60, &c), CM_JWT_OK);
    free(tok);

    /* exp is required */
    tok = craft_es256(f->key, header_for(f, "ES256"),
                      "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\"}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_MALFORMED);
    free(tok);
}

static void test_wrong_audience(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), c;
    char *tok = cm_jwt_sign(f->signer, &in, "onsale-gateway");
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_AUDIENCE);
    assert_string_equal(c.sub, "");
    free(tok);
    tok = craft_es256(f->key, header_for(f, "ES256"),
                      "{\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_AUDIENCE);
    free(tok);
    tok = craft_es256(f->key, header_for(f, "ES256"),
                      "{\"aud\":\"onsale-reserve-x\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\","
                      "\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_AUDIENCE);
    free(tok);
}

/* rid (docs/tokens.md): written when set and read back; absent otherwise. It is advisory:
 * a value that is not a sane request id (wrong type, empty, too long, other characters) is
 * ignored and the token still verifies. */
static void test_rid(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), out;
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_string_equal(out.rid, "");
    free(tok);
    snprintf(in.rid, sizeof(in.rid), "%s", "poll-7f3a.b_c");
    tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_string_equal(out.rid, "poll-7f3a.b_c");
    free(tok);
    const char *bad[] = {
        "\"rid\":7,",
        "\"rid\":\"has space\",",
        "\"rid\":\"\",",
        "\"rid\":\"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\",",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char payload[512];
        snprintf(payload, sizeof(payload),
                 "{%s\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\","
                 "\"exp\":1800000600}",
                 bad[i]);
        tok = craft_es256(f->key, header_for(f, "ES256"), payload);
        cm_jwt_result_t r = verify(f, tok, &out);
        if (r != CM_JWT_OK)
            fail_msg("rid %zu: %s instead of ok", i, cm_jwt_result_str(r));
        assert_string_equal(out.rid, "");
        assert_string_equal(out.sub, "v");
        free(tok);
    }
    /* 64 characters is the longest id, and is kept */
    tok =
        craft_es256(f->key, header_for(f, "ES256"),
                    "{\"rid\":\"rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr\","
                    "\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\","
                    "\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &out), CM_JWT_OK);
    assert_int_equal(strlen(out.rid), 64);
    free(tok);
}

static void test_missing_or_bad_claims(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    const char *payloads[] = {
        /* missing sub, evt, jti; empty sub; wrong types; oversized evt; duplicate claim */
        "{\"aud\":\"onsale-reserve\",\"evt\":\"e\",\"jti\":\"j\",\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"jti\":\"j\",\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"\",\"evt\":\"e\",\"jti\":\"j\",\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":7,\"evt\":\"e\",\"jti\":\"j\",\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"exp\":"
        "\"1800000600\"}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"exp\":1.8e9}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"iat\":\"x\","
        "\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"iss\":[],"
        "\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":"
        "\"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee\",\"jti\":\"j\","
        "\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"sub\":\"w\",\"evt\":\"e\",\"jti\":\"j\","
        "\"exp\":1800000600}",
        "{\"aud\":\"onsale-reserve\",\"sub\":\"v\\u0000w\",\"evt\":\"e\",\"jti\":\"j\","
        "\"exp\":1800000600}",
        "[\"not an object\"]",
    };
    for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
        char *tok = craft_es256(f->key, header_for(f, "ES256"), payloads[i]);
        cm_jwt_result_t r = verify(f, tok, &c);
        if (r != CM_JWT_MALFORMED)
            fail_msg("payload %zu: %s instead of malformed", i, cm_jwt_result_str(r));
        assert_string_equal(c.evt, "");
        free(tok);
    }
    /* a 64-character event id is the longest that fits, and is accepted */
    char *tok = craft_es256(f->key, header_for(f, "ES256"),
                            "{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":"
                            "\"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee\","
                            "\"jti\":\"j\",\"exp\":1800000600}");
    assert_int_equal(verify(f, tok, &c), CM_JWT_OK);
    assert_int_equal(strlen(c.evt), 64);
    free(tok);
}

static void test_garbage(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *valid_in = signing_input(header_for(f, "ES256"), good_payload);
    char *dup_hdr = signing_input("{\"alg\":\"ES256\",\"alg\":\"ES256\"}", good_payload);
    char *bad_json = signing_input("{\"alg\":\"ES256\"", good_payload);
    char *arr_hdr = signing_input("[\"ES256\"]", good_payload);
    char *bad_payload = signing_input(header_for(f, "ES256"), "{\"sub\":");
    char *kid_int = signing_input("{\"alg\":\"ES256\",\"kid\":5}", good_payload);
    char *crit =
        signing_input("{\"alg\":\"ES256\",\"crit\":[\"b64\"],\"b64\":false}", good_payload);
    char extra[8192];
    const char *garbage[] = {
        "",
        "abc",
        "a.b",
        "..",
        "...",
        "a.b.c",
        "a.b.c.d",
        "eyJhbGciOiJFUzI1NiJ9",
        "eyJhbGciOiJFUzI1NiJ9..sig",
        ".eyJzdWIiOiJ4In0.sig",
        "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0=.sig",
        "eyJhbGciOiJFUzI1NiJ9.eyJzd+IiOiJ4In0.sig",
        "Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.sig",
        "\xff\xfe.\x01.\x02",
        dup_hdr,
        bad_json,
        arr_hdr,
        bad_payload,
        kid_int,
        crit,
        extra,
    };
    snprintf(extra, sizeof(extra), "%s.sig.more", valid_in);
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        cm_jwt_result_t r = verify(f, garbage[i], &c);
        if (r != CM_JWT_MALFORMED)
            fail_msg("garbage %zu: %s instead of malformed", i, cm_jwt_result_str(r));
    }
    /* an embedded NUL, and length bounds */
    char tok[] = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIi\0iJ4In0.sig";
    assert_int_equal(verify_with(f->ks, tok, sizeof(tok) - 1, AUD, NOW, 0, &c), CM_JWT_MALFORMED);
    assert_int_equal(verify_with(f->ks, NULL, 0, AUD, NOW, 0, &c), CM_JWT_MALFORMED);
    char *huge = malloc(5001);
    memset(huge, 'A', 5000);
    huge[5000] = '\0';
    huge[100] = huge[200] = '.';
    assert_int_equal(verify_with(f->ks, huge, 5000, AUD, NOW, 0, &c), CM_JWT_MALFORMED);
    free(huge);
    /* a valid token padded past the bound is refused before any crypto */
    cm_jwt_claims_t in = sample_claims();
    char *good = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(f->ks, good, 4097, AUD, NOW, 0, &c), CM_JWT_MALFORMED);
    free(good);
    free(valid_in);
    free(dup_hdr);
    free(bad_json);
    free(arr_hdr);
    free(bad_payload);
    free(kid_int);
    free(crit);
}

static void test_tampered(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), c;
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    size_t n = strlen(tok);
    /* truncated signature, by one character and by half */
    assert_int_equal(verify_with(f->ks, tok, n - 1, AUD, NOW, 0, &c), CM_JWT_BAD_SIGNATURE);
    assert_int_equal(verify_with(f->ks, tok, n - 43, AUD, NOW, 0, &c), CM_JWT_BAD_SIGNATURE);
    /* signature cut off entirely */
    size_t upto = (size_t)(strrchr(tok, '.') - tok) + 1;
    assert_int_equal(verify_with(f->ks, tok, upto, AUD, NOW, 0, &c), CM_JWT_BAD_SIGNATURE);
    /* one flipped signature bit */
    char *flip = strdup(tok);
    flip[n - 10] = flip[n - 10] == 'A' ? 'B' : 'A';
    assert_int_equal(verify(f, flip, &c), CM_JWT_BAD_SIGNATURE);
    free(flip);
    /* the payload swapped for another visitor's, signature kept */
    in = sample_claims();
    strcpy(in.sub, "visitor-43");
    char *tok2 = cm_jwt_sign(f->signer, &in, AUD);
    char *dot1 = strchr(tok, '.'), *dot2 = strrchr(tok, '.');
    char *d1b = strchr(tok2, '.'), *d2b = strrchr(tok2, '.');
    char *mixed = malloc(n + 200);
    sprintf(mixed, "%.*s%.*s%s", (int)(dot1 - tok), tok, (int)(d2b - d1b), d1b, dot2);
    assert_int_equal(verify(f, mixed, &c), CM_JWT_BAD_SIGNATURE);
    assert_string_equal(c.sub, "");
    free(mixed);
    free(tok2);
    free(tok);
}

static void test_unknown_kid(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    char *tok = craft_es256(f->key, "{\"alg\":\"ES256\",\"kid\":\"nope\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_UNKNOWN_KID);
    free(tok);
    /* with two keys, a token without kid matches none */
    assert_int_equal(cm_jwt_keyset_add_pem(f->ks, "second", f->other_pub_pem,
                                           strlen(f->other_pub_pem), f->err, sizeof(f->err)),
                     0);
    assert_int_equal(cm_jwt_keyset_count(f->ks), 2);
    tok = craft_es256(f->key, "{\"alg\":\"ES256\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_UNKNOWN_KID);
    free(tok);
    /* the explicit kid now selects the second key */
    tok = craft_es256(f->other, "{\"alg\":\"ES256\",\"kid\":\"second\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_OK);
    assert_string_equal(c.kid, "second");
    free(tok);
    /* and a kid that exists but belongs to the other key does not verify */
    tok = craft_es256(f->key, "{\"alg\":\"ES256\",\"kid\":\"second\"}", good_payload);
    assert_int_equal(verify(f, tok, &c), CM_JWT_BAD_SIGNATURE);
    free(tok);
    /* empty keyset */
    cm_jwt_keyset_t *empty = cm_jwt_keyset_new();
    tok = craft_es256(f->key, header_for(f, "ES256"), good_payload);
    assert_int_equal(verify_with(empty, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_UNKNOWN_KID);
    free(tok);
    tok = craft_es256(f->key, "{\"alg\":\"ES256\"}", good_payload);
    assert_int_equal(verify_with(empty, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_UNKNOWN_KID);
    free(tok);
    cm_jwt_keyset_free(empty);
}

static void test_jwks_round_trip(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), c;
    assert_int_equal(cm_jwt_keyset_add_pem(f->ks, "second", f->other_pub_pem,
                                           strlen(f->other_pub_pem), f->err, sizeof(f->err)),
                     0);
    char *jwks = cm_jwt_keyset_jwks(f->ks);
    assert_non_null(jwks);
    assert_non_null(strstr(jwks, "\"kty\":\"EC\""));
    assert_non_null(strstr(jwks, "\"crv\":\"P-256\""));
    assert_non_null(strstr(jwks, "\"alg\":\"ES256\""));
    assert_non_null(strstr(jwks, "\"use\":\"sig\""));
    assert_non_null(strstr(jwks, "\"kid\":\"second\""));
    assert_non_null(strstr(jwks, cm_jwt_signer_kid(f->signer)));
    assert_null(strstr(jwks, "\"d\"")); /* never a private member */

    cm_jwt_keyset_t *ks2 = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_jwks(ks2, jwks, strlen(jwks), f->err, sizeof(f->err)), 0);
    assert_int_equal(cm_jwt_keyset_count(ks2), 2);
    char *again = cm_jwt_keyset_jwks(ks2);
    assert_string_equal(again, jwks);
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(ks2, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_OK);
    free(tok);
    tok = craft_es256(f->other, "{\"alg\":\"ES256\",\"kid\":\"second\"}", good_payload);
    assert_int_equal(verify_with(ks2, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_OK);
    free(tok);
    /* adding the same keys again is harmless */
    assert_int_equal(cm_jwt_keyset_add_jwks(ks2, jwks, strlen(jwks), f->err, sizeof(f->err)), 0);
    assert_int_equal(cm_jwt_keyset_count(ks2), 2);
    free(again);
    free(jwks);
    cm_jwt_keyset_free(ks2);
}

static void test_jwks_rejects(void **state)
{
    fixture_t *f = *state;
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    const char *bad[] = {
        "",
        "{}",
        "{\"keys\":{}}",
        "{\"keys\":[]}",
        "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"AQAB\",\"e\":\"AQAB\"}]}",
        "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"AA\",\"y\":\"AA\"}]}",
        /* x/y of the right length that are not a point on the curve */
        "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\","
        "\"x\":\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\","
        "\"y\":\"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}",
        "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"short\",\"y\":\"short\"}]}",
        "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\"}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (cm_jwt_keyset_add_jwks(ks, bad[i], strlen(bad[i]), f->err, sizeof(f->err)) == 0)
            fail_msg("JWKS %zu accepted", i);
        assert_true(f->err[0] != '\0');
    }
    assert_int_equal(cm_jwt_keyset_count(ks), 0);

    /* the same kid for two different keys is refused */
    assert_int_equal(
        cm_jwt_keyset_add_pem(ks, "k", f->pub_pem, strlen(f->pub_pem), f->err, sizeof(f->err)), 0);
    assert_int_equal(cm_jwt_keyset_add_pem(ks, "k", f->other_pub_pem, strlen(f->other_pub_pem),
                                           f->err, sizeof(f->err)),
                     -1);
    assert_int_equal(cm_jwt_keyset_count(ks), 1);
    cm_jwt_keyset_free(ks);
}

static void test_keyset_from_private_pem(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), c;
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(
        cm_jwt_keyset_add_pem(ks, NULL, f->priv_pem, strlen(f->priv_pem), f->err, sizeof(f->err)),
        0);
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(verify_with(ks, tok, strlen(tok), AUD, NOW, 0, &c), CM_JWT_OK);
    /* the default kid is the same on both sides */
    assert_string_equal(c.kid, cm_jwt_signer_kid(f->signer));
    char *jwks = cm_jwt_keyset_jwks(ks);
    assert_null(strstr(jwks, "\"d\""));
    free(jwks);
    free(tok);
    cm_jwt_keyset_free(ks);
}

static void test_thumbprint_known_answer(void **state)
{
    fixture_t *f = *state;
    /* expected kid computed independently (Python: sha256 of the RFC 7638 JSON) */
    static const char pub[] = "-----BEGIN PUBLIC KEY-----\n"
                              "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEtcr8YiH8csN/o5lU3u4vTze/zXZz\n"
                              "CoSTHKjGbj9WzQZOOYeGPDi75jCoh+nhaVrbKHbIxiPzhpsOp4mUsf+FEQ==\n"
                              "-----END PUBLIC KEY-----\n";
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, pub, strlen(pub), f->err, sizeof(f->err)), 0);
    char *jwks = cm_jwt_keyset_jwks(ks);
    assert_string_equal(jwks, "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\","
                              "\"x\":\"tcr8YiH8csN_o5lU3u4vTze_zXZzCoSTHKjGbj9WzQY\","
                              "\"y\":\"TjmHhjw4u-YwqIfp4Wla2yh2yMYj84abDqeJlLH_hRE\","
                              "\"kid\":\"1QeCNpYcN8UxyO_HeBQ2xxqE4vcdbHnxfwAJW2vBPtw\","
                              "\"alg\":\"ES256\",\"use\":\"sig\"}]}");
    free(jwks);
    cm_jwt_keyset_free(ks);
}

static void test_bad_keys(void **state)
{
    fixture_t *f = *state;
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    EVP_PKEY *p384 = EVP_EC_gen("P-384");
    EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    assert_non_null(p384);
    assert_non_null(rsa);
    char *p384_pem = tkey_pem(p384, true), *rsa_pem = tkey_pem(rsa, false);
    assert_int_equal(
        cm_jwt_keyset_add_pem(ks, NULL, p384_pem, strlen(p384_pem), f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, "P-256"));
    assert_int_equal(
        cm_jwt_keyset_add_pem(ks, NULL, rsa_pem, strlen(rsa_pem), f->err, sizeof(f->err)), -1);
    assert_int_equal(cm_jwt_keyset_add_pem(ks, NULL, "junk", 4, f->err, sizeof(f->err)), -1);
    assert_int_equal(cm_jwt_keyset_count(ks), 0);
    assert_null(cm_jwt_signer_new(NULL, p384_pem, strlen(p384_pem), f->err, sizeof(f->err)));
    /* a signer needs the private key */
    assert_null(cm_jwt_signer_new(NULL, f->pub_pem, strlen(f->pub_pem), f->err, sizeof(f->err)));
    assert_null(cm_jwt_signer_new("", f->priv_pem, strlen(f->priv_pem), f->err, sizeof(f->err)));
    cm_jwt_signer_t *s =
        cm_jwt_signer_new("gw-2026", f->priv_pem, strlen(f->priv_pem), f->err, sizeof(f->err));
    assert_non_null(s);
    assert_string_equal(cm_jwt_signer_kid(s), "gw-2026");
    cm_jwt_signer_free(s);
    cm_jwt_signer_free(NULL);
    cm_jwt_keyset_free(NULL);
    free(p384_pem);
    free(rsa_pem);
    EVP_PKEY_free(p384);
    EVP_PKEY_free(rsa);
    cm_jwt_keyset_free(ks);
}

static void test_load_file(void **state)
{
    fixture_t *f = *state;
    char path[] = "/tmp/test_cm_jwt.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    /* what `openssl ecparam -genkey` writes: parameters, then the key; then a second key */
    fprintf(fp,
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
            "%s%s",
            f->priv_pem, f->other_pub_pem);
    fclose(fp);
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_load_file(ks, path, f->err, sizeof(f->err)), 0);
    assert_int_equal(cm_jwt_keyset_count(ks), 2);

    /* a JWKS document works too */
    char *jwks = cm_jwt_keyset_jwks(ks);
    fp = fopen(path, "w");
    fprintf(fp, "\n  %s\n", jwks);
    fclose(fp);
    cm_jwt_keyset_t *ks2 = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_keyset_load_file(ks2, path, f->err, sizeof(f->err)), 0);
    assert_int_equal(cm_jwt_keyset_count(ks2), 2);

    fp = fopen(path, "w");
    fprintf(fp, "nothing here\n");
    fclose(fp);
    assert_int_equal(cm_jwt_keyset_load_file(ks2, path, f->err, sizeof(f->err)), -1);
    assert_non_null(strstr(f->err, path));
    unlink(path);
    assert_int_equal(cm_jwt_keyset_load_file(ks2, path, f->err, sizeof(f->err)), -1);
    free(jwks);
    cm_jwt_keyset_free(ks);
    cm_jwt_keyset_free(ks2);
}

static void test_issuer_and_lifetime(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t c;
    cm_jwt_policy_t pol = {.issuer = "onsale-gw", .max_lifetime_s = 600};
    /* good_payload: iss onsale-gw, iat NOW-10, exp NOW+600 (lifetime 610) */
    char *tok = craft_es256(f->key, header_for(f, "ES256"), good_payload);
    assert_int_equal(cm_jwt_verify(f->ks, tok, strlen(tok), &pol, NOW, &c), CM_JWT_TOO_LONG);
    pol.max_lifetime_s = 610;
    assert_int_equal(cm_jwt_verify(f->ks, tok, strlen(tok), &pol, NOW, &c), CM_JWT_OK);
    pol.issuer = "someone-else";
    assert_int_equal(cm_jwt_verify(f->ks, tok, strlen(tok), &pol, NOW, &c), CM_JWT_BAD_ISSUER);
    assert_string_equal(c.sub, "");
    free(tok);
    pol.issuer = "onsale-gw";
    struct {
        const char *payload;
        cm_jwt_result_t want;
    } cases[] = {
        /* no iss while one is required */
        {"{\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":\"j\",\"iat\":1799999990,"
         "\"exp\":1800000600}",
         CM_JWT_BAD_ISSUER},
        /* no iat while a lifetime cap applies */
        {"{\"iss\":\"onsale-gw\",\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":"
         "\"j\",\"exp\":1800000600}",
         CM_JWT_MALFORMED},
        /* an iat far in the past cannot hide a far exp; nor exp before iat; nor overflow */
        {"{\"iss\":\"onsale-gw\",\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":"
         "\"j\",\"iat\":1800000000,\"exp\":1800086400}",
         CM_JWT_TOO_LONG},
        {"{\"iss\":\"onsale-gw\",\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":"
         "\"j\",\"iat\":1800000600,\"exp\":1800000000}",
         CM_JWT_TOO_LONG},
        {"{\"iss\":\"onsale-gw\",\"aud\":\"onsale-reserve\",\"sub\":\"v\",\"evt\":\"e\",\"jti\":"
         "\"j\",\"iat\":-9223372036854775807,\"exp\":9223372036854775807}",
         CM_JWT_TOO_LONG},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tok = craft_es256(f->key, header_for(f, "ES256"), cases[i].payload);
        assert_int_equal(cm_jwt_verify(f->ks, tok, strlen(tok), &pol, NOW, &c), cases[i].want);
        free(tok);
    }
    assert_string_equal(cm_jwt_result_str(CM_JWT_BAD_ISSUER), "bad_issuer");
    assert_string_equal(cm_jwt_result_str(CM_JWT_TOO_LONG), "lifetime_too_long");
}

static void test_result_str(void **state)
{
    (void)state;
    assert_string_equal(cm_jwt_result_str(CM_JWT_OK), "ok");
    assert_string_equal(cm_jwt_result_str(CM_JWT_MALFORMED), "malformed");
    assert_string_equal(cm_jwt_result_str(CM_JWT_BAD_ALG), "bad_alg");
    assert_string_equal(cm_jwt_result_str(CM_JWT_UNKNOWN_KID), "unknown_kid");
    assert_string_equal(cm_jwt_result_str(CM_JWT_BAD_SIGNATURE), "bad_signature");
    assert_string_equal(cm_jwt_result_str(CM_JWT_BAD_AUDIENCE), "bad_audience");
    assert_string_equal(cm_jwt_result_str(CM_JWT_NOT_YET_VALID), "not_yet_valid");
    assert_string_equal(cm_jwt_result_str(CM_JWT_EXPIRED), "expired");
}

/* cm_jwt_inspect: every check but the signature (token records, docs/tokens.md). */
static void test_inspect_checks_all_but_the_signature(void **state)
{
    fixture_t *f = *state;
    cm_jwt_claims_t in = sample_claims(), out;
    cm_jwt_policy_t pol = {.issuer = in.iss};
    char *tok = cm_jwt_sign(f->signer, &in, AUD);
    assert_int_equal(cm_jwt_inspect(f->ks, tok, strlen(tok), &pol, NOW, &out), CM_JWT_OK);
    assert_string_equal(out.sub, in.sub);
    assert_string_equal(out.kid, cm_jwt_signer_kid(f->signer));
    /* a signature of the right shape that verifies for nobody passes inspection, never
     * verification: inspection alone proves nothing about who made the token */
    char *forged = strdup(tok);
    char *sig = strrchr(forged, '.') + 1;
    memset(sig, 'A', strlen(sig));
    assert_int_equal(cm_jwt_inspect(f->ks, forged, strlen(forged), &pol, NOW, &out), CM_JWT_OK);
    assert_int_equal(cm_jwt_verify(f->ks, forged, strlen(forged), &pol, NOW, &out),
                     CM_JWT_BAD_SIGNATURE);
    /* a signature of another length is malformed */
    sig[10] = '\0';
    assert_int_equal(cm_jwt_inspect(f->ks, forged, strlen(forged), &pol, NOW, &out),
                     CM_JWT_MALFORMED);
    free(forged);
    /* every other check stands: time, audience, issuer, alg, kid */
    assert_int_equal(cm_jwt_inspect(f->ks, tok, strlen(tok), &pol, in.exp + 10, &out),
                     CM_JWT_EXPIRED);
    cm_jwt_policy_t other_iss = {.issuer = "someone-else"};
    assert_int_equal(cm_jwt_inspect(f->ks, tok, strlen(tok), &other_iss, NOW, &out),
                     CM_JWT_BAD_ISSUER);
    cm_jwt_policy_t other_aud = {.audience = "other-service"};
    assert_int_equal(cm_jwt_inspect(f->ks, tok, strlen(tok), &other_aud, NOW, &out),
                     CM_JWT_BAD_AUDIENCE);
    cm_jwt_keyset_t *empty = cm_jwt_keyset_new();
    assert_int_equal(cm_jwt_inspect(empty, tok, strlen(tok), &pol, NOW, &out), CM_JWT_UNKNOWN_KID);
    cm_jwt_keyset_free(empty);
    char *none = craft_es256(f->key, header_for(f, "none"), good_payload);
    assert_int_equal(cm_jwt_inspect(f->ks, none, strlen(none), NULL, NOW, &out), CM_JWT_BAD_ALG);
    free(none);
    free(tok);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_round_trip),
        T(test_cnf_jkt),
        T(test_rid),
        T(test_hand_crafted_es256_accepted),
        T(test_alg_none),
        T(test_hs256_with_public_key),
        T(test_other_key),
        T(test_time),
        T(test_wrong_audience),
        T(test_missing_or_bad_claims),
        T(test_garbage),
        T(test_tampered),
        T(test_unknown_kid),
        T(test_jwks_round_trip),
        T(test_jwks_rejects),
        T(test_keyset_from_private_pem),
        T(test_thumbprint_known_answer),
        T(test_bad_keys),
        T(test_load_file),
        cmocka_unit_test(test_result_str),
        T(test_issuer_and_lifetime),
        T(test_inspect_checks_all_but_the_signature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
