/*
 * svc — private Redis and Postgres servers for tests; the contract is in svc.h.
 *
 * Test-only code on the test's main thread, blocking by design: it forks and execs the
 * real servers, polls them until they answer, and kills exactly the pids it started.
 * Three layers make sure nothing outlives the test: the stop functions, an atexit
 * handler over a registry of live services, and PR_SET_PDEATHSIG in each child (for a
 * test that crashes or is killed by ctest's timeout). Servers are exec'd directly — not
 * through pg_ctl or runuser — so the pid we hold is the server's own; when we are root
 * the child drops to user "postgres" itself before exec'ing initdb / postgres.
 */
#define _GNU_SOURCE
#include "svc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <libpq-fe.h>

#define READY_TIMEOUT_MS 30000
#define STOP_TIMEOUT_MS  10000
#define MAX_SERVICES     24

enum svc_kind { SVC_REDIS, SVC_PG };

struct svc {
    enum svc_kind kind;
    pid_t pid; /* 0 when not running */
    int port;
    int bus_port;      /* Redis Cluster bus port; 0 for a plain server */
    int tls_port;      /* Redis TLS port; 0 for none */
    char tls_dir[200]; /* where its certificates are (svc_tls_certs) */
    char dir[256];
    char conninfo[200];
    char bindir[200];
};

struct svc_redis {
    struct svc s;
};

struct svc_pg {
    struct svc s;
};

static struct svc *registry[MAX_SERVICES];
static int atexit_done;

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "svc: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

static void rm_rf(const char *dir)
{
    if (dir[0] != '\0')
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Waits for pid to exit for up to ms milliseconds. Returns 0 when reaped. */
static int wait_exit(pid_t pid, int ms, int *status)
{
    long until = now_ms() + ms;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD))
            return 0;
        if (now_ms() >= until)
            return -1;
        sleep_ms(5);
    }
}

/* Sends sig, waits; escalates to SIGKILL if the process does not go. */
static void kill_and_reap(struct svc *s, int sig)
{
    int status;
    if (s->pid <= 0)
        return;
    kill(s->pid, sig);
    if (wait_exit(s->pid, STOP_TIMEOUT_MS, &status) != 0) {
        fprintf(stderr, "svc: pid %d ignored signal %d; killing it\n", (int)s->pid, sig);
        kill(s->pid, SIGKILL);
        wait_exit(s->pid, STOP_TIMEOUT_MS, &status);
    }
    s->pid = 0;
}

static void teardown_all(void)
{
    for (int i = 0; i < MAX_SERVICES; i++) {
        struct svc *s = registry[i];
        if (s == NULL)
            continue;
        kill_and_reap(s, s->kind == SVC_PG ? SIGQUIT : SIGKILL);
        rm_rf(s->dir);
        registry[i] = NULL;
    }
}

static void registry_add(struct svc *s)
{
    if (!atexit_done) {
        atexit(teardown_all);
        atexit_done = 1;
    }
    for (int i = 0; i < MAX_SERVICES; i++) {
        if (registry[i] == NULL) {
            registry[i] = s;
            return;
        }
    }
    fprintf(stderr, "svc: more than %d services; this one is not torn down at exit\n",
            MAX_SERVICES);
}

static void registry_del(struct svc *s)
{
    for (int i = 0; i < MAX_SERVICES; i++)
        if (registry[i] == s)
            registry[i] = NULL;
}

static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int port = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int make_dir(struct svc *s, const char *what)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%s/onsale-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (mkdtemp(s->dir) == NULL) {
        fprintf(stderr, "svc: mkdtemp %s: %s\n", s->dir, strerror(errno));
        s->dir[0] = '\0';
        return -1;
    }
    return 0;
}

