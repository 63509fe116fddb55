/*
 * rsv_pay_stripe — see rsv_pay_stripe.h.
 *
 * A call that takes two exchanges (charge: create → confirm; lookup: create → retrieve)
 * is one heap block (struct flow) that lives until its callback ran; each exchange is one
 * rsv_pay_http call, whose callback starts the next one or reports. rsv_pay_http never
 * calls back from inside itself, and when the client shuts down every exchange in flight
 * is answered with cm_err_shutdown, so a flow always ends exactly once.
 */
#include "rsv_pay_stripe.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_err.h"
#include "cm_log.h"
#include "cm_mem.h"
#include "rsv_pay_adapter.h"

/* --- forms ------------------------------------------------------------------------------ */

typedef struct form {
    char *buf;
    size_t len, cap;
} form_t;

static void put(form_t *f, const char *s, size_t n)
{
    if (f->len + n + 1 > f->cap) {
        f->cap = (f->len + n + 1) * 2;
        f->buf = cm_xrealloc(f->buf, f->cap);
    }
    memcpy(f->buf + f->len, s, n);
    f->len += n;
    f->buf[f->len] = '\0';
}

/* application/x-www-form-urlencoded: unreserved bytes as they are, the rest %XX. */
static void put_enc(form_t *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            put(f, (const char *)&c, 1);
        } else {
            char hex[4];
            snprintf(hex, sizeof(hex), "%%%02X", c);
            put(f, hex, 3);
        }
    }
}

static void field(form_t *f, const char *key, const char *value)
{
    if (f->len)
        put(f, "&", 1);
    put_enc(f, key);
    put(f, "=", 1);
    put_enc(f, value);
}

static char *form_done(form_t *f)
{
    if (f->buf == NULL)
        return cm_xstrdup("");
    return f->buf;
}

char *rsv_pay_stripe_create_form(const rsv_pay_charge_req_t *req)
{
    form_t f = {0};
    char num[32], cur[8];
    snprintf(num, sizeof(num), "%lld", (long long)req->amount);
    size_t i = 0;
    for (; req->currency && req->currency[i] && i < sizeof(cur) - 1; i++)
        cur[i] = (char)tolower((unsigned char)req->currency[i]);
    cur[i] = '\0';
    field(&f, "amount", num);
    field(&f, "currency", cur);
    field(&f, "payment_method",
          req->payment_method && req->payment_method[0] ? req->payment_method : "pm_card_visa");
    field(&f, "payment_method_types[]", "card");
    field(&f, "metadata[checkout]", req->key);
    field(&f, "metadata[event]", req->event ? req->event : "");
    if (req->request_id && req->request_id[0])
        field(&f, "metadata[request_id]", req->request_id);
    return form_done(&f);
}

char *rsv_pay_stripe_confirm_form(const char *return_url)
{
    form_t f = {0};
    field(&f, "return_url", return_url);
    return form_done(&f);
}

char *rsv_pay_stripe_refund_form(const char *payment_id, int64_t amount)
{
    form_t f = {0};
    field(&f, "payment_intent", payment_id);
    if (amount > 0) {
        char num[32];
        snprintf(num, sizeof(num), "%lld", (long long)amount);
        field(&f, "amount", num);
    }
    return form_done(&f);
}

char *rsv_pay_stripe_list_path(int64_t created_gte, const char *starting_after, int limit)
{
    form_t f = {0};
    char num[32];
    snprintf(num, sizeof(num), "%lld", (long long)created_gte);
    field(&f, "created[gte]", num);
    snprintf(num, sizeof(num), "%d", limit);
    field(&f, "limit", num);
    if (starting_after && starting_after[0])
        field(&f, "starting_after", starting_after);
    field(&f, "expand[]", "data.latest_charge");
    char *path = cm_xasprintf("/v1/payment_intents?%s", f.buf);
    free(f.buf);
    return path;
}

/* --- answers ------------------------------------------------------------------------------ */

/* An object id fit for a URL path: Stripe's are letters, digits and '_'. */
static bool id_ok(const char *id)
{
    if (id == NULL || id[0] == '\0')
        return false;
    for (; *id; id++)
        if (!isalnum((unsigned char)*id) && *id != '_')
            return false;
    return true;
}

static void copy(char *dst, size_t cap, const char *s)
{
    if (s && strlen(s) < cap)
        snprintf(dst, cap, "%s", s);
}

