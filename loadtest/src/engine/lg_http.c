/* lg_http.c — see lg_http.h. */
#include "lg_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void lg_http_parser_init(lg_http_parser *p, size_t max_header)
{
    memset(p, 0, sizeof *p);
    p->content_length = -1;
    p->max_header = max_header ? max_header : 65536;
}

/* Case-insensitive: does the header value contain token tok (comma list)? */
static int value_has_token(const char *v, size_t vlen, const char *tok)
{
    size_t tl = strlen(tok);
    size_t i = 0;
    while (i < vlen) {
        while (i < vlen && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < vlen && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == tl && strncasecmp(v + s, tok, tl) == 0)
            return 1;
    }
    return 0;
}

/* Parses the header block buf[0..hend) (hend points after CRLFCRLF). */
static lg_http_rc parse_header(lg_http_parser *p, const char *buf, size_t hend)
{
    /* status line: HTTP/1.x SP ddd [SP reason] CRLF */
    if (hend < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)buf[7]) ||
        buf[8] != ' ')
        return LG_HTTP_ERROR;
    p->minor = buf[7] - '0';
    if (!isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) ||
        !isdigit((unsigned char)buf[11]) || buf[9] == '0')
        return LG_HTTP_ERROR;
    p->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    if (hend > 12 && buf[12] != ' ' && buf[12] != '\r')
        return LG_HTTP_ERROR;
    int chunked = 0, conn_close = 0, conn_keep = 0;
    int64_t clen = -1;
    const char *line = memchr(buf, '\n', hend);
    if (!line)
        return LG_HTTP_ERROR;
    line++;
    const char *end = buf + hend;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl)
            return LG_HTTP_ERROR;
        size_t ll = (size_t)(nl - line);
        if (ll > 0 && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break; /* the empty line */
        const char *colon = memchr(line, ':', ll);
        if (!colon || colon == line)
            return LG_HTTP_ERROR;
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vlen = ll - nlen - 1;
        while (vlen && (*v == ' ' || *v == '\t')) {
            v++;
            vlen--;
        }
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
        if (nlen == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
            if (vlen == 0 || vlen > 18)
                return LG_HTTP_ERROR;
            int64_t n = 0;
            for (size_t i = 0; i < vlen; i++) {
                if (!isdigit((unsigned char)v[i]))
                    return LG_HTTP_ERROR;
                n = n * 10 + (v[i] - '0');
            }
            if (clen >= 0 && clen != n)
                return LG_HTTP_ERROR; /* conflicting lengths */
            clen = n;
        } else if (nlen == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
            if (value_has_token(v, vlen, "chunked"))
                chunked = 1;
            else
                return LG_HTTP_ERROR; /* other codings are not supported */
        } else if (nlen == 10 && strncasecmp(line, "Connection", 10) == 0) {
            if (value_has_token(v, vlen, "close"))
                conn_close = 1;
            if (value_has_token(v, vlen, "keep-alive"))
                conn_keep = 1;
        }
        line = nl + 1;
    }
    p->keep_alive = p->minor >= 1 ? !conn_close : (conn_keep && !conn_close);
    p->hoff = hend;
    if (p->status == 204 || p->status == 304 || (p->status >= 100 && p->status < 200)) {
        p->phase = 4;
        p->body_len = 0;
        p->rconsumed = hend;
    } else if (chunked) {
        p->phase = 2;
        p->scan = hend;
        p->out = 0;
    } else if (clen >= 0) {
        p->phase = 1;
        p->content_length = clen;
    } else {
        p->phase = 3;
        p->keep_alive = 0; /* the body ends with the connection */
    }
    return LG_HTTP_INCOMPLETE;
}

