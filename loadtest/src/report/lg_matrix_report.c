/* lg_matrix_report.c — see lg_matrix_report.h. Every sentence exists in
 * English and in Chinese; the English output is the reference the tests
 * and the README's table were written against, so the Chinese one changes
 * words and never the layout: the same cells, columns and colours. */
#include "lg_matrix_report.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

/* The words of one language. Mode names and the CSV are never translated
 * (they are what the URLs and programs use). */
typedef struct words {
    const char *scen_short[LG_NSCEN]; /* the text table, the md cells, SVG tooltips; NULL:
                                         the command line's names (lg_scen_names) */
    const char *scen_title[LG_NSCEN]; /* the md table's header (and the Chinese SVG's labels) */
    const char *ok, *diff;            /* a cell's verdict */
    const char *freed, *back;         /* fault headlines: lock freed after, serving again after */
    const char *mode;
} words;

static const words words_en = {
    {NULL},
    {"race (1 instance)", "multi-instance (3)", "slow holder (work > lease)", "crash while holding",
     "nested (reenter=2)", "one buy per user (5 clicks)", "client timeout retried",
     "the race in 4 stock buckets", "instance kill -9 (3)", "Redis restart (AOF)",
     "Redis paused 2 s", "Sentinel failover (lock lost)",
     "SENTINEL FAILOVER (200s lost: wait 1 / all)",
     "master paused, resumed mid-failover (200s lost: wait 1 / all)",
     "Redis Cluster master killed (lock lost)", "slot resharded under a burst",
     "2, then 3 of 5 lock masters down", "lock master restarted empty",
     "same, redlock.restart_delay_ms"},
    "ok",
    "DIFF",
    "freed",
    "back",
    "mode"};

/* The vocabulary of README.zh.md: 超卖, 准确, 卡死, 恢复, 阻塞, 租约 ... */
static const words words_zh = {
    {"并发竞争", "多实例", "慢业务", "持锁崩溃", "嵌套加锁", "一人一单", "超时重试", "库存分桶",
     "实例 kill -9", "Redis 重启", "Redis 暂停", "哨兵故障转移", "手动故障转移", "主库暂停后恢复",
     "集群故障转移", "重新分片", "锁主节点宕机", "锁主节点重启", "锁主节点延迟重启"},
    {"并发竞争（1 个实例）", "多实例（3 个）", "慢业务（执行 > 租约）", "持锁时崩溃",
     "嵌套加锁（reenter=2）", "一人一单（每人连点 5 次）", "客户端超时后重试",
     "库存分 4 桶时的并发竞争", "实例被 kill -9（3 个实例）", "Redis 重启（AOF）",
     "Redis 暂停 2 秒", "哨兵故障转移（锁丢失）",
     "SENTINEL FAILOVER（确认后丢单：等 1 个 / 全部副本）",
     "主库暂停、故障转移中恢复（确认后丢单：等 1 个 / 全部副本）", "集群主节点被杀（锁丢失）",
     "抢购中把槽位迁到另一个主节点", "5 个锁主节点先宕 2 个、再宕 3 个", "锁主节点无持久化重启",
     "同上，加 redlock.restart_delay_ms"},
    "符合",
    "不符",
    "释放",
    "重连",
    "模式"};

static const words *words_of(lg_report_lang lang)
{
    return lang == LG_LANG_ZH ? &words_zh : &words_en;
}

/* A scenario's short name: English uses the command line's. */
static const char *scen_short(const words *w, lg_scenario s)
{
    return w->scen_short[s] ? w->scen_short[s] : lg_scen_names[s];
}

/* A measured or expected outcome in the report's language; unknown words
 * stay as they are. */
static const char *outcome_word(lg_report_lang lang, const char *o)
{
    static const char *const zh[][2] = {{"oversell", "超卖"},
                                        {"exact", "准确"},
                                        {"stuck", "卡死"},
                                        {"recovers", "恢复"},
                                        {"sells", "正常售出"},
                                        {"blocks", "阻塞"},
                                        {"safe", "安全"},
                                        {"late", "超时"},
                                        {"missed", "错过"},
                                        {"short", "未售罄"},
                                        {"unsafe", "不安全"},
                                        {"error", "出错"},
                                        {"one-each", "每人一单"},
                                        {"duplicates", "重复购买"},
                                        {"once", "只买一次"},
                                        {"twice", "重复下单"},
                                        {"lost-at-1", "等 1 个副本时丢单"},
                                        {"lost-at-all", "等全部副本仍丢单"},
                                        {"kept", "未丢单"}};
    if (lang != LG_LANG_ZH)
        return o;
    for (size_t i = 0; i < sizeof zh / sizeof zh[0]; i++)
        if (!strcmp(o, zh[i][0]))
            return zh[i][1];
    return o;
}

