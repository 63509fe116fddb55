/*
 * onsale-token — mints admission JWTs and JWKS documents for development, tests and
 * load generation, with exactly the code the gateway uses (cm_jwt_sign), so a token
 * it prints is byte-for-byte the kind reserve sees in production.
 *
 * A short-lived, single-threaded command-line tool: it reads its key files, prints,
 * and exits; blocking I/O is fine here. --count exists so a load test can mint
 * thousands of tokens in one process (one key parse, buffered output) instead of
 * paying a process start per token. Exit status: 0 done, 1 a key or output failure,
 * 2 bad arguments (with the reason on stderr).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cm_jwt.h"
#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_version.h"

#define KEY_FILE_MAX (1024 * 1024)
#define TEN_YEARS_S  (10LL * 366 * 86400)
#define COUNT_MAX    10000000

typedef struct opts {
    const char *key, *event, *sub, *aud, *iss, *jti, *kid, *jwks;
    int64_t ttl, nbf_offset, iat_offset, count;
    bool iat_offset_set;
} opts_t;

static void usage(FILE *out)
{
    fprintf(out,
            "Usage:\n"
            "  onsale-token --key PRIVATE.pem --event E --sub VISITOR [options]\n"
            "  onsale-token --jwks PEM [PEM...] [--kid KID]\n"
            "\n"
            "Prints an ES256 admission JWT and a newline, or a JWKS document for the given\n"
            "public or private keys.\n"
            "\n"
            "  --ttl SECONDS         exp = now + SECONDS (default 600; negative: already expired)\n"
            "  --nbf-offset SECONDS  nbf = now + SECONDS (default 0; may be negative)\n"
            "  --iat-offset SECONDS  iat = now + SECONDS (default: same as --nbf-offset)\n"
            "  --aud AUD             audience (default " CM_JWT_AUDIENCE ")\n"
            "  --iss ISS             issuer (default onsale-gateway, the gateway's default)\n"
            "  --jti ID              token id (default: random 128-bit hex)\n"
            "  --kid KID             key id (default: RFC 7638 thumbprint of the key)\n"
            "  --count N             print N tokens, subs VISITOR-1 .. VISITOR-N\n"
            "  --help                this text\n"
            "  --version             the version and the commit it was built from\n"
            "\n"
            "Exit status: 0 ok, 1 key or output failure, 2 bad arguments.\n");
}

__attribute__((format(printf, 1, 2))) static int bad_args(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("onsale-token: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (try --help)\n", stderr);
    va_end(ap);
    return 2;
}

/* Option index = getopt_long's val: strings first, then numbers, then --help. */
enum { N_STR = 8, N_NUM = 4, OPT_HELP = N_STR + N_NUM, OPT_VERSION };

/* Fills o from argv; returns 0, 2 (bad arguments, reported) or -1 (--help printed). */
static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {
        {"key", required_argument, NULL, 0},
        {"event", required_argument, NULL, 1},
        {"sub", required_argument, NULL, 2},
        {"aud", required_argument, NULL, 3},
        {"iss", required_argument, NULL, 4},
        {"jti", required_argument, NULL, 5},
        {"kid", required_argument, NULL, 6},
        {"jwks", required_argument, NULL, 7},
        {"ttl", required_argument, NULL, 8},
        {"nbf-offset", required_argument, NULL, 9},
        {"iat-offset", required_argument, NULL, 10},
        {"count", required_argument, NULL, 11},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    static const int64_t num_min[N_NUM] = {-TEN_YEARS_S, -TEN_YEARS_S, -TEN_YEARS_S, 1};
    static const int64_t num_max[N_NUM] = {TEN_YEARS_S, TEN_YEARS_S, TEN_YEARS_S, COUNT_MAX};
    *o = (opts_t){.aud = CM_JWT_AUDIENCE, .iss = "onsale-gateway", .ttl = 600, .count = 1};
    const char **strs[N_STR] = {&o->key, &o->event, &o->sub, &o->aud,
                                &o->iss, &o->jti,   &o->kid, &o->jwks};
    int64_t *nums[N_NUM] = {&o->ttl, &o->nbf_offset, &o->iat_offset, &o->count};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (c == OPT_HELP || c == OPT_VERSION) {
            if (c == OPT_HELP)
                usage(stdout);
            else
                cm_version_print(stdout, "onsale-token");
            return -1;
        }
        if (c == ':')
            return bad_args("%s needs a value", argv[optind - 1]);
        if (c < 0 || c > OPT_VERSION)
            return bad_args("unknown option %s", argv[optind - 1]);
        if (c < N_STR) {
            *strs[c] = optarg;
            continue;
        }
        int n = c - N_STR;
        if (cm_parse_i64(optarg, num_min[n], num_max[n], nums[n]) != 0)
            return bad_args("--%s: '%s' is not an integer in [%lld, %lld]", longopts[c].name,
                            optarg, (long long)num_min[n], (long long)num_max[n]);
        o->iat_offset_set |= nums[n] == &o->iat_offset;
    }
    return 0;
}

