/* test_lc_slots.c — Redis Cluster's key slots and redirect replies, no
 * server: the CRC16 and hash-tag vectors of the cluster specification, and
 * MOVED / ASK parsing with IPv4, IPv6 (bare and bracketed), an empty host
 * and the malformed forms a client must not follow; the reentrant lock's
 * channel in its key's slot. */
#include <string.h>

#include "lc_cluster.h"
#include "tu.h"

static int slot(const char *key)
{
    return lc_key_slot(key, strlen(key));
}

static void test_slots(void)
{
    /* The specification's CRC16 check value: "123456789" -> 0x31C3. */
    TU_CHECK(slot("123456789") == (0x31C3 & 16383), "crc16(\"123456789\") = 0x31C3 (slot %d)",
             slot("123456789"));
    TU_CHECK(slot("{user1000}.following") == slot("{user1000}.followers"),
             "{user1000}.following and .followers share a slot");
    TU_CHECK(slot("{user1000}.following") == slot("user1000"), "the tag alone decides");
    TU_CHECK(slot("foo{}{bar}") == lc_key_slot("foo{}{bar}", 10) &&
                 slot("foo{}{bar}") != slot("bar"),
             "foo{}{bar}: an empty tag hashes the whole key");
    TU_CHECK(slot("foo{{bar}}zap") == slot("{bar"), "foo{{bar}}zap hashes \"{bar\"");
    TU_CHECK(slot("foo{bar}{zap}") == slot("bar"), "foo{bar}{zap} hashes \"bar\": the first tag");
    TU_CHECK(slot("foo{bar") == lc_key_slot("foo{bar", 7) && slot("foo{bar") != slot("bar"),
             "an unclosed tag hashes the whole key");
    TU_CHECK(slot("miaosha:{demo}:stock") == slot("miaosha:{demo}:lock:token"),
             "a SKU's keys share its slot");
    for (int i = 0; i < 1000; i++) {
        char k[32];
        int n = snprintf(k, sizeof k, "key:%d", i);
        int s = lc_key_slot(k, (size_t)n);
        if (s < 0 || s > 16383)
            TU_CHECK(0, "slot of %s in 0..16383 (%d)", k, s);
    }
    TU_CHECK(lc_key_slot("", 0) == 0, "the empty key: slot 0");
    TU_CHECK(lc_key_slot("a\0b", 3) != lc_key_slot("a", 1), "binary keys count every byte");
}

/* The reentrant lock's channel lies in its key's slot, Redisson's name
 * kept where it does. */
static void test_channels(void)
{
    char ch[128];
    lc__channel_name("p", "m:{sku}:lock", ch, sizeof ch);
    TU_CHECK(!strcmp(ch, "p:m:{sku}:lock"), "a tag: prefixName kept (%s)", ch);
    lc__channel_name("p", "plain", ch, sizeof ch);
    TU_CHECK(!strcmp(ch, "p:{plain}"), "no tag: the key wrapped (%s)", ch);
    const char *keys[] = {"m:{sku}:lock", "plain", "a{b", "a{}b", "a}b", "{}", "}{", "x{}{y}"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        lc__channel_name("p", keys[i], ch, sizeof ch);
        TU_CHECK(slot(ch) == slot(keys[i]) && strstr(ch, keys[i]), "%s: channel %s, one slot",
                 keys[i], ch);
    }
}

static void redirect_ok(const char *text, lc__redir_kind kind, int s, const char *host, int port)
{
    lc__redirect r;
    int rc = lc__redirect_parse(text, strlen(text), &r);
    TU_CHECK(rc == 0 && r.kind == kind && r.slot == s && strcmp(r.host, host) == 0 &&
                 r.port == port,
             "\"%s\" -> %s %d \"%s\" %d (rc %d: %d \"%s\" %d)", text,
             kind == LC__REDIR_MOVED ? "MOVED" : "ASK", s, host, port, rc, r.slot, r.host, r.port);
}

static void redirect_bad(const char *text)
{
    lc__redirect r;
    TU_CHECK(lc__redirect_parse(text, strlen(text), &r) == -1, "\"%s\" is no redirect", text);
}

static void test_redirects(void)
{
    redirect_ok("MOVED 3999 127.0.0.1:6381", LC__REDIR_MOVED, 3999, "127.0.0.1", 6381);
    redirect_ok("ASK 3999 127.0.0.1:6381", LC__REDIR_ASK, 3999, "127.0.0.1", 6381);
    redirect_ok("MOVED 0 10.0.0.2:7000", LC__REDIR_MOVED, 0, "10.0.0.2", 7000);
    redirect_ok("MOVED 16383 h.example:65535", LC__REDIR_MOVED, 16383, "h.example", 65535);
    redirect_ok("MOVED 12 2001:db8::1:6379", LC__REDIR_MOVED, 12, "2001:db8::1", 6379);
    redirect_ok("ASK 12 [::1]:6380", LC__REDIR_ASK, 12, "::1", 6380);
    redirect_ok("MOVED 3999 :6380", LC__REDIR_MOVED, 3999, "", 6380);
    redirect_bad("MOVED");
    redirect_bad("MOVED 3999");
    redirect_bad("MOVED 3999 127.0.0.1");
    redirect_bad("MOVED 16384 127.0.0.1:6381");
    redirect_bad("MOVED -1 127.0.0.1:6381");
    redirect_bad("MOVED x 127.0.0.1:6381");
    redirect_bad("MOVED 1 127.0.0.1:0");
    redirect_bad("MOVED 1 127.0.0.1:65536");
    redirect_bad("MOVED 1 127.0.0.1:");
    redirect_bad("ASKING");
    redirect_bad("TRYAGAIN Multiple keys request during rehashing of slot");
    redirect_bad("CLUSTERDOWN The cluster is down");
    redirect_bad("ERR unknown command");
    /* Only len bytes count: the same text cut before the port. */
    lc__redirect r;
    TU_CHECK(lc__redirect_parse("MOVED 1 h:6380", 10, &r) == -1, "cut at len, before the port");
    TU_CHECK(lc__redirect_parse("MOVED 1 h:6380", 11, &r) == 0 && r.port == 6, "cut inside it");
}

int main(void)
{
    test_slots();
    test_channels();
    test_redirects();
    return tu_done();
}
