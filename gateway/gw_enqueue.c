/*
 * gw_enqueue — see gw_enqueue.h. The JWT itself is cm_jwt's: the algorithm pinned to
 * ES256, the key chosen by kid among the site's, the claims typed; this module adds the
 * enqueue token's own rules (the room, the customer id) and the answers.
 */
#include "gw_enqueue.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "cm_parse.h"

typedef struct answer {
    int status;
    const char *error, *reason, *message;
} answer_t;

static const answer_t answers[GW_ENQ_COUNT] = {
    [GW_ENQ_OK] = {200, "", "ok", ""},
    [GW_ENQ_MISSING] = {403, "enqueue_required", "missing",
                        "this waiting room is by invitation: come through the sale site's link"},
    [GW_ENQ_UNSUPPORTED] = {400, "enqueue_unsupported", "unsupported",
                            "this waiting room takes no enqueue tokens (no site keys configured)"},
    [GW_ENQ_MALFORMED] = {400, "enqueue_malformed", "malformed",
                          "the enqueue token is not a JWT of the expected shape"},
    [GW_ENQ_INVALID] = {401, "enqueue_invalid", "bad_signature",
                        "the enqueue token is not signed by a key of the sale site"},
    [GW_ENQ_AUDIENCE] = {401, "enqueue_invalid", "bad_audience",
                         "the enqueue token is meant for another audience"},
    [GW_ENQ_ISSUER] = {401, "enqueue_invalid", "bad_issuer",
                       "the enqueue token comes from another issuer"},
    [GW_ENQ_EXPIRED] = {401, "enqueue_invalid", "expired",
                        "the enqueue token has expired: come back through the sale site"},
    [GW_ENQ_NOT_YET] = {401, "enqueue_invalid", "not_yet_valid",
                        "the enqueue token is not valid yet"},
    [GW_ENQ_TOO_LONG] = {401, "enqueue_invalid", "lifetime",
                         "the enqueue token lives longer than this gateway accepts"},
    [GW_ENQ_WRONG_ROOM] = {403, "enqueue_wrong_room", "wrong_room",
                           "the enqueue token is for another waiting room"},
    [GW_ENQ_CUSTOMER] = {400, "enqueue_malformed", "customer",
                         "the enqueue token's sub is not a customer id (1 to 64 of "
                         "A-Z a-z 0-9 . _ @ : + -)"},
};

/* The claim "code" of a verified token's payload into out: 0 (none, or a string that
 * fits), -1 (not a string, or too long). */
static int code_claim(const char *token, size_t len, char out[GW_CODE_INPUT_MAX + 1])
{
    const char *a = memchr(token, '.', len);
    const char *b = a ? memchr(a + 1, '.', len - (size_t)(a + 1 - token)) : NULL;
    unsigned char raw[GW_ENQUEUE_MAX_LEN];
    long n = b ? cm_base64url_decode(a + 1, (size_t)(b - a - 1), raw, sizeof(raw)) : -1;
    json_t *claims = n > 0 ? json_loadb((const char *)raw, (size_t)n, 0, NULL) : NULL;
    if (claims == NULL)
        return -1; /* not reached for a token cm_jwt_verify took */
    const json_t *code = json_object_get(claims, "code");
    int rc = 0;
    if (code != NULL && (!json_is_string(code) || json_string_length(code) > GW_CODE_INPUT_MAX))
        rc = -1;
    else if (code != NULL)
        memcpy(out, json_string_value(code), json_string_length(code) + 1);
    json_decref(claims);
    return rc;
}

gw_enqueue_result_t gw_enqueue_verify(const cm_jwt_keyset_t *ks, const gw_enqueue_policy_t *p,
                                      const char *event, const char *token, size_t len,
                                      int64_t now_s, gw_enqueue_claims_t *out)
{
    memset(out, 0, sizeof(*out));
    if (ks == NULL || cm_jwt_keyset_count(ks) == 0)
        return GW_ENQ_UNSUPPORTED;
    if (len == 0 || len > GW_ENQUEUE_MAX_LEN)
        return GW_ENQ_MALFORMED;
    cm_jwt_policy_t pol = {
        .audience = p->audience,
        .issuer = p->issuer,
        .leeway_s = GW_ENQUEUE_LEEWAY,
        .max_lifetime_s = p->max_lifetime_s,
    };
    cm_jwt_claims_t c;
    switch (cm_jwt_verify(ks, token, len, &pol, now_s, &c)) {
    case CM_JWT_OK:
        break;
    case CM_JWT_MALFORMED:
        return GW_ENQ_MALFORMED;
    case CM_JWT_BAD_ALG:
    case CM_JWT_UNKNOWN_KID:
    case CM_JWT_BAD_SIGNATURE:
        return GW_ENQ_INVALID;
    case CM_JWT_BAD_AUDIENCE:
        return GW_ENQ_AUDIENCE;
    case CM_JWT_BAD_ISSUER:
        return GW_ENQ_ISSUER;
    case CM_JWT_EXPIRED:
        return GW_ENQ_EXPIRED;
    case CM_JWT_NOT_YET_VALID:
        return GW_ENQ_NOT_YET;
    case CM_JWT_TOO_LONG:
        return GW_ENQ_TOO_LONG;
    }
    if (strcmp(c.evt, event) != 0)
        return GW_ENQ_WRONG_ROOM;
    size_t n = strlen(c.sub);
    if (!gw_ticket_customer_ok(c.sub, n))
        return GW_ENQ_CUSTOMER;
    if (code_claim(token, len, out->code) != 0) {
        out->code[0] = '\0';
        return GW_ENQ_MALFORMED;
    }
    memcpy(out->customer, c.sub, n + 1);
    return GW_ENQ_OK;
}

cm_jwt_keyset_t *gw_enqueue_keys_load(const char *path, char *err, size_t errlen)
{
    char why[256];
    cm_jwt_keyset_t *ks = cm_jwt_keyset_new();
    if (cm_jwt_keyset_load_file(ks, path, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "enqueue_keys_file %s: %s", path, why);
        cm_jwt_keyset_free(ks);
        return NULL;
    }
    if (cm_jwt_keyset_count(ks) == 0) {
        snprintf(err, errlen, "enqueue_keys_file %s: no EC P-256 key in it", path);
        cm_jwt_keyset_free(ks);
        return NULL;
    }
    return ks;
}

static const answer_t *answer_of(gw_enqueue_result_t r)
{
    return &answers[(unsigned)r < GW_ENQ_COUNT ? r : GW_ENQ_MALFORMED];
}

int gw_enqueue_status(gw_enqueue_result_t r)
{
    return answer_of(r)->status;
}

const char *gw_enqueue_error(gw_enqueue_result_t r)
{
    return answer_of(r)->error;
}

const char *gw_enqueue_reason(gw_enqueue_result_t r)
{
    return answer_of(r)->reason;
}

const char *gw_enqueue_message(gw_enqueue_result_t r)
{
    return answer_of(r)->message;
}
