/*
 * Unit tests for reserve/rsv_admin.c below the HTTP layer: the outcome names
 * onsale_event_put answers (deploy/sql/functions.sql) and the API repeats — each one
 * parsed to its outcome and named back the same, anything else refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "rsv_admin.h"

static void test_outcome_names_both_ways(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        rsv_admin_put_outcome_t o;
    } cases[] = {
        {"created", RSV_ADMIN_PUT_CREATED},
        {"replaced", RSV_ADMIN_PUT_REPLACED},
        {"updated", RSV_ADMIN_PUT_UPDATED},
        {"has_sales", RSV_ADMIN_PUT_HAS_SALES},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(rsv_admin_put_outcome_parse(cases[i].name), cases[i].o);
        assert_string_equal(rsv_admin_put_outcome_name(cases[i].o), cases[i].name);
    }
}

static void test_other_names_refused(void **state)
{
    (void)state;
    const char *bad[] = {"", "create", "Created", "created ", "has-sales", "deleted"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(rsv_admin_put_outcome_parse(bad[i]), RSV_ADMIN_PUT_NOUTCOMES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcome_names_both_ways),
        cmocka_unit_test(test_other_names_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
