/* lg_mx_cell.h — what a demo cell (lg_matrix.c) and a fault cell
 * (lg_fault.c) both do with a burst's result. Private to the matrix room.
 */
#ifndef MIAOSHA_LG_MX_CELL_H
#define MIAOSHA_LG_MX_CELL_H

#include "lg_matrix_cfg.h"
#include "lg_run.h"

/* Copies the run's counters and, when it was audited, the audit into the
 * cell (errors = lg_run_errors + requests never sent). Pure; any thread. */
void lg_mx_fill_from_run(lg_cell *c, const lg_run_result *r);

#endif
