/* test_pk — the process kit on its own, with real processes, a real
 * redis-server and a real (if tiny) HTTP server in a thread of the test:
 * free ports; spawn into a log, exit statuses, exec failures; stop of a
 * SIGSTOPped child, SIGKILL after the grace for one that ignores SIGTERM,
 * kill-all, 64 running children filling the table (the 65th refused), a
 * child SIGKILLed when the process that spawned it ends; a private redis-server on a
 * given port with extra arguments, one-shot queries, a port another server holds (its PING
 * not taken for ours), a restart on the same port, a start that fails; the health check, the port
 * read from a log, every outcome of the wait until healthy; the forwarder frozen and thawed; a
 * Redis Cluster of 3 masters and 3 replicas, its slots served, a killed master's slots taken over
 * by its replica; a Sentinel group's start with its stop flag raised ends at once. Its users' tests
 * (the Sentinel group: lockcore_sentinel, service_failover) cover the rest of pk_ha. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pk_cluster.h"
#include "pk_fwd.h"
#include "pk_ha.h"
#include "pk_http.h"
#include "pk_proc.h"
#include "pk_redis.h"
#include "tu.h"

static char dir[] = "/tmp/miaosha-pk-test-XXXXXX";

/* 1 when the file holds needle. */
static int file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* 1 while a process with this pid exists (ours was reaped: it must not). */
static int alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno != ESRCH;
}

static void test_ports_and_spawn(void)
{
    int p = pk_free_port();
    TU_CHECK(p > 0 && p <= 65535, "a free port %d", p);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TU_CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "it can be bound");
    close(fd);

    char log[300], err[256];
    snprintf(log, sizeof log, "%s/spawn.log", dir);
    const char *argv[] = {"sh", "-c", "echo out; echo err >&2; read x; echo \"in:$x\"; exit 3",
                          NULL};
    pid_t pid = pk_spawn(argv, log, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    int st = 0;
    TU_CHECK(pk_wait_status(pid, (int)tu_slack(5000), &st) == 1, "it exits");
    TU_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3, "exit status 3 (wait status %d)", st);
    TU_CHECK(file_has(log, "out\n") && file_has(log, "err\n"), "stdout and stderr in the log");
    TU_CHECK(file_has(log, "in:\n"), "stdin is /dev/null");
    TU_CHECK(pk_wait_exit(pid, 0) == 1, "a reaped pid counts as exited");

    const char *bad[] = {"/nonexistent/miaosha-pk-binary", NULL};
    pid = pk_spawn(bad, log, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn of a missing binary still forks: %s", err);
    TU_CHECK(pk_wait_status(pid, (int)tu_slack(5000), &st) == 1 && WIFEXITED(st) &&
                 WEXITSTATUS(st) == 127,
             "a failed exec exits 127 (wait status %d)", st);
    TU_CHECK(file_has(log, "exec /nonexistent/miaosha-pk-binary:"), "its reason in the log");

    char nolog[320];
    snprintf(nolog, sizeof nolog, "%s/no/such/dir/x.log", dir);
    err[0] = 0;
    TU_CHECK(pk_spawn(argv, nolog, 0, err, sizeof err) == -1 && strstr(err, "x.log"),
             "a log that cannot be opened: -1 with the path (%s)", err);
}