/* An expected outcome, which may list alternatives ("safe|stuck"): English
 * keeps the list as the runner wrote it, Chinese says 安全或卡死. */
static const char *expected_text(lg_report_lang lang, const char *e, char *buf, size_t len)
{
    if (lang != LG_LANG_ZH)
        return e;
    size_t used = 0;
    buf[0] = '\0';
    for (const char *p = e; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char one[24];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        int w = snprintf(buf + used, len - used, "%s%s", used ? "或" : "", outcome_word(lang, one));
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
        p += n + (bar != NULL);
    }
    return buf;
}

int lg_report_lang_parse(const char *s, lg_report_lang *out)
{
    if (s && !strcmp(s, "en"))
        *out = LG_LANG_EN;
    else if (s && !strcmp(s, "zh"))
        *out = LG_LANG_ZH;
    else
        return -1;
    return 0;
}

/* East Asian Wide and Fullwidth ranges (Unicode's EastAsianWidth W and F,
 * the blocks a report can contain), as a terminal draws them: 2 columns. */
static int wide(unsigned long cp)
{
    return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0x303E) ||
           (cp >= 0x3041 && cp <= 0x33FF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xA000 && cp <= 0xA4CF) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
           (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x20000 && cp <= 0x3FFFD);
}

size_t lg_text_width(const char *s)
{
    size_t w = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned long cp;
        int n;
        if (*p < 0x80) {
            cp = *p;
            n = 1;
        } else if ((*p & 0xE0) == 0xC0) {
            cp = *p & 0x1F;
            n = 2;
        } else if ((*p & 0xF0) == 0xE0) {
            cp = *p & 0x0F;
            n = 3;
        } else if ((*p & 0xF8) == 0xF0) {
            cp = *p & 0x07;
            n = 4;
        } else { /* a stray continuation or invalid byte: one column, as a replacement char */
            w++;
            p++;
            continue;
        }
        int k = 1;
        for (; k < n && (p[k] & 0xC0) == 0x80; k++)
            cp = cp << 6 | (p[k] & 0x3F);
        if (k < n) { /* a truncated sequence: one column per byte, as above */
            w += (size_t)k;
            p += k;
            continue;
        }
        w += wide(cp) ? 2 : 1;
        p += n;
    }
    return w;
}

/* s, then spaces up to width terminal columns (printf's %-*s counts bytes,
 * which misaligns every CJK character); never truncates. */
static void put_left(FILE *o, const char *s, size_t width)
{
    fputs(s, o);
    for (size_t w = lg_text_width(s); w < width; w++)
        fputc(' ', o);
}

/* Spaces, then s, ending at width terminal columns. */
static void put_right(FILE *o, const char *s, size_t width)
{
    for (size_t w = lg_text_width(s); w < width; w++)
        fputc(' ', o);
    fputs(s, o);
}

/* One heading row of the text table: labels separated by one space, each
 * padded to its column; the last one unpadded. */
typedef struct col {
    const char *label;
    size_t width;
    int right;
} col;

static void put_header(FILE *o, const col *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(' ', o);
        if (i + 1 == n)
            fputs(c[i].label, o);
        else if (c[i].right)
            put_right(o, c[i].label, c[i].width);
        else
            put_left(o, c[i].label, c[i].width);
    }
}

/* The scenarios whose cells carry the fault timings (fault_ms .. resume_ms). */
static int timed(lg_scenario s)
{
    return lg_scen_is_fault(s) || s == LG_SCEN_FAILOVER || lg_scen_is_acked(s) ||
           s == LG_SCEN_CLUSTER_FAILOVER;
}

static int has_timed(const lg_matrix_cfg *cfg)
{
    return lg_matrix_has_faults(cfg) || cfg->scen_on[LG_SCEN_FAILOVER] ||
           cfg->scen_on[LG_SCEN_MANUAL_FAILOVER] || cfg->scen_on[LG_SCEN_RESUME_FAILOVER] ||
           cfg->scen_on[LG_SCEN_CLUSTER_FAILOVER];
}

