/*
 * cm_jwt — admission tokens: ES256 signing (gateway) and pinned verification (reserve).
 *
 * Owns the keyset (public keys by kid, each kept as its JWK coordinates and as the
 * SubjectPublicKeyInfo PEM that libjwt wants) and the signer (one private key as PEM).
 * Both are built once at start-up and read-only afterwards, so verify and sign are
 * safe from any thread with no locking.
 *
 * Why verify does work libjwt could do: libjwt 1.10 takes the algorithm from the
 * token's own header and uses whatever key bytes it is given accordingly — hand it
 * the public PEM and a header saying HS256 and it computes an HMAC keyed with that
 * PEM, the classic algorithm-confusion forgery. So the header is decoded and judged
 * here first (alg must be exactly "ES256", kid must name a key we hold), every segment
 * must be canonical base64url, and only then does libjwt see the token and the one
 * key chosen for it; its idea of the algorithm is checked again afterwards. The
 * claims are read from the verified payload with jansson, strictly typed, rather than
 * through libjwt's getters, which cannot tell a missing claim from a mistyped one.
 *
 * libjwt 1.10.2 (OpenSSL backend) writes and reads the JOSE signature form, raw
 * R||S (64 bytes for P-256), so tokens interoperate with other JOSE libraries.
 * OpenSSL is used here only through EVP: key parsing, the JWK x/y coordinates, the
 * RFC 7638 thumbprint that serves as the default kid.
 */
#define _GNU_SOURCE /* memmem */
#include "cm_jwt.h"

#include <jansson.h>
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_mem.h"
#include "cm_parse.h"

#define TOKEN_MAX           4096          /* longer is malformed: ours are ~400 bytes */
#define SEGMENT_DECODED_MAX 3072          /* a decoded header or payload */
#define COORD_LEN           32            /* P-256 coordinate */
#define COORD_B64_LEN       43            /* base64url of 32 bytes, no padding */
#define KEYFILE_MAX         (1024 * 1024) /* a key file or JWKS document */

typedef struct jwk {
    char kid[sizeof(((cm_jwt_claims_t *)0)->kid)];
    char x[COORD_B64_LEN + 1], y[COORD_B64_LEN + 1];
    char *pem; /* public key, NUL-terminated */
    size_t pem_len;
} jwk_t;

struct cm_jwt_keyset {
    jwk_t *keys;
    size_t n;
};

struct cm_jwt_signer {
    char kid[sizeof(((cm_jwt_claims_t *)0)->kid)];
    char *pem; /* private key (PKCS#8), NUL-terminated; scrubbed on free */
    size_t pem_len;
};

/* ---- keys: PEM, EVP and JWK coordinates ---- */

/* Never prompt for a passphrase: encrypted keys are refused, not asked about. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return -1;
}

/* Parses a public or private PEM key; *is_private tells which. NULL when neither. */
static EVP_PKEY *pkey_from_pem(const char *pem, size_t len, bool *is_private)
{
    EVP_PKEY *pk = NULL;
    if (len > KEYFILE_MAX)
        return NULL;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    if (bio == NULL)
        goto out;
    pk = PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
    *is_private = false;
    if (pk == NULL) {
        (void)BIO_reset(bio);
        pk = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
        *is_private = true;
    }
out:
    BIO_free(bio);
    ERR_clear_error();
    return pk;
}

static bool is_p256(EVP_PKEY *pk)
{
    char group[64];
    size_t glen = 0;
    if (!EVP_PKEY_is_a(pk, "EC") || EVP_PKEY_get_group_name(pk, group, sizeof(group), &glen) != 1)
        return false;
    return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0;
}

