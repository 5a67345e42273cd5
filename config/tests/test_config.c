/* test_config.c — the config module against its header's promises.
 *
 * No Redis: the module only reads files, the environment and argv. Each
 * test builds a fresh argv, writes its own JSON files into a private temp
 * directory and sets MIAOSHA_* variables with setenv, so it controls every
 * source. Errors are checked for the three things the spec promises every
 * message names: the key, the value and the allowed range.
 *
 * Usage: config_test PATH/TO/config/miaosha.json
 *        config_test --print-example   (writes what config/miaosha.json
 *                                        must contain, to regenerate it)
 */
#include "miaosha_config.h"
#include "tu.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static char tmpdir[256];
static const char *shipped_path;

/* --- helpers -------------------------------------------------------------- */

/* Every MIAOSHA_* variable of the caller's shell out of the way, so the
 * defaults are the defaults. */
static void clear_miaosha_env(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "MIAOSHA_", 8) == 0) {
                const char *eq = strchr(*e, '=');
                size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
                if (n >= sizeof name)
                    n = sizeof name - 1;
                memcpy(name, *e, n);
                name[n] = '\0';
                break;
            }
        }
        if (!name[0])
            return;
        unsetenv(name);
    }
}

static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    TU_REQUIRE(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

/* cfg_load with argv built from a NULL-terminated list of flags. */
static cfg_status load(cfg_config *c, char *err, ...)
{
    static char prog[] = "miaosha-server";
    char *argv[32];
    int argc = 0;
    argv[argc++] = prog;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    return cfg_load(c, argc, argv, err, CFG_ERR_LEN);
}

static int has(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* The error names the key, the value and the range. */
#define CHECK_ERR(st, err, key, value, range)                                                      \
    do {                                                                                           \
        TU_CHECK((st) == CFG_INVALID, "status %s, err '%s'", cfg_status_name(st), err);            \
        TU_CHECK(has(err, key), "err '%s' lacks key '%s'", err, key);                              \
        TU_CHECK(has(err, value), "err '%s' lacks value '%s'", err, value);                        \
        TU_CHECK(has(err, range), "err '%s' lacks range '%s'", err, range);                        \
    } while (0)

/* Equal settings: the struct bytes minus the fields a load is allowed to
 * differ in (generated instance id, the file path). */
static int same_settings(const cfg_config *a, const cfg_config *b)
{
    cfg_config x = *a, y = *b;
    memset(x.instance_id, 0, sizeof x.instance_id);
    memset(y.instance_id, 0, sizeof y.instance_id);
    memset(x.config_path, 0, sizeof x.config_path);
    memset(y.config_path, 0, sizeof y.config_path);
    return memcmp(&x, &y, sizeof x) == 0;
}

/* The key paths, taken from cfg_to_json so the test follows the table. */
static int key_paths(char paths[][64], int max)
{
    cfg_config d;
    cfg_defaults(&d);
    char *j = cfg_to_json(&d, 0);
    cJSON *root = cJSON_Parse(j);
    free(j);
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        if (cJSON_IsObject(it)) {
            const cJSON *sub;
            cJSON_ArrayForEach(sub, it)
            {
                if (n < max)
                    snprintf(paths[n++], 64, "%s.%s", it->string, sub->string);
            }
        } else if (n < max) {
            snprintf(paths[n++], 64, "%s", it->string);
        }
    }
    cJSON_Delete(root);
    return n;
}

static void env_of(const char *path, char *out, size_t len)
{
    size_t n = (size_t)snprintf(out, len, "MIAOSHA_");
    for (const char *p = path; *p && n + 1 < len; p++)
        out[n++] = *p == '.' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    out[n] = '\0';
}

/* --- tests ------------------------------------------------------------------- */

static void test_defaults(void)
{
    cfg_config c;
    memset(&c, 0x5a, sizeof c);
    cfg_defaults(&c);
    TU_CHECK(strcmp(c.listen.address, "127.0.0.1") == 0, "address %s", c.listen.address);
    TU_CHECK(c.listen.port == 8080, "port %d", c.listen.port);
    TU_CHECK(c.listen.max_connections == 4096, "%d", c.listen.max_connections);
    TU_CHECK(c.listen.connection_timeout_s == 10, "%d", c.listen.connection_timeout_s);
    TU_CHECK(c.listen.max_body_bytes == 4096, "%lld", (long long)c.listen.max_body_bytes);
    TU_CHECK(c.listen.max_uri_bytes == 2048, "%d", c.listen.max_uri_bytes);
    TU_CHECK(c.server.io_threads == 2 && c.server.workers == 16, "threads");
    TU_CHECK(c.server.max_queue == 1024, "max_queue %d", c.server.max_queue);
    TU_CHECK(strcmp(c.redis.host, "127.0.0.1") == 0, "redis host %s", c.redis.host);
    TU_CHECK(c.redis.port == 6379, "redis port %d", c.redis.port);
    TU_CHECK(c.redis.password[0] == '\0' && c.redis.db == 0, "password/db");
    TU_CHECK(c.redis.connect_timeout_ms == 1000 && c.redis.command_timeout_ms == 1000,
             "redis timeouts");
    TU_CHECK(strcmp(c.purchase.sku, "demo") == 0, "sku %s", c.purchase.sku);
    TU_CHECK(c.purchase.initial_stock == 100, "initial");
    TU_CHECK(c.purchase.work_ms == 0 && c.purchase.max_work_ms == 60000, "work_ms");
    TU_CHECK(c.purchase.max_reenter == 8, "reenter");
    TU_CHECK(c.lock.lease_ms == 5000 && c.lock.wait_ms == 0, "lease/wait");
    TU_CHECK(c.lock.retry_interval_ms == 10, "retry");
    TU_CHECK(c.lock.watchdog_timeout_ms == 30000, "watchdog");
    TU_CHECK(c.faults.enabled == false, "faults");
    TU_CHECK(c.log.level == CFG_LOG_INFO && c.log.access == false, "log");
    TU_CHECK(c.admin_token[0] == '\0', "admin token");
    TU_CHECK(c.instance_id[0] == '\0' && c.config_path[0] == '\0', "id/path empty");
    char err[CFG_ERR_LEN];
    TU_CHECK(cfg_validate(&c, err, sizeof err) == CFG_OK, "defaults invalid: %s", err);
}

static void test_load_no_sources(void)
{
    cfg_config a, b, d;
    char err[CFG_ERR_LEN];
    cfg_defaults(&d);
    TU_CHECK(load(&a, err, NULL) == CFG_OK, "%s", err);
    TU_CHECK(err[0] == '\0', "err not cleared: %s", err);
    TU_CHECK(same_settings(&a, &d), "plain load differs from defaults");
    TU_CHECK(strlen(a.instance_id) == 36 && a.instance_id[8] == '-', "uuid '%s'", a.instance_id);
    TU_CHECK(cfg_load(&b, 0, NULL, err, sizeof err) == CFG_OK, "argc 0: %s", err);
    TU_CHECK(strcmp(a.instance_id, b.instance_id) != 0, "two loads share id %s", a.instance_id);
    TU_CHECK(load(&a, err, "--instance-id", "node-a", NULL) == CFG_OK, "%s", err);
    TU_CHECK(strcmp(a.instance_id, "node-a") == 0, "id %s", a.instance_id);
}

static void test_file(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    const char *p = write_file(
        "a.json",
        "{\n  \"_comment\": \"ignored\",\n"
        "  \"listen\": {\"port\": 9001, \"_port\": [1, 2], \"address\": \"::1\"},\n"
        "  \"redis\": {\"host\": \"redis.example\", \"password\": \"s3cret\", \"db\": 3},\n"
        "  \"lock\": {\"lease_ms\": 200, \"wait_ms\": 1000},\n"
        "  \"faults\": {\"enabled\": true},\n"
        "  \"log\": {\"level\": \"debug\", \"access\": true},\n"
        "  \"admin_token\": \"tok\", \"instance_id\": \"inst-1\"\n}\n");
    cfg_status st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK, "%s: %s", cfg_status_name(st), err);
    TU_CHECK(c.listen.port == 9001 && strcmp(c.listen.address, "::1") == 0, "listen");
    TU_CHECK(strcmp(c.redis.host, "redis.example") == 0, "host %s", c.redis.host);
    TU_CHECK(strcmp(c.redis.password, "s3cret") == 0 && c.redis.db == 3, "password/db");
    TU_CHECK(c.redis.port == 6379, "untouched key keeps default: %d", c.redis.port);
    TU_CHECK(c.lock.lease_ms == 200 && c.lock.wait_ms == 1000, "lock");
    TU_CHECK(c.faults.enabled && c.log.level == CFG_LOG_DEBUG && c.log.access, "bools");
    TU_CHECK(strcmp(c.admin_token, "tok") == 0 && strcmp(c.instance_id, "inst-1") == 0,
             "top-level keys");
    TU_CHECK(strcmp(c.config_path, p) == 0, "config_path %s", c.config_path);

    /* --config=FILE form, and $MIAOSHA_CONFIG when no --config is given. */
    st = load(&c, err, NULL);
    TU_CHECK(st == CFG_OK && c.listen.port == 8080, "no file, no env");
    char flag[600];
    snprintf(flag, sizeof flag, "--config=%s", p);
    TU_CHECK(load(&c, err, flag, NULL) == CFG_OK && c.listen.port == 9001, "--config=: %s", err);
    setenv("MIAOSHA_CONFIG", p, 1);
    TU_CHECK(load(&c, err, NULL) == CFG_OK && c.listen.port == 9001, "MIAOSHA_CONFIG: %s", err);
    const char *q = write_file("b.json", "{\"listen\":{\"port\":9100}}");
    TU_CHECK(load(&c, err, "--config", q, NULL) == CFG_OK && c.listen.port == 9100,
             "--config beats MIAOSHA_CONFIG: %d", c.listen.port);
    unsetenv("MIAOSHA_CONFIG");

    /* A number with an integral value written as a float is still fine. */
    q = write_file("c.json", "{\"listen\":{\"port\":8.1e3}}");
    TU_CHECK(load(&c, err, "--config", q, NULL) == CFG_OK && c.listen.port == 8100, "%s", err);
}

