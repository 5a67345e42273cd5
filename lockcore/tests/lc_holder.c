/* lc_holder — a separate process that takes a lock and then dies on cue,
 * for the tests that need a holder to be SIGKILLed or to crash between two
 * commands (forking a threaded test process would be unsafe).
 *
 *   lc_holder PORT MODE KEY WATCHDOG_MS LEASE_MS [crash_before_expire]
 *
 * Prints "acquired\n" on stdout once it holds the lock, then sleeps until
 * killed. With crash_before_expire (setnx) it _exit(0)s between SETNX and
 * PEXPIRE, through lockcore's test hook (lc_testhooks.h). */
#include "lc_testhooks.h"
#include "lockcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void crash(void *arg)
{
    (void)arg;
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    lc_options o;
    lc_options_init(&o);
    o.redis_port = atoi(argv[1]);
    o.watchdog_timeout_ms = atoll(argv[4]);
    lc_client *c;
    char err[256];
    if (lc_client_new(&o, &c, err, sizeof err) != LC_OK)
        return 3;
    lc_conn *conn;
    if (lc_conn_new(c, &conn) != LC_OK)
        return 3;
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    if (lc_mode_parse(argv[2], &a.mode) != 0)
        return 2;
    a.key = argv[3];
    a.owner = "holder";
    a.lease_ms = atoll(argv[5]);
    if (argc > 6 && strcmp(argv[6], "crash_before_expire") == 0)
        lc__hook_after_setnx(crash, NULL);
    lc_guard *g;
    if (lc_acquire(conn, &a, &g) != LC_OK)
        return 4;
    printf("acquired\n");
    fflush(stdout);
    for (;;)
        pause();
}
