/* main.c — miaosha-server: configuration, start-up, signals and graceful
 * shutdown. The HTTP layer and its threading model are described at the top
 * of svc_http.c.
 *
 * Exit statuses: 0 after SIGTERM/SIGINT (or --help/--version), 2 for an
 * invalid configuration (the message names the key, value and range), 1
 * when the service cannot start (e.g. the port is taken), 3 when a teaching
 * fault (?fault=) ends the process on purpose.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <miaosha_config.h>

#include "svc.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_health.h"
#include "svc_http.h"
#include "svc_mode.h"
#include "svc_pool.h"
#include "svc_process.h"
#include "svc_routes.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_trace.h"

#define SVC_ADMIN_WORKERS 2
#define SHUTDOWN_DRAIN_MS 3000 /* let in-flight requests finish normally */
#define SHUTDOWN_ABORT_MS 4500 /* then cut work_ms sleeps; exit before 5 s */

/* ---- configuration ---- */

static svc_level map_level(cfg_log_level l)
{
    switch (l) {
    case CFG_LOG_ERROR: return SVC_ERROR;
    case CFG_LOG_WARN: return SVC_WARN;
    case CFG_LOG_DEBUG: return SVC_DEBUG;
    default: return SVC_INFO;
    }
}

/* redlock.nodes (checked by cfg_load: "host:port" items, an odd count,
 * none twice) split into lc_options' list, in storage that outlives the
 * client. Returns the count (0: not configured). */
static int redlock_nodes_from(const cfg_config *c, char *buf, size_t len, const char **nodes,
                              int max)
{
    int n = 0;
    snprintf(buf, len, "%s", c->redlock.nodes);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
        nodes[n++] = t;
    return n;
}

/* Every lock master must answer PING at start: a node missing from the
 * beginning is a configuration mistake, not a failure to tolerate (the
 * majority would then rest on fewer nodes than the operator counted). So is
 * one server under two names ("localhost:7001" and "127.0.0.1:7001"), which
 * the configuration's text compare cannot see: its vote would count twice,
 * and a majority of the names could be a minority of the servers. Two nodes
 * are one server when INFO server gives both the same run_id (a fresh
 * random id per redis-server process). Returns 0, or -1 with "<node>: <why>"
 * in err. */
static int redlock_nodes_reachable(const char *const *nodes, int n, int timeout_ms, char *err,
                                   size_t errlen)
{
    char run_id[LC_REDLOCK_MAX_NODES][48];
    for (int i = 0; i < n && i < LC_REDLOCK_MAX_NODES; i++) {
        char host[CFG_NODES_LEN];
        snprintf(host, sizeof host, "%s", nodes[i]);
        char *colon = strrchr(host, ':');
        *colon = '\0';
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        redisContext *ctx = redisConnectWithTimeout(host, atoi(colon + 1), tv);
        redisReply *r = NULL;
        if (ctx && !ctx->err && redisSetTimeout(ctx, tv) == REDIS_OK)
            r = redisCommand(ctx, "PING");
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (!ok)
            snprintf(err, errlen, "%s is not reachable at start (%s)", nodes[i],
                     !ctx                                ? "out of memory"
                     : ctx->err                          ? ctx->errstr
                     : r && r->type == REDIS_REPLY_ERROR ? r->str
                                                         : "no answer to PING");
        if (r)
            freeReplyObject(r);
        run_id[i][0] = '\0';
        r = ok ? redisCommand(ctx, "INFO server") : NULL;
        const char *id = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
        if (id != NULL)
            sscanf(id + 7, "%47[0-9a-f]", run_id[i]);
        if (r)
            freeReplyObject(r);
        redisFree(ctx);
        if (!ok)
            return -1;
        for (int k = 0; k < i && run_id[i][0]; k++) {
            if (strcmp(run_id[k], run_id[i]) == 0) {
                snprintf(err, errlen,
                         "%s and %s are one Redis server (run_id %.12s...): Redlock's majority "
                         "needs independent masters",
                         nodes[k], nodes[i], run_id[i]);
                return -1;
            }
        }
    }
    return 0;
}

/* Every seed that answers must be a cluster node: a plain Redis in the
 * list is a configuration mistake (its keys would never be found again
 * once the map is taken from another seed). A seed that does not answer is
 * no mistake: the service starts, /healthz 503, until the cluster answers.
 * Returns 0, or -1 with "<seed> is not in cluster mode (...)" in err. */