/* Decodes as many whole chunks as buf holds. */
static lg_http_rc parse_chunks(lg_http_parser *p, char *buf, size_t len)
{
    for (;;) {
        size_t pos = p->scan;
        /* chunk-size [; ext] CRLF */
        const char *nl = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        if (!nl) {
            if (len - pos > 1024)
                return LG_HTTP_ERROR;
            return LG_HTTP_INCOMPLETE;
        }
        size_t i = pos;
        uint64_t size = 0;
        int digits = 0;
        while (i < len && isxdigit((unsigned char)buf[i])) {
            char c = buf[i];
            int d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
            if (++digits > 15)
                return LG_HTTP_ERROR;
            size = size * 16 + (uint64_t)d;
            i++;
        }
        if (digits == 0)
            return LG_HTTP_ERROR;
        size_t data = (size_t)(nl - buf) + 1;
        if (size == 0) {
            /* last chunk: trailers until an empty line */
            size_t t = data;
            for (;;) {
                const char *e = t < len ? memchr(buf + t, '\n', len - t) : NULL;
                if (!e) {
                    if (len - t > 8192)
                        return LG_HTTP_ERROR;
                    return LG_HTTP_INCOMPLETE;
                }
                size_t ll = (size_t)(e - (buf + t));
                if (ll == 0 || (ll == 1 && buf[t] == '\r')) {
                    p->rconsumed = (size_t)(e - buf) + 1;
                    p->body_len = p->out;
                    p->phase = 4;
                    return LG_HTTP_DONE;
                }
                t = (size_t)(e - buf) + 1;
            }
        }
        if (size > (uint64_t)1 << 40)
            return LG_HTTP_ERROR;
        /* data, then CRLF */
        if (len < data + size + 2) {
            if (len >= data + size + 1 && buf[data + size] != '\r' && buf[data + size] != '\n')
                return LG_HTTP_ERROR;
            return LG_HTTP_INCOMPLETE;
        }
        size_t after;
        if (buf[data + size] == '\r' && buf[data + size + 1] == '\n')
            after = data + size + 2;
        else if (buf[data + size] == '\n')
            after = data + size + 1;
        else
            return LG_HTTP_ERROR;
        memmove(buf + p->hoff + p->out, buf + data, (size_t)size);
        p->out += (size_t)size;
        p->scan = after;
    }
}

static lg_http_rc parse_rel(lg_http_parser *p, char *buf, size_t len);

/* Publishes the absolute offsets once the response is complete. */
static lg_http_rc publish(lg_http_parser *p, lg_http_rc rc)
{
    if (rc == LG_HTTP_DONE) {
        p->body_off = p->skip + p->hoff;
        p->consumed = p->skip + p->rconsumed;
    }
    return rc;
}

lg_http_rc lg_http_parse(lg_http_parser *p, char *buf, size_t len)
{
    if (len < p->skip)
        return LG_HTTP_ERROR;
    return publish(p, parse_rel(p, buf + p->skip, len - p->skip));
}

static lg_http_rc parse_rel(lg_http_parser *p, char *buf, size_t len)
{
    for (;;) {
        if (p->phase == 0) {
            size_t from = p->scan >= 3 ? p->scan - 3 : 0;
            const char *hit = NULL;
            for (size_t i = from; i + 1 < len; i++) {
                if (buf[i] == '\n') {
                    if (buf[i + 1] == '\n') {
                        hit = buf + i + 2;
                        break;
                    }
                    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') {
                        hit = buf + i + 3;
                        break;
                    }
                }
            }
            if (!hit) {
                p->scan = len;
                if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0)
                    return LG_HTTP_ERROR;
                return len > p->max_header ? LG_HTTP_ERROR : LG_HTTP_INCOMPLETE;
            }
            size_t hend = (size_t)(hit - buf);
            if (hend > p->max_header)
                return LG_HTTP_ERROR;
            lg_http_rc rc = parse_header(p, buf, hend);
            if (rc == LG_HTTP_ERROR)
                return rc;
            if (p->status < 200) {
                /* interim response: skip it and parse what follows */
                size_t mh = p->max_header, skip = p->skip + hend;
                lg_http_parser_init(p, mh);
                p->skip = skip;
                buf += hend;
                len -= hend;
                continue;
            }
        }
        switch (p->phase) {
        case 1:
            if ((int64_t)(len - p->hoff) < p->content_length)
                return LG_HTTP_INCOMPLETE;
            p->body_len = (size_t)p->content_length;
            p->rconsumed = p->hoff + p->body_len;
            p->phase = 4;
            return LG_HTTP_DONE;
        case 2: return parse_chunks(p, buf, len);
        case 3: p->body_len = len - p->hoff; return LG_HTTP_INCOMPLETE;
        case 4: return LG_HTTP_DONE;
        default: return LG_HTTP_ERROR;
        }
    }
}

