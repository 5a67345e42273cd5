/* svc_section.c — the critical section of a locked purchase (svc_section.h).
 *
 *   acquire → read the stock → decide → work → commit → WAIT → release
 *
 * svc_section_run reads as that line. The section is the seckill
 * walkthrough's (docs/locks.md, sections 0-7), non-atomic on purpose: the stock is read, the buyer
 * works (work_ms), and stock-1 is written later. Only the lock stands between two buyers who read
 * the same value; without one (mode none) both write the same stock-1 and one unit is sold twice —
 * the oversell the project shows. The story of the modes: docs/locks.md.
 *
 * How commands travel changes the round trips, not the plot. Pipelined
 * (purchase.pipeline, ?pipeline=1; the default for every mode whose lock
 * carries commands, lc_mode_info.carries_commands) the read rides in the
 * acquire's write, right after the lock command, and the commit in the
 * innermost release's write, right before it (lc_acquire_pipe,
 * lc_release_pipe). Redis runs one connection's commands in order, so the
 * lock is still held from the acquire's execution to the release's, and a
 * read whose acquire failed is dropped by the lock core. A locked purchase
 * then costs two round trips instead of four (setnx three: its PEXPIRE
 * stays apart, the flaw), and the lock is held one round trip less. The
 * first attempt itself leaves as soon as a worker takes the request
 * (svc_section_start), so whatever the worker does meanwhile rides in its
 * round trip.
 *
 * Stock resets: the read WATCHes the SKU's epoch (svc_store.c), so a PUT
 * /stock between the read and the commit voids the commit (409
 * stock_reset): a purchase in flight never writes its old stock-1 over the
 * new stock, and the reset's deletion of the held lock cannot let two
 * buyers both commit on one stock read.
 *
 * A Redis Cluster migrating the stock's slot between the read and the
 * commit makes the node of the read's WATCH refuse the commit, nothing
 * written (lc_conn_held_back); where the lock is still held (not in Redis)
 * the section goes again from the read, as long as a TRYAGAIN would be
 * retried (held_back). So that the lock is still held then, a lock not kept
 * in Redis is released after the commit on a cluster, not with it.
 *
 * The client: a purchase peeks at its client's socket before the commit
 * (and before the lock: svc_purchase_admit); when the client has gone, it
 * writes nothing, releases what it holds and ends 499 client_gone. SIGTERM
 * ends a lock wait with LC_CANCELED and a work_ms sleep early: 503
 * shutting_down, nothing written.
 */
#include "svc_section.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "lc_testhooks.h"

#include "svc_bucket.h"
#include "svc_clock.h"
#include "svc_replicas.h"
#include "svc_shutdown.h"

static bool pause_at(svc_section *x, svc_stage stage, const svc_stock_read *rd,
                     purchase_result *end);
static bool acquire(svc_section *x, purchase_result *end);
static bool read_stock(svc_section *x, svc_stock_read *rd, purchase_result *end);
static bool work(svc_section *x, purchase_result *end);
static bool fit_to_commit(svc_section *x, purchase_result *end);
static purchase_result commit(svc_section *x, const svc_stock_read *rd);
static bool held_back(svc_section *x, purchase_result *end, int again, int64_t *give_up_ms);
static void release_all(svc_section *x);

