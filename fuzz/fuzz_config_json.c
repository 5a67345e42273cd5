/* fuzz_config_json.c — libFuzzer harness for cfg_load on a JSON file
 * (--config FILE): the input is the file, written to a scratch path each
 * run (cfg_load has no in-memory entry). Checks in fuzz_config.h: a status
 * from the set, err terminated, a loaded config valid and equal to itself
 * after a round trip through cfg_to_json, a failure leaving the defaults. */
#include "fuzz_config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_config_clean_env();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[CFG_ERR_LEN + FZ_GUARD];
    const char *path = fz_config_file();
    fz_config_write(path, data, size);
    char *argv[] = {(char *)"miaosha-server", (char *)"--config", (char *)path, NULL};
    cfg_config c;
    fz_guard_init(err, CFG_ERR_LEN);
    cfg_status rc = cfg_load(&c, 3, argv, err, CFG_ERR_LEN);
    FZ_CHECK(rc == CFG_OK || rc == CFG_INVALID, "a readable small file: ok or invalid");
    fz_config_check(rc, &c, err, CFG_ERR_LEN);
    if (rc == CFG_OK)
        FZ_CHECK(strcmp(c.config_path, path) == 0, "config_path names the file loaded");
    return 0;
}
