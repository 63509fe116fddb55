/*
 * gw_pow — see gw_pow.h. The challenge and the check are pure functions of the key and
 * their arguments; the rate table is the only state (the shape of gw_limit: a cm_addrtab
 * keyed by the hash of the block text, PROBES slots per call, the idle one reused when
 * all are taken, so a flood of blocks cannot grow memory). The module's mutex guards the
 * gateway's total only: a challenge's price reads the total, then bumps its block under
 * the table's own lock, one lock at a time (a join counted in between is one join in a
 * window's thousands). The serials are one atomic counter.
 */
#include "gw_pow.h"

#include <arpa/inet.h>
#include <math.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_addrtab.h"
#include "cm_hash.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_text.h"
#include "cm_tls.h"
#include "gw_ticket.h"

#define VERSION    2
#define ISSUER_LEN 8
#define MAC_LEN    16
#define HEAD_LEN   (1 + 1 + 4 + ISSUER_LEN + 4) /* version, bits, expires, issuer, serial */
#define RAW_LEN    (HEAD_LEN + MAC_LEN)
#define PROBES     8
#define MAC_INPUT  (HEAD_LEN + 64 + 1 + GW_POW_BLOCK_MAX)

typedef struct rate {
    double v; /* decayed count: ≈ events in the last window */
    int64_t last_ms;
} rate_t;

/* SHA-256 fetched once (EVP_Digest with an implicit EVP_sha256() looks it up per call),
 * and a digest context per thread, kept: EVP_Digest makes and frees one per call, a
 * malloc, a cleanse and a free on every join with a proof. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static pthread_key_t sha256_key;
static __thread EVP_MD_CTX *sha256_ctx;

static void sha256_ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256_md == NULL || pthread_key_create(&sha256_key, sha256_ctx_free) != 0)
        abort(); /* OpenSSL without SHA-256: nothing of the gateway works */
}

static void sha256(const void *msg, size_t n, unsigned char out[32])
{
    pthread_once(&sha256_once, sha256_fetch);
    if (sha256_ctx == NULL) {
        sha256_ctx = EVP_MD_CTX_new();
        if (sha256_ctx == NULL || pthread_setspecific(sha256_key, sha256_ctx) != 0)
            abort(); /* as cm_xmalloc: out of memory */
    }
    if (EVP_DigestInit_ex(sha256_ctx, sha256_md, NULL) != 1 ||
        EVP_DigestUpdate(sha256_ctx, msg, n) != 1 || EVP_DigestFinal_ex(sha256_ctx, out, NULL) != 1)
        abort(); /* cannot fail for a fetched digest and memory we own */
}

struct gw_pow {
    unsigned char key[64];
    size_t keylen;
    gw_pow_config_t cfg;
    pthread_mutex_t lock;
    cm_addrtab_t *blocks; /* a rate_t per address block */
    rate_t total;         /* the gateway's joins; under lock */
    atomic_uint_fast64_t refused;
    unsigned char issuer[ISSUER_LEN]; /* this process's, drawn at random */
    atomic_uint_fast64_t serials;     /* bucket << 32 | the bucket's next serial */
};

static int64_t last_used(const void *value)
{
    return ((const rate_t *)value)->last_ms;
}

gw_pow_t *gw_pow_new(const unsigned char *key, size_t keylen, const gw_pow_config_t *cfg)
{
    gw_pow_t *p = cm_xcalloc(1, sizeof(*p));
    p->keylen = keylen < sizeof(p->key) ? keylen : sizeof(p->key);
    memcpy(p->key, key, p->keylen);
    p->cfg = *cfg;
    if (p->cfg.window_s < 1)
        p->cfg.window_s = 1;
    size_t cap = 16;
    while (cap < cfg->table_size * 2)
        cap <<= 1;
    p->blocks = cm_addrtab_new(&(cm_addrtab_config_t){.slots = cap,
                                                      .probes = PROBES,
                                                      .value_size = sizeof(rate_t),
                                                      .full = CM_ADDRTAB_FULL_EVICT,
                                                      .last_used = last_used});
    pthread_mutex_init(&p->lock, NULL);
    atomic_init(&p->refused, 0);
    cm_tls_random_reserve(p->issuer, ISSUER_LEN);
    atomic_init(&p->serials, 0);
    return p;
}

void gw_pow_free(gw_pow_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_destroy(&p->lock);
    OPENSSL_cleanse(p->key, sizeof(p->key));
    cm_addrtab_free(p->blocks);
    free(p);
}

int64_t gw_pow_ttl(const gw_pow_t *p)
{
    return p->cfg.ttl_s;
}

/* "4:a.b.c" of an IPv4 /24 (cm_text, not snprintf: this runs on every join with a proof). */
static void block4(const unsigned char a[3], char out[GW_POW_BLOCK_MAX])
{
    cm_text_t t = cm_text_at(out, GW_POW_BLOCK_MAX);
    CM_TEXT_LIT(&t, "4:");
    for (int i = 0; i < 3; i++) {
        if (i > 0)
            CM_TEXT_LIT(&t, ".");
        cm_text_i64(&t, a[i]);
    }
    cm_text_done(&t, out);
}

