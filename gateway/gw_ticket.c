/*
 * gw_ticket — see gw_ticket.h.
 *
 * Binary layout before base64url (73 bytes → 98 characters):
 *   [0] version (1) | [1..8] gen | [9..16] number | [17..24] iat | [25..40] visitor |
 *   [41..72] HMAC-SHA256("onsale-queue-ticket" 0x00 event 0x00 bytes[0..40])
 * A bound ticket (version 2, 89 bytes → 119 characters) puts the key's 16 thumbprint
 * bytes at [41..56] and the MAC, over bytes[0..56], at [57..88]. 128 bits of the
 * thumbprint: finding another key with the same leading bytes is a 2^128 search.
 * A customer's ticket (version 3, or 4 when also bound) puts, after the body of version 1
 * (or 2), the customer id's length (1 byte, 1..GW_CUSTOMER_MAX) and its characters, then
 * the MAC over all of that: at most 154 bytes → 206 characters.
 * Integers big-endian. The domain string keeps this MAC from ever being confused with
 * another use of the same secret. HMAC-SHA256 is OpenSSL's (EVP_MAC); CRYPTO_memcmp makes
 * the check constant-time.
 *
 * Every status poll verifies a ticket, so the MAC is on the hot path. OpenSSL 3's
 * one-shot HMAC() fetches the digest and builds and frees its contexts on every call
 * (13 allocations, ~4 µs); a context keyed once and re-initialised with
 * EVP_MAC_init(ctx, NULL, 0, NULL) (OpenSSL ≥ 3.0 keeps the key) costs 2 and ~0.9 µs.
 * Each thread keeps a few keyed contexts (the ticket secrets in rotation), found by
 * comparing the key; they are freed by a pthread key destructor when the thread ends.
 */
#include "gw_ticket.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cm_http.h"
#include "cm_parse.h"
#include "cm_text.h"
#include "cm_tls.h"

#define VERSION                1
#define VERSION_BOUND          2
#define VERSION_CUSTOMER       3
#define VERSION_CUSTOMER_BOUND 4
#define BODY_LEN               41
#define MAC_LEN                32
#define BOUND_LEN              (BODY_LEN + GW_TICKET_JKT_LEN) /* the body of a bound ticket */
#define BODY_MAX               (BOUND_LEN + 1 + GW_CUSTOMER_MAX)
#define RAW_MAX                (BODY_MAX + MAC_LEN)
#define TEXT_MAX               ((RAW_MAX * 4 + 2) / 3)
#define DOMAIN                 "onsale-queue-ticket"

/* --- the per-thread keyed HMAC contexts --- */

#define MAC_CACHE   4   /* secrets in rotation seldom exceed two */
#define MAC_KEY_MAX 128 /* longer keys are not cached (HMAC hashes them anyway) */

typedef struct mac_slot {
    EVP_MAC_CTX *ctx; /* keyed with key; NULL: free slot */
    unsigned char key[MAC_KEY_MAX];
    size_t keylen;
} mac_slot_t;

typedef struct mac_cache {
    mac_slot_t slot[MAC_CACHE];
    unsigned next; /* the slot replaced when all are taken */
    unsigned long keyed;
} mac_cache_t;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static EVP_MAC *hmac_alg; /* fetched once per process, never freed */
static __thread mac_cache_t *cache;

static void slot_clear(mac_slot_t *s)
{
    EVP_MAC_CTX_free(s->ctx);
    OPENSSL_cleanse(s->key, sizeof(s->key));
    s->ctx = NULL;
    s->keylen = 0;
}

static void cache_free(void *p)
{
    mac_cache_t *c = p;
    for (int i = 0; i < MAC_CACHE; i++)
        slot_clear(&c->slot[i]);
    free(c);
    cache = NULL;
}

static void cache_init_once(void)
{
    if (pthread_key_create(&cache_key, cache_free) != 0)
        abort();
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (hmac_alg == NULL)
        abort(); /* OpenSSL without HMAC: nothing here can work */
}

