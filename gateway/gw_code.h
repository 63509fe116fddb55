/*
 * gw_code — presale codes derived from a keyed MAC (docs/design.md, "Presale codes"):
 * issuing, checking and exporting a code needs no storage, only the room's code secret
 * (code_secret_file, the same on every gateway).
 *
 * A code is 80 bits: its batch (8 bits, 1..255: one issue of N codes for one phase), its
 * serial in the batch (24 bits) and a tag (48 bits: the first bytes of HMAC-SHA256 over
 * the event, the room's generation, the batch and the serial), written as 16 characters
 * of Crockford's base32 plus one check character (Luhn mod 32), grouped
 * "XXXX-XXXX-XXXX-XXXXX" for mailing. Parsing accepts any case, hyphens and spaces, and
 * Crockford's O = 0, I = L = 1; the check character turns a typo into "malformed" before
 * any MAC or Redis is involved. Uses and revocations are what needs storage (gw_rediskeys.h:
 * one byte and one bit per code).
 *
 * Pure functions (OpenSSL's HMAC only), any thread.
 */
#ifndef GW_CODE_H
#define GW_CODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_CODE_CHARS     17       /* without the hyphens */
#define GW_CODE_TEXT_MAX  24       /* a written code with its hyphens and NUL */
#define GW_CODE_INPUT_MAX 64       /* longest text a fan may send (spaces, hyphens) */
#define GW_CODE_BATCH_MAX 255      /* batches per room */
#define GW_CODE_SERIALS   16777216 /* codes per room, all batches (2^24) */
#define GW_CODE_TAG_LEN   6

typedef struct gw_code {
    unsigned batch;  /* 1..GW_CODE_BATCH_MAX */
    uint32_t serial; /* 0..GW_CODE_SERIALS-1 */
    unsigned char tag[GW_CODE_TAG_LEN];
} gw_code_t;

/** Parses a code as a fan typed it. 0, or -1 when malformed (charset, length, check). */
__attribute__((warn_unused_result)) int gw_code_parse(const char *text, size_t len, gw_code_t *out);

/** The tag of (event, gen, batch, serial) under secret. */
void gw_code_tag(const unsigned char *secret, size_t secret_len, const char *event, uint64_t gen,
                 unsigned batch, uint32_t serial, unsigned char tag[GW_CODE_TAG_LEN]);

/** Writes the code of (batch, serial) into out, grouped with hyphens; its length (20). */
size_t gw_code_make(const unsigned char *secret, size_t secret_len, const char *event, uint64_t gen,
                    unsigned batch, uint32_t serial, char out[GW_CODE_TEXT_MAX]);

/** True when c's tag is the one secret gives its batch and serial (constant time). */
bool gw_code_genuine(const unsigned char *secret, size_t secret_len, const char *event,
                     uint64_t gen, const gw_code_t *c);

#endif
