/*
 * cm_err — error identities for async completions. A completion reports
 * `const char *err`: NULL on success, else one of these constants, compared by
 * pointer (never by strcmp). The strings are also fit for logs.
 */
#ifndef CM_ERR_H
#define CM_ERR_H

extern const char cm_err_timeout[];  /* the deadline passed before an answer came */
extern const char cm_err_closed[];   /* the connection closed or was never up */
extern const char cm_err_busy[];     /* a bounded queue was full; nothing was sent */
extern const char cm_err_protocol[]; /* the peer answered something we cannot parse */
extern const char cm_err_server[];   /* the peer answered with an error (see the reply) */
extern const char cm_err_shutdown[]; /* the owner is shutting down */

#endif
