/* The agent inside every sandbox: runs exec requests in a namespace that already exists.
 *
 * bubblewrap starts it once per sandbox (`/.shipyard/agent SOCKET SECCOMP DISK FILES`) as the PID
 * namespace's init, so an exec is a fork inside a ready sandbox, not a new container. It is
 * static C so that it starts in well under a millisecond, needs nothing from the image, and costs
 * a warm sandbox a few hundred KiB. Before it says it is ready it mounts the writable layer
 * (`setup`: a tmpfs capped in bytes and in files, which bubblewrap cannot do), drops every
 * capability, loads the seccomp filter and makes itself non-dumpable, so the code it runs can
 * neither read its /proc entries nor signal it (the kernel shields a namespace's init). It is
 * still treated as untrusted: a command could find a way to lie through it, which would spoil
 * only its own episode; the service checks every reply (see agent.py for the wire format).
 *
 * Also `agent put PATH MODE` (stdin into PATH, parents made) and `agent get PATH` (PATH to
 * stdout; exit 2 if it does not exist), run through exec by put_files and get_files; and, on the
 * host, `agent launch UID FDS COMMAND...`, which starts bubblewrap: it joins the sandbox's cgroups
 * (writes "0" to each cgroup.procs fd in FDS, comma-separated, or "-"), drops to UID (-1: stays),
 * and execs COMMAND. Doing that here rather than in a Python pre-exec hook lets the service start
 * a sandbox with vfork instead of forking its whole interpreter.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAME (1 << 20)
#define MAX_ITEMS 8192
#define NFDS 3
#define MAX_FILTER (1 << 16)

static int sock = -1;
static int children = -1;  /* a signalfd for SIGCHLD: as init, the agent reaps every orphan */
static pid_t command = -1; /* the exec's command, while it runs */
static int command_status, command_done;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int read_exact(int fd, char *buf, size_t n) {
    while (n) {
        ssize_t got = read(fd, buf, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        buf += got, n -= got;
    }
    return 0;
}

static int write_all(int fd, const char *buf, size_t n) {
    while (n) {
        ssize_t put = write(fd, buf, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return -1;
        buf += put, n -= put;
    }
    return 0;
}

static void send_json(const char *json) {
    uint32_t length = htonl((uint32_t)strlen(json));
    if (write_all(sock, (const char *)&length, 4) || write_all(sock, json, strlen(json))) _exit(0);
}

/* One frame: a 4-byte big-endian length, then NUL-terminated strings; fds ride on the length.
 * Returns the number of strings (the first max_items of them in items), or -1 when the service
 * is gone or broke the format. */
static int recv_frame(char **buffer, char **items, int max_items, int *fds, int *nfds) {
    char header[4];
    char control[CMSG_SPACE(sizeof(int) * NFDS)];
    struct iovec iov = {header, 4};
    struct msghdr msg = {0};
    msg.msg_iov = &iov, msg.msg_iovlen = 1;
    msg.msg_control = control, msg.msg_controllen = sizeof control;
    ssize_t got;
    do got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); while (got < 0 && errno == EINTR);
    if (got <= 0) return -1;
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        int count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *passed = (int *)CMSG_DATA(c);
        for (int i = 0; i < count; i++) {
            if (*nfds < NFDS) fds[(*nfds)++] = passed[i];
            else close(passed[i]);
        }
    }
    if (got < 4 && read_exact(sock, header + got, 4 - got)) return -1;
    uint32_t length;
    memcpy(&length, header, 4);
    length = ntohl(length);
    if (length > MAX_FRAME) return -1;
    free(*buffer);
    *buffer = malloc(length + 1);
    if (!*buffer || read_exact(sock, *buffer, length)) return -1;
    (*buffer)[length] = 0;
    int n = 0;
    for (char *p = *buffer; p < *buffer + length && n < max_items; p += strlen(p) + 1) items[n++] = p;
    return n;
}

static int others(void) {
    /* Processes in this PID namespace besides its init, this agent. */
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int count = 0, me = getpid();
    for (struct dirent *e; (e = readdir(proc));) {
        int pid = atoi(e->d_name);
        if (pid > 1 && pid != me) count++;
    }
    closedir(proc);
    return count;
}

/* Reap every child that has ended: the command (its status is kept) and orphans left to init. */
static void reap(void) {
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;) {
        if (pid == command) command_status = status, command_done = 1;
    }
}

/* SIGKILL everything but the agent (kill(-1) from init reaches this namespace only, not init
 * itself) and wait, briefly, until it is gone. How many there were. */
