/* test_lc_cluster.c — lockcore's router on a real Redis Cluster (3 masters,
 * 3 replicas, cluster-node-timeout 1000 ms: pk_cluster.h), never a mock.
 *
 * The options; the map from a seed list whose first seed is down; every
 * mode of the lock core on keys of all three masters, with the caller's
 * commands in the lock's round trips; commands of two slots refused, never
 * sent (a release whose commands name another slot releases alone);
 * lc_conn_pipe_each over all three masters, also across a MOVED and
 * an ASK, and with two masters stopped (one command_timeout_ms for both);
 * lc_conn_pipes_each, one write per master for more than a pipe holds;
 * lc_conn_via and lc_conn_pipe_via (the connection that ran a write, and
 * WAIT's way back to it).
 * Then a slot migrated by hand, as redis-cli --cluster reshard does it
 * (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE key by key, SETSLOT NODE
 * on every master), at each step:
 *   - ASK for a key already moved, to a node this client never talked to,
 *     with ASKING before the command (without it the importing node would
 *     answer MOVED back: the ping-pong other clients shipped); a redirected
 *     command before one that ran is not sent again and answers why;
 *   - a lock whose key is absent goes to the importing node (ASK), and an
 *     acquire whose read names a key still on the old node is "split": it
 *     is sent again, whole, once the keys are together;
 *   - TRYAGAIN for a script naming keys on both sides, retried until the
 *     migration step that reunites them; ASK then TRYAGAIN for a script
 *     naming a key that exists nowhere yet, retried until the slot moved
 *     (a migration step, not counted as redirects);
 *   - MOVED once the slot moved: followed, the map refreshed, no redirect
 *     for the next command;
 *   - a WATCH that followed an ASK: its transaction goes to the importing
 *     node after an ASKING (else MOVED back for every queued command);
 *   - a transaction whose WATCH ran on the old master is never sent to the
 *     new one (nothing written), and the next one goes through;
 *   - lc_conn_held_back of such a held-back transaction kept through lock
 *     calls that carry no commands of the caller's, cleared by a pipe;
 *   - a read batch whose UNWATCH ran on the old master and the rest was
 *     MOVED: the UNWATCH goes on with it, so that a WATCH an earlier read
 *     left on the new master's connection does not void the transaction;
 *   - the map never taken from a stale node: a node made to believe the
 *     old owner again is the first seed, and the refresh after the MOVED
 *     asks the node that answered it.
 * Last a master SIGKILLed: connections refused make the map refresh from
 * another node, the promoted replica serves the slot, a release there
 * answers NOSCRIPT (a promoted replica has no script cache) and is sent
 * again as EVAL, and PING of every master turns healthy again.
 */
#include "lc_conn.h"
#include "lc_scripts.h"
#include "lc_test.h"
#include "pk_cluster.h"
#include "pk_proc.h"
#include "pk_redis.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>

static pk_cluster C;

static int slot_of(const char *key)
{
    return lc_key_slot(key, strlen(key));
}

static lc_client *cl_client(int dead_first, int timeout_ms)
{
    static char seeds_text[4][32];
    const char *seeds[4];
    int n = 0;
    if (dead_first)
        snprintf(seeds_text[n], sizeof seeds_text[n], "127.0.0.1:%d", pk_free_port());
    else
        snprintf(seeds_text[n], sizeof seeds_text[n], "127.0.0.1:%d", C.port[2]);
    seeds[n] = seeds_text[n];
    n++;
    for (int i = 0; i < 2; i++, n++) {
        snprintf(seeds_text[n], sizeof seeds_text[n], "127.0.0.1:%d", C.port[i]);
        seeds[n] = seeds_text[n];
    }
    lc_options o;
    lc_options_init(&o);
    o.cluster_nodes = seeds;
    o.cluster_node_count = n;
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    o.retry_interval_ms = 5;
    lc_client *c = NULL;
    char err[256];
    if (lc_client_new(&o, &c, err, sizeof err) != LC_OK) {
        fprintf(stderr, "lc_client_new: %s\n", err);
        exit(1);
    }
    return c;
}

static lc_status make(const char *const *nodes, int n, const char *const *sentinels, int db,
                      char *err, size_t len)
{
    lc_options o;
    lc_options_init(&o);
    o.cluster_nodes = nodes;
    o.cluster_node_count = n;
    o.sentinels = sentinels;
    o.sentinel_count = sentinels ? 1 : 0;
    o.master_name = "m";
    o.redis_db = db;
    lc_client *c = NULL;
    lc_status s = lc_client_new(&o, &c, err, len);
    lc_client_free(c);
    return s;
}

static void test_options(void)
{
    char err[256];
    const char *one[] = {"127.0.0.1:7000"};
    TU_CHECK(make(one, 1, NULL, 0, err, sizeof err) == LC_OK, "one seed: %s", err);
    const char *v6[] = {"[::1]:7000", "127.0.0.1:7001"};
    TU_CHECK(make(v6, 2, NULL, 0, err, sizeof err) == LC_OK, "[::1]:7000: %s", err);
    TU_CHECK(make(one, 1, one, 0, err, sizeof err) == LC_MISUSE && strstr(err, "sentinels"),
             "with sentinels: %s", err);
    TU_CHECK(make(one, 1, NULL, 2, err, sizeof err) == LC_MISUSE && strstr(err, "redis_db"),
             "with db 2: %s", err);
    const char *bad[] = {"nohost"};
    TU_CHECK(make(bad, 1, NULL, 0, err, sizeof err) == LC_MISUSE && strstr(err, "nohost"),
             "not host:port: %s", err);
    const char *twice[] = {"127.0.0.1:7000", "127.0.0.1:7000"};
    TU_CHECK(make(twice, 2, NULL, 0, err, sizeof err) == LC_MISUSE && strstr(err, "twice"),
             "twice: %s", err);
}

/* The master serving slot now (pk_cluster's view). */
static int owner(int slot)
{
    return pk_cluster_slot_port(&C, slot);
}

static void node_id(int port, char *id, size_t len)
{
    const char *argv[] = {"CLUSTER", "MYID"};
    if (pk_redis_query(port, 2000, 2, argv, id, len) != 1)
        id[0] = '\0';
}

/* A key of the cluster whose slot is served by the master at port, with a
 * tag of its own (prefix + a number). */
static void key_on(int port, const char *prefix, char *key, size_t len)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(key, len, "lct:{%s%d}:k", prefix, i);
        if (owner(slot_of(key)) == port)
            return;
    }
    TU_REQUIRE(0, "no key of %s on %d", prefix, port);
}

static int q(int port, const char *fmt, const char *a, const char *b)
{
    char out[64];
    return tu_redis_str(port, out, sizeof out, fmt, a, b);
}

/* Every mode, with the caller's commands riding in the lock's round trips:
 * GET with the acquire, MULTI SET EXEC with the release. */
static void test_modes(void)
{
    lc_client *c = cl_client(1, 2000);
    lc_conn *conn = lct_conn(c);
    lc_stats st;
    for (int m = 0; m < 3; m++) {
        char key[64], lock[96], fence[96];
        key_on(C.port[m], "mode", key, sizeof key);
        /* the same tag: one slot */
        const char *tag = strchr(key, '{');
        snprintf(lock, sizeof lock, "lct:%.*s:lock", (int)(strchr(tag, '}') - tag + 1), tag);
        snprintf(fence, sizeof fence, "lct:%.*s:fence", (int)(strchr(tag, '}') - tag + 1), tag);
        TU_REQUIRE(slot_of(lock) == slot_of(key), "one slot");
        q(C.port[m], "SET %s %s", key, "10");
        const lc_mode modes[] = {LC_NONE, LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
            lc_lock_args a = lct_args(modes[i], lock, "o1", 5000, 0);
            a.fence_key = fence;
            lc_pipe p;
            lc_pipe_init(&p);
            lc_pipe_append(&p, "GET %s", key);
            lc_guard *g = NULL;
            lc_status s = lc_acquire_pipe(conn, &a, &p, &g);
            TU_CHECK(s == LC_OK, "%s on master %d: acquire %s (%s)", lc_mode_name(modes[i]), m,
                     lc_status_name(s), lc_conn_errstr(conn));
            redisReply *r = lc_pipe_take(&p, 0);
            int v = r && r->type == REDIS_REPLY_STRING ? atoi(r->str) : -1;
            freeReplyObject(r);
            TU_CHECK(v == 10 - (int)i, "%s: the read rode with the acquire (%d)",
                     lc_mode_name(modes[i]), v);
            lc_pipe_clear(&p);
            lc_pipe_append(&p, "MULTI");
            lc_pipe_append(&p, "SET %s %d", key, 9 - (int)i);
            lc_pipe_append(&p, "EXEC");
            s = g ? lc_release_pipe(conn, g, &p) : LC_IO;
            TU_CHECK(s == LC_OK, "%s: release %s (%s)", lc_mode_name(modes[i]), lc_status_name(s),
                     lc_conn_errstr(conn));
            lc_pipe_clear(&p);
            TU_CHECK(tu_redis_int(C.port[m], "GET %s", key) == 9 - (int)i,
                     "%s: the write ran on master %d", lc_mode_name(modes[i]), m);
            TU_CHECK(tu_redis_int(C.port[m], "EXISTS %s", lock) == 0, "%s: lock gone",
                     lc_mode_name(modes[i]));
        }
        /* extend and a plain release, routed too */
        lc_lock_args a = lct_args(LC_TOKEN, lock, "o1", 5000, 0);
        lc_guard *g = NULL;
        TU_CHECK(lc_acquire(conn, &a, &g) == LC_OK && lc_extend(conn, g, 20000) == LC_OK &&
                     tu_redis_int(C.port[m], "PTTL %s", lock) > 10000,
                 "token extend on master %d (%s)", m, lc_conn_errstr(conn));
        if (g)
            TU_CHECK(lc_release(conn, g) == LC_OK, "token release");
    }
    char buf[LC_ADDR_LEN];
    TU_CHECK(lc_cluster_slot_master(c, 0, buf, sizeof buf) == 0 &&
                 atoi(strrchr(buf, ':') + 1) == owner(0),
             "slot 0's master: %s", buf);
    lc_cluster_map *map = calloc(1, sizeof *map);
    TU_REQUIRE(map && lc_cluster_map_get(c, map) == 0, "the map");
    TU_CHECK(map->nmasters == 3 && map->slots_covered == 16384 && map->refreshed_wall_ms > 0,
             "3 masters, 16384 slots (%d, %d)", map->nmasters, map->slots_covered);
    int reps = 0;
    for (int i = 0; i < map->nmasters; i++)
        reps += map->master[i].nreplicas;
    TU_CHECK(reps == 3, "3 replicas listed (%d)", reps);
    free(map);
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_refreshes >= 1 && st.cluster_moved == 0 && st.cluster_ask == 0,
             "one map, no redirect (refreshes %llu, moved %llu)",
             (unsigned long long)st.cluster_refreshes, (unsigned long long)st.cluster_moved);
    TU_CHECK(lc_conn_ping(conn) == LC_OK, "PING every master (%s)", lc_conn_errstr(conn));
    lc_conn_free(conn);
    lc_client_free(c);
}

