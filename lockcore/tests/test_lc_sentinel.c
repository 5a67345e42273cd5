/* test_lc_sentinel.c — lockcore asks Redis Sentinel for the master.
 *
 * The options' checks; then a master (known by a front forwarder's port),
 * one replica and three Sentinels (pk_ha.h): the client connects to the
 * master they name and lc_client_master says so; the front is frozen (the
 * connection stays open, no EOF, as for a master cut off the network) and
 * the master SIGKILLed. The watcher learns +switch-master, so the next call
 * on the idle connection goes to the new master at once instead of timing
 * out on the old one; the switch is counted; a token lock works there.
 * Then a manual SENTINEL FAILOVER sent to the first Sentinel listed, the
 * failover's leader, which announces +switch-master last, once the other
 * replica is reconfigured: the client follows the first announcement of the
 * others within milliseconds (watching the first Sentinel alone, it kept
 * writing to the old master, still a writable master, until then), a
 * write's connection to the old master is no way back for its WAIT
 * (lc_conn_pipe_via refuses it), and neither a reconnect nor a fresh client
 * goes to the old master meanwhile.
 */
#include "lc_test.h"
#include "pk_ha.h"
#include "pk_proc.h"
#include "pk_redis.h"

static lc_status make(const char *const *sentinels, int n, const char *name, char *err, size_t len)
{
    lc_options o;
    lc_options_init(&o);
    o.sentinels = sentinels;
    o.sentinel_count = n;
    o.master_name = name;
    lc_client *c = NULL;
    lc_status s = lc_client_new(&o, &c, err, len);
    lc_client_free(c);
    return s;
}

static void test_options(void)
{
    char err[256];
    const char *one[] = {"127.0.0.1:26379"};
    TU_CHECK(make(one, 1, NULL, err, sizeof err) == LC_MISUSE && strstr(err, "master_name"),
             "no master name: %s", err);
    TU_CHECK(make(one, 1, "", err, sizeof err) == LC_MISUSE, "empty master name: %s", err);
    const char *bad[] = {"nohost"};
    TU_CHECK(make(bad, 1, "m", err, sizeof err) == LC_MISUSE && strstr(err, "nohost"),
             "not host:port: %s", err);
    const char *port0[] = {"127.0.0.1:0"};
    TU_CHECK(make(port0, 1, "m", err, sizeof err) == LC_MISUSE && strstr(err, "port"), "port 0: %s",
             err);
    const char *many[10];
    for (int i = 0; i < 10; i++)
        many[i] = "127.0.0.1:26379";
    TU_CHECK(make(many, 10, "m", err, sizeof err) == LC_MISUSE, "10 sentinels: %s", err);
    const char *twice[] = {"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26379"};
    TU_CHECK(make(twice, 3, "m", err, sizeof err) == LC_MISUSE && strstr(err, "twice"),
             "a Sentinel listed twice: %s", err);
    const char *typo[] = {"127.0.0.1: 26379"};
    TU_CHECK(make(typo, 1, "m", err, sizeof err) == LC_MISUSE && strstr(err, "host:port"),
             "a space before the port: %s", err);
    TU_CHECK(make(one, 1, "m", err, sizeof err) == LC_OK, "one sentinel: %s", err);
}

/* No Sentinel answers: LC_IO naming them, quickly (each asked once). */
static void test_none_answers(void)
{
    char a[32], b[32];
    snprintf(a, sizeof a, "127.0.0.1:%d", pk_free_port());
    snprintf(b, sizeof b, "127.0.0.1:%d", pk_free_port());
    const char *s[] = {a, b};
    lc_options o;
    lc_options_init(&o);
    o.sentinels = s;
    o.sentinel_count = 2;
    o.master_name = "mymaster";
    lc_client *c = NULL;
    char err[256];
    TU_REQUIRE(lc_client_new(&o, &c, err, sizeof err) == LC_OK, "client: %s", err);
    lc_conn *conn = lct_conn(c);
    int64_t t0 = lc_now_ms();
    TU_CHECK(lc_conn_ping(conn) == LC_IO, "no Sentinel: LC_IO");
    TU_CHECK(strstr(lc_conn_errstr(conn), "sentinel: no master mymaster") &&
                 strstr(lc_conn_errstr(conn), a),
             "the reason names them: %s", lc_conn_errstr(conn));
    TU_CHECK(lc_now_ms() - t0 < tu_slack(2000), "and fails fast: %lld ms",
             (long long)(lc_now_ms() - t0));
    char m[64];
    lc_client_master(c, m, sizeof m);
    TU_CHECK(m[0] == 0, "no master known: '%s'", m);
    lc_conn_free(conn);
    lc_client_free(c);
}

