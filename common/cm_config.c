/*
 * cm_config — the table-driven loader behind every binary's configuration.
 *
 * Owns nothing after it returns but the strings it stored in the caller's struct.
 * Runs once on the main thread before the event loop (it reads a file and the
 * environment). The command line is scanned first, without applying anything, so
 * that `--help` and `--config` are known before the file is read and argv can still
 * win over file and environment; then the layers are applied in order: table
 * defaults → file → environment → argv. Every value goes through one setter, which
 * parses and bounds-checks it, so a value is validated the same way wherever it came
 * from, and an error names its source (file:line, variable or option) and the key.
 * Values are never echoed for string keys: some of them are secrets.
 */
#include "cm_config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "cm_mem.h"
#include "cm_parse.h"
#include "cm_version.h"

/* One `--key value` from argv, applied after file and environment. */
typedef struct pending {
    const cm_config_opt_t *opt;
    const char *value;
} pending_t;

/* Option names compare with '-' and '_' as the same character. */
static bool name_eq(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++) {
        char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
        if (x != y)
            return false;
    }
    return true;
}

static const cm_config_opt_t *find_opt(const cm_config_opt_t *table, size_t n, const char *name,
                                       size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (name_eq(name, len, table[i].name))
            return &table[i];
    }
    return NULL;
}

/* The table default as text; NULL only for a string without one (unset). */
static const char *default_text(const cm_config_opt_t *opt)
{
    if (opt->def != NULL || opt->type == CM_CFG_STR)
        return opt->def;
    return opt->type == CM_CFG_INT ? "0" : "false";
}

/* Parses, bounds-checks and stores one value. An empty value restores the default, so a
 * blank `key =` line or an exported-but-empty variable never means "" or 0 by accident. */
static int set_value(const cm_config_opt_t *opt, void *cfg, const char *text, const char *where,
                     char *err, size_t errlen)
{
    char *field = (char *)cfg + opt->offset;
    if (text != NULL && text[0] == '\0')
        text = default_text(opt);
    switch (opt->type) {
    case CM_CFG_STR: {
        char **slot = (char **)(void *)field;
        free(*slot);
        *slot = text != NULL ? cm_xstrdup(text) : NULL;
        return 0;
    }
    case CM_CFG_INT: {
        int64_t v;
        if (text == NULL || cm_parse_i64(text, INT64_MIN, INT64_MAX, &v) != 0) {
            snprintf(err, errlen, "%s: %s: '%s' is not an integer", where, opt->name,
                     text ? text : "");
            return -1;
        }
        if (v < opt->min || v > opt->max) {
            snprintf(err, errlen, "%s: %s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
                     where, opt->name, v, opt->min, opt->max);
            return -1;
        }
        memcpy(field, &v, sizeof(v));
        return 0;
    }
    case CM_CFG_BOOL: {
        bool b;
        if (text == NULL || cm_parse_bool(text, &b) != 0) {
            snprintf(err, errlen, "%s: %s: '%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
                     where, opt->name, text ? text : "");
            return -1;
        }
        memcpy(field, &b, sizeof(b));
        return 0;
    }
    }
    snprintf(err, errlen, "%s: %s: bad table type", where, opt->name);
    return -1;
}

static int apply_defaults(const cm_config_opt_t *table, size_t n, void *cfg, char *err,
                          size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (set_value(&table[i], cfg, default_text(&table[i]), "default", err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* Unescapes a double-quoted value in place (p is just past the opening quote). 1 / -1. */
static int parse_quoted(char *p, char **value, const char **why)
{
    char *out = p;
    *value = out;
    for (; *p != '"'; p++) {
        if (*p == '\0' || *p == '\n' || *p == '\r') {
            *why = "unterminated quoted value";
            return -1;
        }
        if (*p != '\\') {
            *out++ = *p;
            continue;
        }
        p++;
        if (*p == 'n')
            *out++ = '\n';
        else if (*p == 't')
            *out++ = '\t';
        else if (*p == '"' || *p == '\\')
            *out++ = *p;
        else {
            *why = "unknown escape in quoted value";
            return -1;
        }
    }
    *out = '\0';
    for (p++; isspace((unsigned char)*p); p++)
        ;
    if (*p != '\0' && *p != '#') {
        *why = "text after the closing quote";
        return -1;
    }
    return 1;
}

/*
 * Parses one `key = value` line in place. Returns 1 with key/value set, 0 for a blank or
 * comment line, -1 with a reason in *why.
 */
static int parse_line(char *line, char **key, size_t *keylen, char **value, const char **why)
{
    char *p = line;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '\0' || *p == '#')
        return 0;
    *key = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '-')
        p++;
    *keylen = (size_t)(p - *key);
    while (*p == ' ' || *p == '\t')
        p++;
    if (*keylen == 0 || *p != '=') {
        *why = "expected `key = value`";
        return -1;
    }
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '"')
        return parse_quoted(p + 1, value, why);
    /* unquoted: up to a '#' that starts a word, trailing blanks trimmed */
    *value = p;
    char *end = p;
    for (; *p != '\0'; p++) {
        if (*p == '#' && (p == *value || p[-1] == ' ' || p[-1] == '\t'))
            break;
        if (!isspace((unsigned char)*p))
            end = p + 1;
    }
    *end = '\0';
    return 1;
}

