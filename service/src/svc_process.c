/* svc_process.c — process_* and miaosha_build_info (svc_process.h). */
#include "svc_process.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "svc_build_info.h" /* generated before every build: SVC_REVISION */

#if defined(__clang__)
#define SVC_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define SVC_COMPILER "gcc " __VERSION__
#else
#define SVC_COMPILER "unknown"
#endif

static double start_time_s = -1; /* set once by svc_process_init */

/* The process's start as the kernel counts it: field 22 of
 * /proc/self/stat (clock ticks after boot) plus btime of /proc/stat. */
static double read_start_time(void)
{
    char buf[1024];
    double t = -1;
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* comm (field 2) may hold spaces and parentheses: count after its
     * last ')' */
    char *p = strrchr(buf, ')');
    unsigned long long ticks = 0;
    int field = 2;
    for (; p != NULL && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (p == NULL || field != 22 || sscanf(p, "%llu", &ticks) != 1)
        return -1;
    f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    char line[256];
    unsigned long long btime = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (btime > 0 && hz > 0)
        t = (double)btime + (double)ticks / (double)hz;
    return t;
}

void svc_process_init(void)
{
    start_time_s = read_start_time();
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* One series: its HELP, its TYPE and its value with decimals digits after
 * the point. */
static void series(svc_buf *b, const char *name, const char *help, const char *type, double v,
                   int decimals)
{
    svc_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.*f\n", name, help, name, type, name,
                   decimals, v);
}

void svc_process_render(svc_buf *b, const char *version)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        series(b, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
               "counter",
               (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
               6);
    unsigned long long vm_pages = 0, rss_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    int got = f != NULL && fscanf(f, "%llu %llu", &vm_pages, &rss_pages) == 2;
    if (f != NULL)
        fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    if (got && page > 0) {
        series(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge",
               (double)vm_pages * (double)page, 0);
        series(b, "process_resident_memory_bytes", "Resident memory size in bytes.", "gauge",
               (double)rss_pages * (double)page, 0);
    }
    int fds = open_fds();
    if (fds >= 0)
        series(b, "process_open_fds", "Number of open file descriptors.", "gauge", fds, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        series(b, "process_max_fds", "Maximum number of open file descriptors.", "gauge",
               (double)rl.rlim_cur, 0);
    if (start_time_s > 0)
        series(b, "process_start_time_seconds",
               "Start time of the process since unix epoch in seconds.", "gauge", start_time_s, 2);
    /* The label values are the build's own ([0-9A-Za-z.+ -]): nothing to
     * escape. */
    svc_buf_printf(b,
                   "# HELP miaosha_build_info A metric with a constant '1' value labeled by the "
                   "version, the git revision and the compiler miaosha-server was built from.\n"
                   "# TYPE miaosha_build_info gauge\n"
                   "miaosha_build_info{version=\"%s\",revision=\"%s\",compiler=\"%s\"} 1\n",
                   version, SVC_REVISION, SVC_COMPILER);
}
