/*
 * gw_ticket — see gw_ticket.h.
 *
 * Binary layout before base64url (73 bytes → 98 characters):
 *   [0] version (1) | [1..8] gen | [9..16] number | [17..24] iat | [25..40] visitor |
 *   [41..72] HMAC-SHA256("onsale-queue-ticket" 0x00 event 0x00 bytes[0..40])
 * Integers big-endian. The domain string keeps this MAC from ever being confused with
 * another use of the same secret. OpenSSL's one-shot HMAC() is the whole crypto here;
 * CRYPTO_memcmp makes the check constant-time.
 */
#include "gw_ticket.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "cm_parse.h"
#include "cm_tls.h"

#define VERSION  1
#define BODY_LEN 41
#define MAC_LEN  32
#define RAW_LEN  (BODY_LEN + MAC_LEN)
#define DOMAIN   "onsale-queue-ticket"

void gw_ticket_hmac(const void *key, size_t keylen, const void *msg, size_t n,
                    unsigned char out[32])
{
    unsigned int outlen = 32;
    if (HMAC(EVP_sha256(), key, (int)keylen, msg, n, out, &outlen) == NULL)
        abort(); /* only on allocation failure inside OpenSSL */
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

static void mac_of(const unsigned char *secret, size_t secretlen, const char *event,
                   const unsigned char *body, unsigned char out[MAC_LEN])
{
    unsigned char msg[sizeof(DOMAIN) + CM_IDENT_MAX + 1 + BODY_LEN];
    size_t elen = strnlen(event, CM_IDENT_MAX);
    size_t o = 0;
    memcpy(msg, DOMAIN, sizeof(DOMAIN)); /* with its NUL as the separator */
    o += sizeof(DOMAIN);
    memcpy(msg + o, event, elen);
    o += elen;
    msg[o++] = 0;
    memcpy(msg + o, body, BODY_LEN);
    o += BODY_LEN;
    gw_ticket_hmac(secret, secretlen, msg, o, out);
}

size_t gw_ticket_encode(const unsigned char *secret, size_t secretlen, const char *event,
                        const gw_ticket_t *t, char *out, size_t outlen)
{
    unsigned char raw[RAW_LEN];
    if (outlen < GW_TICKET_MAX_LEN || !gw_ticket_visitor_ok(t->visitor))
        return 0;
    raw[0] = VERSION;
    put_u64(raw + 1, t->gen);
    put_u64(raw + 9, t->num);
    put_u64(raw + 17, (uint64_t)t->iat);
    for (int i = 0; i < 16; i++)
        raw[25 + i] =
            (unsigned char)(hexval(t->visitor[2 * i]) << 4 | hexval(t->visitor[2 * i + 1]));
    mac_of(secret, secretlen, event, raw, raw + BODY_LEN);
    return cm_base64url_encode(raw, RAW_LEN, out);
}

int gw_ticket_decode(const unsigned char *secret, size_t secretlen, const char *event,
                     const char *text, size_t len, gw_ticket_t *out)
{
    unsigned char raw[RAW_LEN + 3], mac[MAC_LEN];
    if (len != (RAW_LEN * 4 + 2) / 3)
        return -1;
    if (cm_base64url_decode(text, len, raw, sizeof(raw)) != RAW_LEN || raw[0] != VERSION)
        return -1;
    mac_of(secret, secretlen, event, raw, mac);
    if (CRYPTO_memcmp(mac, raw + BODY_LEN, MAC_LEN) != 0)
        return -1;
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
