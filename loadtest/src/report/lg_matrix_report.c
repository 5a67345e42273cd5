/* lg_matrix_report.c — see lg_matrix_report.h. */
#include "lg_matrix_report.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static const char *const scen_titles[LG_NSCEN] = {
    "race (1 instance)",   "multi-instance (3)", "slow holder (work > lease)",
    "crash while holding", "nested (reenter=2)", "instance kill -9 (3)",
    "Redis restart (AOF)", "Redis paused 2 s"};

static void cell_short(lg_scenario s, const lg_cell *c, char *buf, size_t len)
{
    if (!c->ran) {
        snprintf(buf, len, "-");
        return;
    }
    const char *verdict = c->pass ? "ok" : "DIFF";
    if (lg_scen_is_fault(s) && (!strcmp(c->outcome, "safe") || !strcmp(c->outcome, "late"))) {
        /* the fault's headline figure; sold/stock is the stock by definition */
        if (s == LG_SCEN_KILL)
            snprintf(buf, len, "%s %s freed %lldms", verdict, c->outcome, (long long)c->freed_ms);
        else if (s == LG_SCEN_REDIS_RESTART)
            snprintf(buf, len, "%s %s back %lldms", verdict, c->outcome,
                     (long long)c->reconnect_ms);
        else
            snprintf(buf, len, "%s %s 503 %lldms", verdict, c->outcome,
                     (long long)c->failfast_ms);
        return;
    }
    if (!strcmp(c->expected, "stuck") || !strcmp(c->expected, "recovers")) {
        if (c->recovery_ms >= 0)
            snprintf(buf, len, "%s %s %lldms", c->pass ? "ok" : "DIFF", c->outcome,
                     (long long)c->recovery_ms);
        else
            snprintf(buf, len, "%s %s", c->pass ? "ok" : "DIFF", c->outcome);
        return;
    }
    snprintf(buf, len, "%s %s %lld/%lld", c->pass ? "ok" : "DIFF", c->outcome, (long long)c->sold,
             (long long)c->stock);
}

/* A fault measurement in ms, "-" when not measured. */
static void fmt_ms(char *buf, size_t len, int64_t ms)
{
    if (ms < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%lld", (long long)ms);
}

void lg_matrix_print(FILE *o, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    fprintf(o, "\nmiaosha oversell matrix%s — redis %s — %.1f s\n", cfg->quick ? " (quick)" : "",
            r->redis, r->elapsed_s);
    if (cfg->target && cfg->scen_on[LG_SCEN_MULTI])
        fprintf(o, "multi-instance scenario through %s\n", cfg->target);
    fprintf(o, "%-10s", "mode");
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fprintf(o, " | %-24s", lg_scen_names[s]);
    fputc('\n', o);
    for (lg_mode m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        fprintf(o, "%-10s", lg_mode_names[m]);
        for (lg_scenario s = 0; s < LG_NSCEN; s++) {
            if (!cfg->scen_on[s])
                continue;
            char b[64];
            cell_short(s, &r->cell[s][m], b, sizeof b);
            fprintf(o, " | %-24s", b);
        }
        fputc('\n', o);
    }
    fputs("(cells: ok/DIFF vs expected, measured outcome, sold/stock or recovery time)\n\n", o);
    fputs("scenario      mode      expected   measured oversold undersold lock_busy lock_lost "
          "del_other reason\n",
          o);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(o, "%-13s %-9s %-10s %-8s %8lld %9lld %9llu %9llu %9llu %s\n",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome, (long long)c->oversold,
                    (long long)c->undersold, (unsigned long long)c->lock_busy,
                    (unsigned long long)c->lock_lost, (unsigned long long)c->deleted_other_lock,
                    c->reason);
        }
    if (lg_matrix_has_faults(cfg)) {
        fputs("\nfault         mode      503s   unacked fault_ms freed_ms failfast reconnect "
              "resume (ms; - = n/a)\n",
              o);
        for (lg_scenario s = LG_SCEN_KILL; s < LG_NSCEN; s++)
            for (lg_mode m = 0; m < LG_NMODES; m++) {
                const lg_cell *c = &r->cell[s][m];
                if (!c->ran)
                    continue;
                char v[5][24];
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                for (int k = 0; k < 5; k++)
                    fmt_ms(v[k], sizeof v[k], ms[k]);
                fprintf(o, "%-13s %-9s %6llu %7llu %8s %8s %8s %9s %6s\n", lg_scen_names[s],
                        lg_mode_names[m], (unsigned long long)c->n503,
                        (unsigned long long)c->unacked, v[0], v[1], v[2], v[3], v[4]);
            }
    }
    fprintf(o, "\n%d cell(s) differ from the expected outcome\n", r->mismatches);
}

