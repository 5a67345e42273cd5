/* lg_cluster.h — the matrix's Redis Cluster scenarios, for the runner
 * (lg_matrix.c):
 *   cluster-failover  a master SIGKILLed before the lock on it reached its
 *                     replica, which the cluster promotes: the lock is
 *                     lost, the lock modes oversell; redlock (its lock
 *                     masters are not the cluster's) and lua stay exact;
 *   reshard           a burst buys while its SKU's slot moves to another
 *                     master, step by step: every safe mode stays exact,
 *                     the redirects are followed, no acknowledged order is
 *                     lost.
 * Private to the matrix room; it uses the matrix's processes
 * (lg_mx_proc.h) and the process kit's cluster (pk_cluster.h), never the
 * runner. Main thread of the matrix only.
 */
#ifndef MIAOSHA_LG_CLUSTER_H
#define MIAOSHA_LG_CLUSTER_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"

/* What cell (s, mode) must be, s one of the two scenarios. Static string;
 * pure. */
const char *lg_cluster_expected(lg_scenario s, lg_mode mode);

/* One cluster-failover cell on a cluster and two instances of its own
 * (started and stopped here, logs under the matrix's log directory):
 * blocks a few seconds (the cluster's start, a failover of about 2 s). 0 with the cell filled (its
 * outcome may be "error" with a reason), or -1 when it could not run at all, reason in err (errlen
 * bytes). */
int lg_cluster_failover_cell(mctx *x, lg_cell *c, lg_mode mode, char *err, size_t errlen);

/* The reshard scenario for every mode whose cells[m] is not NULL, on one
 * cluster and one instance of its own, one SKU and one slot move per
 * mode: blocks a few seconds per mode. 0 with those cells filled, or -1
 * when it could not run at all (reason in err). s is LG_SCEN_RESHARD. */
int lg_reshard_run(mctx *x, lg_scenario s, lg_cell *cells[LG_NMODES], char *err, size_t errlen);

#endif
