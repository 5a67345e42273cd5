/* lg_matrix_cfg.c — what the matrix runs: the names of the modes and the
 * scenarios, the default selection and the --modes / --scenarios / --faults
 * choices, where miaosha-server is; the text appender lg_addf. See
 * lg_matrix.h. Shared by the runner, the fault scenarios and the report, so
 * none of them depends on another for these. */
#include "lg_matrix_cfg.h"

#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const lg_mode_names[LG_NMODES] = {"none",      "mutex",   "setnx",  "token",
                                              "reentrant", "redlock", "fenced", "lua"};
const char *const lg_scen_names[LG_NSCEN] = {"race",
                                             "multi",
                                             "slow",
                                             "crash",
                                             "nested",
                                             "dup-user",
                                             "retry",
                                             "buckets", /* the demo */
                                             "kill",
                                             "redis-restart",
                                             "redis-pause", /* the faults, lg_fault.c */
                                             "failover",    /* lg_failover.c */
                                             "manual-failover",
                                             "resume-failover", /* lg_acked.c */
                                             "cluster-failover",
                                             "reshard", /* lg_cluster.c */
                                             "nodes-down",
                                             "node-restart",
                                             "node-restart-delay"}; /* redlock, lg_nodes.c */

void lg_matrix_cfg_init(lg_matrix_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->redis_server = "redis-server";
    c->out_dir = "matrix-out";
    for (int i = 0; i < LG_NMODES; i++)
        c->mode_on[i] = 1;
    for (int i = 0; i < LG_NDEMO; i++)
        c->scen_on[i] = 1;
    c->time_factor = 1.0;
    c->trials = 1;
}

const lg_cell *lg_matrix_trial(const lg_matrix_result *r, int k, lg_scenario s, lg_mode m)
{
    return k == 0 ? &r->cell[s][m] : &r->more[k - 1][s][m];
}

void lg_matrix_result_free(lg_matrix_result *r)
{
    free(r->more);
    r->more = NULL;
}

int lg_matrix_has_faults(const lg_matrix_cfg *c)
{
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (c->scen_on[s] && lg_scen_is_fault(s))
            return 1;
    return 0;
}

void lg_matrix_select_faults(lg_matrix_cfg *c)
{
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        c->scen_on[s] = lg_scen_is_fault(s);
}

static int select_list(const char *list, const char *const *names, int n, int *on, char *err,
                       size_t errlen)
{
    int tmp[32] = {0};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    int named = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), named++) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(t, names[i]))
                tmp[i] = found = 1;
        if (!found) {
            snprintf(err, errlen, "unknown name '%s'", t);
            return -1;
        }
    }
    if (named == 0) {
        snprintf(err, errlen, "no name given (a comma-separated list)");
        return -1;
    }
    for (int i = 0; i < n; i++)
        on[i] = tmp[i];
    return 0;
}

int lg_matrix_select(lg_matrix_cfg *c, const char *modes, const char *scens, char *err,
                     size_t errlen)
{
    if (modes && select_list(modes, lg_mode_names, LG_NMODES, c->mode_on, err, errlen) < 0)
        return -1;
    if (scens && select_list(scens, lg_scen_names, LG_NSCEN, c->scen_on, err, errlen) < 0)
        return -1;
    return 0;
}

int lg_matrix_default_server(const char *argv0, char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        if (!argv0 || !realpath(argv0, self))
            return -1;
    } else {
        self[n] = 0;
    }
    char *dir = dirname(self);
    snprintf(buf, len, "%s/../service/miaosha-server", dir);
    if (access(buf, X_OK) == 0)
        return 0;
    return -1;
}

void lg_addf(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}
