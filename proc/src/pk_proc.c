/* pk_proc.c — see pk_proc.h. */
#include "pk_proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

static int room_for_one(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == 0)
            return 1;
    return 0;
}

static void forget(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

void pk_sleep_ms(long long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

int pk_free_port(void)
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

pid_t pk_spawn(const char *const argv[], const char *logpath, int flags, char *err, size_t errlen)
{
    /* a child pk_kill_all could not find would outlive a Ctrl-C */
    if (!room_for_one()) {
        snprintf(err, errlen, "%d children already running (pk_proc's table is full)",
                 MAX_CHILDREN);
        return -1;
    }
    int out = open(logpath ? logpath : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                   0644);
    if (out < 0) {
        snprintf(err, errlen, "%s: %s", logpath ? logpath : "/dev/null", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(out);
        return -1;
    }
    if (pid == 0) {
        if (flags & PK_SPAWN_DIE_WITH_PARENT) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(127); /* the parent died before prctl: nobody would stop us */
        }
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
        /* execvp takes char *const[] for historical reasons; it never
         * writes through it (POSIX, exec rationale). */
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(out);
    remember(pid);
    return pid;
}

int pk_wait_status(pid_t pid, int timeout_ms, int *status)
{
    if (pid <= 0) { /* waitpid would take any child, or the group's */
        if (status != NULL)
            *status = -1;
        return 1;
    }
    long long end = lc_now_ms() + timeout_ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) {
            forget(pid);
            if (status != NULL)
                *status = r == pid ? st : -1;
            return 1;
        }
        if (lc_now_ms() >= end)
            return 0;
        pk_sleep_ms(10);
    }
}

int pk_wait_exit(pid_t pid, int timeout_ms)
{
    return pk_wait_status(pid, timeout_ms, NULL);
}

void pk_signal_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    kill(pid, SIGCONT); /* a SIGSTOPped process acts on SIGTERM only once resumed */
}

void pk_stop(pid_t pid, int grace_ms)
{
    if (pid <= 0)
        return;
    if (kill(pid, 0) < 0 && errno == ESRCH) {
        pk_wait_exit(pid, 0);
        forget(pid);
        return;
    }
    pk_signal_stop(pid);
    if (!pk_wait_exit(pid, grace_ms)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    forget(pid);
}

void pk_kill(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    forget(pid);
}

void pk_kill_all(int grace_ms)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            pk_stop(children[i], grace_ms);
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

void pk_rm_tree(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
