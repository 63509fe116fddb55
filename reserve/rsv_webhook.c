/*
 * rsv_webhook — see rsv_webhook.h.
 *
 * Flow: secrets configured? → Stripe-Signature verified over the raw body (before any
 * parse: an unsigned body costs one HMAC per secret and nothing else) → the event parsed →
 * a type the reserve does not read is answered at once → one call of onsale_provider_event
 * records it and acts in one transaction → 200 {"received": true, "outcome"}. Postgres
 * unreachable → 503 (the provider retries: nothing is lost).
 */
#include "rsv_webhook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_config.h"
#include "cm_hmacsig.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "cm_reload.h"
#include "rsv_req.h"

#define SECRET_MIN 8
#define SECRET_MAX 256

struct rsv_webhook_secrets {
    size_t n;
    char *text; /* the file's contents, lines split in place */
    cm_hmacsig_secret_t s[RSV_WEBHOOK_SECRETS_MAX];
};

static const char *const outcome_names[RSV_WEBHOOK_OUTCOME_COUNT] = {
    [RSV_WEBHOOK_NUDGED] = "nudged",       [RSV_WEBHOOK_REFUNDING] = "refunding",
    [RSV_WEBHOOK_SETTLED] = "settled",     [RSV_WEBHOOK_NOT_OURS] = "not_ours",
    [RSV_WEBHOOK_DUPLICATE] = "duplicate", [RSV_WEBHOOK_IGNORED] = "ignored",
    [RSV_WEBHOOK_REFUSED] = "refused",     [RSV_WEBHOOK_INVALID] = "invalid",
};

void rsv_webhook_metrics_register(rsv_webhook_metrics_t *m, cm_metrics_t *reg)
{
    cm_metrics_counters(reg, "onsale_reserve_provider_webhooks_total",
                        "payment provider webhook events by outcome", "outcome", outcome_names,
                        RSV_WEBHOOK_OUTCOME_COUNT, m->events);
}

/* --- secrets -------------------------------------------------------------------- */

rsv_webhook_secrets_t *rsv_webhook_secrets_load(const char *path, char *err, size_t errlen)
{
    rsv_webhook_secrets_t *s = cm_xcalloc(1, sizeof(*s));
    if (path == NULL)
        return s;
    size_t len = 0;
    s->text = cm_config_read_secret("pay_webhook_secrets_file", path, SECRET_MIN,
                                    RSV_WEBHOOK_SECRETS_MAX * (SECRET_MAX + 2), &len, err, errlen);
    if (s->text == NULL) {
        free(s);
        return NULL;
    }
    int line = 0;
    for (char *p = s->text, *next; p != NULL && *p != '\0'; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next)
            *next++ = '\0';
        size_t n = strlen(p);
        while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            p[--n] = '\0';
        if (n == 0)
            continue;
        bool printable = true;
        for (size_t i = 0; i < n; i++)
            printable &= (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7f;
        const char *bad = !printable                         ? "holds spaces or control characters"
                          : n < SECRET_MIN || n > SECRET_MAX ? "is not 8-256 characters long"
                          : s->n == RSV_WEBHOOK_SECRETS_MAX  ? "is one secret too many (8 at most)"
                                                             : NULL;
        if (bad) {
            snprintf(err, errlen, "pay_webhook_secrets_file %s: line %d %s", path, line, bad);
            rsv_webhook_secrets_free(s, NULL);
            return NULL;
        }
        s->s[s->n].key = p;
        s->s[s->n].len = n;
        s->n++;
    }
    (void)len;
    return s;
}

size_t rsv_webhook_secrets_count(const rsv_webhook_secrets_t *s)
{
    return s ? s->n : 0;
}

void rsv_webhook_secrets_free(void *p, void *ctx)
{
    (void)ctx;
    rsv_webhook_secrets_t *s = p;
    if (s == NULL)
        return;
    if (s->text)
        cm_reload_free_secret(s->text, NULL); /* wiped, then freed */
    free(s);
}

/* --- parsing -------------------------------------------------------------------- */

/* Copies a string member of o into out; absent is "" (0), too long or with a control
 * character -1. */
static int take(json_t *o, const char *key, char out[RSV_WEBHOOK_FIELD_MAX])
{
    out[0] = '\0';
    json_t *v = json_object_get(o, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n >= RSV_WEBHOOK_FIELD_MAX || strlen(s) != n)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return -1;
    memcpy(out, s, n + 1);
    return 0;
}

static bool relevant_type(const char *t)
{
    return strncmp(t, "payment_intent.", 15) == 0 || strncmp(t, "charge.", 7) == 0 ||
           strncmp(t, "refund.", 7) == 0;
}

int rsv_webhook_parse(const char *body, size_t len, rsv_webhook_event_t *ev, const char **why)
{
    memset(ev, 0, sizeof(*ev));
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = -1;
    if (root == NULL || !json_is_object(root)) {
        *why = "the body is not a JSON object";
        goto out;
    }
    if (take(root, "id", ev->id) != 0 || ev->id[0] == '\0' || take(root, "type", ev->type) != 0 ||
        ev->type[0] == '\0') {
        *why = "an event needs a string id and type";
        goto out;
    }
    json_t *created = json_object_get(root, "created");
    if (created != NULL && (!json_is_integer(created) || json_integer_value(created) < 0)) {
        *why = "created must be a unix time";
        goto out;
    }
    ev->created = created ? (int64_t)json_integer_value(created) : 0;
    ev->relevant = relevant_type(ev->type);
    if (!ev->relevant) {
        rc = 0;
        goto out;
    }
    json_t *obj = json_object_get(json_object_get(root, "data"), "object");
    char id[RSV_WEBHOOK_FIELD_MAX], intent[RSV_WEBHOOK_FIELD_MAX];
    if (!json_is_object(obj) || take(obj, "id", id) != 0 || id[0] == '\0' ||
        take(obj, "payment_intent", intent) != 0) {
        *why = "data.object must be an object with a string id";
        goto out;
    }
    json_t *md = json_object_get(obj, "metadata");
    if (md != NULL && !json_is_null(md) &&
        (!json_is_object(md) || take(md, "checkout", ev->checkout) != 0)) {
        *why = "data.object.metadata.checkout must be a short string";
        goto out;
    }
    /* a charge or a refund names its payment intent; an intent is its own */
    snprintf(ev->object_id, sizeof(ev->object_id), "%s", intent[0] ? intent : id);
    rc = 0;
out:
    json_decref(root);
    return rc;
}