/* The public point as two base64url coordinates. 0 / -1. */
static int pkey_coords(EVP_PKEY *pk, char x_out[COORD_B64_LEN + 1], char y_out[COORD_B64_LEN + 1])
{
    int rc = -1;
    BIGNUM *x = NULL, *y = NULL;
    unsigned char bx[COORD_LEN], by[COORD_LEN];
    if (EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_EC_PUB_X, &x) != 1 ||
        EVP_PKEY_get_bn_param(pk, OSSL_PKEY_PARAM_EC_PUB_Y, &y) != 1 ||
        BN_bn2binpad(x, bx, COORD_LEN) != COORD_LEN || BN_bn2binpad(y, by, COORD_LEN) != COORD_LEN)
        goto out;
    cm_base64url_encode(bx, COORD_LEN, x_out);
    cm_base64url_encode(by, COORD_LEN, y_out);
    rc = 0;
out:
    BN_free(x);
    BN_free(y);
    ERR_clear_error();
    return rc;
}

/* An EC P-256 public key from JWK coordinates, checked to be on the curve. */
static EVP_PKEY *pkey_from_coords(const char *x_b64, const char *y_b64)
{
    EVP_PKEY *pk = NULL;
    EVP_PKEY_CTX *ctx = NULL, *check = NULL;
    OSSL_PARAM_BLD *bld = NULL;
    OSSL_PARAM *params = NULL;
    unsigned char point[1 + 2 * COORD_LEN] = {0x04}; /* uncompressed: 04 || X || Y */
    if (strlen(x_b64) != COORD_B64_LEN || strlen(y_b64) != COORD_B64_LEN ||
        cm_base64url_decode(x_b64, COORD_B64_LEN, point + 1, COORD_LEN) != COORD_LEN ||
        cm_base64url_decode(y_b64, COORD_B64_LEN, point + 1 + COORD_LEN, COORD_LEN) != COORD_LEN)
        goto out;
    bld = OSSL_PARAM_BLD_new();
    if (bld == NULL ||
        !OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
        !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof(point)) ||
        (params = OSSL_PARAM_BLD_to_param(bld)) == NULL)
        goto out;
    ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1 ||
        EVP_PKEY_fromdata(ctx, &pk, EVP_PKEY_PUBLIC_KEY, params) != 1)
        goto out;
    check = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL);
    if (check == NULL || EVP_PKEY_public_check(check) != 1) {
        EVP_PKEY_free(pk);
        pk = NULL;
    }
out:
    EVP_PKEY_CTX_free(check);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    OSSL_PARAM_BLD_free(bld);
    ERR_clear_error();
    return pk;
}

/* Writes pk as PEM (public SubjectPublicKeyInfo, or PKCS#8 private) to a heap string. */
static char *pkey_to_pem(EVP_PKEY *pk, bool private_key, size_t *len_out)
{
    char *pem = NULL, *data;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL)
        goto out;
    int ok = private_key ? PEM_write_bio_PrivateKey(bio, pk, NULL, NULL, 0, NULL, NULL)
                         : PEM_write_bio_PUBKEY(bio, pk);
    long n = BIO_get_mem_data(bio, &data);
    if (ok != 1 || n <= 0)
        goto out;
    pem = cm_xstrndup(data, (size_t)n);
    *len_out = (size_t)n;
    OPENSSL_cleanse(data, (size_t)n);
out:
    BIO_free(bio);
    ERR_clear_error();
    return pem;
}

