/* fuzz_config_args.c — libFuzzer harness for cfg_load's command line.
 * Input: byte 0 picks the shape, the rest is split on '\n' into strings.
 * Even: every string is a --set value (argv = prog --set s1 --set s2 ...),
 * the path most inputs take. Odd: the strings are argv as they are (flags,
 * "--flag=value", missing values, positionals). Inputs that name a file
 * (--config) are skipped: a path such as /dev/stdin would block, and the
 * file reader has its own harness. The checks are fz_config_check's. */
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
    enum { MAXA = 64 };
    char *argv[2 * MAXA + 2];
    char err[CFG_ERR_LEN + FZ_GUARD];
    int argc = 0;
    if (size < 1)
        return 0;
    int raw = data[0] & 1;
    size_t errlen = (data[0] & 2) ? 1 + data[0] % 64 : CFG_ERR_LEN; /* short buffers too */
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    argv[argc++] = (char *)"miaosha-server";
    for (char *p = text; argc < 2 * MAXA;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(p, "--config") != NULL) {
            free(text);
            return 0;
        }
        if (!raw)
            argv[argc++] = (char *)"--set";
        argv[argc++] = p;
        if (!nl)
            break;
        p = nl + 1;
    }
    argv[argc] = NULL;

    char *copy[2 * MAXA + 2];
    memcpy(copy, argv, sizeof copy);
    cfg_config c;
    fz_guard_init(err, errlen);
    cfg_status rc = cfg_load(&c, argc, argv, err, errlen);
    for (int i = 0; i < argc; i++)
        FZ_CHECK(argv[i] == copy[i], "argv is not modified");
    FZ_CHECK(rc != CFG_IO, "no file was named");
    if (!raw)
        FZ_CHECK(rc == CFG_OK || rc == CFG_INVALID, "--set values: ok or invalid");
    if (errlen == CFG_ERR_LEN) {
        fz_config_check(rc, &c, err, errlen);
    } else {
        fz_guard_check(err, errlen);
    }
    free(text);
    return 0;
}