/* A new context keyed with key, or NULL (OpenSSL could not allocate or refused the key). */
static EVP_MAC_CTX *keyed_ctx(const void *key, size_t keylen)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    pthread_once(&cache_once, cache_init_once); /* hmac_alg */
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(hmac_alg);
    if (ctx != NULL && EVP_MAC_init(ctx, key, keylen, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

/* This thread's context for key, keyed now if it is not cached yet; NULL when not
 * cacheable (the caller then keys a context of its own and frees it). */
static EVP_MAC_CTX *cached_ctx(const void *key, size_t keylen)
{
    if (keylen > MAC_KEY_MAX)
        return NULL;
    if (cache == NULL) {
        pthread_once(&cache_once, cache_init_once);
        cache = calloc(1, sizeof(*cache));
        if (cache == NULL || pthread_setspecific(cache_key, cache) != 0)
            abort(); /* as cm_xmalloc: out of memory */
    }
    for (int i = 0; i < MAC_CACHE; i++) {
        mac_slot_t *s = &cache->slot[i];
        if (s->ctx != NULL && s->keylen == keylen && memcmp(s->key, key, keylen) == 0)
            return EVP_MAC_init(s->ctx, NULL, 0, NULL) == 1 ? s->ctx : NULL;
    }
    EVP_MAC_CTX *ctx = keyed_ctx(key, keylen);
    if (ctx == NULL)
        return NULL;
    mac_slot_t *s = &cache->slot[cache->next];
    cache->next = (cache->next + 1) % MAC_CACHE;
    slot_clear(s);
    s->ctx = ctx;
    memcpy(s->key, key, keylen);
    s->keylen = keylen;
    cache->keyed++;
    return ctx;
}

unsigned long gw_ticket_hmac_keyed(void)
{
    return cache != NULL ? cache->keyed : 0;
}

void gw_ticket_hmac(const void *key, size_t keylen, const void *msg, size_t n,
                    unsigned char out[32])
{
    EVP_MAC_CTX *ctx = cached_ctx(key, keylen), *own = NULL;
    if (ctx == NULL)
        ctx = own = keyed_ctx(key, keylen);
    size_t outlen = 0;
    if (ctx == NULL || EVP_MAC_update(ctx, msg, n) != 1 ||
        EVP_MAC_final(ctx, out, &outlen, 32) != 1 || outlen != 32)
        abort(); /* only on allocation failure inside OpenSSL */
    EVP_MAC_CTX_free(own);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

bool gw_ticket_visitor_ok(const char *s)
{
    size_t i = 0;
    for (; s[i] != '\0'; i++) {
        if (i >= GW_VISITOR_LEN || hexval(s[i]) < 0)
            return false;
    }
    return i == GW_VISITOR_LEN;
}

bool gw_ticket_customer_ok(const char *s, size_t n)
{
    if (n == 0 || n > GW_CUSTOMER_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == ':' || c == '+' || c == '-'))
            return false;
    }
    return true;
}

static void mac_of(const unsigned char *secret, size_t secretlen, const char *event,
                   const unsigned char *body, size_t body_len, unsigned char out[MAC_LEN])
{
    unsigned char msg[sizeof(DOMAIN) + CM_IDENT_MAX + 1 + BODY_MAX];
    size_t elen = strnlen(event, CM_IDENT_MAX);
    size_t o = 0;
    memcpy(msg, DOMAIN, sizeof(DOMAIN)); /* with its NUL as the separator */
    o += sizeof(DOMAIN);
    memcpy(msg + o, event, elen);
    o += elen;
    msg[o++] = 0;
    memcpy(msg + o, body, body_len);
    o += body_len;
    gw_ticket_hmac(secret, secretlen, msg, o, out);
}

size_t gw_ticket_encode(const unsigned char *secret, size_t secretlen, const char *event,
                        const gw_ticket_t *t, char *out, size_t outlen)
{
    unsigned char raw[RAW_MAX];
    size_t clen = strnlen(t->customer, sizeof(t->customer));
    if (outlen < GW_TICKET_MAX_LEN || !gw_ticket_visitor_ok(t->visitor) ||
        (clen > 0 && !gw_ticket_customer_ok(t->customer, clen)))
        return 0;
    raw[0] = clen > 0 ? (t->bound ? VERSION_CUSTOMER_BOUND : VERSION_CUSTOMER)
                      : (t->bound ? VERSION_BOUND : VERSION);
    put_u64(raw + 1, t->gen);
    put_u64(raw + 9, t->num);
    put_u64(raw + 17, (uint64_t)t->iat);
    for (int i = 0; i < 16; i++)
        raw[25 + i] =
            (unsigned char)(hexval(t->visitor[2 * i]) << 4 | hexval(t->visitor[2 * i + 1]));
    size_t body_len = BODY_LEN;
    if (t->bound) {
        memcpy(raw + body_len, t->jkt, GW_TICKET_JKT_LEN);
        body_len += GW_TICKET_JKT_LEN;
    }
    if (clen > 0) {
        raw[body_len++] = (unsigned char)clen;
        memcpy(raw + body_len, t->customer, clen);
        body_len += clen;
    }
    mac_of(secret, secretlen, event, raw, body_len, raw + body_len);
    return cm_base64url_encode(raw, body_len + MAC_LEN, out);
}

int gw_ticket_decode(const unsigned char *secret, size_t secretlen, const char *event,
                     const char *text, size_t len, gw_ticket_t *out)
{
    unsigned char raw[RAW_MAX + 3], mac[MAC_LEN];
    if (len > TEXT_MAX)
        return -1;
    long n = cm_base64url_decode(text, len, raw, sizeof(raw));
    if (n < BODY_LEN + MAC_LEN || len != ((size_t)n * 4 + 2) / 3) /* unpadded, one length */
        return -1;
    bool bound = raw[0] == VERSION_BOUND || raw[0] == VERSION_CUSTOMER_BOUND;
    bool customer = raw[0] == VERSION_CUSTOMER || raw[0] == VERSION_CUSTOMER_BOUND;
    if (raw[0] < VERSION || raw[0] > VERSION_CUSTOMER_BOUND)
        return -1;
    size_t body_len = bound ? BOUND_LEN : BODY_LEN, clen = 0;
    if (customer) {
        if ((size_t)n < body_len + 1 + MAC_LEN)
            return -1;
        clen = raw[body_len];
        if (!gw_ticket_customer_ok((const char *)raw + body_len + 1, clen))
            return -1;
        body_len += 1 + clen;
    }
    if ((size_t)n != body_len + MAC_LEN)
        return -1;
    mac_of(secret, secretlen, event, raw, body_len, mac);
    if (CRYPTO_memcmp(mac, raw + body_len, MAC_LEN) != 0)
        return -1;
    memset(out, 0, sizeof(*out));
    out->bound = bound;
    if (bound)
        memcpy(out->jkt, raw + BODY_LEN, GW_TICKET_JKT_LEN);
    if (customer)
        memcpy(out->customer, raw + body_len - clen, clen);
    out->gen = get_u64(raw + 1);
    out->num = get_u64(raw + 9);
    out->iat = (int64_t)get_u64(raw + 17);
    cm_hex_encode(raw + 25, 16, out->visitor);
    return 0;
}

int gw_ticket_decode_any(const gw_ticket_keys_t *keys, const char *event, const char *text,
                         size_t len, gw_ticket_t *out)
{
    for (int i = keys->n - 1; i >= 0; i--)
        if (gw_ticket_decode(keys->secret[i], keys->len[i], event, text, len, out) == 0)
            return 0;
    return -1;
}

bool gw_ticket_fresh(const gw_ticket_t *t, int64_t now_s, int64_t max_age_s)
{
    /* comparisons against iat only: a crafted iat (any int64) never overflows */
    return t->iat <= now_s + GW_TICKET_FUTURE_S && t->iat >= now_s - max_age_s;
}

const char *gw_ticket_from_cookie(const char *header, const char *event, size_t *len)
{
    size_t plen = strlen(GW_COOKIE_PREFIX), elen = strlen(event);
    const char *p = header;
    while (p != NULL && *p != '\0') {
        while (*p == ' ' || *p == '\t' || *p == ';')
            p++;
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > plen + elen && strncmp(p, GW_COOKIE_PREFIX, plen) == 0 &&
            strncmp(p + plen, event, elen) == 0 && p[plen + elen] == '=') {
            const char *v = p + plen + elen + 1;
            size_t vlen = n - plen - elen - 1;
            while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
                vlen--;
            if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"') {
                v++;
                vlen -= 2;
            }
            *len = vlen;
            return v;
        }
        p = end;
    }
    return NULL;
}

