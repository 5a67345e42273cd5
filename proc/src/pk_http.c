/* pk_http.c — an HTTP server's health, and the wait until it is healthy
 * (pk_http.h). */
#include "pk_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pk_proc.h"

/* Waits until fd is ready for events or end (lc_now_ms) passed: 1 ready
 * (or an error or hang-up to find by the next call), 0 out of time. */
static int ready(int fd, short events, long long end)
{
    for (;;) {
        long long left = end - lc_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd pf = {fd, events, 0};
        int r = poll(&pf, 1, (int)left);
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return 1; /* let the call after it report the error */
    }
}

/* A non-blocking connection to 127.0.0.1:port, or -1 (refused, or not
 * within end). */
static int connect_by(int port, long long end)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        return fd;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (errno == EINPROGRESS && ready(fd, POLLOUT, end) &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
        return fd;
    close(fd);
    return -1;
}

/* The status of a reply that begins with "HTTP/1.x NNN", else 0. */
static int status_of(const char *buf, size_t len)
{
    if (len < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
        return 0;
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return 0;
        st = st * 10 + (buf[i] - '0');
    }
    return st >= 100 && st <= 599 ? st : 0;
}

int pk_http_status(int port, const char *path, int timeout_ms)
{
    if (strlen(path) > 900)
        return 0;
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    long long end = lc_now_ms() + timeout_ms;
    int fd = connect_by(port, end);
    if (fd < 0)
        return 0;
    for (int off = 0; off < n;) {
        ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w > 0)
            off += (int)w;
        else if (w < 0 && (errno == EAGAIN || errno == EINTR) && ready(fd, POLLOUT, end))
            continue;
        else {
            close(fd);
            return 0;
        }
    }
    /* The head's first bytes are all it needs; the rest is read and
     * dropped until the server closes. */
    char head[16], rest[4096];
    size_t have = 0;
    while (ready(fd, POLLIN, end)) {
        char *dst = have < sizeof head ? head + have : rest;
        size_t room = have < sizeof head ? sizeof head - have : sizeof rest;
        ssize_t r = recv(fd, dst, room, 0);
        if (r > 0) {
            if (have < sizeof head)
                have += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        break; /* the server's close, or an error */
    }
    close(fd);
    return status_of(head, have);
}

int pk_log_port(const char *logpath, const char *after)
{
    FILE *f = logpath ? fopen(logpath, "r") : NULL;
    if (!f)
        return 0;
    char line[2048];
    int port = 0;
    while (port == 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, after);
        if (p && (p = strstr(p + strlen(after), " port ")) != NULL)
            port = atoi(p + 6);
    }
    fclose(f);
    return port > 0 && port <= 65535 ? port : 0;
}

void pk_http_wait_opts_init(pk_http_wait_opts *o)
{
    memset(o, 0, sizeof *o);
    o->path = "/healthz";
    o->want_status = 200;
    o->timeout_ms = 10000;
    o->try_timeout_ms = 1000;
    o->poll_ms = 20;
    o->port_after = "listening on ";
}

int pk_http_wait_healthy(pid_t pid, int *port, const pk_http_wait_opts *o, int *status)
{
    const char *path = o->path ? o->path : "/healthz";
    const char *after = o->port_after ? o->port_after : "listening on ";
    long long end = lc_now_ms() + o->timeout_ms;
    for (;;) {
        if (*port <= 0 && o->port_log)
            *port = pk_log_port(o->port_log, after);
        if (*port > 0) {
            int st = pk_http_status(*port, path, o->try_timeout_ms);
            if (st != 0 && (o->want_status == 0 || st == o->want_status))
                return PK_HTTP_HEALTHY;
        }
        if (pid > 0 && pk_wait_status(pid, 0, status))
            return PK_HTTP_EXITED;
        if (lc_now_ms() >= end || (o->stop && *o->stop))
            return PK_HTTP_TIMEOUT;
        pk_sleep_ms(o->poll_ms);
    }
}
