/* test_lc_redlock — the redlock mode against five private redis-servers:
 * the options' checks, the drift formula, a majority with two nodes killed,
 * a release that too few answer while another attempt is pending on the
 * same connection (LC_IO, no crash), a refusal with three killed that
 * leaves no key behind, the validity's
 * bound, a SIGSTOPped node costing at most one node timeout, a node that
 * grants after the majority answered losing its key at the release, a
 * node whose script cache was flushed still deleting (EVAL),
 * a release past the validity (LC_LOST), reconnection after a restart, a
 * failed quorum against another holder that takes back its own keys, the
 * restart caveat (a node restarted empty votes a second holder in) and the
 * restart delay that closes it, and
 * (argument "threads", also run under TSan) mutual exclusion between
 * threads around a non-atomic GET/SET increment. */
#include "lc_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>

#define NODES 5
/* Far above a loaded machine's scheduling stalls, so only the stopped node
 * times out; the threaded run takes longer still (TSan). */
#define NODE_TIMEOUT 200
#define NODE_TIMEOUT_THREADS 1000

static tu_redis red[NODES];
static char node_names[NODES][32];
static const char *nodes[NODES];
static lc_client *cli;

static lc_client *redlock_client(int node_count, const char *const *list, int timeout_ms, char *err,
                                 size_t errlen, lc_status *st)
{
    lc_options o;
    lc_options_init(&o);
    o.redlock_node_timeout_ms = timeout_ms;
    o.redis_port = red[0].port;
    o.retry_interval_ms = 5;
    o.redlock_nodes = list;
    o.redlock_node_count = node_count;
    lc_client *c = NULL;
    *st = lc_client_new(&o, &c, err, errlen);
    return c;
}

/* How many live nodes hold key (killed ones are skipped). */
static int holders(const char *key)
{
    int n = 0;
    for (int i = 0; i < NODES; i++) {
        if (red[i].pid > 0 && tu_redis_int(red[i].port, "EXISTS %s", key) == 1)
            n++;
    }
    return n;
}

static void test_options(void)
{
    char err[256];
    lc_status st;
    lc_client *c = redlock_client(4, nodes, NODE_TIMEOUT, err, sizeof err, &st);
    TU_CHECK(st == LC_MISUSE && !c && strstr(err, "odd"), "4 nodes refused: %s", err);
    const char *dup[] = {nodes[0], nodes[1], nodes[0]};
    c = redlock_client(3, dup, NODE_TIMEOUT, err, sizeof err, &st);
    TU_CHECK(st == LC_MISUSE && !c && strstr(err, "twice") && strstr(err, nodes[0]),
             "a duplicate node is named: %s", err);
    const char *bad[] = {nodes[0], nodes[1], "127.0.0.1"};
    c = redlock_client(3, bad, NODE_TIMEOUT, err, sizeof err, &st);
    TU_CHECK(st == LC_MISUSE && !c && strstr(err, "host:port"), "no port refused: %s", err);
    c = redlock_client(1, nodes, NODE_TIMEOUT, err, sizeof err, &st);
    TU_CHECK(st == LC_MISUSE && !c, "1 node refused: %s", err);
    /* A typo is refused here, not found as "0 of 3 answered" later. */
    const char *typos[] = {"127.0.0.1: 80", "127.0.0.1:+80", "127.0.0.1:80:90",
                           "a b:80",        "h\r\n:80",      "[::1]:80",
                           "h:80x",         "h:65536",       ":80"};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
        const char *t[] = {nodes[0], nodes[1], typos[i]};
        c = redlock_client(3, t, NODE_TIMEOUT, err, sizeof err, &st);
        TU_CHECK(st == LC_MISUSE && !c && strstr(err, "host:port"), "node '%s' refused: %s",
                 typos[i], err);
    }
    c = redlock_client(3, NULL, NODE_TIMEOUT, err, sizeof err, &st);
    TU_CHECK(st == LC_MISUSE && !c && strstr(err, "NULL"), "no node list: %s", err);

    /* Without nodes the mode is not offered. */
    lc_client *plain = lct_client(red[0].port, 0);
    lc_conn *conn = lct_conn(plain);
    lc_lock_args a = lct_args(LC_REDLOCK, "lctest:{rl-none}:lock", "o", 1000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_MISUSE && !g, "redlock without nodes: misuse (%s)",
             lc_conn_errstr(conn));
    TU_CHECK(lc_acquire_send(conn, &a, NULL) == LC_MISUSE &&
                 strstr(lc_conn_errstr(conn), "redlock_nodes"),
             "lc_acquire_send refuses it too: %s", lc_conn_errstr(conn));
    lc_conn_free(conn);
    lc_client_free(plain);

    /* A lease no round trip can leave valid is refused, not reported as
     * contention on every try. */
    lc_client *rc = redlock_client(3, nodes, NODE_TIMEOUT, err, sizeof err, &st);
    TU_REQUIRE(st == LC_OK, "client: %s", err);
    lc_conn *rconn = lct_conn(rc);
    a = lct_args(LC_REDLOCK, "lctest:{rl-short}:lock", "o", 2, 0);
    TU_CHECK(lc_acquire(rconn, &a, &g) == LC_MISUSE && !g && strstr(lc_conn_errstr(rconn), "drift"),
             "lease 2 ms: misuse (%s)", lc_conn_errstr(rconn));
    lc_conn_free(rconn);
    lc_client_free(rc);

    lc_mode m;
    TU_CHECK(lc_mode_parse("redlock", &m) == 0 && m == LC_REDLOCK &&
                 strcmp(lc_mode_name(LC_REDLOCK), "redlock") == 0,
             "the mode's name");
}