purchase_result svc_section_run(svc_section *x)
{
    const svc_req *r = x->r;
    svc_stock_read rd;
    purchase_result end;

    /* Acquire: the outer lock, whose first attempt is already on its way
     * (svc_section_start), then reenter's nested holds of the same key. */
    if (!acquire(x, &end) || !pause_at(x, SVC_STAGE_LOCKED, NULL, &end))
        goto release;

    /* A commit a slot migration held back goes again from the read (a
     * Redis Cluster only, held_back). */
    int64_t give_up_ms = 0;
    for (int again = 0;; again++) {
        /* Read the stock, and the buyer's order count, under the lock. */
        if (!read_stock(x, &rd, &end))
            goto release;
        svc_trace_read(&x->tr, rd.stock);
        if (!pause_at(x, SVC_STAGE_READ, &rd, &end))
            goto release;

        /* Decide: a stock reset since the buyer's reservation voids the
         * purchase (the reservation was counted under the old stock); a SKU
         * that was never stocked is no sale at all; then one buy per user,
         * then the stock. */
        if (x->epoch != NULL && strcmp(rd.epoch, x->epoch) != 0) {
            snprintf(x->o.detail, sizeof x->o.detail, "%s", SVC_BUCKET_RESET_RESERVED);
            end = PR_STOCK_RESET;
            goto release;
        }
        if (!rd.stocked) {
            snprintf(x->o.detail, sizeof x->o.detail,
                     "sku %s was never stocked (PUT /stock/%s creates it); nothing was written",
                     r->sku, r->sku);
            end = PR_UNKNOWN_SKU;
            goto release;
        }
        if (x->limited && rd.bought >= r->s->purchase.limit_per_user) {
            snprintf(x->o.detail, sizeof x->o.detail,
                     "user %s already holds %lld order(s) of this sku (purchase.limit_per_user = "
                     "%lld); nothing was written",
                     r->p.user, rd.bought, (long long)r->s->purchase.limit_per_user);
            end = PR_LIMIT_REACHED;
            goto release;
        }
        if (rd.stock <= 0) {
            x->o.stock_left = rd.stock < 0 ? rd.stock : 0;
            x->o.has_stock_left = true;
            end = PR_SOLD_OUT;
            goto release;
        }

        /* Work: the business time the lock must cover. Another buyer the lock
         * does not keep out reads the same stock now. */
        if (!(again == 0 ? work(x, &end) : fit_to_commit(x, &end)))
            goto release;

        /* Commit stock-1, sold+1 and the order in one step. */
        end = commit(x, &rd);
        if (!held_back(x, &end, again, &give_up_ms))
            break;
    }

    /* A sale is acknowledged once redis.wait_replicas replicas have it. */
    if (end == PR_SOLD &&
        svc_wait_replicas(r->s, x->conn, x->write_via, x->o.detail, sizeof x->o.detail) != 0)
        end = PR_NOT_REPLICATED; /* with the order id: written on the master */
    if (end == PR_SOLD) {
        svc_trace_written(&x->tr, rd.stock - 1);
        x->o.stock_left = rd.stock - 1;
        x->o.has_stock_left = true;
    }
    /* After the commit nothing is left to undo: an abandoned step goes on
     * to release and answers what the commit did. */
    (void)pause_at(x, SVC_STAGE_WRITTEN, &rd, &end);

release:
    /* Release what is still held, innermost first. */
    release_all(x);
    if (x->wait_us >= 0) /* the outer lock was held */
        (void)pause_at(x, SVC_STAGE_RELEASED, NULL, &end);
    return end;
}

/* --- a stepped purchase's stops ------------------------------------------ */

/* A stepped purchase stops at stage with what it knows (svc_step.h) until
 * told to go on; every other purchase goes straight on. false when it was
 * abandoned or the server is shutting down: before the commit *end is
 * then that ending (nothing written), after it *end is left alone. rd:
 * the read, from the read on; *end: the outcome, from the commit on. */
static bool pause_at(svc_section *x, svc_stage stage, const svc_stock_read *rd,
                     purchase_result *end)
{
    if (x->step == NULL)
        return true;
    bool committed = stage >= SVC_STAGE_WRITTEN && rd != NULL;
    svc_step_facts f = {
        .holds_lock = x->nheld > 0,
        .lease_gone_us = x->nheld > 0 ? x->lease_gone_us : 0,
        .has_read = rd != NULL,
        .read = rd != NULL ? rd->stock : 0,
        .has_written = committed && *end == PR_SOLD,
        .written = rd != NULL ? rd->stock - 1 : 0,
        .fence = x->o.fence,
        .lock_lost = x->o.lock_lost || (x->nheld > 0 && lc_guard_lost(x->held[0])),
        .deleted_other_lock = x->o.deleted_other_lock,
        .error = stage >= SVC_STAGE_WRITTEN ? svc_result[*end].error : NULL,
    };
    purchase_result why = PR_STEP_ABANDONED;
    if (svc_step_pause(x->step, stage, &f, &why))
        return true;
    if (stage < SVC_STAGE_WRITTEN) {
        *end = why;
        if (why == PR_STEP_ABANDONED)
            snprintf(x->o.detail, sizeof x->o.detail,
                     "stepped purchase left paused at stage %s for %d s (teach.step_timeout_s); "
                     "its lock released, nothing was written",
                     svc_stage_name(stage), x->r->s->teach.step_timeout_s);
        else
            snprintf(x->o.detail, sizeof x->o.detail,
                     "server shutting down while the stepped purchase was paused; nothing was "
                     "written");
    }
    return false;
}