static void test_misuse(void)
{
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", "lct:{a}:x");
    lc_pipe_append(&p, "GET %s", "lct:{b}:x");
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_MISUSE && strstr(lc_conn_errstr(conn), "slot") &&
                 lc_pipe_take(&p, 0) == NULL,
             "two slots in one pipe: refused, not sent (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "MGET %s %s", "lct:{a}:x", "lct:{b}:x");
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_MISUSE, "MGET of two slots: refused");
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "XLEN %s", "lct:{a}:x");
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_MISUSE && strstr(lc_conn_errstr(conn), "router"),
             "a command the router cannot place: refused (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    lc_lock_args a = lct_args(LC_TOKEN, "lct:{a}:lock", "o", 5000, 0);
    lc_pipe_append(&p, "GET %s", "lct:{b}:x");
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire_pipe(conn, &a, &p, &g) == LC_MISUSE && !g,
             "a read of another slot than the lock's: refused (%s)", lc_conn_errstr(conn));
    TU_CHECK(lc_acquire_send(conn, &a, &p) == LC_MISUSE, "... by lc_acquire_send too");
    lc_pipe_clear(&p);
    a = lct_args(LC_FENCED, "lct:{a}:lock", "o", 5000, 0);
    a.fence_key = "lct:{b}:fence";
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_MISUSE && strstr(lc_conn_errstr(conn), "fence_key"),
             "a fence key of another slot: refused (%s)", lc_conn_errstr(conn));
    a = lct_args(LC_TOKEN, "lct:{a}:lock", "o", 5000, 0);
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "token");
    lc_pipe_append(&p, "SET %s 1", "lct:{b}:x");
    TU_CHECK(lc_release_pipe(conn, g, &p) == LC_MISUSE && strstr(lc_conn_errstr(conn), "slot"),
             "a write of another slot: refused (%s)", lc_conn_errstr(conn));
    TU_CHECK(tu_redis_int(owner(slot_of("lct:{b}:x")), "EXISTS %s", "lct:{b}:x") == 0,
             "nothing written");
    TU_CHECK(tu_redis_int(owner(slot_of("lct:{a}:lock")), "EXISTS %s", "lct:{a}:lock") == 0,
             "the lock released all the same, not left to its lease");
    /* lockcore's own callers go through the router's check too */
    const char *args[] = {"lct:{a}:x", "lct:{b}:x"};
    redisReply *er = lc__conn_eval(conn, "0000000000000000000000000000000000000000",
                                   "redis.call('SET', KEYS[1], 1)", 2, 2, args);
    TU_CHECK(er == NULL && strstr(lc_conn_errstr(conn), "two slots") &&
                 strstr(lc_conn_errstr(conn), "not sent"),
             "a script of two slots from inside lockcore: refused (%s)", lc_conn_errstr(conn));
    freeReplyObject(er);
    lc_pipe_clear(&p);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* --- a slot migrated by hand ------------------------------------------------ */

typedef struct migration {
    int slot, from, to; /* ports */
    char from_id[64], to_id[64];
} migration;

static void mig_begin(migration *m, int slot, int to_port)
{
    m->slot = slot;
    m->from = owner(slot);
    m->to = to_port;
    node_id(m->from, m->from_id, sizeof m->from_id);
    node_id(m->to, m->to_id, sizeof m->to_id);
    char s[16];
    snprintf(s, sizeof s, "%d", slot);
    TU_REQUIRE(q(m->to, "CLUSTER SETSLOT %s IMPORTING %s", s, m->from_id) == 0, "IMPORTING");
    TU_REQUIRE(q(m->from, "CLUSTER SETSLOT %s MIGRATING %s", s, m->to_id) == 0, "MIGRATING");
}

static void mig_key(const migration *m, const char *key)
{
    char out[64];
    TU_REQUIRE(
        tu_redis_str(m->from, out, sizeof out, "MIGRATE 127.0.0.1 %d %s 0 5000", m->to, key) == 0,
        "MIGRATE %s", key);
}

/* SETSLOT NODE on the new owner first, then the old, then every other
 * master, as redis-cli does. */
static void mig_end(const migration *m)
{
    char s[16];
    snprintf(s, sizeof s, "%d", m->slot);
    TU_REQUIRE(q(m->to, "CLUSTER SETSLOT %s NODE %s", s, m->to_id) == 0, "NODE on the new owner");
    TU_REQUIRE(q(m->from, "CLUSTER SETSLOT %s NODE %s", s, m->to_id) == 0, "NODE on the old");
    for (int i = 0; i < C.n; i++)
        if (C.pid[i] > 0 && C.port[i] != m->to && C.port[i] != m->from)
            (void)q(C.port[i], "CLUSTER SETSLOT %s NODE %s", s, m->to_id); /* replicas refuse */
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok after the move");
}

/* cmd key on port after ASKING (a key of an importing slot), as an integer;
 * INT64_MIN on failure. */
static int64_t asking_int(int port, const char *cmd, const char *key)
{
    redisContext *ctx = pk_redis_connect(port, 2000);
    if (!ctx)
        return INT64_MIN;
    redisReply *a = redisCommand(ctx, "ASKING");
    redisReply *r = a ? redisCommand(ctx, "%s %s", cmd, key) : NULL;
    int64_t v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : INT64_MIN;
    freeReplyObject(a);
    freeReplyObject(r);
    redisFree(ctx);
    return v;
}

static int get_int(lc_conn *conn, const char *key)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", key);
    (void)lc_conn_pipe(conn, &p);
    redisReply *r = lc_pipe_take(&p, 0);
    int v = r && r->type == REDIS_REPLY_STRING ? atoi(r->str)
            : r && r->type == REDIS_REPLY_NIL  ? -1
                                               : -2;
    if (r && r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "GET %s: %s\n", key, r->str);
    freeReplyObject(r);
    lc_pipe_clear(&p);
    return v;
}

typedef struct later {
    const migration *m;
    const char *key;
    int delay_ms;
} later;

/* SETSLOT NODE on the new owner, then the old, 800 ms from now (mig_end
 * does it again, with its checks, on the test's thread). */
static void *own_later(void *arg)
{
    const migration *m = arg;
    char sl[16];
    snprintf(sl, sizeof sl, "%d", m->slot);
    tu_sleep_ms(800); /* past 5 rounds of back-off (20+40+80+160+200 ms) */
    (void)q(m->to, "CLUSTER SETSLOT %s NODE %s", sl, m->to_id);
    (void)q(m->from, "CLUSTER SETSLOT %s NODE %s", sl, m->to_id);
    return NULL;
}

static void *migrate_later(void *arg)
{
    later *l = arg;
    tu_sleep_ms(l->delay_ms);
    mig_key(l->m, l->key);
    return NULL;
}

static int via_port(lc_conn *conn, uint64_t via);

/* A WATCH split from its keys by a migration: UNWATCH, WATCH kw, GET kd
 * while kd has moved to the importing master and kw has not. Following the
 * ASK for the GET alone would leave the WATCH on the old master, where the
 * transaction after it would be refused (the purchase of a lock mode whose
 * first command to the slot is this read: none, mutex, redlock). So the
 * batch waits and goes again whole, and runs once kw moved too (300 ms
 * later): the WATCH and the keys on one node, the transaction after it
 * runs there. */