static void test_precedence(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    const char *p = write_file(
        "prec.json", "{\"listen\":{\"port\":9001},\"redis\":{\"host\":\"file-host\",\"port\":7001},"
                     "\"lock\":{\"lease_ms\":111,\"wait_ms\":5}}");
    /* file only */
    TU_CHECK(load(&c, err, "--config", p, NULL) == CFG_OK, "%s", err);
    TU_CHECK(c.listen.port == 9001 && c.lock.lease_ms == 111, "file");
    /* env beats file, key by key */
    setenv("MIAOSHA_LISTEN_PORT", "9002", 1);
    setenv("MIAOSHA_REDIS_HOST", "env-host", 1);
    setenv("MIAOSHA_LOCK_LEASE_MS", "222", 1);
    TU_CHECK(load(&c, err, "--config", p, NULL) == CFG_OK, "%s", err);
    TU_CHECK(c.listen.port == 9002, "env over file: %d", c.listen.port);
    TU_CHECK(strcmp(c.redis.host, "env-host") == 0 && c.redis.port == 7001,
             "env host, file port: %s:%d", c.redis.host, c.redis.port);
    TU_CHECK(c.lock.lease_ms == 222 && c.lock.wait_ms == 5, "lock %lld/%lld",
             (long long)c.lock.lease_ms, (long long)c.lock.wait_ms);
    /* flags beat env; later flags beat earlier ones */
    TU_CHECK(load(&c, err, "--config", p, "--port", "9003", "--redis", "flag-host:7003", "--set",
                  "lock.lease_ms=333", NULL) == CFG_OK,
             "%s", err);
    TU_CHECK(c.listen.port == 9003, "flag over env: %d", c.listen.port);
    TU_CHECK(strcmp(c.redis.host, "flag-host") == 0 && c.redis.port == 7003, "--redis");
    TU_CHECK(c.lock.lease_ms == 333, "--set over env");
    TU_CHECK(load(&c, err, "--port", "9003", "--set", "listen.port=9004", NULL) == CFG_OK &&
                 c.listen.port == 9004,
             "left to right: %d", c.listen.port);
    TU_CHECK(load(&c, err, "--set", "listen.port=9004", "--port=9005", NULL) == CFG_OK &&
                 c.listen.port == 9005,
             "left to right: %d", c.listen.port);
    /* a flag that appears before --config still beats the file */
    TU_CHECK(load(&c, err, "--port", "9006", "--config", p, NULL) == CFG_OK &&
                 c.listen.port == 9006,
             "flag before --config: %d", c.listen.port);
    /* two files are not merged: a second --config is refused, not read
     * in place of the first; --help still wins */
    TU_CHECK(load(&c, err, "--config", p, "--config=/nonexistent.json", NULL) == CFG_INVALID &&
                 has(err, "--config") && has(err, "twice"),
             "--config twice: %s", err);
    TU_CHECK(load(&c, err, "--config", p, "--config", p, "--help", NULL) == CFG_EXIT_HELP,
             "--config twice, then --help: %s", err);
    unsetenv("MIAOSHA_LISTEN_PORT");
    unsetenv("MIAOSHA_REDIS_HOST");
    unsetenv("MIAOSHA_LOCK_LEASE_MS");

    /* every key is reachable from the environment under its documented name */
    char paths[64][64];
    int n = key_paths(paths, 64);
    TU_CHECK(n >= 30, "only %d keys", n);
    cfg_config d;
    cfg_defaults(&d);
    char *dj = cfg_to_json(&d, CFG_JSON_SHOW_SECRETS);
    cJSON *droot = cJSON_Parse(dj);
    free(dj);
    for (int i = 0; i < n; i++) {
        char env[96], sec[64];
        env_of(paths[i], env, sizeof env);
        const char *dot = strchr(paths[i], '.');
        const cJSON *v;
        if (dot) {
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - paths[i]), paths[i]);
            v = cJSON_GetObjectItem(cJSON_GetObjectItem(droot, sec), dot + 1);
        } else {
            v = cJSON_GetObjectItem(droot, paths[i]);
        }
        /* A text form that differs from the default, where one exists. */
        char text[128] = "";
        if (cJSON_IsBool(v))
            snprintf(text, sizeof text, "%s", cJSON_IsTrue(v) ? "no" : "yes");
        else if (cJSON_IsNumber(v))
            snprintf(text, sizeof text, "%.0f", v->valuedouble + 1);
        else if (strcmp(paths[i], "log.level") == 0)
            snprintf(text, sizeof text, "WARN");
        else if (strcmp(paths[i], "listen.address") == 0)
            snprintf(text, sizeof text, "0.0.0.0");
        else if (strcmp(paths[i], "redis.sentinels") == 0)
            snprintf(text, sizeof text, "x-1:26379");
        else if (strcmp(paths[i], "redis.cluster_nodes") == 0)
            snprintf(text, sizeof text, "x-1:7000,[::1]:7001");
        else if (strcmp(paths[i], "redlock.nodes") == 0)
            snprintf(text, sizeof text, "a:1,b:2,c:3");
        else
            snprintf(text, sizeof text, "x-1");
        /* Bump a key's cap alongside it, so the cross-key rules hold. */
        setenv("MIAOSHA_LOCK_MAX_LEASE_MS", "400000", 1);
        setenv("MIAOSHA_LOCK_MAX_WAIT_MS", "70000", 1);
        setenv("MIAOSHA_PURCHASE_MAX_WORK_MS", "70000", 1);
        /* listen.address 0.0.0.0 without admin_token needs it */
        setenv("MIAOSHA_LISTEN_ALLOW_OPEN", "true", 1);
        setenv(env, text, 1);
        cfg_status st = load(&c, err, NULL);
        TU_CHECK(st == CFG_OK, "%s=%s: %s", env, text, err);
        char *j = cfg_to_json(&c, CFG_JSON_SHOW_SECRETS);
        TU_CHECK(j && !same_settings(&c, &d), "%s=%s changed nothing", env, text);
        free(j);
        unsetenv(env);
        unsetenv("MIAOSHA_LOCK_MAX_LEASE_MS");
        unsetenv("MIAOSHA_LOCK_MAX_WAIT_MS");
        unsetenv("MIAOSHA_PURCHASE_MAX_WORK_MS");
        unsetenv("MIAOSHA_LISTEN_ALLOW_OPEN");
    }
    cJSON_Delete(droot);
}

