/* svc_test.c — see svc_test.h. */
#include "svc_test.h"

#include "pk_http.h"
#include "pk_proc.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

/* Every server's directory (its log), removed when the test program exits
 * with no failed check, kept for reading otherwise. Not at svc_stop: tests
 * read a stopped server's log. */
static pthread_mutex_t dirs_mu = PTHREAD_MUTEX_INITIALIZER;
static char (*dirs)[sizeof((svc_server *)0)->dir];
static size_t ndirs, dirs_cap;

static void remove_dirs(void)
{
    if (tu_failed > 0) {
        if (ndirs > 0)
            fprintf(stderr, "svc_test: kept %zu server directories (%s ...) for their logs\n",
                    ndirs, dirs[0]);
        return;
    }
    for (size_t i = 0; i < ndirs; i++) {
        DIR *d = opendir(dirs[i]);
        struct dirent *e;
        char path[sizeof dirs[i] + 256];
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dirs[i], e->d_name);
            unlink(path);
        }
        if (d != NULL)
            closedir(d);
        rmdir(dirs[i]);
    }
}

static void curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    atexit(remove_dirs);
}

static void remember_dir(const char *dir)
{
    pthread_mutex_lock(&dirs_mu);
    if (ndirs == dirs_cap) {
        size_t cap = dirs_cap ? dirs_cap * 2 : 16;
        void *p = realloc(dirs, cap * sizeof dirs[0]);
        if (p != NULL) {
            dirs = p;
            dirs_cap = cap;
        }
    }
    if (ndirs < dirs_cap)
        snprintf(dirs[ndirs++], sizeof dirs[0], "%s", dir);
    pthread_mutex_unlock(&dirs_mu);
}

int svc_run_exit(const char *const *args, int64_t limit_ms, char *out, size_t len)
{
    char path[] = "/tmp/miaosha-run-out-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(out, len, "mkstemp: %s", strerror(errno));
        return -1;
    }
    const char *argv[32];
    int n = 0;
    argv[n++] = SVC_TEST_SERVER;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char err[256];
    pid_t pid = pk_spawn(argv, path, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    int status = 0, rc = -1;
    if (pid > 0 && pk_wait_status(pid, (int)limit_ms, &status))
        rc = WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    else if (pid > 0)
        pk_kill(pid);
    ssize_t got = pid > 0 ? pread(fd, out, len - 1, 0) : 0;
    out[got > 0 ? got : 0] = '\0';
    if (pid < 0)
        snprintf(out, len, "%s", err);
    close(fd);
    unlink(path);
    return rc;
}

void svc_dump_log(const svc_server *s)
{
    FILE *f = fopen(s->log, "r");
    char line[1024];
    if (f == NULL)
        return;
    fprintf(stderr, "---- server log %s ----\n", s->log);
    while (fgets(line, sizeof line, f))
        fputs(line, stderr);
    fprintf(stderr, "---- end of log ----\n");
    fclose(f);
}

int svc_log_has(const svc_server *s, const char *needle)
{
    FILE *f = fopen(s->log, "r");
    char line[2048];
    int found = 0;
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return -2;
}