static void cell_short(lg_report_lang lang, lg_scenario s, const lg_cell *c, char *buf, size_t len)
{
    const words *w = words_of(lang);
    if (!c->ran) {
        snprintf(buf, len, "-");
        return;
    }
    const char *verdict = c->pass ? w->ok : w->diff;
    const char *outcome = outcome_word(lang, c->outcome);
    if (lg_scen_is_fault(s) && (!strcmp(c->outcome, "safe") || !strcmp(c->outcome, "late"))) {
        /* the fault's headline figure; sold/stock is the stock by definition.
         * -1 is "not measured" (lua has no lock to free; a probe that got
         * no 503): "-", as the failover tables print n/a */
        const char *what = s == LG_SCEN_KILL            ? w->freed
                           : s == LG_SCEN_REDIS_RESTART ? w->back
                                                        : "503";
        int64_t ms = s == LG_SCEN_KILL            ? c->freed_ms
                     : s == LG_SCEN_REDIS_RESTART ? c->reconnect_ms
                                                  : c->failfast_ms;
        if (ms >= 0)
            snprintf(buf, len, "%s %s %s %lldms", verdict, outcome, what, (long long)ms);
        else
            snprintf(buf, len, "%s %s %s -", verdict, outcome, what);
        return;
    }
    if (lg_scen_is_acked(s) && strcmp(c->outcome, "error") != 0) {
        /* acknowledged orders lost with wait_replicas=1 / with all */
        snprintf(buf, len, "%s %s %llu/%lld", verdict, outcome, (unsigned long long)c->acked_lost,
                 (long long)c->acked_lost_all);
        return;
    }
    if ((s == LG_SCEN_FAILOVER || s == LG_SCEN_CLUSTER_FAILOVER) && c->fault_ms >= 0) {
        /* sold/stock, and how long the failover took */
        snprintf(buf, len, "%s %s %lld/%lld %lldms", verdict, outcome, (long long)c->sold,
                 (long long)c->stock, (long long)c->fault_ms);
        return;
    }
    if (!strcmp(c->expected, "stuck") || !strcmp(c->expected, "recovers")) {
        if (c->recovery_ms >= 0)
            snprintf(buf, len, "%s %s %lldms", verdict, outcome, (long long)c->recovery_ms);
        else
            snprintf(buf, len, "%s %s", verdict, outcome);
        return;
    }
    snprintf(buf, len, "%s %s %lld/%lld", verdict, outcome, (long long)c->sold,
             (long long)c->stock);
}

void lg_report_cell_text(lg_report_lang lang, lg_scenario s, const lg_cell *c, char *buf,
                         size_t len)
{
    cell_short(lang, s, c, buf, len);
}

const char *lg_report_scen_title(lg_report_lang lang, lg_scenario s)
{
    return words_of(lang)->scen_title[s];
}

