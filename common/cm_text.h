/*
 * cm_text — text written by hand into a bounded buffer, for the hot answers that are not
 * worth a JSON tree or a printf parse (the queued and admitted answers, a new hold's 201,
 * cookies, Redis arguments). A cursor remembers that something did not fit, so a writer
 * makes its calls in a row and asks once, at the end (cm_text_done), whether all of it fit.
 * Nothing is written past the buffer; a NUL always fits after what was written.
 *
 * Pure, any thread.
 */
#ifndef CM_TEXT_H
#define CM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cm_text {
    char *p, *end; /* end: the buffer's last byte, kept for the NUL */
    bool over;     /* something did not fit: every later call does nothing */
} cm_text_t;

/** A cursor at the start of out (size bytes; 0 is allowed and fits nothing). */
cm_text_t cm_text_at(char *out, size_t size);

/** The n bytes of s. */
void cm_text_put(cm_text_t *t, const char *s, size_t n);

/** A string literal, its length known at compile time. */
#define CM_TEXT_LIT(t, lit) cm_text_put((t), (lit), sizeof(lit) - 1)

/** s up to its NUL. */
void cm_text_str(cm_text_t *t, const char *s);

/** v in decimal (INT64_MIN included). */
void cm_text_i64(cm_text_t *t, int64_t v);

/** s as a JSON string, quoted and escaped (cm_http_json_string). */
void cm_text_json(cm_text_t *t, const char *s);

/** Ends the text written from out with a NUL: its length, or 0 when some of it did not fit. */
size_t cm_text_done(cm_text_t *t, char *out);

/** The worst size of s as a JSON string: 6 bytes per byte, the quotes and a NUL. */
#define CM_TEXT_JSON_WORST(len) (6 * (len) + 3)

#endif
