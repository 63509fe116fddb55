/*
 * files — see files.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tfile_new(const char *text, mode_t mode)
{
    char *path = strdup("/tmp/onsale-test-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path); /* mode 0600 */
    assert_true(fd >= 0);
    size_t n = strlen(text);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}
