/*
 * files — temporary files for the unit tests: a text written to a fresh owner-only file
 * under /tmp (what cm_config_read_secret accepts), its path handed back. Start-up of a
 * test; blocking I/O.
 */
#ifndef TEST_SUPPORT_FILES_H
#define TEST_SUPPORT_FILES_H

#include <sys/types.h>

/** text written to a new file of mode `mode` (0600 for a secret); heap path, free() it
 * after unlink(). Failures are cmocka assertions. */
char *tfile_new(const char *text, mode_t mode);

#endif