static int load_file(const char *path, const cm_config_opt_t *table, size_t n, void *cfg, char *err,
                     size_t errlen)
{
    int rc = -1;
    char *line = NULL;
    size_t cap = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
        goto out;
    }
    for (unsigned lineno = 1; getline(&line, &cap, f) != -1; lineno++) {
        char *key, *value, where[512];
        size_t keylen;
        const char *why = NULL;
        int r = parse_line(line, &key, &keylen, &value, &why);
        snprintf(where, sizeof(where), "%s:%u", path, lineno);
        if (r < 0) {
            snprintf(err, errlen, "%s: %s", where, why);
            goto out;
        }
        if (r == 0)
            continue;
        const cm_config_opt_t *opt = find_opt(table, n, key, keylen);
        if (opt == NULL) {
            snprintf(err, errlen, "%s: unknown key '%.*s'", where, (int)keylen, key);
            goto out;
        }
        if (set_value(opt, cfg, value, where, err, errlen) != 0)
            goto out;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "config file %s: read error", path);
        goto out;
    }
    rc = 0;
out:
    free(line);
    if (f != NULL)
        fclose(f);
    return rc;
}

/* PREFIX + upper-cased name with '-' as '_'; caller frees. */
static char *env_name(const char *prefix, const char *name)
{
    char *s = cm_xasprintf("%s%s", prefix, name);
    for (char *p = s + strlen(prefix); *p; p++)
        *p = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    return s;
}