/* RFC 7638: base64url(SHA-256 of the canonical JWK: required members, sorted, no spaces). */
static int thumbprint(const char *x, const char *y, char *kid, size_t kidlen)
{
    char canon[160];
    unsigned char digest[32];
    unsigned int dlen = 0;
    int n = snprintf(canon, sizeof(canon),
                     "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"%s\",\"y\":\"%s\"}", x, y);
    if (n < 0 || (size_t)n >= sizeof(canon) || kidlen < 44 ||
        EVP_Digest(canon, (size_t)n, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32)
        return -1;
    cm_base64url_encode(digest, sizeof(digest), kid);
    return 0;
}

/* ---- keyset ---- */

cm_jwt_keyset_t *cm_jwt_keyset_new(void)
{
    return cm_xcalloc(1, sizeof(cm_jwt_keyset_t));
}

void cm_jwt_keyset_free(cm_jwt_keyset_t *ks)
{
    if (ks == NULL)
        return;
    for (size_t i = 0; i < ks->n; i++)
        free(ks->keys[i].pem);
    free(ks->keys);
    free(ks);
}

size_t cm_jwt_keyset_count(const cm_jwt_keyset_t *ks)
{
    return ks->n;
}

static const jwk_t *find_kid(const cm_jwt_keyset_t *ks, const char *kid)
{
    for (size_t i = 0; i < ks->n; i++) {
        if (strcmp(ks->keys[i].kid, kid) == 0)
            return &ks->keys[i];
    }
    return NULL;
}

/* Adds the public half of pk under kid (NULL: thumbprint). The same key under the same
 * kid twice is a no-op; another key under a kid already taken is an error. */
static int keyset_add_pkey(cm_jwt_keyset_t *ks, const char *kid, EVP_PKEY *pk, char *err,
                           size_t errlen)
{
    jwk_t k = {0};
    if (!is_p256(pk)) {
        snprintf(err, errlen, "key is not an EC P-256 key (ES256 needs one)");
        return -1;
    }
    if (pkey_coords(pk, k.x, k.y) != 0) {
        snprintf(err, errlen, "cannot read the key's public point");
        return -1;
    }
    if (kid == NULL ? thumbprint(k.x, k.y, k.kid, sizeof(k.kid)) != 0
                    : kid[0] == '\0' || strlen(kid) >= sizeof(k.kid)) {
        snprintf(err, errlen, "kid must be 1-%zu characters", sizeof(k.kid) - 1);
        return -1;
    }
    if (kid != NULL)
        strcpy(k.kid, kid);
    const jwk_t *dup = find_kid(ks, k.kid);
    if (dup != NULL) {
        if (strcmp(dup->x, k.x) == 0 && strcmp(dup->y, k.y) == 0)
            return 0;
        snprintf(err, errlen, "two different keys share kid '%s'", k.kid);
        return -1;
    }
    k.pem = pkey_to_pem(pk, false, &k.pem_len);
    if (k.pem == NULL) {
        snprintf(err, errlen, "cannot encode the public key");
        return -1;
    }
    ks->keys = cm_xrealloc(ks->keys, (ks->n + 1) * sizeof(*ks->keys));
    ks->keys[ks->n++] = k;
    return 0;
}

int cm_jwt_keyset_add_pem(cm_jwt_keyset_t *ks, const char *kid, const char *pem, size_t len,
                          char *err, size_t errlen)
{
    bool is_private;
    EVP_PKEY *pk = pkey_from_pem(pem, len, &is_private);
    if (pk == NULL) {
        snprintf(err, errlen, "not a PEM public or (unencrypted) private key");
        return -1;
    }
    int rc = keyset_add_pkey(ks, kid, pk, err, errlen);
    EVP_PKEY_free(pk);
    return rc;
}

/* One JWK object: 1 added, 0 skipped (not an ES256 signing key), -1 error. */
static int add_jwk(cm_jwt_keyset_t *ks, json_t *jwk, char *err, size_t errlen)
{
    const char *kty = json_string_value(json_object_get(jwk, "kty"));
    const char *crv = json_string_value(json_object_get(jwk, "crv"));
    const char *use = json_string_value(json_object_get(jwk, "use"));
    const char *alg = json_string_value(json_object_get(jwk, "alg"));
    const char *x = json_string_value(json_object_get(jwk, "x"));
    const char *y = json_string_value(json_object_get(jwk, "y"));
    json_t *kid = json_object_get(jwk, "kid");
    if (!json_is_object(jwk) || kty == NULL || strcmp(kty, "EC") != 0 || crv == NULL ||
        strcmp(crv, "P-256") != 0 || (use != NULL && strcmp(use, "sig") != 0) ||
        (alg != NULL && strcmp(alg, "ES256") != 0))
        return 0;
    if (x == NULL || y == NULL || (kid != NULL && !json_is_string(kid))) {
        snprintf(err, errlen, "JWKS: EC key without string x, y (or with a non-string kid)");
        return -1;
    }
    EVP_PKEY *pk = pkey_from_coords(x, y);
    if (pk == NULL) {
        snprintf(err, errlen, "JWKS: x/y are not a point on P-256");
        return -1;
    }
    int rc = keyset_add_pkey(ks, json_string_value(kid), pk, err, errlen);
    EVP_PKEY_free(pk);
    return rc == 0 ? 1 : -1;
}

int cm_jwt_keyset_add_jwks(cm_jwt_keyset_t *ks, const char *json, size_t len, char *err,
                           size_t errlen)
{
    int rc = -1, added = 0;
    json_error_t jerr;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    json_t *keys = json_object_get(doc, "keys");
    if (!json_is_array(keys)) {
        snprintf(err, errlen, "JWKS: %s", doc == NULL ? jerr.text : "no \"keys\" array");
        goto out;
    }
    size_t i;
    json_t *jwk;
    json_array_foreach(keys, i, jwk)
    {
        int r = add_jwk(ks, jwk, err, errlen);
        if (r < 0)
            goto out;
        added += r;
    }
    if (added == 0) {
        snprintf(err, errlen, "JWKS: no EC P-256 signing key");
        goto out;
    }
    rc = 0;
out:
    json_decref(doc);
    return rc;
}

/* Each PEM block of text, in order; "EC PARAMETERS" blocks (openssl ecparam) skipped. */
static int add_pem_blocks(cm_jwt_keyset_t *ks, const char *text, size_t len, char *err,
                          size_t errlen)
{
    static const char begin[] = "-----BEGIN ", end[] = "-----END ";
    int added = 0;
    const char *p = text, *limit = text + len;
    while ((p = memmem(p, (size_t)(limit - p), begin, sizeof(begin) - 1)) != NULL) {
        const char *label = p + sizeof(begin) - 1;
        const char *stop = memmem(label, (size_t)(limit - label), end, sizeof(end) - 1);
        const char *eol = stop ? memmem(stop + sizeof(end) - 1,
                                        (size_t)(limit - stop - (sizeof(end) - 1)), "-----", 5)
                               : NULL;
        if (eol == NULL) {
            snprintf(err, errlen, "unterminated PEM block");
            return -1;
        }
        eol += 5;
        if (strncmp(label, "EC PARAMETERS-----", 18) != 0) {
            if (cm_jwt_keyset_add_pem(ks, NULL, p, (size_t)(eol - p), err, errlen) != 0)
                return -1;
            added++;
        }
        p = eol;
    }
    if (added == 0) {
        snprintf(err, errlen, "no PEM key found");
        return -1;
    }
    return 0;
}

int cm_jwt_keyset_load_file(cm_jwt_keyset_t *ks, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    char *text = cm_xmalloc(KEYFILE_MAX + 1);
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    char inner[256];
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open", path);
        goto out;
    }
    len = fread(text, 1, KEYFILE_MAX + 1, f);
    if (ferror(f) || len > KEYFILE_MAX) {
        snprintf(err, errlen, "%s: read error or larger than %d bytes", path, KEYFILE_MAX);
        goto out;
    }
    text[len] = '\0';
    size_t skip = strspn(text, " \t\r\n");
    int r = text[skip] == '{' ? cm_jwt_keyset_add_jwks(ks, text, len, inner, sizeof(inner))
                              : add_pem_blocks(ks, text, len, inner, sizeof(inner));
    if (r != 0) {
        snprintf(err, errlen, "%s: %s", path, inner);
        goto out;
    }
    rc = 0;
out:
    if (f != NULL)
        fclose(f);
    OPENSSL_cleanse(text, len); /* it may have held a private key */
    free(text);
    return rc;
}

