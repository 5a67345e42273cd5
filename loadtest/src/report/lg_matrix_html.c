/* lg_matrix_html.c — see lg_matrix_html.h. */
#include "lg_matrix_html.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_timeline.h"

typedef struct html_words {
    const char *html_lang, *title, *mode, *redis, *elapsed, *trials_per_cell, *differ,
        *timeline_hint, *trials_title, *trials_note, *as_expected, *oversold, *p50, *p99, *ms,
        *runs, *legend_title;
    /* the legend: a sample cell (its class and text) and what it means */
    struct {
        const char *cls, *sample, *means;
    } legend[4];
} html_words;

static const html_words words_en = {
    "en",
    "miaosha — the oversell matrix",
    "mode",
    "Redis",
    "elapsed",
    "trial(s) per cell",
    "cell trial(s) differ from the expected outcome",
    "Each cell links to its timeline: every purchase of the cell's burst, the oversold units "
    "highlighted.",
    "Trials",
    "Per cell: how many trials gave the expected outcome, and histograms over the trials of the "
    "oversold units and of the p50 and p99 purchase latency (client side). One lucky run proves "
    "nothing; a histogram that collapses to one bar does.",
    "as expected",
    "oversold units",
    "p50 latency",
    "p99 latency",
    "ms",
    "trials",
    "How to read a cell",
    {{"pass", "ok exact 20/20",
      "ok: the measured outcome is the expected one (README.md's table). Then the outcome "
      "measured (exact, oversell, stuck, recovers, sells, blocks…) and sold / stock: the units "
      "acknowledged as sold of the burst's stock"},
     {"pass oversold", "ok oversell 200/20",
      "red text: the cell oversold (the audit's oversold > 0): 200 units sold of a stock of 20"},
     {"diff", "DIFF exact 20/20",
      "DIFF, on red: the measured outcome is not the expected one; the cell's tooltip says why"},
     {"pass", "ok recovers 1000ms",
      "a time instead of sold / stock: the first sale after the crash, or a fault's figure (the "
      "dead holder's lock freed, every instance serving again, the slowest 503 while paused)"}}};

static const html_words words_zh = {
    "zh-CN",
    "miaosha — 超卖矩阵",
    "模式",
    "Redis",
    "耗时",
    "次试验/格",
    "格次试验与预期不符",
    "每一格都链接到它的时间线：该格压测中的每一次购买，超卖的每一件都被高亮。",
    "多次试验",
    "每一格：符合预期的试验次数，以及各次试验的超卖件数、p50 与 p99 购买延迟（客户端）的直方图。"
    "一次侥幸的运行说明不了什么；直方图收敛成一根柱子才说明问题。",
    "符合预期",
    "超卖件数",
    "p50 延迟",
    "p99 延迟",
    "毫秒",
    "次试验",
    "怎样读一个格子",
    {{"pass", "符合 准确 20/20",
      "符合：实测结果与预期一致（README.zh.md "
      "的表）。后面是实测结果（准确、超卖、卡死、恢复、正常售出、"
      "阻塞……）和 售出 / 库存：这一轮压测确认卖出的件数和它的库存"},
     {"pass oversold", "符合 超卖 200/20",
      "红字：这一格超卖了（对账的 oversold > 0）：库存 20 件卖出了 200 件"},
     {"diff", "不符 准确 20/20", "不符，红底：实测结果与预期不一致；鼠标悬停在格子上可以看到原因"},
     {"pass", "符合 恢复 1000ms",
      "毫秒数代替 售出 / 库存：崩溃之后的第一笔成交，或故障的关键耗时（死去持有者的锁被释放、"
      "所有实例恢复服务、暂停期间最慢的 503）"}}};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A small bar chart of v[0..n): up to 10 bins (one per value when the
 * values are integers spanning at most 10), the lowest and highest value
 * under it. */
