/* lg_matrix_html.h — matrix.html: the matrix as a page. The table of
 * lg_matrix_print (modes × scenarios), each cell linking to its
 * timeline-<scenario>-<mode>.html (lg_mx_timeline.h) when one was written;
 * with several trials (matrix --trials K), per cell the histograms of the
 * oversold units and of the p50 and p99 purchase latency over the K trials.
 * Self-contained (inline CSS and SVG, no script), opens from file://.
 * Every text that is not the program's own is HTML-escaped.
 */
#ifndef MIAOSHA_LG_MATRIX_HTML_H
#define MIAOSHA_LG_MATRIX_HTML_H

#include <stddef.h>

#include "lg_matrix_cfg.h"
#include "lg_matrix_report.h"

/* Writes cfg->out_dir/matrix.html in lang (mode names stay as in the URLs).
 * 0, or -1 with "<path>: <strerror>" in err (errlen bytes). Reads res
 * only; the thread that owns it. */
int lg_matrix_write_html(const lg_matrix_cfg *cfg, const lg_matrix_result *res, lg_report_lang lang,
                         char *err, size_t errlen);

#endif
