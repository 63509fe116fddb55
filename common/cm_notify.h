/*
 * cm_notify — the service manager's notification protocol (systemd Type=notify): READY
 * once the process can serve, WATCHDOG while its loops run, RELOADING/READY around a
 * SIGHUP round, STOPPING when the drain starts. The only module that includes libsystemd.
 *
 * Without $NOTIFY_SOCKET (a shell, a test, deploy/onsale) every call does nothing. Each
 * call is one datagram on a local socket, never blocks for long, and may be made from
 * any thread (cm_server's main thread, cm_reload's thread); nothing here runs on a
 * worker's event loop.
 */
#ifndef CM_NOTIFY_H
#define CM_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/** READY=1 with a STATUS= line; from then on cm_notify_ready_sent() is true. */
void cm_notify_ready(const char *status);
/** True once cm_notify_ready ran (a reload before start-up finished sends no READY). */
bool cm_notify_ready_sent(void);
/** RELOADING=1: a SIGHUP round starts. */
void cm_notify_reloading(void);
/** READY=1 after a reload round — only when the process had already said READY. */
void cm_notify_reloaded(void);
/** STOPPING=1: the drain started. */
void cm_notify_stopping(void);
/** WATCHDOG=1: every loop checked in within the interval. */
void cm_notify_watchdog(void);
/**
 * The watchdog interval the manager asked for ($WATCHDOG_USEC, for this pid), in
 * microseconds; 0 when there is none.
 */
uint64_t cm_notify_watchdog_usec(void);

#endif
