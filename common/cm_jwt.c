/*
 * cm_jwt — admission tokens: ES256 signing (gateway) and pinned verification (reserve).
 *
 * Owns the keyset (public keys by kid, each parsed once into an EVP_PKEY and kept with
 * its JWK coordinates) and the signer (one private EVP_PKEY and the base64url header it
 * always writes). The keys are read-only after start-up; what several threads touch at
 * once is each key's pool of EVP_PKEY_CTXs (sign or verify already initialised, reused
 * for every call — the way `openssl speed` drives ECDSA), taken and returned under a
 * mutex held for a pointer swap only. A keyset is reference-counted (atomic) so a key
 * reload can swap it under readers.
 *
 * Why the work is done here rather than in a JWT library: the header must be judged
 * before any key is touched (alg exactly "ES256", kid naming a key we hold) — libjwt
 * 1.10 took the algorithm from the token's own header, so a public PEM and "HS256"
 * made an HMAC forgery possible, and it re-parsed the PEM key on every call (~1,600
 * signatures/s). Here the only algorithm there is, is ES256: the signing input is hashed
 * with SHA-256 and the digest signed or verified with EVP_PKEY_sign/verify; the JOSE
 * signature form is raw R||S (64 bytes for P-256), converted from and to DER with
 * ECDSA_SIG, so tokens interoperate with other JOSE libraries. Every segment must be
 * canonical base64url; claims are read with jansson, strictly typed.
 */
#define _GNU_SOURCE /* memmem */
#include "cm_jwt.h"

#include <jansson.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cm_access.h"
#include "cm_mem.h"
#include "cm_parse.h"

#define TOKEN_MAX           4096          /* longer is malformed: ours are ~400 bytes */
#define SEGMENT_DECODED_MAX 3072          /* a decoded header or payload */
#define COORD_LEN           32            /* P-256 coordinate */
#define COORD_B64_LEN       43            /* base64url of 32 bytes, no padding */
#define KEYFILE_MAX         (1024 * 1024) /* a key file or JWKS document */
#define SIG_LEN             64            /* JOSE ES256 signature: R || S */
#define SIG_B64_LEN         86
#define SIG_DER_MAX         80 /* DER ECDSA-Sig-Value for P-256: at most 72 */
#define POOL_MAX            64 /* idle contexts kept per key */

/* Initialised EVP_PKEY_CTXs of one key, for one operation (sign or verify). */
typedef struct ctx_pool {
    pthread_mutex_t mu;
    EVP_PKEY_CTX *idle[POOL_MAX];
    int n;
    bool sign;
} ctx_pool_t;

typedef struct jwk {
    char kid[sizeof(((cm_jwt_claims_t *)0)->kid)];
    char x[COORD_B64_LEN + 1], y[COORD_B64_LEN + 1];
    EVP_PKEY *pk; /* public key */
    ctx_pool_t *pool;
    char *header_b64; /* the header cm_jwt_sign writes for this kid (header_of) */
    size_t header_b64_len;
} jwk_t;

struct cm_jwt_keyset {
    atomic_int refs;
    jwk_t *keys;
    size_t n;
};

struct cm_jwt_signer {
    char kid[sizeof(((cm_jwt_claims_t *)0)->kid)];
    EVP_PKEY *pk; /* private key */
    ctx_pool_t *pool;
    char *header_b64; /* base64url of {"alg":"ES256","typ":"JWT","kid":…} */
    size_t header_b64_len;
};

/* ---- context pools ---- */

static ctx_pool_t *pool_new(bool sign)
{
    ctx_pool_t *p = cm_xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    p->sign = sign;
    return p;
}

static void pool_free(ctx_pool_t *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->n; i++)
        EVP_PKEY_CTX_free(p->idle[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* An initialised context for pk: an idle one, or a new one. NULL on an OpenSSL error. */
static EVP_PKEY_CTX *pool_take(ctx_pool_t *p, EVP_PKEY *pk)
{
    EVP_PKEY_CTX *ctx = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->n > 0)
        ctx = p->idle[--p->n];
    pthread_mutex_unlock(&p->mu);
    if (ctx != NULL)
        return ctx;
    ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL);
    if (ctx == NULL || (p->sign ? EVP_PKEY_sign_init(ctx) : EVP_PKEY_verify_init(ctx)) != 1) {
        EVP_PKEY_CTX_free(ctx);
        ERR_clear_error();
        return NULL;
    }
    return ctx;
}