/* A fault measurement in ms, "-" when not measured. */
static void fmt_ms(char *buf, size_t len, int64_t ms)
{
    if (ms < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%lld", (long long)ms);
}

void lg_matrix_print(FILE *o, const lg_matrix_cfg *cfg, const lg_matrix_result *r,
                     lg_report_lang lang)
{
    const words *w = words_of(lang);
    const int zh = lang == LG_LANG_ZH;
    if (zh)
        fprintf(o, "\nmiaosha 超卖矩阵%s — redis %s — %.1f 秒\n", cfg->quick ? "（快速）" : "",
                r->redis, r->elapsed_s);
    else
        fprintf(o, "\nmiaosha oversell matrix%s — redis %s — %.1f s\n",
                cfg->quick ? " (quick)" : "", r->redis, r->elapsed_s);
    if (cfg->target && cfg->scen_on[LG_SCEN_MULTI])
        fprintf(o, zh ? "多实例场景经由 %s\n" : "multi-instance scenario through %s\n",
                cfg->target);
    put_left(o, w->mode, 10);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s]) {
            fputs(" | ", o);
            put_left(o, scen_short(w, s), 24);
        }
    fputc('\n', o);
    for (lg_mode m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        put_left(o, lg_mode_names[m], 10);
        for (lg_scenario s = 0; s < LG_NSCEN; s++) {
            if (!cfg->scen_on[s])
                continue;
            char b[64];
            cell_short(lang, s, &r->cell[s][m], b, sizeof b);
            fputs(" | ", o);
            put_left(o, b, 24);
        }
        fputc('\n', o);
    }
    fputs(zh ? "（格子：符合/不符 = 是否与预期一致，实测结果，售出/库存或恢复耗时）\n\n"
             : "(cells: ok/DIFF vs expected, measured outcome, sold/stock or recovery time)\n\n",
          o);
    static const col cells_en[] = {
        {"scenario", 13, 0}, {"mode", 9, 0},        {"expected", 10, 0},   {"measured", 8, 0},
        {"oversold", 8, 1},  {"undersold", 9, 1},   {"lock_busy", 9, 1},   {"lock_lost", 9, 1},
        {"del_other", 9, 1}, {"acked_lost", 10, 1}, {"over_stock", 10, 1}, {"reason", 0, 0}};
    static const col cells_zh[] = {
        {"场景", 13, 0},    {"模式", 9, 0},        {"预期", 10, 0},     {"实测", 8, 0},
        {"超卖", 8, 1},     {"少卖", 9, 1},        {"锁忙", 9, 1},      {"锁丢失", 9, 1},
        {"误删他锁", 9, 1}, {"确认后丢单", 10, 1}, {"超出库存", 10, 1}, {"原因（英文）", 0, 0}};
    put_header(o, zh ? cells_zh : cells_en, sizeof cells_en / sizeof cells_en[0]);
    fputc('\n', o);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            char e[64];
            put_left(o, scen_short(w, s), 13);
            fputc(' ', o);
            put_left(o, lg_mode_names[m], 9);
            fputc(' ', o);
            put_left(o, expected_text(lang, c->expected, e, sizeof e), 10);
            fputc(' ', o);
            put_left(o, outcome_word(lang, c->outcome), 8);
            fprintf(o, " %8lld %9lld %9llu %9llu %9llu %10llu %10llu %s\n", (long long)c->oversold,
                    (long long)c->undersold, (unsigned long long)c->lock_busy,
                    (unsigned long long)c->lock_lost, (unsigned long long)c->deleted_other_lock,
                    (unsigned long long)c->acked_lost, (unsigned long long)c->acked_over_stock,
                    c->reason);
        }
    if (has_timed(cfg)) {
        static const col faults_en[] = {
            {"fault", 13, 0},   {"mode", 9, 0},         {"503s", 6, 0},     {"unacked", 7, 1},
            {"fault_ms", 8, 1}, {"freed_ms", 8, 1},     {"failfast", 8, 1}, {"reconnect", 9, 1},
            {"resume", 6, 1},   {"(ms; - = n/a)", 0, 0}};
        static const col faults_zh[] = {
            {"故障", 13, 0},    {"模式", 9, 0},
            {"503 次", 6, 1},   {"未确认", 7, 1},
            {"故障时长", 8, 1}, {"锁释放", 8, 1},
            {"503耗时", 8, 1},  {"重连", 9, 1},
            {"恢复", 6, 1},     {"（毫秒；- = 不适用；恢复 = 故障结束后第一笔成交）", 0, 0}};
        fputc('\n', o);
        put_header(o, zh ? faults_zh : faults_en, sizeof faults_en / sizeof faults_en[0]);
        fputc('\n', o);
        for (lg_scenario s = LG_SCEN_KILL; s < LG_NSCEN; s++)
            for (lg_mode m = 0; m < LG_NMODES; m++) {
                const lg_cell *c = &r->cell[s][m];
                if (!c->ran)
                    continue;
                char v[5][24];
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms, c->reconnect_ms,
                                       c->resume_ms};
                for (int k = 0; k < 5; k++)
                    fmt_ms(v[k], sizeof v[k], ms[k]);
                put_left(o, scen_short(w, s), 13);
                fputc(' ', o);
                put_left(o, lg_mode_names[m], 9);
                fprintf(o, " %6llu %7llu %8s %8s %8s %9s %6s\n", (unsigned long long)c->n503,
                        (unsigned long long)c->unacked, v[0], v[1], v[2], v[3], v[4]);
            }
    }
    if (zh)
        fprintf(o, "\n%d 个格子与预期不符\n", r->mismatches);
    else
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