void gw_pow_block(const char *addr, char out[GW_POW_BLOCK_MAX])
{
    unsigned char a[16];
    if (inet_pton(AF_INET, addr, a) == 1) {
        block4(a, out);
        return;
    }
    if (inet_pton(AF_INET6, addr, a) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            block4(a + 12, out);
            return;
        }
        memcpy(out, "6:", 2);
        cm_hex_encode(a, 8, out + 2); /* the /64 */
        return;
    }
    snprintf(out, GW_POW_BLOCK_MAX, "%s", addr);
}

static int log2_steps(double rate, double free_rate)
{
    if (free_rate <= 0 || rate <= 0)
        return 0;
    return (int)floor(log2(1.0 + rate / free_rate));
}

int gw_pow_difficulty(int base, int max, double block_rate, double block_free, double total_rate,
                      double total_free)
{
    int bits = base + log2_steps(block_rate, block_free) + log2_steps(total_rate, total_free);
    return bits > max ? max : bits;
}

/* The decayed count of s at now_ms (not yet counting a new event). */
static double decayed(const gw_pow_t *p, const rate_t *s, int64_t now_ms)
{
    if (now_ms <= s->last_ms)
        return s->v;
    return s->v * exp(-(double)(now_ms - s->last_ms) / ((double)p->cfg.window_s * 1000.0));
}

static void bump(const gw_pow_t *p, rate_t *s, int64_t now_ms)
{
    s->v = decayed(p, s, now_ms) + 1.0;
    if (now_ms > s->last_ms)
        s->last_ms = now_ms;
}

/* Per-minute rate of a decayed count: v events per window. */
static double per_min(const gw_pow_t *p, double v)
{
    return v * 60.0 / (double)p->cfg.window_s;
}

/* The gateway's join rate per minute at now_ms. */
static double total_rate(gw_pow_t *p, int64_t now_ms)
{
    pthread_mutex_lock(&p->lock);
    double v = decayed(p, &p->total, now_ms);
    pthread_mutex_unlock(&p->lock);
    return per_min(p, v);
}

static int bits_of(const gw_pow_t *p, double block_v, double total_per_min)
{
    return gw_pow_difficulty(p->cfg.base_bits, p->cfg.max_bits, per_min(p, block_v),
                             (double)p->cfg.block_free_per_min, total_per_min,
                             (double)p->cfg.total_free_per_min);
}

typedef struct take_op {
    const gw_pow_t *p;
    int64_t now_ms;
    double total_per_min;
    int bits;
} take_op_t;

/* Counts a challenge for the block (a new one starts at 0, now) and prices it. */
static cm_addrtab_verdict_t on_take(void *value, bool fresh, void *arg)
{
    rate_t *s = value;
    take_op_t *op = arg;
    if (fresh)
        s->last_ms = op->now_ms;
    bump(op->p, s, op->now_ms);
    op->bits = bits_of(op->p, s->v - 1.0, op->total_per_min); /* the block's rate before this */
    return CM_ADDRTAB_KEEP;
}

int gw_pow_take_bits(gw_pow_t *p, const char *block, int64_t now_ms)
{
    take_op_t op = {p, now_ms, total_rate(p, now_ms), 0};
    /* an evicting table always has an entry to give */
    (void)cm_addrtab_visit(p->blocks, cm_hash_str(block), true, on_take, &op);
    return op.bits;
}

int gw_pow_base_now(gw_pow_t *p, int64_t now_ms)
{
    return bits_of(p, 0, total_rate(p, now_ms));
}

void gw_pow_count_join(gw_pow_t *p, int64_t now_ms)
{
    pthread_mutex_lock(&p->lock);
    bump(p, &p->total, now_ms);
    pthread_mutex_unlock(&p->lock);
}

/* MAC of the challenge head for event and block. */
static void mac_of(const gw_pow_t *p, const unsigned char head[HEAD_LEN], const char *event,
                   const char *block, unsigned char mac[32])
{
    unsigned char msg[MAC_INPUT];
    size_t ne = strnlen(event, 64), nb = strnlen(block, GW_POW_BLOCK_MAX);
    size_t n = 0;
    memcpy(msg, head, HEAD_LEN);
    n += HEAD_LEN;
    memcpy(msg + n, event, ne);
    n += ne;
    msg[n++] = 0;
    memcpy(msg + n, block, nb);
    n += nb;
    gw_ticket_hmac(p->key, p->keylen, msg, n, mac);
}

