/* lg_proc.c — see lg_proc.h. */
#include "lg_proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 64
static pid_t children[MAX_CHILDREN];

static void remember(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
}

static void forget(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

long long lg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lg_sleep_ms(long long ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int lg_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t l = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

pid_t lg_spawn(char *const argv[], const char *logpath, char *err, size_t errlen)
{
    int out = open(logpath ? logpath : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                   0644);
    if (out < 0) {
        snprintf(err, errlen, "%s: %s", logpath, strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(out);
        return -1;
    }
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0)
            dup2(in, 0);
        dup2(out, 1);
        dup2(out, 2);
        /* the child must not inherit our Ctrl-C handling: its own group
         * would dodge the terminal's SIGINT, so keep the group and restore
         * default dispositions */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(out);
    remember(pid);
    return pid;
}

int lg_wait_exit(pid_t pid, int timeout_ms)
{
    long long end = lg_now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) {
            forget(pid);
            return 1;
        }
        if (lg_now_ms() >= end)
            return 0;
        lg_sleep_ms(10);
    }
}

void lg_stop(pid_t pid, int grace_ms)
{
    if (pid <= 0)
        return;
    if (kill(pid, SIGTERM) < 0 && errno == ESRCH) {
        lg_wait_exit(pid, 0);
        forget(pid);
        return;
    }
    if (!lg_wait_exit(pid, grace_ms)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    forget(pid);
}

void lg_proc_kill_all(int grace_ms)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            lg_stop(children[i], grace_ms);
}

int lg_redis_ping(int port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int ok = 0;
    char buf[16];
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        ok = n >= 5 && memcmp(buf, "+PONG", 5) == 0;
    }
    close(fd);
    return ok;
}

/* --- a tiny RESP client ---------------------------------------------------- */

/* Parses one line "<type>...\r\n" at *p (within end); returns the line's
 * start after the type byte and moves *p past the CRLF, or NULL when the
 * buffer does not hold the whole line yet. */
static const char *resp_line(const char **p, const char *end, size_t *len)
{
    const char *s = *p;
    for (const char *q = s; q + 1 < end; q++)
        if (q[0] == '\r' && q[1] == '\n') {
            *len = (size_t)(q - s);
            *p = q + 2;
            return s;
        }
    return NULL;
}

/* Appends one scalar reply at *p to out. 1 value, 0 nil, -1 incomplete,
 * -2 malformed. */
static int resp_scalar(const char **p, const char *end, char *out, size_t outlen, size_t *used)
{
    size_t len;
    const char *l = resp_line(p, end, &len);
    if (!l)
        return -1;
    if (len < 1)
        return -2;
    char type = l[0];
    const char *v = l + 1;
    size_t vlen = len - 1;
    if (type == '$') {
        long n = strtol(v, NULL, 10);
        if (n < 0)
            return 0;
        if (end - *p < n + 2)
            return -1;
        v = *p;
        vlen = (size_t)n;
        *p += n + 2;
    } else if (type == '-') {
        return -2; /* an error reply */
    } else if (type != '+' && type != ':') {
        return -2;
    }
    size_t room = outlen - *used - 1;
    if (vlen > room)
        vlen = room;
    memcpy(out + *used, v, vlen);
    *used += vlen;
    out[*used] = 0;
    return 1;
}

/* 1 / 0 / -1 incomplete / -2 malformed, for a whole reply in buf. */
static int resp_parse(const char *buf, size_t n, char *out, size_t outlen)
{
    const char *p = buf, *end = buf + n;
    size_t used = 0;
    out[0] = 0;
    if (n < 1)
        return -1;
    if (buf[0] != '*')
        return resp_scalar(&p, end, out, outlen, &used);
    size_t len;
    const char *l = resp_line(&p, end, &len);
    if (!l)
        return -1;
    long items = strtol(l + 1, NULL, 10);
    if (items < 0)
        return 0;
    for (long i = 0; i < items; i++) {
        if (i > 0 && used + 1 < outlen) {
            out[used++] = '\n';
            out[used] = 0;
        }
        int r = resp_scalar(&p, end, out, outlen, &used);
        if (r < 0)
            return r;
    }
    return 1;
}

int lg_redis_query(int port, int timeout_ms, int argc, const char *const argv[], char *out,
                   size_t outlen)
{
    char req[1024], buf[8192];
    if (outlen < 1)
        return -1;
    out[0] = 0;
    int n = snprintf(req, sizeof req, "*%d\r\n", argc);
    for (int i = 0; i < argc && n > 0 && (size_t)n < sizeof req; i++)
        n += snprintf(req + n, sizeof req - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (n <= 0 || (size_t)n >= sizeof req)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc = -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        send(fd, req, (size_t)n, MSG_NOSIGNAL) == n) {
        size_t got = 0;
        long long end = lg_now_ms() + timeout_ms;
        while (got < sizeof buf && lg_now_ms() < end) {
            ssize_t r = recv(fd, buf + got, sizeof buf - got, 0);
            if (r <= 0)
                break;
            got += (size_t)r;
            int pr = resp_parse(buf, got, out, outlen);
            if (pr != -1) {
                rc = pr >= 0 ? pr : -1;
                break;
            }
        }
    }
    close(fd);
    if (rc < 0)
        out[0] = 0;
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

void lg_rm_tree(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
