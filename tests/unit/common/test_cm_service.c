/*
 * test_cm_service — common/cm_service.c, its pure parts: which requests the shared routes
 * take (/healthz and /readyz anywhere, /metrics on the admin listener only, GET only), the
 * /readyz answer for every combination of backends, workers and drain, and the log
 * settings a service starts and reloads with.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_service.h"

static int route(cm_http_method_t method, const char *path, bool admin)
{
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", path);
    char *seg[4];
    int n = 0;
    for (char *p = strtok(buf, "/"); p && n < 4; p = strtok(NULL, "/"))
        seg[n++] = p;
    return cm_svc_shared_endpoint(method, seg, n, admin);
}

static void shared_routes(void **state)
{
    (void)state;
    assert_int_equal(route(CM_HTTP_GET, "/healthz", false), CM_SVC_EP_HEALTH);
    assert_int_equal(route(CM_HTTP_GET, "/healthz", true), CM_SVC_EP_HEALTH);
    assert_int_equal(route(CM_HTTP_GET, "/readyz", false), CM_SVC_EP_READY);
    assert_int_equal(route(CM_HTTP_GET, "/readyz", true), CM_SVC_EP_READY);
    assert_int_equal(route(CM_HTTP_GET, "/metrics", true), CM_SVC_EP_METRICS);
    /* the metrics are the operators': never on the public listener */
    assert_int_equal(route(CM_HTTP_GET, "/metrics", false), -1);
    assert_int_equal(route(CM_HTTP_POST, "/healthz", true), -1);
    assert_int_equal(route(CM_HTTP_GET, "/healthz/x", true), -1);
    assert_int_equal(route(CM_HTTP_GET, "/", true), -1);
    assert_int_equal(route(CM_HTTP_GET, "/healthzz", true), -1);
}

/* cm_svc_readiness with one backend "redis" (up or not); checks code, message, body. */
static void expect_ready(bool redis, bool workers, bool draining, int code, const char *message,
                         const char *status)
{
    json_t *backends = json_pack("{s:b}", "redis", redis);
    cm_svc_readiness_t a = cm_svc_readiness(backends, redis, workers, draining, "redis is down");
    assert_int_equal(a.code, code);
    if (message)
        assert_string_equal(a.message, message);
    else
        assert_null(a.message);
    assert_string_equal(json_string_value(json_object_get(a.body, "status")), status);
    assert_true(json_is_boolean(json_object_get(a.body, "redis")));
    assert_int_equal(json_is_true(json_object_get(a.body, "redis")), redis);
    assert_int_equal(json_is_true(json_object_get(a.body, "workers")), workers);
    assert_int_equal(json_object_size(a.body), 3);
    json_decref(a.body);
}

static void readiness(void **state)
{
    (void)state;
    expect_ready(true, true, false, 200, NULL, "ready");
    expect_ready(false, true, false, 503, "redis is down", "unavailable");
    expect_ready(true, false, false, 503, "redis is down", "unavailable");
    /* draining: refused whatever the backends say, and said so */
    expect_ready(true, true, true, 503, "shutting down", "ready");
    expect_ready(false, true, true, 503, "shutting down", "unavailable");
}

static void readiness_without_backends(void **state)
{
    (void)state;
    cm_svc_readiness_t a = cm_svc_readiness(json_object(), true, true, false, NULL);
    assert_int_equal(a.code, 200);
    char *text = json_dumps(a.body, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"status\":\"ready\",\"workers\":true}");
    free(text);
    json_decref(a.body);
}

static void log_settings(void **state)
{
    (void)state;
    cm_service_log_t l;
    char err[128] = "";
    assert_int_equal(cm_service_log_parse(&l, "debug", "json", true, err, sizeof(err)), 0);
    assert_int_equal(l.level, CM_LOG_DEBUG);
    assert_int_equal(l.format, CM_LOG_JSON);
    assert_true(l.access_log);
    assert_int_equal(cm_service_log_parse(&l, "loud", "json", false, err, sizeof(err)), -1);
    assert_true(err[0] != '\0');
    err[0] = '\0';
    assert_int_equal(cm_service_log_parse(&l, "info", "xml", false, err, sizeof(err)), -1);
    assert_true(err[0] != '\0');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_routes),
        cmocka_unit_test(readiness),
        cmocka_unit_test(readiness_without_backends),
        cmocka_unit_test(log_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