static void test_drift(void)
{
    TU_CHECK(lc_redlock_drift_ms(10000) == 102, "drift(10000) = 102");
    TU_CHECK(lc_redlock_drift_ms(30000) == 302, "drift(30000) = 302");
    TU_CHECK(lc_redlock_drift_ms(150) == 3, "drift(150) = 3 (1 %% rounded down, + 2)");
    TU_CHECK(lc_redlock_drift_ms(1) == 2, "drift(1) = 2");
}

/* Acquire and release on the nodes up now; checks the token on each
 * holder and the validity bound. Returns the acquire's time in ms. */
static int64_t cycle(lc_conn *conn, const char *key, int64_t lease, int expect_holders)
{
    lc_lock_args a = lct_args(LC_REDLOCK, key, "o", lease, 0);
    lc_guard *g = NULL;
    int64_t t0 = lc_now_ms();
    lc_status s = lc_acquire(conn, &a, &g);
    int64_t t1 = lc_now_ms();
    TU_CHECK(s == LC_OK, "acquired (%s: %s)", lc_status_name(s), lc_conn_errstr(conn));
    if (s != LC_OK)
        return t1 - t0;
    int64_t v = lc_guard_validity_ms(g);
    int64_t drift = lc_redlock_drift_ms(lease);
    TU_CHECK(v <= lease - drift && v >= lease - drift - (lc_now_ms() - t0) - 1,
             "validity %lld within lease - elapsed - drift (elapsed %lld)", (long long)v,
             (long long)(t1 - t0));
    TU_CHECK(holders(key) == expect_holders, "%d nodes hold the key", expect_holders);
    for (int i = 0; i < NODES; i++) {
        char val[64];
        if (red[i].pid > 0 && tu_redis_str(red[i].port, val, sizeof val, "GET %s", key) == 0)
            TU_CHECK(strcmp(val, lc_guard_owner_token(g)) == 0, "node %d: one token on all", i);
    }
    TU_CHECK(lc_release(conn, g) == LC_OK, "released (%s)", lc_conn_errstr(conn));
    TU_CHECK(holders(key) == 0, "no node holds the key after release");
    return t1 - t0;
}

