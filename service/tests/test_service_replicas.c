/* test_service_replicas.c — svc_wait_replicas in-process, against a private
 * master and one replica of its own (real redis-servers):
 *   - a write then WAIT on the same connection: 0 (the replica has it);
 *   - asking for more replicas than exist: -1 naming how many had it;
 *   - the connection remade between the write and the WAIT (the server
 *     closed it: CLIENT KILL, as a failover or a network error would):
 *     -1 "remade", although a WAIT on the fresh connection — which has
 *     written nothing — answers 1 at once; without the check the purchase
 *     would answer 200 for a write nobody saw reach a replica;
 *   - redis.wait_replicas = all (no Sentinel: the master's INFO
 *     replication): unknown before the first refresh (503, not 200), then
 *     the one replica; the replica killed, it still counts (WAIT 1 answers
 *     0: not replicated), and a master switch carries the set over: the
 *     old master becomes a replica to wait for, the new one is not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_replicas.h"
#include "tu.h"

/* One command of two or three words on c (a3 NULL: two). */
static redisReply *one(lc_conn *c, const char *a1, const char *a2, const char *a3)
{
    lc_pipe p;
    lc_pipe_init(&p);
    const char *argv[] = {a1, a2, a3};
    lc_pipe_append_argv(&p, a3 ? 3 : 2, argv, NULL);
    (void)lc_conn_pipe(c, &p);
    redisReply *r = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    return r;
}

/* INCR on c, answered; returns lc_conn_via right after (the write's
 * connection). */
static uint64_t write_one(lc_conn *c)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "INCR replicas-test");
    (void)lc_conn_pipe(c, &p);
    uint64_t connects = lc_conn_via(c);
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r != NULL && r->type == REDIS_REPLY_INTEGER, "the write");
    freeReplyObject(r);
    lc_pipe_clear(&p);
    return connects;
}

int main(void)
{
    tu_redis master, replica;
    memset(&master, 0, sizeof master);
    memset(&replica, 0, sizeof replica);
    TU_REQUIRE(tu_redis_start(&master, 0, NULL) == 0, "master");
    char mport[16];
    snprintf(mport, sizeof mport, "%d", master.port);
    const char *const rargs[] = {"--replicaof", "127.0.0.1", mport, NULL};
    TU_REQUIRE(tu_redis_start(&replica, 0, rargs) == 0, "replica");
    int64_t until = lc_now_ms() + tu_slack(10000);
    char info[4096] = "";
    while (lc_now_ms() < until) {
        tu_redis_str(master.port, info, sizeof info, "INFO replication");
        if (strstr(info, "connected_slaves:1") && strstr(info, "state=online"))
            break;
        tu_sleep_ms(20);
    }
    TU_REQUIRE(strstr(info, "state=online") != NULL, "the replica is online: %s", info);

    lc_options o;
    lc_options_init(&o);
    o.redis_port = master.port;
    lc_client *cli = NULL;
    char err[256];
    TU_REQUIRE(lc_client_new(&o, &cli, err, sizeof err) == LC_OK, "client: %s", err);
    lc_conn *c = NULL;
    TU_REQUIRE(lc_conn_new(cli, &c) == LC_OK, "connection");
    cfg_config s;
    cfg_defaults(&s);
    s.redis.wait_replicas = 1;
    s.redis.wait_timeout_ms = (int)tu_slack(2000);
    char detail[256];

    uint64_t at = write_one(c);
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == 0,
             "same connection, one replica: replicated (%s)", detail);

    s.redis.wait_replicas = 2;
    s.redis.wait_timeout_ms = 100;
    at = write_one(c);
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == -1 &&
                 strstr(detail, "reached 1 of 2") != NULL,
             "two asked, one exists: %s", detail);
    s.redis.wait_replicas = 1;
    s.redis.wait_timeout_ms = (int)tu_slack(2000);

    at = write_one(c);
    redisReply *id = one(c, "CLIENT", "ID", NULL);
    TU_REQUIRE(id != NULL && id->type == REDIS_REPLY_INTEGER, "CLIENT ID");
    TU_CHECK(tu_redis_int(master.port, "CLIENT KILL ID %lld", id->integer) == 1,
             "the master closes the connection after the write");
    freeReplyObject(id);
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == -1 &&
                 strstr(detail, "remade") != NULL,
             "connection remade after the write: not replicated (%s)", detail);
    redisReply *w = one(c, "WAIT", "1", "100");
    TU_CHECK(w != NULL && w->type == REDIS_REPLY_INTEGER && w->integer == 1,
             "(a WAIT on the fresh connection answers 1 at once: what the check guards against)");
    freeReplyObject(w);

    s.redis.wait_replicas = 0;
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == 0,
             "wait_replicas 0: nothing to wait for");

    /* all: the set comes from the refresh, never from the purchase path */
    s.redis.wait_replicas = CFG_WAIT_REPLICAS_ALL;
    s.redis.wait_timeout_ms = 100;
    svc_replicas_setup(&s, &o);
    at = write_one(c);
    TU_CHECK(svc_replicas_wanted(&s) == -1 &&
                 svc_wait_replicas(&s, c, at, detail, sizeof detail) == -1 &&
                 strstr(detail, "not known yet") != NULL,
             "all, before the first refresh: not replicated (%s)", detail);
    char maddr[64], raddr[64], known[256];
    snprintf(maddr, sizeof maddr, "127.0.0.1:%d", master.port);
    snprintf(raddr, sizeof raddr, "127.0.0.1:%d", replica.port);
    svc_replicas_refresh(c, maddr, 300);
    svc_replicas_known(known, sizeof known);
    TU_CHECK(svc_replicas_wanted(&s) == 1 && !strcmp(known, raddr),
             "all: the master's one replica (%d: %s)", svc_replicas_wanted(&s), known);
    at = write_one(c);
    s.redis.wait_timeout_ms = (int)tu_slack(2000);
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == 0, "all, one replica up: %s",
             detail);
    s.redis.wait_timeout_ms = 100;
    tu_redis_kill(&replica, 1);
    int64_t gone = lc_now_ms() + tu_slack(5000);
    while (lc_now_ms() < gone) {
        tu_redis_str(master.port, info, sizeof info, "INFO replication");
        if (strstr(info, "connected_slaves:0"))
            break;
        tu_sleep_ms(20);
    }
    svc_replicas_refresh(c, maddr, 300);
    TU_CHECK(strstr(info, "connected_slaves:0") && svc_replicas_wanted(&s) == 1,
             "all: the replica is down and still counts (%d)", svc_replicas_wanted(&s));
    at = write_one(c);
    TU_CHECK(svc_wait_replicas(&s, c, at, detail, sizeof detail) == -1 &&
                 strstr(detail, "reached 0 of 1") != NULL && strstr(detail, "all") != NULL,
             "all, the replica down: not replicated (%s)", detail);
    /* a switch, as the probe sees it: the master named is another one */
    svc_replicas_refresh(c, raddr, 300);
    svc_replicas_known(known, sizeof known);
    TU_CHECK(svc_replicas_wanted(&s) == 1 && !strcmp(known, maddr),
             "after a switch the old master is the replica to wait for: %s", known);
    svc_replicas_stop();
    TU_CHECK(svc_replicas_wanted(&s) == -1, "stop forgets the set");

    lc_conn_free(c);
    lc_client_free(cli);
    tu_redis_stop(&replica);
    tu_redis_stop(&master);
    return tu_done();
}