/* Every string claim must fit its field: the verifier treats a longer one as malformed. */
static int check_token_args(const opts_t *o, int argc, char **argv)
{
    cm_jwt_claims_t c;
    if (optind < argc)
        return bad_args("unexpected argument '%s'", argv[optind]);
    if (o->key == NULL || o->event == NULL || o->sub == NULL)
        return bad_args("%s", "--key, --event and --sub are required");
    if (o->event[0] == '\0' || strlen(o->event) >= sizeof(c.evt))
        return bad_args("--event must be 1-%zu characters", sizeof(c.evt) - 1);
    /* room for "-N" with --count */
    if (o->sub[0] == '\0' || strlen(o->sub) + (o->count > 1 ? 9 : 0) >= sizeof(c.sub))
        return bad_args("--sub must be 1-%zu characters (%zu with --count)", sizeof(c.sub) - 1,
                        sizeof(c.sub) - 10);
    if (strlen(o->iss) >= sizeof(c.iss))
        return bad_args("--iss must be at most %zu characters", sizeof(c.iss) - 1);
    if (o->jti != NULL && (o->jti[0] == '\0' || strlen(o->jti) >= sizeof(c.jti)))
        return bad_args("--jti must be 1-%zu characters", sizeof(c.jti) - 1);
    if (o->jti != NULL && o->count > 1)
        return bad_args("%s", "--jti cannot be combined with --count above 1 (ids must differ)");
    if (o->aud[0] == '\0')
        return bad_args("%s", "--aud must not be empty");
    return 0;
}

/* Reads a whole (small) file; NULL with errno set on failure. */
static char *read_file(const char *path, size_t *len)
{
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    buf = cm_xmalloc(KEY_FILE_MAX + 1);
    *len = fread(buf, 1, KEY_FILE_MAX + 1, f);
    if (ferror(f) || *len > KEY_FILE_MAX) {
        free(buf);
        buf = NULL;
        errno = EFBIG;
    } else {
        buf[*len] = '\0';
    }
    fclose(f);
    return buf;
}

static void random_jti(char out[33])
{
    unsigned char raw[16];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        fprintf(stderr, "onsale-token: getrandom failed\n");
        exit(1);
    }
    cm_hex_encode(raw, sizeof(raw), out);
}

static int run_tokens(const opts_t *o)
{
    int rc = 1;
    char err[256];
    size_t len = 0;
    cm_jwt_signer_t *signer = NULL;
    char *pem = read_file(o->key, &len);
    if (pem == NULL) {
        fprintf(stderr, "onsale-token: %s: %s\n", o->key, strerror(errno));
        goto out;
    }
    signer = cm_jwt_signer_new(o->kid, pem, len, err, sizeof(err));
    if (signer == NULL) {
        fprintf(stderr, "onsale-token: %s: %s\n", o->key, err);
        goto out;
    }
    int64_t now = (int64_t)time(NULL);
    cm_jwt_claims_t c = {
        .iat = now + (o->iat_offset_set ? o->iat_offset : o->nbf_offset),
        .nbf = now + o->nbf_offset,
        .exp = now + o->ttl,
    };
    snprintf(c.iss, sizeof(c.iss), "%s", o->iss);
    snprintf(c.evt, sizeof(c.evt), "%s", o->event);
    for (int64_t i = 1; i <= o->count; i++) {
        if (o->count > 1)
            snprintf(c.sub, sizeof(c.sub), "%s-%lld", o->sub, (long long)i);
        else
            snprintf(c.sub, sizeof(c.sub), "%s", o->sub);
        if (o->jti != NULL)
            snprintf(c.jti, sizeof(c.jti), "%s", o->jti);
        else
            random_jti(c.jti);
        char *tok = cm_jwt_sign(signer, &c, o->aud);
        if (tok == NULL) {
            fprintf(stderr, "onsale-token: signing failed\n");
            goto out;
        }
        fputs(tok, stdout);
        fputc('\n', stdout);
        free(tok);
    }
    rc = 0;
out:
    cm_jwt_signer_free(signer);
    free(pem);
    return rc;
}

static int run_jwks(const opts_t *o, int argc, char **argv)
{
    int rc = 1, npem = 1 + (argc - optind);
    char err[512];
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (o->key || o->event || o->sub || o->jti) {
        rc = bad_args("%s", "--jwks takes PEM files (and --kid), not token options");
        goto out;
    }
    if (o->kid != NULL && npem != 1) {
        rc = bad_args("%s", "--kid with --jwks needs exactly one PEM file");
        goto out;
    }
    for (int i = 0; i < npem; i++) {
        const char *path = i == 0 ? o->jwks : argv[optind + i - 1];
        if (o->kid == NULL) {
            if (cm_jwt_keyset_load_file(ks, path, err, sizeof(err)) != 0) {
                fprintf(stderr, "onsale-token: %s\n", err);
                goto out;
            }
            continue;
        }
        size_t len = 0;
        char *pem = read_file(path, &len);
        int r = pem ? cm_jwt_keyset_add_pem(ks, o->kid, pem, len, err, sizeof(err)) : -1;
        if (r != 0)
            fprintf(stderr, "onsale-token: %s: %s\n", path, pem ? err : strerror(errno));
        free(pem);
        if (r != 0)
            goto out;
    }
    char *doc = cm_jwt_keyset_jwks(ks);
    printf("%s\n", doc);
    free(doc);
    rc = 0;
out:
    cm_jwt_keyset_free(ks);
    return rc;
}

int main(int argc, char **argv)
{
    static char outbuf[1 << 16];
    opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
    if (o.jwks != NULL)
        rc = run_jwks(&o, argc, argv);
    else if ((rc = check_token_args(&o, argc, argv)) == 0)
        rc = run_tokens(&o);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "onsale-token: writing output: %s\n", strerror(errno));
        rc = rc ? rc : 1;
    }
    return rc;
}