static void test_stop_and_kill(void)
{
    char err[256];
    const char *sleeper[] = {"sleep", "30", NULL};

    /* SIGSTOPped: SIGTERM acts only after the SIGCONT pk_stop sends */
    pid_t pid = pk_spawn(sleeper, NULL, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    kill(pid, SIGSTOP);
    int64_t t0 = lc_now_ms();
    pk_stop(pid, 5000);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(took < 4000, "a stopped child ends on SIGTERM, not after the grace (%lld ms)",
             (long long)took);
    TU_CHECK(!alive(pid), "and is gone");

    /* SIGTERM ignored: SIGKILL once the grace is over */
    const char *stubborn[] = {"sh", "-c", "trap '' TERM; exec sleep 30", NULL};
    pid = pk_spawn(stubborn, NULL, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    tu_sleep_ms(100); /* the trap is set */
    t0 = lc_now_ms();
    pk_stop(pid, 300);
    took = lc_now_ms() - t0;
    TU_CHECK(took >= 300 && took < tu_slack(3000), "SIGKILL after the 300 ms grace (%lld ms)",
             (long long)took);
    TU_CHECK(!alive(pid), "the stubborn child is gone");

    /* pk_signal_stop: asks, does not wait */
    pid = pk_spawn(sleeper, NULL, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    pk_signal_stop(pid);
    int st = 0;
    TU_CHECK(pk_wait_status(pid, (int)tu_slack(3000), &st) == 1 && WIFSIGNALED(st) &&
                 WTERMSIG(st) == SIGTERM,
             "pk_signal_stop: ended by SIGTERM (wait status %d)", st);

    pid = pk_spawn(sleeper, NULL, 0, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    TU_CHECK(pk_wait_exit(pid, 50) == 0, "a running child: not exited after 50 ms");
    pk_kill(pid);
    TU_CHECK(!alive(pid), "pk_kill: gone at once");

    /* kill-all: every child not reaped yet */
    pid_t a = pk_spawn(sleeper, NULL, 0, err, sizeof err);
    pid_t b = pk_spawn(stubborn, NULL, 0, err, sizeof err);
    TU_REQUIRE(a > 0 && b > 0, "two more children");
    tu_sleep_ms(100);
    pk_kill_all(300);
    TU_CHECK(!alive(a) && !alive(b), "pk_kill_all stopped both");

    /* The table is full at 64 running children: the 65th is refused
     * rather than started where pk_kill_all would never find it. */
    pid_t many[65];
    int n = 0;
    while (n < 65 && (many[n] = pk_spawn(sleeper, NULL, 0, err, sizeof err)) > 0)
        n++;
    TU_CHECK(n == 64 && strstr(err, "64 children"), "64 started, the 65th refused (%d: %s)", n,
             err);
    pk_kill_all(300);
    int left = 0;
    for (int i = 0; i < n; i++)
        left += alive(many[i]);
    TU_CHECK(left == 0, "pk_kill_all stopped all 64 (%d left)", left);
    TU_CHECK(pk_wait_exit(0, 0) == 1 && pk_wait_exit(-1, 0) == 1,
             "pid <= 0: counts as exited, reaps nothing");
}

/* The helper process (this binary, argument "spawn-sleeper LOG"): spawns
 * a sleeper with PK_SPAWN_DIE_WITH_PARENT, waits until it runs (past the
 * prctl: a parent gone before it would make the child exit 127), writes
 * its pid to LOG, exits. */
static int spawn_sleeper(const char *log)
{
    char ready[320], err[256];
    snprintf(ready, sizeof ready, "%s.ready", log);
    const char *sleeper[] = {"sh", "-c", "echo ready; exec sleep 30", NULL};
    pid_t pid = pk_spawn(sleeper, ready, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    for (long long end = lc_now_ms() + 5000; pid > 0 && !file_has(ready, "ready");) {
        if (lc_now_ms() > end)
            return 1;
        pk_sleep_ms(10);
    }
    FILE *f = fopen(log, "w");
    if (pid < 0 || !f)
        return 1;
    fprintf(f, "%d\n", (int)pid);
    fclose(f);
    return 0;
}

/* The process that spawned it ends: the kernel SIGKILLs the child. This
 * test is the orphan's subreaper, so it can reap it and see the signal. */
static void test_die_with_parent(void)
{
    TU_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0, "subreaper");
    char log[300], err[256];
    snprintf(log, sizeof log, "%s/sleeper.pid", dir);
    const char *argv[] = {"/proc/self/exe", "spawn-sleeper", log, NULL};
    pid_t helper = pk_spawn(argv, NULL, 0, err, sizeof err);
    TU_REQUIRE(helper > 0, "helper: %s", err);
    int st = 0;
    TU_REQUIRE(pk_wait_status(helper, (int)tu_slack(5000), &st) == 1 && WIFEXITED(st) &&
                   WEXITSTATUS(st) == 0,
               "the helper spawned and exited (wait status %d)", st);
    FILE *f = fopen(log, "r");
    int pid = 0;
    TU_REQUIRE(f && fscanf(f, "%d", &pid) == 1 && pid > 0, "its child's pid");
    fclose(f);
    st = 0;
    int ended = pk_wait_status(pid, (int)tu_slack(3000), &st);
    TU_CHECK(ended == 1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
             "PK_SPAWN_DIE_WITH_PARENT: SIGKILLed when its parent ended (%d, wait status %d)",
             ended, st);
}

static void test_redis(void)
{
    char err[512], out[256], log[300];
    snprintf(log, sizeof log, "%s/redis.log", dir);
    pk_redis_opts o;
    pk_redis_opts_init(&o);
    TU_CHECK(o.attempts == 1 && o.timeout_ms == 10000 && o.retry_pause_ms == 200 &&
                 strcmp(o.server, "redis-server") == 0,
             "defaults");
    if (getenv("MIAOSHA_REDIS_SERVER"))
        o.server = getenv("MIAOSHA_REDIS_SERVER");
    o.dir = dir;
    o.logpath = log;
    o.flags = PK_SPAWN_DIE_WITH_PARENT;
    o.port = pk_free_port();
    const char *args[] = {"--maxmemory", "1234567", NULL};
    o.args = args;
    o.attempts = 5;
    int port = 0;
    pid_t pid = pk_redis_start(&o, &port, err, sizeof err);
    TU_REQUIRE(pid > 0, "redis-server: %s", err);
    TU_CHECK(port == o.port, "on the given port (%d, asked %d)", port, o.port);
    TU_CHECK(pk_redis_ping(port, 1000) == 1, "answers PING");

    const char *cfg[] = {"CONFIG", "GET", "maxmemory"};
    TU_CHECK(pk_redis_query(port, 1000, 3, cfg, out, sizeof out) == 1 &&
                 strcmp(out, "maxmemory\n1234567") == 0,
             "the extra argument took: '%s'", out);
    const char *save[] = {"CONFIG", "GET", "save"};
    TU_CHECK(pk_redis_query(port, 1000, 3, save, out, sizeof out) == 1 &&
                 strcmp(out, "save\n") == 0,
             "no RDB snapshots: '%s'", out);
    const char *set[] = {"SET", "pk:k", "a value"};
    const char *get[] = {"GET", "pk:k"};
    const char *nil[] = {"GET", "pk:none"};
    const char *bad[] = {"NOSUCHCOMMAND"};
    const char *incr[] = {"INCR", "pk:n"};
    TU_CHECK(pk_redis_query(port, 1000, 3, set, out, sizeof out) == 1 && strcmp(out, "OK") == 0,
             "SET: '%s'", out);
    char small[4];
    TU_CHECK(pk_redis_query(port, 1000, 2, get, small, sizeof small) == 1 &&
                 strcmp(small, "a v") == 0,
             "a value cut to the buffer: '%s'", small);
    TU_CHECK(pk_redis_query(port, 1000, 2, incr, out, sizeof out) == 1 && strcmp(out, "1") == 0,
             "an integer in decimal: '%s'", out);
    TU_CHECK(pk_redis_query(port, 1000, 2, nil, out, sizeof out) == 0 && out[0] == 0, "nil: 0");
    TU_CHECK(pk_redis_query(port, 1000, 1, bad, out, sizeof out) == -1 && out[0] == 0,
             "an error reply: -1");

    /* a port another server holds: that server's PING is not taken for
     * ours (which cannot bind and exits) */
    pk_redis_opts taken = o;
    taken.attempts = 1;
    int tport = 0;
    pid_t tpid = pk_redis_start(&taken, &tport, err, sizeof err);
    TU_CHECK(tpid == -1 && strstr(err, "another server answers there"),
             "a taken port: refused, not the other server's PING (%d: %s)", (int)tpid, err);
    if (tpid > 0)
        pk_stop(tpid, 2000);

    /* SIGKILLed and started again on its port */
    pk_kill(pid);
    TU_CHECK(pk_redis_ping(port, 300) == 0, "killed: no PING answer");
    TU_CHECK(pk_redis_query(port, 300, 2, get, out, sizeof out) == -1, "no answer: -1");
    int again = 0;
    pid = pk_redis_start(&o, &again, err, sizeof err);
    TU_CHECK(pid > 0 && again == port, "restarted on the same port %d: %s", again, err);
    pk_stop(pid, 2000);

    /* a server that exits at start: every attempt fails, the reason says so */
    const char *wrong[] = {"--no-such-option", "x", NULL};
    o.args = wrong;
    o.port = 0;
    o.attempts = 2;
    int64_t t0 = lc_now_ms();
    TU_CHECK(pk_redis_start(&o, &again, err, sizeof err) == -1 && strstr(err, "it exited") &&
                 strstr(err, log),
             "bad arguments: -1, '%s'", err);
    TU_CHECK(lc_now_ms() - t0 < tu_slack(5000), "and no wait for a PING that cannot come");

    /* Ctrl-C before the start */
    volatile sig_atomic_t stop = 1;
    o.args = args;
    o.stop = &stop;
    TU_CHECK(pk_redis_start(&o, &again, err, sizeof err) == -1 && strcmp(err, "interrupted") == 0,
             "stop set: interrupted ('%s')", err);
    /* and a Sentinel group's start, which passes its stop on */
    char hadir[] = "/tmp/miaosha-pk-ha-XXXXXX";
    TU_REQUIRE(mkdtemp(hadir) != NULL, "mkdtemp");
    pk_ha h;
    pk_ha_opts ho = {.dir = hadir,
                     .replicas = 1,
                     .down_after_ms = 500,
                     .failover_timeout_ms = 2000,
                     .stop = &stop};
    t0 = lc_now_ms();
    TU_CHECK(pk_ha_start(&h, &ho, err, sizeof err) == -1 && strcmp(err, "interrupted") == 0 &&
                 lc_now_ms() - t0 < tu_slack(2000),
             "pk_ha_start with stop set: interrupted at once ('%s')", err);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", hadir);
    TU_CHECK(system(rm) == 0, "%s", rm);
}

/* A tiny HTTP server on a thread: answers each connection with the next
 * status of a list (the last one repeated), counts requests, closes. */
typedef struct httpd {
    int fd, port;
    int statuses[4], nstatuses;
    atomic_int requests, stop;
    pthread_t t;
} httpd;

static void *httpd_run(void *arg)
{
    httpd *h = arg;
    while (!atomic_load(&h->stop)) {
        struct pollfd pf = {h->fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        int c = accept(h->fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[2048] = "";
        size_t have = 0;
        while (have < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
            struct pollfd cp = {c, POLLIN, 0};
            if (poll(&cp, 1, 1000) <= 0)
                break;
            ssize_t r = recv(c, req + have, sizeof req - 1 - have, 0);
            if (r <= 0)
                break;
            have += (size_t)r;
            req[have] = 0;
        }
        int n = atomic_fetch_add(&h->requests, 1);
        int st = h->statuses[n < h->nstatuses ? n : h->nstatuses - 1];
        char resp[256];
        int len = snprintf(resp, sizeof resp,
                           "HTTP/1.1 %d X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", st);
        (void)send(c, resp, (size_t)len, MSG_NOSIGNAL); /* a client gone is its business */
        close(c);
    }
    return NULL;
}

static void httpd_start(httpd *h, const int *statuses, int n)
{
    memset(h, 0, sizeof *h);
    memcpy(h->statuses, statuses, (size_t)n * sizeof *statuses);
    h->nstatuses = n;
    h->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    TU_REQUIRE(h->fd >= 0 && bind(h->fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                   listen(h->fd, 16) == 0 && getsockname(h->fd, (struct sockaddr *)&a, &l) == 0,
               "httpd listens");
    h->port = ntohs(a.sin_port);
    TU_REQUIRE(pthread_create(&h->t, NULL, httpd_run, h) == 0, "httpd thread");
}

static void httpd_stop(httpd *h)
{
    atomic_store(&h->stop, 1);
    pthread_join(h->t, NULL);
    close(h->fd);
}

static void test_http(void)
{
    httpd h;
    const int seq[] = {503, 404, 200};
    httpd_start(&h, seq, 3);
    TU_CHECK(pk_http_status(h.port, "/healthz", 1000) == 503, "a 503");
    TU_CHECK(pk_http_status(h.port, "/healthz", 1000) == 404, "a 404");
    TU_CHECK(pk_http_status(h.port, "/healthz", 1000) == 200, "a 200");
    httpd_stop(&h);
    TU_CHECK(pk_http_status(h.port, "/healthz", 500) == 0, "nothing listening: 0");
    char longpath[1000];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[0] = '/';
    longpath[sizeof longpath - 1] = 0;
    TU_CHECK(pk_http_status(h.port, longpath, 500) == 0, "a path over 900 bytes: 0");

    /* not HTTP: a redis-server answers something else, or closes */
    tu_redis r;
    memset(&r, 0, sizeof r);
    TU_REQUIRE(tu_redis_start(&r, 0, NULL) == 0, "a redis-server to talk HTTP to");
    TU_CHECK(pk_http_status(r.port, "/", 1000) == 0, "a Redis port: 0");
    tu_redis_stop(&r);

    char log[300];
    snprintf(log, sizeof log, "%s/port.log", dir);
    TU_CHECK(pk_log_port(log, "listening on ") == 0, "no log yet: 0");
    FILE *f = fopen(log, "w");
    TU_REQUIRE(f != NULL, "log");
    fprintf(f, "redis port 1111 is not it\nsrv v1 listening on 127.0.0.1 port 4242 (x)\n"
               "listening on 127.0.0.1 port 5353\n");
    fclose(f);
    TU_CHECK(pk_log_port(log, "listening on ") == 4242, "the first line after the text: %d",
             pk_log_port(log, "listening on "));
    TU_CHECK(pk_log_port(log, "no such text") == 0, "no such line: 0");
}

static void test_wait_healthy(void)
{
    char err[256], log[300];
    pk_http_wait_opts w;
    pk_http_wait_opts_init(&w);
    TU_CHECK(strcmp(w.path, "/healthz") == 0 && w.want_status == 200 && w.timeout_ms == 10000 &&
                 w.poll_ms == 20 && strcmp(w.port_after, "listening on ") == 0,
             "defaults");
    w.timeout_ms = (int)tu_slack(5000);

    /* healthy after a 503 and a 404, the port read from the child's log */
    httpd h;
    const int seq[] = {503, 404, 200};
    httpd_start(&h, seq, 3);
    snprintf(log, sizeof log, "%s/server.log", dir);
    char ports[16];
    snprintf(ports, sizeof ports, "%d", h.port);
    const char *announce[] = {
        "sh", "-c", "sleep 0.2; echo \"srv listening on 127.0.0.1 port $0\"; exec sleep 30", ports,
        NULL};
    pid_t pid = pk_spawn(announce, log, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    w.port_log = log;
    int port = 0, st = 0;
    TU_CHECK(pk_http_wait_healthy(pid, &port, &w, &st) == PK_HTTP_HEALTHY, "healthy");
    TU_CHECK(port == h.port, "the port from the log: %d", port);
    TU_CHECK(atomic_load(&h.requests) == 3, "after the 503 and the 404: %d requests",
             atomic_load(&h.requests));
    pk_stop(pid, 2000);
    httpd_stop(&h);
    w.port_log = NULL;

    /* any status counts when want_status is 0 */
    const int down[] = {503};
    httpd_start(&h, down, 1);
    port = h.port;
    w.want_status = 0;
    TU_CHECK(pk_http_wait_healthy(-1, &port, &w, NULL) == PK_HTTP_HEALTHY, "want 0: a 503 counts");
    w.want_status = 200;
    w.timeout_ms = 300;
    int64_t t0 = lc_now_ms();
    TU_CHECK(pk_http_wait_healthy(-1, &port, &w, NULL) == PK_HTTP_TIMEOUT,
             "want 200: a 503 does not");
    TU_CHECK(lc_now_ms() - t0 >= 300, "not before the 300 ms");
    httpd_stop(&h);

    /* the child exits first: its status */
    const char *dies[] = {"sh", "-c", "exit 7", NULL};
    pid = pk_spawn(dies, NULL, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    port = pk_free_port();
    w.timeout_ms = (int)tu_slack(5000);
    t0 = lc_now_ms();
    TU_CHECK(pk_http_wait_healthy(pid, &port, &w, &st) == PK_HTTP_EXITED && WIFEXITED(st) &&
                 WEXITSTATUS(st) == 7,
             "exited, status 7 (wait status %d)", st);
    TU_CHECK(lc_now_ms() - t0 < tu_slack(2000), "seen at once, not at the timeout");

    /* nothing answers: the timeout, the child left running */
    const char *sleeper[] = {"sleep", "30", NULL};
    pid = pk_spawn(sleeper, NULL, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    w.timeout_ms = 300;
    t0 = lc_now_ms();
    TU_CHECK(pk_http_wait_healthy(pid, &port, &w, &st) == PK_HTTP_TIMEOUT, "timeout");
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(took >= 300 && took < tu_slack(2000), "after 300 ms (%lld)", (long long)took);
    TU_CHECK(pk_wait_exit(pid, 0) == 0, "the child still runs");

    /* Ctrl-C: ends the wait at once */
    volatile sig_atomic_t stop = 1;
    w.stop = &stop;
    w.timeout_ms = 10000;
    t0 = lc_now_ms();
    TU_CHECK(pk_http_wait_healthy(pid, &port, &w, &st) == PK_HTTP_TIMEOUT &&
                 lc_now_ms() - t0 < tu_slack(1500),
             "stop set: TIMEOUT at once");
    pk_kill(pid);
}

static void test_fwd(void)
{
    tu_redis r;
    memset(&r, 0, sizeof r);
    TU_REQUIRE(tu_redis_start(&r, 0, NULL) == 0, "redis-server behind the forwarder");
    char err[256];
    int port = 0;
    pk_fwd *f = pk_fwd_start(r.port, &port, err, sizeof err);
    TU_REQUIRE(f != NULL && port > 0 && port != r.port, "forwarder: %s", err);
    TU_CHECK(pk_redis_ping(port, 1000) == 1, "PING through it");
    pk_fwd_freeze(f, 1);
    TU_CHECK(pk_redis_ping(port, 300) == 0, "frozen: no answer");
    pk_fwd_freeze(f, 0);
    TU_CHECK(pk_redis_ping(port, 1000) == 1, "thawed: answers again");
    pk_fwd_stop(f);
    pk_fwd_stop(NULL);
    TU_CHECK(pk_redis_ping(port, 300) == 0, "stopped: nothing listens");
    int dead = 0;
    f = pk_fwd_start(pk_free_port(), &dead, err, sizeof err);
    TU_REQUIRE(f != NULL, "a forwarder to nothing: %s", err);
    TU_CHECK(pk_redis_ping(dead, 300) == 0, "upstream refused: the client is closed");
    pk_fwd_stop(f);
    tu_redis_stop(&r);
}

/* A cluster of 3 masters and 3 replicas: every node ok, every slot served
 * by a node of the cluster; a master SIGKILLed, its replica promoted and
 * the cluster ok again without it (cluster-node-timeout 1000 ms). */
static void test_cluster(void)
{
    pk_cluster c;
    pk_cluster_opts o;
    pk_cluster_opts_init(&o);
    o.dir = dir;
    char err[512];
    int64_t t0 = lc_now_ms();
    TU_REQUIRE(pk_cluster_start(&c, &o, err, sizeof err) == 0, "cluster: %s", err);
    fprintf(stderr, "cluster of %d nodes ok in %lld ms\n", c.n, (long long)(lc_now_ms() - t0));
    TU_CHECK(c.n == 6 && c.masters == 3, "3 masters and 3 replicas (%d)", c.n);
    for (int i = 0; i < c.n; i++)
        TU_CHECK(c.port[i] > 0 && c.port[i] <= 55535, "node %d port %d leaves room for its bus", i,
                 c.port[i]);
    int slots[] = {0, 5460, 5461, 12182, 16383};
    int victim = -1;
    for (size_t k = 0; k < sizeof slots / sizeof slots[0]; k++) {
        int p = pk_cluster_slot_port(&c, slots[k]);
        int known = 0;
        for (int i = 0; i < c.n; i++)
            if (c.port[i] == p) {
                known = 1;
                if (slots[k] == 0)
                    victim = i;
            }
        TU_CHECK(known, "slot %d served by a node of the cluster (%d)", slots[k], p);
    }
    TU_REQUIRE(victim >= 0, "slot 0's master found");
    int before = pk_cluster_slot_port(&c, 0);
    pk_cluster_kill(&c, victim);
    t0 = lc_now_ms();
    /* The others notice after cluster-node-timeout; until then they still
     * say ok and name the dead master. */
    int after = before;
    while (after == before && lc_now_ms() - t0 < tu_slack(15000)) {
        pk_sleep_ms(50);
        after = pk_cluster_slot_port(&c, 0);
    }
    TU_CHECK(pk_cluster_wait_ok(&c, (int)tu_slack(15000), NULL), "ok again without node %d",
             victim);
    fprintf(stderr, "slot 0: master %d killed, served by %d after %lld ms\n", before, after,
            (long long)(lc_now_ms() - t0));
    TU_CHECK(after > 0 && after != before, "slot 0 moved to the promoted replica (%d)", after);
    pk_cluster_stop(&c);
    TU_CHECK(c.n == 0, "stopped");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "spawn-sleeper") == 0)
        return spawn_sleeper(argv[2]);
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    test_ports_and_spawn();
    test_stop_and_kill();
    test_die_with_parent();
    test_redis();
    test_http();
    test_wait_healthy();
    test_fwd();
    test_cluster();
    pk_kill_all(1000);
    if (tu_failed == 0)
        pk_rm_tree(dir);
    else
        fprintf(stderr, "logs kept in %s\n", dir);
    return tu_done();
}
