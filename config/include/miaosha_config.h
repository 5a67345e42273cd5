/* miaosha_config.h — the one validated configuration of a miaosha process.
 *
 * Why a module of its own: every other part of the service (HTTP limits, the
 * Redis connection, the lock defaults handed to lockcore's lc_options, the teaching
 * fault switches) reads its settings from one plain struct that is filled and
 * checked once, before any thread starts, and is read-only afterwards. A bad
 * setting therefore stops the process at start with a message that names the
 * key, the value and the allowed range (exit status 2), never later in the
 * middle of a load test.
 *
 * Sources, lowest precedence first — a later source overrides an earlier one
 * key by key:
 *
 *   1. built-in defaults              (one table in src/config.c)
 *   2. the JSON file                  (--config FILE, else $MIAOSHA_CONFIG,
 *                                      else no file at all)
 *   3. MIAOSHA_* environment variables (MIAOSHA_<KEY>: the key's JSON path in
 *                                      upper case with '.' -> '_', e.g.
 *                                      redis.host -> MIAOSHA_REDIS_HOST)
 *   4. command-line flags, left to right (--port, --listen, --redis,
 *                                      --instance-id, --set key=value, ...)
 *
 * Every key has a JSON path ("lock.lease_ms"), a type, bounds and a default,
 * all in that one table; defaults, validation, environment names, --help,
 * cfg_to_json and config/miaosha.json all come from it. config/README.md lists
 * every key.
 *
 * The JSON file is strict JSON (cJSON), nested by section:
 *   {"listen":{"address":"127.0.0.1","port":8080,...},"redis":{...},
 *    "lock":{...},"faults":{"enabled":false},"admin_token":"",...}
 * Unknown keys are rejected, so a typo cannot silently fall back to a
 * default. Any key starting with '_' is a comment and ignored (config/
 * miaosha.json documents each key that way). Integers must be JSON numbers
 * with an integral value, booleans JSON true/false, strings JSON strings.
 * In the environment and on the command line every value is text:
 * integers in decimal, booleans as true/false/1/0/yes/no/on/off.
 *
 * Unknown MIAOSHA_* environment variables are NOT rejected: the test harness
 * and scripts set variables such as MIAOSHA_REDIS_SERVER or MIAOSHA_BUILD_DIR
 * that share the prefix. cfg_unknown_env lists them so the service can warn.
 *
 * The library never exits, never logs and never prints by itself: cfg_load
 * returns a status, and the caller prints --help / --version / the effective
 * config with cfg_print_help, cfg_print_version and cfg_to_json, then exits
 * with cfg_exit_code(status).
 *
 * Threads: cfg_load reads the environment (getenv), so call it from main()
 * before any thread starts. Every other function may be called from any
 * thread; the resulting cfg_config is plain data, safe to read from any
 * number of threads once nobody writes it.
 */
#ifndef MIAOSHA_CONFIG_H
#define MIAOSHA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of the string fields, in bytes including the terminating NUL. */
#define CFG_ADDR_LEN 64       /* numeric IPv4/IPv6 literal (INET6_ADDRSTRLEN 46) */
#define CFG_HOST_LEN 256      /* Redis host name or address */
#define CFG_SECRET_LEN 256    /* redis.password, admin_token */
#define CFG_SKU_LEN 65        /* [A-Za-z0-9_-]{1,64}, like the ?sku= parameter */
#define CFG_ID_LEN 64         /* instance id; = lockcore's LC_ID_LEN */
#define CFG_PATH_LEN 1024     /* the config file's path as given */
#define CFG_SENTINELS_LEN 512 /* redis.sentinels: up to 9 host:port */
#define CFG_NODES_LEN 512     /* redlock.nodes: "host:port,host:port,..." */
#define CFG_CLUSTER_LEN 512   /* redis.cluster_nodes: up to 9 host:port */

/* redis.wait_replicas = all: wait for every replica the master is known to
 * have, a replica that is down included (the service counts them:
 * service/README.md, "Redis Sentinel and replicas"). Stored as a value
 * above every replica count, so wait_replicas > 0 still reads "WAIT is on";
 * the text and JSON forms say "all". */
#define CFG_WAIT_REPLICAS_ALL 2147483647

/* A sensible caller buffer for cfg_load's err (messages are cut to fit). */
#define CFG_ERR_LEN 512

/* Status codes of cfg_load, cfg_set and cfg_validate. */
typedef enum cfg_status {
    CFG_OK = 0,           /* loaded and valid: run the service */
    CFG_EXIT_HELP = 1,    /* --help/-h was given: the caller prints
                             cfg_print_help(stdout) and exits 0. Nothing else
                             was loaded or checked. */
    CFG_EXIT_VERSION = 2, /* --version/-V: the caller prints
                             cfg_print_version(stdout) and exits 0. */
    CFG_EXIT_PRINT = 3,   /* --print-config: the configuration was loaded and
                             is valid (*c is filled as for CFG_OK); the caller
                             prints cfg_to_json(c, CFG_JSON_PRETTY) and exits 0 */
    CFG_INVALID = 4,      /* a bad key, value, type or flag: err names the key
                             (or flag), the value and the allowed range or
                             form. Exit status 2. */
    CFG_IO = 5,           /* the config file cannot be opened or read, is
                             not a regular file, or is larger than 1 MiB;
                             err names the path (and errno's text when the
                             open failed). Exit status 2. */
    CFG_NOMEM = 6         /* out of memory. Exit status 1. */
} cfg_status;