static void test_watch_split(void)
{
    char kw[64], kd[80];
    key_on(C.port[0], "wsplit", kw, sizeof kw);
    snprintf(kd, sizeof kd, "%.*s:d", (int)(strrchr(kw, ':') - kw), kw);
    TU_REQUIRE(slot_of(kd) == slot_of(kw), "%s shares %s's slot", kd, kw);
    tu_redis_int(C.port[0], "SET %s 1", kw);
    tu_redis_int(C.port[0], "SET %s 7", kd);
    migration m;
    mig_begin(&m, slot_of(kw), C.port[1]);
    mig_key(&m, kd);
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    later l = {&m, kw, 300};
    pthread_t t;
    pthread_create(&t, NULL, migrate_later, &l);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "UNWATCH");
    lc_pipe_append(&p, "WATCH %s", kw);
    lc_pipe_append(&p, "GET %s", kd);
    int64_t t0 = lc_now_ms();
    lc_status s = lc_conn_pipe(conn, &p);
    int64_t took = lc_now_ms() - t0;
    redisReply *r = lc_pipe_take(&p, 2);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "7") &&
                 took >= 250,
             "the read waited for the WATCHed key to follow (%lld ms, %s, %s)", (long long)took,
             lc_status_name(s), lc_conn_errstr(conn));
    TU_CHECK(lc_conn_via(conn) == 0, "its WATCH ran on both masters: no one connection (%llu)",
             (unsigned long long)lc_conn_via(conn));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    pthread_join(t, NULL);
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "INCR %s", kd);
    lc_pipe_append(&p, "EXEC");
    s = lc_conn_pipe(conn, &p);
    uint64_t via = lc_conn_via(conn);
    r = lc_pipe_take(&p, 2);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                 r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 8,
             "the transaction after it ran, where its WATCH is (%s)", lc_conn_errstr(conn));
    TU_CHECK(via != 0 && via_port(conn, via) == C.port[1],
             "lc_conn_via names the importing master's connection for it (%llu)",
             (unsigned long long)via);
    freeReplyObject(r);
    lc_pipe_clear(&p);
    lc_stats st;
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_retries >= 1, "retried while split (%llu)",
             (unsigned long long)st.cluster_retries);
    mig_end(&m);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* lc_conn_held_back speaks of the last call that sent the caller's
 * commands: a transaction held back by a migration (its WATCH pinned to
 * the node its key has left) stays "held back" through lock calls without
 * commands of the caller's made after it, and a pipe sent next clears it. */
static void test_held_back_kept(void)
{
    char key[64], lock[64];
    key_on(C.port[0], "hb", key, sizeof key);
    key_on(C.port[2], "hbl", lock, sizeof lock);
    tu_redis_int(C.port[0], "SET %s 1", key);
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "WATCH %s", key);
    lc_pipe_append(&p, "GET %s", key);
    TU_REQUIRE(lc_conn_pipe(conn, &p) == LC_OK, "the read (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    migration m;
    mig_begin(&m, slot_of(key), C.port[1]);
    mig_key(&m, key);
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "INCR %s", key);
    lc_pipe_append(&p, "EXEC");
    (void)lc_conn_pipe(conn, &p);
    lc_pipe_clear(&p);
    TU_CHECK(lc_conn_held_back(conn), "the commit was held back (%s)", lc_conn_errstr(conn));
    lc_lock_args a = lct_args(LC_TOKEN, lock, "o", 5000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_OK && lc_extend(conn, g, 5000) == LC_OK &&
                 lc_release(conn, g) == LC_OK,
             "a lock taken, extended and released meanwhile (%s)", lc_conn_errstr(conn));
    TU_CHECK(lc_conn_held_back(conn), "still held back after lock calls without commands");
    lc_pipe_append(&p, "UNWATCH");
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_OK && !lc_conn_held_back(conn),
             "a pipe sent next clears it (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    mig_end(&m);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* A read batch (UNWATCH, WATCH, GET) sent to the old master of a slot
 * that has moved (the client's map is stale): UNWATCH runs there, the rest
 * answers MOVED. The UNWATCH goes on with the rest to the new master, where
 * this connection still WATCHes a key of an earlier read that never
 * committed, written since: left there, it would void the transaction that
 * follows (EXEC answering nil). */
static void test_unwatch_follows(void)
{
    char kw[64], kb[64];
    key_on(C.port[0], "uwf", kw, sizeof kw);
    key_on(C.port[1], "uwb", kb, sizeof kb);
    tu_redis_int(C.port[0], "SET %s 1", kw);
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "UNWATCH");
    lc_pipe_append(&p, "WATCH %s", kb);
    lc_pipe_append(&p, "GET %s", kb);
    TU_REQUIRE(lc_conn_pipe(conn, &p) == LC_OK, "a read left WATCHing on master 1 (%s)",
               lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    tu_redis_int(C.port[1], "SET %s 9", kb);
    migration m;
    mig_begin(&m, slot_of(kw), C.port[1]);
    mig_key(&m, kw);
    mig_end(&m);
    lc_stats st;
    lc_client_stats(c, &st);
    uint64_t moved0 = st.cluster_moved;
    lc_pipe_append(&p, "UNWATCH");
    lc_pipe_append(&p, "WATCH %s", kw);
    lc_pipe_append(&p, "GET %s", kw);
    lc_status s = lc_conn_pipe(conn, &p);
    redisReply *r = lc_pipe_take(&p, 2);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "1"),
             "the read followed the MOVED (%s, %s)", lc_status_name(s), lc_conn_errstr(conn));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "INCR %s", kw);
    lc_pipe_append(&p, "EXEC");
    s = lc_conn_pipe(conn, &p);
    r = lc_pipe_take(&p, 2);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
                 tu_redis_int(C.port[1], "GET %s", kw) == 2,
             "the transaction ran on the new master, not voided by the old WATCH (%s)",
             r && r->type == REDIS_REPLY_NIL ? "EXEC answered nil" : lc_conn_errstr(conn));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_moved == moved0 + 1, "one MOVED (%llu)",
             (unsigned long long)(st.cluster_moved - moved0));
    lc_conn_free(conn);
    lc_client_free(c);
}

/* lc_conn_pipe_each: INCR of keys on all three masters in one call, one
 * write per master; refused for what is not one command of one slot (nothing
 * sent); a key whose slot moved (the client's map stale: MOVED) and one
 * whose slot is migrating (ASK) each go again alone and run exactly once. */
static void test_pipe_each(void)
{
    char k[3][64];
    for (int i = 0; i < 3; i++)
        key_on(C.port[i], "each", k[i], sizeof k[i]);
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    for (int round = 1; round <= 2; round++)
        for (int i = 0; i < 3; i++)
            lc_pipe_append(&p, "INCR %s", k[i]);
    TU_CHECK(lc_conn_pipe_each(conn, &p) == LC_OK, "INCR on three masters (%s)",
             lc_conn_errstr(conn));
    for (int j = 0; j < 6; j++) {
        redisReply *r = lc_pipe_take(&p, j);
        TU_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1 + j / 3,
                 "reply %d in p's order: %lld", j, r ? r->integer : -1LL);
        freeReplyObject(r);
    }
    for (int i = 0; i < 3; i++)
        TU_CHECK(tu_redis_int(C.port[i], "GET %s", k[i]) == 2, "master %d ran its two", i);
    lc_stats st;
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_moved == 0 && st.cluster_ask == 0, "no redirect");
    lc_pipe_clear(&p);

    /* not one command of one slot: refused, nothing sent */
    const char *bad[] = {"MULTI", "PING", "WATCH %s", "MGET %s lct:{zz}:x", "XLEN %s"};
    for (int b = 0; b < 5; b++) {
        lc_pipe_append(&p, "INCR %s", k[1]);
        lc_pipe_append(&p, bad[b], k[0]);
        TU_CHECK(lc_conn_pipe_each(conn, &p) == LC_MISUSE && lc_pipe_take(&p, 0) == NULL,
                 "%s: refused (%s)", bad[b], lc_conn_errstr(conn));
        lc_pipe_clear(&p);
    }
    TU_CHECK(tu_redis_int(C.port[1], "GET %s", k[1]) == 2, "nothing of them sent");

    /* k[0]'s slot moves to master 2 behind the client's back: MOVED, for
     * k[0] and for a second key of its slot in the same pipe — counted and
     * applied once, each command run once */
    char k0b[80];
    snprintf(k0b, sizeof k0b, "%.*s:b", (int)(strrchr(k[0], ':') - k[0]), k[0]);
    TU_REQUIRE(slot_of(k0b) == slot_of(k[0]), "%s shares %s's slot", k0b, k[0]);
    migration m;
    int slot0 = slot_of(k[0]);
    mig_begin(&m, slot0, C.port[2]);
    mig_key(&m, k[0]);
    mig_end(&m);
    for (int i = 0; i < 3; i++)
        lc_pipe_append(&p, "INCR %s", k[i]);
    lc_pipe_append(&p, "INCR %s", k0b);
    TU_CHECK(lc_conn_pipe_each(conn, &p) == LC_OK, "after the move (%s)", lc_conn_errstr(conn));
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 3, "the moved key ran once: %lld",
             r ? r->integer : -1LL);
    freeReplyObject(r);
    r = lc_pipe_take(&p, 3);
    TU_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1,
             "the second key of the slot ran once: %lld", r ? r->integer : -1LL);
    freeReplyObject(r);
    lc_pipe_clear(&p);
    TU_CHECK(tu_redis_int(C.port[2], "GET %s", k[0]) == 3 &&
                 tu_redis_int(C.port[2], "GET %s", k0b) == 1,
             "on their new master, once each");
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_moved == 1, "one MOVED counted for the slot (%llu)",
             (unsigned long long)st.cluster_moved);
    char buf[LC_ADDR_LEN];
    TU_CHECK(lc_cluster_slot_master(c, slot0, buf, sizeof buf) == 0 &&
                 atoi(strrchr(buf, ':') + 1) == C.port[2],
             "the map fixed (%s)", buf);

    /* k[1]'s slot migrating to master 0, the key already there: ASK */
    mig_begin(&m, slot_of(k[1]), C.port[0]);
    mig_key(&m, k[1]);
    for (int i = 0; i < 3; i++)
        lc_pipe_append(&p, "INCR %s", k[i]);
    TU_CHECK(lc_conn_pipe_each(conn, &p) == LC_OK, "during a migration (%s)", lc_conn_errstr(conn));
    for (int j = 0; j < 3; j++) {
        r = lc_pipe_take(&p, j);
        TU_CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 4, "key %d: %lld", j,
                 r ? r->integer : -1LL);
        freeReplyObject(r);
    }
    lc_pipe_clear(&p);
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_ask == 1, "one ASK followed (%llu)", (unsigned long long)st.cluster_ask);
    TU_CHECK(get_int(conn, k[1]) == 4, "the migrating key ran once, on master 0");
    mig_end(&m);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* INCR key over conn; lc_conn_via right after. */
