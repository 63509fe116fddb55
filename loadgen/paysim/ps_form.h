/*
 * ps_form — application/x-www-form-urlencoded bodies and queries the way Stripe reads
 * them: `a=1` a string, `a[b]=1` a member of object a, `a[]=1` an element of array a
 * (nesting as deep as PS_FORM_DEPTH). Pure; the simulator's request parser.
 */
#ifndef PS_FORM_H
#define PS_FORM_H

#include <jansson.h>
#include <stddef.h>

#define PS_FORM_DEPTH 4

/**
 * Parses text (len bytes, need not be NUL-terminated) into a new JSON object whose leaves
 * are strings. NULL on a malformed body (a bad %-escape, an unbalanced bracket, a key that
 * is an object in one pair and a string in another, too deep); *bad then names the key.
 */
json_t *ps_form_parse(const char *text, size_t len, char *bad, size_t badlen);

#endif
