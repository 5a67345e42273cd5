/* svc_purchase.c — POST|GET /miaosha/{mode} for the lock modes (the
 * lock-free lua mode has its own path: svc_lua.c).
 *
 * Every lock mode runs this same code; only lc_lock_args.mode differs, so
 * a comparison between modes varies the lock and nothing else. The critical
 * section is the seckill walkthrough article's (the story of the lock modes
 * is in docs/locks.md), non-atomic on purpose:
 *
 *   GET stock  →  if > 0: sleep work_ms  →  one pipelined round trip
 *   MULTI; SET stock <read-1>; INCR sold; RPUSH orders <record>; EXEC
 *   →  release  →  respond
 *
 * Pipelined (purchase.pipeline, ?pipeline=1; the default) the GET travels
 * in the acquire's write, right after the lock command, and the
 * transaction in the release's, right before it (lc_acquire_pipe,
 * lc_release_pipe): Redis runs one connection's commands in order, so the
 * lock is still held from the acquire's execution to the release's, and a
 * read whose acquire failed is dropped by the lock core. A locked purchase
 * then costs two round trips instead of four (setnx three: its PEXPIRE
 * stays apart, the flaw), and the lock is held for one round trip less.
 * Same code, same outcomes; the reply says which path ran ("pipeline").
 *
 * The GET→SET race is the bug the locks exist to fix, and it stays. The
 * MULTI makes the three writes one unit against crashes and restarts: a
 * process or Redis failure leaves all three writes or none (a purchase
 * interrupted between SET stock and the order append cannot happen). It
 * is not a rollback: a command Redis rejects while executing the
 * transaction (WRONGTYPE, only possible when someone corrupted the keys)
 * fails alone while the others apply. So the commit's outcome is one of
 *   - EXEC's array all OK                  → 200 (the order is in the list)
 *   - EXECABORT (a command was refused
 *     while queuing: OOM, syntax)          → 503 redis_error, nothing written
 *   - some elements of EXEC's array are
 *     errors                               → 503 redis_error naming the
 *                                            failed and applied writes,
 *                                            logged at ERROR (partial write)
 *   - no reply (connection lost, timeout)  → 503 redis_unavailable "commit
 *                                            outcome unknown", with order_id
 *   - EXEC answered nil: PUT /stock reset  → 409 stock_reset, nothing written
 *     the SKU after the stock was read
 * A connection Redis closed while the purchase slept work_ms is found
 * before the commit is sent (redis_unfit): 503 redis_unavailable, nothing
 * written, no order id.
 *
 * fenced (token's lock plus a fencing token, lc_guard_fence) keeps the
 * same shape, the read returning the stock and the service computing
 * stock-1 for the write, but both go through the fence (svc_fence.h): the
 * read is a script that raises the SKU's high-water mark to the holder's
 * token (or refuses a token below it), the write a script that applies the
 * same three writes only while the mark still equals the token. A holder
 * whose lease ran out while a later holder read the stock writes nothing:
 * 409 fenced_out. The fence, not the lock, makes it exact; the lock only
 * keeps the holders from refusing each other all the time. Pipelined, the
 * read rides in the acquire's write (under the counter's value: the token
 * is only known from the acquire's reply) and the write in the release's.
 * The write checks the epoch itself (no WATCH, no MULTI: a script is one
 * step). A NOSCRIPT read is sent again as EVAL, still holding the lock.
 * The write that rides in the release's write goes as EVAL (the body, not
 * the SHA1) so it can never answer NOSCRIPT: that write would have run
 * only after the release behind it, and a buyer taking the lock and
 * reading in between would fence out a holder that never lost its lock
 * (the first purchases after a SCRIPT FLUSH or a Redis restart). Apart,
 * the write is EVALSHA and its NOSCRIPT goes again as EVAL before the
 * release.
 *
 * Stock resets: PUT /stock increments miaosha:{sku}:epoch in its
 * transaction, and the purchase WATCHes that key in the round trip of its
 * GET stock. A reset between the read and the commit therefore voids the
 * commit (EXEC answers nil): a purchase in flight never writes its old
 * stock-1 over the new stock, and the reset's deletion of the held lock
 * cannot let two buyers both commit on one stock read.
 *
 * The client: a purchase peeks at its client's socket before taking the
 * lock and again just before the commit; when the client has closed its
 * connection (its FIN arrived) the purchase does nothing more, releases
 * what it holds and ends 499 client_gone (nobody reads that reply). A
 * client that leaves after the commit was sent, or whose FIN has not
 * arrived yet, still buys.
 *
 * Three parts (svc_pool.h): svc_purchase_begin runs the checks and sends
 * the outer acquire (lc_acquire_send) as soon as a worker takes the
 * request — when the worker has just released the purchase before, ahead
 * of that one's reply; svc_purchase_job reads the acquire's replies and
 * runs the section; svc_purchase_finish (left by the job when no
 * Idempotency-Key needs the connection) builds the reply, trace and stats
 * after the worker's next purchase has begun. Under contention the
 * releasing worker usually takes the lock again, so the reply and the
 * connection's resume ride in the next acquire's round trip instead of
 * keeping the lock free.
 *
 * Waiting: time spent in the worker queue counts against the request's
 * wait_ms (lc_acquire gets what is left, never below 0 = try once); a
 * request that sat in the queue longer than wait_ms + work_ms +
 * QUEUE_GRACE_MS is answered 503 overloaded without touching Redis (its
 * client has very likely given up). SIGTERM raises svc_cancel_flag(): a
 * lock wait then ends with LC_CANCELED → 503 shutting_down after releasing
 * what is held, nothing written.
 */
#include "svc_routes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "lc_testhooks.h"

#include "svc_check.h"
#include "svc_clock.h"
#include "svc_fence.h"
#include "svc_idem.h"
#include "svc_keys.h"
#include "svc_outcome.h"
#include "svc_replicas.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_trace.h"

