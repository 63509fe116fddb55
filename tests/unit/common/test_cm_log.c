/*
 * Unit tests for common/cm_log.c: stderr is pointed at a temporary file, lines are read
 * back. The journal's "<N>" priority prefix appears only when $JOURNAL_STREAM names
 * stderr's own device and inode; the JSON format is one parseable object per line with
 * the request id when one is set; the text format carries [req=<id>].
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
#include <sys/stat.h>
#include <unistd.h>

#include "cm_log.h"

typedef struct fx {
    char path[64];
    int saved_stderr;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    snprintf(f->path, sizeof(f->path), "/tmp/test_cm_log.XXXXXX");
    int fd = mkstemp(f->path);
    assert_true(fd >= 0);
    f->saved_stderr = dup(STDERR_FILENO);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    close(fd);
    unsetenv("JOURNAL_STREAM");
    cm_log_set_format(CM_LOG_TEXT);
    cm_log_set_request(NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    dup2(f->saved_stderr, STDERR_FILENO);
    close(f->saved_stderr);
    unlink(f->path);
    unsetenv("JOURNAL_STREAM");
    free(f);
    return 0;
}

/* What was written so far (heap; caller frees). */
static char *written(fx_t *f)
{
    FILE *fp = fopen(f->path, "r");
    assert_non_null(fp);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return strdup(buf);
}

static void journal_stream_is_stderr(const char *dev_ino_override)
{
    char v[64];
    struct stat st;
    assert_int_equal(fstat(STDERR_FILENO, &st), 0);
    snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", dev_ino_override ? dev_ino_override : v, 1);
}

static void test_plain_without_journal(void **state)
{
    fx_t *f = *state;
    cm_log_init("unit", CM_LOG_DEBUG);
    assert_false(cm_log_journal());
    cm_log(CM_LOG_WARN, "hello %d", 7);
    char *s = written(f);
    assert_int_not_equal(s[0], '<');
    assert_non_null(strstr(s, " unit["));
    assert_non_null(strstr(s, "] warn: hello 7\n"));
    free(s);
}

static void test_priority_prefix_when_stderr_is_the_journal(void **state)
{
    fx_t *f = *state;
    journal_stream_is_stderr(NULL);
    cm_log_init("unit", CM_LOG_DEBUG);
    assert_true(cm_log_journal());
    cm_log(CM_LOG_DEBUG, "d");
    cm_log(CM_LOG_INFO, "i");
    cm_log(CM_LOG_WARN, "w");
    cm_log(CM_LOG_ERROR, "e");
    char *s = written(f);
    const char *want[] = {"<7>", "<6>", "<4>", "<3>"};
    char *line = s;
    for (int i = 0; i < 4; i++) {
        assert_non_null(line);
        assert_memory_equal(line, want[i], 3);
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    free(s);
}

static void test_no_prefix_when_journal_stream_is_another_file(void **state)
{
    fx_t *f = *state;
    journal_stream_is_stderr("1:2"); /* inherited by a process whose stderr was redirected */
    cm_log_init("unit", CM_LOG_DEBUG);
    assert_false(cm_log_journal());
    cm_log(CM_LOG_ERROR, "e");
    setenv("JOURNAL_STREAM", "garbage", 1);
    cm_log_init("unit", CM_LOG_DEBUG);
    assert_false(cm_log_journal());
    char *s = written(f);
    assert_int_not_equal(s[0], '<');
    free(s);
}

static void test_json_one_object_per_line(void **state)
{
    fx_t *f = *state;
    cm_log_init("unit", CM_LOG_INFO);
    cm_log_set_format(CM_LOG_JSON);
    cm_log(CM_LOG_INFO, "quote \" backslash \\ newline \n tab \t end");
    cm_log_set_request("rid-42");
    cm_log(CM_LOG_ERROR, "with id");
    cm_log_set_request(NULL);
    cm_log(CM_LOG_DEBUG, "below the level");
    cm_log_always(CM_LOG_INFO, "always");
    char *s = written(f);
    int n = 0;
    for (char *save = NULL, *line = strtok_r(s, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save), n++) {
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        assert_non_null(o);
        assert_string_equal(json_string_value(json_object_get(o, "program")), "unit");
        assert_non_null(json_string_value(json_object_get(o, "time")));
        assert_true(json_is_integer(json_object_get(o, "thread")));
        const char *msg = json_string_value(json_object_get(o, "message"));
        const char *rid = json_string_value(json_object_get(o, "request_id"));
        if (n == 0) {
            assert_string_equal(msg, "quote \" backslash \\ newline \n tab \t end");
            assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
            assert_null(rid);
        } else if (n == 1) {
            assert_string_equal(msg, "with id");
            assert_string_equal(json_string_value(json_object_get(o, "level")), "error");
            assert_string_equal(rid, "rid-42");
        } else {
            assert_string_equal(msg, "always");
        }
        json_decref(o);
    }
    assert_int_equal(n, 3);
    cm_log_set_format(CM_LOG_TEXT);
    free(s);
}

static void test_text_carries_the_request_id(void **state)
{
    fx_t *f = *state;
    cm_log_init("unit", CM_LOG_INFO);
    cm_log_set_request("abc.123");
    cm_log(CM_LOG_INFO, "about it");
    cm_log_set_request(NULL);
    cm_log(CM_LOG_INFO, "not about it");
    char *s = written(f);
    assert_non_null(strstr(s, "info: [req=abc.123] about it\n"));
    assert_non_null(strstr(s, "info: not about it\n"));
    free(s);
}

static void test_format_parse(void **state)
{
    (void)state;
    cm_log_format_t fmt;
    assert_int_equal(cm_log_format_parse("json", &fmt), 0);
    assert_int_equal(fmt, CM_LOG_JSON);
    assert_int_equal(cm_log_format_parse("TEXT", &fmt), 0);
    assert_int_equal(fmt, CM_LOG_TEXT);
    assert_int_equal(cm_log_format_parse("xml", &fmt), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plain_without_journal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority_prefix_when_stderr_is_the_journal, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_prefix_when_journal_stream_is_another_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_json_one_object_per_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_carries_the_request_id, setup, teardown),
        cmocka_unit_test(test_format_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