static int write_md(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r,
                    lg_report_lang lang)
{
    const words *w = words_of(lang);
    const int zh = lang == LG_LANG_ZH;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    if (zh) {
        fprintf(f, "# miaosha 超卖矩阵%s\n\n", cfg->quick ? "（快速）" : "");
        fprintf(f,
                "由 `miaosha-load matrix` 对真实的 `miaosha-server` 进程实测，Redis 为 %s，"
                "用时 %.1f 秒。每个格子都是测出来的，不是写死的；标为 **不符** 的格子，"
                "实测结果与预期不一致。\n\n",
                r->redis, r->elapsed_s);
    } else {
        fprintf(f, "# miaosha oversell matrix%s\n\n", cfg->quick ? " (quick)" : "");
        fprintf(f,
                "Measured by `miaosha-load matrix` in %.1f s against real `miaosha-server` "
                "processes on Redis %s. Every cell is a measurement; **DIFF** marks a cell "
                "whose outcome is not the expected one.\n\n",
                r->elapsed_s, r->redis);
    }
    if (cfg->target && cfg->scen_on[LG_SCEN_MULTI])
        fprintf(f,
                zh ? "多实例场景经由 `%s`（挡在多个实例前面的负载均衡器），"
                     "而不是矩阵自己启动的实例。\n\n"
                   : "The multi-instance scenario went through `%s` (a balancer in front "
                     "of the instances), not through instances of the matrix's own.\n\n",
                cfg->target);
    fprintf(f, "| %s |", w->mode);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fprintf(f, " %s |",
                    s == LG_SCEN_MULTI && cfg->target
                        ? (zh ? "多实例（经 --target）" : "multi-instance (via --target)")
                        : w->scen_title[s]);
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
            cell_short(lang, s, c, b, sizeof b);
            int bad = !strcmp(c->outcome, "oversell") || !strcmp(c->outcome, "stuck") ||
                      !strcmp(c->outcome, "blocks");
            fprintf(f, " %s%s%s |", bad ? "**" : "", b, bad ? "**" : "");
        }
        fputc('\n', f);
    }
    if (zh)
        fputs("\n## 每个格子的明细\n\n原因一栏由矩阵按英文写出。\n\n"
              "| 场景 | 模式 | 预期 | 实测 | 售出 / 库存 | 超卖 | 少卖 | 锁忙（429） | 锁丢失 | "
              "误删他人的锁 | 确认后丢单 | 超出库存的确认 | 恢复耗时 ms | 原因 |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
              f);
    else
        fputs("\n## Cells\n\n| scenario | mode | expected | measured | sold / stock | oversold | "
              "undersold | lock_busy | lock_lost | deleted another's lock | acked_lost | "
              "acked_over_stock | recovery ms | reason |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
              f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            char e[64];
            const char *diff = zh ? " **不符**" : " **DIFF**";
            fprintf(
                f,
                "| %s | %s | %s | %s%s | %lld / %lld | %lld | %lld | %llu | %llu | %llu | %llu | "
                "%llu | ",
                scen_short(w, s), lg_mode_names[m], expected_text(lang, c->expected, e, sizeof e),
                outcome_word(lang, c->outcome), c->pass ? "" : diff, (long long)c->sold,
                (long long)c->stock, (long long)c->oversold, (long long)c->undersold,
                (unsigned long long)c->lock_busy, (unsigned long long)c->lock_lost,
                (unsigned long long)c->deleted_other_lock, (unsigned long long)c->acked_lost,
                (unsigned long long)c->acked_over_stock);
            if (c->recovery_ms >= 0)
                fprintf(f, "%lld", (long long)c->recovery_ms);
            else if (c->stuck)
                fprintf(f, zh ? "卡死 > %lld" : "stuck > %lld", (long long)c->window_ms);
            fputs(" | ", f);
            md_text(f, c->reason);
            fputs(" |\n", f);
        }
    if (has_timed(cfg)) {
        if (zh)
            fputs("\n## 故障场景的格子\n\n时间单位为毫秒（— = 不适用），依次是：故障持续多久；"
                  "实例被杀后，死去的持锁者留下的锁过了多久才消失；Redis 不可用期间最慢的一次 "
                  "503；Redis 恢复后，所有实例多久之后不再返回 503；故障结束后的第一笔成交。\n\n"
                  "| 场景 | 模式 | 503 次数 | 未确认的订单 | 故障时长 | 锁释放 | 503 耗时 | "
                  "重连 | 下一笔成交 |\n|---|---|---|---|---|---|---|---|---|\n",
                  f);
        else
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
                fprintf(f, "| %s | %s | %llu | %llu |", scen_short(w, s), lg_mode_names[m],
                        (unsigned long long)c->n503, (unsigned long long)c->unacked);
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms, c->reconnect_ms,
                                       c->resume_ms};
                for (int k = 0; k < 5; k++) {
                    char v[24];
                    fmt_ms(v, sizeof v, ms[k]);
                    fprintf(f, " %s |", strcmp(v, "-") ? v : "—");
                }
                fputc('\n', f);
            }
    }
    if (zh)
        fprintf(f, "\n%d 个格子与预期不符。\n", r->mismatches);
    else
        fprintf(f, "\n%d cell(s) differ from the expected outcome.\n", r->mismatches);
    return fclose(f) == 0 ? 0 : -1;
}

