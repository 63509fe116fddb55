/*
 * cm_proxy — PROXY protocol v2 parsing and the proxy_from allow list; the contract is in
 * cm_proxy.h. Pure code, any thread. The wire format is the one of HAProxy's
 * doc/proxy-protocol.txt, section 2.2: a 12-byte signature, version/command, family/
 * transport, a 16-bit big-endian length of what follows, the address block, then TLVs.
 */
#include "cm_proxy.h"

#include "cm_mem.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                      0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

#define FIXED 16 /* signature, ver_cmd, fam, len */

int cm_proxy_starts_header(const void *buf, size_t len)
{
    return len > 0 && memcmp(buf, sig, len < sizeof(sig) ? len : sizeof(sig)) == 0;
}

int cm_proxy_parse(const void *buf, size_t len, cm_proxy_info_t *out)
{
    const unsigned char *p = buf;
    size_t body, total, addrlen, off;
    unsigned cmd, fam, proto;

    memset(out, 0, sizeof(*out));
    if (memcmp(p, sig, len < sizeof(sig) ? len : sizeof(sig)) != 0)
        return -1;
    if (len < FIXED)
        return 0;
    if ((p[12] >> 4) != 2)
        return -1;
    cmd = p[12] & 0x0F;
    fam = p[13] >> 4;
    proto = p[13] & 0x0F;
    body = ((size_t)p[14] << 8) | p[15];
    total = FIXED + body;
    if (cmd > 1 || fam > 3 || proto > 2 || total > CM_PROXY_MAX_HEADER)
        return -1;
    switch (fam) {
    case 1:
        addrlen = 12;
        break;
    case 2:
        addrlen = 36;
        break;
    case 3:
        addrlen = 216;
        break;
    default:
        addrlen = 0;
        break;
    }
    if (cmd == 1 && fam != 0 && proto != 1) /* a proxied connection here is TCP */
        return -1;
    if (body < addrlen)
        return -1;
    if (len < total)
        return 0;
    /* TLVs: type, 16-bit length, value — they must tile the rest exactly */
    for (off = FIXED + addrlen; off < total;) {
        size_t vlen;
        if (total - off < 3)
            return -1;
        vlen = ((size_t)p[off + 1] << 8) | p[off + 2];
        if (vlen > total - off - 3)
            return -1;
        off += 3 + vlen;
    }
    if (cmd == 0 || fam == 0 || fam == 3) /* LOCAL (health checks), UNSPEC, UNIX */
        return (int)total;
    out->has_addr = 1;
    if (fam == 1) {
        inet_ntop(AF_INET, p + FIXED, out->addr, sizeof(out->addr));
        out->port = (uint16_t)((p[FIXED + 8] << 8) | p[FIXED + 9]);
    } else {
        inet_ntop(AF_INET6, p + FIXED, out->addr, sizeof(out->addr));
        out->port = (uint16_t)((p[FIXED + 32] << 8) | p[FIXED + 33]);
    }
    return (int)total;
}

/* ---- allow list ---- */

struct net {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    int bits;
};

struct cm_proxy_allow {
    size_t n;
    struct net nets[];
};

static int parse_net(const char *s, struct net *n)
{
    char host[64];
    const char *slash = strchr(s, '/');
    size_t hl = slash != NULL ? (size_t)(slash - s) : strlen(s);
    int max;

    if (hl == 0 || hl >= sizeof(host))
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    if (inet_pton(AF_INET, host, n->addr) == 1) {
        n->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, host, n->addr) == 1) {
        n->family = AF_INET6;
        max = 128;
    } else {
        return -1;
    }
    n->bits = max;
    if (slash != NULL) {
        char *end;
        long b = strtol(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || b < 0 || b > max)
            return -1;
        n->bits = (int)b;
    }
    return 0;
}

cm_proxy_allow_t *cm_proxy_allow_parse(const char *list, char *err, size_t errlen)
{
    size_t count = 1, n = 0;
    const char *p;
    cm_proxy_allow_t *a;

    for (p = list; *p; p++)
        count += *p == ',';
    a = cm_xcalloc(1, sizeof(*a) + count * sizeof(struct net));
    for (p = list;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        char item[80];

        while (len > 0 && (*p == ' ' || *p == '\t'))
            p++, len--;
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len == 0 || len >= sizeof(item)) {
            snprintf(err, errlen, "proxy_from: empty or overlong item in \"%s\"", list);
            goto err;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_net(item, &a->nets[n]) != 0) {
            snprintf(err, errlen, "proxy_from: \"%s\" is not an IP address or CIDR block", item);
            goto err;
        }
        n++;
        if (end == NULL)
            break;
        p = end + 1;
    }
    a->n = n;
    return a;
err:
    free(a);
    return NULL;
}

void cm_proxy_allow_free(cm_proxy_allow_t *a)
{
    free(a);
}

static int prefix_match(const unsigned char *x, const unsigned char *y, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(x, y, (size_t)whole) != 0)
        return 0;
    if (rest == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xFF << (8 - rest));
    return (x[whole] & mask) == (y[whole] & mask);
}

int cm_proxy_allowed(const cm_proxy_allow_t *a, const void *sa_)
{
    const struct sockaddr *sa = sa_;
    unsigned char addr[16];
    int family;

    if (a == NULL || sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET) {
        family = AF_INET;
        memcpy(addr, &((const struct sockaddr_in *)sa_)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa_)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            family = AF_INET;
            memcpy(addr, a6->s6_addr + 12, 4);
        } else {
            family = AF_INET6;
            memcpy(addr, a6->s6_addr, 16);
        }
    } else {
        return 0;
    }
    for (size_t i = 0; i < a->n; i++)
        if (a->nets[i].family == family && prefix_match(addr, a->nets[i].addr, a->nets[i].bits))
            return 1;
    return 0;
}