static void svg_hist(FILE *f, const char *label, const char *unit, double *v, int n, int integer)
{
    if (n <= 0)
        return;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double lo = v[0], hi = v[n - 1];
    int bins = 10;
    if (hi == lo)
        bins = 1;
    else if (integer && hi - lo + 1 <= 10)
        bins = (int)(hi - lo + 1);
    int count[10] = {0}, maxc = 1;
    for (int i = 0; i < n; i++) {
        int b = bins == 1                      ? 0
                : integer && hi - lo + 1 <= 10 ? (int)(v[i] - lo)
                                               : (int)((v[i] - lo) / (hi - lo) * bins);
        if (b >= bins)
            b = bins - 1;
        if (++count[b] > maxc)
            maxc = count[b];
    }
    const double W = 160, H = 44;
    fprintf(f, "<svg class=\"hist\" width=\"170\" height=\"78\" viewBox=\"0 0 170 78\">"
               "<text x=\"5\" y=\"11\">");
    lg_html_text(f, label);
    fputs("</text>", f);
    double bw = W / bins;
    for (int b = 0; b < bins; b++) {
        double h = count[b] ? (double)count[b] / maxc * H : 0;
        double from = bins == 1                      ? lo
                      : integer && hi - lo + 1 <= 10 ? lo + b
                                                     : lo + (hi - lo) * b / bins;
        double to = bins == 1                      ? hi
                    : integer && hi - lo + 1 <= 10 ? from
                                                   : lo + (hi - lo) * (b + 1) / bins;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                "<title>%g..%g %s: %d</title></rect>",
                5 + b * bw, 16 + H - h, bw > 2 ? bw - 1 : bw, h,
                integer && to > 0 ? "#c0392b" : "#4a7bd0", from, to, unit, count[b]);
    }
    fprintf(f,
            "<line x1=\"5\" x2=\"165\" y1=\"60.5\" y2=\"60.5\" stroke=\"#999\"/>"
            "<text x=\"5\" y=\"74\">%g</text><text x=\"165\" y=\"74\" "
            "text-anchor=\"end\">%g %s</text></svg>",
            lo, hi, unit);
}

/* What the page's two tables need to write a cell: the result, the words
 * and, for the trials table, room for one value per trial. */
typedef struct table_ctx {
    const lg_matrix_result *r;
    lg_report_lang lang;
    const html_words *w;
    int trials;
    double *v; /* [trials]; NULL for the outcome table */
} table_ctx;

/* Writes the <td> of scenario s, mode m. */
typedef void (*td_writer)(FILE *f, const table_ctx *t, lg_scenario s, lg_mode m);

/* The frame both tables share: the selected modes as rows, the selected
 * scenarios as columns, each <td> written by td. */
static void write_table(FILE *f, const char *id, const lg_matrix_cfg *cfg, const table_ctx *t,
                        td_writer td)
{
    fprintf(f, "<table id=\"%s\">\n<thead><tr><th>%s</th>", id, t->w->mode);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s]) {
            fprintf(f, "<th data-scenario=\"%s\">", lg_scen_names[s]);
            lg_html_text(f, lg_report_scen_title(t->lang, s));
            fputs("</th>", f);
        }
    fputs("</tr></thead>\n<tbody>\n", f);
    for (lg_mode m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        fprintf(f, "<tr><th>%s</th>", lg_mode_names[m]);
        for (lg_scenario s = 0; s < LG_NSCEN; s++)
            if (cfg->scen_on[s])
                td(f, t, s, m);
        fputs("</tr>\n", f);
    }
    fputs("</tbody>\n</table>\n", f);
}

/* The matrix table: the first trial's outcome, linked to its timeline. */
static void outcome_td(FILE *f, const table_ctx *t, lg_scenario s, lg_mode m)
{
    const lg_cell *c = &t->r->cell[s][m];
    char text[160];
    lg_report_cell_text(t->lang, s, c, text, sizeof text);
    fprintf(f, "<td class=\"%s%s\" data-scenario=\"%s\" data-mode=\"%s\"",
            !c->ran   ? "none"
            : c->pass ? "pass"
                      : "diff",
            c->oversold > 0 ? " oversold" : "", lg_scen_names[s], lg_mode_names[m]);
    if (c->ran)
        fprintf(f, " data-oversold=\"%lld\"", (long long)c->oversold);
    fputs(" title=\"", f);
    lg_html_text(f, c->reason);
    fputs("\">", f);
    if (c->timeline)
        fprintf(f, "<a href=\"timeline-%s-%s.html\">", lg_scen_names[s], lg_mode_names[m]);
    lg_html_text(f, text);
    if (c->timeline)
        fputs("</a>", f);
    fputs("</td>", f);
}

/* The trials table: how many trials gave the expected outcome, and
 * histograms over the trials of the oversold units and the latencies. */
