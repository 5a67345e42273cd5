/* lc_client.c — the process-wide client: options, names, counters, and the
 * parts it owns (the mutex table, the hold table and its watchdog, the
 * pub/sub subscriber, the orphan reaper), which it starts and stops and
 * nothing more.
 *
 * The client holds no Redis connection of its own for callers: each caller
 * thread uses its own lc_conn, and the two background threads (watchdog,
 * subscriber) each own theirs, because a hiredis context is not thread-safe.
 */
#include "lc_conn.h"
#include "lc_internal.h"
#include "lc_redlock.h"
#include "lc_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

/* One row per mode: what lc_mode_info promises callers. The columns are
 * facts of each mode's commands (lc_lock.c), written once here so no caller
 * restates them. */
static const lc_mode_info mode_info[LC_MODE_COUNT] = {
    [LC_NONE] = {.name = "none", .carries_commands = true, .min_lease_ms = 1},
    [LC_MUTEX] = {.name = "mutex", .carries_commands = true, .min_lease_ms = 1},
    [LC_SETNX] = {.name = "setnx",
                  .carries_commands = true,
                  .fixed_lease = true,
                  .lock_in_redis = true,
                  .two_step_acquire = true,
                  .polls = true,
                  .min_lease_ms = 1},
    [LC_TOKEN] = {.name = "token",
                  .sends_ahead = true,
                  .carries_commands = true,
                  .fixed_lease = true,
                  .lock_in_redis = true,
                  .polls = true,
                  .min_lease_ms = 1},
    [LC_REENTRANT] = {.name = "reentrant",
                      .sends_ahead = true,
                      .carries_commands = true,
                      .watchdog = true,
                      .lock_in_redis = true,
                      .uses_owner = true,
                      .reentrant = true,
                      .queues_waiters = true,
                      .min_lease_ms = 1},
    [LC_REDLOCK] = {.name = "redlock",
                    .needs_redlock_nodes = true,
                    .polls = true,
                    .min_lease_ms = 3},
    [LC_FENCED] = {.name = "fenced",
                   .sends_ahead = true,
                   .carries_commands = true,
                   .fixed_lease = true,
                   .lock_in_redis = true,
                   .issues_fence = true,
                   .polls = true,
                   .min_lease_ms = 1},
};

const lc_mode_info *lc_mode_info_of(lc_mode mode)
{
    return (unsigned)mode < LC_MODE_COUNT ? &mode_info[mode] : NULL;
}

lc_status lc_conn_retry_pause(lc_conn *conn, lc_mode mode, int64_t max_ms, const atomic_int *cancel,
                              int64_t *slept_ms)
{
    const lc_mode_info *mi = lc_mode_info_of(mode);
    if (slept_ms != NULL)
        *slept_ms = 0;
    if (conn == NULL || max_ms < 0 || mi == NULL || !mi->polls)
        return LC_MISUSE;
    int64_t nap = lc__retry_nap_ms(conn->client->retry_interval_ms, &conn->rng, mode);
    /* with a flag, no longer than LC_CANCEL_LATENCY_MS, as the waits poll
     * then: one sleep sees a raised flag in time */
    if (cancel && nap > LC_CANCEL_LATENCY_MS)
        nap = LC_CANCEL_LATENCY_MS;
    if (lc__canceled(cancel))
        return LC_CANCELED;
    int64_t t0 = lc_now_ms();
    lc__sleep_ms(nap < max_ms ? nap : max_ms);
    if (lc__canceled(cancel))
        return LC_CANCELED;
    if (slept_ms != NULL)
        *slept_ms = lc_now_ms() - t0;
    return LC_OK;
}

const char *lc_mode_name(lc_mode mode)
{
    return (unsigned)mode < LC_MODE_COUNT ? mode_info[mode].name : "?";
}

