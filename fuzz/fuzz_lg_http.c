/* fuzz_lg_http.c — libFuzzer harness for the load generator's incremental
 * HTTP response parser (lg_http_parse, lg_http_eof). Input: byte 0 the
 * header limit (0 = the 64 KiB default, else 16..4096 bytes), byte 1 the
 * size of the pieces the incremental run receives (1..256), then the
 * bytes a server sent. Each input is parsed twice: at once, and piece by
 * piece as read() would hand it over (the connection's end after the last
 * byte in both). Checks: a done response has a final status (200..999),
 * keep_alive 0 or 1, a body inside what it consumed and consumed inside
 * the buffer; and both runs, when done, agree on status, keep-alive, the
 * lengths and the (chunk-decoded) body bytes. */
#include "fuzz_common.h"

#include "lg_http.h"

typedef struct run {
    lg_http_rc rc;
    lg_http_parser p;
    char *buf;
} run;

static void check_done(const run *r, size_t len)
{
    const lg_http_parser *p = &r->p;
    FZ_CHECK(p->status >= 200 && p->status <= 999, "final status 200..999 (1xx skipped)");
    FZ_CHECK(p->keep_alive == 0 || p->keep_alive == 1, "keep_alive is 0 or 1");
    FZ_CHECK(p->consumed <= len, "consumed within the buffer");
    FZ_CHECK(p->body_off >= 12 && p->body_off <= p->consumed, "body starts after a header");
    FZ_CHECK(p->body_len <= p->consumed - p->body_off, "decoded body within the raw bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t max_header = data[0] ? 16 + (size_t)data[0] * 16 : 0;
    size_t step = 1 + data[1];
    const uint8_t *in = data + 2;
    size_t len = size - 2;
    run once, piece;
    once.buf = malloc(len ? len : 1); /* exact: ASan sees an over-read */
    piece.buf = malloc(len ? len : 1);
    if (once.buf == NULL || piece.buf == NULL) {
        free(once.buf);
        free(piece.buf);
        return 0;
    }
    memcpy(once.buf, in, len);

    lg_http_parser_init(&once.p, max_header);
    once.rc = lg_http_parse(&once.p, once.buf, len);
    if (once.rc == LG_HTTP_INCOMPLETE)
        once.rc = lg_http_eof(&once.p, once.buf, len);

    lg_http_parser_init(&piece.p, max_header);
    piece.rc = LG_HTTP_INCOMPLETE;
    size_t have = 0;
    while (piece.rc == LG_HTTP_INCOMPLETE && have < len) {
        size_t n = len - have < step ? len - have : step;
        memcpy(piece.buf + have, in + have, n); /* what read() appends */
        have += n;
        piece.rc = lg_http_parse(&piece.p, piece.buf, have);
    }
    if (piece.rc == LG_HTTP_INCOMPLETE)
        piece.rc = lg_http_eof(&piece.p, piece.buf, have);

    FZ_CHECK(once.rc == LG_HTTP_DONE || once.rc == LG_HTTP_ERROR, "done or error at the end");
    FZ_CHECK(piece.rc == LG_HTTP_DONE || piece.rc == LG_HTTP_ERROR, "done or error at the end");
    if (once.rc == LG_HTTP_DONE)
        check_done(&once, len);
    if (piece.rc == LG_HTTP_DONE)
        check_done(&piece, have);
    if (once.rc == LG_HTTP_DONE && piece.rc == LG_HTTP_DONE) {
        FZ_CHECK(once.p.status == piece.p.status, "both runs agree on the status");
        FZ_CHECK(once.p.keep_alive == piece.p.keep_alive, "both runs agree on keep-alive");
        FZ_CHECK(once.p.body_off == piece.p.body_off, "both runs agree on the body offset");
        FZ_CHECK(once.p.consumed == piece.p.consumed, "both runs agree on consumed");
        FZ_CHECK(once.p.body_len == piece.p.body_len, "both runs agree on the body length");
        FZ_CHECK(
            memcmp(once.buf + once.p.body_off, piece.buf + piece.p.body_off, once.p.body_len) == 0,
            "both runs decode the same body");
    }
    free(once.buf);
    free(piece.buf);
    return 0;
}