static void test_file_errors(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st;
    const char *p;

    p = write_file("e1.json", "{\"redis\":{\"hots\":\"x\"}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.hots") && has(err, "redis.host") && has(err, p),
             "unknown key: %s", err);

    /* The escape \u0000 would cut the string short (an admin token of
     * "\u0000" read as none); an escaped backslash before "u0000" is text. */
    p = write_file("nul.json", "{\"admin_token\":\"\\u0000\"}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "\\u0000"), "\\u0000 in a string: %s", err);
    p = write_file("nul2.json", "{\"admin_token\":\"a\\\\u0000b\"}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && strcmp(c.admin_token, "a\\u0000b") == 0,
             "an escaped backslash, then u0000: %s", err);
    /* A FIFO is refused at once (opening it for reading used to wait for a
     * writer forever). */
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s/fifo.json", tmpdir);
    TU_REQUIRE(mkfifo(fifo, 0600) == 0, "mkfifo");
    st = load(&c, err, "--config", fifo, NULL);
    TU_CHECK(st == CFG_IO && has(err, "not a regular file"), "a FIFO: %s", err);
    unlink(fifo);

    p = write_file("e2.json", "{\"bogus\":1}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "unknown key") && has(err, "bogus"), "%s", err);

    p = write_file("e3.json", "{\"redis.host\":\"x\"}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.host") && has(err, "nested") &&
                 !has(err, "did you mean"),
             "dotted top level: %s", err);

    p = write_file("e4.json", "{\"listen\":{\"port\":\"8080\"}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "listen.port", "\"8080\"", "0..65535");
    TU_CHECK(has(err, "not a number"), "%s", err);

    p = write_file("e5.json", "{\"listen\":{\"port\":70000}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "listen.port", "70000", "0..65535");
    TU_CHECK(has(err, "out of range"), "%s", err);

    p = write_file("e6.json", "{\"lock\":{\"lease_ms\":1.5}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "lock.lease_ms", "1.5", "1..86400000");
    TU_CHECK(has(err, "not an integer"), "%s", err);

    p = write_file("e7.json", "{\"lock\":{\"lease_ms\":1e300}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "lock.lease_ms", "e+300", "1..86400000");

    p = write_file("e8.json", "{\"faults\":{\"enabled\":1}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "faults.enabled", "1", "true|false");

    p = write_file("e9.json", "{\"redis\":{\"host\":null}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "redis.host", "null", "bytes");

    p = write_file("e10.json", "{\"log\":{\"level\":\"loud\"}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "log.level", "loud", "error|warn|info|debug");

    p = write_file("e11.json", "{\"redis\":{\"port\":1,\"port\":2}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "duplicate") && has(err, "redis.port"), "%s", err);

    p = write_file("e12.json", "{\"redis\":5}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis") && has(err, "not an object"), "%s", err);

    p = write_file("e13.json", "[1,2]");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "object"), "%s", err);

    p = write_file("e14.json", "{\n  \"listen\": {\n    \"port\": 80,,\n  }\n}\n");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "line 3") && has(err, "invalid JSON"), "%s", err);

    p = write_file("e15.json", "");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "invalid JSON"), "empty: %s", err);

    p = write_file("e16.json", "{} trailing");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "invalid JSON"), "trailing: %s", err);

    p = write_file("e17.json", "{\"purchase\":{\"sku\":\"bad sku!\"}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "purchase.sku", "bad sku!", "[A-Za-z0-9_-]{1,64}");

    p = write_file("e18.json", "{\"listen\":{\"address\":\"localhost\"}}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "listen.address", "localhost", "numeric IPv4 or IPv6");

    p = write_file("e19.json", "{\"instance_id\":\"a:b\"}");
    st = load(&c, err, "--config", p, NULL);
    CHECK_ERR(st, err, "instance_id", "a:b", "[A-Za-z0-9._-]{0,63}");

    /* secrets: rejected, never echoed */
    p = write_file("e20.json", "{\"admin_token\":\"has space-SECRETVALUE\"}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "admin_token") && !has(err, "SECRETVALUE"), "secret: %s",
             err);
    /* nor a secret of the wrong type, nor the text after a syntax error
     * inside one (a bad escape) */
    p = write_file("e20b.json", "{\"redis\":{\"password\":123456789}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.password") && has(err, "not a string") &&
                 !has(err, "123456789"),
             "a number as the password: %s", err);
    p = write_file("e20c.json", "{\n  \"admin_token\": \"s3\\qSECRETVALUE\"\n}\n");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "line 2") && has(err, "invalid JSON") &&
                 !has(err, "SECRETVALUE"),
             "a syntax error inside a secret: %s", err);
    p = write_file("e20d.json", "{\n  \"listen\": {\"port\": 80x}\n}\n");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "near 'x}"), "elsewhere the text is shown: %s", err);

    p = write_file("e21.json", "{\"listen\":{\"port\":8080},\"listen\":{\"port\":8081}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "duplicate") && has(err, "listen"), "%s", err);

    /* failure resets *c to the defaults */
    cfg_config d;
    cfg_defaults(&d);
    memset(&c, 0x77, sizeof c);
    p = write_file("e22.json", "{\"listen\":{\"port\":9999},\"nope\":1}");
    TU_CHECK(load(&c, err, "--config", p, NULL) == CFG_INVALID, "nope");
    TU_CHECK(memcmp(&c, &d, sizeof c) == 0, "failed load left a half-loaded config");

    /* I/O */
    char missing[400];
    snprintf(missing, sizeof missing, "%s/does-not-exist.json", tmpdir);
    st = load(&c, err, "--config", missing, NULL);
    TU_CHECK(st == CFG_IO && has(err, missing) && has(err, "No such file"), "%s", err);
    TU_CHECK(cfg_exit_code(st) == 2, "io exit code");
    st = load(&c, err, "--config", tmpdir, NULL);
    TU_CHECK(st == CFG_IO, "directory: %s %s", cfg_status_name(st), err);
}

