/*
 * gw_lang — the languages of the queue page: the catalogue of everything the page itself
 * says (built in for English, German, French and Spanish; an operator adds or rewords a
 * language with a JSON file per language, the gateway's page_languages_dir), and the choice
 * of one by the request's Accept-Language.
 *
 * A message is plain text, HTML-escaped where it is written (gw_page.c); it may name
 * values in braces ("You are number {position} in line."), filled by the page and its
 * script. A language that lacks a message shows the English one.
 *
 * The Accept-Language parser is pure (no allocation, no libevent), unit-tested and fuzzed
 * (tests/fuzz/fuzz_lang.c). Loading a directory reads files: start-up and the reload
 * thread only. A gw_langs_t, once built, is read-only and shared by every worker.
 */
#ifndef GW_LANG_H
#define GW_LANG_H

#include <stdbool.h>
#include <stddef.h>

/* The catalogue's keys: X(ENUM, key). The key is the JSON name in a language file and
 * the page template's {{t_<key>}}. */
#define GW_MSG_LIST(X)                                                                             \
    X(SKIP, skip)                                                                                  \
    X(WAITING_ROOM, waiting_room)                                                                  \
    X(PHASE_NEXT, phase_next)                                                                      \
    X(CODE_LABEL, code_label)                                                                      \
    X(CODE_SUBMIT, code_submit)                                                                    \
    X(JOINING, joining)                                                                            \
    X(KEEP_OPEN, keep_open)                                                                        \
    X(POW_LABEL, pow_label)                                                                        \
    X(JOIN_BUTTON, join_button)                                                                    \
    X(STAT_POSITION, stat_position)                                                                \
    X(STAT_IN_LINE, stat_in_line)                                                                  \
    X(STAT_WAIT, stat_wait)                                                                        \
    X(PROGRESS_LABEL, progress_label)                                                              \
    X(PROGRESS_VALUE, progress_value)                                                              \
    X(PAUSED, paused)                                                                              \
    X(QUEUED_NOTE, queued_note)                                                                    \
    X(STATUS, status)                                                                              \
    X(ETA_UNKNOWN, eta_unknown)                                                                    \
    X(ETA_UNDER_MINUTE, eta_under_minute)                                                          \
    X(ETA_MINUTE, eta_minute)                                                                      \
    X(ETA_MINUTES, eta_minutes)                                                                    \
    X(ETA_HOURS, eta_hours)                                                                        \
    X(ETA_HOURS_MINUTES, eta_hours_minutes)                                                        \
    X(PREQUEUE_LEAD, prequeue_lead)                                                                \
    X(OPENS_LABEL, opens_label)                                                                    \
    X(OPENS_SOON, opens_soon)                                                                      \
    X(PREQUEUE_ONE, prequeue_one)                                                                  \
    X(PREQUEUE_MANY, prequeue_many)                                                                \
    X(OPENS_IN, opens_in)                                                                          \
    X(OPENING, opening)                                                                            \
    X(COUNTDOWN_DAY, countdown_day)                                                                \
    X(COUNTDOWN_DAYS, countdown_days)                                                              \
    X(COUNTDOWN_ARIA, countdown_aria)                                                              \
    X(PREQUEUE_NOTE, prequeue_note)                                                                \
    X(ADMITTED_LEAD, admitted_lead)                                                                \
    X(CONTINUE, continue)                                                                          \
    X(ADMITTED_NOTE, admitted_note)                                                                \
    X(SOLD_OUT_LEAD, sold_out_lead)                                                                \
    X(SOLD_OUT_NOTE, sold_out_note)                                                                \
    X(RETURNS_LEAD, returns_lead)                                                                  \
    X(RETURNS_NOTE, returns_note)                                                                  \
    X(LEFT_ONE, left_one)                                                                          \
    X(LEFT_MANY, left_many)                                                                        \
    X(CLOSED_LEAD, closed_lead)                                                                    \
    X(CLOSED_NOTE, closed_note)                                                                    \
    X(NET, net)                                                                                    \
    X(REFRESH_NOTE, refresh_note)                                                                  \
    X(REFRESH_SECOND, refresh_second)                                                              \
    X(REFRESH_SECONDS, refresh_seconds)                                                            \
    X(FOOTER, footer)                                                                              \
    X(TITLE_NEW, title_new)                                                                        \
    X(TITLE_QUEUED, title_queued)                                                                  \
    X(TITLE_PREQUEUE, title_prequeue)                                                              \
    X(TITLE_ADMITTED, title_admitted)                                                              \
    X(TITLE_SOLD_OUT, title_sold_out)                                                              \
    X(TITLE_CLOSED, title_closed)                                                                  \
    X(TITLE_ERROR, title_error)                                                                    \
    X(TITLE_UNKNOWN, title_unknown)                                                                \
    X(TITLE_EXPIRED, title_expired)                                                                \
    X(TITLE_WAIT, title_wait)                                                                      \
    X(TITLE_JAVASCRIPT, title_javascript)                                                          \
    X(ERROR_UNKNOWN, error_unknown)                                                                \
    X(ERROR_EXPIRED, error_expired)                                                                \
    X(ERROR_UNAVAILABLE, error_unavailable)                                                        \
    X(ERROR_BUSY, error_busy)                                                                      \
    X(ERROR_JAVASCRIPT, error_javascript)                                                          \
    X(ERROR_NOT_OPEN, error_not_open)                                                              \
    X(ERROR_WEBCRYPTO, error_webcrypto)                                                            \
    X(ERROR_OTHER_BROWSER, error_other_browser)                                                    \
    X(ERROR_NO_WORKER, error_no_worker)                                                            \
    X(TITLE_INVITE, title_invite)                                                                  \
    X(ERROR_INVITE, error_invite)                                                                  \
    X(ERROR_INVITE_INVALID, error_invite_invalid)                                                  \
    X(CODE_CHECK, code_check)                                                                      \
    X(CODE_MALFORMED, code_malformed)                                                              \
    X(CODE_UNKNOWN, code_unknown)                                                                  \
    X(CODE_REVOKED, code_revoked)                                                                  \
    X(CODE_USED_UP, code_used_up)                                                                  \
    X(CODE_WRONG_PHASE, code_wrong_phase)                                                          \
    X(CODE_TOO_MANY, code_too_many)                                                                \
    X(THOUSANDS_SEP, thousands_sep)

