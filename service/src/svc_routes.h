/* svc_routes.h — the jobs that workers run for the Redis-backed routes. Each
 * fills the request's reply; none touches the HTTP connection. */
#ifndef MIAOSHA_SVC_ROUTES_H
#define MIAOSHA_SVC_ROUTES_H

#include "svc_reply.h"

/* POST|GET /miaosha/{mode} (svc_purchase.c). r->mode, r->sku and r->p are
 * validated; r->s gives the defaults for what the query leaves out. */
void svc_purchase_job(svc_req *r, lc_conn *conn);
/* Its begin (svc_pool.h): the checks before the lock and the outer acquire
 * sent (lc_acquire_send), kept in r->job_state for svc_purchase_job, which
 * reads the acquire's replies and runs the rest; a request answered by the
 * checks (overloaded, client gone, an Idempotency-Key replay) is done
 * there. Without it svc_purchase_job does everything itself. The job
 * leaves svc_purchase_finish in r->finish when the answer needs no Redis
 * (no Idempotency-Key): it builds and stores the reply, and does not touch
 * conn. */
void svc_purchase_begin(svc_req *r, lc_conn *conn);
void svc_purchase_finish(svc_req *r, lc_conn *conn);
/* 1 when r's purchase gets svc_purchase_begin, which a worker runs before
 * it answers the purchase before (svc_pool.h): only where that pays and
 * costs the earlier buyer nothing but the send — a mode whose
 * lc_mode_info.sends_ahead is set (token, fenced, reentrant: lc_acquire_send
 * writes the first attempt; the others send nothing ahead), no
 * Idempotency-Key, and not purchase.limit_per_user > 0 on a SKU whose cached
 * layout has more than one bucket (the key's marker and the user's
 * reservation are Redis round trips of their own, which the earlier reply
 * must not wait for). Else 0: the job does everything itself, after the
 * reply before it has gone. Any thread; r->mode and r->idem must be set. */
int svc_purchase_begins_ahead(const svc_req *r);

/* POST|GET /miaosha/lua (svc_lua.c): the same request, reply, statuses and
 * order record without a lock, one atomic script. r->mode is SVC_MODE_LUA. */
void svc_lua_job(svc_req *r, lc_conn *conn);
/* The same for n (1..SVC_POOL_BATCH_MAX) queued lua purchases at once, as a
 * batch of the worker pool (svc_pool.h): each one's checks as
 * svc_lua_job's, then every script in one write and every reply in one
 * round trip (the purchases answered NOSCRIPT go again one by one, in
 * queue order, the first as EVAL and the rest as EVALSHA), one WAIT for
 * all when purchase writes must reach replicas (none after the connection
 * broke: the sales are then not_replicated), each answered as svc_lua_job
 * would. Only for requests svc_lua_batches accepts. The worker
 * that owns conn. */
void svc_lua_batch(svc_req **rs, int n, lc_conn *conn);
/* 1 when r may run in a batch: a lua purchase with nothing to do between
 * its checks and its script — no Idempotency-Key (its marker is a round
 * trip of its own), work_ms 0 (a batch would make the later ones wait for
 * the earlier ones' work) and no fault. Else 0: svc_lua_job alone. Any
 * thread; r's routing and parameters must be set. */
int svc_lua_batches(const svc_req *r);

/* GET /stock/{sku} and PUT /stock/{sku} (r->is_put, r->p.stock and
 * r->p.buckets, 0 for one), and GET /orders/{sku} (svc_stock.c). */
void svc_stock_get_job(svc_req *r, lc_conn *conn);
void svc_stock_put_job(svc_req *r, lc_conn *conn);
void svc_orders_job(svc_req *r, lc_conn *conn);

/* At start: gives sku its initial stock (stock = initial = initial, sold
 * = 0) only when it has neither stock nor initial, in one Lua script, so
 * several instances starting together, or a restart, never reset a running
 * sale. One round trip on conn (the Redis probe's thread). 0 with "seeded"
 * or "already stocked" in err (for the caller's log), or -1 with the
 * reason in err: Redis not reached, or an error reply (OOM under
 * maxmemory, READONLY from a replica). */
int svc_stock_seed(lc_conn *conn, const char *sku, long long initial, char *err, size_t errlen);

/* Parses a PUT /stock body: exactly one JSON object of stock and buckets,
 * {"stock":N}, {"stock":N,"buckets":K} (or {"buckets":K} when the query
 * gave the stock), N an integer in 0..SVC_STOCK_MAX (1000 and 1e3 alike),
 * K in 1..SVC_BUCKETS_MAX, whitespace around it allowed. in_query: the
 * SVC_P_* bits the query gave (svc_params_parse): a field given in both
 * places is refused whatever the two values, as in a purchase's body
 * (svc_params_parse_body). body holds len bytes and a NUL after them (the
 * daemon's buffer does). Refused, with the reason in detail (dlen bytes,
 * terminated, naming the field): no stock in the query nor the body (no
 * body at all: NULL or len 0, included), a NUL byte inside the len bytes,
 * anything that is not one JSON object (trailing bytes included), an
 * unknown or duplicate field, a field also in the query ("<name>: give it
 * in the query or the body, not both"), a stock or buckets that is not a
 * number, out of its bounds or fractional. Returns 0 with *stock set to
 * the body's (untouched when only the query gave it) and *buckets to the
 * body's (0 when the body has none), or -1 with both untouched. Any thread
 * (cJSON's parser is serialized inside). */
int svc_stock_parse_body(const char *body, size_t len, unsigned in_query, int64_t *stock,
                         int64_t *buckets, char *detail, size_t dlen);

#endif