/* An intent by its status; DECLINED needs a failed attempt (last_payment_error). */
static void by_status(const json_t *pi, rsv_pay_result_t *out)
{
    const char *st = json_string_value(json_object_get(pi, "status"));
    const char *id = json_string_value(json_object_get(pi, "id"));
    out->outcome = RSV_PAY_UNKNOWN;
    if (st == NULL || !id_ok(id))
        return;
    copy(out->id, sizeof(out->id), id);
    if (strcmp(st, "succeeded") == 0) {
        out->outcome = RSV_PAY_PAID;
    } else if (strcmp(st, "requires_action") == 0) {
        out->outcome = RSV_PAY_ACTION;
        const json_t *na = json_object_get(pi, "next_action");
        copy(out->action_url, sizeof(out->action_url),
             json_string_value(json_object_get(json_object_get(na, "redirect_to_url"), "url")));
    } else if (strcmp(st, "requires_payment_method") == 0) {
        const json_t *lpe = json_object_get(pi, "last_payment_error");
        out->outcome = json_is_object(lpe) ? RSV_PAY_DECLINED : RSV_PAY_NONE;
        if (json_is_object(lpe)) {
            copy(out->error_type, sizeof(out->error_type),
                 json_string_value(json_object_get(lpe, "type")));
            const char *dc = json_string_value(json_object_get(lpe, "decline_code"));
            copy(out->error_code, sizeof(out->error_code),
                 dc ? dc : json_string_value(json_object_get(lpe, "code")));
        }
    } else if (strcmp(st, "requires_confirmation") == 0 || strcmp(st, "canceled") == 0) {
        out->outcome = RSV_PAY_NONE; /* never confirmed, or canceled: no money moved */
    }
    /* processing: not decided yet; requires_capture: authorised but never captured (we
     * create with automatic capture, so this is another integration's intent): UNKNOWN */
}

void rsv_pay_stripe_classify(rsv_pay_stripe_op_t op, int status, const char *body, size_t len,
                             bool replayed, rsv_pay_result_t *out)
{
    out->outcome = RSV_PAY_UNKNOWN;
    out->id[0] = out->action_url[0] = out->error_type[0] = out->error_code[0] = '\0';
    json_t *doc = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(doc, "error");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *dcode = json_string_value(json_object_get(e, "decline_code"));
    copy(out->error_type, sizeof(out->error_type), type);
    copy(out->error_code, sizeof(out->error_code), dcode ? dcode : code);
    bool ok = (status == 200 || status == 201) && json_is_object(doc) && e == NULL;
    switch (op) {
    case RSV_PAY_STRIPE_CREATE:
        if (ok) {
            by_status(doc, out); /* requires_confirmation: NONE with the id — confirm next */
        } else if (status >= 500 && replayed) {
            /* A stored 5xx: this key never gave us an id, so nothing was confirmed. */
            out->outcome = RSV_PAY_NONE;
        } else if (status == 400 && type && strcmp(type, "invalid_request_error") == 0) {
            /* The provider refused to create the payment (no such payment method, an amount
             * past its limit, …): no intent, nothing can be charged under this key. */
            out->outcome = RSV_PAY_DECLINED;
        }
        break;
    case RSV_PAY_STRIPE_CONFIRM:
    case RSV_PAY_STRIPE_RETRIEVE:
        if (ok) {
            by_status(doc, out);
        } else if (status == 402 || (status == 400 && code &&
                                     strcmp(code, "payment_intent_unexpected_state") == 0)) {
            /* Stripe puts the intent as it now is in the error: a decline leaves it in
             * requires_payment_method with last_payment_error; an unexpected state (a
             * second confirmation of a settled intent) says what it settled to. */
            json_t *pi = json_object_get(e, "payment_intent");
            if (json_is_object(pi)) {
                char t[RSV_PAY_ERR_MAX], c[RSV_PAY_ERR_MAX];
                snprintf(t, sizeof(t), "%s", out->error_type);
                snprintf(c, sizeof(c), "%s", out->error_code);
                by_status(pi, out);
                if (out->error_type[0] == '\0') {
                    snprintf(out->error_type, sizeof(out->error_type), "%s", t);
                    snprintf(out->error_code, sizeof(out->error_code), "%s", c);
                }
            }
            if (status == 402 && out->outcome != RSV_PAY_PAID)
                out->outcome = RSV_PAY_DECLINED;
        }
        break;
    case RSV_PAY_STRIPE_REFUND: {
        const char *st = json_string_value(json_object_get(doc, "status"));
        const char *id = json_string_value(json_object_get(doc, "id"));
        if (ok && id &&
            (st == NULL || (strcmp(st, "failed") != 0 && strcmp(st, "canceled") != 0))) {
            out->outcome = RSV_PAY_REFUNDED;
            copy(out->id, sizeof(out->id), id);
        } else if (status == 400 && code && strcmp(code, "charge_already_refunded") == 0) {
            out->outcome = RSV_PAY_REFUNDED; /* refunded before, by this key or another */
        }
        break;
    }
    }
    json_decref(doc);
}