static uint64_t incr_via(lc_conn *conn, const char *key)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "INCR %s", key);
    lc_status st = lc_conn_pipe(conn, &p);
    TU_CHECK(st == LC_OK, "INCR %s (%s)", key, lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    return lc_conn_via(conn);
}

/* The port of the node that connection via of conn reaches, asked over it
 * (CONFIG GET port by lc_conn_pipe_via); -1 when it is refused. */
static int via_port(lc_conn *conn, uint64_t via)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "CONFIG GET port");
    int port = -1;
    if (lc_conn_pipe_via(conn, &p, via) == LC_OK) {
        redisReply *r = lc_pipe_take(&p, 0);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[1]->type == REDIS_REPLY_STRING)
            port = atoi(r->element[1]->str);
        freeReplyObject(r);
    }
    lc_pipe_clear(&p);
    return port;
}

/* lc_conn_via names the connection that ran a write — one per master,
 * each keeping its number while conn moves between masters — and
 * lc_conn_pipe_via sends over it alone, wherever conn went since (a WAIT
 * must go where the write went). A batch over several masters, or one a
 * redirect split between two, has no one connection (0). After an ASK the
 * write ran on the importing master: its connection is named. Refused: a
 * command naming a key, via 0, and a connection its node closed (never a
 * new one in its place); the next write to that master makes a new one,
 * with a new number. */
