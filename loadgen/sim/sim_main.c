/*
 * onsale-sim — the on-sale simulator (thin main: options, then crowd → audit → report).
 * Exit status: 0 the audit is clean, 1 it found violations (each printed by name),
 * 2 the night could not be run (bad options, scenario or stack).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cm_mem.h"
#include "cm_tls.h"
#include "cm_version.h"
#include "sim_audit.h"
#include "sim_crowd.h"
#include "sim_report.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: onsale-sim [options] <scenario.json>\n"
               "\n"
               "Replays an on-sale night against a running stack (see deploy/onsale sim), audits\n"
               "it from Postgres, Redis, the payment ledger and its own record, and writes a\n"
               "report. Every option defaults to what `deploy/onsale env` exports.\n"
               "\n"
               "  --gateway URL         fans' gateway (repeat for several gateways)\n"
               "                        [$ONSALE_GATEWAY_URL; more in $ONSALE_SIM_GATEWAYS,\n"
               "                        comma-separated]\n"
               "  --gateway-admin URL   gateway admin API [$ONSALE_GATEWAY_ADMIN_URL, else the\n"
               "                        first gateway]\n"
               "  --reserve URL         [$ONSALE_RESERVE_URL]\n"
               "  --reserve-admin URL   [$ONSALE_RESERVE_ADMIN_URL, else --reserve]\n"
               "  --paysim URL          payment simulator (ledger, settings) [$ONSALE_PAYSIM_URL]\n"
               "  --ca FILE             CA of the services' certificates [$ONSALE_CA]\n"
               "  --admin-token-file F  the reserve's admin token [$ONSALE_ADMIN_TOKEN_FILE]\n"
               "  --gateway-admin-token-file F  [$ONSALE_GATEWAY_ADMIN_TOKEN_FILE, else\n"
               "                        --admin-token-file]\n"
               "  --pg CONNINFO         [$ONSALE_PG_CONNINFO]\n"
               "  --redis HOST:PORT     [127.0.0.1:$ONSALE_REDIS_PORT]\n"
               "  --redis-user NAME     [$ONSALE_REDIS_USER]\n"
               "  --redis-password-file F [$ONSALE_REDIS_PASSWORD_FILE]\n"
               "  (Postgres' password: $PGPASSWORD, else the file $ONSALE_PG_PASSWORD_FILE)\n"
               "  --service NAME=PIDFILE  follow a process's RSS and CPU (repeatable) [gateway,\n"
               "                        reserve, paysim, redis from $ONSALE_STATE/run]\n"
               "  --event ID            event id to create [<scenario name>-<random>]\n"
               "  --scale X             multiply the scenario's fans by X (0 < X <= 10)\n"
               "  --out DIR             report.json and report.html go here [sim-out/<event>]\n"
               "  --no-progress         no live progress line (default: on when stderr is a tty)\n"
               "  -h, --help\n"
               "  --version\n");
}

static char *read_secret(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return cm_xstrdup(buf);
}

static const char *env(const char *k)
{
    const char *v = getenv(k);
    return v && *v ? v : NULL;
}

static int mkdirs(const char *dir)
{
    char *p = cm_xstrdup(dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                free(p);
                return -1;
            }
            *s = '/';
        }
    int rc = mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

static void add_service(sim_opts_t *o, const char *name, const char *pidfile)
{
    if (o->nservices >= SIM_MAX_SERVICES)
        return;
    snprintf(o->services[o->nservices].name, sizeof(o->services[0].name), "%s", name);
    o->services[o->nservices].pidfile = pidfile;
    o->nservices++;
}

int main(int argc, char **argv)
{
    sim_opts_t o = {0};
    const char *token_file = env("ONSALE_ADMIN_TOKEN_FILE");
    const char *gw_token_file = env("ONSALE_GATEWAY_ADMIN_TOKEN_FILE");
    const char *redis = NULL, *pw_file = env("ONSALE_REDIS_PASSWORD_FILE");
    bool no_progress = false;
    static const struct option longopts[] = {
        {"gateway", required_argument, NULL, 'g'},
        {"gateway-admin", required_argument, NULL, 'G'},
        {"reserve", required_argument, NULL, 'r'},
        {"reserve-admin", required_argument, NULL, 'R'},
        {"paysim", required_argument, NULL, 'p'},
        {"ca", required_argument, NULL, 'c'},
        {"admin-token-file", required_argument, NULL, 't'},
        {"pg", required_argument, NULL, 'P'},
        {"redis", required_argument, NULL, 'x'},
        {"redis-user", required_argument, NULL, 'u'},
        {"redis-password-file", required_argument, NULL, 'w'},
        {"service", required_argument, NULL, 's'},
        {"event", required_argument, NULL, 'e'},
        {"scale", required_argument, NULL, 'S'},
        {"out", required_argument, NULL, 'o'},
        {"no-progress", no_argument, NULL, 'n'},
        {"gateway-admin-token-file", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'g':
            if (o.ngateways < SIM_MAX_GATEWAYS)
                o.gateway_urls[o.ngateways++] = optarg;
            break;
        case 'G':
            o.gateway_admin_url = optarg;
            break;
        case 'T':
            gw_token_file = optarg;
            break;
        case 'r':
            o.reserve_url = optarg;
            break;
        case 'R':
            o.reserve_admin_url = optarg;
            break;
        case 'p':
            o.paysim_url = optarg;
            break;
        case 'c':
            o.ca = optarg;
            break;
        case 't':
            token_file = optarg;
            break;
        case 'P':
            o.pg_conninfo = optarg;
            break;
        case 'x':
            redis = optarg;
            break;
        case 'u':
            o.redis_user = optarg;
            break;
        case 'w':
            pw_file = optarg;
            break;
        case 's': {
            char *eq = strchr(optarg, '=');
            if (eq == NULL) {
                fprintf(stderr, "onsale-sim: --service wants NAME=PIDFILE\n");
                return 2;
            }
            *eq = '\0';
            add_service(&o, optarg, eq + 1);
            break;
        }
        case 'e':
            o.event = optarg;
            break;
        case 'S':
            o.scale = atof(optarg);
            if (!(o.scale > 0 && o.scale <= 10)) {
                fprintf(stderr, "onsale-sim: --scale wants a number in (0, 10]\n");
                return 2;
            }
            break;
        case 'o':
            o.out_dir = optarg;
            break;
        case 'n':
            no_progress = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            cm_version_print(stdout, "onsale-sim");
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    char err[512] = "";
    sim_scenario_t *sc = sim_scenario_load(argv[optind], err, sizeof(err));
    if (sc == NULL) {
        fprintf(stderr, "onsale-sim: scenario: %s\n", err);
        return 2;
    }
    /* Defaults from `deploy/onsale env`. */
    char *extra = NULL;
    if (o.ngateways == 0 && env("ONSALE_GATEWAY_URL"))
        o.gateway_urls[o.ngateways++] = env("ONSALE_GATEWAY_URL");
    if (env("ONSALE_SIM_GATEWAYS")) {
        extra = cm_xstrdup(env("ONSALE_SIM_GATEWAYS"));
        for (char *s = strtok(extra, ","); s && o.ngateways < SIM_MAX_GATEWAYS;
             s = strtok(NULL, ","))
            o.gateway_urls[o.ngateways++] = s;
    }
    if (o.gateway_admin_url == NULL)
        o.gateway_admin_url = env("ONSALE_GATEWAY_ADMIN_URL");
    if (o.gateway_admin_url == NULL && o.ngateways)
        o.gateway_admin_url = o.gateway_urls[0];
    if (o.reserve_url == NULL)
        o.reserve_url = env("ONSALE_RESERVE_URL");
    if (o.reserve_admin_url == NULL)
        o.reserve_admin_url = env("ONSALE_RESERVE_ADMIN_URL");
    if (o.reserve_admin_url == NULL)
        o.reserve_admin_url = o.reserve_url;
    if (o.paysim_url == NULL)
        o.paysim_url = env("ONSALE_PAYSIM_URL");
    if (o.ca == NULL)
        o.ca = env("ONSALE_CA");
    if (o.pg_conninfo == NULL)
        o.pg_conninfo = env("ONSALE_PG_CONNINFO");
    if (o.redis_user == NULL)
        o.redis_user = env("ONSALE_REDIS_USER");
    o.redis_host = "127.0.0.1";
    o.redis_port = env("ONSALE_REDIS_PORT") ? atoi(env("ONSALE_REDIS_PORT")) : 6391;
    if (redis) {
        char *colon = strrchr(redis, ':');
        if (colon == NULL) {
            fprintf(stderr, "onsale-sim: --redis wants HOST:PORT\n");
            return 2;
        }
        *colon = '\0';
        o.redis_host = redis;
        o.redis_port = atoi(colon + 1);
    }
    if (o.ngateways == 0 || o.reserve_url == NULL || o.pg_conninfo == NULL) {
        fprintf(stderr, "onsale-sim: need --gateway, --reserve and --pg (or the variables "
                        "of `deploy/onsale env`)\n");
        return 2;
    }
    if (token_file == NULL || (o.admin_token = read_secret(token_file)) == NULL) {
        fprintf(stderr, "onsale-sim: cannot read the admin token (%s)\n",
                token_file ? token_file : "set --admin-token-file");
        return 2;
    }
    if (gw_token_file && (o.gateway_admin_token = read_secret(gw_token_file)) == NULL) {
        fprintf(stderr, "onsale-sim: cannot read the gateway admin token (%s)\n", gw_token_file);
        return 2;
    }
    if (pw_file && (o.redis_password = read_secret(pw_file)) == NULL) {
        fprintf(stderr, "onsale-sim: cannot read %s\n", pw_file);
        return 2;
    }
    /* Postgres' password, from the file `deploy/onsale env` names, goes into our own
     * conninfo only: children (operator commands running deploy/onsale) must not inherit
     * it as PGPASSWORD. $PGPASSWORD or a password inside --pg wins. */
    char *pg_conninfo = NULL;
    const char *pg_pw_file = env("ONSALE_PG_PASSWORD_FILE");
    if (pg_pw_file && getenv("PGPASSWORD") == NULL && strstr(o.pg_conninfo, "password") == NULL) {
        char *pw = read_secret(pg_pw_file);
        if (pw == NULL) {
            fprintf(stderr, "onsale-sim: cannot read %s\n", pg_pw_file);
            return 2;
        }
        size_t n = strlen(pw), k = 0;
        char *q = cm_xmalloc(2 * n + 1);
        for (size_t i = 0; i < n; i++) {
            if (pw[i] == '\'' || pw[i] == '\\')
                q[k++] = '\\';
            q[k++] = pw[i];
        }
        q[k] = '\0';
        pg_conninfo = cm_xasprintf("%s password='%s'", o.pg_conninfo, q);
        o.pg_conninfo = pg_conninfo;
        free(q);
        free(pw);
    }
    o.state_dir = env("ONSALE_STATE");
    /* The stack's processes, in either topology: those with a pid file in the state dir
     * (single: gateway, reserve, redis; cluster: gateway-N, reserve-N, redis-N, haproxy). */
    static const char *const names[] = {"gateway",   "gateway-1", "gateway-2", "reserve",
                                        "reserve-1", "reserve-2", "paysim",    "redis",
                                        "redis-1",   "redis-2",   "redis-3",   "haproxy"};
    enum { NNAMES = sizeof(names) / sizeof(names[0]) };
    _Static_assert(NNAMES <= SIM_MAX_SERVICES, "SIM_MAX_SERVICES holds every stack process");
    char *pidfiles[NNAMES] = {NULL};
    for (int i = 0; o.nservices == 0 && o.state_dir && i < NNAMES; i++) {
        pidfiles[i] = cm_xasprintf("%s/run/%s.pid", o.state_dir, names[i]);
        if (access(pidfiles[i], F_OK) == 0)
            continue;
        free(pidfiles[i]);
        pidfiles[i] = NULL;
    }
    for (int i = 0; i < NNAMES; i++)
        if (pidfiles[i])
            add_service(&o, names[i], pidfiles[i]);
    o.progress = !no_progress && isatty(2);

    sim_run_t r = {0};
    r.sc = sc;
    r.o = &o;
    r.rate_changed_ns = -1;
    r.nfans = o.scale > 0 ? (int)(sc->fans * o.scale) : sc->fans;
    if (r.nfans < 1)
        r.nfans = 1;
    if (o.event) {
        snprintf(r.event, sizeof(r.event), "%s", o.event);
    } else {
        unsigned char rb[4];
        cm_tls_random(rb, sizeof(rb));
        snprintf(r.event, sizeof(r.event), "%s-%02x%02x%02x%02x", sc->name, rb[0], rb[1], rb[2],
                 rb[3]);
    }
    /* Each connection is a descriptor; 100,000 fans need no more than the pools. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    char *out = o.out_dir ? cm_xstrdup(o.out_dir) : cm_xasprintf("sim-out/%s", r.event);
    int rc = 2;
    if (mkdirs(out) != 0) {
        fprintf(stderr, "onsale-sim: cannot create %s: %s\n", out, strerror(errno));
        goto done;
    }
    fprintf(stderr, "onsale-sim: %s: %d fans, event %s, %d gateway(s)\n", sc->name, r.nfans,
            r.event, o.ngateways);
    if (sim_crowd_run(&r, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-sim: %s\n", err);
        goto done;
    }
    fprintf(stderr, "onsale-sim: auditing (waiting up to %.0f s for checkouts to settle)\n",
            sc->settle_s);
    sim_audit_run(&r);
    sim_report_print(&r, stdout);
    if (sim_report_write(&r, out, err, sizeof(err)) != 0) {
        fprintf(stderr, "onsale-sim: %s\n", err);
        goto done;
    }
    printf("report: %s/report.html  %s/report.json\n", out, out);
    rc = r.nviol ? 1 : 0;
done:
    for (int i = 0; i < r.nviol; i++) {
        free(r.viol[i].check);
        free(r.viol[i].detail);
    }
    free(r.viol);
    for (int i = 0; r.fans && i < r.nfans; i++)
        free(r.fans[i].ticket);
    free(r.fans);
    sim_series_t *ss[] = {&r.s_queue,  &r.s_admitted, &r.s_holds, &r.s_confirms,
                          &r.s_errors, &r.s_requests, &r.s_taken, &r.s_watermark};
    for (size_t i = 0; i < sizeof(ss) / sizeof(ss[0]); i++)
        sim_series_free(ss[i]);
    for (int i = 0; i < SIM_MAX_SERVICES; i++) {
        sim_series_free(&r.svc[i].cpu);
        sim_series_free(&r.svc[i].rss);
    }
    json_decref(r.timeline);
    json_decref(r.ledger);
    json_decref(r.figures);
    for (int i = 0; i < NNAMES; i++)
        free(pidfiles[i]);
    free(out);
    free(extra);
    free(pg_conninfo);
    free(o.admin_token);
    free(o.gateway_admin_token);
    free(o.redis_password);
    sim_scenario_free(sc);
    return rc;
}