static int load_env(const cm_config_opt_t *table, size_t n, void *cfg, const char *prefix,
                    char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        char *var = env_name(prefix, table[i].name);
        const char *v = getenv(var);
        char where[160];
        snprintf(where, sizeof(where), "environment %s", var);
        free(var);
        if (v != NULL && set_value(&table[i], cfg, v, where, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* Scans argv without applying anything; see cm_config_load. */
typedef struct argscan {
    pending_t *pend;
    size_t npend;
    const char *config_path;
    bool help;
    bool version;
    size_t npos;
} argscan_t;

/*
 * The value of the option at argv[*i]: after '=', implied by a boolean flag, or the next
 * word (consumed by advancing *i). NULL when a value is needed and none is left.
 */
static const char *option_value(const cm_config_opt_t *opt, const char *eq, bool negated, int argc,
                                char **argv, int *i)
{
    bool dummy;
    if (eq != NULL)
        return eq + 1;
    if (negated)
        return "false";
    if (opt != NULL && opt->type == CM_CFG_BOOL) {
        /* a bare boolean flag means true; it takes the next word only if it is one */
        if (*i + 1 < argc && cm_parse_bool(argv[*i + 1], &dummy) == 0)
            return argv[++*i];
        return "true";
    }
    if (*i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int scan_argv(const cm_config_opt_t *table, size_t n, int argc, char **argv, int *positional,
                     size_t npositional, argscan_t *sc, char *err, size_t errlen)
{
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (options_done || strncmp(arg, "--", 2) != 0) {
            if (!options_done && strcmp(arg, "-h") == 0) {
                sc->help = true;
                continue;
            }
            if (sc->npos >= npositional) {
                snprintf(err, errlen, "unexpected argument '%s'", arg);
                return -1;
            }
            if (positional != NULL)
                positional[sc->npos] = i;
            sc->npos++;
            continue;
        }
        if (arg[2] == '\0') {
            options_done = true;
            continue;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        if (name_eq(name, len, "help")) {
            sc->help = true;
            continue;
        }
        if (name_eq(name, len, "version")) {
            sc->version = true;
            continue;
        }
        if (eq == NULL && name_eq(name, len, "check_config"))
            continue; /* the caller's (cm_config_check_requested) */
        const cm_config_opt_t *opt = find_opt(table, n, name, len);
        bool negated = false;
        if (opt == NULL && eq == NULL && len > 3 && name_eq(name, 3, "no_")) {
            opt = find_opt(table, n, name + 3, len - 3);
            negated = opt != NULL && opt->type == CM_CFG_BOOL;
            if (!negated)
                opt = NULL;
        }
        bool is_config = opt == NULL && name_eq(name, len, "config");
        if (opt == NULL && !is_config) {
            snprintf(err, errlen, "unknown option --%.*s (try --help)", (int)len, name);
            return -1;
        }
        const char *value = option_value(opt, eq, negated, argc, argv, &i);
        if (value == NULL) {
            snprintf(err, errlen, "option --%.*s needs a value", (int)len, name);
            return -1;
        }
        if (is_config) {
            sc->config_path = value;
        } else {
            sc->pend[sc->npend].opt = opt;
            sc->pend[sc->npend].value = value;
            sc->npend++;
        }
    }
    return 0;
}

cm_config_result_t cm_config_load(const cm_config_opt_t *table, size_t n, void *cfg,
                                  const char *env_prefix, int argc, char **argv, int *positional,
                                  size_t npositional, size_t *npos_out, char *err, size_t errlen)
{
    cm_config_result_t rc = CM_CONFIG_ERROR;
    char *env_config_var = NULL;
    argscan_t sc = {.pend = cm_xcalloc((size_t)(argc > 0 ? argc : 1), sizeof(pending_t))};
    if (err != NULL && errlen > 0)
        err[0] = '\0';

    if (scan_argv(table, n, argc, argv, positional, npositional, &sc, err, errlen) != 0)
        goto out;
    if (sc.help || sc.version) {
        const char *prog = argc > 0 ? strrchr(argv[0], '/') : NULL;
        prog = prog ? prog + 1 : argc > 0 ? argv[0] : "onsale";
        if (sc.help)
            cm_config_usage(stdout, prog, table, n, env_prefix);
        else
            cm_version_print(stdout, prog);
        rc = CM_CONFIG_HELP;
        goto out;
    }
    if (apply_defaults(table, n, cfg, err, errlen) != 0)
        goto out;
    const char *path = sc.config_path;
    if (path == NULL && env_prefix != NULL) {
        env_config_var = env_name(env_prefix, "config");
        path = getenv(env_config_var);
        if (path != NULL && path[0] == '\0')
            path = NULL;
    }
    if (path != NULL && load_file(path, table, n, cfg, err, errlen) != 0)
        goto out;
    if (env_prefix != NULL && load_env(table, n, cfg, env_prefix, err, errlen) != 0)
        goto out;
    for (size_t i = 0; i < sc.npend; i++) {
        char where[160];
        snprintf(where, sizeof(where), "option --%s", sc.pend[i].opt->name);
        if (set_value(sc.pend[i].opt, cfg, sc.pend[i].value, where, err, errlen) != 0)
            goto out;
    }
    if (npos_out != NULL)
        *npos_out = sc.npos;
    rc = CM_CONFIG_OK;
out:
    if (rc != CM_CONFIG_OK)
        cm_config_free(table, n, cfg);
    free(env_config_var);
    free(sc.pend);
    return rc;
}

void cm_config_usage(FILE *out, const char *progname, const cm_config_opt_t *table, size_t n,
                     const char *env_prefix)
{
    static const char *const type_names[] = {"text", "int", "bool"};
    fprintf(out, "Usage: %s [options]\n\n", progname);
    fprintf(out, "Settings are applied in order: defaults, config file, environment, "
                 "command line.\nOptions take --key=value or --key value; a bare boolean "
                 "--key means true, --no-key false.\nAn empty value restores the default.\n\n");
    for (size_t i = 0; i < n; i++) {
        const cm_config_opt_t *o = &table[i];
        fprintf(out, "  --%s=<%s>\n      %s\n      default: %s", o->name, type_names[o->type],
                o->help ? o->help : "", o->def ? o->def : "(unset)");
        if (o->type == CM_CFG_INT)
            fprintf(out, "; range: %" PRId64 "..%" PRId64, o->min, o->max);
        if (env_prefix != NULL) {
            char *var = env_name(env_prefix, o->name);
            fprintf(out, "; env: %s", var);
            free(var);
        }
        fputc('\n', out);
    }
    fprintf(out, "  --config=<file>\n      `key = value` lines, # comments, values may be "
                 "\"quoted\"");
    if (env_prefix != NULL) {
        char *var = env_name(env_prefix, "config");
        fprintf(out, "; env: %s", var);
        free(var);
    }
    fprintf(out, "\n  --check-config\n      validate the configuration and the files it names "
                 "(keys, certificates, secrets), print \"configuration ok\" or the error, and "
                 "exit 0 or 1\n");
    fprintf(out, "  --help\n      print this text and exit\n");
    fprintf(out,
            "  --version\n      print the version and the commit it was built from, and exit\n");
}

void cm_config_free(const cm_config_opt_t *table, size_t n, void *cfg)
{
    for (size_t i = 0; i < n; i++) {
        if (table[i].type != CM_CFG_STR)
            continue;
        char **slot = (char **)(void *)((char *)cfg + table[i].offset);
        free(*slot);
        *slot = NULL;
    }
}

bool cm_config_check_requested(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--check-config") == 0 || strcmp(argv[i], "--check_config") == 0)
            return true;
    }
    return false;
}

static const void *field_of(const cm_config_opt_t *opt, const void *cfg)
{
    return (const char *)cfg + opt->offset;
}

bool cm_config_equal(const cm_config_opt_t *opt, const void *a, const void *b)
{
    const void *x = field_of(opt, a), *y = field_of(opt, b);
    switch (opt->type) {
    case CM_CFG_STR: {
        const char *s, *t;
        memcpy(&s, x, sizeof(s));
        memcpy(&t, y, sizeof(t));
        return s == t || (s != NULL && t != NULL && strcmp(s, t) == 0);
    }
    case CM_CFG_INT:
        return memcmp(x, y, sizeof(int64_t)) == 0;
    case CM_CFG_BOOL:
        return memcmp(x, y, sizeof(bool)) == 0;
    }
    return false;
}

void cm_config_copy_key(const cm_config_opt_t *opt, void *dst, const void *src)
{
    char *to = (char *)dst + opt->offset;
    const void *from = field_of(opt, src);
    switch (opt->type) {
    case CM_CFG_STR: {
        const char *s;
        char **slot = (char **)(void *)to;
        memcpy(&s, from, sizeof(s));
        char *copy = s != NULL ? cm_xstrdup(s) : NULL;
        free(*slot);
        *slot = copy;
        return;
    }
    case CM_CFG_INT:
        memcpy(to, from, sizeof(int64_t));
        return;
    case CM_CFG_BOOL:
        memcpy(to, from, sizeof(bool));
        return;
    }
}

void cm_config_copy(const cm_config_opt_t *table, size_t n, void *dst, const void *src)
{
    for (size_t i = 0; i < n; i++)
        cm_config_copy_key(&table[i], dst, src);
}

bool cm_config_in(const char *const *list, const char *name)
{
    for (; list != NULL && *list != NULL; list++) {
        if (strcmp(*list, name) == 0)
            return true;
    }
    return false;
}

/* s with the value of every `password=` (quoted or not) replaced by ***. New string. */
static char *mask_passwords(const char *s)
{
    static const char word[] = "password=";
    size_t cap = strlen(s) + 1, o = 0;
    char *out = cm_xmalloc(cap + 8 * (cap / sizeof(word) + 1));
    while (*s != '\0') {
        if (strncmp(s, word, sizeof(word) - 1) != 0) {
            out[o++] = *s++;
            continue;
        }
        memcpy(out + o, word, sizeof(word) - 1);
        o += sizeof(word) - 1;
        s += sizeof(word) - 1;
        memcpy(out + o, "***", 3);
        o += 3;
        if (*s == '\'') { /* libpq quoting: \' and \\ escaped */
            for (s++; *s != '\0' && *s != '\''; s++) {
                if (*s == '\\' && s[1] != '\0')
                    s++;
            }
            if (*s == '\'')
                s++;
        } else {
            while (*s != '\0' && *s != ' ' && *s != '\t')
                s++;
        }
    }
    out[o] = '\0';
    return out;
}

static json_t *value_json(const cm_config_opt_t *opt, const void *cfg, const char *const *secret)
{
    const void *f = field_of(opt, cfg);
    switch (opt->type) {
    case CM_CFG_STR: {
        const char *s;
        memcpy(&s, f, sizeof(s));
        if (s == NULL)
            return json_null();
        if (cm_config_in(secret, opt->name))
            return json_string("***");
        char *masked = mask_passwords(s);
        json_t *v = json_string(masked);
        free(masked);
        return v != NULL ? v : json_string("(not UTF-8)");
    }
    case CM_CFG_INT: {
        int64_t v;
        memcpy(&v, f, sizeof(v));
        return json_integer((json_int_t)v);
    }
    case CM_CFG_BOOL: {
        bool b;
        memcpy(&b, f, sizeof(b));
        return json_boolean(b);
    }
    }
    return json_null();
}

json_t *cm_config_json(const cm_config_opt_t *table, size_t n, const void *cfg,
                       const char *const *secret)
{
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(o, table[i].name, value_json(&table[i], cfg, secret));
    return o;
}

/*
 * "credential:NAME" → $CREDENTIALS_DIRECTORY/NAME (systemd's LoadCredential=: the
 * manager copies the root-owned file into a directory only this service's user reads).
 * NAME is one path component, as systemd requires of a credential id.
 */
static int resolve_credential(const char *key, const char *value, char *out, size_t outlen,
                              char *err, size_t errlen)
{
    const char *name = value + strlen(CM_CONFIG_CREDENTIAL_PREFIX);
    const char *dir = getenv("CREDENTIALS_DIRECTORY");
    if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0) {
        snprintf(err, errlen, "%s %s: a credential name is one file name (no '/')", key, value);
        return -1;
    }
    if (dir == NULL || dir[0] != '/') {
        snprintf(err, errlen,
                 "%s %s: $CREDENTIALS_DIRECTORY is not set (start the service with the "
                 "unit's LoadCredential=, or name a file instead)",
                 key, value);
        return -1;
    }
    if ((size_t)snprintf(out, outlen, "%s/%s", dir, name) >= outlen) {
        snprintf(err, errlen, "%s %s: path too long", key, value);
        return -1;
    }
    return 0;
}

char *cm_config_read_secret(const char *key, const char *path, size_t min_len, size_t max_len,
                            size_t *len, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0') {
        snprintf(err, errlen, "%s is not set", key);
        return NULL;
    }
    char cred[PATH_MAX];
    if (strncmp(path, CM_CONFIG_CREDENTIAL_PREFIX, strlen(CM_CONFIG_CREDENTIAL_PREFIX)) == 0) {
        if (resolve_credential(key, path, cred, sizeof(cred), err, errlen) != 0)
            return NULL;
        path = cred;
    }
    /* fstat on the opened file: the mode checked is the mode of what is read */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY); /* blocking-ok: start-up */
    if (fd < 0) {
        snprintf(err, errlen, "%s %s: %s", key, path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: not a regular file", key, path);
        goto fail;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(err, errlen,
                 "%s %s: a secret file must be readable by its owner only (mode %04o; "
                 "chmod 600 it)",
                 key, path, (unsigned)(st.st_mode & 07777));
        goto fail;
    }
    if ((size_t)st.st_size > max_len) {
        snprintf(err, errlen, "%s %s: larger than %zu bytes", key, path, max_len);
        goto fail;
    }
    buf = cm_xmalloc(max_len + 1);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, max_len + 1 - n); /* blocking-ok: start-up */
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "%s %s: %s", key, path, strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max_len) {
            snprintf(err, errlen, "%s %s: larger than %zu bytes", key, path, max_len);
            goto fail;
        }
    }
    close(fd);
    fd = -1;
    while (n &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    buf[n] = '\0';
    if (n < min_len || strlen(buf) != n) {
        snprintf(err, errlen, "%s %s: must hold at least %zu characters (and no NUL byte)", key,
                 path, min_len);
        goto fail;
    }
    if (len)
        *len = n;
    return buf;
fail:
    if (fd >= 0)
        close(fd);
    if (buf) {
        memset(buf, 0, max_len + 1);
        free(buf);
    }
    return NULL;
}
