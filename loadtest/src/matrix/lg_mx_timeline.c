/* lg_mx_timeline.c — see lg_mx_timeline.h. */
#include "lg_mx_timeline.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static void cell_sku(lg_scenario s, lg_mode m, char *buf, size_t len)
{
    snprintf(buf, len, "mx-%s-%s", lg_scen_names[s], lg_mode_names[m]);
}

void lg_mx_timeline_mark(const char *const *bases, int n, lg_scenario s, lg_mode m,
                         lg_trace_mark *marks)
{
    char sku[64];
    cell_sku(s, m, sku, sizeof sku);
    for (int i = 0; i < n; i++)
        lg_trace_mark_get(bases[i], sku, &marks[i]);
}

int lg_mx_timeline_write(const lg_matrix_cfg *cfg, lg_scenario s, lg_mode m, lg_cell *c,
                         const char *const *bases, const lg_trace_mark *marks, int n, char *err,
                         size_t errlen)
{
    char sku[64], path[PATH_MAX], caption[600];
    cell_sku(s, m, sku, sizeof sku);
    if (snprintf(path, sizeof path, "%s/timeline-%s-%s.html", cfg->out_dir, lg_scen_names[s],
                 lg_mode_names[m]) >= (int)sizeof path) {
        snprintf(err, errlen, "output path too long");
        return -1;
    }
    lg_trace_set set;
    lg_trace_set_init(&set);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = lg_trace_fetch(&set, bases[i], sku, &marks[i], err, errlen);
    /* the audit as the cell saw it */
    lg_audit a = {.stock = c->stock_left,
                  .initial = c->stock,
                  .sold = c->sold,
                  .orders = -1,
                  .oversold = c->oversold,
                  .undersold = c->undersold};
    /* A split SKU's per-bucket ends, which the cell does not keep: read
     * again, used when nothing was sold since the cell's audit. */
    lg_audit now;
    char why[256];
    if (rc == 0 && lg_admin_audit(bases[0], sku, &now, why, sizeof why) == 0 && now.nbuckets > 0 &&
        now.sold == c->sold && now.stock == c->stock_left) {
        a.nbuckets = now.nbuckets;
        memcpy(a.bucket, now.bucket, sizeof a.bucket);
    }
    snprintf(caption, sizeof caption, "matrix: %s × %s — expected %s, measured %s (%s)",
             lg_scen_names[s], lg_mode_names[m], c->expected ? c->expected : "?", c->outcome,
             c->reason);
    lg_timeline_page page = {sku, lg_mode_names[m], caption,          cfg->lang,
                             &a,  c->requests,      c->sold_out_local};
    if (rc == 0)
        rc = lg_timeline_write(path, &page, &set, err, errlen);
    if (rc == 0)
        c->timeline = 1;
    lg_trace_set_free(&set);
    return rc;
}