static void test_failover(void)
{
    char dir[] = "/tmp/miaosha-lc-sentinel-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "temp dir");
    pk_ha h;
    pk_ha_opts ho = {.server = getenv("MIAOSHA_REDIS_SERVER"),
                     .dir = dir,
                     .replicas = 1,
                     .fronted = 1,
                     .down_after_ms = 500,
                     .failover_timeout_ms = 2000,
                     .flags = PK_SPAWN_DIE_WITH_PARENT};
    char err[256];
    TU_REQUIRE(pk_ha_start(&h, &ho, err, sizeof err) == 0, "topology: %s", err);
    char s1[32], s2[32], s3[32];
    snprintf(s1, sizeof s1, "127.0.0.1:%d", h.sentinel_port[0]);
    snprintf(s2, sizeof s2, "127.0.0.1:%d", h.sentinel_port[1]);
    snprintf(s3, sizeof s3, "127.0.0.1:%d", h.sentinel_port[2]);
    const char *s[] = {s1, s2, s3};
    lc_options o;
    lc_options_init(&o);
    o.sentinels = s;
    o.sentinel_count = 3;
    o.master_name = PK_HA_NAME;
    o.command_timeout_ms = 2000;
    lc_client *c = NULL;
    TU_REQUIRE(lc_client_new(&o, &c, err, sizeof err) == LC_OK, "client: %s", err);
    lc_conn *conn = lct_conn(c);
    TU_CHECK(lc_conn_ping(conn) == LC_OK, "ping the master: %s", lc_conn_errstr(conn));
    char m[64], want[64];
    lc_client_master(c, m, sizeof m);
    snprintf(want, sizeof want, "127.0.0.1:%d", h.addr_port);
    TU_CHECK(!strcmp(m, want), "master %s, want %s", m, want);

    pk_ha_freeze_front(&h, 1);
    int64_t t_kill = lc_now_ms();
    pk_kill(h.master_pid);
    h.master_pid = 0;
    int newport = -1;
    while (lc_now_ms() - t_kill < tu_slack(10000)) {
        newport = pk_ha_master_port(&h);
        if (newport > 0 && newport != h.addr_port)
            break;
        tu_sleep_ms(10);
    }
    TU_REQUIRE(newport > 0 && newport != h.addr_port, "Sentinel promoted the replica");
    snprintf(want, sizeof want, "127.0.0.1:%d", newport);
    while (lc_now_ms() - t_kill < tu_slack(12000)) {
        lc_client_master(c, m, sizeof m);
        if (!strcmp(m, want))
            break;
        tu_sleep_ms(10);
    }
    TU_CHECK(!strcmp(m, want), "the watcher learned the switch: %s, want %s", m, want);
    printf("failover: kill -> promoted %lld ms\n", (long long)(lc_now_ms() - t_kill));
    /* The idle connection still points at the frozen front: dropped
     * before the command, not timed out on it. */
    int64_t t0 = lc_now_ms();
    TU_CHECK(lc_conn_ping(conn) == LC_OK, "ping after the switch: %s", lc_conn_errstr(conn));
    TU_CHECK(lc_now_ms() - t0 < 1000, "without waiting for the old master: %lld ms",
             (long long)(lc_now_ms() - t0));
    lc_stats st;
    lc_client_stats(c, &st);
    TU_CHECK(st.master_switches == 1, "one switch counted: %llu",
             (unsigned long long)st.master_switches);
    lc_lock_args a = lct_args(LC_TOKEN, "lct:{sentinel}:lock", "o1", 5000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_OK, "token lock on the new master: %s",
             lc_conn_errstr(conn));
    TU_CHECK(tu_redis_int(newport, "EXISTS lct:{sentinel}:lock") == 1, "the key is there");
    if (g)
        TU_CHECK(lc_release(conn, g) == LC_OK, "release");

    /* The master turned replica under the client (as a demoted master
     * does): a write answers -READONLY, the connection is dropped, and the
     * reconnect's ROLE check refuses the address the Sentinels still name. */
    tu_redis other;
    memset(&other, 0, sizeof other);
    TU_REQUIRE(tu_redis_start(&other, 0, NULL) == 0, "another redis");
    tu_redis_int(newport, "REPLICAOF 127.0.0.1 %d", other.port); /* +OK: not an integer */
    lc_pipe p;
    lc_pipe_init(&p);
    TU_REQUIRE(lc_pipe_append(&p, "SET lct:{sentinel}:k 1") == LC_OK, "append");
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_OK, "the write was answered");
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "READONLY", 8), "READONLY: %s",
             r && r->str ? r->str : "(no reply)");
    freeReplyObject(r);
    lc_pipe_clear(&p);
    TU_CHECK(lc_conn_ping(conn) == LC_IO && strstr(lc_conn_errstr(conn), "not a master"),
             "reconnected and refused a replica: %s", lc_conn_errstr(conn));
    tu_redis_int(newport, "REPLICAOF NO ONE");
    TU_CHECK(lc_conn_ping(conn) == LC_OK, "a master again: %s", lc_conn_errstr(conn));
    tu_redis_stop(&other);
    lc_conn_free(conn);
    lc_client_free(c);
    pk_ha_stop(&h);
    pk_rm_tree(dir);
}