/* Looks up the unprivileged user servers run as when we are root. */
static int service_user(uid_t *uid, gid_t *gid)
{
    struct passwd *pw = getpwnam("postgres");
    if (pw == NULL) {
        fprintf(stderr, "svc: running as root but there is no user \"postgres\"\n");
        return -1;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

/*
 * Forks and execs argv[0] with stdout/stderr appended to logpath. When drop is set and
 * we are root, the child becomes uid/gid first. Returns the child's pid or -1.
 */
static pid_t spawn(char *const argv[], const char *logpath, int drop, uid_t uid, gid_t gid)
{
    pid_t parent = getpid();
    int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_t pid;

    if (log < 0) {
        fprintf(stderr, "svc: open %s: %s\n", logpath, strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "svc: fork: %s\n", strerror(errno));
        close(log);
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        dup2(log, 1);
        dup2(log, 2);
        setpgid(0, 0);
        if (drop && (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0))
            _exit(126);
        /* after the uid change: changing credentials clears the death signal */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(125);
        close_range(3, ~0U, 0); /* the test's sockets are none of the server's business */
        execv(argv[0], argv);
        _exit(127);
    }
    close(log);
    return pid;
}

static void print_log(const char *dir, const char *name)
{
    char path[400], buf[4096];
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "r");
    if (f == NULL)
        return;
    fprintf(stderr, "svc: --- %s ---\n", path);
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, n, stderr);
    fclose(f);
}

/* 1 while pid is alive; reaps and clears it when it has exited. */
static int alive(struct svc *s)
{
    int status;
    if (s->pid <= 0)
        return 0;
    if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
        s->pid = 0;
        return 0;
    }
    return 1;
}

const char *svc_password(void)
{
    static char pw[33];
    if (pw[0] == '\0') {
        unsigned char raw[16];
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, raw, sizeof(raw)) != (ssize_t)sizeof(raw))
            abort();
        close(fd);
        for (int i = 0; i < 16; i++)
            snprintf(pw + 2 * i, 3, "%02x", raw[i]);
    }
    return pw;
}

/* ---- Redis ---- */

/* "AUTH user password" as an inline command, first on every probe connection. */
static void auth_line(char *buf, size_t len)
{
    snprintf(buf, len, "AUTH " SVC_REDIS_USER " %s\r\n", svc_password());
}

/* Reads until buf holds want complete lines (CRLF); 0 or -1. */
static int read_lines(int fd, char *buf, size_t len, int want)
{
    size_t got = 0;
    int lines = 0;
    while (lines < want && got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n <= 0)
            return -1;
        for (ssize_t i = 0; i < n; i++)
            if (buf[got + (size_t)i] == '\n')
                lines++;
        got += (size_t)n;
    }
    buf[got] = '\0';
    return 0;
}

static int redis_ping(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char buf[64] = {0}, cmd[96];
    struct timeval tv = {.tv_sec = 2};
    int ok = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    auth_line(cmd, sizeof(cmd));
    strcat(cmd, "PING\r\n");
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        write(fd, cmd, strlen(cmd)) == (ssize_t)strlen(cmd) &&
        read_lines(fd, buf, sizeof(buf), 2) == 0)
        ok = strncmp(buf, "+OK\r\n+PONG", 10) == 0;
    close(fd);
    return ok;
}

