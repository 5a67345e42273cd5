/* lg_nodes.h — the matrix's redlock scenarios (nodes-down, node-restart,
 * node-restart-delay): faults of the redlock row's lock masters, for the
 * runner (lg_matrix.c). Private to the matrix room; lg_nodes.c uses the
 * matrix's processes (lg_mx_proc.h), never the runner. Main thread of the
 * matrix only.
 */
#ifndef MIAOSHA_LG_NODES_H
#define MIAOSHA_LG_NODES_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"

/* What the redlock cell of scen must show: "exact" (nodes-down,
 * node-restart-delay) or "oversell" (node-restart). Static. Pure. */
const char *lg_nodes_expected(lg_scenario scen);
/* Fills the ids and server settings of the two instances these scenarios
 * use (the caller zeroed them): ins[0] plain, ins[1] with
 * redlock.restart_delay_ms. */
void lg_nodes_instances(instance ins[2]);
/* Runs the redlock cell of scen (lg_scen_is_redlock) with ins (started
 * here when down); needs x->lock_on. Kills and restarts lock masters, and
 * leaves all of them running. Blocks up to about 15 s. 0 with the cell
 * filled (its outcome may be "error" with a reason), or -1 when it could
 * not run at all, with a reason in err (errlen bytes). */
int lg_nodes_cell(mctx *x, lg_cell *c, lg_scenario scen, instance ins[2], char *err, size_t errlen);

#endif