static void test_env_errors(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st;

    setenv("MIAOSHA_LISTEN_PORT", "70000", 1);
    st = load(&c, err, NULL);
    CHECK_ERR(st, err, "listen.port", "70000", "0..65535");
    TU_CHECK(has(err, "MIAOSHA_LISTEN_PORT"), "source not named: %s", err);
    /* a flag does not hide a bad environment value: each source is checked */
    setenv("MIAOSHA_LISTEN_PORT", "80x", 1);
    st = load(&c, err, "--port", "81", NULL);
    CHECK_ERR(st, err, "listen.port", "80x", "0..65535");
    setenv("MIAOSHA_LISTEN_PORT", "", 1);
    st = load(&c, err, NULL);
    CHECK_ERR(st, err, "listen.port", "''", "0..65535");
    setenv("MIAOSHA_LISTEN_PORT", " 80", 1);
    st = load(&c, err, NULL);
    TU_CHECK(st == CFG_INVALID, "leading space accepted");
    setenv("MIAOSHA_LISTEN_PORT", "99999999999999999999999", 1);
    st = load(&c, err, NULL);
    CHECK_ERR(st, err, "listen.port", "99999999999999999999999", "0..65535");
    unsetenv("MIAOSHA_LISTEN_PORT");

    setenv("MIAOSHA_FAULTS_ENABLED", "maybe", 1);
    st = load(&c, err, NULL);
    CHECK_ERR(st, err, "faults.enabled", "maybe", "true|false");
    setenv("MIAOSHA_FAULTS_ENABLED", "on", 1);
    TU_CHECK(load(&c, err, NULL) == CFG_OK && c.faults.enabled, "on: %s", err);
    unsetenv("MIAOSHA_FAULTS_ENABLED");

    setenv("MIAOSHA_REDIS_PASSWORD", "pw\nINJECTED", 1);
    st = load(&c, err, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.password") && !has(err, "INJECTED"),
             "password: %s", err);
    unsetenv("MIAOSHA_REDIS_PASSWORD");

    /* unknown MIAOSHA_* variables are listed, not fatal */
    setenv("MIAOSHA_LOCK_LEASEMS", "5", 1);
    TU_CHECK(load(&c, err, NULL) == CFG_OK, "unknown env is fatal: %s", err);
    char names[256];
    size_t n = cfg_unknown_env(names, sizeof names);
    TU_CHECK(n == 1 && strcmp(names, "MIAOSHA_LOCK_LEASEMS") == 0, "unknown env %zu '%s'", n,
             names);
    unsetenv("MIAOSHA_LOCK_LEASEMS");
    setenv("MIAOSHA_CONFIG", "/x", 1);
    setenv("MIAOSHA_REDIS_HOST", "h", 1);
    TU_CHECK(cfg_unknown_env(names, sizeof names) == 0, "known vars listed: '%s'", names);
    unsetenv("MIAOSHA_CONFIG");
    unsetenv("MIAOSHA_REDIS_HOST");
}

