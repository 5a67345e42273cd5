/* lg_http.h — a minimal incremental HTTP/1.x response parser and a URL
 * parser, for the load generator's epoll client.
 *
 * The parser never allocates and never copies headers: it works on the
 * caller's receive buffer, which holds the bytes of one response from its
 * first byte on (the caller appends what read() returns and calls
 * lg_http_parse again). It understands what a load generator needs from
 * libmicrohttpd, nginx and friends: the status line, Content-Length,
 * Transfer-Encoding: chunked (decoded in place, so the body ends up
 * contiguous), Connection: close / keep-alive, and bodies delimited by the
 * end of the connection. Trailers after the last chunk are skipped. 1xx
 * interim responses are skipped. Responses to HEAD are not supported (the
 * load generator never sends HEAD).
 */
#ifndef MIAOSHA_LG_HTTP_H
#define MIAOSHA_LG_HTTP_H

#include <stddef.h>
#include <stdint.h>

typedef enum lg_http_rc {
    LG_HTTP_INCOMPLETE = 0, /* need more bytes */
    LG_HTTP_DONE = 1,       /* one full response is in the buffer */
    LG_HTTP_ERROR = -1      /* not a valid HTTP response */
} lg_http_rc;

typedef struct lg_http_parser {
    /* results, valid after LG_HTTP_DONE (status and keep_alive also once the
     * header is complete) */
    int status;      /* 100..999 */
    int keep_alive;  /* 1 when the connection may be reused */
    size_t body_off; /* body = buf + body_off, body_len bytes */
    size_t body_len;
    size_t consumed; /* bytes of buf that belong to this response (the
                        raw length, before chunk decoding); bytes after
                        it are the start of the next response */
    /* private state */
    int phase;        /* 0 header, 1 fixed body, 2 chunked, 3 until close,
                         4 done */
    int minor;        /* HTTP/1.minor */
    size_t skip;      /* bytes of skipped 1xx responses before this one */
    size_t hoff;      /* body offset after skip */
    size_t rconsumed; /* consumed, after skip */
    int64_t content_length;
    size_t scan;       /* header: where to resume looking for CRLFCRLF;
                          chunked: raw position of the next chunk header */
    size_t out;        /* chunked: decoded bytes written after body_off */
    size_t max_header; /* header bytes limit */
} lg_http_parser;

/* Starts a new response. max_header 0 means 64 KiB. */
void lg_http_parser_init(lg_http_parser *p, size_t max_header);

/* Parses buf[0..len) (all bytes of this response received so far; the
 * buffer may be modified by chunk decoding, in place, beyond body_off).
 * Returns LG_HTTP_DONE, LG_HTTP_INCOMPLETE or LG_HTTP_ERROR. */
lg_http_rc lg_http_parse(lg_http_parser *p, char *buf, size_t len);

/* The peer closed the connection after buf[0..len) arrived: completes a
 * body delimited by the connection's end. Returns LG_HTTP_DONE when the
 * response is complete, else LG_HTTP_ERROR (truncated). */
lg_http_rc lg_http_eof(lg_http_parser *p, char *buf, size_t len);

/* A parsed "http://host[:port][/prefix]" URL. host is a numeric IPv4
 * address, "localhost" (127.0.0.1) or a name, resolved to its first IPv4
 * address once, by lg_url_parse (getaddrinfo; it may block on DNS): a
 * compose service name such as "nginx" works. The prefix (without trailing
 * '/') is prepended to every path. */
typedef struct lg_url {
    char host[64];    /* as written */
    char ip[16];      /* dotted IPv4 */
    int port;         /* default 80 */
    char prefix[256]; /* "" or "/something" */
    char base[400];   /* "http://host:port/prefix" normalised */
} lg_url;

/* Parses and resolves url into *out (caller's storage). Returns 0, or -1
 * with a reason in err (errlen bytes): not http://, bad port, path prefix
 * too long, or a host that does not resolve to IPv4. Any thread (getaddrinfo
 * is thread-safe); may block for the resolver's timeout. */
int lg_url_parse(const char *url, lg_url *out, char *err, size_t errlen);

#endif
