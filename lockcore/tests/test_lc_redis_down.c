/* test_lc_redis_down — Redis stopped, paused and restarted under the lock
 * core: acquire answers LC_IO within the configured timeout, never a
 * hang or a crash, and the same handles work again once Redis is back. Uses
 * a private redis-server so the rest of the suite is undisturbed. */
#include "lc_test.h"

#include <signal.h>

int main(void)
{
    tu_redis r;
    memset(&r, 0, sizeof r);
    TU_REQUIRE(tu_redis_start(&r, 0, NULL) == 0, "private redis-server");
    lc_client *cli = lct_client_t(r.port, 1000, 500); /* timeouts 500 ms */
    lc_conn *conn = lct_conn(cli);
    const lc_mode modes[] = {LC_SETNX, LC_TOKEN, LC_REENTRANT};
    lc_guard *g;

    for (int i = 0; i < 3; i++) {
        lc_lock_args a = lct_args(modes[i], "down:{x}:lock", "o", 1000, 0);
        TU_CHECK(lc_acquire(conn, &a, &g) == LC_OK && lc_release(conn, g) == LC_OK, "%s up",
                 lc_mode_name(modes[i]));
    }

    /* stopped: connection refused, answered at once */
    tu_redis_kill(&r, 1);
    for (int i = 0; i < 3; i++) {
        lc_lock_args a = lct_args(modes[i], "down:{x}:lock", "o", 1000, 2000);
        int64_t t0 = lc_now_ms();
        lc_status s = lc_acquire(conn, &a, &g);
        int64_t took = lc_now_ms() - t0;
        TU_CHECK(s == LC_IO && g == NULL, "%s down: %s", lc_mode_name(modes[i]), lc_status_name(s));
        TU_CHECK(took <= tu_slack(600), "%s down: answered in %lld ms", lc_mode_name(modes[i]),
                 (long long)took);
        TU_CHECK(lc_conn_errstr(conn)[0] != 0, "errstr set: %s", lc_conn_errstr(conn));
    }
    TU_CHECK(lc_conn_ping(conn) == LC_IO, "ping down");

    /* back on the same port: the same handle works again */
    TU_REQUIRE(tu_redis_start(&r, 1, NULL) == 0, "restart");
    for (int i = 0; i < 3; i++) {
        lc_lock_args a = lct_args(modes[i], "down:{x}:lock", "o", 1000, 0);
        lc_status s = lc_acquire(conn, &a, &g);
        TU_CHECK(s == LC_OK, "%s after restart: %s (%s)", lc_mode_name(modes[i]), lc_status_name(s),
                 lc_conn_errstr(conn));
        if (s == LC_OK)
            TU_CHECK(lc_release(conn, g) == LC_OK, "release after restart");
    }

    /* restarted while the handle sat idle: the old socket is dead but
     * nothing has told the handle yet. Its next call must not pay for that
     * with an error (every idle worker would answer one 503 after a Redis
     * restart): the handle notices the closed socket before sending. */
    tu_redis_kill(&r, 0);
    TU_REQUIRE(tu_redis_start(&r, 1, NULL) == 0, "restart while idle");
    for (int i = 0; i < 3; i++) {
        lc_lock_args a = lct_args(modes[i], "down:{x}:lock", "o", 1000, 0);
        lc_status s = lc_acquire(conn, &a, &g);
        TU_CHECK(s == LC_OK, "%s first call after an idle restart: %s (%s)", lc_mode_name(modes[i]),
                 lc_status_name(s), lc_conn_errstr(conn));
        if (s == LC_OK)
            lc_release(conn, g);
    }

    /* paused (SIGSTOP): the command timeout bounds the wait */
    lc_lock_args a = lct_args(LC_TOKEN, "down:{x}:lock", "o", 1000, 0);
    kill(r.pid, SIGSTOP);
    int64_t t0 = lc_now_ms();
    lc_status s = lc_acquire(conn, &a, &g);
    int64_t took = lc_now_ms() - t0;
    kill(r.pid, SIGCONT);
    TU_CHECK(s == LC_IO, "paused: %s", lc_status_name(s));
    TU_CHECK(took >= 450 && took <= tu_slack(800), "paused: answered after %lld ms (timeout 500)",
             (long long)took);
    /* The timed-out SET NX PX was still executed once Redis resumed: a
     * lock nobody holds. The orphan cleanup gives it back as soon as Redis
     * answers it (test_lc_orphan.c holds that to 1 s); the wait here also
     * covers its lease, the bound that holds without the cleanup. */
    a.wait_ms = 1500;
    s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_OK, "resumed (after the orphan's lease): %s", lc_status_name(s));
    if (s == LC_OK)
        lc_release(conn, g);
    lc_stats st;
    lc_client_stats(cli, &st);
    TU_CHECK(st.io_errors >= 4, "io errors counted: %llu", (unsigned long long)st.io_errors);

    lc_conn_free(conn);
    lc_client_free(cli);
    tu_redis_stop(&r);
    return tu_done();
}
