/*
 * sim_report — what people read after a night: the end table on stdout, a JSON file
 * with everything, and a self-contained HTML page (inline SVG charts, inline CSS, no
 * script, no external resource: it opens from file:// under a strict CSP).
 * Main thread, after the audit.
 */
#ifndef SIM_REPORT_H
#define SIM_REPORT_H

#include <stdio.h>

#include "sim_run.h"

/** Everything as one JSON document (new reference). */
json_t *sim_report_json(const sim_run_t *r);

/** The end table and the audit verdict. */
void sim_report_print(const sim_run_t *r, FILE *out);

/** Writes <dir>/report.json and <dir>/report.html; -1 with err on I/O failure. */
int sim_report_write(const sim_run_t *r, const char *dir, char *err, size_t errlen);

#endif
