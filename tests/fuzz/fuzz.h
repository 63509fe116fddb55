/*
 * Shared by the fuzz targets: CHECK stays active in every build type (assert is compiled
 * out under NDEBUG, which the normal RelWithDebInfo build defines).
 */
#ifndef ONSALE_FUZZ_H
#define ONSALE_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