static void test_basic(void)
{
    lc_conn *conn = lct_conn(cli), *other = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "basic", LC_REDLOCK);
    cycle(conn, key, 10000, NODES);

    lc_lock_args a = lct_args(LC_REDLOCK, key, "a", 10000, 0);
    lc_lock_args b = lct_args(LC_REDLOCK, key, "b", 10000, 100);
    lc_guard *g = NULL, *h = NULL;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "holder");
    int64_t t0 = lc_now_ms();
    TU_CHECK(lc_acquire(other, &b, &h) == LC_BUSY && !h, "a second owner is busy");
    int64_t took = lc_now_ms() - t0;
    /* The last attempt may start just before the deadline: one round and
     * its cleanup round, each bounded by the node timeout. */
    TU_CHECK(took >= 100 && took < tu_slack(100 + 2 * NODE_TIMEOUT + 400),
             "waited its wait_ms (%lld ms)", (long long)took);
    TU_CHECK(holders(key) == NODES, "the holder's key survives the loser's cleanup");
    TU_CHECK(lc_guard_lost(g) == 0, "not lost while valid");
    TU_CHECK(lc_extend(conn, g, 1000) == LC_MISUSE, "no extend in redlock");
    TU_CHECK(lc_release(conn, g) == LC_OK, "release");

    /* A release after the validity ran out: LC_LOST. */
    a.lease_ms = 100;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "short lease");
    tu_sleep_ms(120);
    TU_CHECK(lc_guard_validity_ms(g) == 0 && lc_guard_lost(g) == 1, "validity ran out");
    lc_status s = lc_release(conn, g);
    TU_CHECK(s == LC_LOST, "late release is lost (%s)", lc_status_name(s));

    /* A released lock's token no longer deletes anything. */
    a.lease_ms = 10000;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "again");
    for (int i = 0; i < NODES; i++)
        tu_redis_int(red[i].port, "DEL %s", key);
    s = lc_release(conn, g);
    TU_CHECK(s == LC_NOT_OWNER, "release of a vanished lock is not-owner (%s)", lc_status_name(s));
    lc_conn_free(other);
    lc_conn_free(conn);
}

static void test_noscript(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "noscript", LC_REDLOCK);
    cycle(conn, key, 10000, NODES); /* every node has the script now */
    lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, 0);
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "acquired");
    char ok[16];
    TU_CHECK(tu_redis_str(red[2].port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && strcmp(ok, "OK") == 0,
             "flushed node 2");
    lc_status s = lc_release(conn, g);
    TU_CHECK(s == LC_OK, "release after SCRIPT FLUSH (%s: %s)", lc_status_name(s),
             lc_conn_errstr(conn));
    /* EVALSHA alone would have left the key on the flushed node. */
    TU_CHECK(holders(key) == 0, "no node holds the key, the flushed one included");
    lc_conn_free(conn);
}

/* A SIGSTOPped node: the majority answers without it, so no call waits
 * for it longer than one node timeout (a call waits for it only when it is
 * RL_LATE_MAX replies behind, or to give up on it), and the validity
 * counts only the round's own time. */
static void test_stopped_node(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "sigstop", LC_REDLOCK);
    cycle(conn, key, 10000, NODES); /* connected to all five */
    TU_REQUIRE(kill(red[4].pid, SIGSTOP) == 0, "SIGSTOP node 4");
    for (int k = 0; k < 4; k++) {
        lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, 0);
        lc_guard *g = NULL;
        int64_t t0 = lc_now_ms();
        lc_status s = lc_acquire(conn, &a, &g);
        int64_t took = lc_now_ms() - t0;
        TU_CHECK(s == LC_OK, "acquired with node 4 stopped (%s)", lc_status_name(s));
        TU_CHECK(took <= tu_slack(NODE_TIMEOUT + 100),
                 "a stopped node costs at most one node timeout: %lld ms", (long long)took);
        if (g) {
            int64_t v = lc_guard_validity_ms(g);
            TU_CHECK(v <= 10000 - lc_redlock_drift_ms(10000) &&
                         v >= 10000 - lc_redlock_drift_ms(10000) - took - 1,
                     "validity within lease - elapsed - drift (%lld)", (long long)v);
            t0 = lc_now_ms();
            lc_status rs = lc_release(conn, g);
            took = lc_now_ms() - t0;
            TU_CHECK(rs == LC_OK, "released with node 4 stopped (%s: %s)", lc_status_name(rs),
                     lc_conn_errstr(conn));
            TU_CHECK(took <= tu_slack(NODE_TIMEOUT + 100),
                     "release: at most one node timeout: %lld ms", (long long)took);
        }
    }
    kill(red[4].pid, SIGCONT);
    /* Node 4 now runs what it was sent while stopped, in no set order
     * between connections: clear its copy. */
    tu_sleep_ms(50);
    tu_redis_int(red[4].port, "DEL %s", key);
    lc_conn_free(conn);
}

/* A node that answers after the majority did (stopped while the acquire
 * ran, continued before the release): its late OK is still a key of this
 * lock, and the release, which returns on a majority too, deletes it
 * there as well. */