static int cluster_seeds_check(const char *const *seeds, int n, int timeout_ms,
                               const char *password, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        char host[CFG_HOST_LEN];
        snprintf(host, sizeof host, "%s", seeds[i]);
        char *colon = strrchr(host, ':');
        int port = atoi(colon + 1);
        *colon = '\0';
        const char *h = host;
        if (host[0] == '[' && colon > host + 1 && colon[-1] == ']') {
            colon[-1] = '\0';
            h = host + 1;
        }
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        redisContext *ctx = redisConnectWithTimeout(h, port, tv);
        redisReply *r = NULL;
        if (ctx && !ctx->err && redisSetTimeout(ctx, tv) == REDIS_OK) {
            if (password[0])
                freeReplyObject(redisCommand(ctx, "AUTH %s", password));
            r = redisCommand(ctx, "CLUSTER INFO");
        }
        int bad = r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "cluster support disabled");
        if (bad)
            snprintf(err, errlen, "%s is not in cluster mode (%s)", seeds[i], r->str);
        if (r)
            freeReplyObject(r);
        redisFree(ctx);
        if (bad)
            return -1;
    }
    return 0;
}

/* The default SKU's seed, a task of the Redis probe (svc_health_when_up). */
typedef struct seed_job {
    const char *sku;
    long long initial;
} seed_job;

static int seed_default(lc_conn *conn, void *arg, char *err, size_t errlen)
{
    static svc_log_repeat warn_seed = SVC_LOG_REPEAT_INIT;
    const seed_job *j = arg;
    char why[LC_ERRSTR_LEN];
    if (svc_stock_seed(conn, j->sku, j->initial, why, sizeof why) != 0) {
        snprintf(err, errlen, "sku %s: not seeded yet (%s)", j->sku, why);
        svc_log_every(&warn_seed, SVC_WARN, "%s; trying again", err);
        return -1;
    }
    svc_log(SVC_INFO, "sku %s: %s (initial stock %lld)", j->sku, why, j->initial);
    return 0;
}

static int wait_signal(void)
{
    sigset_t set;
    int sig = 0;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    while (sigwait(&set, &sig) != 0) {
    }
    return sig;
}

