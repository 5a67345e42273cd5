/* lg_matrix_report.h — the oversell matrix's results as a text table on a
 * stream and as three files: matrix.md (the table a class reads),
 * matrix.csv (every figure of every cell) and matrix.svg (sold / stock per
 * mode and scenario, as bars). The report room: it reads lg_matrix.h's
 * types and names and never runs anything.
 *
 * The table, matrix.md and matrix.svg come in English or Chinese
 * (lg_report_lang); mode names stay as in the service's URLs in both, and
 * matrix.csv is always the same English, machine-readable file. Each
 * cell's reason is measured text from the runner and stays English.
 *
 * Threads: any one thread at a time per output; nothing is shared.
 */
#ifndef MIAOSHA_LG_MATRIX_REPORT_H
#define MIAOSHA_LG_MATRIX_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "lg_matrix_cfg.h"

/* The language of the table, matrix.md and matrix.svg. */
typedef enum lg_report_lang {
    LG_LANG_EN, /* the default; the output the tests and README.md were written against */
    LG_LANG_ZH  /* simplified Chinese, in the vocabulary of README.zh.md */
} lg_report_lang;

/* "en" or "zh" (exactly, lower case) into *out: 0, or -1 for anything else,
 * NULL included, with *out unchanged. Pure. */
int lg_report_lang_parse(const char *s, lg_report_lang *out);

/* The width of the UTF-8 string s in terminal columns: 2 for each East
 * Asian wide or fullwidth character (CJK ideographs, fullwidth
 * punctuation), 1 for any other character and for each byte of an invalid
 * sequence. The table pads by this, not by bytes. Pure. */
size_t lg_text_width(const char *s);

/* The table of the selected cells, then one line per cell that ran (and
 * the fault figures when faults were selected), onto out, in lang. Columns
 * are padded to terminal columns (lg_text_width). */
void lg_matrix_print(FILE *out, const lg_matrix_cfg *cfg, const lg_matrix_result *res,
                     lg_report_lang lang);
/* A cell's short text as the table shows it ("ok oversell 200/20"), in
 * lang, into buf (len bytes). Pure. */
void lg_report_cell_text(lg_report_lang lang, lg_scenario s, const lg_cell *c, char *buf,
                         size_t len);
/* A scenario's title as matrix.md's header says it ("race (1 instance)"),
 * in lang; a static string. Pure. */
const char *lg_report_scen_title(lg_report_lang lang, lg_scenario s);

/* Writes matrix.md and matrix.svg in lang, and matrix.csv (English in
 * every language; one row per trial, with a `trial` column after `mode`,
 * when res->ntrials > 1), into cfg->out_dir, which must exist (lg_matrix_run
 * makes it). All three are UTF-8. 0, or -1 with "<path>: <strerror>" in err
 * (errlen bytes); files written before the failing one stay. */
int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *res,
                          lg_report_lang lang, char *err, size_t errlen);

#endif