static void test_late_node(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "late", LC_REDLOCK);
    cycle(conn, key, 10000, NODES); /* connected to all five */
    TU_REQUIRE(kill(red[4].pid, SIGSTOP) == 0, "SIGSTOP node 4");
    lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, 0);
    lc_guard *g = NULL;
    int64_t t0 = lc_now_ms();
    lc_status s = lc_acquire(conn, &a, &g);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(s == LC_OK && took < NODE_TIMEOUT,
             "acquired on the majority, before node 4's timeout (%s, %lld ms)", lc_status_name(s),
             (long long)took);
    kill(red[4].pid, SIGCONT);
    if (!g) {
        lc_conn_free(conn);
        return;
    }
    /* Node 4 runs the SET it was sent while stopped: it grants late. */
    int64_t until = lc_now_ms() + tu_slack(2000);
    while (tu_redis_int(red[4].port, "EXISTS %s", key) != 1 && lc_now_ms() < until)
        tu_sleep_ms(2);
    char val[64] = "";
    TU_CHECK(tu_redis_str(red[4].port, val, sizeof val, "GET %s", key) == 0 &&
                 strcmp(val, lc_guard_owner_token(g)) == 0,
             "node 4 granted late, with this lock's token");
    s = lc_release(conn, g);
    TU_CHECK(s == LC_OK, "released (%s: %s)", lc_status_name(s), lc_conn_errstr(conn));
    TU_CHECK(holders(key) == 0, "no node holds the key after release, the late one included");
    /* The late replies were read, not left to break the next cycle. */
    cycle(conn, key, 10000, NODES);
    lc_conn_free(conn);
}

/* total_connections_received of node i (this call's own included). */
static long long node_connects(int i)
{
    char info[8192];
    if (tu_redis_str(red[i].port, info, sizeof info, "INFO stats") != 0)
        return -1;
    const char *p = strstr(info, "total_connections_received:");
    return p ? atoll(p + strlen("total_connections_received:")) : -1;
}

/* A release returns on a majority; a slow node's reply then comes in time
 * but is read only by the next round, after its node timeout has passed.
 * That node answered: its context is kept (no new connection), it votes. */
static void test_late_reply_read_later(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "late-read", LC_REDLOCK);
    cycle(conn, key, 10000, NODES); /* connected to all five */
    lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, 0);
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK && g, "acquired on all five");
    TU_REQUIRE(kill(red[4].pid, SIGSTOP) == 0, "SIGSTOP node 4");
    lc_status s = lc_release(conn, g);
    kill(red[4].pid, SIGCONT);
    TU_CHECK(s == LC_OK, "released on the majority (%s)", lc_status_name(s));
    /* Node 4 runs the release it was sent while stopped and answers at
     * once; nobody reads that answer until the next round. */
    int64_t until = lc_now_ms() + tu_slack(2000);
    while (tu_redis_int(red[4].port, "EXISTS %s", key) != 0 && lc_now_ms() < until)
        tu_sleep_ms(2);
    TU_CHECK(holders(key) == 0, "node 4 deleted the key too");
    long long before = node_connects(4);
    /* Not sleep-and-hope: the wait makes the next round start past node
     * 4's node timeout, with its reply long in the socket. */
    tu_sleep_ms(NODE_TIMEOUT + 100);
    g = NULL;
    s = lc_acquire(conn, &a, &g);
    long long after = node_connects(4); /* nothing else connects in between */
    TU_CHECK(s == LC_OK && g, "acquired again (%s: %s)", lc_status_name(s), lc_conn_errstr(conn));
    TU_CHECK(before >= 0 && after == before + 1, /* + the second count's own connection */
             "node 4's context was kept: its reply had come in time (connections %lld -> %lld)",
             before, after);
    TU_CHECK(holders(key) == NODES, "all five voted");
    if (g)
        TU_CHECK(lc_release(conn, g) == LC_OK, "released");
    lc_conn_free(conn);
}

