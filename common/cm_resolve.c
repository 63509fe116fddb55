/*
 * cm_resolve — see cm_resolve.h.
 *
 * Library rules relied on (libevent 2.1): evdns_getaddrinfo answers numeric hosts and
 * /etc/hosts entries inside the call (then returns NULL), other names later from the
 * loop; evdns_getaddrinfo_cancel does not call back inside the call either: the
 * callback comes later with EVUTIL_EAI_CANCEL, even when the evdns base was freed in
 * between (the request owns what it needs). So a request record lives until evdns
 * calls back, whatever the caller did, and every answer reaches the caller through an
 * event of its own made active: always from the loop, never from inside a call of ours.
 */
#include "cm_resolve.h"

#include "cm_log.h"
#include "cm_mem.h"
#include "cm_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

struct cm_resolve {
    struct event_base *base;
    struct evdns_base *dns;
};

struct cm_resolve_req {
    struct evdns_getaddrinfo_request *dreq; /* NULL once evdns called back */
    struct event *done;                     /* made active to deliver the answer */
    int cancelled;
    cm_resolve_cb cb;
    void *arg;
    const char *err;
    int n;
    cm_resolve_addr_t addrs[CM_RESOLVE_MAX];
};

bool cm_resolve_needed(const char *host)
{
    struct sockaddr_storage ss;
    unsigned len;

    if (host == NULL || host[0] == '\0' || host[0] == '/')
        return false;
    return cm_parse_ip_sockaddr(host, 0, &ss, &len) != 0;
}

cm_resolve_t *cm_resolve_new(struct event_base *base)
{
    const char *test_ns = getenv("ONSALE_TEST_NAMESERVER");
    cm_resolve_t *rs = cm_xcalloc(1, sizeof(*rs));

    rs->base = base;
    if (test_ns != NULL && test_ns[0] != '\0') {
        rs->dns = evdns_base_new(base, 0);
        if (rs->dns != NULL && (evdns_base_nameserver_ip_add(rs->dns, test_ns) != 0 ||
                                evdns_base_load_hosts(rs->dns, NULL) != 0)) {
            evdns_base_free(rs->dns, 0);
            rs->dns = NULL;
        }
    } else {
        /* resolv.conf, and /etc/hosts with it (DNS_OPTION_HOSTSFILE) */
        rs->dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
    }
    if (rs->dns == NULL) {
        cm_log(CM_LOG_ERROR, "dns: cannot set up a resolver (resolv.conf%s)",
               test_ns ? ", ONSALE_TEST_NAMESERVER" : "");
        free(rs);
        return NULL;
    }
    return rs;
}

void cm_resolve_free(cm_resolve_t *rs)
{
    if (rs == NULL)
        return;
    evdns_base_free(rs->dns, 0);
    free(rs);
}

static void req_free(cm_resolve_req_t *req)
{
    event_free(req->done);
    free(req);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    cm_resolve_req_t *req = arg;
    cm_resolve_cb cb = req->cb;

    (void)fd;
    (void)what;
    /* the record goes before cb runs, so cb may start the next lookup or free its owner */
    cm_resolve_req_t copy = *req;
    req_free(req);
    cb(copy.err, copy.n > 0 ? copy.addrs : NULL, copy.n, copy.arg);
}

static void keep(cm_resolve_req_t *req, const struct evutil_addrinfo *res)
{
    for (const struct evutil_addrinfo *a = res; a != NULL && req->n < CM_RESOLVE_MAX;
         a = a->ai_next) {
        if ((a->ai_family != AF_INET && a->ai_family != AF_INET6) ||
            a->ai_addrlen > sizeof(req->addrs[0].ss))
            continue;
        memcpy(&req->addrs[req->n].ss, a->ai_addr, a->ai_addrlen);
        req->addrs[req->n].len = (unsigned)a->ai_addrlen;
        req->n++;
    }
}

static void on_dns(int result, struct evutil_addrinfo *res, void *arg)
{
    cm_resolve_req_t *req = arg;

    req->dreq = NULL;
    if (req->cancelled) {
        if (res != NULL)
            evutil_freeaddrinfo(res);
        req_free(req);
        return;
    }
    if (result == 0)
        keep(req, res);
    if (res != NULL)
        evutil_freeaddrinfo(res);
    if (result != 0)
        req->err = evutil_gai_strerror(result);
    else if (req->n == 0)
        req->err = "no IPv4 or IPv6 address";
    event_active(req->done, EV_TIMEOUT, 1);
}

cm_resolve_req_t *cm_resolve_start(cm_resolve_t *rs, const char *name, int port, cm_resolve_cb cb,
                                   void *arg)
{
    cm_resolve_req_t *req = cm_xcalloc(1, sizeof(*req));
    struct evutil_addrinfo hints;
    char service[16];

    req->cb = cb;
    req->arg = arg;
    req->done = evtimer_new(rs->base, on_done, req);
    if (req->done == NULL) {
        cm_log(CM_LOG_ERROR, "dns: cannot create an event");
        abort();
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
    snprintf(service, sizeof(service), "%d", port);
    /* on_dns may run inside this call (hosts file): it only makes req->done active */
    req->dreq = evdns_getaddrinfo(rs->dns, name, service, &hints, on_dns, req);
    return req;
}

void cm_resolve_cancel(cm_resolve_req_t *req)
{
    if (req == NULL)
        return;
    if (req->dreq != NULL) { /* evdns still owes its callback: on_dns frees req */
        req->cancelled = 1;
        evdns_getaddrinfo_cancel(req->dreq);
        return;
    }
    req_free(req); /* answered, not delivered yet: event_free also deactivates done */
}
