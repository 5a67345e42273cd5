/* lg_matrix_report.h — the oversell matrix's results as a text table on a
 * stream and as three files: matrix.md (the table a class reads),
 * matrix.csv (every figure of every cell) and matrix.svg (sold / stock per
 * mode and scenario, as bars). The report room: it reads lg_matrix.h's
 * types and names and never runs anything.
 *
 * Threads: any one thread at a time per output; nothing is shared.
 */
#ifndef MIAOSHA_LG_MATRIX_REPORT_H
#define MIAOSHA_LG_MATRIX_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "lg_matrix_cfg.h"

/* The table of the selected cells, then one line per cell that ran (and
 * the fault figures when faults were selected), onto out. */
void lg_matrix_print(FILE *out, const lg_matrix_cfg *cfg, const lg_matrix_result *res);
/* Writes matrix.md, matrix.csv and matrix.svg into cfg->out_dir, which must
 * exist (lg_matrix_run makes it). 0, or -1 with "<path>: <strerror>" in err
 * (errlen bytes); files written before the failing one stay. */
int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *res, char *err,
                          size_t errlen);

#endif
