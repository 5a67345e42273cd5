/* fuzz_common.h — what every libFuzzer harness in fuzz/ shares: the entry
 * point's prototype (the build's -Wmissing-prototypes wants one) and a
 * contract check that aborts with the broken rule, so a violated header
 * promise is a crash libFuzzer saves as a reproducer, like a memory error. */
#ifndef MIAOSHA_FUZZ_COMMON_H
#define MIAOSHA_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FZ_CHECK(cond, what)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: contract broken: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A message buffer of dlen bytes followed by a guard: the callee must write
 * within dlen and terminate there. */
#define FZ_GUARD 16
static inline void fz_guard_init(char *buf, size_t dlen)
{
    memset(buf, 'G', dlen + FZ_GUARD);
}
static inline void fz_guard_check(const char *buf, size_t dlen)
{
    for (size_t i = dlen; i < dlen + FZ_GUARD; i++)
        FZ_CHECK(buf[i] == 'G', "message written past its dlen bytes");
    FZ_CHECK(memchr(buf, '\0', dlen) != NULL, "message not NUL-terminated within dlen");
}

#endif