static int redis_launch(struct svc *s)
{
    char port[16], log[400], acl[64];
    char *argv[] = {"/usr/bin/redis-server",
                    "--port",
                    port,
                    "--bind",
                    SVC_HOST,
                    "--dir",
                    s->dir,
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--protected-mode",
                    "no",
                    "--enable-debug-command",
                    "yes",
                    "--logfile",
                    "",
                    "--user", /* redis-server quotes each argument: one word each */
                    "default",
                    "off",
                    "--user",
                    SVC_REDIS_USER,
                    "on",
                    acl,
                    "~*",
                    "&*",
                    "+@all",
                    NULL, /* cluster mode: the arguments below take these places */
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL, /* TLS: the arguments below take these places */
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    char bus[16], nodes_conf[64], tls_port[16], cert[260], key[260], ca[260];
    int i = 29;
    long until = now_ms() + READY_TIMEOUT_MS;

    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(acl, sizeof(acl), ">%s", svc_password());
    if (s->bus_port > 0) {
        snprintf(bus, sizeof(bus), "%d", s->bus_port);
        snprintf(nodes_conf, sizeof(nodes_conf), "nodes-%d.conf", s->port);
        argv[i++] = "--cluster-enabled";
        argv[i++] = "yes";
        argv[i++] = "--cluster-port";
        argv[i++] = bus;
        argv[i++] = "--cluster-config-file";
        argv[i++] = nodes_conf;
        argv[i++] = "--cluster-node-timeout";
        argv[i++] = "1000";
        argv[i++] = "--masteruser"; /* replicas authenticate to their master */
        argv[i++] = SVC_REDIS_USER;
        argv[i++] = "--masterauth";
        argv[i++] = (char *)svc_password();
    }
    if (s->tls_port > 0) {
        snprintf(tls_port, sizeof(tls_port), "%d", s->tls_port);
        snprintf(cert, sizeof(cert), "%s/server.pem", s->tls_dir);
        snprintf(key, sizeof(key), "%s/server-key.pem", s->tls_dir);
        snprintf(ca, sizeof(ca), "%s/ca.pem", s->tls_dir);
        argv[i++] = "--tls-port";
        argv[i++] = tls_port;
        argv[i++] = "--tls-cert-file";
        argv[i++] = cert;
        argv[i++] = "--tls-key-file";
        argv[i++] = key;
        argv[i++] = "--tls-ca-cert-file";
        argv[i++] = ca;
        argv[i++] = "--tls-auth-clients";
        argv[i++] = "yes";
    }
    snprintf(log, sizeof(log), "%s/redis.log", s->dir);
    s->pid = spawn(argv, log, 0, 0, 0);
    if (s->pid < 0) {
        s->pid = 0;
        return -1;
    }
    while (now_ms() < until) {
        if (redis_ping(s->port))
            return 0;
        if (!alive(s))
            return -1;
        sleep_ms(10);
    }
    fprintf(stderr, "svc: redis-server on port %d did not answer PING\n", s->port);
    kill_and_reap(s, SIGKILL);
    return -1;
}

static svc_redis_t *redis_start(const char *tls_dir)
{
    svc_redis_t *r = calloc(1, sizeof(*r));
    struct svc *s = &r->s;

    if (r == NULL)
        return NULL;
    s->kind = SVC_REDIS;
    if (tls_dir != NULL)
        snprintf(s->tls_dir, sizeof(s->tls_dir), "%s", tls_dir);
    if (make_dir(s, "redis") != 0)
        goto err;
    registry_add(s);
    for (int attempt = 0; attempt < 5; attempt++) { /* a probed port may be taken again */
        s->port = free_port();
        if (tls_dir != NULL)
            do
                s->tls_port = free_port();
            while (s->tls_port == s->port);
        if (s->port > 0 && redis_launch(s) == 0)
            return r;
    }
    print_log(s->dir, "redis.log");
    fprintf(stderr, "svc: cannot start redis-server\n");
err:
    svc_redis_stop(r);
    return NULL;
}

svc_redis_t *svc_redis_start(void)
{
    return redis_start(NULL);
}

svc_redis_t *svc_redis_start_tls(const char *dir)
{
    return redis_start(dir);
}

int svc_redis_tls_port(const svc_redis_t *r)
{
    return r->s.tls_port;
}

int svc_tls_certs(const char *dir)
{
    /* EC P-256 keys; every certificate valid for a day. */
    static const char script[] =
        "set -e; umask 077; cd '%s'; "
        "k() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1\"; }; "
        "k ca-key.pem; k other-ca-key.pem; k server-key.pem; k client-key.pem; "
        "openssl req -x509 -new -key ca-key.pem -subj /CN=svc-test-ca -days 1 -out ca.pem; "
        "openssl req -x509 -new -key other-ca-key.pem -subj /CN=svc-other-ca -days 1 "
        "-out other-ca.pem; "
        "printf 'subjectAltName=IP:127.0.0.1,DNS:redis.test\\n' > server.ext; "
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext; "
        "openssl req -new -key server-key.pem -subj /CN=redis.test -out server.csr; "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
        "-days 1 -extfile server.ext -out server.pem; "
        "openssl req -new -key client-key.pem -subj /CN=svc-client -out client.csr; "
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
        "-days 1 -extfile client.ext -out client.pem";
    char cmd[2048];
    int rc;

    if ((size_t)snprintf(cmd, sizeof(cmd), script, dir) >= sizeof(cmd))
        return -1;
    rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "svc: making test certificates in %s failed (%d)\n", dir, rc);
        return -1;
    }
    return 0;
}

int svc_redis_port(const svc_redis_t *r)
{
    return r->s.port;
}

const char *svc_redis_dir(const svc_redis_t *r)
{
    return r->s.dir;
}

int svc_redis_kill(svc_redis_t *r)
{
    if (r->s.pid <= 0)
        return -1;
    kill_and_reap(&r->s, SIGKILL);
    return 0;
}

int svc_redis_restart(svc_redis_t *r)
{
    if (r->s.pid > 0)
        return -1;
    if (redis_launch(&r->s) != 0) {
        print_log(r->s.dir, "redis.log");
        return -1;
    }
    return 0;
}

