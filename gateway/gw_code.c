/*
 * gw_code — see gw_code.h.
 */
#include "gw_code.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

static const char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/* Crockford's value of c, or -1. */
static int value_of(char c)
{
    if (c >= 'a' && c <= 'z')
        c = (char)(c - 'a' + 'A');
    if (c == 'O')
        return 0;
    if (c == 'I' || c == 'L')
        return 1;
    const char *p = c ? strchr(alphabet, c) : NULL;
    return p ? (int)(p - alphabet) : -1;
}

/* Luhn mod 32 over v[0..n-1]: the check value to append. */
static int check_value(const int *v, size_t n)
{
    int factor = 2, sum = 0;
    for (size_t i = n; i-- > 0;) {
        int addend = factor * v[i];
        factor = factor == 2 ? 1 : 2;
        sum += addend / 32 + addend % 32;
    }
    return (32 - sum % 32) % 32;
}

/* The 80 bits of (batch, serial, tag) as 16 base32 values. */
static void to_values(unsigned batch, uint32_t serial, const unsigned char *tag, int v[16])
{
    unsigned char b[10] = {(unsigned char)batch, (unsigned char)(serial >> 16),
                           (unsigned char)(serial >> 8), (unsigned char)serial};
    memcpy(b + 4, tag, GW_CODE_TAG_LEN);
    for (int i = 0; i < 16; i++) {
        int bit = i * 5, byte = bit / 8, shift = bit % 8;
        unsigned w = ((unsigned)b[byte] << 8) | (byte + 1 < 10 ? b[byte + 1] : 0);
        v[i] = (int)((w >> (11 - shift)) & 31);
    }
}

int gw_code_parse(const char *text, size_t len, gw_code_t *out)
{
    int v[GW_CODE_CHARS];
    size_t n = 0;
    if (text == NULL || len > GW_CODE_INPUT_MAX)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '-' || text[i] == ' ')
            continue;
        int x = value_of(text[i]);
        if (x < 0 || n == GW_CODE_CHARS)
            return -1;
        v[n++] = x;
    }
    if (n != GW_CODE_CHARS || check_value(v, 16) != v[16])
        return -1;
    unsigned char b[10] = {0};
    for (int i = 0; i < 16; i++) {
        int bit = i * 5;
        for (int k = 0; k < 5; k++, bit++)
            if (v[i] & (16 >> k))
                b[bit / 8] |= (unsigned char)(0x80 >> (bit % 8));
    }
    out->batch = b[0];
    out->serial = ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
    memcpy(out->tag, b + 4, GW_CODE_TAG_LEN);
    return out->batch >= 1 ? 0 : -1;
}

void gw_code_tag(const unsigned char *secret, size_t secret_len, const char *event, uint64_t gen,
                 unsigned batch, uint32_t serial, unsigned char tag[GW_CODE_TAG_LEN])
{
    /* "onsale-code" NUL event NUL gen (8, big-endian) batch (1) serial (3) */
    unsigned char msg[12 + 65 + 12];
    size_t elen = strnlen(event, 64), n = 0;
    memcpy(msg, "onsale-code", 12);
    n = 12;
    memcpy(msg + n, event, elen);
    n += elen;
    msg[n++] = 0;
    for (int i = 7; i >= 0; i--)
        msg[n++] = (unsigned char)(gen >> (8 * i));
    msg[n++] = (unsigned char)batch;
    msg[n++] = (unsigned char)(serial >> 16);
    msg[n++] = (unsigned char)(serial >> 8);
    msg[n++] = (unsigned char)serial;
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    static const unsigned char empty = 0;
    HMAC(EVP_sha256(), secret_len ? secret : &empty, (int)secret_len, msg, n, mac, &maclen);
    memcpy(tag, mac, GW_CODE_TAG_LEN);
}

size_t gw_code_make(const unsigned char *secret, size_t secret_len, const char *event, uint64_t gen,
                    unsigned batch, uint32_t serial, char out[GW_CODE_TEXT_MAX])
{
    unsigned char tag[GW_CODE_TAG_LEN];
    int v[GW_CODE_CHARS];
    gw_code_tag(secret, secret_len, event, gen, batch, serial, tag);
    to_values(batch, serial, tag, v);
    v[16] = check_value(v, 16);
    size_t n = 0;
    for (int i = 0; i < GW_CODE_CHARS; i++) {
        if (i == 4 || i == 8 || i == 12)
            out[n++] = '-';
        out[n++] = alphabet[v[i]];
    }
    out[n] = '\0';
    return n;
}

bool gw_code_genuine(const unsigned char *secret, size_t secret_len, const char *event,
                     uint64_t gen, const gw_code_t *c)
{
    unsigned char want[GW_CODE_TAG_LEN];
    gw_code_tag(secret, secret_len, event, gen, c->batch, c->serial, want);
    return CRYPTO_memcmp(want, c->tag, GW_CODE_TAG_LEN) == 0;
}