static void put32(unsigned char *at, uint32_t v)
{
    at[0] = (unsigned char)(v >> 24);
    at[1] = (unsigned char)(v >> 16);
    at[2] = (unsigned char)(v >> 8);
    at[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *at)
{
    return ((uint32_t)at[0] << 24) | ((uint32_t)at[1] << 16) | ((uint32_t)at[2] << 8) | at[3];
}

/* The next serial for a challenge expiring at *exp (moved to a later bucket's start when
 * that bucket is the one being numbered, gw_pow.h). */
static uint32_t take_serial(gw_pow_t *p, int64_t *exp)
{
    uint64_t want = (uint64_t)(*exp / GW_POW_BUCKET_S), cur = atomic_load(&p->serials), next;
    uint64_t bucket;
    uint32_t serial;
    do {
        bucket = cur >> 32;
        serial = (uint32_t)cur;
        if (want > bucket) {
            bucket = want;
            serial = 0;
        } else if (serial >= GW_POW_SERIAL_MAX) {
            bucket++;
            serial = 0;
        }
        next = bucket << 32 | (serial + 1);
    } while (!atomic_compare_exchange_weak(&p->serials, &cur, next));
    if (bucket > want)
        *exp = (int64_t)bucket * GW_POW_BUCKET_S;
    return serial;
}

size_t gw_pow_issue(gw_pow_t *p, const char *event, const char *block, int bits, int64_t now_s,
                    char *out, size_t outlen)
{
    unsigned char raw[RAW_LEN], mac[32];
    int64_t exp = now_s + p->cfg.ttl_s;
    if (outlen < GW_POW_CHALLENGE_LEN + 1)
        return 0;
    uint32_t serial = take_serial(p, &exp);
    raw[0] = VERSION;
    raw[1] = (unsigned char)bits;
    put32(raw + 2, (uint32_t)exp);
    memcpy(raw + 6, p->issuer, ISSUER_LEN);
    put32(raw + 6 + ISSUER_LEN, serial);
    mac_of(p, raw, event, block, mac);
    memcpy(raw + HEAD_LEN, mac, MAC_LEN);
    return cm_base64url_encode(raw, RAW_LEN, out);
}

int gw_pow_zero_bits(const unsigned char d[32])
{
    int n = 0;
    for (int i = 0; i < 32; i++) {
        if (d[i] == 0) {
            n += 8;
            continue;
        }
        for (unsigned char b = d[i]; (b & 0x80) == 0; b <<= 1)
            n++;
        break;
    }
    return n;
}

static bool nonce_ok(const char *s, size_t n)
{
    if (n == 0 || n > GW_POW_NONCE_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

gw_pow_result_t gw_pow_check(const gw_pow_t *p, const char *event, const char *block,
                             const char *proof, size_t len, int64_t now_s, gw_pow_proof_t *out)
{
    unsigned char raw[RAW_LEN + 2], mac[32], digest[32];
    if (len <= GW_POW_CHALLENGE_LEN + 1 || len > GW_POW_PROOF_MAX ||
        proof[GW_POW_CHALLENGE_LEN] != '.' ||
        !nonce_ok(proof + GW_POW_CHALLENGE_LEN + 1, len - GW_POW_CHALLENGE_LEN - 1))
        return GW_POW_MALFORMED;
    if (cm_base64url_decode(proof, GW_POW_CHALLENGE_LEN, raw, sizeof(raw)) != RAW_LEN ||
        raw[0] != VERSION || raw[1] > GW_POW_MAX_BITS)
        return GW_POW_MALFORMED;
    mac_of(p, raw, event, block, mac);
    if (CRYPTO_memcmp(mac, raw + HEAD_LEN, MAC_LEN) != 0)
        return GW_POW_FORGED;
    int64_t exp = get32(raw + 2);
    if (now_s >= exp)
        return GW_POW_EXPIRED;
    /* the challenge text and the nonce: proof without its '.' */
    unsigned char msg[GW_POW_PROOF_MAX];
    memcpy(msg, proof, GW_POW_CHALLENGE_LEN);
    memcpy(msg + GW_POW_CHALLENGE_LEN, proof + GW_POW_CHALLENGE_LEN + 1,
           len - GW_POW_CHALLENGE_LEN - 1);
    sha256(msg, len - 1, digest);
    if (gw_pow_zero_bits(digest) < raw[1])
        return GW_POW_WEAK;
    cm_hex_encode(raw + 6, ISSUER_LEN, out->issuer);
    out->serial = get32(raw + 6 + ISSUER_LEN);
    out->expires_s = exp;
    out->bits = raw[1];
    return GW_POW_OK;
}

const char *gw_pow_error(gw_pow_result_t r)
{
    switch (r) {
    case GW_POW_MALFORMED:
        return "pow_malformed";
    case GW_POW_FORGED:
        return "pow_invalid";
    case GW_POW_EXPIRED:
        return "pow_expired";
    case GW_POW_WEAK:
        return "pow_insufficient";
    case GW_POW_OK:
        break;
    }
    return "pow_required";
}

uint64_t gw_pow_refused(const gw_pow_t *p)
{
    return atomic_load(&((gw_pow_t *)p)->refused);
}

void gw_pow_count_refused(gw_pow_t *p)
{
    atomic_fetch_add(&p->refused, 1);
}

void gw_pow_metrics_register(gw_pow_metrics_t *pm, cm_metrics_t *reg)
{
    pm->challenges = cm_metrics_counter(reg, "onsale_gateway_pow_challenges_total",
                                        "proof-of-work challenges handed out", NULL);
    pm->refused = cm_metrics_counter(reg, "onsale_gateway_pow_refused_total",
                                     "joins refused for a missing or bad proof of work", NULL);
}