void svc_redis_stop(svc_redis_t *r)
{
    if (r == NULL)
        return;
    kill_and_reap(&r->s, SIGKILL);
    rm_rf(r->s.dir);
    registry_del(&r->s);
    free(r);
}

/* ---- Redis Cluster ---- */

struct svc_redis_cluster {
    int n;
    svc_redis_t *node[SVC_CLUSTER_MAX];
};

/* Sends one inline command to 127.0.0.1:port and reads its answer into buf; -1 on error. */
static int redis_ask(int port, const char *cmd, char *buf, size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {.tv_sec = 2};
    size_t got = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char auth[96];
    auth_line(auth, sizeof(auth));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, auth, strlen(auth)) != (ssize_t)strlen(auth) ||
        read_lines(fd, buf, len, 1) != 0 || strncmp(buf, "+OK", 3) != 0 ||
        write(fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd)) {
        close(fd);
        return -1;
    }
    /* a bulk reply of INFO-like text: read until the peer pauses */
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0) {
        got += (size_t)n;
        if (got > 2 && buf[got - 2] == '\r' && buf[got - 1] == '\n')
            break;
    }
    buf[got] = '\0';
    close(fd);
    return got > 0 ? 0 : -1;
}

static int cluster_settled(svc_redis_cluster_t *c)
{
    char buf[8192];
    int masters = 0;

    for (int i = 0; i < c->n; i++) {
        if (c->node[i]->s.pid <= 0)
            continue;
        if (redis_ask(c->node[i]->s.port, "CLUSTER INFO\r\n", buf, sizeof(buf)) != 0 ||
            strstr(buf, "cluster_state:ok") == NULL)
            return 0;
        if (redis_ask(c->node[i]->s.port, "INFO replication\r\n", buf, sizeof(buf)) != 0)
            return 0;
        if (strstr(buf, "role:master") != NULL)
            masters++;
        else if (strstr(buf, "master_link_status:up") == NULL)
            return 0;
    }
    return masters > 0;
}

svc_redis_cluster_t *svc_redis_cluster_start(int masters, int replicas)
{
    svc_redis_cluster_t *c = calloc(1, sizeof(*c));
    char *argv[4 + SVC_CLUSTER_MAX + 10];
    char addr[SVC_CLUSTER_MAX][32], reps[8], log[400];
    int a = 0, status = 0;
    long until;
    pid_t pid;

    if (c == NULL || masters < 1 || masters * (1 + replicas) > SVC_CLUSTER_MAX) {
        free(c);
        return NULL;
    }
    c->n = masters * (1 + replicas);
    for (int i = 0; i < c->n; i++) {
        svc_redis_t *r = calloc(1, sizeof(*r));
        struct svc *s;
        int attempt;

        if (r == NULL)
            goto err;
        c->node[i] = r;
        s = &r->s;
        s->kind = SVC_REDIS;
        if (make_dir(s, "redis-cluster") != 0)
            goto err;
        registry_add(s);
        for (attempt = 0; attempt < 5; attempt++) {
            s->port = free_port();
            s->bus_port = free_port();
            if (s->port > 0 && s->bus_port > 0 && s->port != s->bus_port && redis_launch(s) == 0)
                break;
        }
        if (attempt == 5) {
            print_log(s->dir, "redis.log");
            goto err;
        }
        snprintf(addr[i], sizeof(addr[i]), SVC_HOST ":%d", s->port);
    }
    argv[a++] = "/usr/bin/redis-cli";
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int i = 0; i < c->n; i++)
        argv[a++] = addr[i];
    snprintf(reps, sizeof(reps), "%d", replicas);
    argv[a++] = "--cluster-replicas";
    argv[a++] = reps;
    argv[a++] = "--cluster-yes";
    argv[a++] = "--user";
    argv[a++] = SVC_REDIS_USER;
    argv[a++] = "--pass";
    argv[a++] = (char *)svc_password();
    argv[a++] = "--no-auth-warning";
    argv[a] = NULL;
    snprintf(log, sizeof(log), "%s/cluster-create.log", c->node[0]->s.dir);
    pid = spawn(argv, log, 0, 0, 0);
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        print_log(c->node[0]->s.dir, "cluster-create.log");
        fprintf(stderr, "svc: redis-cli --cluster create failed\n");
        goto err;
    }
    until = now_ms() + READY_TIMEOUT_MS;
    while (!cluster_settled(c)) {
        if (now_ms() >= until) {
            fprintf(stderr, "svc: the Redis Cluster did not settle\n");
            goto err;
        }
        sleep_ms(50);
    }
    return c;