static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
    }
}

static int write_md(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "# miaosha oversell matrix%s\n\n", cfg->quick ? " (quick)" : "");
    fprintf(f, "Measured by `miaosha-load matrix` in %.1f s against real `miaosha-server` "
               "processes on Redis %s. Every cell is a measurement; **DIFF** marks a cell whose "
               "outcome is not the expected one.\n\n",
            r->elapsed_s, r->redis);
    if (cfg->target && cfg->scen_on[LG_SCEN_MULTI])
        fprintf(f, "The multi-instance scenario went through `%s` (a balancer in front of the "
                   "instances), not through instances of the matrix's own.\n\n",
                cfg->target);
    fputs("| mode |", f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fprintf(f, " %s |", s == LG_SCEN_MULTI && cfg->target ? "multi-instance (via --target)"
                                                             : scen_titles[s]);
    fputs("\n|---|", f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fputs("---|", f);
    fputc('\n', f);
    for (lg_mode m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        fprintf(f, "| `%s` |", lg_mode_names[m]);
        for (lg_scenario s = 0; s < LG_NSCEN; s++) {
            if (!cfg->scen_on[s])
                continue;
            const lg_cell *c = &r->cell[s][m];
            char b[64];
            cell_short(s, c, b, sizeof b);
            int bad = !strcmp(c->outcome, "oversell") || !strcmp(c->outcome, "stuck") ||
                      !strcmp(c->outcome, "blocks");
            fprintf(f, " %s%s%s |", bad ? "**" : "", b, bad ? "**" : "");
        }
        fputc('\n', f);
    }
    fputs("\n## Cells\n\n| scenario | mode | expected | measured | sold / stock | oversold | "
          "undersold | lock_busy | lock_lost | deleted another's lock | recovery ms | reason |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(f, "| %s | %s | %s | %s%s | %lld / %lld | %lld | %lld | %llu | %llu | %llu | ",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome,
                    c->pass ? "" : " **DIFF**", (long long)c->sold, (long long)c->stock,
                    (long long)c->oversold, (long long)c->undersold,
                    (unsigned long long)c->lock_busy, (unsigned long long)c->lock_lost,
                    (unsigned long long)c->deleted_other_lock);
            if (c->recovery_ms >= 0)
                fprintf(f, "%lld", (long long)c->recovery_ms);
            else if (c->stuck)
                fprintf(f, "stuck > %lld", (long long)c->window_ms);
            fputs(" | ", f);
            md_text(f, c->reason);
            fputs(" |\n", f);
        }
    if (lg_matrix_has_faults(cfg)) {
        fputs("\n## Fault cells\n\nTimes in ms (— = not applicable): how long the fault "
              "lasted, when the dead holder's lock was gone after the kill, the slowest 503 "
              "while Redis was unavailable, when every instance answered without 503 after "
              "Redis was back, the first sale after the fault ended.\n\n"
              "| scenario | mode | 503s | unacknowledged | fault | lock freed | 503 within | "
              "reconnect | next sale |\n|---|---|---|---|---|---|---|---|---|\n",
              f);
        for (lg_scenario s = LG_SCEN_KILL; s < LG_NSCEN; s++)
            for (lg_mode m = 0; m < LG_NMODES; m++) {
                const lg_cell *c = &r->cell[s][m];
                if (!c->ran)
                    continue;
                fprintf(f, "| %s | %s | %llu | %llu |", lg_scen_names[s], lg_mode_names[m],
                        (unsigned long long)c->n503, (unsigned long long)c->unacked);
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                for (int k = 0; k < 5; k++) {
                    char v[24];
                    fmt_ms(v, sizeof v, ms[k]);
                    fprintf(f, " %s |", strcmp(v, "-") ? v : "—");
                }
                fputc('\n', f);
            }
    }
    fprintf(f, "\n%d cell(s) differ from the expected outcome.\n", r->mismatches);
    return fclose(f) == 0 ? 0 : -1;
}