static void pool_put(ctx_pool_t *p, EVP_PKEY_CTX *ctx)
{
    pthread_mutex_lock(&p->mu);
    if (p->n < POOL_MAX) {
        p->idle[p->n++] = ctx;
        ctx = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    EVP_PKEY_CTX_free(ctx);
}

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

/* An EC P-256 public key from JWK coordinates. OpenSSL refuses a point off the curve on
 * import; full_check adds EVP_PKEY_public_check (the order check, a scalar multiplication:
 * irrelevant on P-256, whose cofactor is 1, so the per-proof keys of cm_jwt_es256_verify_jwk
 * skip it; keys loaded once keep it). */
static EVP_PKEY *pkey_from_coords(const char *x_b64, const char *y_b64, bool full_check)
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
    if (!full_check)
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
    cm_jwt_keyset_t *ks = cm_xcalloc(1, sizeof(cm_jwt_keyset_t));
    atomic_init(&ks->refs, 1);
    return ks;
}

cm_jwt_keyset_t *cm_jwt_keyset_ref(cm_jwt_keyset_t *ks)
{
    atomic_fetch_add_explicit(&ks->refs, 1, memory_order_relaxed);
    return ks;
}

void cm_jwt_keyset_free(cm_jwt_keyset_t *ks)
{
    if (ks == NULL || atomic_fetch_sub_explicit(&ks->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < ks->n; i++) {
        pool_free(ks->keys[i].pool);
        EVP_PKEY_free(ks->keys[i].pk);
        free(ks->keys[i].header_b64);
    }
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

bool cm_jwt_keyset_has_kid(const cm_jwt_keyset_t *ks, const char *kid)
{
    return find_kid(ks, kid) != NULL;
}

/* Adds the public half of pk under kid (NULL: thumbprint). The same key under the same
 * kid twice is a no-op; another key under a kid already taken is an error. */
/* base64url of {"alg":"ES256","typ":"JWT","kid":…}, the one header cm_jwt_sign writes
 * (jansson escapes the kid); heap. A keyset keeps it per key so a token carrying exactly
 * these bytes needs no header parse (check): they say ES256, JWT and that kid. */
static char *header_of(const char *kid, size_t *len)
{
    json_t *hdr = json_pack("{s:s, s:s, s:s}", "alg", "ES256", "typ", "JWT", "kid", kid);
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (text == NULL)
        abort(); /* only fails on out-of-memory */
    char *b64 = cm_xmalloc(4 * (strlen(text) / 3 + 1) + 1);
    *len = cm_base64url_encode((const unsigned char *)text, strlen(text), b64);
    free(text);
    return b64;
}

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
    /* Only the public half is kept, whatever pk held. */
    k.pk = pkey_from_coords(k.x, k.y, true);
    if (k.pk == NULL) {
        snprintf(err, errlen, "cannot rebuild the public key");
        return -1;
    }
    k.pool = pool_new(false);
    k.header_b64 = header_of(k.kid, &k.header_b64_len);
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
    EVP_PKEY *pk = pkey_from_coords(x, y, true);
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
    case CM_JWT_BAD_ISSUER:
        return "bad_issuer";
    case CM_JWT_TOO_LONG:
        return "lifetime_too_long";
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

/* Before the signature: every claim we read has its type (a mistyped token is malformed). */
/* cnf (RFC 7800) is optional; when present it is an object whose jkt, if any, is a
 * thumbprint-sized string. */
static bool read_cnf(json_t *claims, cm_jwt_claims_t *out)
{
    json_t *cnf = json_object_get(claims, "cnf");
    if (cnf == NULL)
        return true;
    return json_is_object(cnf) && copy_str(cnf, "jkt", out->cnf_jkt, sizeof(out->cnf_jkt), false);
}

/* rid is advisory (a log correlation id, docs/tokens.md): kept when it is a sane request
 * id, ignored otherwise, never a reason to refuse a token. */
_Static_assert(CM_JWT_RID_MAX == CM_ACCESS_ID_MAX, "a rid claim holds one request id");

static void read_rid(json_t *claims, cm_jwt_claims_t *out)
{
    char id[CM_ACCESS_ID_MAX + 1];
    json_t *v = json_object_get(claims, "rid");
    if (json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v) &&
        cm_access_pick_id(json_string_value(v), NULL, id))
        memcpy(out->rid, id, strlen(id) + 1);
}

static bool read_claims(json_t *claims, cm_jwt_claims_t *out)
{
    read_rid(claims, out);
    return read_cnf(claims, out) && copy_str(claims, "iss", out->iss, sizeof(out->iss), false) &&
           copy_str(claims, "sub", out->sub, sizeof(out->sub), true) &&
           copy_str(claims, "evt", out->evt, sizeof(out->evt), true) &&
           copy_str(claims, "jti", out->jti, sizeof(out->jti), true) &&
           copy_int(claims, "iat", &out->iat, false) && copy_int(claims, "nbf", &out->nbf, false) &&
           copy_int(claims, "exp", &out->exp, true);
}

/* After the signature: audience, issuer, lifetime, then time. */
static cm_jwt_result_t judge_claims(json_t *claims, const cm_jwt_policy_t *pol, int64_t now_s,
                                    cm_jwt_claims_t *out)
{
    int64_t leeway_s = pol->leeway_s;
    if (!audience_ok(claims, pol->audience ? pol->audience : CM_JWT_AUDIENCE))
        return CM_JWT_BAD_AUDIENCE;
    if (pol->issuer != NULL &&
        (json_object_get(claims, "iss") == NULL || strcmp(out->iss, pol->issuer) != 0))
        return CM_JWT_BAD_ISSUER;
    if (leeway_s < 0)
        leeway_s = 0;
    if (leeway_s > 86400)
        leeway_s = 86400;
    if (pol->max_lifetime_s > 0) {
        if (json_object_get(claims, "iat") == NULL)
            return CM_JWT_MALFORMED;
        /* claims are any int64: subtract without overflow */
        int64_t life, left;
        if (__builtin_sub_overflow(out->exp, out->iat, &life) || life < 0 ||
            life > pol->max_lifetime_s || __builtin_sub_overflow(out->exp, now_s, &left) ||
            left > pol->max_lifetime_s + leeway_s)
            return CM_JWT_TOO_LONG;
    }
    if (json_object_get(claims, "nbf") != NULL && now_s + leeway_s < out->nbf)
        return CM_JWT_NOT_YET_VALID;
    if (now_s - leeway_s >= out->exp)
        return CM_JWT_EXPIRED;
    return CM_JWT_OK;
}

/* The JOSE signature (64 raw bytes, R || S, base64url) as DER into der; its length, or 0. */
static int jose_to_der(const char *sig_b64, size_t sig_b64_len, unsigned char der[SIG_DER_MAX])
{
    unsigned char raw[SIG_LEN], *p = der;
    int derlen = 0;
    ECDSA_SIG *sig = NULL;
    BIGNUM *r = NULL, *s = NULL;
    if (sig_b64_len != SIG_B64_LEN ||
        cm_base64url_decode(sig_b64, sig_b64_len, raw, sizeof(raw)) != SIG_LEN)
        goto out;
    sig = ECDSA_SIG_new();
    r = BN_bin2bn(raw, SIG_LEN / 2, NULL);
    s = BN_bin2bn(raw + SIG_LEN / 2, SIG_LEN / 2, NULL);
    if (sig == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(sig, r, s) != 1)
        goto out;
    r = s = NULL; /* owned by sig now */
    derlen = i2d_ECDSA_SIG(sig, &p);
    if (derlen <= 0 || derlen > SIG_DER_MAX)
        derlen = 0;
out:
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    return derlen;
}

/* The JOSE signature (64 raw bytes, R || S) checked over input with key. */
static bool signature_ok(const jwk_t *key, const char *input, size_t input_len, const char *sig_b64,
                         size_t sig_b64_len)
{
    unsigned char der[SIG_DER_MAX], digest[SHA256_DIGEST_LENGTH];
    bool ok = false;
    EVP_PKEY_CTX *ctx = NULL;
    int derlen = jose_to_der(sig_b64, sig_b64_len, der);
    if (derlen == 0 || SHA256((const unsigned char *)input, input_len, digest) == NULL ||
        (ctx = pool_take(key->pool, key->pk)) == NULL)
        goto out;
    ok = EVP_PKEY_verify(ctx, der, (size_t)derlen, digest, sizeof(digest)) == 1;
    pool_put(key->pool, ctx);
out:
    ERR_clear_error();
    return ok;
}

int cm_jwt_jwk_thumbprint(const char *x, const char *y, char out[CM_JWT_JKT_LEN + 1])
{
    unsigned char coord[COORD_LEN];
    if (strlen(x) != COORD_B64_LEN || strlen(y) != COORD_B64_LEN ||
        cm_base64url_decode(x, COORD_B64_LEN, coord, sizeof(coord)) != COORD_LEN ||
        cm_base64url_decode(y, COORD_B64_LEN, coord, sizeof(coord)) != COORD_LEN)
        return -1;
    return thumbprint(x, y, out, CM_JWT_JKT_LEN + 1);
}

bool cm_jwt_es256_verify_jwk(const char *x, const char *y, const char *input, size_t input_len,
                             const char *sig_b64, size_t sig_b64_len)
{
    unsigned char der[SIG_DER_MAX], digest[SHA256_DIGEST_LENGTH];
    bool ok = false;
    EVP_PKEY_CTX *ctx = NULL;
    EVP_PKEY *pk = NULL;
    int derlen = jose_to_der(sig_b64, sig_b64_len, der);
    if (derlen == 0 || (pk = pkey_from_coords(x, y, false)) == NULL ||
        SHA256((const unsigned char *)input, input_len, digest) == NULL)
        goto out;
    ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pk, NULL);
    if (ctx == NULL || EVP_PKEY_verify_init(ctx) != 1)
        goto out;
    ok = EVP_PKEY_verify(ctx, der, (size_t)derlen, digest, sizeof(digest)) == 1;
out:
    EVP_PKEY_CTX_free(ctx);
    EVP_PKEY_free(pk);
    ERR_clear_error();
    return ok;
}

