/* lg_mx_timeline.h — a matrix cell's timeline page,
 * <out>/timeline-<scenario>-<mode>.html: the trace of the cell's SKU on
 * every instance the scenario used, from where it stood before the cell
 * (lg_timeline.h), with the cell's audit. Private to the matrix room.
 */
#ifndef MIAOSHA_LG_MX_TIMELINE_H
#define MIAOSHA_LG_MX_TIMELINE_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_timeline.h"

#define LG_MX_TL_MAX 3 /* instances of one scenario */

/* Where the cell's SKU stands on each of the n instance URLs (bases)
 * before the cell runs. Blocks for n small GETs; never fails. */
void lg_mx_timeline_mark(const char *const *bases, int n, lg_scenario s, lg_mode m,
                         lg_trace_mark *marks);

/* Fetches the traces and writes the page; sets c->timeline on success. 0,
 * or -1 with a reason in err (the cell itself is not changed then). */
int lg_mx_timeline_write(const lg_matrix_cfg *cfg, lg_scenario s, lg_mode m, lg_cell *c,
                         const char *const *bases, const lg_trace_mark *marks, int n, char *err,
                         size_t errlen);

#endif