static void test_nodes_down(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "down", LC_REDLOCK);
    cycle(conn, key, 10000, NODES);
    lc_stats ls;
    lc_client_stats(cli, &ls);
    TU_CHECK(ls.redlock_nodes_down == 0, "every node up: no bit (0x%x)", ls.redlock_nodes_down);
    tu_redis_kill(&red[3], 1);
    tu_redis_kill(&red[4], 1);
    cycle(conn, key, 10000, 3);
    /* a round may return on its majority before a dead node's failure
     * shows: the next ones see it */
    int64_t until = lc_now_ms() + tu_slack(3000);
    for (lc_client_stats(cli, &ls);
         ls.redlock_nodes_down != (1u << 3 | 1u << 4) && lc_now_ms() < until;
         lc_client_stats(cli, &ls))
        cycle(conn, key, 10000, 3);
    TU_CHECK(ls.redlock_nodes_down == (1u << 3 | 1u << 4), "nodes 3 and 4 down: bits 0x%x",
             ls.redlock_nodes_down);

    /* A release that too few nodes answer (LC_IO) while an attempt sent by
     * lc_acquire_send is pending on conn's own context: the status, not a
     * crash, and the attempt still ends. */
    lc_lock_args rl = lct_args(LC_REDLOCK, key, "o", 10000, 0);
    lc_guard *rg = NULL, *tg = NULL;
    TU_REQUIRE(lc_acquire(conn, &rl, &rg) == LC_OK && rg, "redlock on 3 of 5");
    char tkey[128];
    lct_key(tkey, sizeof tkey, "down-pending", LC_TOKEN);
    lc_lock_args ta = lct_args(LC_TOKEN, tkey, "o", 10000, 0);
    TU_REQUIRE(lc_acquire_send(conn, &ta, NULL) == LC_OK, "a token attempt sent");
    tu_redis_kill(&red[2], 1);
    lc_status rs = lc_release(conn, rg);
    TU_CHECK(rs == LC_IO, "2 of 5 answer the release: %s (%s)", lc_status_name(rs),
             lc_conn_errstr(conn));
    TU_CHECK(lc_acquire_pipe(conn, &ta, NULL, &tg) == LC_OK && tg, "the sent attempt still ends");
    TU_CHECK(tg && lc_release(conn, tg) == LC_OK, "and is released");

    for (int wait = 0; wait <= 500; wait += 500) {
        lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, wait);
        lc_guard *g = NULL;
        int64_t t0 = lc_now_ms();
        lc_status s = lc_acquire(conn, &a, &g);
        int64_t took = lc_now_ms() - t0;
        TU_CHECK(s == LC_IO && !g, "2 of 5 nodes: io (%s: %s)", lc_status_name(s),
                 lc_conn_errstr(conn));
        TU_CHECK(took < tu_slack(300), "io at once, even with wait_ms %d (%lld ms)", wait,
                 (long long)took);
        TU_CHECK(holders(key) == 0, "no live node keeps the key after a refusal");
    }

    for (int i = 2; i < NODES; i++)
        TU_REQUIRE(tu_redis_start(&red[i], 1, NULL) == 0, "restart node %d", i);
    cycle(conn, key, 10000, NODES); /* each node reconnected */
    until = lc_now_ms() + tu_slack(3000);
    for (lc_client_stats(cli, &ls); ls.redlock_nodes_down != 0 && lc_now_ms() < until;
         lc_client_stats(cli, &ls))
        cycle(conn, key, 10000, NODES);
    TU_CHECK(ls.redlock_nodes_down == 0, "every node back: no bit (0x%x)", ls.redlock_nodes_down);
    lc_conn_free(conn);
}

/* A lost vote against another holder: the keys this attempt did get are
 * taken back, on every node, and the other holder's stay. */
static void test_split_vote(void)
{
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "split", LC_REDLOCK);
    for (int i = 0; i < 3; i++)
        tu_redis_int(red[i].port, "SET %s other PX 10000", key);
    lc_lock_args a = lct_args(LC_REDLOCK, key, "o", 10000, 0);
    lc_guard *g = NULL;
    lc_status s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_BUSY && !g, "2 of 5 votes: busy (%s)", lc_status_name(s));
    for (int i = 0; i < NODES; i++) {
        char val[64] = "";
        int got = tu_redis_str(red[i].port, val, sizeof val, "GET %s", key);
        if (i < 3)
            TU_CHECK(got == 0 && strcmp(val, "other") == 0, "node %d keeps the other holder's", i);
        else
            TU_CHECK(tu_redis_int(red[i].port, "EXISTS %s", key) == 0,
                     "node %d: the failed attempt's key is gone", i);
    }
    for (int i = 0; i < 3; i++)
        tu_redis_int(red[i].port, "DEL %s", key);
    lc_conn_free(conn);
}

/* The caveat: holder A has nodes 0..2 (3 and 4 were taken by someone
 * else for a moment), node 2 restarts without persistence and forgets A's
 * key; once 3 and 4 are free, B gets 2, 3 and 4, a majority, while A
 * still holds. With a restart delay node 2 does not vote until it has
 * been up that long, and B is refused. */