char *cm_jwt_keyset_jwks(const cm_jwt_keyset_t *ks)
{
    json_t *keys = json_array();
    for (size_t i = 0; i < ks->n; i++) {
        const jwk_t *k = &ks->keys[i];
        json_array_append_new(keys, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "kty", "EC",
                                              "crv", "P-256", "x", k->x, "y", k->y, "kid", k->kid,
                                              "alg", "ES256", "use", "sig"));
    }
    json_t *doc = json_pack("{s:o}", "keys", keys); /* "o" steals keys */
    char *s = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (s == NULL)
        abort(); /* only fails on out-of-memory */
    char *out = cm_xstrdup(s);
    free(s);
    return out;
}

/* ---- verify ---- */

const char *cm_jwt_result_str(cm_jwt_result_t r)
{
    switch (r) {
    case CM_JWT_OK:
        return "ok";
    case CM_JWT_MALFORMED:
        return "malformed";
    case CM_JWT_BAD_ALG:
        return "bad_alg";
    case CM_JWT_UNKNOWN_KID:
        return "unknown_kid";
    case CM_JWT_BAD_SIGNATURE:
        return "bad_signature";
    case CM_JWT_BAD_AUDIENCE:
        return "bad_audience";
    case CM_JWT_NOT_YET_VALID:
        return "not_yet_valid";
    case CM_JWT_EXPIRED:
        return "expired";
    }
    return "unknown";
}