int lc_mode_parse(const char *name, lc_mode *out)
{
    for (int i = 0; name && i < LC_MODE_COUNT; i++) {
        if (strcmp(name, mode_info[i].name) == 0) {
            *out = (lc_mode)i;
            return 0;
        }
    }
    return -1;
}

const char *lc_status_name(lc_status s)
{
    switch (s) {
    case LC_OK: return "ok";
    case LC_BUSY: return "busy";
    case LC_NOT_OWNER: return "not_owner";
    case LC_LOST: return "lost";
    case LC_IO: return "io";
    case LC_MISUSE: return "misuse";
    case LC_NOMEM: return "nomem";
    case LC_CANCELED: return "canceled";
    }
    return "?";
}

void lc_options_init(lc_options *o)
{
    memset(o, 0, sizeof *o);
    o->redis_host = "127.0.0.1";
    o->redis_port = 6379;
    o->connect_timeout_ms = 1000;
    o->command_timeout_ms = 1000;
    o->watchdog_timeout_ms = 30000;
    o->retry_interval_ms = 10;
    o->redlock_node_timeout_ms = 50;
}

static lc_status bad_option(char *err, size_t errlen, const char *what)
{
    if (err && errlen)
        snprintf(err, errlen, "lockcore: %s", what);
    return LC_MISUSE;
}

lc_status lc_client_new(const lc_options *o, lc_client **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!o || !out)
        return bad_option(err, errlen, "NULL options or out");
    if (!o->redis_host || !*o->redis_host || strlen(o->redis_host) >= 256)
        return bad_option(err, errlen, "redis_host must be 1..255 bytes");
    if (o->redis_port < 1 || o->redis_port > 65535)
        return bad_option(err, errlen, "redis_port must be 1..65535");
    if (o->redis_password && strlen(o->redis_password) >= 256)
        return bad_option(err, errlen, "redis_password must be < 256 bytes");
    if (o->redis_db < 0)
        return bad_option(err, errlen, "redis_db must be >= 0");
    if (o->connect_timeout_ms <= 0 || o->command_timeout_ms <= 0)
        return bad_option(err, errlen, "timeouts must be > 0 ms");
    if (o->watchdog_timeout_ms < 30 || o->watchdog_timeout_ms > 86400000)
        return bad_option(err, errlen, "watchdog_timeout_ms must be 30..86400000");
    if (o->retry_interval_ms < 1 || o->retry_interval_ms > 60000)
        return bad_option(err, errlen, "retry_interval_ms must be 1..60000");
    if (o->instance_id && (strlen(o->instance_id) >= LC_ID_LEN || !*o->instance_id))
        return bad_option(err, errlen, "instance_id must be 1..63 bytes");

    lc_client *c = calloc(1, sizeof *c);
    if (!c)
        return LC_NOMEM;
    snprintf(c->host, sizeof c->host, "%s", o->redis_host);
    c->port = o->redis_port;
    snprintf(c->password, sizeof c->password, "%s", o->redis_password ? o->redis_password : "");
    c->db = o->redis_db;
    c->connect_timeout_ms = o->connect_timeout_ms;
    c->command_timeout_ms = o->command_timeout_ms;
    c->watchdog_timeout_ms = o->watchdog_timeout_ms;
    c->retry_interval_ms = o->retry_interval_ms;
    /* Each setup initialises its mutexes first, so a setup that ran,
     * failed or not, has something to shut down, and one that did not
     * run has not (destroying a mutex never initialised is undefined). */
    bool cluster_set = false;
    lc_status s = lc__sentinel_setup(&c->sn, o, err, errlen);
    if (s == LC_OK) {
        s = lc__cluster_setup(&c->cl, o, err, errlen);
        cluster_set = true;
    }
    if (s == LC_OK)
        s = lc__redlock_setup(c, o, err, errlen);
    if (s != LC_OK) {
        lc__sentinel_shutdown(&c->sn);
        if (cluster_set)
            lc__cluster_shutdown(&c->cl);
        free(c);
        return s;
    }
    /* Long enough for a burst of barging (~40 critical sections at Redis
     * round-trip speed), short next to any wait_ms a caller would give. */
    c->barge_limit_ms = 5;
    if (o->instance_id) {
        snprintf(c->instance_id, sizeof c->instance_id, "%s", o->instance_id);
    } else {
        uuid_t u;
        uuid_generate(u);
        uuid_unparse_lower(u, c->instance_id);
    }
    lc__mutex_table_init(&c->mutexes);
    lc__watchdog_init(&c->wd);
    lc__pubsub_init(&c->ps);
    lc__reaper_init(&c->reaper);
    *out = c;
    return LC_OK;
}