int svc_start(svc_server *s, int redis_port, const char *const *extra)
{
    char redis[64];
    const char *argv[80];
    int n = 0;
    pthread_once(&curl_once, curl_init);
    memset(s, 0, sizeof *s);
    s->redis_port = redis_port;
    snprintf(s->dir, sizeof s->dir, "/tmp/miaosha-svc-test-XXXXXX");
    if (mkdtemp(s->dir) == NULL)
        return -1;
    remember_dir(s->dir);
    snprintf(s->log, sizeof s->log, "%s/server.log", s->dir);
    snprintf(redis, sizeof redis, "127.0.0.1:%d", redis_port);
    /* Port 0: the kernel picks a free port and the server logs it, so the
     * test talks to its own child, never to another test's server. */
    argv[n++] = SVC_TEST_SERVER;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--redis";
    argv[n++] = redis;
    for (int i = 0; extra && extra[i] && n < 78; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    char err[256];
    pid_t pid = pk_spawn(argv, s->log, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    if (pid < 0) {
        fprintf(stderr, "svc_start: %s\n", err);
        return -1;
    }
    s->pid = pid;
    /* Any status counts: a test may start it with its Redis down (503). */
    pk_http_wait_opts w;
    pk_http_wait_opts_init(&w);
    w.want_status = 0;
    w.port_log = s->log;
    int status = 0;
    switch (pk_http_wait_healthy(pid, &s->port, &w, &status)) {
    case PK_HTTP_HEALTHY: return 0;
    case PK_HTTP_EXITED:
        s->pid = 0;
        fprintf(stderr, "svc_start: server exited with status %d\n", exit_code(status));
        break;
    default:
        pk_kill(s->pid);
        s->pid = 0;
        fprintf(stderr, "svc_start: server did not answer within 10 s\n");
        break;
    }
    svc_dump_log(s);
    return -1;
}

/* A TSan build's server reports a data race on its stderr (the log) and
 * carries on, so a test that does not look at the exit status would miss
 * it: every exit the tests wait for counts one as a failure. */
static void check_sanitizer(const svc_server *s)
{
    if (svc_log_has(s, "WARNING: ThreadSanitizer")) {
        TU_CHECK(0, "the server's log holds a ThreadSanitizer report");
        svc_dump_log(s);
    }
}

int svc_wait_exit(svc_server *s, int timeout_ms)
{
    int status;
    if (s->pid <= 0 || !pk_wait_status(s->pid, timeout_ms, &status))
        return -1;
    s->pid = 0;
    check_sanitizer(s);
    return exit_code(status);
}

int svc_stop(svc_server *s, int timeout_ms)
{
    if (s->pid <= 0)
        return -1;
    pk_signal_stop(s->pid);
    /* An upper bound: scaled like every other (tu_slack), as a sanitizer
     * build on a busy machine can take seconds to drain and exit. */
    int rc = svc_wait_exit(s, (int)tu_slack(timeout_ms));
    if (rc == -1 && s->pid > 0) {
        pk_kill(s->pid);
        s->pid = 0;
        check_sanitizer(s);
    }
    return rc;
}

typedef struct membuf {
    char *p;
    size_t len;
} membuf;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    membuf *m = arg;
    size_t n = size * nmemb;
    char *p = realloc(m->p, m->len + n + 1);
    if (p == NULL)
        return 0;
    memcpy(p + m->len, data, n);
    m->p = p;
    m->len += n;
    p[m->len] = '\0';
    return n;
}

static void header_value(const char *line, size_t n, const char *name, char *dst, size_t dlen)
{
    size_t k = strlen(name);
    if (n > k && strncasecmp(line, name, k) == 0) {
        const char *v = line + k;
        size_t vl = n - k;
        while (vl > 0 && (*v == ' '))
            v++, vl--;
        while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        if (vl >= dlen)
            vl = dlen - 1;
        memcpy(dst, v, vl);
        dst[vl] = '\0';
    }
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    svc_resp *r = arg;
    size_t n = size * nmemb;
    header_value(data, n, "Allow:", r->allow, sizeof r->allow);
    header_value(data, n, "Content-Type:", r->ctype, sizeof r->ctype);
    header_value(data, n, "Idempotent-Replayed:", r->replayed, sizeof r->replayed);
    header_value(data, n, "WWW-Authenticate:", r->www_auth, sizeof r->www_auth);
    return n;
}

static int do_req(CURL *c, const svc_server *s, const char *method, const char *path,
                  const char *body, const char *auth, const char *header, svc_resp *out)
{
    char url[16384];
    membuf m = {0};
    struct curl_slist *hdrs = NULL;
    char authh[512];
    memset(out, 0, sizeof *out);
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else {
        curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
        if (strcmp(method, "GET") == 0)
            curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        if (body != NULL) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        }
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") ? method : NULL);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (body != NULL)
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    if (auth != NULL) {
        snprintf(authh, sizeof authh, "Authorization: %s", auth);
        hdrs = curl_slist_append(hdrs, authh);
    }
    for (const char *h = header; h != NULL && *h != '\0';) {
        const char *nl = strchr(h, '\n');
        size_t n = nl ? (size_t)(nl - h) : strlen(h);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)n, h);
        hdrs = curl_slist_append(hdrs, line);
        h = nl ? nl + 1 : NULL;
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        double t = 0;
        curl_easy_getinfo(c, CURLINFO_TOTAL_TIME, &t);
        out->ms = t * 1000.0;
    }
    out->body = m.p ? m.p : calloc(1, 1);
    out->len = m.len;
    if (out->body != NULL && out->len > 0)
        out->json = cJSON_ParseWithOpts(out->body, NULL, 0);
    return rc == CURLE_OK ? 0 : -1;
}