static void trials_td(FILE *f, const table_ctx *t, lg_scenario s, lg_mode m)
{
    int ran = 0, pass = 0, n = 0;
    for (int k = 0; k < t->trials; k++) {
        const lg_cell *c = lg_matrix_trial(t->r, k, s, m);
        ran += c->ran;
        pass += c->ran && c->pass;
    }
    fprintf(f, "<td data-scenario=\"%s\" data-mode=\"%s\" data-trials=\"%d\">", lg_scen_names[s],
            lg_mode_names[m], ran);
    if (ran) {
        fprintf(f, "%d/%d %s<br>", pass, ran, t->w->as_expected);
        n = 0;
        for (int k = 0; k < t->trials; k++) {
            const lg_cell *c = lg_matrix_trial(t->r, k, s, m);
            if (c->ran)
                t->v[n++] = (double)c->oversold;
        }
        svg_hist(f, t->w->oversold, "", t->v, n, 1);
        for (int p = 0; p < 2; p++) {
            n = 0;
            for (int k = 0; k < t->trials; k++) {
                const lg_cell *c = lg_matrix_trial(t->r, k, s, m);
                if (c->ran && c->has_latency)
                    t->v[n++] = round((p ? c->p99_ms : c->p50_ms) * 100) / 100;
            }
            svg_hist(f, p ? t->w->p99 : t->w->p50, t->w->ms, t->v, n, 0);
        }
    } else {
        fputs("-", f);
    }
    fputs("</td>", f);
}

int lg_matrix_write_html(const lg_matrix_cfg *cfg, const lg_matrix_result *r, lg_report_lang lang,
                         char *err, size_t errlen)
{
    const html_words *w = lang == LG_LANG_ZH ? &words_zh : &words_en;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/matrix.html", cfg->out_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    int trials = r->ntrials > 1 ? r->ntrials : 1;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"%s\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
            w->html_lang);
    fputs(w->title, f);
    fputs("</title>\n<style>\n"
          "body{font:14px/1.4 system-ui,\"Noto Sans CJK SC\",sans-serif;margin:16px;color:#222}\n"
          "h1{font-size:20px}\ntable{border-collapse:collapse}\n"
          "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}\n"
          "td.pass{background:#eef8ee}\ntd.diff{background:#fbe3e3}\n"
          "td.oversold a,td.oversold{color:#b00000;font-weight:600}\n"
          ".hist text{font-size:10px;fill:#444}\n.note{color:#555}\nh2{font-size:16px}\n"
          "#legend td{border-color:#ddd}\n#legend td.means{color:#444;max-width:60em}\n"
          "</style>\n</head>\n<body>\n<h1>",
          f);
    fputs(w->title, f);
    fputs("</h1>\n<p class=\"note\">", f);
    fprintf(f, "%s ", w->redis);
    lg_html_text(f, r->redis);
    fprintf(f, " · %s %.1f s · %d %s", w->elapsed, r->elapsed_s, trials, w->trials_per_cell);
    if (r->mismatches)
        fprintf(f, " · <b>%d %s</b>", r->mismatches, w->differ);
    fprintf(f, "</p>\n<p class=\"note\">%s</p>\n", w->timeline_hint);

    table_ctx t = {r, lang, w, trials, NULL};
    write_table(f, "matrix", cfg, &t, outcome_td);
    /* the legend: sample cells styled as the table's, and what they mean */
    fprintf(f, "<h2>%s</h2>\n<table id=\"legend\">\n", w->legend_title);
    for (size_t i = 0; i < sizeof w->legend / sizeof w->legend[0]; i++)
        fprintf(f, "<tr><td class=\"%s\">%s</td><td class=\"means\">%s</td></tr>\n",
                w->legend[i].cls, w->legend[i].sample, w->legend[i].means);
    fputs("</table>\n", f);

    if (trials > 1) {
        t.v = malloc((size_t)trials * sizeof *t.v);
        if (!t.v) {
            fclose(f);
            snprintf(err, errlen, "%s: out of memory", path);
            return -1;
        }
        fprintf(f, "<h2>%s</h2>\n<p class=\"note\">%s</p>\n", w->trials_title, w->trials_note);
        write_table(f, "trials", cfg, &t, trials_td);
        free(t.v);
    }
    fputs("</body>\n</html>\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        snprintf(err, errlen, "%s: write failed", path);
        return -1;
    }
    return 0;
}
