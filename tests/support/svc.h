/*
 * svc — real Redis and Postgres servers for tests: each one a private child process on
 * 127.0.0.1, on a free port, with its data in a fresh temporary directory.
 *
 * Synchronous and blocking (fork/exec, waitpid, blocking readiness probes): call these
 * from test set-up / tear-down or between event-loop runs, never from a loop callback.
 * Start services before creating threads. Every process started here is killed by the
 * matching stop function, by an atexit handler if a test forgets (or fails an assertion
 * and returns), and by the kernel (PR_SET_PDEATHSIG) if the test process dies outright;
 * each stop kills exactly the pid it started and removes its temporary directory.
 *
 * Authenticated like the local stack: Postgres with scram-sha-256 (no trust),
 * Redis with ACL user SVC_REDIS_USER and the default user off; both use svc_password(),
 * one random password per test process.
 *
 * Postgres: initdb runs as user "postgres" when the test runs as root (initdb refuses
 * root); superuser "postgres", database "onsale_test", fsync off. Redis: no persistence,
 * DEBUG enabled (tests use DEBUG SLEEP).
 */
#ifndef SVC_H
#define SVC_H

#define SVC_HOST       "127.0.0.1"
#define SVC_REDIS_USER "onsale"

/** The password of every Redis ACL user and Postgres role started here (32 hex digits). */
const char *svc_password(void);

typedef struct svc_redis svc_redis_t;
typedef struct svc_pg svc_pg_t;

/** Starts redis-server and waits until it answers PING. NULL on failure (reason on
 *  stderr). Free with svc_redis_stop. */
svc_redis_t *svc_redis_start(void);
/** Its TCP port on SVC_HOST. */
int svc_redis_port(const svc_redis_t *s);
/**
 * TLS: svc_redis_start plus a TLS port serving dir/server.pem (made by
 * svc_tls_certs) that requires a client certificate signed by dir/ca.pem
 * (tls-auth-clients yes). The plain port stays open for the readiness probe.
 */
svc_redis_t *svc_redis_start_tls(const char *dir);
/** Its TLS port; 0 for a plain server. */
int svc_redis_tls_port(const svc_redis_t *s);
/**
 * Makes test certificates in dir with the openssl command: ca.pem (+ ca-key.pem),
 * server.pem / server-key.pem (names: IP 127.0.0.1 and DNS redis.test), client.pem /
 * client-key.pem (signed by ca.pem), and other-ca.pem, a CA that signed nothing here.
 * 0 or -1 (reason on stderr).
 */
int svc_tls_certs(const char *dir);
/** Its temporary directory (log: redis.log). */
const char *svc_redis_dir(const svc_redis_t *s);
/** Kills the server at once (SIGKILL) and reaps it; the port and directory stay. 0 or -1. */
int svc_redis_kill(svc_redis_t *s);
/** Starts it again on the same port after svc_redis_kill; waits for PING. 0 or -1. */
int svc_redis_restart(svc_redis_t *s);
/** Kills the server if running, removes its directory, frees s. NULL is fine. */
void svc_redis_stop(svc_redis_t *s);

/* Redis Cluster: masters × (1 + replicas) cluster-enabled servers (node timeout 1 s,
 * no persistence), joined by `redis-cli --cluster create`;
 * start returns once every node reports cluster_state:ok and every replica's link is up. */
#define SVC_CLUSTER_MAX 12
typedef struct svc_redis_cluster svc_redis_cluster_t;
svc_redis_cluster_t *svc_redis_cluster_start(int masters, int replicas);
int svc_redis_cluster_size(const svc_redis_cluster_t *c);
/** Port of node i (0 ≤ i < size) on SVC_HOST. */
int svc_redis_cluster_port(const svc_redis_cluster_t *c, int i);
/** 1 when node i is running and reports role:master. */
int svc_redis_cluster_is_master(const svc_redis_cluster_t *c, int i);
/** SIGKILL node i / start it again on its port and data. 0 or -1. */
int svc_redis_cluster_kill(svc_redis_cluster_t *c, int i);
int svc_redis_cluster_restart(svc_redis_cluster_t *c, int i);
/** Waits until every running node reports cluster_state:ok and replicas are linked. */
int svc_redis_cluster_wait_ok(svc_redis_cluster_t *c, int timeout_ms);
void svc_redis_cluster_stop(svc_redis_cluster_t *c);

/** Runs initdb, starts postgres, waits until it accepts connections and creates
 *  database onsale_test. Takes a second or two. NULL on failure (reason on stderr). */
svc_pg_t *svc_pg_start(void);
/** Its TCP port on SVC_HOST. */
int svc_pg_port(const svc_pg_t *s);
/** Its temporary directory (logs: initdb.log, postgres.log). */
const char *svc_pg_dir(const svc_pg_t *s);
/** libpq conninfo for database onsale_test: "host=127.0.0.1 port=N dbname=onsale_test
 *  user=postgres password=…". Valid until svc_pg_stop. */
const char *svc_pg_conninfo(const svc_pg_t *s);
/** Immediate shutdown (SIGQUIT to the postmaster: every backend dies, clients see their
 *  connections drop) and reaps it; the data stays. 0 or -1. */
int svc_pg_kill(svc_pg_t *s);
/** Starts it again on the same port and data after svc_pg_kill; waits until ready. */
int svc_pg_restart(svc_pg_t *s);
/** Stops the server if running (fast shutdown), removes its directory, frees s. NULL ok. */
void svc_pg_stop(svc_pg_t *s);

#endif