int rsv_pay_stripe_parse_list(int status, const char *body, size_t len, rsv_pay_page_t *out)
{
    memset(out, 0, sizeof(*out));
    if (status != 200 || body == NULL || len == 0)
        return -1;
    json_t *doc = json_loadb(body, len, 0, NULL);
    json_t *data = json_object_get(doc, "data");
    if (!json_is_array(data)) {
        json_decref(doc);
        return -1;
    }
    out->items = cm_xcalloc(json_array_size(data) + 1, sizeof(*out->items));
    out->has_more = json_is_true(json_object_get(doc, "has_more"));
    size_t i;
    json_t *c;
    json_array_foreach(data, i, c)
    {
        const char *id = json_string_value(json_object_get(c, "id"));
        if (id == NULL || strlen(id) >= RSV_PAY_ID_MAX)
            continue;
        rsv_pay_charge_t *x = &out->items[out->n++];
        snprintf(x->id, sizeof(x->id), "%s", id);
        copy(x->checkout, sizeof(x->checkout),
             json_string_value(json_object_get(json_object_get(c, "metadata"), "checkout")));
        const char *st = json_string_value(json_object_get(c, "status"));
        x->succeeded = st && strcmp(st, "succeeded") == 0;
        /* Refunds live on the intent's charge (expand[]=data.latest_charge). */
        json_t *ch = json_object_get(c, "latest_charge");
        x->refunded =
            json_is_object(ch) && (json_is_true(json_object_get(ch, "refunded")) ||
                                   json_integer_value(json_object_get(ch, "amount_refunded")) > 0);
        x->amount = (int64_t)json_integer_value(json_object_get(c, "amount"));
        x->created = (int64_t)json_integer_value(json_object_get(c, "created"));
    }
    json_decref(doc);
    return 0;
}

void rsv_pay_page_clear(rsv_pay_page_t *page)
{
    if (page == NULL)
        return;
    free(page->items);
    memset(page, 0, sizeof(*page));
}

/* --- flows -------------------------------------------------------------------------------- */

typedef enum { FLOW_CHARGE, FLOW_LOOKUP, FLOW_REFUND, FLOW_LIST } flow_kind_t;

typedef struct flow {
    rsv_pay_t *p;
    flow_kind_t kind;
    char key[RSV_PAY_ID_MAX + 16];
    int attempt;
    double seconds; /* of the exchanges so far */
    rsv_pay_cb cb;
    void *arg;
} flow_t;

static void report(flow_t *f, rsv_pay_result_t *res, const rsv_pay_answer_t *a)
{
    res->seconds = f->seconds;
    res->status = a->status;
    if (a->err)
        res->err = a->err;
    else if (res->outcome == RSV_PAY_UNKNOWN)
        res->err = a->status >= 500 ? cm_err_server : cm_err_protocol;
    rsv_pay_cb cb = f->cb;
    void *arg = f->arg;
    free(f);
    cb(res, arg);
}

static void fail_now(flow_t *f, const rsv_pay_answer_t *a)
{
    rsv_pay_result_t res;
    memset(&res, 0, sizeof(res));
    res.outcome = RSV_PAY_UNKNOWN;
    report(f, &res, a);
}

static void on_second(const rsv_pay_answer_t *a, void *arg)
{
    flow_t *f = arg;
    f->seconds += a->seconds;
    rsv_pay_result_t res;
    memset(&res, 0, sizeof(res));
    if (a->err) {
        res.outcome = RSV_PAY_UNKNOWN;
    } else if (f->kind == FLOW_REFUND) {
        rsv_pay_stripe_classify(RSV_PAY_STRIPE_REFUND, a->status, a->body, a->len, a->replayed,
                                &res);
    } else {
        rsv_pay_stripe_classify(f->kind == FLOW_CHARGE ? RSV_PAY_STRIPE_CONFIRM
                                                       : RSV_PAY_STRIPE_RETRIEVE,
                                a->status, a->body, a->len, a->replayed, &res);
    }
    report(f, &res, a);
}

static void on_created(const rsv_pay_answer_t *a, void *arg)
{
    flow_t *f = arg;
    f->seconds += a->seconds;
    rsv_pay_result_t res;
    memset(&res, 0, sizeof(res));
    if (a->err) {
        fail_now(f, a);
        return;
    }
    rsv_pay_stripe_classify(RSV_PAY_STRIPE_CREATE, a->status, a->body, a->len, a->replayed, &res);
    if (res.outcome != RSV_PAY_NONE || res.id[0] == '\0') {
        /* decided already (a decline), unknown, or a stored 5xx: for a charge that is
         * no answer (nothing can be confirmed under this key), for a lookup NONE */
        if (f->kind == FLOW_CHARGE && res.outcome == RSV_PAY_NONE)
            res.outcome = RSV_PAY_UNKNOWN;
        report(f, &res, a);
        return;
    }
    char *path;
    int rc;
    if (f->kind == FLOW_CHARGE) {
        char ckey[RSV_PAY_ID_MAX + 32];
        if (f->attempt > 0)
            snprintf(ckey, sizeof(ckey), "cf_%s_%d", f->key, f->attempt);
        else
            snprintf(ckey, sizeof(ckey), "cf_%s", f->key);
        char *form = rsv_pay_stripe_confirm_form(rsv_pay_return_url(f->p));
        path = cm_xasprintf("/v1/payment_intents/%s/confirm", res.id);
        rc = rsv_pay_http(f->p, true, path, ckey, form, false, on_second, f);
        free(form);
    } else {
        path = cm_xasprintf("/v1/payment_intents/%s", res.id);
        rc = rsv_pay_http(f->p, false, path, NULL, NULL, false, on_second, f);
    }
    free(path);
    if (rc != 0) {
        rsv_pay_answer_t down = {.err = cm_err_shutdown};
        fail_now(f, &down);
    }
}

