/* lg_acked.h — the matrix's acknowledged-write scenarios, for the runner
 * (lg_matrix.c): manual-failover (SENTINEL FAILOVER under load) and
 * resume-failover (the master paused past down-after-milliseconds, the
 * failover started, the master resumed before the switch). Both show a 200
 * that a failover takes away with redis.wait_replicas=1 and none with all.
 * Private to the matrix room; it uses the matrix's processes (lg_mx_proc.h)
 * and the process kit's Sentinel topology (pk_ha.h), never the runner. Main
 * thread of the matrix only.
 */
#ifndef MIAOSHA_LG_ACKED_H
#define MIAOSHA_LG_ACKED_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"

/* What each cell of these scenarios must be: "lost-at-1" (acknowledged
 * orders lost with wait_replicas=1, none with all). Static string. Pure. */
const char *lg_acked_expected(lg_mode mode);

/* Runs scenario s (manual-failover or resume-failover) once for every mode
 * whose cells[m] is not NULL, all on one topology of its own and one
 * failover (a master, two replicas, three Sentinels, an instance with
 * wait_replicas=1 and one with all; started and stopped here, logs under
 * the matrix's log directory): blocks about 10-15 s. 0 with those cells
 * filled (an outcome may be "error" with a reason), or -1 when it could not
 * run at all, with a reason in err (errlen bytes). */
int lg_acked_run(mctx *x, lg_scenario s, lg_cell *cells[LG_NMODES], char *err, size_t errlen);

#endif