static void test_flag_errors(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st;

    st = load(&c, err, "--set", "lock.lease=5", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "lock.lease") && has(err, "lock.lease_ms"),
             "unknown --set key with hint: %s", err);
    st = load(&c, err, "--set", "zzzzzzzz=5", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "zzzzzzzz") && !has(err, "did you mean"), "%s", err);
    st = load(&c, err, "--set", "lock.lease_ms", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "KEY=VALUE"), "%s", err);
    st = load(&c, err, "--set", "lock.lease_ms=0", NULL);
    CHECK_ERR(st, err, "lock.lease_ms", "'0'", "1..86400000");
    TU_CHECK(has(err, "--set"), "source: %s", err);
    st = load(&c, err, "--port", "http", NULL);
    CHECK_ERR(st, err, "listen.port", "http", "0..65535");
    st = load(&c, err, "--port", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "--port") && has(err, "needs a value"), "%s", err);
    st = load(&c, err, "--bogus", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "--bogus"), "%s", err);
    st = load(&c, err, "extra", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "extra"), "%s", err);
    st = load(&c, err, "--print-config=yes", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "takes no value"), "%s", err);
    st = load(&c, err, "--listen", "example.com", NULL);
    CHECK_ERR(st, err, "listen.address", "example.com", "numeric IPv4 or IPv6");
    st = load(&c, err, "--set", "log.level=verbose", NULL);
    CHECK_ERR(st, err, "log.level", "verbose", "error|warn|info|debug");

    /* rules between keys, whichever sources the two values came from */
    st = load(&c, err, "--set", "lock.lease_ms=400000", NULL);
    CHECK_ERR(st, err, "lock.lease_ms", "400000", "lock.max_lease_ms");
    TU_CHECK(load(&c, err, "--set", "lock.lease_ms=400000", "--set", "lock.max_lease_ms=400000",
                  NULL) == CFG_OK,
             "%s", err);
    st = load(&c, err, "--set", "lock.wait_ms=1000", "--set", "lock.max_wait_ms=999", NULL);
    CHECK_ERR(st, err, "lock.wait_ms", "1000", "lock.max_wait_ms = 999");
    setenv("MIAOSHA_PURCHASE_MAX_WORK_MS", "10", 1);
    st = load(&c, err, "--set", "purchase.work_ms=20", NULL);
    CHECK_ERR(st, err, "purchase.work_ms", "20", "purchase.max_work_ms");
    unsetenv("MIAOSHA_PURCHASE_MAX_WORK_MS");
    TU_CHECK(cfg_exit_code(st) == 2, "invalid exits 2");
    /* a URI must fit twice into the header limit, so a long URI always gets
     * the service's 414, never libmicrohttpd's own */
    st = load(&c, err, "--set", "listen.max_header_bytes=8192", "--set",
              "listen.max_uri_bytes=4097", NULL);
    CHECK_ERR(st, err, "listen.max_uri_bytes", "4097", "half of listen.max_header_bytes = 8192");
    TU_CHECK(load(&c, err, "--set", "listen.max_header_bytes=8192", "--set",
                  "listen.max_uri_bytes=4096", NULL) == CFG_OK,
             "%s", err);
    st = load(&c, err, "--set", "listen.max_header_bytes=4096", "--set",
              "listen.max_uri_bytes=2049", NULL);
    CHECK_ERR(st, err, "listen.max_uri_bytes", "2049", "and <= listen.max_header_bytes / 2");
    /* the removed key is unknown now */
    st = load(&c, err, "--set", "redis.pool_size=8", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "unknown key"), "pool_size: %s", err);
    st = load(&c, err, "--set", "server.max_queue=-1", NULL);
    CHECK_ERR(st, err, "server.max_queue", "-1", "0..1000000");
    /* a flag's value may not be the next flag */
    st = load(&c, err, "--config", "--help", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "--config") && has(err, "needs a value"),
             "--config --help: %s %s", cfg_status_name(st), err);
    TU_CHECK(cfg_exit_code(st) == 2, "exit 2");
    st = load(&c, err, "--port", "--set", "log.level=debug", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "--port") && has(err, "needs a value"), "%s", err);
    TU_CHECK(load(&c, err, "--instance-id=--x", NULL) == CFG_OK &&
                 strcmp(c.instance_id, "--x") == 0,
             "--flag=VALUE takes any value: %s", err);
}

/* A non-loopback listen.address with an empty admin_token is refused,
 * naming the keys, unless listen.allow_open says to run open. */
static void test_open_listen(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st;
    const char *open_addrs[] = {"0.0.0.0", "::", "192.168.1.10", "::ffff:10.0.0.1"};
    for (size_t i = 0; i < sizeof open_addrs / sizeof open_addrs[0]; i++) {
        st = load(&c, err, "--listen", open_addrs[i], NULL);
        TU_CHECK(st == CFG_INVALID && has(err, "listen.allow_open") && has(err, "admin_token") &&
                     has(err, open_addrs[i]) && cfg_exit_code(st) == 2,
                 "%s without admin_token: %s", open_addrs[i], err);
        st = load(&c, err, "--listen", open_addrs[i], "--set", "admin_token=s3cret", NULL);
        TU_CHECK(st == CFG_OK, "%s with admin_token: %s", open_addrs[i], err);
        st = load(&c, err, "--listen", open_addrs[i], "--set", "listen.allow_open=true", NULL);
        TU_CHECK(st == CFG_OK && c.listen.allow_open, "%s with allow_open: %s", open_addrs[i], err);
    }
    const char *loopback[] = {"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"};
    for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
        st = load(&c, err, "--listen", loopback[i], NULL);
        TU_CHECK(st == CFG_OK, "loopback %s needs neither: %s", loopback[i], err);
    }
    /* cfg_validate applies the same rule to a struct set by hand. */
    cfg_defaults(&c);
    snprintf(c.listen.address, sizeof c.listen.address, "0.0.0.0");
    TU_CHECK(cfg_validate(&c, err, sizeof err) == CFG_INVALID && has(err, "listen.allow_open"),
             "cfg_validate: %s", err);
}

static void test_redis_flag(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    TU_CHECK(load(&c, err, "--redis", "10.0.0.5:6380", NULL) == CFG_OK, "%s", err);
    TU_CHECK(strcmp(c.redis.host, "10.0.0.5") == 0 && c.redis.port == 6380, "v4");
    TU_CHECK(load(&c, err, "--redis=cache.local:1", NULL) == CFG_OK, "%s", err);
    TU_CHECK(strcmp(c.redis.host, "cache.local") == 0 && c.redis.port == 1, "name");
    TU_CHECK(load(&c, err, "--redis", "[::1]:6379", NULL) == CFG_OK, "%s", err);
    TU_CHECK(strcmp(c.redis.host, "::1") == 0 && c.redis.port == 6379, "v6 %s", c.redis.host);

    static const char *const bad[] = {
        "localhost",       ":6379",    "localhost:", "localhost:abc", "localhost:0",
        "localhost:65536", "::1:6379", "[::1]6379",  "[]:6379",       "[::1",
        "bad host:1",      "h:-1",     "h:6379:1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg_status st = load(&c, err, "--redis", bad[i], NULL);
        TU_CHECK(st == CFG_INVALID && has(err, "--redis"), "'%s' -> %s '%s'", bad[i],
                 cfg_status_name(st), err);
        TU_CHECK(c.redis.port == 6379 && strcmp(c.redis.host, "127.0.0.1") == 0,
                 "'%s' changed the config", bad[i]);
    }
    cfg_status st = load(&c, err, "--redis", "localhost:70000", NULL);
    CHECK_ERR(st, err, "redis.port", "70000", "1..65535");
}

