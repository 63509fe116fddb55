/* cm_err — the error identities of async completions; see cm_err.h. */
#include "cm_err.h"

const char cm_err_timeout[] = "timeout";
const char cm_err_closed[] = "connection closed";
const char cm_err_busy[] = "queue full";
const char cm_err_protocol[] = "protocol error";
const char cm_err_server[] = "server error";
const char cm_err_shutdown[] = "shutting down";
