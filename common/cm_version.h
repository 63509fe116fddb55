/*
 * cm_version — what this binary is: the project version (one source of truth, the
 * VERSION in the top CMakeLists.txt's project()) and the commit it was built from, both
 * baked in at build time (cmake/version.cmake writes cm_version.c). Read-only strings,
 * any thread. Every binary answers --version with them and both services export them
 * as onsale_build_info{version,commit} 1.
 */
#ifndef CM_VERSION_H
#define CM_VERSION_H

#include <stdio.h>

/** "0.1.0": the project version. */
extern const char cm_version[];
/** The short git commit of the build, or "unknown" (built outside a git tree). */
extern const char cm_version_commit[];

/** Prints "<prog> <version> (commit <commit>)\n" to out: what --version shows. */
void cm_version_print(FILE *out, const char *prog);

#endif