static void test_restart_delay(void)
{
    enum { DELAY = 2000 };
    char err[256];
    lc_status st;
    lc_client *late = NULL;
    {
        lc_options o;
        lc_options_init(&o);
        o.redlock_node_timeout_ms = NODE_TIMEOUT;
        o.redis_port = red[0].port;
        o.retry_interval_ms = 5;
        o.redlock_nodes = nodes;
        o.redlock_node_count = NODES;
        o.redlock_restart_delay_ms = -1;
        st = lc_client_new(&o, &late, err, sizeof err);
        TU_CHECK(st == LC_MISUSE && !late && strstr(err, "restart_delay"),
                 "a negative delay refused: %s", err);
        o.redlock_restart_delay_ms = DELAY;
        st = lc_client_new(&o, &late, err, sizeof err);
        TU_REQUIRE(st == LC_OK && late, "client with a restart delay: %s", err);
    }
    lc_conn *ca = lct_conn(cli), *cb = lct_conn(cli), *cd = lct_conn(late);
    char key[128];
    lct_key(key, sizeof key, "restart", LC_REDLOCK);
    /* The nodes were (re)started moments ago: wait until each has been up
     * for the delay and votes (poll with a deadline), then cd is connected
     * to every node and past the check. */
    int64_t until = lc_now_ms() + tu_slack(DELAY + 3000);
    int all = 0;
    while (!all && lc_now_ms() < until) {
        lc_lock_args w = lct_args(LC_REDLOCK, key, "w", 10000, 0);
        lc_guard *gw = NULL;
        if (lc_acquire(cd, &w, &gw) == LC_OK) {
            all = holders(key) == NODES;
            lc_release(cd, gw);
        }
        if (!all)
            tu_sleep_ms(50);
    }
    TU_REQUIRE(all, "every node votes once it has been up %d ms", DELAY);
    for (int i = 3; i < NODES; i++)
        tu_redis_int(red[i].port, "SET %s blocker PX 300", key);
    lc_lock_args a = lct_args(LC_REDLOCK, key, "a", 10000, 0);
    lc_guard *ga = NULL, *gb = NULL, *gd = NULL;
    TU_REQUIRE(lc_acquire(ca, &a, &ga) == LC_OK, "A holds nodes 0..2");
    TU_CHECK(holders(key) == NODES, "3 of A's and 2 blockers");
    static const char *const no_save[] = {"--save", "", NULL};
    tu_redis_kill(&red[2], 1);
    /* The node's uptime starts between these two times: it cannot have
     * been up longer than since spawned. */
    int64_t spawned = lc_now_ms();
    TU_REQUIRE(tu_redis_start(&red[2], 1, no_save) == 0, "node 2 restarted empty");
    int64_t restarted = lc_now_ms();
    /* Wait for the blockers' PX to end (poll with a deadline). */
    until = lc_now_ms() + tu_slack(3000);
    while ((tu_redis_int(red[3].port, "EXISTS %s", key) == 1 ||
            tu_redis_int(red[4].port, "EXISTS %s", key) == 1) &&
           lc_now_ms() < until)
        tu_sleep_ms(20);
    TU_CHECK(holders(key) == 2, "only A's keys on nodes 0 and 1 are left");

    lc_lock_args d = lct_args(LC_REDLOCK, key, "d", 10000, 0);
    lc_status s = lc_acquire(cd, &d, &gd);
    TU_CHECK(s == LC_BUSY && !gd, "with the delay, the restarted node does not vote: %s (%s)",
             lc_status_name(s), lc_conn_errstr(cd));
    TU_CHECK(lc_now_ms() - restarted < DELAY, "(checked within the delay)");
    TU_CHECK(tu_redis_int(red[2].port, "EXISTS %s", key) == 0, "no SET was sent to node 2");

    lc_lock_args b = lct_args(LC_REDLOCK, key, "b", 10000, 0);
    s = lc_acquire(cb, &b, &gb);
    TU_CHECK(s == LC_OK && gb, "without it, a second holder gets a majority: %s",
             lc_status_name(s));
    if (gb)
        TU_CHECK(lc_release(cb, gb) == LC_OK, "B released");
    /* A's majority is gone (node 2 forgot it): its release says so. */
    s = lc_release(ca, ga);
    TU_CHECK(s == LC_NOT_OWNER, "A's release: not_owner, 2 of 5 keys left (%s)", lc_status_name(s));

    /* The node votes again once it has been up for the delay: poll until
     * all five hold the key (with a deadline). */
    int voted = 0;
    int64_t up = 0;
    until = lc_now_ms() + tu_slack(DELAY + 3000);
    while (!voted && lc_now_ms() < until) {
        s = lc_acquire(cd, &d, &gd);
        up = lc_now_ms() - spawned; /* at least its uptime */
        if (s == LC_OK) {
            voted = tu_redis_int(red[2].port, "EXISTS %s", key) == 1;
            lc_release(cd, gd);
        }
        if (!voted)
            tu_sleep_ms(50);
    }
    TU_CHECK(voted && up >= DELAY,
             "node 2 votes again, not before %d ms up (%lld ms since spawned)", DELAY,
             (long long)up);
    lc_conn_free(ca);
    lc_conn_free(cb);
    lc_conn_free(cd);
    lc_client_free(late);
}

