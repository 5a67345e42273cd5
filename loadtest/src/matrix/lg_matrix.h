/* lg_matrix.h — the oversell matrix: every mode through every scenario,
 * each cell measured against real miaosha-server processes that the matrix
 * starts, kills and restarts itself (children on free 127.0.0.1 ports,
 * stopped by PID), on one Redis (given, or a private redis-server it
 * starts). Progress lines go to cfg->log (main passes stderr); results are
 * returned, and the report room (lg_matrix_report.h) prints and writes them.
 *
 * Scenarios: the demo (race .. nested, the default selection) shows each
 * lock mode's known failure; the faults (kill, redis-restart, redis-pause;
 * lg_fault.c) show what a running deployment goes through when an instance
 * is kill -9'd while holding the lock, when the private redis-server is
 * SIGKILLed and restarted from its AOF, and when it is paused with SIGSTOP.
 * They are selected with --faults or --scenarios.
 *
 * The types (modes, scenarios, cfg, cells, result) are in lg_matrix_cfg.h.
 *
 * Threads: lg_matrix_run is for one thread, the one that owns the cfg and
 * the result (main's); it starts and joins threads of its own and reaps its
 * children on the calling thread.
 */
#ifndef MIAOSHA_LG_MATRIX_H
#define MIAOSHA_LG_MATRIX_H

#include <stddef.h>

#include "lg_matrix_cfg.h"

/* Runs the selected cells; blocks for seconds to minutes (the quick demo
 * about 20 s, the quick faults about 45 s). Logs progress to cfg->log.
 * Returns 0 (every cell filled: res->mismatches counts the cells whose
 * outcome differs, a cell that could not run is one of them with outcome
 * "error") or -1 with a reason in err (errlen bytes): the output directory
 * cannot be made, the server binary is not executable, faults with
 * cfg->redis, Redis or an instance would not start, or *cfg->stop was set
 * ("interrupted"). Stops every child it started before returning, in
 * every case. With cfg->trials K > 1 every cell runs K times in a row
 * (res->more holds trials 2..K: free it with lg_matrix_result_free, also
 * after -1). For the first trial of every cell it writes
 * cfg->out_dir/timeline-<scenario>-<mode>.html (unless cfg->no_timelines;
 * not for failover and cluster-failover, whose traces are on instances
 * gone when the cell ends, nor for manual-failover, resume-failover and
 * reshard, whose cells share one run;
 * a page that cannot be written is logged, the cell is unchanged). cfg must
 * stay valid during the call; curl_global_init must have been called
 * (lg_admin.h). */
int lg_matrix_run(const lg_matrix_cfg *cfg, lg_matrix_result *res, char *err, size_t errlen);

#endif
