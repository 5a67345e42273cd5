/* lg_mx_cell.c — see lg_mx_cell.h. */
#include "lg_mx_cell.h"

#include <stdio.h>
#include <stdlib.h>

#include "lockcore.h"
#include "pk_proc.h"

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

long lg_mx_buy_until_served(mctx *x, lg_cell *c, const char *url, long long t_kill, long long end,
                            long long *answer_ms)
{
    long bst = 0;
    *answer_ms = -1;
    for (; lc_now_ms() < end && !lg_mx_stopped(x); pk_sleep_ms(20)) {
        char e[256];
        c->requests++;
        if (lg_http_call("POST", url, NULL, NULL, 3000, &bst, NULL, e, sizeof e) != 0)
            bst = 0;
        if (bst != 0)
            *answer_ms = lc_now_ms() - t_kill;
        if (bst == 503) {
            c->n503++;
            continue;
        }
        break;
    }
    if (bst == 200) {
        c->resume_ms = *answer_ms;
        c->ok++;
    } else if (bst == 429) {
        c->lock_busy++;
    } else if (bst == 409) {
        c->sold_out++;
    }
    return bst;
}

int lg_mx_audit_one(lg_cell *c, const char *base, const char *sku, lg_audit *a)
{
    char why[256];
    if (lg_admin_audit(base, sku, a, why, sizeof why) != 0) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", why);
        return -1;
    }
    /* Each 200 of such a cell answered a request of its own (the holder's,
     * the buyer's), so each is a distinct order: the 200s beyond the
     * stock are counted as a burst's distinct acknowledged ids are. */
    if (c->stock >= 0 && c->ok > (uint64_t)c->stock)
        c->acked_over_stock = c->ok - (uint64_t)c->stock;
    c->sold = a->sold;
    c->stock_left = a->stock;
    c->oversold = a->oversold;
    c->undersold = a->undersold;
    snprintf(c->outcome, sizeof c->outcome, "%s",
             a->oversold > 0                            ? "oversell"
             : a->sold == c->stock && a->undersold == 0 ? "exact"
                                                        : "short");
    return 0;
}

void lg_mx_buyer_text(char *buf, size_t len, long status, long long answer_ms)
{
    if (status == 0 || answer_ms < 0)
        snprintf(buf, len, "buyer no answer");
    else
        snprintf(buf, len, "buyer %ld %lld ms after the kill", status, answer_ms);
}
