/* lg_proc.c — see lg_proc.h. */
#include "lg_proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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