static int write_csv(const char *path, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs("scenario,mode,expected,measured,pass,stock,sold,stock_left,oversold,undersold,"
          "requests,ok,sold_out,lock_busy,errors,lock_lost,deleted_other_lock,duplicate_ids,"
          "missing_orders,stuck,"
          "recovery_ms,elapsed_s,redis_unavailable,unacknowledged,fault_ms,freed_ms,"
          "failfast_ms,reconnect_ms,resume_ms,reason\n",
          f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(f, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%llu,%llu,%llu,%llu,%llu,%llu,"
                       "%llu,%llu,%llu,%d,%lld,%.3f,",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome,
                    c->pass ? "true" : "false", (long long)c->stock, (long long)c->sold,
                    (long long)c->stock_left, (long long)c->oversold, (long long)c->undersold,
                    (unsigned long long)c->requests, (unsigned long long)c->ok,
                    (unsigned long long)c->sold_out, (unsigned long long)c->lock_busy,
                    (unsigned long long)c->errors, (unsigned long long)c->lock_lost,
                    (unsigned long long)c->deleted_other_lock, (unsigned long long)c->dup,
                    (unsigned long long)c->missing, c->stuck,
                    (long long)c->recovery_ms, c->elapsed_s);
            if (lg_scen_is_fault(s)) {
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                fprintf(f, "%llu,%llu,", (unsigned long long)c->n503,
                        (unsigned long long)c->unacked);
                for (int k = 0; k < 5; k++)
                    if (ms[k] >= 0)
                        fprintf(f, "%lld,", (long long)ms[k]);
                    else
                        fputc(',', f);
            } else {
                fputs(",,,,,,,", f);
            }
            csv_field(f, c->reason);
            fputc('\n', f);
        }
    return fclose(f) == 0 ? 0 : -1;
}

/* What the small label above a bar measures, per scenario (shown under the
 * scenario's name). */
static const char *svg_note_caption(lg_scenario s)
{
    switch (s) {
    case LG_SCEN_CRASH: return "label: first sale after the crash";
    case LG_SCEN_KILL: return "label: dead holder's lock freed after";
    case LG_SCEN_REDIS_RESTART: return "label: all instances serve again after";
    case LG_SCEN_REDIS_PAUSE: return "label: 503 while paused within";
    default: return NULL;
    }
}

/* The small label above a bar: the crash's recovery time, the fault's
 * headline figure (not on an oversold bar), or "stuck". 0 when there is
 * none. */
static int svg_note(lg_scenario s, const lg_cell *c, char *b, size_t len)
{
    int64_t ms = s == LG_SCEN_CRASH           ? c->recovery_ms
                 : s == LG_SCEN_KILL          ? c->freed_ms
                 : s == LG_SCEN_REDIS_RESTART ? c->reconnect_ms
                 : s == LG_SCEN_REDIS_PAUSE   ? c->failfast_ms
                                        : -1;
    if (!strcmp(c->outcome, "stuck"))
        snprintf(b, len, "stuck");
    else if (ms >= 0 && c->oversold == 0)
        snprintf(b, len, "%lldms", (long long)ms);
    else
        return 0;
    return 1;
}

