/* test_service_config.c — configuration errors stop the server at start
 * with exit status 2 and a message naming the key; --help and --version
 * exit 0; a config file is honoured. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_test.h"

static void expect_invalid(const char *const *args, const char *needle)
{
    char out[8192];
    int rc = svc_run_exit(args, 5000, out, sizeof out);
    TU_CHECK(rc == 2, "%s: exit %d, want 2 (%s)", args[0], rc, out);
    TU_CHECK(strstr(out, needle) != NULL, "%s: message names '%s': %s", args[1] ? args[1] : args[0],
             needle, out);
}

int main(void)
{
    char out[65536];
    {
        const char *a[] = {"--port", "70000", NULL};
        expect_invalid(a, "listen.port");
    }
    {
        const char *a[] = {"--set", "lock.lease_ms=0", NULL};
        expect_invalid(a, "lock.lease_ms");
    }
    {
        const char *a[] = {"--set", "server.workers=0", NULL};
        expect_invalid(a, "server.workers");
    }
    {
        const char *a[] = {"--set", "no.such_key=1", NULL};
        expect_invalid(a, "no.such_key");
    }
    {
        /* Not loopback and no admin_token: refused before anything binds
         * (port 0, in case it were not). */
        const char *a[] = {"--listen", "0.0.0.0", "--port", "0", NULL};
        expect_invalid(a, "listen.allow_open");
        expect_invalid(a, "admin_token");
    }
    {
        const char *a[] = {"--set", "purchase.sku=bad sku!", NULL};
        expect_invalid(a, "purchase.sku");
    }
    {
        const char *a[] = {"--set", "purchase.limit_per_user=1000001", NULL};
        expect_invalid(a, "purchase.limit_per_user");
        const char *b[] = {"--set", "purchase.idempotency_ttl_s=0", NULL};
        expect_invalid(b, "purchase.idempotency_ttl_s");
        const char *c[] = {"--set", "purchase.local_sold_out=maybe", NULL};
        expect_invalid(c, "purchase.local_sold_out");
    }
    {
        const char *a[] = {"--redis", "nohostport", NULL};
        expect_invalid(a, "redis");
    }
    {
        const char *a[] = {"--bogus-flag", NULL};
        expect_invalid(a, "bogus");
    }
    {
        char path[] = "/tmp/miaosha-cfg-XXXXXX";
        int fd = mkstemp(path);
        const char *bad = "{\"listen\":{\"port\":8080,\"colour\":\"red\"}}";
        TU_CHECK(write(fd, bad, strlen(bad)) > 0, "write config");
        close(fd);
        const char *a[] = {"--config", path, NULL};
        expect_invalid(a, "colour");
        unlink(path);
    }
    {
        const char *a[] = {"--config", "/nonexistent/miaosha.json", NULL};
        expect_invalid(a, "/nonexistent/miaosha.json");
    }
    {
        /* a flag is not a value: not a config file named "--help" */
        const char *a[] = {"--config", "--help", NULL};
        expect_invalid(a, "needs a value");
    }
    {
        const char *a[] = {"--set", "redis.pool_size=8", NULL};
        expect_invalid(a, "redis.pool_size");
    }
    {
        const char *a[] = {"--set", "listen.max_uri_bytes=9000", NULL};
        expect_invalid(a, "half of listen.max_header_bytes");
    }
    {
        const char *a[] = {"--help", NULL};
        TU_CHECK(svc_run_exit(a, 5000, out, sizeof out) == 0, "--help exits 0");
        TU_CHECK(strstr(out, "--port") != NULL, "--help lists flags");
    }
    {
        /* --print-config names an unknown MIAOSHA_* variable as a start
         * does (a likely typo), and still exits 0 */
        setenv("MIAOSHA_LOCK_LEASEMS", "5", 1);
        const char *a[] = {"--print-config", NULL};
        int rc = svc_run_exit(a, 5000, out, sizeof out);
        unsetenv("MIAOSHA_LOCK_LEASEMS");
        TU_CHECK(rc == 0 && strstr(out, "\"lease_ms\"") != NULL &&
                     strstr(out, "ignoring unknown environment variables: ") &&
                     strstr(out, "MIAOSHA_LOCK_LEASEMS"),
                 "--print-config with a typo in the environment: exit %d: %s", rc, out);
    }
    {
        const char *a[] = {"--version", NULL};
        TU_CHECK(svc_run_exit(a, 5000, out, sizeof out) == 0, "--version exits 0");
        TU_CHECK(strstr(out, "miaosha") != NULL, "--version: %s", out);
    }
    /* A config file with a custom default SKU and initial stock is used. */
    {
        char path[] = "/tmp/miaosha-cfg-XXXXXX";
        int fd = mkstemp(path);
        const char *cfg = "{\"purchase\":{\"sku\":\"cfgsku\",\"initial_stock\":7},"
                          "\"instance_id\":\"from-file\"}";
        TU_CHECK(write(fd, cfg, strlen(cfg)) > 0, "write config");
        close(fd);
        int rport = tu_redis_port();
        tu_redis_int(rport,
                     "DEL miaosha:{cfgsku}:stock miaosha:{cfgsku}:initial miaosha:{cfgsku}:sold");
        svc_server s;
        const char *extra[] = {"--config", path, NULL};
        TU_REQUIRE(svc_start(&s, rport, extra) == 0, "server with config file");
        svc_resp r = {0};
        svc_req(&s, "GET", "/miaosha/token", NULL, NULL, &r);
        TU_CHECK(r.status == 200 && svc_jstr(r.json, "sku") &&
                     !strcmp(svc_jstr(r.json, "sku"), "cfgsku"),
                 "default sku from file: %s", B(&r));
        TU_CHECK(svc_jnum(r.json, "stock_left") == 6, "seeded with 7: %s", B(&r));
        TU_CHECK(svc_jstr(r.json, "instance") && !strcmp(svc_jstr(r.json, "instance"), "from-file"),
                 "instance id from file");
        svc_resp_free(&r);
        TU_CHECK(svc_stop(&s, 6000) == 0, "exit 0");
        /* A restart does not reseed a running sale. */
        TU_REQUIRE(svc_start(&s, rport, extra) == 0, "restart");
        svc_audit a;
        svc_get_audit(&s, "cfgsku", &a);
        TU_CHECK(a.stock == 6 && a.sold == 1, "not reseeded: stock %lld", a.stock);
        TU_CHECK(svc_stop(&s, 6000) == 0, "exit 0");
        unlink(path);
    }
    /* The port is taken: exit 1 with a message, not a hang. */
    {
        svc_server s;
        TU_REQUIRE(svc_start(&s, tu_redis_port(), NULL) == 0, "server");
        char port[16];
        snprintf(port, sizeof port, "%d", s.port);
        const char *a[] = {"--listen", "127.0.0.1", "--port", port, NULL};
        TU_CHECK(svc_run_exit(a, 5000, out, sizeof out) == 1, "port in use exits 1");
        TU_CHECK(strstr(out, "cannot listen") != NULL, "says why: %s", out);
        TU_CHECK(svc_stop(&s, 6000) == 0, "exit 0");
    }
    return tu_done();
}
