/*
 * onsale-bench-pow — what proof of work on join costs each side (docs/design.md, "Bot
 * defences"): the gateway's check and challenge per call, and an attacker's SHA-256 rate
 * on one core (OpenSSL's, with the challenge hashed once and its state copied per nonce:
 * the best a CPU attacker does without special hardware). From the hash rate it prints
 * the CPU seconds an attacker spends per 1,000 places at each difficulty (2^bits hashes
 * expected per place).
 *
 * One thread; every result is checked (a solved challenge must verify). Prints lines
 * "check_us <µs>", "issue_us <µs>", "hash_ns <ns>", then "bits <b> cpu_s_per_1000 <s>".
 *
 * Usage: onsale-bench-pow [--seconds S] [--from BITS] [--to BITS]
 */
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_pow.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Nonces tried per CPU second: SHA-256(challenge ‖ decimal nonce), the prefix hashed once. */
static double hash_rate(const char *challenge, double seconds, int *ok)
{
    EVP_MD_CTX *base = EVP_MD_CTX_new(), *c = EVP_MD_CTX_new();
    unsigned char d[32];
    char nonce[24];
    uint64_t n = 0;
    EVP_DigestInit_ex2(base, EVP_sha256(), NULL);
    EVP_DigestUpdate(base, challenge, strlen(challenge));
    double t0 = cpu_s(), t;
    do {
        for (int i = 0; i < 4096; i++, n++) {
            int k = snprintf(nonce, sizeof(nonce), "%llu", (unsigned long long)n);
            EVP_MD_CTX_copy_ex(c, base);
            EVP_DigestUpdate(c, nonce, (size_t)k);
            EVP_DigestFinal_ex(c, d, NULL);
            *ok += gw_pow_zero_bits(d) >= 64; /* never: keeps the loop honest */
        }
        t = cpu_s() - t0;
    } while (t < seconds);
    EVP_MD_CTX_free(base);
    EVP_MD_CTX_free(c);
    return (double)n / t;
}

/* Solves challenge at bits: "<challenge>.<nonce>" into proof. */
static size_t solve(const char *challenge, int bits, char *proof, size_t size)
{
    unsigned char d[32];
    char msg[GW_POW_PROOF_MAX];
    size_t n = strlen(challenge);
    memcpy(msg, challenge, n);
    for (unsigned long long i = 0;; i++) {
        int k = snprintf(msg + n, sizeof(msg) - n, "%llu", i);
        EVP_Digest(msg, n + (size_t)k, d, NULL, EVP_sha256(), NULL);
        if (gw_pow_zero_bits(d) >= bits)
            return (size_t)snprintf(proof, size, "%s.%llu", challenge, i);
    }
}

int main(int argc, char **argv)
{
    double seconds = 2;
    int from = 16, to = 24, ok = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--from") == 0)
            from = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--to") == 0)
            to = atoi(argv[i + 1]);
    }
    static const unsigned char key[32] = "bench-pow-key-bench-pow-key-1234";
    gw_pow_config_t cfg = {.base_bits = 8,
                           .max_bits = 24,
                           .ttl_s = 120,
                           .window_s = 60,
                           .block_free_per_min = 30,
                           .total_free_per_min = 6000,
                           .table_size = 65536};
    gw_pow_t *p = gw_pow_new(key, sizeof(key), &cfg);
    char ch[GW_POW_CHALLENGE_LEN + 1], proof[GW_POW_PROOF_MAX + 1];
    gw_pow_issue(p, "bench-event", "4:192.0.2", 8, 1800000000, ch, sizeof(ch));
    size_t len = solve(ch, 8, proof, sizeof(proof));
    gw_pow_proof_t out;

    uint64_t n = 0;
    double t0 = cpu_s(), t;
    do {
        for (int i = 0; i < 1024; i++, n++)
            if (gw_pow_check(p, "bench-event", "4:192.0.2", proof, len, 1800000001, &out) !=
                GW_POW_OK) {
                fprintf(stderr, "bench_pow: a solved challenge did not verify\n");
                return 1;
            }
        t = cpu_s() - t0;
    } while (t < seconds);
    printf("check_us %.2f\n", t / (double)n * 1e6);

    n = 0;
    t0 = cpu_s();
    do {
        for (int i = 0; i < 1024; i++, n++) {
            int bits = gw_pow_take_bits(p, (n & 1) ? "4:192.0.2" : "4:198.51.100", (int64_t)n);
            gw_pow_issue(p, "bench-event", "4:192.0.2", bits, 1800000000, ch, sizeof(ch));
        }
        t = cpu_s() - t0;
    } while (t < seconds);
    printf("issue_us %.2f\n", t / (double)n * 1e6);

    double rate = hash_rate(ch, seconds, &ok);
    printf("hash_ns %.1f\n", 1e9 / rate);
    for (int b = from; b <= to; b++)
        printf("bits %d cpu_s_per_1000 %.1f\n", b, 1000.0 * (double)(1ull << b) / rate);
    gw_pow_free(p);
    return ok == 0 ? 0 : 1;
}
