/* lg_fault.h — the matrix's fault scenarios (kill, redis-restart,
 * redis-pause), for the runner (lg_matrix.c). Private to the matrix room;
 * lg_fault.c uses the matrix's processes (lg_mx_proc.h), never the runner.
 * Main thread of the matrix only.
 */
#ifndef MIAOSHA_LG_FAULT_H
#define MIAOSHA_LG_FAULT_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_mx_proc.h"

/* What the cell's result must be: a static string, one outcome or several
 * accepted ones separated by '|' (e.g. "safe|stuck"). Pure. */
const char *lg_fault_expected(lg_scenario scen, lg_mode mode);
/* Fills the ids and server settings of the three fault instances (the
 * caller zeroed them). */
void lg_fault_instances(instance ins[3]);
/* Runs one fault cell over ins[0..2] (ins[2] is the one killed); brings
 * Redis and the instances back first when an earlier cell left them down;
 * starts and joins its own load thread; blocks up to about a minute. 0 with
 * the cell filled (its outcome may be "error" with a reason), or -1 when it
 * could not run at all, with a reason in err (errlen bytes). */
int lg_fault_cell(mctx *x, lg_cell *c, lg_scenario scen, lg_mode mode, instance ins[3], char *err,
                  size_t errlen);

#endif