static void test_via(void)
{
    char k[3][64], k1b[80];
    for (int i = 0; i < 3; i++)
        key_on(C.port[i], "via", k[i], sizeof k[i]);
    snprintf(k1b, sizeof k1b, "%.*s:b", (int)(strrchr(k[1], ':') - k[1]), k[1]);
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    uint64_t v[3];
    for (int i = 0; i < 3; i++)
        v[i] = incr_via(conn, k[i]);
    TU_CHECK(v[0] && v[1] && v[2] && v[0] != v[1] && v[1] != v[2] && v[0] != v[2],
             "one connection per master: %llu %llu %llu", (unsigned long long)v[0],
             (unsigned long long)v[1], (unsigned long long)v[2]);
    for (int i = 2; i >= 0; i--)
        TU_CHECK(via_port(conn, v[i]) == C.port[i], "connection %llu reaches master %d (%d)",
                 (unsigned long long)v[i], i, C.port[i]);
    TU_CHECK(via_port(conn, v[2]) == C.port[2] && incr_via(conn, k[1]) == v[1],
             "each keeps its number while conn moves between them");

    lc_pipe p;
    lc_pipe_init(&p);
    for (int i = 0; i < 3; i++)
        lc_pipe_append(&p, "INCR %s", k[i]);
    TU_CHECK(lc_conn_pipe_each(conn, &p) == LC_OK && lc_conn_via(conn) == 0,
             "a batch over three masters: no one connection (%llu)",
             (unsigned long long)lc_conn_via(conn));
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "GET %s", k[0]);
    TU_CHECK(lc_conn_pipe_via(conn, &p, v[0]) == LC_MISUSE && lc_pipe_take(&p, 0) == NULL,
             "a command naming a key: refused (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "PING");
    TU_CHECK(lc_conn_pipe_via(conn, &p, 0) == LC_MISUSE, "via 0: refused");
    lc_pipe_clear(&p);

    /* k[1]'s slot migrating to master 2, k[1] moved, k1b not yet */
    TU_CHECK(incr_via(conn, k1b) == v[1], "k1b on master 1");
    migration m;
    mig_begin(&m, slot_of(k[1]), C.port[2]);
    mig_key(&m, k[1]);
    uint64_t va = incr_via(conn, k[1]);
    TU_CHECK(va == v[2] && via_port(conn, va) == C.port[2],
             "after an ASK: the importing master's connection (%llu)", (unsigned long long)va);
    lc_pipe_append(&p, "INCR %s", k1b);
    lc_pipe_append(&p, "INCR %s", k[1]);
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_OK && lc_conn_via(conn) == 0,
             "a batch split by the ASK (one on master 1, one on master 2): no one connection "
             "(%llu; %s)",
             (unsigned long long)lc_conn_via(conn), lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    mig_key(&m, k1b);
    mig_end(&m);

    /* master 0 closes the connection: named no more, and not remade */
    lc_pipe_append(&p, "CLIENT ID");
    TU_REQUIRE(lc_conn_pipe_via(conn, &p, v[0]) == LC_OK, "CLIENT ID over master 0's connection");
    redisReply *id = lc_pipe_take(&p, 0);
    TU_REQUIRE(id && id->type == REDIS_REPLY_INTEGER, "CLIENT ID");
    TU_CHECK(tu_redis_int(C.port[0], "CLIENT KILL ID %lld", id->integer) == 1,
             "master 0 closes it");
    freeReplyObject(id);
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "PING");
    uint64_t made = lc_conn_connects(conn);
    TU_CHECK(lc_conn_pipe_via(conn, &p, v[0]) == LC_IO &&
                 strstr(lc_conn_errstr(conn), "closed or was remade") != NULL &&
                 lc_conn_connects(conn) == made,
             "a closed connection: refused, none made in its place (%s)", lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    uint64_t v0 = incr_via(conn, k[0]);
    TU_CHECK(v0 != 0 && v0 != v[0] && v0 > v[2] && via_port(conn, v0) == C.port[0],
             "the next write to master 0: a new connection, a new number (%llu)",
             (unsigned long long)v0);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* A master's read events so far, asked on ctx, a connection kept open:
 * each write a client makes that arrives whole is one; this query's own is
 * one more. Less its replica's REPLCONF ACKs (one a second), read in the
 * same INFO: they come and go on their own. -1 when INFO fails. */
static long long reads_processed(redisContext *ctx)
{
    redisReply *r = redisCommand(ctx, "INFO stats commandstats");
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        n = tu_info_field(r->str, "total_reads_processed:") -
            tu_info_field(r->str, "cmdstat_replconf:calls=");
    freeReplyObject(r);
    return n;
}

/* lc_conn_pipes_each: 60 INCRs, 20 on each master, interleaved over four
 * pipes (16, 16, 16, 12) — more than one pipe holds — in one call, three
 * times: every reply in its pipe's order, every command run once, and each
 * master reached by one write (one read event there besides the INFO that
 * counts them, the fewest of the three rounds). Refused, nothing sent: a
 * bad command in the third pipe, a NULL pipe, one pipe given twice, too
 * many pipes. */
static void test_pipes_each(void)
{
    enum { PER = 20, N = 3 * PER };
    char k[N][64];
    for (int j = 0; j < N; j++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "pe%d_%d_", j % 3, j / 3);
        key_on(C.port[j % 3], prefix, k[j], sizeof k[j]);
    }
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    TU_REQUIRE(lc_conn_ping(conn) == LC_OK, "connected (%s)", lc_conn_errstr(conn));
    lc_pipe pp[4];
    lc_pipe *pipes[4] = {&pp[0], &pp[1], &pp[2], &pp[3]};
    for (int i = 0; i < 4; i++)
        lc_pipe_init(&pp[i]);
    redisContext *info[3];
    long long fewest[3] = {1000, 1000, 1000};
    for (int i = 0; i < 3; i++)
        info[i] = redisConnect("127.0.0.1", C.port[i]);
    /* three rounds, the fewest read events of each master counted: a
     * replica's REPLCONF ACK (once a second) may fall inside one */
    int good = 0;
    for (int round = 1; round <= 3; round++) {
        for (int j = 0; j < N; j++)
            lc_pipe_append(&pp[j / 16], "INCR %s", k[j]);
        long long r0[3];
        for (int i = 0; i < 3; i++)
            r0[i] = reads_processed(info[i]);
        TU_CHECK(lc_conn_pipes_each(conn, pipes, 4) == LC_OK, "60 INCRs over 3 masters (%s)",
                 lc_conn_errstr(conn));
        for (int i = 0; i < 3; i++) {
            long long d = reads_processed(info[i]) - r0[i];
            fewest[i] = r0[i] >= 0 && d < fewest[i] ? d : fewest[i];
        }
        for (int j = 0; j < N; j++) {
            redisReply *r = lc_pipe_take(&pp[j / 16], j % 16);
            good += r && r->type == REDIS_REPLY_INTEGER && r->integer == round;
            freeReplyObject(r);
            good -= tu_redis_int(C.port[j % 3], "GET %s", k[j]) != round;
        }
        for (int i = 0; i < 4; i++)
            lc_pipe_clear(&pp[i]);
    }
    for (int i = 0; i < 3; i++) {
        redisFree(info[i]);
        TU_CHECK(fewest[i] == 2,
                 "master %d: the batch in one write (%lld read events, INFO's included)", i,
                 fewest[i]);
    }
    TU_CHECK(good == 3 * N, "every reply in its place, every command run once (%d of %d)", good,
             3 * N);

    lc_pipe_append(&pp[0], "INCR %s", k[0]);
    lc_pipe_append(&pp[2], "MULTI");
    TU_CHECK(lc_conn_pipes_each(conn, pipes, 3) == LC_MISUSE &&
                 strstr(lc_conn_errstr(conn), "pipe 2") != NULL &&
                 tu_redis_int(C.port[0], "GET %s", k[0]) == 3,
             "a MULTI in pipe 2: refused, nothing sent (%s)", lc_conn_errstr(conn));
    pipes[1] = NULL;
    TU_CHECK(lc_conn_pipes_each(conn, pipes, 3) == LC_MISUSE, "a NULL pipe: refused");
    pipes[1] = &pp[0];
    TU_CHECK(lc_conn_pipes_each(conn, pipes, 2) == LC_MISUSE &&
                 tu_redis_int(C.port[0], "GET %s", k[0]) == 3,
             "one pipe given twice: refused, nothing sent");
    pipes[1] = &pp[1];
    lc_pipe *many[LC_PIPES_MAX + 1];
    for (int i = 0; i <= LC_PIPES_MAX; i++)
        many[i] = &pp[1];
    TU_CHECK(lc_conn_pipes_each(conn, many, LC_PIPES_MAX + 1) == LC_MISUSE &&
                 lc_conn_pipes_each(conn, pipes, 0) == LC_OK,
             "more than LC_PIPES_MAX pipes: refused; none: nothing to do");
    for (int i = 0; i < 4; i++)
        lc_pipe_clear(&pp[i]);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* lc_conn_pipe_each with two of the three masters stopped (SIGSTOP) after
 * the write: their replies do not come, and the batch gives up on them
 * within one command_timeout_ms for both (each read's timeout is what is
 * left), not one each; the master that answers ran its command; woken,
 * the stopped ones run theirs once (a lost reply is never sent again). */
static void test_pipe_each_hung(void)
{
    enum { T = 600 };
    char k[3][64];
    for (int i = 0; i < 3; i++)
        key_on(C.port[i], "hung", k[i], sizeof k[i]);
    lc_client *c = cl_client(0, T);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    for (int i = 0; i < 3; i++)
        lc_pipe_append(&p, "INCR %s", k[i]);
    TU_REQUIRE(lc_conn_pipe_each(conn, &p) == LC_OK, "every master connected first (%s)",
               lc_conn_errstr(conn));
    lc_pipe_clear(&p);
    for (int i = 0; i < 3; i++)
        lc_pipe_append(&p, "INCR %s", k[i]);
    kill(C.pid[1], SIGSTOP);
    kill(C.pid[2], SIGSTOP);
    int64_t t0 = lc_now_ms();
    lc_status s = lc_conn_pipe_each(conn, &p);
    int64_t took = lc_now_ms() - t0;
    kill(C.pid[1], SIGCONT);
    kill(C.pid[2], SIGCONT);
    redisReply *r0 = lc_pipe_take(&p, 0), *r1 = lc_pipe_take(&p, 1), *r2 = lc_pipe_take(&p, 2);
    TU_CHECK(s == LC_IO && r0 && r0->type == REDIS_REPLY_INTEGER && r0->integer == 2 && !r1 && !r2,
             "two masters stopped: %s, the third's reply %lld, theirs %s %s", lc_status_name(s),
             r0 && r0->type == REDIS_REPLY_INTEGER ? r0->integer : -1LL, r1 ? "came" : "none",
             r2 ? "came" : "none");
    /* one timeout for both is T and a little; one each would be 2 T */
    TU_CHECK(took < 2 * T - 150, "given up within one command_timeout_ms (%d): %lld ms", T,
             (long long)took);
    freeReplyObject(r0);
    freeReplyObject(r1);
    freeReplyObject(r2);
    lc_pipe_clear(&p);
    for (int i = 1; i < 3; i++) {
        int64_t v = 0, t1 = lc_now_ms();
        while ((v = tu_redis_int(C.port[i], "GET %s", k[i])) != 2 &&
               lc_now_ms() < t1 + tu_slack(5000))
            tu_sleep_ms(20);
        TU_CHECK(v == 2, "master %d ran the command once it woke, once: %lld", i, (long long)v);
    }
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok after the pause");
    lc_conn_free(conn);
    lc_client_free(c);
}

/* A write whose reply was lost counts where it was sent: lc_conn_via
 * names the stopped master's connection — also when a MOVED sent it there
 * and the resend's reply is the one lost — and lc_conn_pipe_via refuses
 * that connection afterwards (its reply never came: the connection is
 * dropped), so a WAIT never asks another master about that write. Woken,
 * each master ran its INCR once. */
static void test_via_lost(void)
{
    enum { T = 600 };
    char k1[64], k2[64], k3[64];
    key_on(C.port[1], "vlost", k1, sizeof k1);
    key_on(C.port[1], "vmoved", k2, sizeof k2);
    key_on(C.port[2], "vthere", k3, sizeof k3);
    TU_REQUIRE(slot_of(k1) != slot_of(k2), "two slots of master 1");
    lc_client *c = cl_client(0, T);
    lc_conn *conn = lct_conn(c);
    uint64_t v1 = incr_via(conn, k1);
    TU_REQUIRE(v1 != 0 && incr_via(conn, k2) == v1, "master 1's connection");
    uint64_t v2 = incr_via(conn, k3);
    TU_REQUIRE(v2 != 0 && v2 != v1, "master 2's connection");

    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "INCR %s", k1);
    kill(C.pid[1], SIGSTOP);
    lc_status s = lc_conn_pipe(conn, &p);
    uint64_t via = lc_conn_via(conn);
    kill(C.pid[1], SIGCONT);
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(s == LC_IO && r == NULL && via == v1,
             "master 1 stopped: %s, reply %s, via %llu (master 1's: %llu)", lc_status_name(s),
             r ? "came" : "none", (unsigned long long)via, (unsigned long long)v1);
    freeReplyObject(r);
    lc_pipe_clear(&p);
    TU_CHECK(via_port(conn, v1) == -1 && strstr(lc_conn_errstr(conn), "closed or was remade"),
             "its connection refused afterwards (%s)", lc_conn_errstr(conn));

    /* k2's slot moved to master 2 behind conn's back (the map refresh the
     * lost reply asked for done first, by a write to master 2): master 1
     * answers MOVED, the resend goes to master 2, stopped */
    TU_REQUIRE(incr_via(conn, k3) == v2, "master 2's connection again");
    migration m;
    mig_begin(&m, slot_of(k2), C.port[2]);
    mig_key(&m, k2);
    mig_end(&m);
    lc_stats before, after;
    lc_client_stats(c, &before);
    lc_pipe_append(&p, "INCR %s", k2);
    kill(C.pid[2], SIGSTOP);
    s = lc_conn_pipe(conn, &p);
    via = lc_conn_via(conn);
    kill(C.pid[2], SIGCONT);
    lc_client_stats(c, &after);
    r = lc_pipe_take(&p, 0);
    TU_CHECK(s == LC_IO && r == NULL && after.cluster_moved == before.cluster_moved + 1 &&
                 via == v2,
             "MOVED to master 2, stopped: %s, reply %s, %llu MOVED, via %llu (master 2's: %llu)",
             lc_status_name(s), r ? "came" : "none",
             (unsigned long long)(after.cluster_moved - before.cluster_moved),
             (unsigned long long)via, (unsigned long long)v2);
    freeReplyObject(r);
    lc_pipe_clear(&p);

    const char *key[2] = {k1, k2};
    int port[2] = {C.port[1], C.port[2]};
    for (int i = 0; i < 2; i++) {
        int64_t v = 0, t1 = lc_now_ms();
        while ((v = tu_redis_int(port[i], "GET %s", key[i])) != 2 &&
               lc_now_ms() < t1 + tu_slack(5000))
            tu_sleep_ms(20);
        TU_CHECK(v == 2, "%s ran once, on %d: %lld", key[i], port[i], (long long)v);
    }
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok after the pauses");
    lc_conn_free(conn);
    lc_client_free(c);
}