static bool is_b64url_segment(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

/* Decodes one segment and parses it as a JSON object (duplicate members refused). */
static json_t *segment_json(const char *s, size_t n)
{
    unsigned char buf[SEGMENT_DECODED_MAX];
    long dlen = cm_base64url_decode(s, n, buf, sizeof(buf));
    if (dlen <= 0)
        return NULL;
    json_t *j = json_loadb((const char *)buf, (size_t)dlen, JSON_REJECT_DUPLICATES, NULL);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The header decides nothing but must say ES256 and name a key we hold. */
static cm_jwt_result_t judge_header(const cm_jwt_keyset_t *ks, json_t *hdr, const jwk_t **key,
                                    cm_jwt_claims_t *out)
{
    json_t *alg = json_object_get(hdr, "alg");
    json_t *kid = json_object_get(hdr, "kid");
    const char *typ = json_string_value(json_object_get(hdr, "typ"));
    if (!json_is_string(alg) || strcmp(json_string_value(alg), "ES256") != 0 ||
        json_string_length(alg) != 5)
        return CM_JWT_BAD_ALG;
    if ((kid != NULL && !json_is_string(kid)) || json_object_get(hdr, "crit") != NULL ||
        (json_object_get(hdr, "typ") != NULL && (typ == NULL || strcasecmp(typ, "JWT") != 0)))
        return CM_JWT_MALFORMED;
    if (kid == NULL) {
        if (ks->n != 1)
            return CM_JWT_UNKNOWN_KID;
        *key = &ks->keys[0];
    } else {
        const char *k = json_string_value(kid);
        if (json_string_length(kid) >= sizeof(out->kid) || strlen(k) != json_string_length(kid) ||
            (*key = find_kid(ks, k)) == NULL)
            return CM_JWT_UNKNOWN_KID;
    }
    strcpy(out->kid, (*key)->kid);
    return CM_JWT_OK;
}

static bool copy_str(json_t *claims, const char *name, char *dst, size_t dstlen, bool required)
{
    json_t *v = json_object_get(claims, name);
    if (v == NULL)
        return !required;
    size_t n = json_string_length(v);
    if (!json_is_string(v) || n >= dstlen || (required && n == 0) ||
        strlen(json_string_value(v)) != n) /* an embedded NUL is not a visitor id */
        return false;
    memcpy(dst, json_string_value(v), n + 1);
    return true;
}

static bool copy_int(json_t *claims, const char *name, int64_t *dst, bool required)
{
    json_t *v = json_object_get(claims, name);
    if (v == NULL)
        return !required;
    if (!json_is_integer(v))
        return false;
    *dst = (int64_t)json_integer_value(v);
    return true;
}

static bool audience_ok(json_t *claims, const char *audience)
{
    json_t *aud = json_object_get(claims, "aud"), *v;
    size_t i;
    if (json_is_string(aud))
        return strcmp(json_string_value(aud), audience) == 0;
    json_array_foreach(aud, i, v)
    {
        if (json_is_string(v) && strcmp(json_string_value(v), audience) == 0)
            return true;
    }
    return false;
}

/* After the signature: audience, claim types, then time. */
static cm_jwt_result_t judge_claims(json_t *claims, const char *audience, int64_t now_s,
                                    int64_t leeway_s, cm_jwt_claims_t *out)
{
    if (!audience_ok(claims, audience))
        return CM_JWT_BAD_AUDIENCE;
    if (!copy_str(claims, "iss", out->iss, sizeof(out->iss), false) ||
        !copy_str(claims, "sub", out->sub, sizeof(out->sub), true) ||
        !copy_str(claims, "evt", out->evt, sizeof(out->evt), true) ||
        !copy_str(claims, "jti", out->jti, sizeof(out->jti), true) ||
        !copy_int(claims, "iat", &out->iat, false) || !copy_int(claims, "nbf", &out->nbf, false) ||
        !copy_int(claims, "exp", &out->exp, true))
        return CM_JWT_MALFORMED;
    if (leeway_s < 0)
        leeway_s = 0;
    if (leeway_s > 86400)
        leeway_s = 86400;
    if (json_object_get(claims, "nbf") != NULL && now_s + leeway_s < out->nbf)
        return CM_JWT_NOT_YET_VALID;
    if (now_s - leeway_s >= out->exp)
        return CM_JWT_EXPIRED;
    return CM_JWT_OK;
}

cm_jwt_result_t cm_jwt_verify(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                              const char *audience, int64_t now_s, int64_t leeway_s,
                              cm_jwt_claims_t *out)
{
    cm_jwt_result_t r = CM_JWT_MALFORMED;
    char buf[TOKEN_MAX + 1];
    json_t *hdr = NULL, *claims = NULL;
    jwt_t *jwt = NULL;
    const jwk_t *key = NULL;
    memset(out, 0, sizeof(*out));
    if (token == NULL || len == 0 || len > TOKEN_MAX)
        goto out;
    memcpy(buf, token, len);
    buf[len] = '\0';
    /* header.payload.signature, each canonical base64url (no NUL, no fourth part) */
    char *dot1 = memchr(buf, '.', len);
    char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - buf)) : NULL;
    if (dot2 == NULL)
        goto out;
    size_t hlen = (size_t)(dot1 - buf), plen = (size_t)(dot2 - dot1 - 1);
    size_t slen = len - (size_t)(dot2 + 1 - buf);
    /* a NUL or a third dot fails the alphabet check of its segment */
    if (hlen == 0 || plen == 0 || !is_b64url_segment(buf, hlen) ||
        !is_b64url_segment(dot1 + 1, plen) || !is_b64url_segment(dot2 + 1, slen) ||
        (hdr = segment_json(buf, hlen)) == NULL)
        goto out;
    if ((r = judge_header(ks, hdr, &key, out)) != CM_JWT_OK)
        goto out;
    if ((claims = segment_json(dot1 + 1, plen)) == NULL) {
        r = CM_JWT_MALFORMED;
        goto out;
    }
    /* only now does libjwt see the token, with the one key the header earned */
    if (jwt_decode(&jwt, buf, (const unsigned char *)key->pem, (int)key->pem_len) != 0 ||
        jwt == NULL) {
        r = CM_JWT_BAD_SIGNATURE;
        goto out;
    }
    if (jwt_get_alg(jwt) != JWT_ALG_ES256) {
        r = CM_JWT_BAD_ALG;
        goto out;
    }
    r = judge_claims(claims, audience ? audience : CM_JWT_AUDIENCE, now_s, leeway_s, out);
out:
    if (r != CM_JWT_OK && r != CM_JWT_EXPIRED)
        memset(out, 0, sizeof(*out));
    jwt_free(jwt);
    json_decref(claims);
    json_decref(hdr);
    return r;
}

