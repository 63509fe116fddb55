/*
 * cm_version_print — the --version line (the strings come from the generated
 * cm_version.c; see cm_version.h). Any thread.
 */
#include "cm_version.h"

void cm_version_print(FILE *out, const char *prog)
{
    fprintf(out, "%s %s (commit %s)\n", prog, cm_version, cm_version_commit);
}