static void test_migration(void)
{
    /* three keys of one slot on master 0, to go to master 1 */
    char k1[64], k2[64], k3[64], lock[64], tag[40];
    key_on(C.port[0], "mig", k1, sizeof k1);
    snprintf(tag, sizeof tag, "%.*s", (int)(strchr(k1, '}') - strchr(k1, '{') + 1),
             strchr(k1, '{'));
    snprintf(k2, sizeof k2, "lct:%s:k2", tag);
    snprintf(k3, sizeof k3, "lct:%s:k3", tag);
    snprintf(lock, sizeof lock, "lct:%s:lock", tag);
    int slot = slot_of(k1);
    q(C.port[0], "SET %s %s", k1, "1");
    q(C.port[0], "SET %s %s", k2, "2");
    q(C.port[0], "SET %s %s", k3, "3");

    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    TU_CHECK(get_int(conn, k1) == 1, "k1 before");
    lc_client *fresh = cl_client(0, 2000); /* never talks to master 1 before the ASK */

    migration m;
    mig_begin(&m, slot, C.port[1]);
    mig_key(&m, k1);
    /* ASK, to a node this client never connected to, with ASKING */
    lc_conn *fc = lct_conn(fresh);
    TU_CHECK(get_int(fc, k2) == 2, "k2 still on the old master");
    TU_CHECK(get_int(fc, k1) == 1, "k1 through ASK + ASKING on the importing master");
    lc_stats st;
    lc_client_stats(fresh, &st);
    TU_CHECK(st.cluster_ask == 1 && st.cluster_moved == 0, "one ASK followed (%llu, moved %llu)",
             (unsigned long long)st.cluster_ask, (unsigned long long)st.cluster_moved);
    char buf[LC_ADDR_LEN];
    TU_CHECK(lc_cluster_slot_master(fresh, slot, buf, sizeof buf) == 0 &&
                 atoi(strrchr(buf, ':') + 1) == C.port[0],
             "ASK leaves the map alone (%s)", buf);
    /* a pipe whose first command is redirected (k1 moved) while its second
     * ran (k2 not yet): the first is not sent again (that would change the
     * order), and its reply says so; never the ASK as if it were the node's
     * answer */
    {
        lc_pipe p2;
        lc_pipe_init(&p2);
        lc_pipe_append(&p2, "GET %s", k1);
        lc_pipe_append(&p2, "GET %s", k2);
        lc_status s2 = lc_conn_pipe(fc, &p2);
        redisReply *r0 = lc_pipe_take(&p2, 0), *r1 = lc_pipe_take(&p2, 1);
        TU_CHECK(s2 == LC_IO && r0 && r0->type == REDIS_REPLY_ERROR &&
                     strncmp(r0->str, "ASK", 3) != 0 && strstr(r0->str, "did not run") && r1 &&
                     r1->type == REDIS_REPLY_STRING && !strcmp(r1->str, "2"),
                 "a redirected command before one that ran: %s, reply %s", lc_status_name(s2),
                 r0 && r0->type == REDIS_REPLY_ERROR ? r0->str : "?");
        freeReplyObject(r0);
        freeReplyObject(r1);
        lc_pipe_clear(&p2);
    }

    /* a lock whose key is absent goes to the importing master */
    lc_lock_args a = lct_args(LC_TOKEN, lock, "o", 5000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(fc, &a, &g) == LC_OK, "token lock during the migration (%s)",
             lc_conn_errstr(fc));
    TU_CHECK(tu_redis_int(m.from, "CLUSTER COUNTKEYSINSLOT %d", slot) == 2,
             "not on the old master, which keeps k2 and k3");
    TU_CHECK(asking_int(m.to, "EXISTS", lock) == 1, "on the importing one");
    if (g)
        TU_CHECK(lc_release(fc, g) == LC_OK, "released through ASK (%s)", lc_conn_errstr(fc));

    /* an acquire whose read names a key still on the old master while the
     * lock key goes to the new one: split, sent again whole once k2 moved */
    later l = {&m, k2, 300};
    pthread_t t;
    pthread_create(&t, NULL, migrate_later, &l);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", k2);
    int64_t t0 = lc_now_ms();
    lc_status s = lc_acquire_pipe(fc, &a, &p, &g);
    int64_t took = lc_now_ms() - t0;
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "2"),
             "lock and read together after %lld ms (%s, %s)", (long long)took, lc_status_name(s),
             lc_conn_errstr(fc));
    TU_CHECK(took >= 250, "not before k2 moved (%lld ms)", (long long)took);
    TU_CHECK(lc_conn_via(fc) == 0, "the read ran on both masters: no one connection (%llu)",
             (unsigned long long)lc_conn_via(fc));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    pthread_join(t, NULL);
    if (s == LC_OK)
        lc_release(fc, g);
    lc_client_stats(fresh, &st);
    TU_CHECK(st.cluster_retries >= 1, "retried while split (%llu)",
             (unsigned long long)st.cluster_retries);

    /* TRYAGAIN: a script naming k1 (moved) and k3 (not yet) */
    later l3 = {&m, k3, 300};
    pthread_create(&t, NULL, migrate_later, &l3);
    lc_pipe_append(&p, "EVAL %s 2 %s %s",
                   "return redis.call('GET', KEYS[1]) .. redis.call('GET', KEYS[2])", k1, k3);
    t0 = lc_now_ms();
    s = lc_conn_pipe(fc, &p);
    took = lc_now_ms() - t0;
    r = lc_pipe_take(&p, 0);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "13"),
             "TRYAGAIN retried until the keys were together, %lld ms (%s)", (long long)took,
             r ? (r->type == REDIS_REPLY_ERROR ? r->str : "?") : lc_conn_errstr(fc));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    pthread_join(t, NULL);

    /* a WATCH on the old master before the move: its transaction is never
     * sent to the new one */
    lc_pipe_append(&p, "UNWATCH");
    lc_pipe_append(&p, "WATCH %s", k2);
    (void)lc_conn_pipe(conn, &p); /* conn: still believes master 0 */
    redisReply *w = lc_pipe_take(&p, 1);
    TU_CHECK(w && w->type == REDIS_REPLY_STATUS, "WATCH of a moved key: ASK followed (%s)",
             w ? w->str : "none");
    freeReplyObject(w);
    lc_pipe_clear(&p);
    /* ... and its transaction goes to the importing master after an ASKING:
     * without one, each queued command is refused with a MOVED back to the
     * old master and EXEC aborts (a token purchase during a resharding) */
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "INCR %s", k2);
    lc_pipe_append(&p, "DECR %s", k2);
    lc_pipe_append(&p, "EXEC");
    s = lc_conn_pipe(conn, &p);
    r = lc_pipe_take(&p, 3);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 3,
             "the transaction after a WATCH through ASK ran on the importing master (%s, %s)",
             lc_status_name(s), r && r->type == REDIS_REPLY_ERROR ? r->str : lc_conn_errstr(conn));
    freeReplyObject(r);
    lc_pipe_clear(&p);

    /* a script naming a key that exists nowhere yet, every other key of
     * the slot moved: the old master answers ASK, the new one TRYAGAIN
     * (keys missing while it imports), round after round until the slot is
     * its own 800 ms later: a migration step, retried within
     * command_timeout_ms, not "too many redirects" */
    char none_key[64];
    snprintf(none_key, sizeof none_key, "lct:%s:none", tag);
    pthread_create(&t, NULL, own_later, &m);
    lc_pipe_append(&p, "EVAL %s 2 %s %s", "return redis.call('GET', KEYS[1])", k1, none_key);
    t0 = lc_now_ms();
    s = lc_conn_pipe(fc, &p);
    took = lc_now_ms() - t0;
    r = lc_pipe_take(&p, 0);
    TU_CHECK(s == LC_OK && r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "1"),
             "ASK and TRYAGAIN retried until the slot moved, %lld ms (%s)", (long long)took,
             r && r->type == REDIS_REPLY_ERROR ? r->str : lc_conn_errstr(fc));
    freeReplyObject(r);
    lc_pipe_clear(&p);
    pthread_join(t, NULL);

    mig_end(&m);

    /* MOVED: followed, the map refreshed, no second redirect */
    lc_client_stats(c, &st);
    uint64_t moved0 = st.cluster_moved, ref0 = st.cluster_refreshes;
    TU_CHECK(get_int(conn, k1) == 1, "k1 after the move");
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_moved == moved0 + 1, "one MOVED (%llu)",
             (unsigned long long)(st.cluster_moved - moved0));
    TU_CHECK(get_int(conn, k3) == 3, "k3");
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_moved == moved0 + 1 && st.cluster_refreshes > ref0,
             "the map refreshed after the MOVED: no second one (%llu, refreshes %llu)",
             (unsigned long long)(st.cluster_moved - moved0),
             (unsigned long long)(st.cluster_refreshes - ref0));
    TU_CHECK(lc_cluster_slot_master(c, slot, buf, sizeof buf) == 0 &&
                 atoi(strrchr(buf, ':') + 1) == C.port[1],
             "the map names the new master (%s)", buf);

    /* WATCH on master 1 now, then the slot goes back to master 0: the
     * transaction is not followed there */
    lc_pipe_append(&p, "UNWATCH");
    lc_pipe_append(&p, "WATCH %s", k2);
    lc_pipe_append(&p, "GET %s", k2);
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_OK, "WATCH on the new master");
    lc_pipe_clear(&p);
    migration back;
    mig_begin(&back, slot, C.port[0]);
    mig_key(&back, k1);
    mig_key(&back, k2);
    mig_key(&back, k3);
    mig_end(&back);
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "SET %s %s", k2, "22");
    lc_pipe_append(&p, "EXEC");
    (void)lc_conn_pipe(conn, &p);
    r = lc_pipe_take(&p, 2);
    TU_CHECK(r && r->type == REDIS_REPLY_ERROR, "EXEC of a transaction WATCHed elsewhere: %s",
             r && r->type == REDIS_REPLY_ERROR ? r->str : "ran");
    freeReplyObject(r);
    TU_CHECK(tu_redis_int(C.port[0], "GET %s", k2) == 2, "nothing written");
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "MULTI");
    lc_pipe_append(&p, "SET %s %s", k2, "22");
    lc_pipe_append(&p, "EXEC");
    (void)lc_conn_pipe(conn, &p);
    r = lc_pipe_take(&p, 2);
    TU_CHECK(r && r->type == REDIS_REPLY_ARRAY, "the next transaction follows the MOVED");
    freeReplyObject(r);
    lc_pipe_clear(&p);
    TU_CHECK(tu_redis_int(C.port[0], "GET %s", k2) == 22, "written on master 0");

    lc_conn_free(fc);
    lc_client_free(fresh);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* The refresh after a MOVED asks the node that answered it, and refuses a
 * map that says otherwise: the first seed, made to believe the old owner
 * again, must not undo the redirect just followed. */
