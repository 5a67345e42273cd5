/* pk_fwd.c — the freezable TCP forwarder (pk_fwd.h). */
#include "pk_fwd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FWD_MAX 16

struct pk_fwd {
    int lfd, target_port;
    int a[FWD_MAX], b[FWD_MAX]; /* accepted side, upstream side; -1 unused */
    atomic_int frozen, stop;
    atomic_int pass; /* loop passes since start */
    pthread_t thread;
};

static int connect_target(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void close_pair(pk_fwd *f, int i)
{
    close(f->a[i]);
    close(f->b[i]);
    f->a[i] = f->b[i] = -1;
}

/* Moves what is readable on from to to; 0, or -1 at EOF or an error. */
static int pump(int from, int to)
{
    char buf[16384];
    ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0)
        return n < 0 && (errno == EINTR || errno == EAGAIN) ? 0 : -1;
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += w;
    }
    return 0;
}

static void *run(void *arg)
{
    pk_fwd *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd pf[1 + 2 * FWD_MAX];
        int idx[1 + 2 * FWD_MAX];
        int n = 0;
        pf[n] = (struct pollfd){f->lfd, POLLIN, 0};
        idx[n++] = -1;
        int frozen = atomic_load(&f->frozen);
        for (int i = 0; i < FWD_MAX && !frozen; i++) {
            if (f->a[i] < 0)
                continue;
            pf[n] = (struct pollfd){f->a[i], POLLIN, 0};
            idx[n++] = i;
            pf[n] = (struct pollfd){f->b[i], POLLIN, 0};
            idx[n++] = i + FWD_MAX;
        }
        int r = poll(pf, (nfds_t)n, 10);
        for (int k = 1; r > 0 && k < n; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int i = idx[k] % FWD_MAX, up = idx[k] >= FWD_MAX;
            if (f->a[i] < 0)
                continue;
            if (pump(up ? f->b[i] : f->a[i], up ? f->a[i] : f->b[i]) != 0)
                close_pair(f, i);
        }
        if (r > 0 && (pf[0].revents & POLLIN)) {
            int c = accept(f->lfd, NULL, NULL);
            int u = c >= 0 ? connect_target(f->target_port) : -1;
            int slot = -1;
            for (int i = 0; i < FWD_MAX && slot < 0; i++)
                if (f->a[i] < 0)
                    slot = i;
            if (c >= 0 && u >= 0 && slot >= 0) {
                f->a[slot] = c;
                f->b[slot] = u;
            } else {
                if (c >= 0)
                    close(c);
                if (u >= 0)
                    close(u);
            }
        }
        atomic_fetch_add(&f->pass, 1);
    }
    return NULL;
}

pk_fwd *pk_fwd_start(int target_port, int *port, char *err, size_t errlen)
{
    pk_fwd *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < FWD_MAX; i++)
        f->a[i] = f->b[i] = -1;
    f->target_port = target_port;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(f->lfd, 16) != 0 || getsockname(f->lfd, (struct sockaddr *)&sa, &sl) != 0) {
        snprintf(err, errlen, "forwarder socket: %s", strerror(errno));
        if (f->lfd >= 0)
            close(f->lfd);
        free(f);
        return NULL;
    }
    *port = ntohs(sa.sin_port);
    if (pthread_create(&f->thread, NULL, run, f) != 0) {
        snprintf(err, errlen, "forwarder thread: cannot start");
        close(f->lfd);
        free(f);
        return NULL;
    }
    return f;
}

void pk_fwd_freeze(pk_fwd *f, int frozen)
{
    atomic_store(&f->frozen, frozen ? 1 : 0);
    /* Two passes: the one under way may have polled before the store. */
    int p = atomic_load(&f->pass);
    while (atomic_load(&f->pass) < p + 2)
        usleep(1000);
}

void pk_fwd_stop(pk_fwd *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, 1);
    pthread_join(f->thread, NULL);
    for (int i = 0; i < FWD_MAX; i++)
        if (f->a[i] >= 0)
            close_pair(f, i);
    close(f->lfd);
    free(f);
}
