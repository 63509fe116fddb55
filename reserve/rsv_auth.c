/*
 * rsv_auth — see rsv_auth.h.
 *
 * The cache is direct-mapped (one slot per hash bucket, a newer token replaces an
 * older one): O(1), bounded memory, no eviction bookkeeping. A slot holds a copy of
 * the token, so a hash collision can never hand one buyer another's claims.
 */
#include "rsv_auth.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_http.h"
#include "cm_mem.h"

#define TOKEN_MAX 4096

typedef struct slot {
    char *token;
    size_t len;
    cm_jwt_claims_t claims;
} slot_t;

struct rsv_auth {
    cm_jwt_keyset_t *keys;
    int64_t leeway;
    slot_t *slots;
    size_t mask;
    uint64_t verifications;
    uint64_t hits;
};

rsv_auth_t *rsv_auth_new(cm_jwt_keyset_t *keys, int64_t leeway_s, size_t cache_size)
{
    rsv_auth_t *a = cm_xcalloc(1, sizeof(*a));
    size_t n = 16;
    while (n < cache_size)
        n <<= 1;
    a->keys = keys;
    a->leeway = leeway_s;
    a->slots = cm_xcalloc(n, sizeof(slot_t));
    a->mask = n - 1;
    return a;
}

void rsv_auth_free(rsv_auth_t *a)
{
    if (a == NULL)
        return;
    for (size_t i = 0; i <= a->mask; i++)
        free(a->slots[i].token);
    free(a->slots);
    cm_jwt_keyset_free(a->keys);
    free(a);
}

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

rsv_auth_result_t rsv_auth_check(rsv_auth_t *a, struct evhttp_request *req, const char *event,
                                 bool allow_expired, cm_jwt_claims_t *claims, const char **why)
{
    size_t len = 0;
    const char *tok = cm_http_bearer(req, &len);
    if (tok == NULL || len == 0) {
        *why = "no bearer token";
        return RSV_AUTH_INVALID;
    }
    if (len > TOKEN_MAX) {
        *why = "token too long";
        return RSV_AUTH_INVALID;
    }
    int64_t now = (int64_t)time(NULL);
    slot_t *s = &a->slots[hash(tok, len) & a->mask];
    if (s->token && s->len == len && memcmp(s->token, tok, len) == 0) {
        a->hits++;
        *claims = s->claims;
    } else {
        a->verifications++;
        /* exp and nbf are judged again below on every use, cached or not. */
        cm_jwt_result_t r =
            cm_jwt_verify(a->keys, tok, len, CM_JWT_AUDIENCE, now, a->leeway, claims);
        if (r != CM_JWT_OK && r != CM_JWT_EXPIRED && r != CM_JWT_NOT_YET_VALID) {
            *why = cm_jwt_result_str(r);
            return RSV_AUTH_INVALID;
        }
        if (r == CM_JWT_NOT_YET_VALID) {
            /* Claims may be incomplete for this result: judge it now, cache nothing. */
            *why = cm_jwt_result_str(r);
            return RSV_AUTH_INVALID;
        }
        free(s->token);
        s->token = cm_xstrndup(tok, len);
        s->len = len;
        s->claims = *claims;
    }
    if (claims->nbf - a->leeway > now) {
        *why = "not yet valid";
        return RSV_AUTH_INVALID;
    }
    if (claims->exp + a->leeway <= now && !allow_expired) {
        *why = "expired";
        return RSV_AUTH_INVALID;
    }
    if (event && strcmp(claims->evt, event) != 0) {
        *why = "token for another event";
        return RSV_AUTH_WRONG_EVENT;
    }
    return RSV_AUTH_OK;
}

uint64_t rsv_auth_verifications(const rsv_auth_t *a)
{
    return a->verifications;
}

uint64_t rsv_auth_hits(const rsv_auth_t *a)
{
    return a->hits;
}