int svc_req(const svc_server *s, const char *method, const char *path, const char *body,
            const char *auth, svc_resp *out)
{
    pthread_once(&curl_once, curl_init);
    CURL *c = curl_easy_init();
    if (c == NULL) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    int rc = do_req(c, s, method, path, body, auth, NULL, out);
    curl_easy_cleanup(c);
    return rc;
}

int svc_req_hdr(const svc_server *s, const char *method, const char *path, const char *header,
                svc_resp *out)
{
    pthread_once(&curl_once, curl_init);
    CURL *c = curl_easy_init();
    if (c == NULL) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    int rc = do_req(c, s, method, path, NULL, NULL, header, out);
    curl_easy_cleanup(c);
    return rc;
}

int svc_req_keep(void **handle, const svc_server *s, const char *method, const char *path,
                 svc_resp *out)
{
    pthread_once(&curl_once, curl_init);
    if (*handle == NULL)
        *handle = curl_easy_init();
    if (*handle == NULL) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    return do_req(*handle, s, method, path, NULL, NULL, NULL, out);
}

void svc_handle_free(void *handle)
{
    if (handle != NULL)
        curl_easy_cleanup(handle);
}

static void *bg_main(void *arg)
{
    svc_bg *b = arg;
    svc_req(b->s, b->method != NULL ? b->method : "GET", b->path, NULL, NULL, &b->r);
    return NULL;
}

int svc_bg_start(svc_bg *b)
{
    return pthread_create(&b->th, NULL, bg_main, b) == 0 ? 0 : -1;
}

void svc_bg_join(svc_bg *b)
{
    pthread_join(b->th, NULL);
}