void lc_client_free(lc_client *c)
{
    if (!c)
        return;
    lc__reaper_shutdown(c); /* first: it may still wake waiters through the pub/sub part */
    lc__watchdog_shutdown(c);
    lc__pubsub_shutdown(c);
    lc__sentinel_shutdown(&c->sn);
    lc__cluster_shutdown(&c->cl);
    lc__mutex_table_destroy(&c->mutexes);
    free(c);
}

const char *lc_client_instance_id(const lc_client *c)
{
    return c->instance_id;
}

void lc_client_stats(lc_client *c, lc_stats *s)
{
    s->acquired = atomic_load(&c->acquired);
    s->busy = atomic_load(&c->busy);
    s->io_errors = atomic_load(&c->io_errors);
    s->watchdog_renewals = atomic_load(&c->renewals);
    s->watchdog_lost = atomic_load(&c->renew_lost);
    s->watchdog_active = atomic_load(&c->holds_active);
    s->pubsub_channels = atomic_load(&c->channels_subscribed);
    s->pubsub_waiters = atomic_load(&c->waiters);
    s->orphans_adopted = atomic_load(&c->orphans_adopted);
    s->orphans_released = atomic_load(&c->orphans_released);
    s->orphans_unresolved = atomic_load(&c->orphans_unresolved);
    s->master_switches = atomic_load(&c->sn.switches);
    s->cluster_moved = atomic_load(&c->cl.moved);
    s->cluster_ask = atomic_load(&c->cl.ask);
    s->cluster_retries = atomic_load(&c->cl.retries);
    s->cluster_refreshes = atomic_load(&c->cl.refreshes);
    s->redlock_nodes_down = (uint32_t)atomic_load(&c->rl_down);
}

void lc_client_master(lc_client *c, char *buf, size_t len)
{
    if (!buf || !len)
        return;
    if (c->sn.n) {
        lc__sentinel_current(&c->sn, buf, len);
    } else if (c->cl.on) {
        /* every master of the map, in slot order */
        buf[0] = '\0';
        int prev = -1;
        size_t used = 0;
        bool seen[LC__CL_MAX_ADDRS] = {false};
        for (int s = 0; s < LC__SLOTS && used + 1 < len; s++) {
            int a = lc__cluster_master(&c->cl, s);
            if (a < 0 || a == prev || seen[a])
                continue;
            prev = a;
            seen[a] = true;
            char at[LC_ADDR_LEN];
            lc__cluster_addr_text(lc__cluster_at(&c->cl, a), at, sizeof at);
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "," : "", at);
        }
    } else {
        snprintf(buf, len, "%s:%d", c->host, c->port);
    }
}

int lc_cluster_map_get(lc_client *c, lc_cluster_map *out)
{
    return lc__cluster_snapshot(&c->cl, out);
}

int lc_cluster_slot_master(lc_client *c, int slot, char *buf, size_t len)
{
    if (!c->cl.on || slot < 0 || slot >= LC__SLOTS || !buf || !len)
        return -1;
    int a = lc__cluster_master(&c->cl, slot);
    if (a < 0)
        return -1;
    lc__cluster_addr_text(lc__cluster_at(&c->cl, a), buf, len);
    return 0;
}
