/* svc_routes.h — the jobs that workers run for the Redis-backed routes. Each
 * fills the request's reply; none touches the HTTP connection. */
#ifndef MIAOSHA_SVC_ROUTES_H
#define MIAOSHA_SVC_ROUTES_H

#include "svc_reply.h"

/* POST|GET /miaosha/{mode} (svc_purchase.c). r->mode, r->sku and r->p are
 * validated; r->s gives the defaults for what the query leaves out. */
void svc_purchase_job(svc_req *r, lc_conn *conn);

/* GET /stock/{sku} and PUT /stock/{sku} (r->is_put, r->p.stock), and
 * GET /orders/{sku} (svc_stock.c). */
void svc_stock_get_job(svc_req *r, lc_conn *conn);
void svc_stock_put_job(svc_req *r, lc_conn *conn);
void svc_orders_job(svc_req *r, lc_conn *conn);

/* At start: gives sku its initial stock when Redis has none for it (SET NX,
 * so several instances starting together seed it once). 0, or -1 when Redis
 * could not be reached (logged by the caller). */
int svc_stock_seed(lc_conn *conn, const char *sku, long long initial, char *err, size_t errlen);

/* Parses a PUT /stock body {"stock":N} (len bytes, NUL-terminated). 0, or
 * -1 with the reason in detail. */
int svc_stock_parse_body(const char *body, size_t len, int64_t *stock, char *detail,
                         size_t dlen);

#endif