/* One row per cell that ran; with several trials one per trial, with a
 * trial column (1..K) after mode. */
static int write_csv(const char *path, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int trials = r->ntrials > 1 ? r->ntrials : 1;
    fputs(trials > 1 ? "scenario,mode,trial," : "scenario,mode,", f);
    fputs("expected,measured,pass,stock,sold,stock_left,oversold,undersold,"
          "requests,ok,sold_out,lock_busy,errors,lock_lost,deleted_other_lock,duplicate_ids,"
          "missing_orders,acked_lost,acked_over_stock,stuck,"
          "recovery_ms,elapsed_s,redis_unavailable,unacknowledged,fault_ms,freed_ms,"
          "failfast_ms,reconnect_ms,resume_ms,acked_lost_all,acked_over_stock_all,late_writes,"
          "late_write_ms,reason\n",
          f);
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        for (lg_mode m = 0; m < LG_NMODES; m++)
            for (int k = 0; k < trials; k++) {
                const lg_cell *c = lg_matrix_trial(r, k, s, m);
                if (!c->ran)
                    continue;
                fprintf(f, "%s,%s,", lg_scen_names[s], lg_mode_names[m]);
                if (trials > 1)
                    fprintf(f, "%d,", k + 1);
                fprintf(f,
                        "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%llu,%llu,%llu,%llu,%llu,%llu,"
                        "%llu,%llu,%llu,%llu,%llu,%d,%lld,%.3f,",
                        c->expected, c->outcome, c->pass ? "true" : "false", (long long)c->stock,
                        (long long)c->sold, (long long)c->stock_left, (long long)c->oversold,
                        (long long)c->undersold, (unsigned long long)c->requests,
                        (unsigned long long)c->ok, (unsigned long long)c->sold_out,
                        (unsigned long long)c->lock_busy, (unsigned long long)c->errors,
                        (unsigned long long)c->lock_lost, (unsigned long long)c->deleted_other_lock,
                        (unsigned long long)c->dup, (unsigned long long)c->acked_lost,
                        (unsigned long long)c->acked_lost, (unsigned long long)c->acked_over_stock,
                        c->stuck, (long long)c->recovery_ms, c->elapsed_s);
                if (timed(s)) {
                    const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                           c->reconnect_ms, c->resume_ms};
                    fprintf(f, "%llu,%llu,", (unsigned long long)c->n503,
                            (unsigned long long)c->unacked);
                    for (int i = 0; i < 5; i++)
                        if (ms[i] >= 0)
                            fprintf(f, "%lld,", (long long)ms[i]);
                        else
                            fputc(',', f);
                } else {
                    fputs(",,,,,,,", f);
                }
                if (lg_scen_is_acked(s))
                    fprintf(f, "%lld,%lld,%lld,%lld,", (long long)c->acked_lost_all,
                            (long long)c->acked_over_stock_all, (long long)c->late_writes,
                            (long long)c->late_write_ms);
                else
                    fputs(",,,,", f);
                csv_field(f, c->reason);
                fputc('\n', f);
            }
    return fclose(f) == 0 ? 0 : -1;
}

/* What the small label above a bar measures, per scenario (shown under the
 * scenario's name). */
static const char *svg_note_caption(lg_report_lang lang, lg_scenario s)
{
    const int zh = lang == LG_LANG_ZH;
    switch (s) {
    case LG_SCEN_CRASH: return zh ? "标注：崩溃后第一笔成交" : "label: first sale after the crash";
    case LG_SCEN_KILL:
        return zh ? "标注：死去持锁者的锁在此后释放" : "label: dead holder's lock freed after";
    case LG_SCEN_REDIS_RESTART:
        return zh ? "标注：所有实例在此后恢复服务" : "label: all instances serve again after";
    case LG_SCEN_REDIS_PAUSE:
        return zh ? "标注：暂停期间 503 的耗时上限" : "label: 503 while paused within";
    case LG_SCEN_FAILOVER:
    case LG_SCEN_CLUSTER_FAILOVER: return zh ? "标注：故障转移耗时" : "label: the failover took";
    case LG_SCEN_MANUAL_FAILOVER:
    case LG_SCEN_RESUME_FAILOVER:
        return zh ? "标注：确认后丢单（等 1 个 / 全部副本）" : "label: 200s lost, wait 1 / all";
    default: return NULL;
    }
}