typedef struct purchase {
    svc_req *r;
    const svc_settings *s;
    int slot;
    int64_t wait_us;    /* -1 until the outer lock is held */
    int64_t gave_up_us; /* -1, or how long a 429 waited for the lock */
    int64_t lock_wait_ms;
    int lock_lost;
    int deleted_other_lock; /* a release deleted a later holder's lock */
    int64_t lease_gone_us;  /* setnx, token, fenced: when the outer lock's key
                               has certainly expired (monotonic); 0 = n/a */
    int64_t busy_wait_ms;   /* >= 0: echo wait_ms in a 429 */
    long long stock_left;
    int has_stock_left;
    int pipeline;                    /* the read rides with the acquire, the commit
                                        with the innermost release */
    redisReply *read_rep[4];         /* the replies of UNWATCH, WATCH epoch, GET
                                        stock and (limit_per_user) HGET buyers
                                        (append_read) once sent: with the
                                        acquire when pipelining, else by section() */
    int read_n;                      /* how many of them append_read sent */
    long long bought;                /* limit_per_user: the user's orders, as read */
    int read_sent;                   /* read_rep holds what came of them */
    int64_t fence;                   /* fenced: the outer guard's fencing token */
    char fence_epoch[32];            /* fenced: the epoch its read saw */
    char order_id[SVC_UUID_LEN];     /* set once the order is being written */
    char new_order_id[SVC_UUID_LEN]; /* minted while the acquire travels */
    char detail[LC_ERRSTR_LEN + 64];
    svc_trace tr;            /* this purchase's timeline (GET /trace/{sku}) */
    svc_idem id;             /* the request's Idempotency-Key, when it has one */
    char *sold_reply;        /* with a key: the sale's reply, stored with the order */
    uint64_t soldout_gen;    /* the local sold-out flag's generation before the read */
    uint64_t write_connects; /* lc_conn_connects after the write (svc_wait_replicas) */
    lc_conn *conn;
    /* From begin_purchase to the acquire's end (the outer acquire is sent
     * by begin_purchase, lc_acquire_send, and read by run_purchase). */
    lc_lock_args a;
    lc_pipe rp;        /* pipelining: the stock read sent with the acquire */
    lc_status read_st; /* LC_OK, or why rp could not be built */
    int64_t work_ms, wait_ms, queued_ms;
    int64_t acq_t0_us;   /* when the acquire was sent */
    purchase_result res; /* run_purchase's outcome, for svc_purchase_finish */
    char lock_key[SVC_KEY_MAX], fence_key[SVC_KEY_MAX], owner[SVC_UUID_LEN];
} purchase;

/* Whether a purchase counts its user's orders: a limit is set (the HTTP
 * layer then requires ?user=). */
static int limited(const purchase *pu)
{
    return pu->s->limit_per_user > 0 && (pu->r->p.seen & SVC_P_USER);
}

static void crash_before_expire(void *arg)
{
    svc_log(SVC_ERROR,
            "fault crash_before_expire: exiting between SETNX and PEXPIRE; "
            "lock %s is left without a TTL",
            (const char *)arg);
    _exit(3);
}

/* The reply of a purchase, JSON text (malloc'd; NULL when out of memory). */
static char *reply_text(const purchase *pu, purchase_result res)
{
    unsigned status = svc_result[res].status;
    const char *error = svc_result[res].error;
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", status == 200);
        if (error != NULL) {
            cJSON_AddStringToObject(o, "error", error);
            if (pu->detail[0])
                cJSON_AddStringToObject(o, "detail", pu->detail);
        }
        cJSON_AddStringToObject(o, "mode", lc_mode_name(pu->r->mode));
        cJSON_AddBoolToObject(o, "pipeline", pu->pipeline);
        cJSON_AddStringToObject(o, "sku", pu->r->sku);
        if (pu->order_id[0])
            cJSON_AddStringToObject(o, "order_id", pu->order_id);
        if (pu->has_stock_left)
            svc_json_add_int(o, "stock_left", (long long)pu->stock_left);
        if (pu->wait_us >= 0) {
            svc_json_add_int(o, "lock_wait_ms", (long long)pu->lock_wait_ms);
            cJSON_AddBoolToObject(o, "lock_lost", pu->lock_lost);
            cJSON_AddBoolToObject(o, "deleted_other_lock", pu->deleted_other_lock);
            if (pu->fence > 0)
                svc_json_add_int(o, "fence", (long long)pu->fence);
        }
        if (pu->busy_wait_ms >= 0)
            svc_json_add_int(o, "wait_ms", (long long)pu->busy_wait_ms);
        cJSON_AddStringToObject(o, "instance", pu->s->instance_id);
    }
    char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return txt;
}

/* Builds the one reply of a purchase, ends its Idempotency-Key (a sale's
 * reply is the one stored with the order) and records its outcome. */
static void respond(purchase *pu, purchase_result res)
{
    SVC_ASSERT(res >= 0 && res < PR_COUNT);
    unsigned status = svc_result[res].status;
    const char *error = svc_result[res].error;
    if (svc_result[res].redis_error)
        svc_stats_redis_error();
    char *txt;
    if (res == PR_SOLD && pu->sold_reply != NULL) {
        txt = pu->sold_reply;
        pu->sold_reply = NULL;
    } else {
        txt = reply_text(pu, res);
    }
    free(pu->sold_reply);
    pu->sold_reply = NULL;
    if (res == PR_SOLD_OUT && pu->s->local_sold_out)
        svc_soldout_mark(pu->r->sku, pu->soldout_gen);
    if (res == PR_SOLD || res == PR_NOT_REPLICATED)
        pu->id.on = 0; /* its outcome was written with the order */
    if (pu->id.on)
        svc_idem_end(&pu->id, pu->r, pu->conn,
                     res != PR_SOLD && svc_idem_stored_outcome(res) && txt != NULL, status, txt,
                     txt ? strlen(txt) : 0);
    svc_reply_text(pu->r, status, txt, txt ? strlen(txt) : 0, NULL);
    svc_trace_end(&pu->tr, pu->new_order_id, status, error, pu->lock_lost, pu->deleted_other_lock);
    /* Lock wait counts a purchase that gave up (429) too: it waited for the
     * lock all the same, and leaving it out would hide contention. */
    svc_stats_purchase(pu->r->mode, pu->slot, svc_result[res].out, pu->lock_lost,
                       pu->deleted_other_lock, svc_now_us() - pu->r->t0_us,
                       pu->wait_us >= 0 ? pu->wait_us : pu->gave_up_us);
}