static flow_t *flow_new(rsv_pay_t *p, flow_kind_t kind, const char *key, rsv_pay_cb cb, void *arg)
{
    flow_t *f = cm_xcalloc(1, sizeof(*f));
    f->p = p;
    f->kind = kind;
    snprintf(f->key, sizeof(f->key), "%s", key ? key : "");
    f->cb = cb;
    f->arg = arg;
    return f;
}

static int start_create(rsv_pay_t *p, flow_kind_t kind, const rsv_pay_charge_req_t *req,
                        rsv_pay_cb cb, void *arg)
{
    flow_t *f = flow_new(p, kind, req->key, cb, arg);
    f->attempt = req->attempt;
    char *form = rsv_pay_stripe_create_form(req);
    int rc = rsv_pay_http(p, true, "/v1/payment_intents", req->key, form, false, on_created, f);
    free(form);
    if (rc != 0)
        free(f);
    return rc;
}

static int stripe_charge(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg)
{
    return start_create(p, FLOW_CHARGE, req, cb, arg);
}

static int stripe_lookup(rsv_pay_t *p, const rsv_pay_charge_req_t *req, rsv_pay_cb cb, void *arg)
{
    return start_create(p, FLOW_LOOKUP, req, cb, arg);
}

static int stripe_refund(rsv_pay_t *p, const char *key, const char *payment_id, int64_t amount,
                         rsv_pay_cb cb, void *arg)
{
    flow_t *f = flow_new(p, FLOW_REFUND, key, cb, arg);
    char *form = rsv_pay_stripe_refund_form(payment_id, amount);
    int rc = rsv_pay_http(p, true, "/v1/refunds", key, form, false, on_second, f);
    free(form);
    if (rc != 0)
        free(f);
    return rc;
}

/* POST /v1/payment_intents/{id}/cancel: answered like a retrieve (the intent, or the
 * intent inside payment_intent_unexpected_state when it settled first). */
static int stripe_cancel(rsv_pay_t *p, const char *key, const char *payment_id, rsv_pay_cb cb,
                         void *arg)
{
    if (!id_ok(payment_id)) {
        return -1;
    }
    flow_t *f = flow_new(p, FLOW_LOOKUP, key, cb, arg);
    char *path = cm_xasprintf("/v1/payment_intents/%s/cancel", payment_id);
    int rc = rsv_pay_http(p, true, path, key, "cancellation_reason=abandoned", false, on_second, f);
    free(path);
    if (rc != 0)
        free(f);
    return rc;
}

static void on_listed(const rsv_pay_answer_t *a, void *arg)
{
    flow_t *f = arg;
    f->seconds += a->seconds;
    rsv_pay_result_t res;
    rsv_pay_page_t page = {0};
    memset(&res, 0, sizeof(res));
    res.outcome = RSV_PAY_UNKNOWN;
    if (a->err == NULL && rsv_pay_stripe_parse_list(a->status, a->body, a->len, &page) == 0) {
        res.outcome = RSV_PAY_LISTED;
        res.page = &page;
    }
    report(f, &res, a);
    rsv_pay_page_clear(&page);
}

static int stripe_list(rsv_pay_t *p, int64_t created_gte, const char *starting_after, int limit,
                       rsv_pay_cb cb, void *arg)
{
    flow_t *f = flow_new(p, FLOW_LIST, NULL, cb, arg);
    char *path = rsv_pay_stripe_list_path(created_gte, starting_after, limit);
    int rc = rsv_pay_http(p, false, path, NULL, NULL, true, on_listed, f);
    free(path);
    if (rc != 0)
        free(f);
    return rc;
}

const rsv_pay_adapter_t rsv_pay_stripe = {
    .name = "stripe",
    .charge = stripe_charge,
    .lookup = stripe_lookup,
    .refund = stripe_refund,
    .list = stripe_list,
    .cancel = stripe_cancel,
};