/* The master's port in sentinel i's configuration (SENTINEL MASTER: the
 * address it announces; a failover's leader moves it only when the failover
 * ends), or -1. */
static int configured_by(const pk_ha *h, int i)
{
    const char *argv[] = {"SENTINEL", "master", PK_HA_NAME};
    char out[8192];
    if (pk_redis_query(h->sentinel_port[i], 300, 3, argv, out, sizeof out) != 1)
        return -1;
    const char *p = strstr(out, "\nport\n");
    return p ? atoi(p + 6) : -1;
}

/* The master port sentinel i names, or -1. */
static int named_by(const pk_ha *h, int i)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", PK_HA_NAME};
    char out[128];
    if (pk_redis_query(h->sentinel_port[i], 300, 3, argv, out, sizeof out) != 1)
        return -1;
    const char *nl = strchr(out, '\n');
    return nl ? atoi(nl + 1) : -1;
}

static lc_client *client_of(const pk_ha *h, char s[3][32])
{
    static const char *list[3];
    for (int i = 0; i < 3; i++) {
        snprintf(s[i], 32, "127.0.0.1:%d", h->sentinel_port[i]);
        list[i] = s[i];
    }
    lc_options o;
    lc_options_init(&o);
    o.sentinels = list;
    o.sentinel_count = 3;
    o.master_name = PK_HA_NAME;
    lc_client *c = NULL;
    char err[256];
    TU_REQUIRE(lc_client_new(&o, &c, err, sizeof err) == LC_OK, "client: %s", err);
    return c;
}

/* SET key on conn; 1 when it landed on port (and not on the other). */
static int set_lands_on(lc_conn *conn, const char *key, int port, int other)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "SET %s 1", key);
    int ok = lc_conn_pipe(conn, &p) == LC_OK;
    lc_pipe_clear(&p);
    return ok && tu_redis_int(port, "EXISTS %s", key) == 1 &&
           tu_redis_int(other, "EXISTS %s", key) == 0;
}

