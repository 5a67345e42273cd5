/* lg_mx_cell.h — what a demo cell (lg_matrix.c), a fault cell (lg_fault.c),
 * a redlock cell (lg_nodes.c) and a failover cell (lg_failover.c,
 * lg_cluster.c) do with a burst, a buyer and their result. Private to the
 * matrix room.
 */
#ifndef MIAOSHA_LG_MX_CELL_H
#define MIAOSHA_LG_MX_CELL_H

#include "lg_admin.h"
#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"
#include "lg_run.h"

/* Copies the run's counters and, when it was audited, the audit into the
 * cell (errors = lg_run_errors + requests never sent). Pure; any thread. */
void lg_mx_fill_from_run(lg_cell *c, const lg_run_result *r);

/* Runs the burst rc (lg_run: blocks for the whole load) into cell c: marks
 * it ran and fills it from the result (lg_mx_fill_from_run). Returns the
 * result, malloc'd, for the caller's own checks (the caller frees it); or
 * NULL with "out of memory" or lg_run's reason in err (errlen bytes), the
 * cell untouched. The thread that owns c. */
lg_run_result *lg_mx_run_burst(const lg_run_cfg *rc, lg_cell *c, char *err, size_t errlen);

/* The buyer of a failover cell: POSTs url (one purchase; each try bounded
 * by 3 s) every 20 ms until an answer that is not 503 or a try that got no
 * answer (the instance itself is not what fails over: a transport failure
 * ends the wait rather than hide it), until end (lc_now_ms's clock) or until
 * the matrix is stopped. Counts every request and every 503 into c, and the
 * last answer: a 200 into ok (and resume_ms), a 429 into lock_busy, a 409
 * into sold_out. Returns that last status (0: no answer at all) and in
 * *answer_ms the time from t_kill to it (-1: none). Main thread of the
 * matrix. */
long lg_mx_buy_until_served(mctx *x, lg_cell *c, const char *url, long long t_kill, long long end,
                            long long *answer_ms);

/* A one-unit failover cell's audit (GET /stock/sku of the instance at
 * base) into c and *a: sold, stock left, oversold, undersold, and its
 * outcome "oversell", "exact" (all of c->stock sold, none undersold) or
 * "short"; also acked_over_stock, c->ok's 200s beyond c->stock (call it
 * after the cell's last 200 is counted). 0; -1 when no audit came, with c's outcome "error" and the
 * reason in c->reason. Main thread of the matrix. */
int lg_mx_audit_one(lg_cell *c, const char *base, const char *sku, lg_audit *a);

/* "buyer no answer" or "buyer STATUS N ms after the kill", as
 * lg_mx_buy_until_served returned them, into buf (len bytes). Pure. */
void lg_mx_buyer_text(char *buf, size_t len, long status, long long answer_ms);

#endif