/* Releases one hold (outer: the first acquisition), p's commands (NULL:
 * none) riding in the release's write just before it; sets lock_lost when
 * the release says the lock had already gone (token lease ran out,
 * watchdog found it lost), and when the outer lock's fixed lease had
 * certainly run out before its release (lease_gone_us): the holder lost its
 * lock then, whatever the release found afterwards. For token the release
 * says so itself (not owner); for setnx the DEL may instead succeed on a
 * later holder's key, and without the clock the late holder would report
 * its lock kept while only its victim reported lock_lost — the per-mode
 * lock_lost counts of setnx and token would then not compare.
 * release_all releases held[n-1..0].
 *
 * Sets deleted_other_lock when the outer release reported success although
 * its fixed lease had certainly run out: the key expired at the latest
 * lease_ms after the acquisition returned, so the key the release removed
 * was a later holder's. Only setnx's plain DEL can do that (token's and
 * reentrant's scripts check the owner and answer not-owner instead); the
 * lock core cannot tell, as the article's plain DEL cannot, so the service
 * measures it by the clock (lease_gone_us). */
static void release_one(purchase *pu, lc_conn *conn, lc_guard *g, int outer, lc_pipe *p)
{
    if (lc_guard_lost(g))
        pu->lock_lost = 1;
    int late = outer && pu->lease_gone_us > 0 && svc_now_us() > pu->lease_gone_us;
    lc_status st = lc_release_pipe(conn, g, p);
    if (outer)
        svc_trace_released(&pu->tr, (int)st);
    if (late)
        pu->lock_lost = 1;
    if (late && st == LC_OK)
        pu->deleted_other_lock = 1;
    if (st == LC_NOT_OWNER || st == LC_LOST) {
        pu->lock_lost = 1;
    } else if (st == LC_IO) {
        svc_stats_redis_error();
        svc_log(SVC_WARN, "release %s lock for sku %s failed (%s); its lease will free it",
                lc_mode_name(pu->r->mode), pu->r->sku, lc_conn_errstr(conn));
    }
}

static void release_all(purchase *pu, lc_conn *conn, lc_guard **held, int n)
{
    for (int i = n - 1; i >= 0; i--)
        release_one(pu, conn, held[i], i == 0, NULL);
    if (pu->lock_lost)
        svc_log(SVC_WARN, "%s lock for sku %s was lost while held", lc_mode_name(pu->r->mode),
                pu->r->sku);
    if (pu->deleted_other_lock)
        svc_log(SVC_WARN,
                "%s release for sku %s came after its lease and deleted a later "
                "holder's lock",
                lc_mode_name(pu->r->mode), pu->r->sku);
}

/* Whether the Redis connection is still fit to carry the commit after the
 * purchase slept work_ms on it: NULL when it is, else why not. Redis may
 * have closed it meanwhile (CLIENT KILL, a restart, its idle timeout): the
 * socket then reads end of stream or an error. Unread bytes would put the
 * commit's replies out of step. In every case nothing of the commit has
 * been sent, so the purchase can say "nothing written" instead of "outcome
 * unknown"; the next lockcore call on the connection reconnects (it peeks
 * the same way). */
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

typedef enum {
    COMMIT_OK,
    COMMIT_REFUSED,
    COMMIT_PARTIAL,
    COMMIT_UNKNOWN,
    COMMIT_RESET /* EXEC answered nil: the watched epoch changed */
} commit_result;

/* The transaction's writes, in EXEC's order: the first three always, then
 * HINCRBY buyers when the purchase has a user, SET idem with a key. */
#define MAX_WRITES 5
static const char *const write_names[MAX_WRITES] = {"SET stock", "INCR sold", "RPUSH orders",
                                                    "HINCRBY buyers", "SET idempotency key"};

/* Takes the replies of MULTI, the nw writes and EXEC from p (the lock core
 * read every one that came, so the connection stays in step) and
 * classifies the outcome; on anything but COMMIT_OK the reason is in
 * pu->detail (errstr: why replies are missing). */
static commit_result read_commit(purchase *pu, lc_pipe *p, const char *errstr, int nw)
{
    redisReply *reps[MAX_WRITES + 2] = {NULL};
    int got = 0, n = nw + 2;
    commit_result res = COMMIT_OK;
    for (; got < n; got++) {
        reps[got] = lc_pipe_take(p, got);
        if (reps[got] == NULL)
            break; /* connection broken: the rest did not come */
    }
    const redisReply *exec = got == n ? reps[n - 1] : NULL;
    if (exec == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "commit outcome unknown: %.200s",
                 errstr[0] ? errstr : "no reply");
        res = COMMIT_UNKNOWN;
    } else if (exec->type == REDIS_REPLY_NIL) {
        snprintf(pu->detail, sizeof pu->detail,
                 "the SKU's stock was reset (PUT /stock) during the purchase; nothing was written");
        res = COMMIT_RESET;
    } else if (exec->type == REDIS_REPLY_ARRAY && exec->elements == (size_t)nw) {
        char failed[200] = "", applied[96] = "";
        for (size_t k = 0; k < (size_t)nw; k++) {
            const redisReply *e = exec->element[k];
            char *list = e->type == REDIS_REPLY_ERROR ? failed : applied;
            size_t size = e->type == REDIS_REPLY_ERROR ? sizeof failed : sizeof applied;
            size_t used = strlen(list);
            if (e->type == REDIS_REPLY_ERROR)
                snprintf(list + used, size - used, "%s%s (%.60s)", used ? ", " : "", write_names[k],
                         e->str);
            else
                snprintf(list + used, size - used, "%s%s", used ? ", " : "", write_names[k]);
        }
        if (failed[0]) {
            snprintf(pu->detail, sizeof pu->detail, "partial write: failed %.190s; applied %.90s",
                     failed, applied[0] ? applied : "nothing");
            res = COMMIT_PARTIAL;
        }
    } else {
        /* EXECABORT: Redis discarded the transaction. Name the command
         * refused while queuing when there is one. */
        const char *why = exec->type == REDIS_REPLY_ERROR ? exec->str : "transaction discarded";
        for (int i = 0; i < n - 1; i++)
            if (reps[i]->type == REDIS_REPLY_ERROR) {
                why = reps[i]->str;
                break;
            }
        snprintf(pu->detail, sizeof pu->detail,
                 "transaction refused by Redis, nothing written: %.200s", why);
        res = COMMIT_REFUSED;
    }
    for (int i = 0; i < got; i++)
        freeReplyObject(reps[i]);
    return res;
}