/* A command the router gives up on before it ran answers LC_IO with the
 * reason, never the last redirect as if it were the node's reply: a slot
 * MIGRATING on its master while the target is not IMPORTING makes ASK,
 * then MOVED back, forever (more than 5 redirects); a TRYAGAIN past
 * command_timeout_ms. */
static void test_not_run(void)
{
    char key[64], k2[64], lock[64], tag[40], s[16];
    key_on(C.port[0], "nr", key, sizeof key);
    snprintf(tag, sizeof tag, "%.*s", (int)(strchr(key, '}') - strchr(key, '{') + 1),
             strchr(key, '{'));
    snprintf(k2, sizeof k2, "lct:%s:k2", tag);
    snprintf(lock, sizeof lock, "lct:%s:lock", tag);
    migration m;
    m.slot = slot_of(key);
    m.from = C.port[0];
    m.to = C.port[1];
    node_id(m.from, m.from_id, sizeof m.from_id);
    node_id(m.to, m.to_id, sizeof m.to_id);
    snprintf(s, sizeof s, "%d", m.slot);
    TU_REQUIRE(q(m.from, "CLUSTER SETSLOT %s MIGRATING %s", s, m.to_id) == 0, "MIGRATING");
    lc_client *c = cl_client(0, 2000);
    lc_conn *conn = lct_conn(c);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", key);
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_IO &&
                 strstr(lc_conn_errstr(conn), "too many redirects (5)"),
             "ASK ping-pong: LC_IO naming it (%s)", lc_conn_errstr(conn));
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "too many redirects") &&
                 strncmp(r->str, "ASK", 3) != 0 && strncmp(r->str, "MOVED", 5) != 0,
             "its reply is the reason, not the redirect (%s)", r ? r->str : "none");
    freeReplyObject(r);
    lc_pipe_clear(&p);
    lc_lock_args a = lct_args(LC_TOKEN, lock, "o", 5000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_IO && !g &&
                 strstr(lc_conn_errstr(conn), "too many redirects (5)"),
             "an acquire: LC_IO naming it (%s)", lc_conn_errstr(conn));
    lc_conn_free(conn);
    lc_client_free(c);
    /* a real migration with the keys split: TRYAGAIN, backed off while the
     * next wait still fits in command_timeout_ms (20 + 40 + 80 ms of 300) */
    TU_REQUIRE(q(m.to, "CLUSTER SETSLOT %s IMPORTING %s", s, m.from_id) == 0, "IMPORTING");
    q(m.from, "SET %s %s", key, "1");
    q(m.from, "SET %s %s", k2, "2");
    mig_key(&m, key);
    c = cl_client(0, 300);
    conn = lct_conn(c);
    lc_pipe_append(&p, "MGET %s %s", key, k2);
    int64_t t0 = lc_now_ms();
    TU_CHECK(lc_conn_pipe(conn, &p) == LC_IO &&
                 strstr(lc_conn_errstr(conn), "TRYAGAIN: retried for"),
             "TRYAGAIN past the budget: LC_IO naming it (%s)", lc_conn_errstr(conn));
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(took >= 100 && took < (int64_t)tu_slack(3000), "within the budget (%lld ms)",
             (long long)took);
    lc_pipe_clear(&p);
    lc_conn_free(conn);
    lc_client_free(c);
    mig_key(&m, k2);
    mig_end(&m);
}

/* CLUSTERDOWN makes the map refresh (a slot no longer served where the map
 * says, a master restarted and loading), TRYAGAIN alone does not: the
 * slot's master drops the slot (CLUSTER DELSLOTS), answers CLUSTERDOWN,
 * and the client asks for a map before trying again. */
static void test_clusterdown(void)
{
    char key[64], s[16];
    key_on(C.port[2], "cd", key, sizeof key);
    snprintf(s, sizeof s, "%d", slot_of(key));
    lc_client *c = cl_client(0, 300);
    lc_conn *conn = lct_conn(c);
    TU_REQUIRE(get_int(conn, key) == -1, "a map, the key absent");
    lc_stats st;
    lc_client_stats(c, &st);
    uint64_t before = st.cluster_refreshes;
    TU_REQUIRE(q(C.port[2], "CLUSTER DELSLOTS %s", s, NULL) == 0, "DELSLOTS");
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", key);
    lc_status rs = lc_conn_pipe(conn, &p);
    lc_pipe_clear(&p);
    lc_client_stats(c, &st);
    TU_CHECK(rs == LC_IO && st.cluster_refreshes > before,
             "CLUSTERDOWN: LC_IO (%s), the map refreshed (%llu -> %llu)", lc_conn_errstr(conn),
             (unsigned long long)before, (unsigned long long)st.cluster_refreshes);
    TU_REQUIRE(q(C.port[2], "CLUSTER ADDSLOTS %s", s, NULL) == 0, "ADDSLOTS");
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok again");
    lc_conn_free(conn);
    lc_client_free(c);
}

static void test_stale_seed(void)
{
    char key[64];
    key_on(C.port[0], "stale", key, sizeof key);
    int slot = slot_of(key);
    q(C.port[0], "SET %s %s", key, "5");
    migration m;
    mig_begin(&m, slot, C.port[1]);
    mig_key(&m, key);
    mig_end(&m);
    /* C.port[2] is the first seed: tell it master 0 owns the slot again.
     * The cluster bus corrects it within a second; a try where it did so
     * before the client asked is started again. */
    char s[16];
    snprintf(s, sizeof s, "%d", slot);
    int seen = 0;
    for (int tries = 0; tries < 20 && !seen; tries++) {
        TU_REQUIRE(q(C.port[2], "CLUSTER SETSLOT %s NODE %s", s, m.from_id) == 0, "stale view");
        lc_client *c = cl_client(0, 2000);
        lc_conn *conn = lct_conn(c);
        int v = get_int(conn, key);
        lc_stats st;
        lc_client_stats(c, &st);
        if (st.cluster_moved == 1) {
            seen = 1;
            fprintf(stderr, "stale seed: asked first on try %d\n", tries + 1);
            TU_CHECK(v == 5, "the MOVED followed");
            for (int i = 0; i < 5; i++)
                (void)get_int(conn, key);
            lc_client_stats(c, &st);
            char buf[LC_ADDR_LEN];
            TU_CHECK(st.cluster_moved == 1 &&
                         lc_cluster_slot_master(c, slot, buf, sizeof buf) == 0 &&
                         atoi(strrchr(buf, ':') + 1) == C.port[1],
                     "the map came from the node that answered MOVED, not the stale seed "
                     "(moved %llu, %s)",
                     (unsigned long long)st.cluster_moved, buf);
        }
        lc_conn_free(conn);
        lc_client_free(c);
        tu_sleep_ms(1500); /* the bus corrects the seed */
    }
    TU_CHECK(seen, "the stale seed was asked first at least once in 20 tries");
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok");
}

/* A master SIGKILLed: refused connections refresh the map from another
 * node; the replica promoted serves the slot; NOSCRIPT there is handled. */