/* cm_jwt_verify, and cm_jwt_inspect when with_signature is false. */
static cm_jwt_result_t check(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                             const cm_jwt_policy_t *policy, int64_t now_s, cm_jwt_claims_t *out,
                             bool with_signature)
{
    static const cm_jwt_policy_t defaults = {0};
    cm_jwt_result_t r = CM_JWT_MALFORMED;
    json_t *hdr = NULL, *claims = NULL;
    const jwk_t *key = NULL;
    const cm_jwt_policy_t *pol = policy ? policy : &defaults;
    memset(out, 0, sizeof(*out));
    if (token == NULL || len == 0 || len > TOKEN_MAX)
        goto out;
    /* header.payload.signature, each canonical base64url (no NUL, no fourth part) */
    const char *dot1 = memchr(token, '.', len);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
    if (dot2 == NULL)
        goto out;
    size_t hlen = (size_t)(dot1 - token), plen = (size_t)(dot2 - dot1 - 1);
    size_t slen = len - (size_t)(dot2 + 1 - token);
    /* a NUL or a third dot fails the alphabet check of its segment */
    if (hlen == 0 || plen == 0 || !is_b64url_segment(token, hlen) ||
        !is_b64url_segment(dot1 + 1, plen) || !is_b64url_segment(dot2 + 1, slen))
        goto out;
    /* our signers' own header, byte for byte: ES256, JWT and a kid we hold (no parse) */
    for (size_t i = 0; i < ks->n && key == NULL; i++)
        if (ks->keys[i].header_b64_len == hlen && memcmp(ks->keys[i].header_b64, token, hlen) == 0)
            key = &ks->keys[i];
    if (key != NULL) {
        strcpy(out->kid, key->kid);
    } else {
        /* the header decides nothing: ES256 or nothing, and a key we hold */
        if ((hdr = segment_json(token, hlen)) == NULL)
            goto out;
        if ((r = judge_header(ks, hdr, &key, out)) != CM_JWT_OK)
            goto out;
    }
    if ((claims = segment_json(dot1 + 1, plen)) == NULL || !read_claims(claims, out)) {
        r = CM_JWT_MALFORMED;
        goto out;
    }
    if (!with_signature) {
        if (slen != SIG_B64_LEN) { /* the shape a signature has, at least */
            r = CM_JWT_MALFORMED;
            goto out;
        }
    } else if (!signature_ok(key, token, (size_t)(dot2 - token), dot2 + 1, slen)) {
        r = CM_JWT_BAD_SIGNATURE;
        goto out;
    }
    r = judge_claims(claims, pol, now_s, out);
out:
    if (r != CM_JWT_OK && r != CM_JWT_EXPIRED)
        memset(out, 0, sizeof(*out));
    json_decref(claims);
    json_decref(hdr);
    return r;
}

