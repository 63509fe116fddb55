/*
 * onsale-bench-crypto — admission-token signing and verification per core, as the
 * gateway and the reserve run them (cm_jwt_sign, cm_jwt_verify: JSON, base64url, SHA-256,
 * ECDSA P-256 and the JOSE signature form), for loadgen/bench/bench_crypto.sh to put
 * beside `openssl speed ecdsap256`.
 *
 * Also gw_dpop_verify (gateway/gw_dpop.c), what the gateway does on the admitting poll of
 * a room with "dpop": a proof's JSON, its thumbprint, the key built from its jwk, ECDSA.
 *
 * T threads, each looping for the given (wall) seconds; prints one line per operation:
 * "sign <ops per CPU second> <threads>", "verify …" and "dpop …".
 * Every operation's result is checked, so a broken signer cannot look fast.
 *
 * Usage: onsale-bench-crypto [--seconds S] [--threads T]
 */
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_jwt.h"
#include "cm_parse.h"
#include "cm_time.h"
#include "gw_dpop.h"
#include "cm_version.h"

#define NOW 1800000000LL

typedef struct run {
    const cm_jwt_signer_t *signer;
    const cm_jwt_keyset_t *ks;
    const char *token; /* for verify */
    double seconds;
    int verify;                /* 1: cm_jwt_verify, 2: gw_dpop_verify of token */
    const gw_ticket_t *ticket; /* the proof's key's ticket (dpop) */
    uint64_t ops;
    double cpu; /* this thread's CPU seconds over the loop */
    int failed;
} run_t;

static double now_s(void)
{
    return (double)cm_time_mono_ns() / 1e9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static cm_jwt_claims_t claims_for(uint64_t i)
{
    cm_jwt_claims_t c = {.iat = NOW, .nbf = NOW, .exp = NOW + 600};
    snprintf(c.iss, sizeof(c.iss), "onsale-gateway");
    snprintf(c.sub, sizeof(c.sub), "v-%016llx", (unsigned long long)i);
    snprintf(c.evt, sizeof(c.evt), "bench-event");
    snprintf(c.jti, sizeof(c.jti), "%032llx", (unsigned long long)i);
    return c;
}

static void *loop(void *arg)
{
    run_t *r = arg;
    static const cm_jwt_policy_t pol = {
        .issuer = "onsale-gateway", .leeway_s = 5, .max_lifetime_s = 86400};
    size_t toklen = r->token ? strlen(r->token) : 0;
    double end = now_s() + r->seconds, cpu0 = cpu_s();
    while (!r->failed) {
        for (int k = 0; k < 64; k++, r->ops++) {
            if (r->verify == 2) {
                gw_dpop_want_t w = {
                    .method = "GET", .host = "h", .path = "/q/e/status", .ticket = r->ticket};
                gw_dpop_proof_t p;
                if (gw_dpop_verify(r->token, toklen, &w, NOW, &p) != GW_DPOP_OK)
                    r->failed = 1;
            } else if (r->verify) {
                cm_jwt_claims_t out;
                if (cm_jwt_verify(r->ks, r->token, toklen, &pol, NOW + 1, &out) != CM_JWT_OK)
                    r->failed = 1;
            } else {
                cm_jwt_claims_t c = claims_for(r->ops);
                char *t = cm_jwt_sign(r->signer, &c, NULL);
                if (t == NULL)
                    r->failed = 1;
                free(t);
            }
        }
        if (now_s() >= end)
            break;
    }
    r->cpu = cpu_s() - cpu0;
    return NULL;
}

/* Operations per CPU second (a core's worth), as `openssl speed` counts them (it divides
 * by CPU time too, unless -elapsed), so a shared machine does not skew the ratio;
 * -1 on a failure. */
static double measure(const run_t *proto, int nthreads)
{
    run_t runs[64];
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++) {
        runs[i] = *proto;
        if (pthread_create(&th[i], NULL, loop, &runs[i]) != 0)
            return -1;
    }
    uint64_t ops = 0;
    double cpu = 0;
    int failed = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        ops += runs[i].ops;
        cpu += runs[i].cpu;
        failed |= runs[i].failed;
    }
    return failed || cpu <= 0 ? -1 : (double)ops / cpu;
}