/* The order record, JSON. */
static char *order_record(purchase *pu, long long before)
{
    svc_req *r = pu->r;
    cJSON *o = cJSON_CreateObject();
    char *txt;
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "order_id", pu->order_id);
    cJSON_AddStringToObject(o, "sku", r->sku);
    if (r->p.seen & SVC_P_USER)
        cJSON_AddStringToObject(o, "user", r->p.user);
    else
        cJSON_AddNullToObject(o, "user");
    cJSON_AddStringToObject(o, "mode", lc_mode_name(r->mode));
    cJSON_AddStringToObject(o, "instance", pu->s->instance_id);
    /* Two timestamps, wall clock in ms: when the request arrived and when
     * the order was written (just before the commit). Their difference is
     * the purchase's time in the service: queue, lock wait and section. */
    int64_t now_ms = svc_wall_ms();
    svc_json_add_int(o, "received_ms", (long long)(now_ms - (svc_now_us() - r->t0_us) / 1000));
    svc_json_add_int(o, "ts_ms", (long long)now_ms);
    svc_json_add_int(o, "lock_wait_ms", (long long)pu->lock_wait_ms);
    svc_json_add_int(o, "stock_before", (long long)before);
    if (pu->fence > 0)
        svc_json_add_int(o, "fence", (long long)pu->fence);
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

/* The stock read, after the epoch watch: UNWATCH drops a watch an earlier
 * purchase on this connection left behind (it ended without EXEC), WATCH
 * epoch makes the commit's EXEC void if PUT /stock resets the SKU from here
 * on (the reset increments the epoch), then GET stock. Three commands, one
 * write: with the acquire when pipelining (WATCH changes nothing lockcore
 * relies on: it never sends EXEC), alone otherwise. */
#define READ_CMDS 4
static lc_status append_read(purchase *pu, lc_pipe *p)
{
    if (pu->r->mode == LC_FENCED) { /* one script; token 0 before the acquire's reply */
        pu->read_n = 1;
        return svc_fence_append_read(p, pu->r->sku, pu->fence, limited(pu) ? pu->r->p.user : NULL,
                                     0);
    }
    char stock_key[SVC_KEY_MAX], epoch_key[SVC_KEY_MAX], buyers_key[SVC_KEY_MAX];
    svc_key(stock_key, pu->r->sku, "stock");
    svc_key(epoch_key, pu->r->sku, "epoch");
    svc_key(buyers_key, pu->r->sku, "buyers");
    pu->read_n = limited(pu) ? 4 : 3;
    lc_status st = lc_pipe_append(p, "UNWATCH");
    if (st == LC_OK)
        st = lc_pipe_append(p, "WATCH %s", epoch_key);
    if (st == LC_OK)
        st = lc_pipe_append(p, "GET %s", stock_key);
    /* One buy per user: the user's order count is read with the stock, in
     * the critical section, and checked before the write, so it is exactly
     * as atomic as the stock check is under the mode's lock (none: not at
     * all, which is that row's lesson). */
    if (st == LC_OK && pu->read_n == 4)
        st = lc_pipe_append(p, "HGET %s %s", buyers_key, pu->r->p.user);
    return st;
}

static void take_read(purchase *pu, lc_pipe *p)
{
    for (int i = 0; i < pu->read_n; i++)
        pu->read_rep[i] = lc_pipe_take(p, i);
    pu->read_sent = 1;
}

static void free_read(purchase *pu)
{
    for (int i = 0; i < READ_CMDS; i++) {
        freeReplyObject(pu->read_rep[i]);
        pu->read_rep[i] = NULL;
    }
}

/* The outer acquisition begin_purchase sent (lc_acquire_send): with the
 * stock read in its round trip when pipelining (the replies kept in
 * pu->read_rep for section()), else alone. */
static lc_status acquire_reading(purchase *pu, lc_conn *conn, lc_guard **g)
{
    if (!pu->pipeline)
        return lc_acquire(conn, &pu->a, g);
    lc_status st = pu->read_st;
    if (st == LC_OK && (st = lc_acquire_pipe(conn, &pu->a, &pu->rp, g)) == LC_OK)
        take_read(pu, &pu->rp);
    lc_pipe_clear(&pu->rp);
    return st;
}

/* Sends the commit in p: with the innermost lock's release when pipelining
 * (that lock is then released and dropped from held), else alone. Every
 * reply that came is in p; a missing one is the caller's to report. */
static void send_releasing(purchase *pu, lc_conn *conn, lc_pipe *p, lc_guard **held, int *nheld)
{
    if (pu->pipeline && *nheld > 0) {
        (*nheld)--;
        release_one(pu, conn, held[*nheld], *nheld == 0, p);
    } else {
        (void)lc_conn_pipe(conn, p);
    }
}

/* The lock modes' read: UNWATCH, WATCH epoch, GET stock (read_rep), into
 * *before; *ctx is the context that carried the WATCH, for the check
 * before the commit. PR_COUNT when read, else why not (pu->detail). */
static purchase_result plain_read(purchase *pu, lc_conn *conn, long long *before,
                                  redisContext **ctx)
{
    redisReply **pre = pu->read_rep;
    redisReply *rep = pu->read_rep[2];
    pu->read_rep[2] = NULL;
    const char *pre_err = NULL;
    for (int i = 0; i < 2 && pre_err == NULL; i++)
        if (pre[i] != NULL && pre[i]->type == REDIS_REPLY_ERROR)
            pre_err = pre[i]->str;
    long long bought = 0; /* the user's orders (limit_per_user) */
    if (pu->read_n == 4 && rep != NULL && pre_err == NULL) {
        const redisReply *b = pre[3];
        if (b == NULL) {
            freeReplyObject(rep);
            rep = NULL; /* the connection broke: unavailable, below */
        } else if (b->type == REDIS_REPLY_ERROR) {
            pre_err = b->str;
        } else if (b->type == REDIS_REPLY_STRING) {
            bought = strtoll(b->str, NULL, 10);
        }
    }
    if (rep == NULL || pre_err != NULL) {
        purchase_result res = rep == NULL ? PR_REDIS_UNAVAILABLE : PR_REDIS_ERROR;
        if (rep == NULL)
            snprintf(pu->detail, sizeof pu->detail, "%s",
                     lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
        else
            snprintf(pu->detail, sizeof pu->detail, "WATCH epoch or HGET buyers: %.200s", pre_err);
        free_read(pu);
        freeReplyObject(rep);
        return res;
    }
    free_read(pu);
    pu->bought = bought;
    /* The context that carried the WATCH, for the check before the commit
     * (lc_conn_redis only replaces a context that is already broken). */
    if ((*ctx = lc_conn_redis(conn)) == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "%s", lc_conn_errstr(conn));
        freeReplyObject(rep);
        return PR_REDIS_UNAVAILABLE;
    }
    if (rep->type == REDIS_REPLY_STRING) {
        char *end = NULL;
        *before = strtoll(rep->str, &end, 10);
        if (end == rep->str || *end != '\0') {
            snprintf(pu->detail, sizeof pu->detail, "stock key holds a non-integer value");
            freeReplyObject(rep);
            return PR_BAD_STOCK_VALUE;
        }
    } else if (rep->type == REDIS_REPLY_ERROR) {
        /* Redis answered (e.g. WRONGTYPE: the stock key is not a string):
         * the server's data is wrong, Redis is not unavailable. */
        snprintf(pu->detail, sizeof pu->detail, "GET stock: %.200s", rep->str);
        freeReplyObject(rep);
        return PR_REDIS_ERROR;
    } /* nil: never stocked, 0 */
    freeReplyObject(rep);
    return PR_COUNT;
}

