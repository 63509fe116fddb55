/*
 * cm_notify — see cm_notify.h. Thin on purpose: sd_notify(3) already speaks the
 * protocol (the socket path, abstract namespace, credentials); this module only decides
 * the texts and remembers whether READY went out.
 */
#include "cm_notify.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "cm_log.h"

static int ready_sent; /* atomic */

static void notify(const char *text)
{
    int rc = sd_notify(0, text);
    if (rc < 0)
        cm_log(CM_LOG_WARN, "notify: sd_notify(%s): error %d", text, -rc);
}

void cm_notify_ready(const char *status)
{
    char text[256];
    snprintf(text, sizeof(text), "READY=1\nSTATUS=%s", status ? status : "ready");
    notify(text);
    __atomic_store_n(&ready_sent, 1, __ATOMIC_RELEASE);
}

bool cm_notify_ready_sent(void)
{
    return __atomic_load_n(&ready_sent, __ATOMIC_ACQUIRE) != 0;
}

void cm_notify_reloading(void)
{
    notify("RELOADING=1\nSTATUS=reloading keys and certificates");
}

void cm_notify_reloaded(void)
{
    if (cm_notify_ready_sent())
        notify("READY=1\nSTATUS=ready (reloaded)");
}

void cm_notify_stopping(void)
{
    notify("STOPPING=1\nSTATUS=draining");
}

void cm_notify_watchdog(void)
{
    notify("WATCHDOG=1");
}

uint64_t cm_notify_watchdog_usec(void)
{
    uint64_t usec = 0;
    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}