static int kill_others(void) {
    int left = others();
    double deadline = now() + 2.0;
    while (others() && now() < deadline) {
        kill(-1, SIGKILL);
        reap();
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    return left;
}

static void child(char **argv, char **envp, const char *cwd, char **limits, int nlimits, int *fds) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent's SIGCHLD block and SIGPIPE ignore */
    signal(SIGPIPE, SIG_DFL);              /* are not the command's */
    setsid();
    for (int i = 0; i < NFDS; i++) dup2(fds[i], i);
    syscall(SYS_close_range, 3, ~0U, 0);
    for (int i = 0; i + 1 < nlimits; i += 2) {
        rlim_t value = strtoull(limits[i + 1], NULL, 10);
        struct rlimit limit = {value, value};
        setrlimit(atoi(limits[i]), &limit);
    }
    if (chdir(cwd) == 0) execvpe(argv[0], argv, envp);
    dprintf(2, "sandbox: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* exec TIMEOUT_MS CWD ARGC ARGV... ENVC ENV... NLIMITS (RESOURCE VALUE)... */
static void run(char **items, int n, int *fds, int nfds) {
    char *error = NULL;
    int argc = n > 3 ? atoi(items[3]) : -1;
    int envc = argc >= 1 && 4 + argc < n ? atoi(items[4 + argc]) : -1;
    int nlim = envc >= 0 && 5 + argc + envc < n ? atoi(items[5 + argc + envc]) : -1;
    if (nfds != NFDS) error = "exec needs stdin, stdout and stderr";
    else if (argc < 1 || envc < 0 || nlim < 0 || 6 + argc + envc + 2 * nlim != n) error = "bad exec request";
    if (error) {
        for (int i = 0; i < nfds; i++) close(fds[i]);
        char reply[128];
        snprintf(reply, sizeof reply, "{\"error\":\"%s\"}", error);
        send_json(reply);
        return;
    }
    char *argv[argc + 1], *envp[envc + 1];
    memcpy(argv, items + 4, argc * sizeof(char *));
    memcpy(envp, items + 5 + argc, envc * sizeof(char *));
    argv[argc] = envp[envc] = NULL;
    double deadline = now() + atoi(items[1]) / 1000.0;
    command_done = command_status = 0;
    pid_t pid = command = fork();
    if (pid == 0) child(argv, envp, items[2], items + 6 + argc + envc, 2 * nlim, fds);
    for (int i = 0; i < NFDS; i++) close(fds[i]);
    int timed_out = 0, killed = 0;
    while (pid > 0) {
        reap();
        if (command_done) break;
        int wait_ms = (int)((deadline - now()) * 1000);
        if (wait_ms <= 0) { timed_out = 1; break; }
        struct pollfd polled[2] = {{children, POLLIN, 0}, {sock, POLLIN, 0}};
        if (poll(polled, 2, wait_ms) < 0 && errno != EINTR) break;
        if (polled[0].revents) {
            struct signalfd_siginfo info;
            while (read(children, &info, sizeof info) > 0) {}
        }
        if (polled[1].revents) {
            char *buffer = NULL, *items2[2];
            int more[NFDS], nmore = 0;
            int got = recv_frame(&buffer, items2, 2, more, &nmore);
            for (int i = 0; i < nmore; i++) close(more[i]);
            if (got < 0) { kill(pid, SIGKILL); _exit(0); }  /* the service went away */
            killed = got > 0 && strcmp(items2[0], "kill") == 0;
            free(buffer);
            if (killed) break;
        }
    }
    if (pid > 0 && !command_done) {
        kill(pid, SIGKILL);
        if (waitpid(pid, &command_status, 0) == pid) command_done = 1;
    }
    int status = command_status;
    command = -1;
    int leftover = kill_others();
    struct statvfs disk;
    int measured = statvfs("/work", &disk) == 0;
    int full = measured && disk.f_bavail == 0, files_full = measured && disk.f_ffree == 0;
    char reply[256];
    const char *end = pid < 0 ? "\"exit\":127" : WIFSIGNALED(status) ? "\"signal\":%d" : "\"exit\":%d";
    char code[32];
    snprintf(code, sizeof code, end, WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    snprintf(reply, sizeof reply,
             "{%s,\"timed_out\":%s,\"killed\":%s,\"leftover\":%d,\"disk_full\":%s,"
             "\"files_full\":%s}",
             code, timed_out ? "true" : "false", killed ? "true" : "false", leftover,
             full ? "true" : "false", files_full ? "true" : "false");
    send_json(reply);
}

static int copy(int from, int to) {
    char chunk[65536];
    for (;;) {
        ssize_t got = read(from, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) return 0;
        if (write_all(to, chunk, got)) return -1;
    }
}

static int put(const char *path, const char *mode) {
    char parents[4096];
    snprintf(parents, sizeof parents, "%s", path);
    for (char *slash = strchr(parents + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = 0;
        mkdir(parents, 0755);
        *slash = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, (mode_t)strtol(mode, NULL, 8));
    if (fd < 0 || copy(0, fd) || close(fd)) {
        dprintf(2, "put %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int get(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT ? 2 : (dprintf(2, "get %s: %s\n", path, strerror(errno)), 1);
    if (copy(fd, 1)) {
        dprintf(2, "get %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int launch(char **argv) {
    int uid = atoi(argv[2]);
    if (strcmp(argv[3], "-") != 0) {
        for (char *fd = strtok(argv[3], ","); fd; fd = strtok(NULL, ",")) {
            if (write(atoi(fd), "0", 1) != 1) {
                dprintf(2, "cannot join the sandbox's cgroup: %s\n", strerror(errno));
                return 127;
            }
            close(atoi(fd));
        }
    }
    if (uid >= 0 && (setgroups(0, NULL) || setgid(uid) || setuid(uid))) {
        dprintf(2, "cannot become uid %d: %s\n", uid, strerror(errno));
        return 127;
    }
    execvp(argv[4], argv + 4);
    dprintf(2, "cannot run %s: %s\n", argv[4], strerror(errno));
    return 127;
}

static int fail(const char *what) {
    dprintf(2, "sandbox agent: %s: %s\n", what, strerror(errno));
    return 127;
}

/* Everything the agent does with privilege, before any command runs: mount the writable layer
 * at /work in a mount namespace of its own (bubblewrap's tmpfs has no file cap, and its
 * namespace belongs to a user namespace above this one), drop every capability bubblewrap left
 * it for that, load the seccomp filter from FILTER_FD, and become non-dumpable. */
static int setup(int filter_fd, unsigned long long disk_bytes, unsigned long long files) {
    char options[128];
    snprintf(options, sizeof options, "mode=0755,size=%llu,nr_inodes=%llu", disk_bytes, files);
    if (unshare(CLONE_NEWNS)) return fail("cannot make a mount namespace");
    if (mount("tmpfs", "/work", "tmpfs", MS_NOSUID | MS_NODEV, options))
        return fail("cannot mount the writable layer at /work");
    if (mkdir("/work/.tmp", 0755) || chdir("/work")) return fail("cannot make /work/.tmp");
    for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)) return fail("cannot drop a capability");
    }
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {{0, 0, 0}};
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) || syscall(SYS_capset, &header, none))
        return fail("cannot drop capabilities");
    static char filter[MAX_FILTER];
    size_t length = 0;
    for (ssize_t got; length < sizeof filter; length += got) {
        got = read(filter_fd, filter + length, sizeof filter - length);
        if (got < 0 && errno == EINTR) got = 0;
        else if (got < 0) return fail("cannot read the seccomp filter");
        else if (got == 0) break;
    }
    close(filter_fd);
    if (length == 0 || length % sizeof(struct sock_filter)) {
        errno = EINVAL;
        return fail("bad seccomp filter");
    }
    struct sock_fprog program = {length / sizeof(struct sock_filter), (struct sock_filter *)filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program))
        return fail("cannot load the seccomp filter");
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) return fail("cannot become non-dumpable");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 4 && strcmp(argv[1], "launch") == 0) return launch(argv);
    if (argc == 4 && strcmp(argv[1], "put") == 0) return put(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "get") == 0) return get(argv[2]);
    if (argc != 5) {
        dprintf(2, "usage: agent SOCKET SECCOMP DISK FILES | put PATH MODE | get PATH | "
                   "launch UID FDS COMMAND...\n");
        return 2;
    }
    sock = atoi(argv[1]);
    if (setup(atoi(argv[2]), strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10))) return 127;
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    children = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (children < 0) return fail("cannot watch for children");
    send_json("{\"ready\":true}");
    char *buffer = NULL, *items[MAX_ITEMS];
    for (;;) {
        int fds[NFDS], nfds = 0;
        int n = recv_frame(&buffer, items, MAX_ITEMS, fds, &nfds);
        if (n < 0) return 0; /* the service went away: so does the sandbox */
        if (n > 0 && strcmp(items[0], "exec") == 0) {
            run(items, n, fds, nfds);
            continue;
        }
        for (int i = 0; i < nfds; i++) close(fds[i]);
        if (n > 0 && strcmp(items[0], "kill") == 0) continue; /* too late: nothing runs */
        send_json("{\"error\":\"unknown request\"}");
    }
}