/* The small label above a bar: the crash's recovery time, the fault's
 * headline figure (not on an oversold bar), or "stuck". 0 when there is
 * none. */
static int svg_note(lg_report_lang lang, lg_scenario s, const lg_cell *c, char *b, size_t len)
{
    int64_t ms = s == LG_SCEN_CRASH                                       ? c->recovery_ms
                 : s == LG_SCEN_KILL                                      ? c->freed_ms
                 : s == LG_SCEN_REDIS_RESTART                             ? c->reconnect_ms
                 : s == LG_SCEN_REDIS_PAUSE                               ? c->failfast_ms
                 : s == LG_SCEN_FAILOVER || s == LG_SCEN_CLUSTER_FAILOVER ? c->fault_ms
                                                                          : -1;
    if (lg_scen_is_acked(s) && strcmp(c->outcome, "error") != 0)
        snprintf(b, len, "%llu/%lld", (unsigned long long)c->acked_lost,
                 (long long)c->acked_lost_all);
    else if (!strcmp(c->outcome, "stuck"))
        snprintf(b, len, "%s", outcome_word(lang, "stuck"));
    else if (ms >= 0 &&
             (c->oversold == 0 || s == LG_SCEN_FAILOVER || s == LG_SCEN_CLUSTER_FAILOVER))
        snprintf(b, len, "%lldms", (long long)ms);
    else
        return 0;
    return 1;
}

/* The SVG is a slide: a canvas of SVG_W x SVG_H (16:9) whatever the
 * selection, the scenario groups in a grid of at most four columns (rows
 * as few as fit), one bar per selected mode, a legend under them. Bar
 * height = sold / stock (the dashed line is the stock); red = oversold,
 * green = exactly the stock, grey = nothing sold (stuck / blocks), orange
 * = other. The Chinese one declares UTF-8 and names CJK fonts first: an
 * SVG viewer whose plain sans-serif has no CJK glyphs would draw boxes. */
#define SVG_W 1600
#define SVG_H 900

/* The legend under the grid: the colours, the dashed stock line, what the
 * labels above and under the bars mean. */
static void svg_legend(FILE *f, int zh, int y)
{
    static const char *const color[] = {"#d62728", "#2ca02c", "#9e9e9e", "#ff7f0e"};
    static const char *const en[] = {"oversold: sold more than the stock", "exact: sold the stock",
                                     "nothing sold (stuck, blocks)",
                                     "other (sold less than the stock)"};
    static const char *const cn[] = {"超卖：售出多于库存", "准确：恰好卖完库存",
                                     "一件没卖出（卡死、阻塞）", "其他（售出少于库存）"};
    int x = 70;
    for (int i = 0; i < 4; i++) {
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"18\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%s</text>\n",
                x, y - 11, color[i], x + 24, y, zh ? cn[i] : en[i]);
        x += zh ? 250 : 290;
    }
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\" "
            "stroke-dasharray=\"6,4\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
            x, y - 5, x + 30, y - 5, x + 36, y, zh ? "库存" : "the stock");
    fprintf(f, "<text x=\"70\" y=\"%d\" fill=\"#333\">%s</text>\n", y + 24,
            zh ? "柱上的 12/10 = 售出 / 库存；其上的毫秒数见各场景名下的标注；模式名后的"
                 "“（不符）”= 实测结果与预期（README.zh.md 的表）不一致，没有标记即符合预期"
               : "12/10 above a bar = sold / stock; a time in ms above it is what the caption "
                 "under the scenario says; \"(DIFF)\" after a mode = the measured outcome is not "
                 "the expected one (README.md's table); no mark = as expected");
}

