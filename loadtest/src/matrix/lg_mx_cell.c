/* lg_mx_cell.c — see lg_mx_cell.h. */
#include "lg_mx_cell.h"

#include <stdio.h>
#include <stdlib.h>

void lg_mx_fill_from_run(lg_cell *c, const lg_run_result *r)
{
    c->requests = r->requests;
    c->ok = r->ok;
    c->sold_out = r->sold_out;
    c->lock_busy = r->lock_busy;
    c->errors = lg_run_errors(r) + r->not_sent;
    c->lock_lost = r->lock_lost;
    c->deleted_other_lock = r->deleted_other_lock;
    c->fenced_out = r->fenced_out;
    c->sold_out_local = r->sold_out_local;
    c->dup = r->dup_orders + r->dup_ok_ids;
    c->acked_lost = r->acked_lost;
    c->acked_over_stock = r->acked_over_stock;
    c->elapsed_s = r->eng.elapsed_s;
    if (r->eng.hist.count > 0) {
        c->has_latency = 1;
        c->p50_ms = (double)lg_hist_percentile(&r->eng.hist, 50) / 1000.0;
        c->p99_ms = (double)lg_hist_percentile(&r->eng.hist, 99) / 1000.0;
    }
    if (r->audited) {
        c->stock = r->audit.initial;
        c->sold = r->audit.sold;
        c->stock_left = r->audit.stock;
        c->oversold = r->audit.oversold;
        c->undersold = r->audit.undersold;
    }
}

lg_run_result *lg_mx_run_burst(const lg_run_cfg *rc, lg_cell *c, char *err, size_t errlen)
{
    lg_run_result *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (lg_run(rc, r, err, errlen) < 0) {
        free(r);
        return NULL;
    }
    c->ran = 1;
    lg_mx_fill_from_run(c, r);
    return r;
}
