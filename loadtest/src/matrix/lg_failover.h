/* lg_failover.h — the matrix's failover scenario, for the runner
 * (lg_matrix.c): a Sentinel failover that loses a held lock. Private to the
 * matrix room; it uses the matrix's processes (lg_mx_proc.h) and the
 * process kit's Sentinel topology (pk_ha.h), never the runner. Main thread
 * of the matrix only.
 */
#ifndef MIAOSHA_LG_FAILOVER_H
#define MIAOSHA_LG_FAILOVER_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"

/* What the cell's result must be (static string). Pure. */
const char *lg_failover_expected(lg_mode mode);

/* Runs one failover cell on a topology of its own (started and stopped
 * here, logs under the matrix's log directory): blocks about 10-15 s. 0
 * with the cell filled (its outcome may be "error" with a reason), or -1
 * when it could not run at all, with a reason in err (errlen bytes). */
int lg_failover_cell(mctx *x, lg_cell *c, lg_mode mode, char *err, size_t errlen);

#endif