static void test_exits(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    /* help and version win even over a broken config and bad flags */
    TU_CHECK(load(&c, err, "--config", "/nonexistent", "--bogus", "--help", NULL) == CFG_EXIT_HELP,
             "--help");
    TU_CHECK(load(&c, err, "-h", NULL) == CFG_EXIT_HELP, "-h");
    TU_CHECK(load(&c, err, "--version", NULL) == CFG_EXIT_VERSION, "--version");
    TU_CHECK(load(&c, err, "-V", "--help", NULL) == CFG_EXIT_VERSION, "first wins");
    /* a value that looks like a flag is a value */
    TU_CHECK(load(&c, err, "--set", "admin_token=--help", NULL) == CFG_OK &&
                 strcmp(c.admin_token, "--help") == 0,
             "value --help: %s", err);
    TU_CHECK(cfg_exit_code(CFG_EXIT_HELP) == 0 && cfg_exit_code(CFG_EXIT_VERSION) == 0 &&
                 cfg_exit_code(CFG_OK) == -1 && cfg_exit_code(CFG_NOMEM) == 1,
             "exit codes");

    cfg_status st = load(&c, err, "--print-config", "--port", "8123", NULL);
    TU_CHECK(st == CFG_EXIT_PRINT && c.listen.port == 8123 && c.instance_id[0],
             "--print-config: %s", err);
    TU_CHECK(load(&c, err, "--print-config", "--port", "x", NULL) == CFG_INVALID,
             "--print-config still validates");

    /* --help tells the truth: every key, its env var and its default */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cfg_print_help(f);
    fclose(f);
    char paths[64][64];
    int n = key_paths(paths, 64);
    cfg_config d;
    cfg_defaults(&d);
    char *dj = cfg_to_json(&d, CFG_JSON_SHOW_SECRETS);
    cJSON *droot = cJSON_Parse(dj);
    free(dj);
    for (int i = 0; i < n; i++) {
        char env[96], needle[256];
        env_of(paths[i], env, sizeof env);
        snprintf(needle, sizeof needle, "  %-28.63s %.95s\n", paths[i], env);
        const char *at = strstr(text, needle);
        TU_CHECK(at != NULL, "help lacks '%s'", needle);
        if (!at)
            continue;
        const char *dot = strchr(paths[i], '.');
        char sec[64];
        const cJSON *v;
        if (dot) {
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - paths[i]), paths[i]);
            v = cJSON_GetObjectItem(cJSON_GetObjectItem(droot, sec), dot + 1);
        } else {
            v = cJSON_GetObjectItem(droot, paths[i]);
        }
        char *vt = cJSON_PrintUnformatted(v);
        char def[160];
        snprintf(def, sizeof def, "default %s, allowed", vt);
        const char *line_end = strchr(at + strlen(needle), '\n');
        TU_CHECK(line_end && strstr(at + strlen(needle), def) &&
                     strstr(at + strlen(needle), def) < line_end,
                 "help for %s lacks '%s'", paths[i], def);
        cJSON_free(vt);
    }
    TU_CHECK(has(text, "--redis HOST:PORT") && has(text, "--set KEY=VALUE") &&
                 has(text, "--config FILE") && has(text, "MIAOSHA_CONFIG"),
             "flags in help");
    cJSON_Delete(droot);
    free(text);

    text = NULL;
    f = open_memstream(&text, &len);
    cfg_print_version(f);
    fclose(f);
    TU_CHECK(has(text, cfg_version()) && has(text, "miaosha"), "version '%s'", text);
    free(text);
}

static void test_json_out(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    TU_CHECK(load(&c, err, "--set", "redis.password=pw", "--set", "admin_token=tok", "--set",
                  "log.level=warn", "--set", "lock.wait_ms=77", "--set", "purchase.sku=apple_1",
                  NULL) == CFG_OK,
             "%s", err);
    char *masked = cfg_to_json(&c, 0);
    TU_REQUIRE(masked != NULL, "cfg_to_json");
    TU_CHECK(!has(masked, "\"pw\"") && !has(masked, "\"tok\"") && has(masked, "\"***\""),
             "secrets not masked: %s", masked);
    TU_CHECK(has(masked, "\"level\":\"warn\"") && has(masked, "\"wait_ms\":77"), "%s", masked);
    TU_CHECK(!has(masked, "\n"), "compact output has newlines");
    free(masked);

    cfg_config d;
    cfg_defaults(&d);
    char *plain = cfg_to_json(&d, 0);
    TU_CHECK(has(plain, "\"password\":\"\"") && has(plain, "\"admin_token\":\"\""),
             "empty secrets must stay empty: %s", plain);
    free(plain);

    /* round trip: the output with secrets is a loadable config file */
    char *full = cfg_to_json(&c, CFG_JSON_SHOW_SECRETS | CFG_JSON_PRETTY);
    TU_CHECK(has(full, "\n  \"listen\": {\n    \"address\""), "pretty layout: %.80s", full);
    const char *p = write_file("round.json", full);
    free(full);
    cfg_config back;
    TU_CHECK(load(&back, err, "--config", p, NULL) == CFG_OK, "round trip: %s", err);
    TU_CHECK(same_settings(&back, &c) && strcmp(back.instance_id, c.instance_id) == 0,
             "round trip differs");

    /* cfg_set and cfg_validate */
    cfg_config s;
    cfg_defaults(&s);
    TU_CHECK(cfg_set(&s, "redis.db", "7", err, sizeof err) == CFG_OK && s.redis.db == 7, "set");
    TU_CHECK(cfg_set(&s, "redis.db", "256", err, sizeof err) == CFG_INVALID && s.redis.db == 7 &&
                 has(err, "0..255"),
             "set bounds: %s", err);
    TU_CHECK(cfg_set(&s, "redis.dbb", "1", err, sizeof err) == CFG_INVALID &&
                 has(err, "redis.db'?"),
             "set unknown: %s", err);
    TU_CHECK(cfg_set(&s, NULL, "1", err, sizeof err) == CFG_INVALID && has(err, "NULL key") &&
                 cfg_set(&s, "redis.db", NULL, err, sizeof err) == CFG_INVALID &&
                 has(err, "NULL value") && s.redis.db == 7,
             "set NULL: %s", err);
    s.listen.connection_timeout_s = 0;
    cfg_status st = cfg_validate(&s, err, sizeof err);
    CHECK_ERR(st, err, "listen.connection_timeout_s", "0", "1..3600");
    cfg_defaults(&s);
    s.lock.lease_ms = s.lock.max_lease_ms + 1;
    st = cfg_validate(&s, err, sizeof err);
    CHECK_ERR(st, err, "lock.lease_ms", "300001", "lock.max_lease_ms");
    cfg_defaults(&s);
    s.log.level = (cfg_log_level)9;
    TU_CHECK(cfg_validate(&s, err, sizeof err) == CFG_INVALID && has(err, "log.level"), "%s", err);
    cfg_defaults(&s);
    memset(s.redis.host, 'a', sizeof s.redis.host);
    TU_CHECK(cfg_validate(&s, err, sizeof err) == CFG_INVALID && has(err, "redis.host"), "%s", err);
    /* err may be absent */
    TU_CHECK(cfg_set(&s, "nope", "1", NULL, 0) == CFG_INVALID, "NULL err");
    /* a short err buffer is cut, not overrun (ASan watches) */
    char tiny[8];
    TU_CHECK(cfg_set(&s, "nope", "1", tiny, sizeof tiny) == CFG_INVALID &&
                 strlen(tiny) == sizeof tiny - 1,
             "tiny '%s'", tiny);
}

/* redis.cluster_nodes: seeds as host:port or [v6]:port, a list or an
 * array; malformed seeds refused; with redis.sentinels, wait_replicas = all
 * or a redis.db other than 0, exit 2 naming both keys. */