/* --- how the read travels ---------------------------------------------- */

static void take_read(svc_section *x, lc_pipe *p)
{
    for (int i = 0; i < x->read_n; i++)
        x->read_rep[i] = lc_pipe_take(p, i);
    x->read_came = true;
}

static void free_read(svc_section *x)
{
    for (int i = 0; i < SVC_STORE_MAX_REPLIES; i++) {
        freeReplyObject(x->read_rep[i]);
        x->read_rep[i] = NULL;
    }
}

/* Appends the store's read to p (the fencing token, once known, is the
 * holder's; the user when one buy per user is counted). */
static lc_status append_read(svc_section *x, lc_pipe *p, bool eval)
{
    const svc_req *r = x->r;
    x->read_n = x->store->append_read(p, x->tag, x->limited ? r->p.user : NULL, x->epoch != NULL,
                                      x->o.fence, eval);
    return x->read_n > 0 ? LC_OK : LC_NOMEM;
}

/* The read on its own round trip, under the lock (x->read_rep). */
static lc_status send_read(svc_section *x, bool eval)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_status st = append_read(x, &p, eval);
    if (st == LC_OK) {
        (void)lc_conn_pipe(x->conn, &p); /* a missing reply is seen by the store */
        take_read(x, &p);
    }
    lc_pipe_clear(&p);
    return st;
}

void svc_section_start(svc_section *x)
{
    x->store = x->lock->issues_fence ? &svc_store_fenced : &svc_store_plain;
    x->wait_us = -1;
    x->gave_up_us = -1;
    x->read_came = false;
    x->read_ctx = NULL;
    x->nheld = 0;
    x->lease_gone_us = 0;
    x->write_via = 0;
    x->o.pipeline = x->pipeline;
    x->acq_t0_us = lc_now_us();
    svc_trace_mark(&x->tr, SVC_T_WAIT_START);
    lc_pipe_init(&x->rp);
    /* Pipelined, the read goes under the fence counter's value (fenced):
     * the holder's token is only known from the acquire's reply. */
    x->read_st = x->pipeline ? append_read(x, &x->rp, false) : LC_OK;
    if (x->read_st == LC_OK)
        (void)lc_acquire_send(x->conn, &x->a, x->pipeline ? &x->rp : NULL); /* seen by acquire() */
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, x->new_order_id);
}

/* --- the lock ------------------------------------------------------------ */

/* The teaching faults (faults.enabled, ?fault=) end the process inside the
 * lock, to show what each mode leaves behind. */
static void crash_before_expire(void *arg)
{
    svc_log(SVC_ERROR,
            "fault crash_before_expire: exiting between SETNX and PEXPIRE; "
            "lock %s is left without a TTL",
            (const char *)arg);
    _exit(3);
}

/* The outer acquisition svc_section_start sent, with the read's replies
 * when pipelined; then reenter's nested acquisitions, same key and owner,
 * each with the wait the queue left. true when every hold was granted,
 * else false with the ending in *end (what was granted stays in x->held
 * for release_all). */
