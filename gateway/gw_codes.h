/*
 * gw_codes — the operators' presale-code endpoints (docs/api.md, "Presale codes"):
 * issuing a batch of codes for a phase, listing batches, exporting a batch as CSV for
 * mailing (bounded pages), revoking codes or whole batches. A code is derived (gw_code.h),
 * so issuing 1,500,000 writes one hash field and exporting computes MACs page by page;
 * codes.lua keeps the batches and the revocations. Each change is logged with the
 * operator, like the room changes (gw_admin).
 *
 * Loop thread of the request (Redis async).
 */
#ifndef GW_CODES_H
#define GW_CODES_H

#include "cm_http.h"
#include "gw_req.h"

#define GW_CODES_ISSUE_MAX  2000000 /* codes per batch */
#define GW_CODES_USES_MAX   255     /* fans one code places (a byte per code) */
#define GW_CODES_PAGE_MAX   5000    /* codes per CSV page: a few ms of MACs on the loop */
#define GW_CODES_REVOKE_MAX 1000    /* codes per revoke call */

/** POST /admin/events/{event}/codes {phase, count, uses?}: a new batch (201). */
void gw_codes_issue(gw_server_t *srv, cm_req_t *req, const char *event);
/** GET /admin/events/{event}/codes: the batches. */
void gw_codes_list(gw_server_t *srv, cm_req_t *req, const char *event);
/** GET /admin/events/{event}/codes/{batch}.csv?from=&limit=: one page of a batch's codes. */
void gw_codes_export(gw_server_t *srv, cm_req_t *req, const char *event, const char *file);
/** POST /admin/events/{event}/codes/revoke {codes: [...]} | {batches: [...]}. */
void gw_codes_revoke(gw_server_t *srv, cm_req_t *req, const char *event);

#endif
