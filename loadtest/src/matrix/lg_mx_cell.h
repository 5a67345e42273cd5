/* lg_mx_cell.h — what a demo cell (lg_matrix.c), a fault cell (lg_fault.c)
 * and a redlock cell (lg_nodes.c) do with a burst and its result. Private to
 * the matrix room.
 */
#ifndef MIAOSHA_LG_MX_CELL_H
#define MIAOSHA_LG_MX_CELL_H

#include "lg_matrix_cfg.h"
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

#endif