/* --- the handler ---------------------------------------------------------------- */

typedef struct hook_op {
    rsv_req_t r;
    rsv_webhook_event_t ev;
} hook_op_t;

static void count(rsv_server_t *srv, rsv_webhook_outcome_t o)
{
    cm_counter_inc(srv->m.webhook.events[o]);
}

static void reply_received(hook_op_t *op, rsv_webhook_outcome_t o)
{
    count(op->r.srv, o);
    rsv_reply_json(
        &op->r, 200,
        json_pack("{s:b, s:s, s:s}", "received", 1, "id", op->ev.id, "outcome", outcome_names[o]));
    free(op);
}

static void on_recorded(const char *err, const rsv_pg_result_t *res, void *arg)
{
    hook_op_t *op = arg;
    if (err || rsv_pg_result_rows(res) != 1) {
        cm_log(CM_LOG_WARN, "provider webhook %s (%s): not recorded: %s", op->ev.id, op->ev.type,
               err ? err : "no row");
        rsv_reply_unavailable(&op->r, "recording the provider's event",
                              err ? err : "unexpected result");
        free(op);
        return;
    }
    const char *name = rsv_pg_result_value(res, 0, 0);
    rsv_webhook_outcome_t o = RSV_WEBHOOK_NOT_OURS;
    for (int i = 0; i < RSV_WEBHOOK_OUTCOME_COUNT; i++)
        if (strcmp(name, outcome_names[i]) == 0)
            o = (rsv_webhook_outcome_t)i;
    if (o == RSV_WEBHOOK_REFUNDING)
        cm_log(CM_LOG_WARN,
               "provider webhook %s: payment %s succeeded for checkout %s, which had ended "
               "unpaid: refunding it",
               op->ev.id, op->ev.object_id, op->ev.checkout[0] ? op->ev.checkout : "(by payment)");
    else
        cm_log(CM_LOG_INFO, "provider webhook %s (%s, payment %s): %s", op->ev.id, op->ev.type,
               op->ev.object_id, name);
    reply_received(op, o);
}

static void refuse(hook_op_t *op, rsv_webhook_outcome_t o, const char *error, const char *msg)
{
    count(op->r.srv, o);
    rsv_reply_error(&op->r, 400, error, msg, NULL);
    free(op);
}

void rsv_webhook_handle(rsv_server_t *srv, cm_req_t *req)
{
    hook_op_t *op = cm_xcalloc(1, sizeof(*op));
    rsv_req_start(&op->r, srv, req, RSV_EP_PROVIDER_WEBHOOK);
    const rsv_webhook_secrets_t *sec = cm_reload_cell_get(srv->webhook_secrets);
    if (rsv_webhook_secrets_count(sec) == 0) {
        rsv_reply_error(&op->r, 404, "not_found",
                        "provider webhooks are off (pay_webhook_secrets_file is not set)", NULL);
        free(op);
        return;
    }
    const char *sig = cm_http_header(req, "Stripe-Signature");
    if (sig == NULL)
        return refuse(op, RSV_WEBHOOK_REFUSED, "signature_missing",
                      "a Stripe-Signature header is required");
    size_t len = 0;
    const char *body = cm_http_body(req, &len);
    cm_hmacsig_result_t v =
        cm_hmacsig_verify(sig, strlen(sig), body ? body : "", body ? len : 0, sec->s, sec->n,
                          (int64_t)time(NULL), srv->cfg.pay_webhook_tolerance_s, NULL);
    if (v != CM_HMACSIG_OK) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the Stripe-Signature is refused: %s",
                 cm_hmacsig_result_name(v));
        cm_log(CM_LOG_WARN, "provider webhook refused: signature %s", cm_hmacsig_result_name(v));
        return refuse(op, RSV_WEBHOOK_REFUSED, "signature_invalid", msg);
    }
    const char *why = NULL;
    if (rsv_webhook_parse(body ? body : "", body ? len : 0, &op->ev, &why) != 0)
        return refuse(op, RSV_WEBHOOK_INVALID, "invalid_request", why);
    if (!op->ev.relevant)
        return reply_received(op, RSV_WEBHOOK_IGNORED);
    char created[24];
    snprintf(created, sizeof(created), "%lld", (long long)op->ev.created);
    const char *params[] = {op->ev.id, op->ev.type, op->ev.object_id,
                            op->ev.checkout[0] ? op->ev.checkout : NULL, created};
    if (rsv_pg_query(srv->pg, "SELECT onsale_provider_event($1, $2, $3, $4, $5::bigint)", 5, params,
                     on_recorded, op) != 0) {
        rsv_reply_unavailable(&op->r, "recording the provider's event", "shutting down");
        free(op);
    }
}