/* ---- sign ---- */

cm_jwt_signer_t *cm_jwt_signer_new(const char *kid, const char *pem, size_t len, char *err,
                                   size_t errlen)
{
    cm_jwt_signer_t *s = NULL;
    bool is_private = false;
    char x[COORD_B64_LEN + 1], y[COORD_B64_LEN + 1];
    EVP_PKEY *pk = pkey_from_pem(pem, len, &is_private);
    if (pk == NULL || !is_private) {
        snprintf(err, errlen, "not a PEM (unencrypted) private key");
        goto out;
    }
    if (!is_p256(pk) || pkey_coords(pk, x, y) != 0) {
        snprintf(err, errlen, "key is not an EC P-256 key (ES256 needs one)");
        goto out;
    }
    s = cm_xcalloc(1, sizeof(*s));
    if (kid == NULL ? thumbprint(x, y, s->kid, sizeof(s->kid)) != 0
                    : kid[0] == '\0' || strlen(kid) >= sizeof(s->kid)) {
        snprintf(err, errlen, "kid must be 1-%zu characters", sizeof(s->kid) - 1);
        goto err;
    }
    if (kid != NULL)
        strcpy(s->kid, kid);
    /* normalised to PKCS#8 so libjwt always reads the same form */
    s->pem = pkey_to_pem(pk, true, &s->pem_len);
    if (s->pem == NULL) {
        snprintf(err, errlen, "cannot encode the private key");
        goto err;
    }
    goto out;
err:
    cm_jwt_signer_free(s);
    s = NULL;
out:
    EVP_PKEY_free(pk);
    return s;
}