int main(int argc, char **argv)
{
    static cfg_config cfg;
    char err[CFG_ERR_LEN];
    sigset_t set;

    cfg_status cst = cfg_load(&cfg, argc, argv, err, sizeof err);
    switch (cst) {
    case CFG_OK: break;
    case CFG_EXIT_HELP: cfg_print_help(stdout); return 0;
    case CFG_EXIT_VERSION: cfg_print_version(stdout); return 0;
    case CFG_EXIT_PRINT: {
        char *txt = cfg_to_json(&cfg, CFG_JSON_PRETTY);
        if (txt == NULL)
            return 1;
        printf("%s\n", txt);
        free(txt);
        fflush(stdout); /* the JSON before the notes below, also in one file */
        if (cfg.redis.cluster_nodes[0])
            fprintf(stderr,
                    "miaosha-server: redis.cluster_nodes is set: redis.host and redis.port (and "
                    "--redis) are not used\n");
        /* The same warning a start logs: a check of the config should show
         * the typo too. */
        if (cfg_unknown_env(err, sizeof err) > 0)
            fprintf(stderr, "miaosha-server: ignoring unknown environment variables: %s\n", err);
        return 0;
    }
    default:
        fprintf(stderr, "miaosha-server: invalid configuration: %s\n", err);
        fprintf(stderr, "miaosha-server: see --help\n");
        return cfg_exit_code(cst) > 0 ? cfg_exit_code(cst) : 2;
    }
    svc_log_set_level(map_level(cfg.log.level));
    if (cfg_unknown_env(err, sizeof err) > 0)
        svc_log(SVC_WARN, "ignoring unknown environment variables: %s", err);

    /* Signals are taken synchronously by main (sigwait): block them before
     * any thread starts so every thread inherits the mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    SVC_PT(pthread_sigmask(SIG_BLOCK, &set, NULL));
    signal(SIGPIPE, SIG_IGN);

    lc_options lo;
    lc_options_init(&lo);
    lo.redis_host = cfg.redis.host;
    lo.redis_port = cfg.redis.port;
    lo.redis_password = cfg.redis.password;
    lo.redis_db = cfg.redis.db;
    lo.connect_timeout_ms = cfg.redis.connect_timeout_ms;
    lo.command_timeout_ms = cfg.redis.command_timeout_ms;
    lo.watchdog_timeout_ms = cfg.lock.watchdog_timeout_ms;
    lo.retry_interval_ms = cfg.lock.retry_interval_ms;
    lo.instance_id = cfg.instance_id;
    /* redis.sentinels, validated by cfg_load: "host:port,host:port" */
    static char sentinel_text[CFG_SENTINELS_LEN];
    static const char *sentinels[LC_SENTINEL_MAX_NODES];
    snprintf(sentinel_text, sizeof sentinel_text, "%s", cfg.redis.sentinels);
    for (char *save = NULL, *tok = strtok_r(sentinel_text, ",", &save);
         tok && lo.sentinel_count < LC_SENTINEL_MAX_NODES; tok = strtok_r(NULL, ",", &save))
        sentinels[lo.sentinel_count++] = tok;
    lo.sentinels = sentinels;
    lo.master_name = cfg.redis.master_name;
    static char nodes_buf[CFG_NODES_LEN];
    static const char *nodes[LC_REDLOCK_MAX_NODES];
    lo.redlock_node_count = redlock_nodes_from(&cfg, nodes_buf, sizeof nodes_buf, nodes,
                                               LC_REDLOCK_MAX_NODES);
    lo.redlock_nodes = nodes;
    /* redis.cluster_nodes, validated by cfg_load: "host:port,[v6]:port" */
    static char cluster_text[CFG_CLUSTER_LEN];
    static const char *seeds[LC_CLUSTER_MAX_SEEDS];
    snprintf(cluster_text, sizeof cluster_text, "%s", cfg.redis.cluster_nodes);
    for (char *save = NULL, *tok = strtok_r(cluster_text, ",", &save);
         tok && lo.cluster_node_count < LC_CLUSTER_MAX_SEEDS; tok = strtok_r(NULL, ",", &save))
        seeds[lo.cluster_node_count++] = tok;
    lo.cluster_nodes = seeds;
    lo.cluster_refresh_ms = cfg.redis.cluster_refresh_ms;
    if (lo.cluster_node_count > 0 &&
        cluster_seeds_check(seeds, lo.cluster_node_count, cfg.redis.connect_timeout_ms,
                            cfg.redis.password, err, sizeof err) != 0) {
        fprintf(stderr, "miaosha-server: invalid configuration: redis.cluster_nodes: %s\n", err);
        return 2;
    }
    lo.redlock_node_timeout_ms = cfg.redlock.node_timeout_ms;
    lo.redlock_restart_delay_ms = cfg.redlock.restart_delay_ms;
    if (lo.redlock_node_count > 0 &&
        redlock_nodes_reachable(nodes, lo.redlock_node_count, cfg.redis.connect_timeout_ms, err,
                                sizeof err) != 0) {
        fprintf(stderr, "miaosha-server: invalid configuration: redlock.nodes: %s\n", err);
        return 2;
    }
    svc_mode_offer_redlock(lo.redlock_node_count > 0);
    lc_client *client = NULL;
    if (lc_client_new(&lo, &client, err, sizeof err) != LC_OK) {
        fprintf(stderr, "miaosha-server: invalid configuration: %s\n", err);
        return 2;
    }

    svc_stats_init();
    svc_process_init();
    if (svc_trace_init(cfg.trace.enabled, cfg.trace.ring_size, cfg.trace.max_skus) != 0)
        svc_log(SVC_WARN, "purchase trace off: no memory for its %d rings", cfg.trace.max_skus);
    /* The default SKU is seeded once (never resetting a running sale) by
     * the probe: at once when Redis answers, else as soon as it does. */
    seed_job seed = {cfg.purchase.sku, (long long)cfg.purchase.initial_stock};
    svc_health_when_up(seed_default, &seed);
    svc_health_watch_redlock(client);
    if (svc_health_start(&cfg, &lo) != 0) {
        svc_log(SVC_ERROR, "cannot start the Redis probe");
        lc_client_free(client);
        return 1;
    }
    if (cfg.purchase.local_sold_out && svc_soldout_start(&lo) != 0) {
        svc_log(SVC_ERROR, "cannot start the sold-out flag's listener");
        svc_health_stop();
        lc_client_free(client);
        return 1;
    }
    if (svc_gauges_start(&lo, cfg.metrics.sku_gauges, cfg.metrics.refresh_ms) != 0) {
        svc_log(SVC_ERROR, "cannot start the audit gauges' reader");
        svc_soldout_stop();
        svc_health_stop();
        lc_client_free(client);
        return 1;
    }
    if (!svc_health_up())
        svc_log(SVC_WARN, "sku %s: to be seeded once Redis answers and takes it", cfg.purchase.sku);

    svc_pool *purchases = svc_pool_new(client, cfg.server.workers, cfg.server.max_queue,
                                       cfg.server.lua_batches, "purchase", svc_http_purchase_done,
                                       err, sizeof err);
    svc_pool *admin = purchases ? svc_pool_new(client, SVC_ADMIN_WORKERS, cfg.server.max_queue, 0,
                                               "admin", svc_http_job_done, err, sizeof err)
                                : NULL;
    if (admin == NULL || svc_http_start(&cfg, client, purchases, admin, err, sizeof err) != 0) {
        svc_log(SVC_ERROR, "cannot start: %s", err);
        svc_pool_free(admin);
        svc_pool_free(purchases);
        svc_gauges_stop();
        svc_soldout_stop();
        svc_health_stop();
        lc_client_free(client);
        return 1;
    }
    char redis_at[CFG_SENTINELS_LEN + CFG_ID_LEN + 32], wait_text[16] = "all";
    if (cfg.redis.wait_replicas != CFG_WAIT_REPLICAS_ALL)
        snprintf(wait_text, sizeof wait_text, "%d", cfg.redis.wait_replicas);
    if (cfg.redis.sentinels[0] != '\0')
        snprintf(redis_at, sizeof redis_at, "master %s from sentinels %s", cfg.redis.master_name,
                 cfg.redis.sentinels);
    else if (cfg.redis.cluster_nodes[0] != '\0')
        snprintf(redis_at, sizeof redis_at,
                 "cluster from seeds %s (redis.host/port not used; slot map every %d ms)",
                 cfg.redis.cluster_nodes, cfg.redis.cluster_refresh_ms);
    else
        snprintf(redis_at, sizeof redis_at, "%s:%d", cfg.redis.host, cfg.redis.port);
    svc_log(SVC_INFO,
            "miaosha-server %s instance %s listening on %s port %d (io_threads %d, workers %d, "
            "redis %s, wait_replicas %s, faults %s, admin token %s)",
            cfg_version(), cfg.instance_id, cfg.listen.address, svc_http_port(),
            cfg.server.io_threads, cfg.server.workers, redis_at, wait_text,
            cfg.faults.enabled ? "enabled" : "disabled", cfg.admin_token[0] ? "set" : "not set");

    if (lo.redlock_node_count > 0)
        svc_log(SVC_INFO,
                "redlock on %d lock masters (%s), node timeout %d ms, restart delay %lld ms",
                lo.redlock_node_count, cfg.redlock.nodes, cfg.redlock.node_timeout_ms,
                (long long)cfg.redlock.restart_delay_ms);

    int sig = wait_signal();
    int64_t t0 = lc_now_us();
    svc_log(SVC_INFO, "received %s: stop accepting, finishing %ld in-flight requests",
            sig == SIGINT ? "SIGINT" : "SIGTERM", svc_http_pending());
    /* Nothing new starts; purchases waiting for a lock give up now (503
     * shutting_down, after releasing what they hold: svc_cancel_flag), those
     * in their critical section finish. */
    svc_shutdown_begin();
    while (svc_http_pending() > 0 && lc_now_us() - t0 < SHUTDOWN_DRAIN_MS * 1000)
        usleep(5000);
    if (svc_http_pending() > 0) {
        svc_log(SVC_WARN, "%ld requests still in flight: cutting work_ms sleeps short",
                svc_http_pending());
        svc_shutdown_abort_work();
        while (svc_http_pending() > 0 && lc_now_us() - t0 < SHUTDOWN_ABORT_MS * 1000)
            usleep(5000);
    }
    if (svc_http_pending() > 0) {
        /* Lock waits were canceled and sleeps cut, so only a request stuck
         * on a Redis command (bounded by redis.command_timeout_ms, but that
         * may be up to 60 s) can remain. Its locks' leases free them. */
        svc_log(SVC_WARN, "%ld requests still waiting on Redis; exiting without them",
                svc_http_pending());
        _exit(0);
    }
    svc_http_stop();
    svc_pool_free(purchases);
    svc_pool_free(admin);
    svc_gauges_stop();
    svc_soldout_stop();
    svc_health_stop();
    lc_client_free(client);
    svc_log(SVC_INFO, "stopped after %.0f ms", (double)(lc_now_us() - t0) / 1000.0);
    return 0;
}