static bool acquire(svc_section *x, purchase_result *end)
{
    const svc_req *r = x->r;
    lc_conn *conn = x->conn;
    lc_guard *g = NULL;
    lc_status st;
    /* A mode that sends nothing ahead (setnx) takes its lock here, on this
     * thread: the hook is set around this one acquisition only. */
    if (r->p.fault == SVC_FAULT_CRASH_BEFORE_EXPIRE)
        lc__hook_after_setnx(crash_before_expire, (void *)x->a.key);
    if (!x->pipeline) {
        st = lc_acquire(conn, &x->a, &g);
    } else {
        st = x->read_st;
        if (st == LC_OK && (st = lc_acquire_pipe(conn, &x->a, &x->rp, &g)) == LC_OK)
            take_read(x, &x->rp);
        lc_pipe_clear(&x->rp);
    }
    lc__hook_after_setnx(NULL, NULL);
    if (st == LC_OK) {
        int64_t now = lc_now_us();
        x->wait_us = now - x->acq_t0_us + x->waited_before_us;
        /* A lease set once ends lease_ms after lc_acquire returned at the
         * latest (+1 ms: Redis's millisecond expiry check). */
        if (x->lock->fixed_lease)
            x->lease_gone_us = now + (x->a.lease_ms + 1) * 1000;
        x->o.lock_fields = true;
        x->o.lock_wait_ms = lc_guard_wait_ms(g) + x->waited_before_us / 1000;
        x->o.fence = lc_guard_fence(g);
        svc_trace_acquired(&x->tr, lc_guard_owner_token(g));
        if (x->lock->issues_fence)
            svc_trace_fence(&x->tr, x->o.fence);
        x->held[x->nheld++] = g;
        if (x->on_hold != NULL)
            x->on_hold(x, true, x->lease_gone_us);
        if (r->p.fault == SVC_FAULT_CRASH_IN_SECTION) {
            svc_log(SVC_ERROR, "fault crash_in_section: exiting while holding %s lock %s",
                    lc_mode_name(x->a.mode), x->a.key);
            _exit(3);
        }
        for (int i = 0; i < r->p.reenter && st == LC_OK && x->nheld < SVC_SECTION_MAX_HOLDS; i++) {
            st = lc_acquire(conn, &x->a, &g);
            if (st == LC_OK)
                x->held[x->nheld++] = g;
            else if (st == LC_BUSY)
                snprintf(x->o.detail, sizeof x->o.detail,
                         "nested acquisition %d of %d not granted within %lld ms "
                         "(mode %s is not reentrant)",
                         i + 1, r->p.reenter, (long long)x->a.wait_ms, lc_mode_name(x->a.mode));
        }
    } else if (st == LC_BUSY) {
        x->gave_up_us = lc_now_us() - x->acq_t0_us + x->waited_before_us;
        snprintf(x->o.detail, sizeof x->o.detail, "lock not acquired within %lld ms%s",
                 (long long)x->wait_ms,
                 x->queued_ms > 0 ? " (time queued for a worker included)" : "");
    }
    if (st == LC_OK)
        return true;
    if (st == LC_BUSY) {
        *end = PR_LOCK_BUSY;
        x->o.busy_wait_ms = x->wait_ms;
    } else if (st == LC_CANCELED) {
        *end = PR_SHUTTING_DOWN;
        snprintf(x->o.detail, sizeof x->o.detail,
                 "server shutting down while waiting for the lock; nothing was written");
    } else {
        *end = st == LC_IO ? PR_REDIS_UNAVAILABLE : PR_LOCK_ERROR;
        snprintf(x->o.detail, sizeof x->o.detail, "lock %s: %s", lc_status_name(st),
                 lc_conn_errstr(conn));
    }
    free_read(x); /* read with the outer acquire, but a nested one failed */
    return false;
}

/* Releases one hold (outer: the first acquisition), p's commands (NULL:
 * none) riding in the release's write just before it. Sets lock_lost when
 * the release says the lock had already gone (token's lease ran out, the
 * watchdog found it lost), and when the outer lock's fixed lease had
 * certainly run out before its release: the holder lost its lock then,
 * whatever the release found afterwards. For token the release says so
 * itself (not owner); for setnx the DEL may instead succeed on a later
 * holder's key, and without the clock the late holder would report its
 * lock kept while only its victim reported lock_lost. (The victim reports
 * it as well: its lock was deleted under it, setnx's flaw; token's victim
 * keeps its lock.)
 *
 * Sets deleted_other_lock when the outer release succeeded although its
 * fixed lease had certainly run out: the key it removed was a later
 * holder's. Only setnx's plain DEL can do that (token's and reentrant's
 * scripts check the owner and answer not-owner instead); the lock core
 * cannot tell, as setnx's plain DEL cannot, so the service measures
 * it by the clock. */
static void release_one(svc_section *x, lc_guard *g, bool outer, lc_pipe *p)
{
    if (lc_guard_lost(g))
        x->o.lock_lost = true;
    bool late = outer && x->lease_gone_us > 0 && lc_now_us() > x->lease_gone_us;
    lc_status st = lc_release_pipe(x->conn, g, p);
    if (outer)
        svc_trace_released(&x->tr, (int)st);
    if (outer && x->on_hold != NULL)
        x->on_hold(x, false, x->lease_gone_us);
    if (late)
        x->o.lock_lost = true;
    if (late && st == LC_OK)
        x->o.deleted_other_lock = true;
    if (st == LC_NOT_OWNER || st == LC_LOST) {
        x->o.lock_lost = true;
    } else if (st == LC_IO) {
        /* one per purchase while Redis is down: written once, then summed */
        static svc_log_repeat release_failed = SVC_LOG_REPEAT_INIT;
        svc_stats_redis_error();
        svc_log_every(&release_failed, SVC_WARN,
                      "release %s lock for sku %s failed (%s); its lease will free it",
                      lc_mode_name(x->a.mode), x->r->sku, lc_conn_errstr(x->conn));
    }
}

