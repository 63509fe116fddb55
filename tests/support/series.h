/*
 * series.h — for the unit tests that pin a service's series: the series of a rendered
 * registry (cm_metrics_render) as "name{labels}" lines, without values, histogram buckets
 * and sums (a histogram shows as its _count), sorted. Header only: the tests that use it
 * link no support library.
 */
#ifndef TEST_SERIES_H
#define TEST_SERIES_H

#include <stdlib.h>
#include <string.h>

static inline int series_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Cuts text (modified in place) into at most max lines in out; returns how many, or
 * max + 1 when there are more. */
static inline size_t series_of(char *text, char **out, size_t max)
{
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strrchr(line, ' ');
        if (line[0] == '#' || strstr(line, "_bucket{") || strstr(line, "_sum") || sp == NULL)
            continue;
        if (n == max)
            return max + 1;
        *sp = '\0';
        out[n++] = line;
    }
    qsort(out, n, sizeof(out[0]), series_cmp);
    return n;
}

#endif
