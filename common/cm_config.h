/*
 * cm_config — one table-driven configuration loader for every binary.
 *
 * Each binary declares one struct and one table of cm_config_opt_t rows (name, type,
 * offset into the struct, default, bounds, help). Values are applied in order:
 * table defaults → config file → environment → command line, and validated once.
 * Defaults live only in the table. `--help` prints every key with its default and
 * help text. Runs before the event loop starts (it reads files), never after.
 *
 * Config file: `key = value` lines; `#` starts a comment; blank lines ignored; values
 * may be double-quoted. Environment: PREFIX + upper-cased key ("ONSALE_RESERVE_" +
 * "redis_port" → ONSALE_RESERVE_REDIS_PORT). Command line: `--key=value` or
 * `--key value`; `--config FILE` (or env PREFIX + "CONFIG") names the file.
 */
#ifndef CM_CONFIG_H
#define CM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CM_CFG_STR,  /* char * (heap, owned by the struct; freed by cm_config_free) */
    CM_CFG_INT,  /* int64_t, within [min, max] */
    CM_CFG_BOOL, /* bool */
} cm_config_type_t;

typedef struct cm_config_opt {
    const char *name;
    cm_config_type_t type;
    size_t offset;    /* offsetof(struct, field) */
    const char *def;  /* default as text; NULL for a string means "unset" (NULL) */
    int64_t min, max; /* CM_CFG_INT bounds (inclusive) */
    const char *help;
} cm_config_opt_t;

typedef enum {
    CM_CONFIG_OK = 0,     /* loaded; run */
    CM_CONFIG_HELP = 1,   /* --help or --version was printed; exit 0 */
    CM_CONFIG_ERROR = -1, /* message in err; exit non-zero */
} cm_config_result_t;

/**
 * Fills cfg (zeroed by the caller) from the table. argv[0] is skipped; positional
 * arguments (not starting with "--") are left for the caller: their indexes are
 * stored in positional[] (at most npositional; the count in *npos_out, may be NULL).
 */
cm_config_result_t cm_config_load(const cm_config_opt_t *table, size_t n, void *cfg,
                                  const char *env_prefix, int argc, char **argv, int *positional,
                                  size_t npositional, size_t *npos_out, char *err, size_t errlen);

/** Prints usage: every key, its type, default, bounds and help, as `--help` does. */
void cm_config_usage(FILE *out, const char *progname, const cm_config_opt_t *table, size_t n,
                     const char *env_prefix);

/**
 * Reads a secret from the file named by the config key `key` (a `*_file` key): the
 * whole file, trailing whitespace (newline, CR, space, tab) trimmed. Start-up only
 * (blocking I/O). Refuses — NULL with a message naming the key and the file in err — a
 * file that is missing, not a regular file, readable or writable by group or others
 * (mode & 077: "chmod 600 it"), larger than max_len bytes, or holding fewer than
 * min_len characters once trimmed. Returns a new heap string (the caller wipes and frees
 * it) and its length in *len (may be NULL).
 *
 * path may also be "credential:NAME": the file NAME in $CREDENTIALS_DIRECTORY, where
 * systemd puts what a unit's LoadCredential=NAME:SOURCE names (owner-only, as the check
 * above wants). Refused with a clear message when the variable is unset or NAME is not
 * a plain file name.
 */
char *cm_config_read_secret(const char *key, const char *path, size_t min_len, size_t max_len,
                            size_t *len, char *err, size_t errlen);

/** The prefix of a secret path read from $CREDENTIALS_DIRECTORY (cm_config_read_secret). */
#define CM_CONFIG_CREDENTIAL_PREFIX "credential:"

/** Frees the strings the loader stored in cfg. */
void cm_config_free(const cm_config_opt_t *table, size_t n, void *cfg);

/**
 * True when argv asks for `--check-config` (before a `--`): the binary validates its
 * configuration and the files it names, prints "configuration ok" or the error, and
 * exits 0 or 1 without opening a socket. cm_config_load accepts and ignores the flag.
 */
bool cm_config_check_requested(int argc, char **argv);

/** True when key opt holds the same value in cfg a and cfg b (strings compared by text). */
bool cm_config_equal(const cm_config_opt_t *opt, const void *a, const void *b);

/** Copies key opt's value from src into dst (a string is duplicated; dst's old one freed). */
void cm_config_copy_key(const cm_config_opt_t *opt, void *dst, const void *src);

/** Deep copy of every key from src into dst (zeroed by the caller); free with cm_config_free. */
void cm_config_copy(const cm_config_opt_t *table, size_t n, void *dst, const void *src);

/** True when name is one of the NULL-terminated list (NULL list: false). */
bool cm_config_in(const char *const *list, const char *name);

struct json_t;

/**
 * The configuration as a JSON object, key → value (strings, integers, booleans, null
 * when unset), for the admin API. A key named in secret (NULL-terminated) shows "***"
 * when set; in any string, what follows `password=` is shown as *** too, so a libpq
 * conninfo never leaks one. New reference.
 */
struct json_t *cm_config_json(const cm_config_opt_t *table, size_t n, const void *cfg,
                              const char *const *secret);

#endif