typedef enum cfg_log_level {
    CFG_LOG_ERROR = 0,
    CFG_LOG_WARN = 1,
    CFG_LOG_INFO = 2,
    CFG_LOG_DEBUG = 3
} cfg_log_level;

/* Every setting. The member path is the JSON path (c.lock.lease_ms is
 * "lock.lease_ms"). Each key's default, bounds and meaning are written in
 * one place, the key table of src/config.c, which cfg_defaults, the
 * checks, --help (cfg_print_help), config/README.md's key table and
 * config/miaosha.json all come from: look there, not here. Units are in
 * the names ("_ms" milliseconds, "_s" seconds, "_bytes" bytes). Plain data
 * with no pointers: copy it freely. */
typedef struct cfg_config {
    struct {
        char address[CFG_ADDR_LEN]; /* a numeric IPv4 or IPv6 address */
        int port;
        int max_connections;
        int connection_timeout_s;
        int64_t max_body_bytes;
        int max_uri_bytes;
        int max_header_bytes;
        bool allow_open;
    } listen;
    struct {
        int io_threads;
        int workers;
        int max_queue;
        int lua_batches; /* 0 = one per CPU */
    } server;
    struct {
        char host[CFG_HOST_LEN];
        int port;
        char password[CFG_SECRET_LEN]; /* masked in cfg_to_json */
        int db;
        int connect_timeout_ms;
        int command_timeout_ms;
        char sentinels[CFG_SENTINELS_LEN]; /* "host:port,host:port"; "" = none */
        char master_name[CFG_ID_LEN];
        int wait_replicas;
        int wait_timeout_ms;
        char cluster_nodes[CFG_CLUSTER_LEN]; /* "host:port,[v6]:port"; "" = none */
        int cluster_refresh_ms;
    } redis;
    struct {
        char sku[CFG_SKU_LEN];
        int64_t initial_stock;
        int64_t work_ms;
        int64_t max_work_ms;
        int max_reenter;
        bool pipeline;
        int64_t limit_per_user;
        int64_t idempotency_ttl_s;
        bool local_sold_out;
    } purchase;
    struct {
        int64_t lease_ms;
        int64_t wait_ms;
        int64_t retry_interval_ms;
        int64_t watchdog_timeout_ms;
        int64_t max_lease_ms;
        int64_t max_wait_ms;
    } lock;
    struct {
        char nodes[CFG_NODES_LEN]; /* "host:port,host:port"; "" = none */
        int node_timeout_ms;
        int64_t restart_delay_ms;
    } redlock;
    struct {
        bool enabled;
    } faults;
    struct {
        int max_steps;
        int step_timeout_s;
    } teach;
    struct {
        bool enabled;
        int ring_size;
        int max_skus;
    } trace;
    struct {
        int sku_gauges; /* SKUs with miaosha_stock & co. in /metrics; 0 = none */
        int refresh_ms; /* how often their audits are read from Redis */
    } metrics;
    struct {
        cfg_log_level level;
        bool access;
    } log;
    char admin_token[CFG_SECRET_LEN]; /* masked in cfg_to_json */
    char instance_id[CFG_ID_LEN];     /* never empty after cfg_load: an empty
                                         one is replaced by a fresh UUID */

    /* Not settings: where the values came from, filled by cfg_load. */
    char config_path[CFG_PATH_LEN]; /* the file loaded, "" when none */
} cfg_config;

/* Fills *c with the built-in defaults (instance_id and config_path empty).
 * Any thread. */
void cfg_defaults(cfg_config *c);