#define GW_MSG_ENUM(e, k) GW_MSG_##e,
typedef enum gw_msg { GW_MSG_LIST(GW_MSG_ENUM) GW_MSG_COUNT } gw_msg_t;
#undef GW_MSG_ENUM

#define GW_LANG_TAG_MAX    35   /* bytes of a language tag ("de", "pt-br", "sr-latn-rs") */
#define GW_LANG_MAX        32   /* languages a gateway serves, built-ins included */
#define GW_LANG_MSG_MAX    1000 /* bytes of one message of a language file */
#define GW_LANG_FILE_MAX   65536
#define GW_LANG_HEADER_MAX 4096 /* bytes of Accept-Language read; the rest is ignored */
#define GW_LANG_RANGES_MAX 32   /* language ranges of one header considered */

typedef struct gw_lang {
    char tag[GW_LANG_TAG_MAX + 1]; /* lower case, as <html lang> shows it */
    const char *const *msg;        /* GW_MSG_COUNT messages; a NULL one is English's */
    bool owned;                    /* msg and its strings are a file's heap copies */
} gw_lang_t;

/** The set of languages a gateway serves: English first (the fallback), then German,
 *  French, Spanish, then the operator's. Read-only once built. */
typedef struct gw_langs gw_langs_t;

/** The catalogue key of m ("status"). Static. */
const char *gw_lang_key(gw_msg_t m);

/** The message m of lang, never NULL. */
const char *gw_lang_msg(const gw_lang_t *lang, gw_msg_t m);

/**
 * The index in tags[0..n) of the language an Accept-Language value asks for, or 0 (the
 * first tag: the fallback) when it names none of them, is NULL, empty or malformed.
 * Ranges are taken by their q-value (RFC 9110 12.5.4: "q=" 0 to 1, at most three
 * decimals; an entry with a malformed range or weight is skipped, q=0 refuses), the
 * earlier of equal weights first; a range matches a tag equal to it, a tag that extends
 * it ("de" → "de-ch") or one it extends ("de-ch" → "de"), case-insensitively; "*"
 * matches the first tag. At most GW_LANG_HEADER_MAX bytes and GW_LANG_RANGES_MAX ranges
 * are read. Pure, any thread.
 */
size_t gw_lang_pick(const char *accept_language, const char *const *tags, size_t n);

/** True when tag is a language tag a file may be named by: 2–3 letters, then up to
 *  three subtags of 1–8 letters or digits, lower case, '-' between. */
bool gw_lang_tag_valid(const char *tag);

/**
 * The built-in languages, plus one per `<tag>.json` in dir when dir is not NULL or "":
 * a JSON object of catalogue keys to strings (an unknown key, a non-string, a string
 * longer than GW_LANG_MSG_MAX or holding a control character is an error). A file named
 * after a built-in language rewords it; any other adds a language whose missing messages
 * are its primary language's ("de-at" → "de") or English. Other files are ignored.
 * Reads files: start-up, --check-config and the reload thread. New set, or NULL with a
 * message in err.
 */
gw_langs_t *gw_langs_load(const char *dir, char *err, size_t errlen);

/** The built-in languages alone, shared and static (never freed). */
const gw_langs_t *gw_langs_builtin(void);

/** Frees a set from gw_langs_load (NULL and the built-in set are fine). */
void gw_langs_free(gw_langs_t *l);

/** The number of languages of l and the i-th (0 = English). */
size_t gw_langs_count(const gw_langs_t *l);
const gw_lang_t *gw_langs_at(const gw_langs_t *l, size_t i);

/** The language of l an Accept-Language value asks for (gw_lang_pick); l NULL: the
 *  built-ins. Never NULL. */
const gw_lang_t *gw_langs_choose(const gw_langs_t *l, const char *accept_language);

#endif
