/* fuzz_config.h — what the two cfg_load harnesses share: a clean
 * environment (no MIAOSHA_* variable may change what an input means), a
 * scratch file, and the checks every cfg_load result must pass. */
#ifndef MIAOSHA_FUZZ_CONFIG_H
#define MIAOSHA_FUZZ_CONFIG_H

#include <unistd.h>

#include "fuzz_common.h"
#include "miaosha_config.h"

extern char **environ;

/* Unsets every MIAOSHA_* variable (the test command exports some). */
static inline void fz_config_clean_env(void)
{
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; e && *e; e++) {
            if (strncmp(*e, "MIAOSHA_", 8) == 0) {
                char name[256];
                size_t n = strcspn(*e, "=");
                if (n >= sizeof name)
                    n = sizeof name - 1;
                memcpy(name, *e, n);
                name[n] = '\0';
                unsetenv(name);
                again = 1;
                break;
            }
        }
    }
}

/* A scratch file of its own per process, removed at exit. */
static char fz_path[64];
static void fz_config_unlink(void)
{
    if (fz_path[0])
        unlink(fz_path);
}
static inline const char *fz_config_file(void)
{
    if (fz_path[0] == '\0') {
        snprintf(fz_path, sizeof fz_path, "/tmp/miaosha-fuzz-cfg-XXXXXX");
        int fd = mkstemp(fz_path);
        FZ_CHECK(fd >= 0, "mkstemp for the scratch config file");
        close(fd);
        atexit(fz_config_unlink);
    }
    return fz_path;
}
static inline void fz_config_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    FZ_CHECK(f != NULL, "open the scratch config file");
    FZ_CHECK(len == 0 || fwrite(data, 1, len, f) == len, "write the scratch config file");
    fclose(f);
}

/* The checks after rc = cfg_load(c, ...): err terminated within errlen
 * (guarded), "" on success; a loaded config is valid and survives its own
 * JSON (cfg_to_json with secrets, loaded again, prints the same); a failed
 * load leaves the defaults. */
static inline void fz_config_check(cfg_status rc, const cfg_config *c, const char *err,
                                   size_t errlen)
{
    FZ_CHECK(rc == CFG_OK || rc == CFG_EXIT_HELP || rc == CFG_EXIT_VERSION ||
                 rc == CFG_EXIT_PRINT || rc == CFG_INVALID || rc == CFG_IO || rc == CFG_NOMEM,
             "status in cfg_status");
    fz_guard_check(err, errlen);
    FZ_CHECK(strcmp(cfg_status_name(rc), "?") != 0, "every status has a name");
    if (rc == CFG_OK || rc == CFG_EXIT_PRINT) {
        char e2[CFG_ERR_LEN];
        FZ_CHECK(err[0] == '\0', "err is \"\" on success");
        FZ_CHECK(cfg_validate(c, e2, sizeof e2) == CFG_OK, "a loaded config is valid");
        FZ_CHECK(c->instance_id[0] != '\0', "cfg_load fills an empty instance_id");
        char *j1 = cfg_to_json(c, CFG_JSON_SHOW_SECRETS);
        FZ_CHECK(j1 != NULL, "cfg_to_json");
        char path2[64];
        snprintf(path2, sizeof path2, "/tmp/miaosha-fuzz-rt-XXXXXX");
        int fd = mkstemp(path2);
        FZ_CHECK(fd >= 0, "mkstemp for the round trip");
        close(fd);
        fz_config_write(path2, j1, strlen(j1));
        char *argv[] = {(char *)"miaosha-server", (char *)"--config", path2, NULL};
        cfg_config c2;
        cfg_status rc2 = cfg_load(&c2, 3, argv, e2, sizeof e2);
        unlink(path2);
        if (rc2 != CFG_OK)
            fprintf(stderr, "round trip: %s: %s\n%s\n", cfg_status_name(rc2), e2, j1);
        FZ_CHECK(rc2 == CFG_OK, "cfg_to_json's output loads");
        char *j2 = cfg_to_json(&c2, CFG_JSON_SHOW_SECRETS);
        FZ_CHECK(j2 != NULL, "cfg_to_json");
        if (strcmp(j1, j2) != 0)
            fprintf(stderr, "first:\n%s\nround trip:\n%s\n", j1, j2);
        FZ_CHECK(strcmp(j1, j2) == 0, "a config survives its own JSON");
        free(j1);
        free(j2);
    } else if (rc == CFG_INVALID || rc == CFG_IO || rc == CFG_NOMEM) {
        cfg_config d;
        FZ_CHECK(err[0] != '\0', "a failure names its reason");
        cfg_defaults(&d);
        char *j1 = cfg_to_json(c, CFG_JSON_SHOW_SECRETS),
             *j2 = cfg_to_json(&d, CFG_JSON_SHOW_SECRETS);
        FZ_CHECK(j1 && j2 && strcmp(j1, j2) == 0, "a failed load leaves the defaults");
        free(j1);
        free(j2);
    }
}

#endif