static void test_manual_failover(void)
{
    char dir[] = "/tmp/miaosha-lc-sentinel-m-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "temp dir");
    pk_ha h;
    /* a long failover-timeout: the leader ends the failover, and announces
     * it, only once the other replica is reconfigured, seconds later */
    pk_ha_opts ho = {.server = getenv("MIAOSHA_REDIS_SERVER"),
                     .dir = dir,
                     .replicas = 2,
                     .down_after_ms = 500,
                     .failover_timeout_ms = 20000,
                     .flags = PK_SPAWN_DIE_WITH_PARENT};
    char err[256], s[3][32], f[3][32];
    TU_REQUIRE(pk_ha_start(&h, &ho, err, sizeof err) == 0, "topology: %s", err);
    lc_client *c = client_of(&h, s);
    lc_conn *conn = lct_conn(c);
    TU_CHECK(lc_conn_ping(conn) == LC_OK, "ping the master: %s", lc_conn_errstr(conn));
    /* a write on the old master, whose WAIT comes after the switch */
    lc_pipe wp;
    lc_pipe_init(&wp);
    lc_pipe_append(&wp, "INCR lct:{sentinel}:w");
    TU_CHECK(lc_conn_pipe(conn, &wp) == LC_OK, "a write on the master (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&wp);
    uint64_t via = lc_conn_via(conn);
    const char *fo[] = {"SENTINEL", "FAILOVER", PK_HA_NAME};
    char ok[32] = "";
    int64_t t0 = lc_now_ms();
    TU_REQUIRE(pk_redis_query(h.sentinel_port[0], 1000, 3, fo, ok, sizeof ok) == 1 &&
                   !strcmp(ok, "OK"),
               "SENTINEL FAILOVER to the first Sentinel: %s", ok);
    int newport = -1;
    while (newport < 0 && lc_now_ms() - t0 < tu_slack(15000)) {
        for (int i = 1; i < 3 && newport < 0; i++) {
            int p = named_by(&h, i);
            if (p > 0 && p != h.master_port)
                newport = p;
        }
        if (newport < 0)
            tu_sleep_ms(5);
    }
    TU_REQUIRE(newport > 0, "another Sentinel names the promoted replica");
    int64_t t_named = lc_now_ms();
    char m[64], want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", newport);
    do
        lc_client_master(c, m, sizeof m);
    while (strcmp(m, want) && lc_now_ms() - t_named < tu_slack(3000) && (tu_sleep_ms(2), 1));
    int64_t follow = lc_now_ms() - t_named;
    TU_CHECK(!strcmp(m, want) && follow < tu_slack(500),
             "the client follows the first announcement: %s after %lld ms (want %s)", m,
             (long long)follow, want);
    printf("manual failover: a Sentinel names the new master -> the client follows: %lld ms\n",
           (long long)follow);
    /* The old master's connection is still open, the old master still a
     * writable master (the leader has not demoted it yet): a WAIT over it
     * would count the old master's replicas for a write the new one may
     * not have. Refused, nothing sent. */
    lc_pipe_append(&wp, "PING");
    TU_CHECK(via != 0 && lc_conn_pipe_via(conn, &wp, via) == LC_IO &&
                 strstr(lc_conn_errstr(conn), "Sentinel has named another master") != NULL,
             "lc_conn_pipe_via over the old master's connection after the switch: refused (%s)",
             lc_conn_errstr(conn));
    lc_pipe_clear(&wp);
    /* While the leader has not announced the switch yet (the old master is
     * a writable master until Sentinel demotes it): reconnects and a fresh
     * client go to the new one. */
    int lagged = configured_by(&h, 0) == h.master_port;
    lc_client *c2 = client_of(&h, f);
    lc_conn *conn2 = lct_conn(c2);
    for (int k = 0; k < 5; k++) {
        char key[64];
        snprintf(key, sizeof key, "lct:{sentinel}:m%d", k);
        tu_redis_int(newport, "CLIENT KILL TYPE normal"); /* our connections: reconnect */
        TU_CHECK(set_lands_on(conn, key, newport, h.master_port),
                 "reconnect %d: the write lands on the new master (%s)", k, lc_conn_errstr(conn));
    }
    TU_CHECK(set_lands_on(conn2, "lct:{sentinel}:fresh", newport, h.master_port),
             "a fresh client's first write lands on the new master (%s)", lc_conn_errstr(conn2));
    lc_client_master(c2, m, sizeof m);
    TU_CHECK(!strcmp(m, want), "a fresh client names %s (want %s)", m, want);
    TU_CHECK(lagged,
             "the checks ran before the leader announced the switch (the case tested): its "
             "configuration names %d",
             configured_by(&h, 0));
    lc_conn_free(conn2);
    lc_client_free(c2);
    lc_conn_free(conn);
    lc_client_free(c);
    pk_ha_stop(&h);
    pk_rm_tree(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_options();
    test_none_answers();
    test_failover();
    test_manual_failover();
    return tu_done();
}