err:
    svc_redis_cluster_stop(c);
    return NULL;
}

int svc_redis_cluster_size(const svc_redis_cluster_t *c)
{
    return c->n;
}

int svc_redis_cluster_port(const svc_redis_cluster_t *c, int i)
{
    return c->node[i]->s.port;
}

int svc_redis_cluster_is_master(const svc_redis_cluster_t *c, int i)
{
    char buf[4096];
    return c->node[i]->s.pid > 0 &&
           redis_ask(c->node[i]->s.port, "INFO replication\r\n", buf, sizeof(buf)) == 0 &&
           strstr(buf, "role:master") != NULL;
}

int svc_redis_cluster_kill(svc_redis_cluster_t *c, int i)
{
    return svc_redis_kill(c->node[i]);
}

int svc_redis_cluster_restart(svc_redis_cluster_t *c, int i)
{
    return svc_redis_restart(c->node[i]);
}

int svc_redis_cluster_wait_ok(svc_redis_cluster_t *c, int timeout_ms)
{
    long until = now_ms() + timeout_ms;
    while (!cluster_settled(c)) {
        if (now_ms() >= until)
            return -1;
        sleep_ms(50);
    }
    return 0;
}

void svc_redis_cluster_stop(svc_redis_cluster_t *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->n; i++)
        svc_redis_stop(c->node[i]);
    free(c);
}

/* ---- Postgres ---- */

static int find_pg_bindir(struct svc *s)
{
    static const char *const versions[] = {"15", "16", "17", "14", "13"};
    const char *env = getenv("ONSALE_PG_BINDIR");
    char path[260];

    if (env != NULL && *env != '\0') {
        snprintf(s->bindir, sizeof(s->bindir), "%s", env);
        return 0;
    }
    for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
        snprintf(path, sizeof(path), "/usr/lib/postgresql/%s/bin/initdb", versions[i]);
        if (access(path, X_OK) == 0) {
            snprintf(s->bindir, sizeof(s->bindir), "/usr/lib/postgresql/%s/bin", versions[i]);
            return 0;
        }
    }
    fprintf(stderr, "svc: no Postgres server binaries (set ONSALE_PG_BINDIR)\n");
    return -1;
}

static int drop_privileges(uid_t *uid, gid_t *gid)
{
    if (geteuid() != 0)
        return 0;
    return service_user(uid, gid) == 0 ? 1 : -1;
}

static int pg_initdb(struct svc *s)
{
    char exe[260], data[300], log[400];
    char pwfile[300], pwopt[320];
    char *argv[] = {exe,   "-D",        data, "-U",   "postgres",   "--auth=scram-sha-256",
                    pwopt, "--no-sync", "-E", "UTF8", "--locale=C", NULL};
    uid_t uid = 0;
    gid_t gid = 0;
    int drop = drop_privileges(&uid, &gid), status = 0;
    pid_t pid;

    if (drop < 0)
        return -1;
    if (drop && chown(s->dir, uid, gid) != 0) {
        fprintf(stderr, "svc: chown %s: %s\n", s->dir, strerror(errno));
        return -1;
    }
    snprintf(exe, sizeof(exe), "%s/initdb", s->bindir);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(log, sizeof(log), "%s/initdb.log", s->dir);
    /* the superuser's password, from a file only the server's user can read */
    snprintf(pwfile, sizeof(pwfile), "%s/pwfile", s->dir);
    snprintf(pwopt, sizeof(pwopt), "--pwfile=%s", pwfile);
    int pfd = open(pwfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (pfd < 0 || write(pfd, svc_password(), 32) != 32 || (drop && fchown(pfd, uid, gid) != 0)) {
        fprintf(stderr, "svc: writing %s: %s\n", pwfile, strerror(errno));
        if (pfd >= 0)
            close(pfd);
        return -1;
    }
    close(pfd);
    pid = spawn(argv, log, drop, uid, gid);
    if (pid < 0)
        return -1;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        print_log(s->dir, "initdb.log");
        fprintf(stderr, "svc: initdb failed\n");
        unlink(pwfile);
        return -1;
    }
    unlink(pwfile);
    return 0;
}

