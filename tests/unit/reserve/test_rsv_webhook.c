/*
 * Unit tests for reserve/rsv_webhook.c's pure parts: an event body parsed into what the
 * reserve reads (the payment a charge or a refund names, metadata.checkout, the types it
 * ignores), every malformed shape refused with a reason; the secrets file read one secret
 * a line, owner-only, bounded.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "rsv_webhook.h"

static int parse(const char *body, rsv_webhook_event_t *ev, const char **why)
{
    *why = NULL;
    return rsv_webhook_parse(body, strlen(body), ev, why);
}

static void test_intent_event(void **state)
{
    (void)state;
    rsv_webhook_event_t ev;
    const char *why;
    assert_int_equal(parse("{\"id\":\"evt_1\",\"object\":\"event\",\"type\":"
                           "\"payment_intent.succeeded\",\"created\":1764000000,\"data\":"
                           "{\"object\":{\"id\":\"pi_9\",\"object\":\"payment_intent\","
                           "\"metadata\":{\"checkout\":\"co_42\",\"event\":\"ev\"}}}}",
                           &ev, &why),
                     0);
    assert_string_equal(ev.id, "evt_1");
    assert_string_equal(ev.type, "payment_intent.succeeded");
    assert_string_equal(ev.object_id, "pi_9");
    assert_string_equal(ev.checkout, "co_42");
    assert_int_equal(ev.created, 1764000000);
    assert_true(ev.relevant);
}

/* A charge or a refund is found by the payment intent it names, not its own id. */
static void test_charge_names_its_intent(void **state)
{
    (void)state;
    rsv_webhook_event_t ev;
    const char *why;
    assert_int_equal(parse("{\"id\":\"evt_2\",\"type\":\"charge.refunded\",\"data\":{\"object\":"
                           "{\"id\":\"ch_1\",\"payment_intent\":\"pi_7\",\"metadata\":{}}}}",
                           &ev, &why),
                     0);
    assert_string_equal(ev.object_id, "pi_7");
    assert_string_equal(ev.checkout, "");
    assert_int_equal(ev.created, 0);
    /* a charge without an intent is its own payment */
    assert_int_equal(parse("{\"id\":\"evt_3\",\"type\":\"charge.succeeded\",\"data\":{\"object\":"
                           "{\"id\":\"ch_2\",\"payment_intent\":null,\"metadata\":null}}}",
                           &ev, &why),
                     0);
    assert_string_equal(ev.object_id, "ch_2");
}

/* Types the reserve does not read need no data at all. */
static void test_other_types_ignored(void **state)
{
    (void)state;
    rsv_webhook_event_t ev;
    const char *why;
    assert_int_equal(parse("{\"id\":\"evt_4\",\"type\":\"customer.created\"}", &ev, &why), 0);
    assert_false(ev.relevant);
    assert_int_equal(parse("{\"id\":\"evt_5\",\"type\":\"payment_intentX\"}", &ev, &why), 0);
    assert_false(ev.relevant);
}

static void test_malformed_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "[]",
        "not json",
        "{\"type\":\"payment_intent.succeeded\"}",                /* no id */
        "{\"id\":7,\"type\":\"payment_intent.succeeded\"}",       /* id not a string */
        "{\"id\":\"evt\",\"type\":\"\"}",                         /* empty type */
        "{\"id\":\"evt\",\"type\":\"x\",\"created\":-1}",         /* created not a time */
        "{\"id\":\"evt\",\"type\":\"x\",\"created\":\"1\"}",      /* created a string */
        "{\"id\":\"evt\",\"type\":\"payment_intent.succeeded\"}", /* no data.object */
        "{\"id\":\"evt\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":[]}}",
        "{\"id\":\"evt\",\"type\":\"charge.refunded\",\"data\":{\"object\":{\"id\":1}}}",
        "{\"id\":\"evt\",\"type\":\"refund.created\",\"data\":{\"object\":{\"id\":\"re\","
        "\"payment_intent\":5}}}",
        "{\"id\":\"evt\",\"type\":\"payment_intent.created\",\"data\":{\"object\":{\"id\":\"pi\","
        "\"metadata\":{\"checkout\":[1]}}}}",
        "{\"id\":\"evt\",\"type\":\"payment_intent.created\",\"data\":{\"object\":{\"id\":\"pi\","
        "\"metadata\":\"x\"}}}",
        "{\"id\":\"ev\\u0000t\",\"type\":\"x\"}",     /* a NUL inside */
        "{\"id\":\"ev\\nt\",\"type\":\"x\"}",         /* a control character */
        "{\"id\":\"a\",\"id\":\"b\",\"type\":\"x\"}", /* a duplicate key */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rsv_webhook_event_t ev;
        const char *why = NULL;
        if (parse(bad[i], &ev, &why) != -1)
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(why);
    }
    /* a field one byte too long */
    char body[512], id[RSV_WEBHOOK_FIELD_MAX + 1];
    memset(id, 'e', RSV_WEBHOOK_FIELD_MAX);
    id[RSV_WEBHOOK_FIELD_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"id\":\"%s\",\"type\":\"x\"}", id);
    rsv_webhook_event_t ev;
    const char *why;
    assert_int_equal(parse(body, &ev, &why), -1);
    id[RSV_WEBHOOK_FIELD_MAX - 1] = '\0';
    snprintf(body, sizeof(body), "{\"id\":\"%s\",\"type\":\"x\"}", id);
    assert_int_equal(parse(body, &ev, &why), 0);
}

static void test_secrets_file(void **state)
{
    (void)state;
    char err[256] = "";
    rsv_webhook_secrets_t *s = rsv_webhook_secrets_load(NULL, err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(rsv_webhook_secrets_count(s), 0); /* unset: webhooks off */
    rsv_webhook_secrets_free(s, NULL);

    char *f = tfile_new("whsec_new_one_0123\r\n\n  \nwhsec_old_one_4567\n", 0600);
    s = rsv_webhook_secrets_load(f, err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(rsv_webhook_secrets_count(s), 2);
    rsv_webhook_secrets_free(s, NULL);
    unlink(f);
    free(f);

    static const char *const bad[] = {
        "short\n",                             /* under 8 characters */
        "whsec_with space_0123\n",             /* a space inside */
        "whsec_ok_0123456\nwhsec\x01zzzzzz\n", /* a control character on line 2 */
        "1_aaaaaaaa\n2_aaaaaaaa\n3_aaaaaaaa\n4_aaaaaaaa\n5_aaaaaaaa\n6_aaaaaaaa\n7_aaaaaaaa\n"
        "8_aaaaaaaa\n9_aaaaaaaa\n", /* nine */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = tfile_new(bad[i], 0600);
        err[0] = '\0';
        if (rsv_webhook_secrets_load(f, err, sizeof(err)) != NULL)
            fail_msg("accepted secrets file %zu", i);
        assert_non_null(strstr(err, "pay_webhook_secrets_file"));
        unlink(f);
        free(f);
    }
    f = tfile_new("whsec_fine_but_shared\n", 0644); /* others may read it */
    assert_null(rsv_webhook_secrets_load(f, err, sizeof(err)));
    unlink(f);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intent_event),        cmocka_unit_test(test_charge_names_its_intent),
        cmocka_unit_test(test_other_types_ignored), cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_secrets_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