/* The fenced read (svc_fence.h) from read_rep[0], into *before and
 * pu->fence_epoch; *ctx as plain_read's. A NOSCRIPT answer (SCRIPT FLUSH,
 * a restarted Redis: nothing ran) is read again as EVAL, still holding
 * the lock, under this holder's own token. A pipelined read ran under the
 * fence counter's value: when that is not this holder's token, a later
 * holder took the lock between the acquire and the read, and this one is
 * fenced out. PR_COUNT when read, else why not (pu->detail). */
static purchase_result fenced_read(purchase *pu, lc_conn *conn, long long *before,
                                   redisContext **ctx)
{
    redisReply *rep = pu->read_rep[0];
    pu->read_rep[0] = NULL;
    free_read(pu);
    if (svc_fence_noscript(rep)) {
        freeReplyObject(rep);
        rep = NULL;
        lc_pipe p;
        lc_pipe_init(&p);
        if (svc_fence_append_read(&p, pu->r->sku, pu->fence, limited(pu) ? pu->r->p.user : NULL,
                                  1) != LC_OK) {
            lc_pipe_clear(&p);
            snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
            return PR_OUT_OF_MEMORY;
        }
        (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
        rep = lc_pipe_take(&p, 0);
        lc_pipe_clear(&p);
    }
    svc_fence_read fr;
    purchase_result res = svc_fence_parse_read(rep, &fr, pu->detail, sizeof pu->detail);
    if (rep == NULL)
        snprintf(pu->detail, sizeof pu->detail, "%s",
                 lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
    freeReplyObject(rep);
    if (res == PR_COUNT && fr.token != pu->fence) {
        snprintf(pu->detail, sizeof pu->detail,
                 "the stock was read under fencing token %lld, not this holder's %lld: a later "
                 "holder took the lock before the read; nothing was written",
                 (long long)fr.token, (long long)pu->fence);
        res = PR_FENCED_OUT;
    }
    if (res != PR_COUNT)
        return res;
    if ((*ctx = lc_conn_redis(conn)) == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "%s", lc_conn_errstr(conn));
        return PR_REDIS_UNAVAILABLE;
    }
    *before = fr.stock;
    pu->bought = fr.bought;
    snprintf(pu->fence_epoch, sizeof pu->fence_epoch, "%s", fr.epoch);
    return PR_COUNT;
}

/* With an Idempotency-Key: the reply this sale will give, kept in
 * pu->sold_reply for respond and returned as the value stored under the
 * key ("<done prefix><reply>", malloc'd) in the same step as the order, so
 * a replay gets exactly it. NULL without a key or when memory ran out
 * (*oom then 1). */
static char *idem_value(purchase *pu, long long before, int *oom)
{
    *oom = 0;
    if (!pu->id.on)
        return NULL;
    pu->stock_left = before - 1;
    pu->has_stock_left = 1;
    pu->sold_reply = reply_text(pu, PR_SOLD);
    pu->has_stock_left = 0;
    char prefix[SVC_IDEM_FP_MAX + 16];
    svc_idem_done_prefix(&pu->id, 200, prefix, sizeof prefix);
    size_t plen = strlen(prefix), blen = pu->sold_reply ? strlen(pu->sold_reply) : 0;
    char *v = pu->sold_reply ? malloc(plen + blen + 1) : NULL;
    if (v == NULL) {
        *oom = 1;
        return NULL;
    }
    memcpy(v, prefix, plen);
    memcpy(v + plen, pu->sold_reply, blen + 1);
    return v;
}

/* The lock modes' commit: MULTI; SET stock before-1; INCR sold; RPUSH
 * orders rec; [HINCRBY buyers user 1;] [SET idempotency key;] EXEC
 * (send_releasing). PR_SOLD, or why not (pu->detail; pu->order_id cleared
 * when no such order can exist). */
static purchase_result plain_write(purchase *pu, lc_conn *conn, const char *rec, long long before,
                                   lc_guard **held, int *nheld)
{
    svc_req *r = pu->r;
    char stock_key[SVC_KEY_MAX], sold_key[SVC_KEY_MAX], orders_key[SVC_KEY_MAX],
        buyers_key[SVC_KEY_MAX];
    svc_key(stock_key, r->sku, "stock");
    svc_key(sold_key, r->sku, "sold");
    svc_key(orders_key, r->sku, "orders");
    svc_key(buyers_key, r->sku, "buyers");
    int oom;
    char *idem_val = idem_value(pu, before, &oom);
    int has_user = (r->p.seen & SVC_P_USER) != 0;
    int nw = 3 + has_user + pu->id.on;
    /* One round trip: the transaction's replies are +OK, +QUEUED per
     * write, then EXEC's array. The buyers hash counts every user's
     * orders (limit_per_user, the audit's duplicate_buyers). */
    lc_pipe tx;
    lc_pipe_init(&tx);
    if (oom || lc_pipe_append(&tx, "MULTI") != LC_OK ||
        lc_pipe_append(&tx, "SET %s %lld", stock_key, before - 1) != LC_OK ||
        lc_pipe_append(&tx, "INCR %s", sold_key) != LC_OK ||
        lc_pipe_append(&tx, "RPUSH %s %b", orders_key, rec, strlen(rec)) != LC_OK ||
        (has_user && lc_pipe_append(&tx, "HINCRBY %s %s 1", buyers_key, r->p.user) != LC_OK) ||
        (pu->id.on && lc_pipe_append(&tx, "SET %s %s PX %lld", pu->id.rkey, idem_val,
                                     (long long)pu->s->idem_ttl_ms) != LC_OK) ||
        lc_pipe_append(&tx, "EXEC") != LC_OK) {
        free(idem_val);
        lc_pipe_clear(&tx);
        pu->order_id[0] = '\0';
        snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
        return PR_OUT_OF_MEMORY;
    }
    free(idem_val);
    send_releasing(pu, conn, &tx, held, nheld);
    pu->write_connects = lc_conn_connects(conn);
    commit_result cr = read_commit(pu, &tx, lc_conn_errstr(conn), nw);
    lc_pipe_clear(&tx);
    switch (cr) {
    case COMMIT_OK: break;
    case COMMIT_REFUSED:
        pu->order_id[0] = '\0'; /* no such order anywhere */
        return PR_REDIS_ERROR;
    case COMMIT_PARTIAL:
        /* The order id goes back with the 503 so a client can reconcile. */
        svc_log(SVC_ERROR, "sku %s order %s: %s", r->sku, pu->order_id, pu->detail);
        return PR_REDIS_ERROR;
    case COMMIT_UNKNOWN: return PR_REDIS_UNAVAILABLE; /* with the order id */
    case COMMIT_RESET:
        pu->order_id[0] = '\0'; /* discarded: no such order anywhere */
        return PR_STOCK_RESET;
    }
    return PR_SOLD;
}

/* The fenced commit: one script (svc_fence.h) with the same three writes,
 * applied only while this holder's token is the stock's high-water mark
 * and the epoch is the one its read saw (send_releasing). Pipelined it
 * rides before the release as EVAL, never EVALSHA: a NOSCRIPT answer there
 * would come after the release had run, and the write sent again then
 * would find the mark moved by whoever took the lock and read in between
 * — 409 fenced_out for a holder whose lease never ran out. EVAL costs
 * Redis no more than EVALSHA here (it hashes the 2 KB body, next to the
 * script's own run). Apart it is EVALSHA, and a NOSCRIPT answer goes again
 * as EVAL, still holding the lock. PR_SOLD, or why not (pu->detail;
 * pu->order_id cleared when nothing was written). */
static purchase_result fenced_write(purchase *pu, lc_conn *conn, const char *rec, long long before,
                                    lc_guard **held, int *nheld)
{
    int oom;
    char *idem_val = idem_value(pu, before, &oom);
    svc_fence_extra x = {
        .user = (pu->r->p.seen & SVC_P_USER) ? pu->r->p.user : NULL,
        .idem_key = pu->id.on ? pu->id.rkey : NULL,
        .idem_val = idem_val,
        .idem_ttl_ms = pu->s->idem_ttl_ms,
    };
    lc_pipe w;
    lc_pipe_init(&w);
    redisReply *rep = NULL;
    int built = !oom &&
                svc_fence_append_write(&w, pu->r->sku, pu->fence, pu->fence_epoch, before - 1, rec,
                                       strlen(rec), &x, pu->pipeline) == LC_OK;
    if (built) {
        send_releasing(pu, conn, &w, held, nheld);
        pu->write_connects = lc_conn_connects(conn);
        rep = lc_pipe_take(&w, 0);
        lc_pipe_clear(&w);
        if (svc_fence_noscript(rep)) {
            freeReplyObject(rep);
            rep = NULL;
            built = svc_fence_append_write(&w, pu->r->sku, pu->fence, pu->fence_epoch, before - 1,
                                           rec, strlen(rec), &x, 1) == LC_OK;
            if (built) {
                (void)lc_conn_pipe(conn, &w);
                pu->write_connects = lc_conn_connects(conn);
                rep = lc_pipe_take(&w, 0);
            }
        }
    }
    lc_pipe_clear(&w);
    free(idem_val);
    if (!built) {
        pu->order_id[0] = '\0';
        snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
        return PR_OUT_OF_MEMORY;
    }
    if (rep == NULL) { /* with the order id: it may have been written */
        snprintf(pu->detail, sizeof pu->detail, "commit outcome unknown: %.200s",
                 lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
        return PR_REDIS_UNAVAILABLE;
    }
    purchase_result res = svc_fence_parse_write(rep, pu->fence, pu->detail, sizeof pu->detail);
    freeReplyObject(rep);
    if (res != PR_SOLD)
        pu->order_id[0] = '\0';
    return res;
}

/* The stock read (or the one that rode with the acquire) and, when there is
 * some, sleep work_ms and commit (pipelining: with the release of
 * held[*nheld-1]). Returns the outcome; the reason of a failure is in
 * pu->detail. */
static purchase_result section(purchase *pu, lc_conn *conn, int64_t work_ms, lc_guard **held,
                               int *nheld)
{
    svc_req *r = pu->r;
    redisContext *ctx = NULL;
    long long before = 0;

    if (!pu->read_sent) { /* not pipelined: the read's own round trip */
        lc_pipe p;
        lc_pipe_init(&p);
        lc_status st = append_read(pu, &p);
        if (st == LC_OK)
            (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
        take_read(pu, &p);
        lc_pipe_clear(&p);
        if (st != LC_OK) {
            snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
            return PR_OUT_OF_MEMORY;
        }
    }
    purchase_result rr = r->mode == LC_FENCED ? fenced_read(pu, conn, &before, &ctx)
                                              : plain_read(pu, conn, &before, &ctx);
    if (rr != PR_COUNT)
        return rr;
    svc_trace_read(&pu->tr, before);

    if (limited(pu) && pu->bought >= pu->s->limit_per_user) {
        snprintf(pu->detail, sizeof pu->detail,
                 "user %s already holds %lld order(s) of this sku (purchase.limit_per_user = "
                 "%lld); nothing was written",
                 r->p.user, pu->bought, pu->s->limit_per_user);
        return PR_LIMIT_REACHED;
    }
    if (before <= 0) {
        pu->stock_left = before < 0 ? before : 0;
        pu->has_stock_left = 1;
        return PR_SOLD_OUT;
    }

    if (work_ms > 0 && svc_sleep_work(work_ms) != 0) {
        snprintf(pu->detail, sizeof pu->detail, "server shutting down; nothing was written");
        return PR_SHUTTING_DOWN;
    }
    /* A buyer who left during work_ms would never see its order: buy
     * nothing for it (its lock is released by the caller). */
    if (svc_client_gone(r)) {
        snprintf(pu->detail, sizeof pu->detail,
                 "client closed its connection before the commit; nothing was written");
        return PR_CLIENT_GONE;
    }
    /* The connection was checked before the GET, not since: re-check it,
     * or a connection Redis closed during work_ms would turn into a false
     * "commit outcome unknown" with an order id that was never sent. */
    const char *unfit = redis_unfit(ctx);
    if (unfit != NULL) {
        snprintf(pu->detail, sizeof pu->detail,
                 "Redis connection lost before the commit (%.200s); nothing was written", unfit);
        return PR_REDIS_UNAVAILABLE;
    }

    /* redlock: the lock is only promised for its validity. A holder past
     * it reports lock_lost, as token's does when its lease ran out — and,
     * like token's, still writes: the lock cannot stop a paused holder,
     * which is the lesson the slow cell shows (docs/locks.md). */
    if (*nheld > 0 && lc_guard_validity_ms(held[0]) == 0)
        pu->lock_lost = 1;
    memcpy(pu->order_id, pu->new_order_id, sizeof pu->order_id);
    char *rec = order_record(pu, before);
    if (rec == NULL) {
        pu->order_id[0] = '\0';
        snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
        return PR_OUT_OF_MEMORY;
    }
    purchase_result wr = r->mode == LC_FENCED ? fenced_write(pu, conn, rec, before, held, nheld)
                                              : plain_write(pu, conn, rec, before, held, nheld);
    free(rec);
    if (wr != PR_SOLD)
        return wr;
    /* After the plain EXEC and after the fenced script alike: the sale, its
     * buyer count and its Idempotency-Key value went in one step. */
    if (svc_wait_replicas(pu->s, conn, pu->write_connects, pu->detail, sizeof pu->detail) != 0)
        return PR_NOT_REPLICATED; /* with the order id: written on the master */
    svc_trace_written(&pu->tr, before - 1);
    pu->stock_left = before - 1;
    pu->has_stock_left = 1;
    return PR_SOLD;
}

/* Everything before the lock: the checks, the Idempotency-Key, the keys,
 * and the outer acquire sent (lc_acquire_send, with the stock read when
 * pipelining). Returns 1 when the purchase goes on in run_purchase, 0 when
 * it was answered here (pu is then done with). */
static int begin_purchase(purchase *pu, svc_req *r, lc_conn *conn)
{
    const svc_settings *s = r->s;
    const svc_params *p = &r->p;
    uuid_t u;

    memset(pu, 0, sizeof *pu);
    pu->r = r;
    pu->s = s;
    pu->conn = conn;
    pu->soldout_gen = svc_soldout_gen(r->sku);
    pu->slot = svc_stats_sku_slot(r->sku);
    pu->wait_us = -1;
    pu->gave_up_us = -1;
    pu->busy_wait_ms = -1;
    svc_trace_begin(&pu->tr, r);
    if (conn == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "no Redis connection");
        respond(pu, PR_REDIS_UNAVAILABLE);
        return 0;
    }
    pu->work_ms = (p->seen & SVC_P_WORK_MS) ? p->work_ms : s->work_ms;
    pu->wait_ms = (p->seen & SVC_P_WAIT_MS) ? p->wait_ms : s->wait_ms;
    pu->pipeline = (p->seen & SVC_P_PIPELINE) ? p->pipeline : s->pipeline;
    /* redlock's acquire goes to its lock masters and the stock read to the
     * data server: nothing shares a connection, so nothing is pipelined
     * (and the reply's "pipeline" says so). */
    if (r->mode == LC_REDLOCK)
        pu->pipeline = 0;
    purchase_result not_now = svc_purchase_admit(r, pu->wait_ms, pu->work_ms, pu->detail,
                                                 sizeof pu->detail);
    if (not_now != PR_COUNT) {
        respond(pu, not_now);
        return 0;
    }
    if (r->idem[0]) {
        /* The marker outlives the longest this purchase can take: every
         * lock wait, work_ms and a few round trips. */
        int64_t marker_ms = (1 + p->reenter) * pu->wait_ms + pu->work_ms +
                            8LL * s->command_timeout_ms + 5000;
        int rc = svc_idem_begin(&pu->id, r, conn, marker_ms, &not_now, pu->detail,
                                sizeof pu->detail);
        if (rc == 1) {
            svc_idem_replayed(&pu->id, r, conn, &pu->tr, pu->slot);
            return 0;
        }
        if (rc < 0) {
            respond(pu, not_now);
            return 0;
        }
    }
    pu->queued_ms = (svc_now_us() - r->queued_us) / 1000;

    svc_lock_key(pu->lock_key, r->sku, r->mode);
    svc_key(pu->fence_key, r->sku, "fence");
    /* Only reentrant's lock uses the owner (its hash field): the other
     * modes' holders are told apart by the lock core's own token. */
    if (r->mode == LC_REENTRANT) {
        uuid_generate_random(u);
        uuid_unparse_lower(u, pu->owner);
    } else {
        snprintf(pu->owner, sizeof pu->owner, "%s", "-");
    }
    lc_lock_args *a = &pu->a;
    a->mode = r->mode;
    a->key = pu->lock_key;
    a->fence_key = pu->fence_key; /* fenced's counter; the other modes ignore it */
    a->owner = pu->owner;
    if (p->seen & SVC_P_LEASE_MS)
        a->lease_ms = p->lease_ms;
    else
        a->lease_ms = r->mode == LC_REENTRANT ? 0 : s->lease_ms; /* 0 = watchdog */
    /* the queue ate the rest */
    a->wait_ms = pu->wait_ms > pu->queued_ms ? pu->wait_ms - pu->queued_ms : 0;
    a->cancel = svc_cancel_flag();

    /* The outer acquisition leaves now; its replies are read by
     * run_purchase, so whatever the worker does meanwhile (the order id
     * below, answering the request before: svc_pool.h) rides in its round
     * trip instead of delaying it. */
    pu->acq_t0_us = svc_now_us();
    svc_trace_mark(&pu->tr, SVC_T_WAIT_START);
    lc_pipe_init(&pu->rp);
    pu->read_st = pu->pipeline ? append_read(pu, &pu->rp) : LC_OK;
    if (pu->read_st == LC_OK)
        (void)lc_acquire_send(conn, a, pu->pipeline ? &pu->rp : NULL); /* its status: below */
    /* The order id, while the acquire travels: the section never waits for it. */
    uuid_generate_random(u);
    uuid_unparse_lower(u, pu->new_order_id);
    return 1;
}

/* From the outer acquire's replies to the release: the nested
 * acquisitions (reenter=N), the section, the releases. Returns the outcome
 * for respond. */
static purchase_result run_purchase(purchase *pu, lc_conn *conn)
{
    svc_req *r = pu->r;
    const svc_params *p = &r->p;
    lc_lock_args *a = &pu->a;
    lc_guard *held[1 + 64];
    int nheld = 0;

    /* Outer acquisition, then the nested ones (reenter=N), same key and
     * owner, each with the request's wait_ms less the time it queued. */
    int64_t t = pu->acq_t0_us;
    lc_guard *g = NULL;
    /* setnx sends nothing ahead, so its SETNX runs in here, on this thread. */
    if (p->fault == SVC_FAULT_CRASH_BEFORE_EXPIRE)
        lc__hook_after_setnx(crash_before_expire, pu->lock_key);
    lc_status st = acquire_reading(pu, conn, &g);
    lc__hook_after_setnx(NULL, NULL);
    if (st == LC_OK) {
        int64_t now = svc_now_us();
        pu->wait_us = now - t;
        /* The key's TTL was set before lc_acquire returned, so it is gone
         * lease_ms later at the latest (+1 ms: Redis's millisecond expiry
         * check). Only for setnx, token and fenced, whose lease is set
         * once: reentrant's is refreshed by re-entries and partial
         * releases. */
        if (r->mode == LC_SETNX || r->mode == LC_TOKEN || r->mode == LC_FENCED)
            pu->lease_gone_us = now + (a->lease_ms + 1) * 1000;
        pu->lock_wait_ms = lc_guard_wait_ms(g);
        pu->fence = lc_guard_fence(g);
        svc_trace_acquired(&pu->tr, lc_guard_owner_token(g));
        if (r->mode == LC_FENCED)
            svc_trace_fence(&pu->tr, pu->fence);
        held[nheld++] = g;
        if (p->fault == SVC_FAULT_CRASH_IN_SECTION) {
            svc_log(SVC_ERROR, "fault crash_in_section: exiting while holding %s lock %s",
                    lc_mode_name(r->mode), pu->lock_key);
            _exit(3);
        }
        for (int i = 0;
             i < p->reenter && st == LC_OK && nheld < (int)(sizeof held / sizeof held[0]); i++) {
            st = lc_acquire(conn, a, &g);
            if (st == LC_OK)
                held[nheld++] = g;
            else if (st == LC_BUSY)
                snprintf(pu->detail, sizeof pu->detail,
                         "nested acquisition %d of %d not granted within %lld ms "
                         "(mode %s is not reentrant)",
                         i + 1, p->reenter, (long long)a->wait_ms, lc_mode_name(r->mode));
        }
    } else if (st == LC_BUSY) {
        pu->gave_up_us = svc_now_us() - t;
        snprintf(pu->detail, sizeof pu->detail, "lock not acquired within %lld ms%s",
                 (long long)pu->wait_ms,
                 pu->queued_ms > 0 ? " (time queued for a worker included)" : "");
    }
    if (st != LC_OK) {
        purchase_result res;
        if (st == LC_BUSY) {
            res = PR_LOCK_BUSY;
            pu->busy_wait_ms = pu->wait_ms;
        } else if (st == LC_CANCELED) {
            res = PR_SHUTTING_DOWN;
            snprintf(pu->detail, sizeof pu->detail,
                     "server shutting down while waiting for the lock; nothing was written");
        } else {
            res = st == LC_IO ? PR_REDIS_UNAVAILABLE : PR_LOCK_ERROR;
            snprintf(pu->detail, sizeof pu->detail, "lock %s: %s", lc_status_name(st),
                     lc_conn_errstr(conn));
        }
        free_read(pu); /* read with the outer acquire, but a nested one failed */
        release_all(pu, conn, held, nheld);
        return res;
    }

    purchase_result res = section(pu, conn, pu->work_ms, held, &nheld);
    release_all(pu, conn, held, nheld);
    return res;
}

int svc_purchase_begins_ahead(const svc_req *r)
{
    return (r->mode == LC_TOKEN || r->mode == LC_FENCED || r->mode == LC_REENTRANT) &&
           r->idem[0] == '\0';
}

/* r->job_state after a begin that answered the request itself. */
static char answered;

void svc_purchase_begin(svc_req *r, lc_conn *conn)
{
    purchase *pu = malloc(sizeof *pu);
    if (pu == NULL)
        return; /* svc_purchase_job does it all, on its stack */
    if (begin_purchase(pu, r, conn)) {
        r->job_state = pu;
    } else {
        free(pu);
        r->job_state = &answered;
    }
}

void svc_purchase_finish(svc_req *r, lc_conn *conn)
{
    (void)conn; /* the next purchase's acquire may be in flight on it */
    purchase *pu = r->job_state;
    r->job_state = NULL;
    r->finish = NULL;
    respond(pu, pu->res);
    free(pu);
}

void svc_purchase_job(svc_req *r, lc_conn *conn)
{
    purchase local;
    purchase *pu = r->job_state;
    r->job_state = NULL;
    if (pu == (purchase *)(void *)&answered)
        return;
    if (pu == NULL) { /* not begun (no memory for it): here, on the stack */
        pu = &local;
        if (!begin_purchase(pu, r, conn))
            return;
    }
    purchase_result res = run_purchase(pu, conn);
    /* The answer can wait until the worker has sent its next purchase's
     * acquire (svc_pool.h) when it needs no Redis: an Idempotency-Key's
     * outcome is stored by respond, on this connection. */
    if (pu != &local && !pu->id.on) {
        pu->res = res;
        r->job_state = pu;
        r->finish = svc_purchase_finish;
        return;
    }
    respond(pu, res);
    if (pu != &local)
        free(pu);
}