static int pg_launch(struct svc *s)
{
    char exe[260], data[300], log[400], port[16];
    char *argv[] = {exe,
                    "-D",
                    data,
                    "-p",
                    port,
                    "-k",
                    s->dir,
                    "-c",
                    "listen_addresses=" SVC_HOST,
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "shared_buffers=32MB",
                    "-c",
                    "max_connections=60",
                    NULL};
    char probe[200];
    uid_t uid = 0;
    gid_t gid = 0;
    int drop = drop_privileges(&uid, &gid);
    long until = now_ms() + READY_TIMEOUT_MS;

    if (drop < 0)
        return -1;
    snprintf(exe, sizeof(exe), "%s/postgres", s->bindir);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(log, sizeof(log), "%s/postgres.log", s->dir);
    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(probe, sizeof(probe),
             "host=" SVC_HOST " port=%d dbname=postgres user=postgres connect_timeout=2", s->port);
    /* (PQping needs no password: it only asks whether the server accepts connections) */
    s->pid = spawn(argv, log, drop, uid, gid);
    if (s->pid < 0) {
        s->pid = 0;
        return -1;
    }
    while (now_ms() < until) {
        if (PQping(probe) == PQPING_OK)
            return 0;
        if (!alive(s))
            return -1;
        sleep_ms(20);
    }
    fprintf(stderr, "svc: postgres on port %d did not become ready\n", s->port);
    kill_and_reap(s, SIGQUIT);
    return -1;
}

static int pg_create_db(struct svc *s)
{
    char admin[200];
    PGconn *conn;
    PGresult *res;
    int rc = -1;

    snprintf(admin, sizeof(admin),
             "host=" SVC_HOST " port=%d dbname=postgres user=postgres password=%s", s->port,
             svc_password());
    conn = PQconnectdb(admin);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "svc: connect: %s", PQerrorMessage(conn));
        goto out;
    }
    res = PQexec(conn, "CREATE DATABASE onsale_test");
    if (PQresultStatus(res) == PGRES_COMMAND_OK)
        rc = 0;
    else
        fprintf(stderr, "svc: CREATE DATABASE: %s", PQresultErrorMessage(res));
    PQclear(res);
out:
    PQfinish(conn);
    return rc;
}

svc_pg_t *svc_pg_start(void)
{
    svc_pg_t *p = calloc(1, sizeof(*p));
    struct svc *s = &p->s;
    int attempt;

    if (p == NULL)
        return NULL;
    s->kind = SVC_PG;
    if (find_pg_bindir(s) != 0 || make_dir(s, "pg") != 0)
        goto err;
    registry_add(s);
    if (pg_initdb(s) != 0)
        goto err;
    for (attempt = 0; attempt < 5; attempt++) { /* a probed port may be taken again */
        s->port = free_port();
        if (s->port > 0 && pg_launch(s) == 0)
            break;
    }
    if (attempt == 5) {
        print_log(s->dir, "postgres.log");
        fprintf(stderr, "svc: cannot start postgres\n");
        goto err;
    }
    if (pg_create_db(s) != 0)
        goto err;
    snprintf(s->conninfo, sizeof(s->conninfo),
             "host=" SVC_HOST " port=%d dbname=onsale_test user=postgres password=%s", s->port,
             svc_password());
    return p;
err:
    svc_pg_stop(p);
    return NULL;
}

int svc_pg_port(const svc_pg_t *p)
{
    return p->s.port;
}

const char *svc_pg_dir(const svc_pg_t *p)
{
    return p->s.dir;
}

const char *svc_pg_conninfo(const svc_pg_t *p)
{
    return p->s.conninfo;
}

int svc_pg_kill(svc_pg_t *p)
{
    if (p->s.pid <= 0)
        return -1;
    kill_and_reap(&p->s, SIGQUIT);
    return 0;
}

int svc_pg_restart(svc_pg_t *p)
{
    if (p->s.pid > 0)
        return -1;
    if (pg_launch(&p->s) != 0) {
        print_log(p->s.dir, "postgres.log");
        return -1;
    }
    return 0;
}

void svc_pg_stop(svc_pg_t *p)
{
    if (p == NULL)
        return;
    kill_and_reap(&p->s, SIGINT); /* fast shutdown */
    rm_rf(p->s.dir);
    registry_del(&p->s);
    free(p);
}