void cm_jwt_signer_free(cm_jwt_signer_t *s)
{
    if (s == NULL)
        return;
    if (s->pem != NULL)
        OPENSSL_cleanse(s->pem, s->pem_len);
    free(s->pem);
    free(s);
}

const char *cm_jwt_signer_kid(const cm_jwt_signer_t *s)
{
    return s->kid;
}

char *cm_jwt_sign(const cm_jwt_signer_t *s, const cm_jwt_claims_t *c, const char *audience)
{
    char *out = NULL, *tok = NULL;
    jwt_t *jwt = NULL;
    if (c->sub[0] == '\0' || c->evt[0] == '\0' || c->jti[0] == '\0' || jwt_new(&jwt) != 0)
        goto out;
    /* libjwt adds "alg" and "typ":"JWT" itself */
    if (jwt_add_header(jwt, "kid", s->kid) != 0 ||
        (c->iss[0] != '\0' && jwt_add_grant(jwt, "iss", c->iss) != 0) ||
        jwt_add_grant(jwt, "aud", audience ? audience : CM_JWT_AUDIENCE) != 0 ||
        jwt_add_grant(jwt, "sub", c->sub) != 0 || jwt_add_grant(jwt, "evt", c->evt) != 0 ||
        jwt_add_grant(jwt, "jti", c->jti) != 0 || jwt_add_grant_int(jwt, "iat", c->iat) != 0 ||
        jwt_add_grant_int(jwt, "nbf", c->nbf) != 0 || jwt_add_grant_int(jwt, "exp", c->exp) != 0)
        goto out;
    if (jwt_set_alg(jwt, JWT_ALG_ES256, (const unsigned char *)s->pem, (int)s->pem_len) != 0)
        goto out;
    tok = jwt_encode_str(jwt); /* malloc'd by libjwt 1.10 (no custom allocator) */
    if (tok != NULL)
        out = cm_xstrdup(tok);
out:
    free(tok);
    jwt_free(jwt); /* scrubs its copy of the key */
    return out;
}