/* Builds the configuration: defaults, then the JSON file (--config FILE or
 * --config=FILE, else $MIAOSHA_CONFIG, else none), then every MIAOSHA_<KEY>
 * environment variable, then the flags in argv[1..argc-1] from left to
 * right, then the checks between keys (e.g. lock.lease_ms <=
 * lock.max_lease_ms), then an empty instance_id becomes a fresh libuuid.
 *
 * Flags (each takes "--flag VALUE" or "--flag=VALUE"; a VALUE that starts
 * with "--" only as "--flag=VALUE", since "--config --help" means a missing
 * value):
 *   --config FILE        the JSON file (given twice: CFG_INVALID)
 *   --port N             = --set listen.port=N
 *   --listen ADDR        = --set listen.address=ADDR
 *   --redis HOST:PORT    redis.host and redis.port; IPv6 as [ADDR]:PORT
 *   --instance-id ID     = --set instance_id=ID
 *   --set KEY=VALUE      any key by its JSON path; repeatable
 *   --print-config       load, validate, return CFG_EXIT_PRINT
 *   -h, --help           return CFG_EXIT_HELP at once, over a broken
 *                        config and the flags after it (a flag missing its
 *                        value before it: CFG_INVALID)
 *   -V, --version        return CFG_EXIT_VERSION at once (same rule; the
 *                        first of the two wins)
 * Positional arguments are rejected. argv is not modified; argc may be 0
 * (argv may then be NULL) for "defaults, file from $MIAOSHA_CONFIG, env";
 * a NULL argv or a negative argc counts as argc 0.
 *
 * *c is always overwritten: on CFG_OK and CFG_EXIT_PRINT with the result,
 * on any other status with the defaults. err (errlen bytes, may be NULL when
 * errlen is 0) receives "" on success or one line without a trailing
 * newline naming the source, key, value and allowed range, e.g.
 *   "MIAOSHA_LISTEN_PORT: listen.port = 70000 is out of range (allowed
 *    0..65535)".
 * Secrets (redis.password, admin_token) are never echoed in err: not as a
 * value of any type, nor in the excerpt after a JSON syntax error on a
 * line that names one.
 * Returns CFG_OK, CFG_EXIT_HELP, CFG_EXIT_VERSION, CFG_EXIT_PRINT,
 * CFG_INVALID, CFG_IO or CFG_NOMEM (see cfg_status).
 * Main thread, before other threads start (it reads the environment). */
cfg_status cfg_load(cfg_config *c, int argc, char **argv, char *err, size_t errlen);

/* Sets one key by its JSON path from text, exactly as --set KEY=VALUE does
 * (value parsed and checked against the key's type and bounds; checks
 * between keys are left to cfg_validate). On failure *c is unchanged.
 * Returns CFG_OK or CFG_INVALID (err names the key, value and bounds; an
 * unknown key gets a "did you mean" hint; a NULL key or value is
 * CFG_INVALID too). c must not be NULL. Any thread, on its own *c. */
cfg_status cfg_set(cfg_config *c, const char *key, const char *value, char *err, size_t errlen);

/* Checks every key's bounds and the rules between keys, e.g. after a caller
 * changed fields directly. An empty instance_id is valid here (cfg_load
 * fills it). Returns CFG_OK or CFG_INVALID with err as for cfg_load. Any
 * thread. */
cfg_status cfg_validate(const cfg_config *c, char *err, size_t errlen);

/* Flags for cfg_to_json. */
#define CFG_JSON_PRETTY                                                                            \
    0x1 /* indented with two spaces, one key per                                                   \
           line; else one line */
#define CFG_JSON_SHOW_SECRETS                                                                      \
    0x2 /* print redis.password and admin_token as                                                 \
           they are; else a non-empty secret is                                                    \
           "***" (an empty one stays "", so one can                                                \
           still see whether it is set) */
#define CFG_JSON_DOC                                                                               \
    0x4 /* before every key K add "_K": a one-line                                                 \
           description with its default, bounds and                                                \
           environment variable (the format of                                                     \
           config/miaosha.json) */

/* The settings as a nested JSON document in the file's format, every key
 * in table order, so the output (with CFG_JSON_SHOW_SECRETS) is itself a
 * loadable config file. config_path is not a setting and is not included.
 * Returns a NUL-terminated string from malloc that the caller releases with
 * free(), or NULL when out of memory. Any thread. */
char *cfg_to_json(const cfg_config *c, unsigned flags);

/* Writes the --help text to out: usage, every flag, then every key with its
 * environment variable, type, default and bounds, then the precedence.
 * Any thread. */
void cfg_print_help(FILE *out);

/* Writes "miaosha <version>\n" to out. Any thread. */
void cfg_print_version(FILE *out);

/* The project version ("0.1.0"), static storage. Any thread. */
const char *cfg_version(void);

/* The process exit status that goes with a cfg_load status: 0 for the
 * CFG_EXIT_* statuses, 2 for CFG_INVALID and CFG_IO, 1 for CFG_NOMEM, and
 * -1 for CFG_OK (meaning: do not exit, run); 1 for a value that is no
 * cfg_status. Any thread. */
int cfg_exit_code(cfg_status status);

/* "ok", "exit_help", "exit_version", "exit_print", "invalid", "io",
 * "nomem"; "?" out of range. Static storage. Any thread. */
const char *cfg_status_name(cfg_status status);

/* "error", "warn", "info", "debug"; "?" out of range. Static. Any thread. */
const char *cfg_log_level_name(cfg_log_level level);

/* Names of MIAOSHA_* environment variables that are neither a key's
 * variable nor MIAOSHA_CONFIG, comma-separated, into buf (len bytes, cut to
 * fit, "" when none), so the service can warn about a likely typo. Returns
 * how many there are. Reads the environment: main thread, like cfg_load. */
size_t cfg_unknown_env(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