cm_jwt_result_t cm_jwt_verify(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                              const cm_jwt_policy_t *policy, int64_t now_s, cm_jwt_claims_t *out)
{
    return check(ks, token, len, policy, now_s, out, true);
}

cm_jwt_result_t cm_jwt_inspect(const cm_jwt_keyset_t *ks, const char *token, size_t len,
                               const cm_jwt_policy_t *policy, int64_t now_s, cm_jwt_claims_t *out)
{
    return check(ks, token, len, policy, now_s, out, false);
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
    /* The header never changes: encoded once. */
    s->header_b64 = header_of(s->kid, &s->header_b64_len);
    s->pool = pool_new(true);
    EVP_PKEY_CTX *probe = pool_take(s->pool, pk);
    if (probe == NULL) {
        snprintf(err, errlen, "OpenSSL cannot sign with this key");
        goto err;
    }
    pool_put(s->pool, probe);
    s->pk = pk;
    pk = NULL;
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
    pool_free(s->pool);
    EVP_PKEY_free(s->pk); /* OpenSSL clears private key material on free */
    free(s->header_b64);
    free(s);
}

const char *cm_jwt_signer_kid(const cm_jwt_signer_t *s)
{
    return s->kid;
}

/* The claims as compact JSON into buf; its length, or 0 when it does not fit. */
static size_t claims_json(const cm_jwt_claims_t *c, const char *audience, char *buf, size_t cap)
{
    json_t *o = json_object();
    if (c->iss[0] != '\0')
        json_object_set_new(o, "iss", json_string(c->iss));
    json_object_set_new(o, "aud", json_string(audience));
    json_object_set_new(o, "sub", json_string(c->sub));
    json_object_set_new(o, "evt", json_string(c->evt));
    json_object_set_new(o, "jti", json_string(c->jti));
    json_object_set_new(o, "iat", json_integer(c->iat));
    json_object_set_new(o, "nbf", json_integer(c->nbf));
    json_object_set_new(o, "exp", json_integer(c->exp));
    if (c->cnf_jkt[0] != '\0')
        json_object_set_new(o, "cnf", json_pack("{s:s}", "jkt", c->cnf_jkt));
    if (c->rid[0] != '\0')
        json_object_set_new(o, "rid", json_string(c->rid));
    size_t n = json_dumpb(o, buf, cap, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return n <= cap ? n : 0;
}

char *cm_jwt_sign(const cm_jwt_signer_t *s, const cm_jwt_claims_t *c, const char *audience)
{
    char payload[SEGMENT_DECODED_MAX];
    unsigned char digest[SHA256_DIGEST_LENGTH], der[SIG_DER_MAX], raw[SIG_LEN];
    size_t derlen = sizeof(der), plen;
    char *tok = NULL;
    ECDSA_SIG *sig = NULL;
    EVP_PKEY_CTX *ctx = NULL;
    if (c->sub[0] == '\0' || c->evt[0] == '\0' || c->jti[0] == '\0' ||
        (plen = claims_json(c, audience ? audience : CM_JWT_AUDIENCE, payload, sizeof(payload))) ==
            0)
        return NULL;
    /* header.payload, then '.' and the 86-character signature */
    size_t cap = s->header_b64_len + 1 + 4 * (plen / 3 + 1) + 1 + SIG_B64_LEN + 1;
    tok = cm_xmalloc(cap);
    memcpy(tok, s->header_b64, s->header_b64_len);
    size_t n = s->header_b64_len;
    tok[n++] = '.';
    n += cm_base64url_encode((const unsigned char *)payload, plen, tok + n);
    const unsigned char *p = der;
    if (SHA256((const unsigned char *)tok, n, digest) == NULL ||
        (ctx = pool_take(s->pool, s->pk)) == NULL)
        goto err;
    int ok = EVP_PKEY_sign(ctx, der, &derlen, digest, sizeof(digest));
    pool_put(s->pool, ctx);
    if (ok != 1 || (sig = d2i_ECDSA_SIG(NULL, &p, (long)derlen)) == NULL ||
        BN_bn2binpad(ECDSA_SIG_get0_r(sig), raw, SIG_LEN / 2) != SIG_LEN / 2 ||
        BN_bn2binpad(ECDSA_SIG_get0_s(sig), raw + SIG_LEN / 2, SIG_LEN / 2) != SIG_LEN / 2)
        goto err;
    tok[n++] = '.';
    cm_base64url_encode(raw, sizeof(raw), tok + n);
    ECDSA_SIG_free(sig);
    return tok;
err:
    ECDSA_SIG_free(sig);
    ERR_clear_error();
    free(tok);
    return NULL;
}