static void test_failover(void)
{
    char key[64], lock[64], tag[40];
    key_on(C.port[2], "fo", key, sizeof key);
    snprintf(tag, sizeof tag, "%.*s", (int)(strchr(key, '}') - strchr(key, '{') + 1),
             strchr(key, '{'));
    snprintf(lock, sizeof lock, "lct:%s:lock", tag);
    int slot = slot_of(key);
    int old = owner(slot);
    lc_client *c = cl_client(0, 1000);
    lc_conn *conn = lct_conn(c);
    lc_lock_args a = lct_args(LC_TOKEN, lock, "o", 30000, 0);
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK && lc_release(conn, g) == LC_OK, "warm");
    /* the replica of the master about to die */
    int replica = -1;
    for (int i = C.masters; i < C.n; i++) {
        char info[512];
        const char *argv[] = {"INFO", "replication"};
        if (pk_redis_query(C.port[i], 1000, 2, argv, info, sizeof info) == 1) {
            char want[32];
            snprintf(want, sizeof want, "master_port:%d", old);
            if (strstr(info, want))
                replica = C.port[i];
        }
    }
    TU_REQUIRE(replica > 0, "the replica of %d", old);
    /* scripts replicate by their effects: the replica's cache lacks them */
    char ex[16] = "";
    const char *sargv[] = {"SCRIPT", "EXISTS", LC_SCRIPT_TOKEN_RELEASE_SHA};
    TU_CHECK(pk_redis_query(old, 1000, 3, sargv, ex, sizeof ex) == 1 && !strcmp(ex, "1"),
             "the master has the release script (%s)", ex);
    TU_CHECK(pk_redis_query(replica, 1000, 3, sargv, ex, sizeof ex) == 1 && !strcmp(ex, "0"),
             "its replica does not (%s)", ex);
    /* take a lock, then the master dies while it is held */
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "held before the kill");
    int victim = -1;
    for (int i = 0; i < C.n; i++)
        if (C.port[i] == old)
            victim = i;
    int64_t t0 = lc_now_ms();
    pk_cluster_kill(&C, victim);
    TU_CHECK(lc_conn_ping(conn) == LC_IO && strstr(lc_conn_errstr(conn), "master"),
             "PING of every master fails, naming it (%s)", lc_conn_errstr(conn));
    /* until the promotion: every call fails fast or retries; then it works */
    lc_status s = LC_IO;
    lc_guard *g2 = NULL;
    lc_lock_args b = lct_args(LC_TOKEN, key, "o", 5000, 0);
    while (lc_now_ms() - t0 < tu_slack(20000)) {
        s = lc_acquire(conn, &b, &g2);
        if (s == LC_OK)
            break;
        tu_sleep_ms(50);
    }
    int64_t took = lc_now_ms() - t0;
    fprintf(stderr, "failover: a lock on the promoted replica %lld ms after the kill\n",
            (long long)took);
    TU_CHECK(s == LC_OK, "a lock on the promoted replica %lld ms after the kill (%s)",
             (long long)took, lc_conn_errstr(conn));
    char buf[LC_ADDR_LEN];
    TU_CHECK(lc_cluster_slot_master(c, slot, buf, sizeof buf) == 0 &&
                 atoi(strrchr(buf, ':') + 1) == replica,
             "the map names the promoted replica %d (%s)", replica, buf);
    /* the release script: NOSCRIPT on the promoted replica, sent as EVAL */
    if (s == LC_OK)
        TU_CHECK(lc_release(conn, g2) == LC_OK,
                 "release after NOSCRIPT on the promoted replica (%s)", lc_conn_errstr(conn));
    TU_CHECK(tu_redis_int(replica, "EXISTS %s", key) == 0, "released there");
    TU_CHECK(pk_redis_query(replica, 1000, 3, sargv, ex, sizeof ex) == 1 && !strcmp(ex, "1"),
             "the release went as EVAL after NOSCRIPT: cached now (%s)", ex);
    /* the lock taken on the dead master was not replicated in time or was:
     * either way its release answers, it never hangs */
    lc_status rs = lc_release(conn, g);
    TU_CHECK(rs == LC_OK || rs == LC_NOT_OWNER, "the old holder's release: %s", lc_status_name(rs));
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(15000), NULL), "cluster ok without it");
    s = LC_IO;
    for (int i = 0; i < 50 && s != LC_OK; i++) {
        s = lc_conn_ping(conn);
        if (s != LC_OK)
            tu_sleep_ms(100);
    }
    TU_CHECK(s == LC_OK, "PING of every master again (%s)", lc_conn_errstr(conn));
    lc_stats st;
    lc_client_stats(c, &st);
    TU_CHECK(st.cluster_refreshes >= 2, "refreshed after the refusals (%llu)",
             (unsigned long long)st.cluster_refreshes);
    lc_conn_free(conn);
    lc_client_free(c);
}

/* Two clients (two processes' worth): one waits on a reentrant lock the
 * other holds, and wakes on its release through the cluster's pub/sub. */
static void *wait_reentrant(void *arg)
{
    lc_client *c = arg;
    lc_conn *conn = lct_conn(c);
    lc_lock_args a = lct_args(LC_REENTRANT, "lct:{re}:lock", "waiter", 0, 5000);
    lc_guard *g = NULL;
    lc_status s = lc_acquire(conn, &a, &g);
    if (s == LC_OK)
        lc_release(conn, g);
    lc_conn_free(conn);
    return (void *)(intptr_t)s;
}

static void test_reentrant(void)
{
    lc_client *h = cl_client(0, 2000), *w = cl_client(0, 2000);
    lc_conn *conn = lct_conn(h);
    lc_lock_args a = lct_args(LC_REENTRANT, "lct:{re}:lock", "holder", 0, 0);
    lc_guard *g = NULL, *g2 = NULL;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK && lc_acquire(conn, &a, &g2) == LC_OK,
               "held twice (%s)", lc_conn_errstr(conn));
    pthread_t t;
    pthread_create(&t, NULL, wait_reentrant, w);
    lc_stats st;
    for (int i = 0; i < 100; i++) {
        lc_client_stats(w, &st);
        if (st.pubsub_channels == 1)
            break;
        tu_sleep_ms(20);
    }
    TU_CHECK(st.pubsub_channels == 1, "the waiter subscribed on a cluster node");
    tu_sleep_ms(200);
    TU_CHECK(lc_release(conn, g2) == LC_OK && lc_release(conn, g) == LC_OK, "released");
    void *rv;
    pthread_join(t, &rv);
    TU_CHECK((lc_status)(intptr_t)rv == LC_OK, "the waiter got it (%s)",
             lc_status_name((lc_status)(intptr_t)rv));
    /* a brace that opens or closes no tag: the key hashes whole, and its
     * channel still lies in its slot */
    const char *odd[] = {"lct:a{b:lock", "lct:a{}b:lock", "lct:a}b:lock"};
    for (int i = 0; i < 3; i++) {
        a = lct_args(LC_REENTRANT, odd[i], "holder", 0, 0);
        g = NULL;
        lc_status s = lc_acquire(conn, &a, &g);
        TU_CHECK(s == LC_OK, "%s: acquire %s (%s)", odd[i], lc_status_name(s),
                 lc_conn_errstr(conn));
        s = g ? lc_release(conn, g) : LC_IO;
        TU_CHECK(s == LC_OK && tu_redis_int(owner(slot_of(odd[i])), "EXISTS %s", odd[i]) == 0,
                 "%s: released, its channel in its slot (%s: %s)", odd[i], lc_status_name(s),
                 lc_conn_errstr(conn));
    }
    lc_conn_free(conn);
    lc_client_free(h);
    lc_client_free(w);
}

/* 1 once every running node's CLUSTER NODES lists n replicas ("slave"
 * flags), within timeout_ms; 0 otherwise. */
static int replicas_known(int n, int timeout_ms)
{
    int64_t end = lc_now_ms() + timeout_ms;
    for (;;) {
        int all = 1;
        for (int i = 0; i < C.n && all; i++) {
            if (C.pid[i] <= 0)
                continue;
            char nodes[8192] = "";
            const char *argv[] = {"CLUSTER", "NODES"};
            int found = 0;
            if (pk_redis_query(C.port[i], 1000, 2, argv, nodes, sizeof nodes) == 1)
                for (const char *p = nodes; (p = strstr(p, "slave")) != NULL; p += 5)
                    found++;
            all = found == n;
        }
        if (all)
            return 1;
        if (lc_now_ms() >= end)
            return 0;
        pk_sleep_ms(50);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_options();
    pk_cluster_opts o;
    pk_cluster_opts_init(&o);
    char dir[] = "/tmp/lct-cluster.XXXXXX", err[256];
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    o.dir = dir;
    o.server = getenv("MIAOSHA_REDIS_SERVER");
    TU_REQUIRE(pk_cluster_start(&C, &o, err, sizeof err) == 0, "cluster: %s", err);
    /* The slots are served before every replica has joined: test_modes
     * checks that the first map lists them all, so wait until the nodes do. */
    TU_REQUIRE(replicas_known(3, (int)tu_slack(10000)), "every node lists 3 replicas");
    test_modes();
    test_misuse();
    test_pipe_each();
    test_pipes_each();
    test_via();
    test_pipe_each_hung();
    test_via_lost();
    test_reentrant();
    test_migration();
    test_watch_split();
    test_held_back_kept();
    test_unwatch_follows();
    test_not_run();
    test_clusterdown();
    test_stale_seed();
    test_failover();
    pk_cluster_stop(&C);
    pk_rm_tree(dir);
    return tu_done();
}