lg_http_rc lg_http_eof(lg_http_parser *p, char *buf, size_t len)
{
    if (p->phase == 4)
        return publish(p, LG_HTTP_DONE);
    if (p->phase == 3 && len >= p->skip) {
        p->body_len = len - p->skip - p->hoff;
        p->rconsumed = len - p->skip;
        p->phase = 4;
        return publish(p, LG_HTTP_DONE);
    }
    (void)buf;
    return LG_HTTP_ERROR;
}

/* host's first IPv4 address, dotted, into ip. Resolved once, at parse
 * time: the engine connects by address, and a compose service name
 * ("nginx") must work as well as 127.0.0.1. IPv4 only: the engine's sockets
 * are AF_INET. "localhost" needs no resolver (a minimal container may lack
 * /etc/hosts). */
static int resolve_ipv4(const char *host, char *ip, size_t iplen, const char *url, char *err,
                        size_t errlen)
{
    if (strcmp(host, "localhost") == 0) {
        snprintf(ip, iplen, "127.0.0.1");
        return 0;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || res == NULL) {
        snprintf(err, errlen, "%s: cannot resolve host '%s' to an IPv4 address: %s", url, host,
                 gai ? gai_strerror(gai) : "no address");
        if (res)
            freeaddrinfo(res);
        return -1;
    }
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, (socklen_t)iplen);
    freeaddrinfo(res);
    return 0;
}

int lg_url_parse(const char *url, lg_url *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->port = 80;
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "%s: only http:// URLs are supported", url);
        return -1;
    }
    const char *h = url + 7;
    if (h[0] == '[') {
        snprintf(err, errlen, "%s: IPv6 targets are not supported (IPv4 or a host name)", url);
        return -1;
    }
    size_t hl = strcspn(h, ":/");
    if (hl == 0 || hl >= sizeof out->host) {
        snprintf(err, errlen, "%s: missing or too long host", url);
        return -1;
    }
    memcpy(out->host, h, hl);
    const char *rest = h + hl;
    if (*rest == ':') {
        char *end = (char *)rest + 1;
        long port = isdigit((unsigned char)rest[1]) ? strtol(rest + 1, &end, 10) : 0;
        if (port < 1 || port > 65535 || (*end && *end != '/')) {
            snprintf(err, errlen, "%s: bad port", url);
            return -1;
        }
        out->port = (int)port;
        rest = end;
    }
    if (resolve_ipv4(out->host, out->ip, sizeof out->ip, url, err, errlen) != 0)
        return -1;
    size_t pl = strlen(rest);
    while (pl > 0 && rest[pl - 1] == '/')
        pl--;
    int ctl = 0;
    for (size_t i = 0; i < pl; i++)
        ctl |= (unsigned char)rest[i] <= ' ' || (unsigned char)rest[i] == 0x7f;
    if (pl >= sizeof out->prefix || memchr(rest, '?', pl) || ctl) {
        snprintf(err, errlen, "%s: bad path prefix", url);
        return -1;
    }
    memcpy(out->prefix, rest, pl);
    snprintf(out->base, sizeof out->base, "http://%s:%d%s", out->host, out->port, out->prefix);
    return 0;
}