static void test_cluster_keys(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st = load(&c, err, "--set", "redis.cluster_nodes=127.0.0.1:7000,[::1]:7001,n3:7002",
                         NULL);
    TU_CHECK(st == CFG_OK && !strcmp(c.redis.cluster_nodes, "127.0.0.1:7000,[::1]:7001,n3:7002") &&
                 c.redis.cluster_refresh_ms == 5000,
             "three seeds: %s", err);
    setenv("MIAOSHA_REDIS_CLUSTER_NODES", "a:1,b:2", 1);
    st = load(&c, err, NULL);
    unsetenv("MIAOSHA_REDIS_CLUSTER_NODES");
    TU_CHECK(st == CFG_OK && !strcmp(c.redis.cluster_nodes, "a:1,b:2"), "from the environment: %s",
             err);
    const char *p = write_file("cl.json", "{\"redis\":{\"cluster_nodes\":[\"a:1\",\"[::1]:2\"]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && !strcmp(c.redis.cluster_nodes, "a:1,[::1]:2"), "an array: %s / %s",
             err, c.redis.cluster_nodes);
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1,a:1", NULL);
    CHECK_ERR(st, err, "redis.cluster_nodes", "a:1", "twice");
    st = load(&c, err, "--set", "redis.cluster_nodes=a", NULL);
    CHECK_ERR(st, err, "redis.cluster_nodes", "a", "host:port");
    /* an IPv6 host only in brackets, so the port is never ambiguous; no
     * leading zero; host names compare without case */
    static const char *const bad_seeds[] = {"::1:7000", "[::1:7000",   "[]:7000",
                                            "[x]:7000", "host:7000:1", "127.0.0.1:07000"};
    for (size_t i = 0; i < sizeof bad_seeds / sizeof *bad_seeds; i++) {
        char set[64];
        snprintf(set, sizeof set, "redis.cluster_nodes=%s", bad_seeds[i]);
        st = load(&c, err, "--set", set, NULL);
        CHECK_ERR(st, err, "redis.cluster_nodes", bad_seeds[i], "[addr]:port");
    }
    st = load(&c, err, "--set", "redis.cluster_nodes=node:1,NODE:1", NULL);
    CHECK_ERR(st, err, "redis.cluster_nodes", "NODE:1", "twice");
    /* one address an array element: none empty, none holding a list */
    static const char *const bad_arrays[] = {"[\"a:1,b:2\"]", "[\"\"]", "[\"a:1\",\"\"]"};
    for (size_t i = 0; i < sizeof bad_arrays / sizeof *bad_arrays; i++) {
        char json[96];
        snprintf(json, sizeof json, "{\"redis\":{\"cluster_nodes\":%s}}", bad_arrays[i]);
        p = write_file("cl.json", json);
        st = load(&c, err, "--config", p, NULL);
        CHECK_ERR(st, err, "redis.cluster_nodes", "element", "comma");
    }
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1", "--set", "redis.db=1", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.cluster_nodes") && has(err, "redis.db") &&
                 cfg_exit_code(st) == 2,
             "with redis.db 1: %s", err);
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1", "--set", "redis.sentinels=s:26379",
              NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.cluster_nodes") && has(err, "redis.sentinels") &&
                 cfg_exit_code(st) == 2,
             "with sentinels: %s", err);
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1", "--set", "redis.wait_replicas=all",
              NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.cluster_nodes") &&
                 has(err, "redis.wait_replicas"),
             "with wait_replicas all: %s", err);
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1", "--set", "redis.wait_replicas=1", NULL);
    TU_CHECK(st == CFG_OK, "with wait_replicas 1: %s", err);
    st = load(&c, err, "--set", "redis.cluster_refresh_ms=99", NULL);
    CHECK_ERR(st, err, "redis.cluster_refresh_ms", "99", "100..3600000");
    /* Redlock's masters independent of the cluster: a seed named in both
     * (host without case) is refused, naming both keys and the node */
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1,b:2,c:3", "--set",
              "redlock.nodes=x:1,y:1,B:2", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redlock.nodes") && has(err, "redis.cluster_nodes") &&
                 has(err, "B:2") && cfg_exit_code(st) == 2,
             "a redlock node that is a cluster seed: %s", err);
    st = load(&c, err, "--set", "redis.cluster_nodes=a:1,b:2,c:3", "--set",
              "redlock.nodes=a:2,b:3,c:4", NULL);
    TU_CHECK(st == CFG_OK, "redlock nodes apart from the seeds: %s", err);
}

/* redis.sentinels and the keys around it: a list of host:port, a master
 * name it needs, a WAIT timeout inside the command timeout. */
static void test_sentinel_keys(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st = load(&c, err, "--set", "redis.sentinels=127.0.0.1:26379,s2:26380", NULL);
    TU_CHECK(st == CFG_OK && strcmp(c.redis.master_name, "mymaster") == 0, "%s", err);
    st = load(&c, err, "--set", "redis.sentinels=127.0.0.1:26379", "--set",
              "redis.master_name=", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.master_name") && has(err, "redis.sentinels"),
             "empty master name: %s", err);
    st = load(&c, err, "--set", "redis.sentinels=a:1,a:1", NULL);
    CHECK_ERR(st, err, "redis.sentinels", "a:1", "twice");
    st = load(&c, err, "--set", "redis.sentinels=a:0", NULL);
    CHECK_ERR(st, err, "redis.sentinels", "a:0", "host:port");
    st = load(&c, err, "--set", "redis.sentinels=a:1,,b:2", NULL);
    CHECK_ERR(st, err, "redis.sentinels", "a:1,,b:2", "host:port");
    st = load(&c, err, "--set", "redis.sentinels=a:1 b:2", NULL);
    CHECK_ERR(st, err, "redis.sentinels", "a:1 b:2", "host:port");
    /* In the file, as a list of host:port (joined as the text form). */
    const char *p = write_file("sn.json", "{\"redis\":{\"sentinels\":[\"127.0.0.1:26379\","
                                          "\"s2:26380\"]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && strcmp(c.redis.sentinels, "127.0.0.1:26379,s2:26380") == 0,
             "sentinels as an array: %s / %s", err, c.redis.sentinels);
    p = write_file("sn2.json", "{\"redis\":{\"sentinels\":[\"a:1\",\"a:1\"]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.sentinels") && has(err, "twice"),
             "an array naming one twice: %s", err);
    p = write_file("sn3.json", "{\"redis\":{\"sentinels\":[\"a:1\",26380]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.sentinels") && has(err, "array of strings"),
             "an array with a number: %s", err);
    st = load(&c, err, "--set", "redis.wait_timeout_ms=2000", NULL);
    CHECK_ERR(st, err, "redis.wait_timeout_ms", "2000", "redis.command_timeout_ms");
    st = load(&c, err, "--set", "redis.wait_replicas=17", NULL);
    CHECK_ERR(st, err, "redis.wait_replicas", "17", "0..16");
    st = load(&c, err, "--set", "redis.wait_replicas=1", NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == 1 && c.redis.wait_timeout_ms == 100, "%s",
             err);
    /* all: every replica the master is known to have; in text, as a JSON
     * string, and back out of cfg_to_json as "all" */
    st = load(&c, err, "--set", "redis.wait_replicas=all", NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == CFG_WAIT_REPLICAS_ALL, "--set all: %s", err);
    TU_CHECK(cfg_validate(&c, err, sizeof err) == CFG_OK, "all validates: %s", err);
    char *j = cfg_to_json(&c, 0);
    TU_CHECK(j && has(j, "\"wait_replicas\":\"all\""), "to_json says all: %s", j ? j : "NULL");
    free(j);
    st = load(&c, err, "--set", "redis.wait_replicas=ALL", NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == CFG_WAIT_REPLICAS_ALL, "ALL: %s", err);
    st = load(&c, err, "--set", "redis.wait_replicas=al", NULL);
    CHECK_ERR(st, err, "redis.wait_replicas", "al", "0..16 or all");
    st = load(&c, err, "--set", "redis.wait_replicas=2147483647", NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == CFG_WAIT_REPLICAS_ALL,
             "the stored value is all in text too: %s", err);
    setenv("MIAOSHA_REDIS_WAIT_REPLICAS", "all", 1);
    st = load(&c, err, NULL);
    unsetenv("MIAOSHA_REDIS_WAIT_REPLICAS");
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == CFG_WAIT_REPLICAS_ALL, "env all: %s", err);
    p = write_file("wr1.json", "{\"redis\":{\"wait_replicas\":\"all\"}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == CFG_WAIT_REPLICAS_ALL, "file \"all\": %s",
             err);
    p = write_file("wr2.json", "{\"redis\":{\"wait_replicas\":2}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && c.redis.wait_replicas == 2, "file 2: %s", err);
    p = write_file("wr3.json", "{\"redis\":{\"wait_replicas\":\"two\"}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redis.wait_replicas") && has(err, "\"all\""),
             "file \"two\": %s", err);
}