/* --- threads ------------------------------------------------------------ */

typedef struct incr_job {
    const char *key, *counter;
    int iterations, failures;
} incr_job;

static void *incr_main(void *arg)
{
    incr_job *j = arg;
    lc_conn *conn = lct_conn(cli);
    for (int i = 0; i < j->iterations; i++) {
        lc_lock_args a = lct_args(LC_REDLOCK, j->key, "t", 10000, 20000);
        lc_guard *g = NULL;
        if (lc_acquire(conn, &a, &g) != LC_OK) {
            j->failures++;
            continue;
        }
        /* The counter lives on the data server (lc_conn_redis), not on the
         * lock's nodes. */
        redisContext *ctx = lc_conn_redis(conn);
        redisReply *r = ctx ? redisCommand(ctx, "GET %s", j->counter) : NULL;
        long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        if (r)
            freeReplyObject(r);
        usleep(200);
        r = ctx ? redisCommand(ctx, "SET %s %ld", j->counter, v + 1) : NULL;
        if (r)
            freeReplyObject(r);
        if (lc_release(conn, g) != LC_OK)
            j->failures++;
    }
    lc_conn_free(conn);
    return NULL;
}

static void test_threads(void)
{
    enum { THREADS = 4, ITER = 40 };
    char key[128], counter[160];
    lct_key(key, sizeof key, "excl", LC_REDLOCK);
    snprintf(counter, sizeof counter, "%s:counter", key);
    pthread_t t[THREADS];
    incr_job j[THREADS];
    for (int i = 0; i < THREADS; i++) {
        j[i] = (incr_job){.key = key, .counter = counter, .iterations = ITER};
        pthread_create(&t[i], NULL, incr_main, &j[i]);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += j[i].failures;
    }
    int64_t v = tu_redis_int(red[0].port, "GET %s", counter);
    TU_CHECK(failures == 0, "no failed acquire or release (%d)", failures);
    TU_CHECK(v == THREADS * ITER, "mutual exclusion: counter %lld of %d", (long long)v,
             THREADS * ITER);
    TU_CHECK(holders(key) == 0, "no node holds the key at the end");
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(s.io_errors == 0, "no I/O errors (%llu)", (unsigned long long)s.io_errors);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    bool threads = argc > 1 && strcmp(argv[1], "threads") == 0;
    for (int i = 0; i < NODES; i++) {
        TU_REQUIRE(tu_redis_start(&red[i], 0, NULL) == 0, "start node %d", i);
        snprintf(node_names[i], sizeof node_names[i], "127.0.0.1:%d", red[i].port);
        nodes[i] = node_names[i];
    }
    char err[256];
    lc_status st;
    cli = redlock_client(NODES, nodes, threads ? NODE_TIMEOUT_THREADS : NODE_TIMEOUT, err,
                         sizeof err, &st);
    TU_REQUIRE(st == LC_OK && cli, "client with 5 nodes: %s", err);
    if (threads) {
        test_threads();
    } else {
        test_options();
        test_drift();
        test_basic();
        test_noscript();
        test_stopped_node();
        test_late_node();
        test_late_reply_read_later();
        test_nodes_down();
        test_split_vote();
        test_restart_delay();
    }
    lc_client_free(cli);
    for (int i = 0; i < NODES; i++)
        tu_redis_stop(&red[i]);
    return tu_done();
}