static void release_all(svc_section *x)
{
    while (x->nheld > 0) {
        x->nheld--;
        release_one(x, x->held[x->nheld], x->nheld == 0, NULL);
    }
    if (x->o.lock_lost)
        svc_log(SVC_WARN, "%s lock for sku %s was lost while held", lc_mode_name(x->a.mode),
                x->r->sku);
    if (x->o.deleted_other_lock)
        svc_log(SVC_WARN,
                "%s release for sku %s came after its lease and deleted a later holder's lock",
                lc_mode_name(x->a.mode), x->r->sku);
}

/* Sends p: pipelined, in the innermost hold's release (which is then gone
 * from x->held), else alone. Every reply that came is in p. On a Redis
 * Cluster a lock not kept in Redis (mutex, redlock) is released after the
 * commit instead, on its own: a commit a migration held back goes again
 * under that lock (held_back). */
static void send_releasing(svc_section *x, lc_pipe *p)
{
    bool cluster = x->r->s->redis.cluster_nodes[0] != '\0';
    if (x->pipeline && x->nheld > 0 && (x->lock->lock_in_redis || !cluster)) {
        x->nheld--;
        release_one(x, x->held[x->nheld], x->nheld == 0, p);
    } else {
        (void)lc_conn_pipe(x->conn, p);
    }
}

/* --- read, work, commit -------------------------------------------------- */

/* The store's read (or the one that came with the acquire) into *rd; a
 * NOSCRIPT answer (a flushed script cache: nothing ran) goes again as the
 * script's text, still under the lock. Remembers the context that carried
 * it, for the check before the commit. */
static bool read_stock(svc_section *x, svc_stock_read *rd, purchase_result *end)
{
    if (!x->read_came && send_read(x, false) != LC_OK) {
        snprintf(x->o.detail, sizeof x->o.detail, "out of memory; nothing was written");
        *end = PR_OUT_OF_MEMORY;
        return false;
    }
    if (svc_store_noscript(x->read_rep[0])) {
        free_read(x);
        if (send_read(x, true) != LC_OK) {
            snprintf(x->o.detail, sizeof x->o.detail, "out of memory; nothing was written");
            *end = PR_OUT_OF_MEMORY;
            return false;
        }
    }
    bool ok = x->store->parse_read(x->read_rep, x->read_n, x->epoch != NULL, x->o.fence, rd, end,
                                   x->o.detail, sizeof x->o.detail);
    free_read(x);
    const char *why = lc_conn_errstr(x->conn)[0] ? lc_conn_errstr(x->conn) : "no reply";
    if (!ok && *end == PR_REDIS_UNAVAILABLE)
        snprintf(x->o.detail, sizeof x->o.detail, "%s", why);
    if (ok && (x->read_ctx = lc_conn_redis(x->conn)) == NULL) {
        snprintf(x->o.detail, sizeof x->o.detail, "%s", lc_conn_errstr(x->conn));
        *end = PR_REDIS_UNAVAILABLE;
        ok = false;
    }
    return ok;
}

/* Whether the Redis connection is still fit to carry the commit after the
 * purchase slept work_ms on it: NULL when it is, else why not. Redis may
 * have closed it meanwhile (CLIENT KILL, a restart, its idle timeout): the
 * socket then reads end of stream or an error. Unread bytes would put the
 * commit's replies out of step. Nothing of the commit has been sent, so the
 * purchase can say "nothing written" instead of "outcome unknown"; the next
 * lockcore call on the connection reconnects. */