void svc_resp_free(svc_resp *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

const char *svc_jstr(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int svc_jerr_is(const svc_resp *r, const char *error)
{
    const char *e = svc_jstr(r->json, "error");
    return e != NULL && strcmp(e, error) == 0;
}

int svc_jdetail_has(const svc_resp *r, const char *part)
{
    const char *d = svc_jstr(r->json, "detail");
    return d != NULL && strstr(d, part) != NULL;
}

double svc_jnum(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : -1e18;
}

int svc_jbool(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : -1;
}

typedef struct burst_arg {
    const svc_server *s;
    const char *method;
    const char *path;
    svc_resp *out;
    pthread_barrier_t *barrier;
} burst_arg;

static void *burst_one(void *p)
{
    burst_arg *a = p;
    CURL *c = curl_easy_init();
    pthread_barrier_wait(a->barrier);
    if (c == NULL) {
        memset(a->out, 0, sizeof *a->out);
        return NULL;
    }
    do_req(c, a->s, a->method, a->path, NULL, NULL, NULL, a->out);
    curl_easy_cleanup(c);
    return NULL;
}

void svc_burst(const svc_server *s, const char *method, char **paths, int n, svc_resp *out)
{
    pthread_t *th = calloc((size_t)n, sizeof *th);
    burst_arg *args = calloc((size_t)n, sizeof *args);
    pthread_barrier_t barrier;
    pthread_attr_t attr;
    pthread_once(&curl_once, curl_init);
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < n; i++) {
        args[i] = (burst_arg){s, method, paths[i], &out[i], &barrier};
        if (pthread_create(&th[i], &attr, burst_one, &args[i]) != 0) {
            fprintf(stderr, "svc_burst: pthread_create failed\n");
            abort();
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_attr_destroy(&attr);
    pthread_barrier_destroy(&barrier);
    free(th);
    free(args);
}

long svc_set_stock(const svc_server *s, const char *sku, long long n, const char *auth)
{
    char path[128], body[64];
    svc_resp r;
    snprintf(path, sizeof path, "/stock/%s", sku);
    snprintf(body, sizeof body, "{\"stock\":%lld}", n);
    svc_req(s, "PUT", path, body, auth, &r);
    long st = r.status;
    svc_resp_free(&r);
    return st;
}

long svc_get_audit(const svc_server *s, const char *sku, svc_audit *a)
{
    char path[128];
    svc_resp r;
    snprintf(path, sizeof path, "/stock/%s", sku);
    svc_req(s, "GET", path, NULL, NULL, &r);
    long st = r.status;
    a->stock = (long long)svc_jnum(r.json, "stock");
    a->initial = (long long)svc_jnum(r.json, "initial");
    a->sold = (long long)svc_jnum(r.json, "sold");
    a->orders = (long long)svc_jnum(r.json, "orders");
    a->oversold = (long long)svc_jnum(r.json, "oversold");
    a->undersold = (long long)svc_jnum(r.json, "undersold");
    svc_resp_free(&r);
    return st;
}

int svc_reset_storm(const svc_server *s, const char *sku, int n, char *why, size_t len)
{
    char **paths = calloc((size_t)n, sizeof *paths);
    svc_resp *rs = calloc((size_t)n, sizeof *rs);
    if (paths == NULL || rs == NULL)
        abort();
    for (int i = 0; i < n; i++) {
        if ((paths[i] = malloc(200)) == NULL)
            abort();
        snprintf(paths[i], 200, "/stock/%s?stock=%d&buckets=%d", sku, 100 + i, 1 + (i * 7) % 16);
    }
    svc_burst(s, "PUT", paths, n, rs);
    int bad = 0;
    why[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (rs[i].status != 200 && bad++ == 0)
            snprintf(why, len, "reset %d: %ld %.300s", i, rs[i].status, B(&rs[i]));
    }
    svc_resp a;
    char path[160];
    snprintf(path, sizeof path, "/stock/%s", sku);
    svc_req(s, "GET", path, NULL, NULL, &a);
    long long initial = (long long)svc_jnum(a.json, "initial");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(a.json, "buckets");
    int k = arr != NULL ? cJSON_GetArraySize(arr) : 1, who = (int)(initial - 100);
    bool one = who >= 0 && who < n && rs[who].status == 200 && k == 1 + (who * 7) % 16;
    for (int b = 0; one && arr != NULL && b < k; b++) {
        long long share = initial / k + (b < initial % k);
        one = svc_jnum(cJSON_GetArrayItem(arr, b), "initial") == (double)share;
    }
    if (bad == 0 && !one)
        snprintf(why, len, "the SKU is no one reset's: %.600s", B(&a));
    else if (bad > 0)
        snprintf(why + strlen(why), len - strlen(why), " (%d of %d not 200)", bad, n);
    svc_resp_free(&a);
    for (int i = 0; i < n; i++) {
        svc_resp_free(&rs[i]);
        free(paths[i]);
    }
    free(paths);
    free(rs);
    return bad == 0 && one ? 0 : -1;
}

long long svc_redis_calls(int redis_port, const char *cmd)
{
    char field[64];
    snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
    return tu_redis_info_num(NULL, redis_port, "commandstats", field);
}

int svc_wait_inflight(const svc_server *s, int want)
{
    int64_t end = lc_now_ms() + tu_slack(10000);
    double inflight = -1;
    while (lc_now_ms() < end) {
        svc_resp st = {0};
        svc_req(s, "GET", "/stats", NULL, NULL, &st);
        inflight = svc_jnum(st.json, "inflight");
        svc_resp_free(&st);
        if (inflight == want)
            return 1;
        tu_sleep_ms(10);
    }
    fprintf(stderr, "inflight %.0f, want %d\n", inflight, want);
    return 0;
}