/* redlock.nodes: the list's own rules, in the text form and as a JSON
 * array; each refusal names the key. */
static void test_redlock_nodes(void)
{
    cfg_config c;
    char err[CFG_ERR_LEN];
    cfg_status st;
    static const struct {
        const char *v, *why;
    } bad[] = {
        {"127.0.0.1:7001,127.0.0.1:7002", "not an odd count"},
        {"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004", "not an odd count"},
        {"127.0.0.1:7001", "not an odd count"},
        {"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7001", "twice"},
        {"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1", "not host:port"},
        {"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:0", "not host:port"},
        {"127.0.0.1:7001,,127.0.0.1:7003", "not host:port"},
        {"a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9,j:10,k:11", "more than 9"},
        {"a:1,b:2,c 3", "forbidden byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char kv[256];
        snprintf(kv, sizeof kv, "redlock.nodes=%s", bad[i].v);
        st = load(&c, err, "--set", kv, NULL);
        TU_CHECK(st == CFG_INVALID && has(err, "redlock.nodes") && has(err, bad[i].why),
                 "refused '%s': %s", bad[i].v, err);
    }
    st = load(&c, err, "--set", "redlock.nodes=127.0.0.1:7001,127.0.0.1:7002,h:7003", NULL);
    TU_CHECK(st == CFG_OK && strcmp(c.redlock.nodes, "127.0.0.1:7001,127.0.0.1:7002,h:7003") == 0,
             "3 nodes: %s", err);
    const char *p = write_file("rl.json", "{\"redlock\":{\"nodes\":[\"a:1\",\"b:2\",\"c:3\","
                                          "\"d:4\",\"e:5\"],\"restart_delay_ms\":5000}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_OK && strcmp(c.redlock.nodes, "a:1,b:2,c:3,d:4,e:5") == 0 &&
                 c.redlock.restart_delay_ms == 5000 && c.redlock.node_timeout_ms == 50,
             "a JSON array of 5: %s", err);
    p = write_file("rl2.json", "{\"redlock\":{\"nodes\":[\"a:1\",\"b:2\",\"a:1\"]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redlock.nodes") && has(err, "twice"),
             "a JSON array with a duplicate: %s", err);
    p = write_file("rl3.json", "{\"redlock\":{\"nodes\":[\"a:1\",2,\"c:3\"]}}");
    st = load(&c, err, "--config", p, NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redlock.nodes") && has(err, "array of strings"),
             "a JSON array with a number: %s", err);
    st = load(&c, err, "--set", "redlock.node_timeout_ms=0", NULL);
    TU_CHECK(st == CFG_INVALID && has(err, "redlock.node_timeout_ms"), "timeout 0: %s", err);
}

static void test_shipped_file(void)
{
    cfg_config c, d;
    char err[CFG_ERR_LEN];
    cfg_defaults(&d);
    cfg_status st = load(&c, err, "--config", shipped_path, NULL);
    TU_CHECK(st == CFG_OK, "%s: %s", shipped_path, err);
    /* Documented differences: instance_id is "" in the file, so a fresh UUID
     * is generated at load; config_path records the file. */
    TU_CHECK(same_settings(&c, &d), "config/miaosha.json differs from the defaults");
    TU_CHECK(strlen(c.instance_id) == 36, "instance id generated");

    /* The file is exactly the documented default output (as JSON values, so
     * formatting is free): regenerate it with config_test --print-example. */
    FILE *f = fopen(shipped_path, "rb");
    TU_REQUIRE(f != NULL, "open %s", shipped_path);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *expect = cfg_to_json(&d, CFG_JSON_PRETTY | CFG_JSON_DOC);
    cJSON *a = cJSON_Parse(buf), *b = cJSON_Parse(expect);
    TU_CHECK(a && b && cJSON_Compare(a, b, 1),
             "config/miaosha.json is out of date with the "
             "key table: run config_test --print-example > config/miaosha.json");
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(expect);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print-example") == 0) {
        cfg_config d;
        cfg_defaults(&d);
        char *j = cfg_to_json(&d, CFG_JSON_PRETTY | CFG_JSON_DOC);
        fputs(j, stdout);
        free(j);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/config/miaosha.json | --print-example\n", argv[0]);
        return 2;
    }
    shipped_path = argv[1];
    clear_miaosha_env();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/config_test.XXXXXX");
    /* TU_REQUIRE evaluates its condition twice: no side effects inside. */
    char *made = mkdtemp(tmpdir);
    TU_REQUIRE(made != NULL, "mkdtemp");

    test_defaults();
    test_load_no_sources();
    test_file();
    test_precedence();
    test_file_errors();
    test_env_errors();
    test_flag_errors();
    test_redis_flag();
    test_open_listen();
    test_exits();
    test_redlock_nodes();
    test_json_out();
    test_sentinel_keys();
    test_cluster_keys();
    test_shipped_file();

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return tu_done();
}