void gw_ticket_new_visitor(char out[GW_VISITOR_LEN + 1])
{
    unsigned char raw[16];
    cm_tls_random(raw, sizeof(raw));
    cm_hex_encode(raw, sizeof(raw), out);
}

/* --- the cookie ---------------------------------------------------------------------- */

size_t gw_ticket_cookie_text(char *out, size_t size, const char *event, const char *ticket)
{
    cm_text_t t = cm_text_at(out, size);
    CM_TEXT_LIT(&t, GW_COOKIE_PREFIX);
    cm_text_str(&t, event);
    CM_TEXT_LIT(&t, "=");
    cm_text_str(&t, ticket);
    CM_TEXT_LIT(&t, "; HttpOnly; Secure; SameSite=Lax; Path=/q/");
    cm_text_str(&t, event);
    CM_TEXT_LIT(&t, "; Max-Age=86400");
    return cm_text_done(&t, out);
}

void gw_ticket_set_cookie(cm_req_t *req, const char *event, const char *ticket)
{
    char cookie[GW_TICKET_MAX_LEN + 2 * CM_IDENT_MAX + 128];
    if (gw_ticket_cookie_text(cookie, sizeof(cookie), event, ticket) > 0)
        cm_http_add_header(req, "Set-Cookie", cookie);
}