static int write_svg(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r,
                     lg_report_lang lang)
{
    const words *w = words_of(lang);
    const int zh = lang == LG_LANG_ZH;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int nscen = 0, nmodes = 0;
    double maxratio = 2.0;
    for (lg_mode m = 0; m < LG_NMODES; m++)
        nmodes += cfg->mode_on[m] != 0;
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
    if (nmodes < 1)
        nmodes = 1;
    int rows = nscen > 4 ? (nscen + 3) / 4 : 1;
    int cols = nscen > 4 ? (nscen + rows - 1) / rows : (nscen ? nscen : 1);
    /* the grid: a row is the labels above the bars, the plot, then the
     * rotated mode names, the scenario's name and its caption */
    const int left = 70, right = 20, top = 64, legend = 74, above = 30, below = 100;
    double gw = (double)(SVG_W - left - right) / cols;
    double rowh = (double)(SVG_H - top - legend) / rows;
    double ph = rowh - above - below;
    double slot = (gw - 24) / nmodes, bw = slot * 0.7 > 60 ? 60 : slot * 0.7;
    int small = slot < 56; /* "1000/1000" and "1005ms" at 9 px instead of 11 */
    if (zh)
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"%s\" font-size=\"13\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H,
            zh ? "'Noto Sans CJK SC', 'Source Han Sans SC', 'WenQuanYi Micro Hei', "
                 "'PingFang SC', 'Microsoft YaHei', sans-serif"
               : "sans-serif");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    if (zh)
        fprintf(f,
                "<text x=\"%d\" y=\"38\" font-size=\"24\" font-weight=\"bold\">miaosha："
                "各锁模式在各场景下的售出量与库存%s</text>\n",
                left, cfg->quick ? "（快速）" : "");
    else
        fprintf(f,
                "<text x=\"%d\" y=\"38\" font-size=\"24\" font-weight=\"bold\">miaosha: sold "
                "vs stock per lock mode and scenario%s</text>\n",
                left, cfg->quick ? " (quick)" : "");
    int g = 0;
    for (lg_scenario s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        int grow = g / cols, gcol = g % cols;
        double y0 = top + grow * rowh + above, ybase = y0 + ph;
        double gx = left + gcol * gw + 12;
        if (gcol == 0) {
            /* this row's axis, grid and stock line */
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\"/>\n",
                    left, y0, left, ybase);
            int step = maxratio > 6 ? 2 : 1;
            for (int t = 0; t <= (int)maxratio; t += step) {
                double y = ybase - ph * (double)t / maxratio;
                fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%dx</text>\n", left - 6,
                        y + 4, t);
                fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                        left, y, SVG_W - right, y);
            }
            double ystock = ybase - ph / maxratio;
            fprintf(f,
                    "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" "
                    "stroke-dasharray=\"6,4\"/>\n",
                    left, ystock, SVG_W - right, ystock);
        }
        int bi = 0;
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            if (!cfg->mode_on[m])
                continue;
            const lg_cell *c = &r->cell[s][m];
            double x = gx + bi * slot + (slot - bw) / 2; /* centred in its slot */
            bi++;
            if (!c->ran)
                continue;
            double ratio = c->stock > 0 ? (double)c->sold / (double)c->stock : 0;
            double shown = ratio > maxratio ? maxratio : ratio;
            double h = ph * shown / maxratio;
            const char *color = c->oversold > 0       ? "#d62728"
                                : c->sold == 0        ? "#9e9e9e"
                                : c->sold == c->stock ? "#2ca02c"
                                                      : "#ff7f0e";
            if (h < 2)
                h = 2;
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                    "<title>%s / %s: ",
                    x, ybase - h, bw, h, color, scen_short(w, s), lg_mode_names[m]);
            xml_text(f, c->reason);
            fputs("</title></rect>\n", f);
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"%d\">%lld/%lld"
                    "</text>\n",
                    x + bw / 2, ybase - h - 4, small ? 9 : 11, (long long)c->sold,
                    (long long)c->stock);
            char b[32];
            if (svg_note(lang, s, c, b, sizeof b)) {
                fprintf(f,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"%d\" "
                        "fill=\"#333\">%s</text>\n",
                        x + bw / 2, ybase - h - (small ? 15 : 17), small ? 9 : 11, b);
            }
            fprintf(f,
                    "<text transform=\"translate(%.1f,%.1f) rotate(45)\" font-size=\"11\">%s%s"
                    "</text>\n",
                    x + bw / 2 - 3, ybase + 10, lg_mode_names[m],
                    c->pass ? ""
                    : zh    ? "（不符）"
                            : " (DIFF)");
        }
        double cx = gx + nmodes * slot / 2;
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\" "
                "font-size=\"14\">%s</text>\n",
                cx, ybase + below - 22, zh ? w->scen_title[s] : lg_scen_names[s]);
        if (svg_note_caption(lang, s))
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"11\" "
                    "fill=\"#555\">%s</text>\n",
                    cx, ybase + below - 7, svg_note_caption(lang, s));
        g++;
    }
    svg_legend(f, zh, SVG_H - legend + 30);
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *r, lg_report_lang lang,
                          char *err, size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/matrix.md", cfg->out_dir);
    if (write_md(p, cfg, r, lang) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.csv", cfg->out_dir);
    if (write_csv(p, r) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.svg", cfg->out_dir);
    if (write_svg(p, cfg, r, lang) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", p, strerror(errno));
    return -1;
}