/* Grouped bars: one group per scenario, one bar per mode, height =
 * sold / stock (the dashed line is the stock); red = oversold, green =
 * exactly the stock, grey = nothing sold (stuck / blocks), orange = other. */
static int write_svg(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int nscen = 0;
    double maxratio = 2.0;
    for (lg_scenario s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        nscen++;
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (c->ran && c->stock > 0 && (double)c->sold / (double)c->stock > maxratio)
                maxratio = (double)c->sold / (double)c->stock;
        }
    }
    if (maxratio > 12)
        maxratio = 12; /* taller bars are clipped, their label says the truth */
    /* a bar and its gap fit a "1000/1000" label at 9 px */
    const int left = 60, top = 60, ph = 320, bw = 34, gap = 14, gw = LG_NMODES * (bw + gap) + 24;
    int width = left + (nscen ? nscen : 1) * gw + 20, height = top + ph + 110;
    if (width < 780)
        width = 780; /* the subtitle */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">miaosha: sold vs "
               "stock per lock mode and scenario%s</text>\n",
            left, cfg->quick ? " (quick)" : "");
    fprintf(f, "<text x=\"%d\" y=\"42\" fill=\"#555\">bar = sold / stock; dashed line = stock; "
               "red = oversold, green = exact, grey = nothing sold, orange = other</text>\n",
            left);
    /* axis */
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top, left,
            top + ph);
    for (int t = 0; t <= (int)maxratio; t++) {
        double y = top + ph - ph * (double)t / maxratio;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%dx</text>\n", left - 6, y + 4, t);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left,
                y, width - 20, y);
    }
    double ystock = top + ph - ph * 1.0 / maxratio;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" "
               "stroke-dasharray=\"6,4\"/>\n",
            left, ystock, width - 20, ystock);
    int g = 0;
    for (lg_scenario s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        int gx = left + 10 + g * gw;
        int bi = 0;
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            if (!cfg->mode_on[m])
                continue;
            const lg_cell *c = &r->cell[s][m];
            int x = gx + bi * (bw + gap);
            bi++;
            if (!c->ran)
                continue;
            double ratio = c->stock > 0 ? (double)c->sold / (double)c->stock : 0;
            double shown = ratio > maxratio ? maxratio : ratio;
            double h = ph * shown / maxratio;
            const char *color = c->oversold > 0        ? "#d62728"
                                : c->sold == 0         ? "#9e9e9e"
                                : c->sold == c->stock  ? "#2ca02c"
                                                       : "#ff7f0e";
            if (h < 2)
                h = 2;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\">"
                       "<title>%s / %s: ",
                    x, top + ph - h, bw, h, color, lg_scen_names[s], lg_mode_names[m]);
            xml_text(f, c->reason);
            fputs("</title></rect>\n", f);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%lld/%lld"
                       "</text>\n",
                    x + bw / 2, top + ph - h - 4, (long long)c->sold, (long long)c->stock);
            char b[32];
            if (svg_note(s, c, b, sizeof b)) {
                fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\" "
                           "fill=\"#333\">%s</text>\n",
                        x + bw / 2, top + ph - h - 15, b);
            }
            fprintf(f, "<text transform=\"translate(%d,%d) rotate(45)\" font-size=\"10\">%s%s"
                       "</text>\n",
                    x + 8, top + ph + 8, lg_mode_names[m], c->pass ? "" : " (DIFF)");
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n",
                gx + (LG_NMODES * (bw + gap)) / 2, top + ph + 90, lg_scen_names[s]);
        if (svg_note_caption(s))
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"9\" "
                       "fill=\"#555\">%s</text>\n",
                    gx + (LG_NMODES * (bw + gap)) / 2, top + ph + 103, svg_note_caption(s));
        g++;
    }
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *r, char *err,
                          size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/matrix.md", cfg->out_dir);
    if (write_md(p, cfg, r) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.csv", cfg->out_dir);
    if (write_csv(p, r) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.svg", cfg->out_dir);
    if (write_svg(p, cfg, r) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", p, strerror(errno));
    return -1;
}