/* A DPoP proof by k for GET https://h/q/e/status at NOW (heap), and k's ticket in *t. */
static char *dpop_proof(EVP_PKEY *k, gw_ticket_t *t)
{
    BIGNUM *x = NULL, *y = NULL;
    unsigned char bx[32], by[32], der[80], raw[64];
    char xs[44], ys[44], jkt[44], head[300], body[200], input[800], *out = NULL;
    size_t derlen = sizeof(der);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    ECDSA_SIG *sig = NULL;
    if (EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_EC_PUB_X, &x) != 1 ||
        EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_EC_PUB_Y, &y) != 1)
        goto out;
    BN_bn2binpad(x, bx, 32);
    BN_bn2binpad(y, by, 32);
    cm_base64url_encode(bx, 32, xs);
    cm_base64url_encode(by, 32, ys);
    snprintf(input, sizeof(input),
             "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-256\","
             "\"x\":\"%s\",\"y\":\"%s\"}}",
             xs, ys);
    cm_base64url_encode((const unsigned char *)input, strlen(input), head);
    snprintf(input, sizeof(input),
             "{\"jti\":\"bench-0123456789\",\"htm\":\"GET\",\"htu\":\"https://h/q/e/status\","
             "\"iat\":%lld}",
             NOW);
    cm_base64url_encode((const unsigned char *)input, strlen(input), body);
    snprintf(input, sizeof(input), "%s.%s", head, body);
    const unsigned char *p = der;
    if (md == NULL || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k) != 1 ||
        EVP_DigestSign(md, der, &derlen, (const unsigned char *)input, strlen(input)) != 1 ||
        (sig = d2i_ECDSA_SIG(NULL, &p, (long)derlen)) == NULL ||
        cm_jwt_jwk_thumbprint(xs, ys, jkt) != 0)
        goto out;
    BN_bn2binpad(ECDSA_SIG_get0_r(sig), raw, 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(sig), raw + 32, 32);
    out = malloc(strlen(input) + 90);
    if (out == NULL)
        goto out;
    size_t n = (size_t)sprintf(out, "%s.", input);
    cm_base64url_encode(raw, 64, out + n);
    t->bound = true;
    gw_dpop_jkt_bytes(jkt, t->jkt);
out:
    ECDSA_SIG_free(sig);
    EVP_MD_CTX_free(md);
    BN_free(x);
    BN_free(y);
    return out;
}

int main(int argc, char **argv)
{
    double seconds = 3;
    int threads = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--version") == 0) {
            cm_version_print(stdout, "onsale-bench-crypto");
            return 0;
        } else {
            fprintf(stderr, "usage: onsale-bench-crypto [--seconds S] [--threads T] [--version]\n");
            return 2;
        }
    }
    if (seconds <= 0 || seconds > 600 || threads < 1 || threads > 64) {
        fprintf(stderr, "onsale-bench-crypto: --seconds 0..600, --threads 1..64\n");
        return 2;
    }
    char err[256];
    EVP_PKEY *k = EVP_EC_gen("P-256");
    BIO *b = BIO_new(BIO_s_mem());
    char *pem = NULL;
    if (k == NULL || b == NULL || PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) != 1)
        return 1;
    long n = BIO_get_mem_data(b, &pem);
    cm_jwt_signer_t *signer = cm_jwt_signer_new(NULL, pem, (size_t)n, err, sizeof(err));
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (signer == NULL || cm_jwt_keyset_add_pem(ks, NULL, pem, (size_t)n, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-bench-crypto: %s\n", err);
        return 1;
    }
    cm_jwt_claims_t c = claims_for(0);
    char *token = cm_jwt_sign(signer, &c, NULL);
    run_t proto = {.signer = signer, .ks = ks, .token = token, .seconds = seconds};
    double sign = measure(&proto, threads);
    proto.verify = 1;
    double verify = measure(&proto, threads);
    gw_ticket_t ticket = {0};
    char *proof = dpop_proof(k, &ticket);
    proto.verify = 2;
    proto.token = proof;
    proto.ticket = &ticket;
    double dpop = proof ? measure(&proto, threads) : -1;
    if (token == NULL || sign < 0 || verify < 0 || dpop < 0) {
        fprintf(stderr, "onsale-bench-crypto: a signature failed to sign or verify\n");
        return 1;
    }
    printf("sign %.1f %d\nverify %.1f %d\ndpop %.1f %d\n", sign, threads, verify, threads, dpop,
           threads);
    free(proof);
    free(token);
    cm_jwt_keyset_free(ks);
    cm_jwt_signer_free(signer);
    BIO_free(b);
    EVP_PKEY_free(k);
    return 0;
}