static const char *redis_unfit(const redisContext *ctx)
{
    char c;
    if (ctx->err)
        return ctx->errstr[0] ? ctx->errstr : "connection failed";
    ssize_t n = recv(ctx->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return "connection closed by Redis";
    if (n > 0)
        return "unexpected bytes on the connection";
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return NULL;
    return strerror(errno);
}

/* work_ms inside the lock, then the checks that nothing changed meanwhile
 * that would make the commit wrong or useless (fit_to_commit). */
static bool work(svc_section *x, purchase_result *end)
{
    if (x->work_ms > 0 && svc_sleep_work(x->work_ms) != 0) {
        snprintf(x->o.detail, sizeof x->o.detail, "server shutting down; nothing was written");
        *end = PR_SHUTTING_DOWN;
        return false;
    }
    return fit_to_commit(x, end);
}

/* The checks before every commit, a held-back one's again included. */
static bool fit_to_commit(svc_section *x, purchase_result *end)
{
    /* A buyer who left meanwhile would never see its order. */
    if (svc_client_gone(x->r)) {
        snprintf(x->o.detail, sizeof x->o.detail,
                 "client closed its connection before the commit; nothing was written");
        *end = PR_CLIENT_GONE;
        return false;
    }
    /* Checked before the read, not since: a connection Redis closed during
     * work_ms would otherwise turn into a false "commit outcome unknown"
     * with an order id that was never sent. */
    const char *unfit = redis_unfit(x->read_ctx);
    if (unfit != NULL) {
        snprintf(x->o.detail, sizeof x->o.detail,
                 "Redis connection lost before the commit (%.200s); nothing was written", unfit);
        *end = PR_REDIS_UNAVAILABLE;
        return false;
    }
    return true;
}

/* With an Idempotency-Key: the reply this sale will give, kept in
 * x->sold_reply for the caller, and the value stored under the key ("<done
 * prefix><reply>", malloc'd), written in the same step as the order so a
 * replay gets exactly it. NULL when out of memory. */
static char *idem_value(svc_section *x, long long stock_before)
{
    x->o.stock_left = stock_before - 1;
    x->o.has_stock_left = true;
    free(x->sold_reply); /* a held-back commit's, when this one goes again */
    x->sold_reply = svc_order_reply(&x->o, PR_SOLD);
    x->o.has_stock_left = false;
    if (x->sold_reply == NULL)
        return NULL;
    char prefix[SVC_IDEM_FP_MAX + 16];
    svc_idem_done_prefix(&x->id, 200, prefix, sizeof prefix);
    size_t plen = strlen(prefix), blen = strlen(x->sold_reply);
    char *v = malloc(plen + blen + 1);
    if (v != NULL) {
        memcpy(v, prefix, plen);
        memcpy(v + plen, x->sold_reply, blen + 1);
    }
    return v;
}

static void take_all(lc_pipe *p, redisReply **reps, int n)
{
    for (int i = 0; i < n; i++)
        reps[i] = lc_pipe_take(p, i);
}

static void free_all(redisReply **reps, int n)
{
    for (int i = 0; i < n; i++)
        freeReplyObject(reps[i]);
}

/* The store's write of the sale — pipelined, in the innermost release's
 * write. A write riding before the release goes as the script's text
 * (fenced), never its SHA1: a NOSCRIPT answer would come after the lock
 * was gone, too late to send it again under the lock. Alone, a NOSCRIPT
 * answer goes again as the text before the release. Returns the outcome;
 * x->o.order_id stays set only when the order may exist. */
static purchase_result commit(svc_section *x, const svc_stock_read *rd)
{
    const svc_req *r = x->r;
    /* redlock promises its lock only for its validity: a holder past it
     * reports lock_lost, as token's does when its lease ran out — and,
     * like token's, still writes: the lock cannot stop a paused holder,
     * which is what the slow cell of the matrix shows. */
    if (x->nheld > 0 && lc_guard_validity_ms(x->held[0]) == 0)
        x->o.lock_lost = true;
    memcpy(x->o.order_id, x->new_order_id, sizeof x->o.order_id);
    char *rec = svc_order_record(&x->o, rd->stock, false);
    char *idem_val = rec != NULL && x->id.on ? idem_value(x, rd->stock) : NULL;
    /* The outcome is written with the order, under the stock's tag: for a
     * bucket, its own copy of the key (svc_idem.h). */
    char idem_key[SVC_IDEM_RKEY_MAX];
    if (x->id.on)
        svc_idem_key(idem_key, x->tag, r->idem);
    svc_sale sale = {
        .tag = x->tag,
        .fence = x->o.fence,
        .stock_after = rd->stock - 1,
        .record = rec,
        .user = (r->p.seen & SVC_P_USER) ? r->p.user : NULL,
        .idem_key = x->id.on ? idem_key : NULL,
        .idem_val = idem_val,
        .idem_ttl_ms = (long long)svc_idem_ttl_ms(r->s),
    };
    redisReply *reps[SVC_STORE_MAX_REPLIES] = {NULL};
    lc_pipe w;
    lc_pipe_init(&w);
    int n = rec == NULL || (x->id.on && idem_val == NULL)
                ? -1
                : x->store->append_write(&w, &sale, rd, x->pipeline);
    if (n > 0) {
        send_releasing(x, &w);
        x->write_via = lc_conn_via(x->conn);
        take_all(&w, reps, n);
        lc_pipe_clear(&w);
        if (!x->pipeline && svc_store_noscript(reps[0])) {
            free_all(reps, n);
            n = x->store->append_write(&w, &sale, rd, true);
            if (n > 0) {
                (void)lc_conn_pipe(x->conn, &w);
                x->write_via = lc_conn_via(x->conn);
                take_all(&w, reps, n);
            }
        }
    }
    lc_pipe_clear(&w);
    free(idem_val);
    free(rec);
    if (n <= 0) {
        x->o.order_id[0] = '\0';
        snprintf(x->o.detail, sizeof x->o.detail, "out of memory; nothing was written");
        return PR_OUT_OF_MEMORY;
    }
    bool written = false;
    purchase_result res = x->store->parse_write(reps, n, &sale, &written, x->o.detail,
                                                sizeof x->o.detail);
    free_all(reps, n);
    if (res == PR_REDIS_UNAVAILABLE && !x->o.detail[0])
        snprintf(x->o.detail, sizeof x->o.detail, "commit outcome unknown: %.200s",
                 lc_conn_errstr(x->conn)[0] ? lc_conn_errstr(x->conn) : "no reply");
    if (res != PR_SOLD && !written)
        x->o.order_id[0] = '\0';          /* nothing was written: no such order */
    if (res == PR_REDIS_ERROR && written) /* the order id goes back to reconcile */
        svc_log(SVC_ERROR, "sku %s order %s: %s", r->sku, x->o.order_id, x->o.detail);
    return res;
}

/* A commit a slot migration held back (Redis Cluster: its transaction is
 * pinned to the node of its WATCH, and the slot's keys were leaving that
 * node between the read and the commit, so the node refused it — nothing
 * written, lc_conn_held_back) goes again: read, decide, commit, under the
 * same lock, after a pause of 20 ms (from the fourth, 50), until
 * redis.command_timeout_ms has passed since the first was held back, the
 * budget lockcore itself gives a TRYAGAIN (*give_up_ms: 0 until then).
 * Only while the lock is known to be held until then: none (no lock),
 * mutex (a process lock), redlock while its validity outlasts the budget.
 * Not for a lock kept in Redis (its release rides the commit's round trip,
 * and its lease runs), nor for a stepped purchase (its stops show one read
 * and one commit): those answer the held-back commit, 503 with nothing
 * written. A shutdown during the pause answers 503 shutting_down. */
static bool held_back(svc_section *x, purchase_result *end, int again, int64_t *give_up_ms)
{
    if (*end != PR_REDIS_ERROR || x->o.order_id[0] != '\0' || !lc_conn_held_back(x->conn) ||
        x->lock->lock_in_redis || x->step != NULL)
        return false;
    int64_t now = lc_now_ms();
    if (*give_up_ms == 0)
        *give_up_ms = now + x->r->s->redis.command_timeout_ms;
    int64_t pause = again < 3 ? 20 : 50;
    if (now + pause > *give_up_ms)
        return false;
    /* redlock: validity must cover the rest of the budget and the commit */
    int64_t valid = x->nheld > 0 ? lc_guard_validity_ms(x->held[0]) : -1;
    if (valid >= 0 && valid <= *give_up_ms - now + x->r->s->redis.command_timeout_ms)
        return false;
    if (svc_sleep_work(pause) != 0) {
        snprintf(x->o.detail, sizeof x->o.detail, "server shutting down; nothing was written");
        *end = PR_SHUTTING_DOWN;
        return false;
    }
    x->o.detail[0] = '\0';
    x->read_came = false; /* the read that rode with the acquire is spent */
    svc_stats_held_back();
    return true;
}
