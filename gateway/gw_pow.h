/*
 * gw_pow — adaptive proof of work on join (docs/design.md, "Bot defences"; docs/api.md).
 *
 * A challenge is stateless: the compact base64url text of
 *   version(1) ‖ bits(1) ‖ expires(4, epoch seconds, big-endian) ‖ issuer(8) ‖ serial(4)
 *   ‖ mac(16)
 * where mac is HMAC-SHA256(key, version ‖ bits ‖ expires ‖ issuer ‖ serial ‖ event ‖ 0 ‖
 * block) cut to 16 bytes: the gateway keeps nothing per challenge, and a challenge of
 * another event or another address block never verifies. The issuer is drawn at random
 * when the process starts; the serial counts the challenges it issued whose expiry falls
 * in the same GW_POW_BUCKET_S-second bucket (0, 1, 2, ...), so (bucket, issuer, serial)
 * names one challenge and the serials of a bucket are dense: a bit each in a bitmap.
 * A proof is "<challenge>.<nonce>" where the nonce is 1-32 characters of [A-Za-z0-9_-]
 * and SHA-256(challenge ‖ nonce), over the ASCII text of both, starts with at least
 * `bits` zero bits. Checking one costs one HMAC and one SHA-256.
 *
 * The difficulty of a new challenge is base_bits, plus one bit for each doubling of the
 * address block's recent challenge rate past block_free_per_min, plus one bit for each
 * doubling of this gateway's recent join rate past total_free_per_min, capped at
 * max_bits (gw_pow_difficulty). Rates decay exponentially with window_s as time constant,
 * so the difficulty falls back as the crowd thins. A block is an IPv4 /24 or an IPv6 /64.
 *
 * Replays are bounded by the caller: a proof is used once per room, its serial's bit set
 * in the Redis bitmap of its bucket and issuer, which outlives the challenge (gw_queue.c
 * proof_set, join.lua, join_batch.lua).
 *
 * Thread-safe: one instance serves every worker (the rate table is behind a mutex, held
 * for a few probes; the key is read-only after gw_pow_new).
 */
#ifndef GW_POW_H
#define GW_POW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_metrics.h"

#define GW_POW_CHALLENGE_LEN 46 /* base64url of 34 bytes */
#define GW_POW_NONCE_MAX     32
#define GW_POW_PROOF_MAX     (GW_POW_CHALLENGE_LEN + 1 + GW_POW_NONCE_MAX)
#define GW_POW_ISSUER_LEN    16         /* the issuer as lower-case hex */
#define GW_POW_BUCKET_S      64         /* challenges are grouped by expiry in buckets this long */
#define GW_POW_SERIAL_MAX    (1u << 27) /* serials of one bucket: a bitmap of 16 MiB at most */
#define GW_POW_BLOCK_MAX     48
#define GW_POW_MAX_BITS      40

typedef struct gw_pow gw_pow_t;

typedef struct gw_pow_config {
    int base_bits, max_bits;
    int64_t ttl_s;              /* a challenge's lifetime */
    int64_t window_s;           /* the time constant of the rate estimates */
    int64_t block_free_per_min; /* challenges per minute of one block at base difficulty */
    int64_t total_free_per_min; /* joins per minute of this gateway at base difficulty */
    size_t table_size;          /* blocks tracked (idle ones are forgotten first) */
} gw_pow_config_t;

typedef enum {
    GW_POW_OK,
    GW_POW_MALFORMED, /* not "<challenge>.<nonce>" of our format */
    GW_POW_FORGED,    /* the MAC does not match: another key, event or address block */
    GW_POW_EXPIRED,   /* past its expiry */
    GW_POW_WEAK,      /* the hash has fewer leading zero bits than the challenge asks */
} gw_pow_result_t;

/** A verified proof: what the replay check needs. */
typedef struct gw_pow_proof {
    char issuer[GW_POW_ISSUER_LEN + 1]; /* "" until a proof verified */
    uint32_t serial;
    int64_t expires_s;
    int bits;
} gw_pow_proof_t;

/** key: the MAC key (copied, 32+ bytes). NULL never. */
gw_pow_t *gw_pow_new(const unsigned char *key, size_t keylen, const gw_pow_config_t *cfg);
void gw_pow_free(gw_pow_t *p);

/** The lifetime of a challenge, in seconds (the config's ttl_s). */
int64_t gw_pow_ttl(const gw_pow_t *p);

/**
 * The address block of an address text: "4:a.b.c" for IPv4 (/24), "6:<hex of 8 bytes>"
 * for IPv6 (/64; IPv4-mapped addresses count as IPv4), else the text itself (a Unix
 * socket, a name). Writes NUL-terminated text into out.
 */
void gw_pow_block(const char *addr, char out[GW_POW_BLOCK_MAX]);

/**
 * The difficulty formula (pure): base + ⌊log2(1 + block_rate / block_free)⌋ +
 * ⌊log2(1 + total_rate / total_free)⌋, at most max. Rates per minute; a free rate ≤ 0
 * adds nothing.
 */
int gw_pow_difficulty(int base, int max, double block_rate, double block_free, double total_rate,
                      double total_free);

/**
 * The difficulty for a new challenge to block at now_ms, counting this challenge in the
 * block's rate.
 */
int gw_pow_take_bits(gw_pow_t *p, const char *block, int64_t now_ms);

/** The difficulty a quiet block would be given now (base and the gateway's own rate). */
int gw_pow_base_now(gw_pow_t *p, int64_t now_ms);

/** Counts one join placed with a proof in the gateway's rate. */
void gw_pow_count_join(gw_pow_t *p, int64_t now_ms);

/**
 * Writes a challenge of event for block at bits, valid until now_s + ttl_s, into out
 * (at least GW_POW_CHALLENGE_LEN + 1 bytes), numbered with the next serial of its
 * bucket. It may live up to a bucket longer: when another thread already numbers a later
 * bucket (a second's race at a bucket's end) or its own bucket's serials ran out, it
 * takes the later bucket's next serial and expires as that bucket begins. Returns its
 * length. Thread-safe (one atomic counter).
 */
size_t gw_pow_issue(gw_pow_t *p, const char *event, const char *block, int bits, int64_t now_s,
                    char *out, size_t outlen);

/** Checks proof (len bytes) for event and block at now_s; on GW_POW_OK fills *out. */
gw_pow_result_t gw_pow_check(const gw_pow_t *p, const char *event, const char *block,
                             const char *proof, size_t len, int64_t now_s, gw_pow_proof_t *out);

/** Leading zero bits of a 32-byte digest. */
int gw_pow_zero_bits(const unsigned char digest[32]);

/** The refusal's API error code ("pow_malformed", …); "pow_required" for GW_POW_OK. */
const char *gw_pow_error(gw_pow_result_t r);

/** Proofs refused by this process since start, every room (the dashboard's figure). */
uint64_t gw_pow_refused(const gw_pow_t *p);
/** Counts one refused proof (or a join without one). */
void gw_pow_count_refused(gw_pow_t *p);

/* The proofs of work's series (counted where joins meet them, gw_queue). */
typedef struct gw_pow_metrics {
    cm_counter_t *challenges; /* challenges handed out */
    cm_counter_t *refused;    /* joins refused for a missing or bad proof */
} gw_pow_metrics_t;

/** Registers the proofs of work's series in reg and points pm at them. Main thread. */
void gw_pow_metrics_register(gw_pow_metrics_t *pm, cm_metrics_t *reg);

#endif
