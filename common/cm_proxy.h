/*
 * cm_proxy — the PROXY protocol version 2 header that a load balancer (HAProxy's
 * `send-proxy-v2`) puts in front of a connection to tell the server who the client is,
 * and the list of addresses such headers are accepted from (`proxy_from`).
 *
 * Pure functions: no I/O, no libevent, no allocation except the allow list; unit-tested
 * (tests/unit/common/test_cm_proxy.c) and fuzzed (tests/fuzz/fuzz_proxy.c). cm_http reads
 * the header off the socket and calls these.
 *
 * Strict by design: only version 2, only the binary signature (no v1 text), commands
 * LOCAL and PROXY, TCP over IPv4/IPv6 (UNSPEC and UNIX mean "use the real peer"), a
 * length that covers the address block, TLVs that tile the rest exactly, and a whole
 * header of at most CM_PROXY_MAX_HEADER bytes. Anything else is invalid: the connection
 * is closed, never served with a guessed address.
 */
#ifndef CM_PROXY_H
#define CM_PROXY_H

#include <stddef.h>
#include <stdint.h>

#define CM_PROXY_MAX_HEADER 1024 /* signature + fixed part + addresses + TLVs */
#define CM_PROXY_ADDR_LEN   46   /* INET6_ADDRSTRLEN */

typedef struct {
    int has_addr;                 /* 0: LOCAL / UNSPEC / UNIX: keep the socket's peer */
    char addr[CM_PROXY_ADDR_LEN]; /* the client's address, text form, when has_addr */
    uint16_t port;                /* the client's port, when has_addr */
} cm_proxy_info_t;

/**
 * Parses a PROXY v2 header at the start of buf. Returns its length (> 0) with *out
 * filled, 0 when buf is a valid prefix but incomplete (read more), or -1 when it is not a
 * valid header (or longer than CM_PROXY_MAX_HEADER).
 */
int cm_proxy_parse(const void *buf, size_t len, cm_proxy_info_t *out);

/** 1 when buf (len ≥ 1) starts like a PROXY v2 signature: the bytes that are there match
 *  it. A TLS record (0x16) or an HTTP method never does. */
int cm_proxy_starts_header(const void *buf, size_t len);

/** A list of addresses / CIDR blocks (IPv4 and IPv6). */
typedef struct cm_proxy_allow cm_proxy_allow_t;

/**
 * Parses "addr[/bits][,addr[/bits]…]" (spaces around items allowed), e.g.
 * "127.0.0.1,10.0.0.0/8,::1". NULL with a message in err when it does not parse or is
 * empty. Free with cm_proxy_allow_free.
 */
cm_proxy_allow_t *cm_proxy_allow_parse(const char *list, char *err, size_t errlen);
void cm_proxy_allow_free(cm_proxy_allow_t *a);
/** 1 when sa (struct sockaddr_in / sockaddr_in6; IPv4-mapped IPv6 counts as IPv4) is in
 *  the list. */
int cm_proxy_allowed(const cm_proxy_allow_t *a, const void *sa);

#endif
