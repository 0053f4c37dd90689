/* The descriptor socket (shm_socket.h).
 *
 * Why a socket of its own rather than reopening the client's descriptor
 * through /proc/<pid>/fd: an open on a client's behalf is both a privilege
 * hazard (an O_PATH descriptor needs no read permission, and a root salusd
 * would open whatever it names, /etc/shadow or a root-only FIFO) and a
 * blocking call a client controls (a lease on the file stalls open() for
 * the lease-break time). SCM_RIGHTS hands over the client's own open file
 * description, with exactly the access the client had, and works whatever
 * user salusd runs as. SOCK_SEQPACKET keeps the request and its descriptor
 * one message, so there is no framing to read byte by byte.
 *
 * One thread serves every connection with non-blocking I/O: a connection
 * lives at most SL_SHM_SOCKET_DEADLINE_MS, and a user holds at most
 * SL_SHM_SOCKET_CONNS_PER_UID of the SL_SHM_SOCKET_CONNS slots, so a
 * tenant that stalls or floods delays only descriptor hand-overs (its own
 * first). The last close of a descriptor a client sent can block as long
 * as the client likes, so nothing the client controls is closed plainly
 * here: sockets are defused first (lingering off, unix sockets emptied of
 * what is in flight in them) and closed at once, anything else goes to a
 * closer thread with a bound per user (dispose). The
 * server lock is taken twice per hand-over, each time for an O(1) lookup:
 * checking the descriptor, mapping it and registering it with the device
 * all happen without it. */
#include "shm_socket.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A staging request is a few dozen bytes; anything longer is refused. */
#define MSG_MAX 256
/* Room for every descriptor one message can carry (the kernel's SCM_MAX_FD),
 * so none is dropped inside recvmsg: each one received is closed here. */
#define FDS_MAX 253

/* Refused descriptors of one user that may wait for the closer at once;
 * while a user has this many, its descriptor connections are refused as
 * they come, so a tenant whose files close slowly holds only these. */
#define CLOSE_PER_UID 16
/* Unix sockets handed over inside a refused unix socket are emptied this
 * deep; what a deeper one holds goes to the closer with it. */
#define DEFUSE_DEPTH 2
/* Messages or pending connections taken out of one unix socket before it
 * is closed; a socket holding more goes to the closer. */
#define DEFUSE_DRAIN 64

/* The closer: the last close of a client's file can block for as long as
 * the client likes (a FUSE file's flush), so descriptors that may block
 * are closed on a thread of their own, in order, at most CLOSE_PER_UID
 * waiting per user. Sockets never get here: they are defused (see
 * defuse) and closed at once. Heap-allocated: a closer still closing at
 * shutdown is left behind, not waited for nor freed under it. */
struct pending_close {
    int fd;
    uid_t uid;
    struct pending_close *next;
};

struct closer {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool stop;
    struct pending_close *head, *tail;
    bool closing;      /* a close is under way */
    uid_t closing_uid; /* whose */
    pthread_t thread;
};

struct conn {
    int fd; /* -1: free slot */
    uid_t uid;
    uint64_t deadline_ns;
};

struct sl_shm_socket {
    pthread_mutex_t *lock;
    sl_sessions *ss;
    sl_shm_plane *plane;
    int wake_fd; /* eventfd: a segment was retired, or stop */
    _Atomic bool stop;
    pthread_t thread;
    bool thread_started;
    struct closer *closer; /* NULL: close on this thread */
    int n_listen;
    int listen_fd[SL_MAX_LISTEN];
    char path[SL_MAX_LISTEN][sizeof(((struct sockaddr_un *) 0)->sun_path)];
    struct conn conns[SL_SHM_SOCKET_CONNS];
};

static void *closer_main(void *arg)
{
    struct closer *cl = arg;
    pthread_mutex_lock(&cl->lock);
    for (;;) {
        while (!cl->head && !cl->stop)
            pthread_cond_wait(&cl->cv, &cl->lock);
        struct pending_close *pc = cl->head;
        if (!pc)
            break;
        cl->head = pc->next;
        if (!cl->head)
            cl->tail = NULL;
        cl->closing = true;
        cl->closing_uid = pc->uid;
        pthread_mutex_unlock(&cl->lock);
        (void) close(pc->fd);
        sl_free(pc);
        pthread_mutex_lock(&cl->lock);
        cl->closing = false;
    }
    pthread_mutex_unlock(&cl->lock);
    return NULL;
}

static struct closer *closer_start(void)
{
    struct closer *cl = sl_calloc(1, sizeof *cl);
    if (!cl)
        return NULL;
    if (pthread_mutex_init(&cl->lock, NULL) != 0)
        goto out_free;
    if (pthread_cond_init(&cl->cv, NULL) != 0)
        goto out_destroy_lock;
    if (pthread_create(&cl->thread, NULL, closer_main, cl) != 0)
        goto out_destroy_cv;
    return cl;

out_destroy_cv:
    pthread_cond_destroy(&cl->cv);
out_destroy_lock:
    pthread_mutex_destroy(&cl->lock);
out_free:
    sl_free(cl);
    return NULL;
}

/* Stops the closer. One with nothing to do is joined and freed; one still
 * closing a client's file, or with files queued, is left behind with what
 * it holds (the process's exit ends it): salusd's exit never waits on a
 * tenant. */
static void closer_stop(struct closer *cl)
{
    if (!cl)
        return;
    pthread_mutex_lock(&cl->lock);
    cl->stop = true;
    bool busy = cl->closing || cl->head;
    pthread_cond_signal(&cl->cv);
    pthread_mutex_unlock(&cl->lock);
    if (busy) {
        sl_log_warn("shm.closer",
                    "a client's descriptor is still closing at shutdown; left behind");
        (void) pthread_detach(cl->thread);
        return;
    }
    pthread_join(cl->thread, NULL);
    pthread_cond_destroy(&cl->cv);
    pthread_mutex_destroy(&cl->lock);
    sl_free(cl);
}

/* Descriptors of uid waiting for the closer, the one it is closing
 * included. */
static int closer_pending(struct closer *cl, uid_t uid)
{
    if (!cl)
        return 0;
    pthread_mutex_lock(&cl->lock);
    int n = cl->closing && cl->closing_uid == uid;
    for (const struct pending_close *pc = cl->head; pc; pc = pc->next)
        n += pc->uid == uid;
    pthread_mutex_unlock(&cl->lock);
    return n;
}

static void dispose(sl_shm_socket *t, uid_t uid, int fd, int depth);

/* Takes out of unix socket fd the descriptors its queue holds in flight
 * (closing a socket closes those too, on the closing thread): messages'
 * SCM_RIGHTS, or a listening socket's pending connections. False when it
 * held more than DEFUSE_DRAIN, or depth is too deep to look. */
static bool drain_unix(sl_shm_socket *t, uid_t uid, int fd, int depth)
{
    int listening = 0;
    socklen_t len = sizeof listening;
    if (depth >= DEFUSE_DEPTH)
        return false;
    (void) getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    for (int i = 0; i < DEFUSE_DRAIN; i++) {
        if (listening) {
            int child = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (child < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINVAL;
            dispose(t, uid, child, depth + 1);
            continue;
        }
        uint8_t data[256];
        union {
            struct cmsghdr align;
            char bytes[CMSG_SPACE(FDS_MAX * sizeof(int))];
        } control;
        struct iovec iov = {data, sizeof data};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control.bytes,
                            .msg_controllen = sizeof control.bytes};
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINVAL || errno == ENOTCONN;
        if (n == 0 && !mh.msg_controllen)
            return true;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t j = 0; j < k; j++) {
                int inner;
                memcpy(&inner, CMSG_DATA(cm) + j * sizeof(int), sizeof(int));
                dispose(t, uid, inner, depth + 1);
            }
        }
    }
    return false;
}

/* Whether socket fd's last close can be made to return at once: lingering
 * switched off (a socket lingering on unsent data blocks its closer for up
 * to its linger time), and a unix socket shut down (no one can add to it)
 * and emptied of the descriptors in flight in it. False for anything that
 * is not a socket: it may block (a FUSE file's flush) and goes to the
 * closer. Asking costs no I/O. */
static bool defuse(sl_shm_socket *t, uid_t uid, int fd, int depth)
{
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
        return false; /* not a socket */
    struct linger off = {0, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof off) != 0)
        return false;
    if (domain != AF_UNIX)
        return true;
    (void) shutdown(fd, SHUT_RDWR);
    return drain_unix(t, uid, fd, depth);
}

/* Lets go of descriptor fd, which uid's client controls: at once when it
 * is a socket that can be defused, otherwise on the closer. Never blocks
 * this thread on the client. */
static void dispose(sl_shm_socket *t, uid_t uid, int fd, int depth)
{
    if (defuse(t, uid, fd, depth) || !t->closer) {
        (void) close(fd);
        return;
    }
    struct pending_close *pc = sl_malloc(sizeof *pc);
    if (!pc) {
        (void) close(fd); /* out of memory: nothing left to keep it in */
        return;
    }
    *pc = (struct pending_close){.fd = fd, .uid = uid};
    struct closer *cl = t->closer;
    pthread_mutex_lock(&cl->lock);
    if (cl->tail)
        cl->tail->next = pc;
    else
        cl->head = pc;
    cl->tail = pc;
    pthread_cond_signal(&cl->cv);
    pthread_mutex_unlock(&cl->lock);
}

/* Sends one packed Reply on connection fd; a client that does not read
 * loses its answer, the thread never waits for it. */
static void answer(int fd, uint64_t seq, int code, const char *why, uint64_t ticket)
{
    Salus__Reply rep = SALUS__REPLY__INIT;
    Salus__StageShmReply body = SALUS__STAGE_SHM_REPLY__INIT;
    char text[256];
    rep.seq = seq;
    rep.code = (Salus__Code) code;
    if (code == SL_OK) {
        body.ticket = ticket;
        rep.body_case = SALUS__REPLY__BODY_STAGE_SHM;
        rep.stage_shm = &body;
    } else {
        snprintf(text, sizeof text, "the shared-memory segment was refused: it %s", why);
        rep.message = text;
    }
    uint8_t buf[512];
    size_t len = salus__reply__get_packed_size(&rep);
    if (len > sizeof buf)
        return;
    (void) salus__reply__pack(&rep, buf);
    (void) !send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Checks, maps and stages descriptor seg_fd for the request m of peer uid;
 * returns the code, with the reason in *why or the ticket. */
static int stage(sl_shm_socket *t, const Salus__Request *m, uid_t uid, int seg_fd, uint64_t *ticket,
                 bool *checked, const char **why)
{
    uint64_t size = m->stage_shm->size;
    int rc = sl_shm_check_fd(seg_fd, size, why);
    if (rc != SL_OK)
        return rc;
    *checked = true;
    pthread_mutex_lock(t->lock);
    rc = sl_sessions_stage_begin(t->ss, m->session_id, m->token, uid, size, why);
    pthread_mutex_unlock(t->lock);
    if (rc != SL_OK)
        return rc;
    /* after the budget, so that a segment past it is refused for that
     * without the client allocating it first */
    if ((rc = sl_shm_allocated(seg_fd, why)) != SL_OK) {
        sl_shm_unreserve(t->plane, size);
        return rc;
    }
    sl_shm *seg;
    if ((rc = sl_shm_map(t->plane, seg_fd, size, &seg)) != SL_OK) {
        sl_shm_unreserve(t->plane, size);
        *why = rc == SL_ENOMEM ? "cannot be mapped" : "cannot be registered with the device";
        return rc;
    }
    pthread_mutex_lock(t->lock);
    rc = sl_sessions_stage_end(t->ss, m->session_id, m->token, seg, ticket);
    pthread_mutex_unlock(t->lock);
    if (rc != SL_OK) {
        sl_shm_retire(t->plane, seg);
        *why = "was sent for a session that closed meanwhile";
    }
    return rc;
}

/* Reads connection c's one message, answers it and closes c. */
static void serve(sl_shm_socket *t, struct conn *c)
{
    uint8_t buf[MSG_MAX];
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(FDS_MAX * sizeof(int))];
    } control;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.bytes,
                        .msg_controllen = sizeof control.bytes};
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return; /* not yet */
    int fds[FDS_MAX], n_fds = 0;
    for (struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && n_fds < FDS_MAX; i++)
            memcpy(&fds[n_fds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
    }
    Salus__Request *m = n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
                            ? salus__request__unpack(NULL, (size_t) n, buf)
                            : NULL;
    uint64_t ticket = 0;
    const char *why = "";
    bool checked = false; /* fds[0] is a memfd: closing it is quick */
    int rc;
    if (n <= 0) {
        rc = SL_ECONN; /* hung up or failed: nobody to answer */
    } else if (!m || m->body_case != SALUS__REQUEST__BODY_STAGE_SHM) {
        rc = SL_EINVAL;
        why = "came without a valid StageShm request (one packed salus.Request, at most 256 "
              "bytes)";
    } else if (n_fds != 1) {
        rc = SL_EINVAL;
        why = "did not come as exactly one descriptor (SCM_RIGHTS)";
    } else {
        rc = stage(t, m, c->uid, fds[0], &ticket, &checked, &why);
    }
    if (rc != SL_ECONN)
        answer(c->fd, m ? m->seq : 0, rc, why, ticket);
    if (rc == SL_OK)
        sl_log_debug("shm.stage", "session %llu staged %llu bytes of shared memory",
                     (unsigned long long) m->session_id, (unsigned long long) m->stage_shm->size);
    else if (rc != SL_ECONN)
        sl_log_info("shm.refuse", "descriptor of uid %u for session %llu refused: it %s",
                    (unsigned) c->uid, (unsigned long long) (m ? m->session_id : 0), why);
    for (int i = 0; i < n_fds; i++) { /* the mapping keeps a staged segment */
        if (i == 0 && checked)
            (void) close(fds[i]);
        else
            dispose(t, c->uid, fds[i], 0);
    }
    if (m)
        salus__request__free_unpacked(m, NULL);
    /* more messages may wait behind the one read, descriptors and all */
    dispose(t, c->uid, c->fd, 0);
    c->fd = -1;
}

/* Accepts what is waiting on listener lfd, within the bounds. */
static void accept_all(sl_shm_socket *t, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
            dispose(t, (uid_t) -1, fd, 0);
            continue;
        }
        struct conn *slot = NULL;
        int same_uid = 0;
        for (int i = 0; i < SL_SHM_SOCKET_CONNS; i++) {
            struct conn *c = &t->conns[i];
            if (c->fd < 0 && !slot)
                slot = c;
            else if (c->fd >= 0 && c->uid == cred.uid)
                same_uid++;
        }
        if (!slot || same_uid >= SL_SHM_SOCKET_CONNS_PER_UID) {
            answer(fd, 0, SL_EEXHAUSTED, "came while too many descriptor connections were open", 0);
            dispose(t, cred.uid, fd, 0);
            continue;
        }
        if (closer_pending(t->closer, cred.uid) >= CLOSE_PER_UID) {
            answer(fd, 0, SL_EEXHAUSTED,
                   "came while too many of this user's refused descriptors were still closing", 0);
            dispose(t, cred.uid, fd, 0);
            continue;
        }
        slot->fd = fd;
        slot->uid = cred.uid;
        slot->deadline_ns = sl_now_ns() + SL_SHM_SOCKET_DEADLINE_MS * 1000000ull;
    }
}

static void *socket_main(void *arg)
{
    sl_shm_socket *t = arg;
    struct pollfd pfd[1 + SL_MAX_LISTEN + SL_SHM_SOCKET_CONNS];
    struct conn *of[SL_SHM_SOCKET_CONNS];
    while (!atomic_load(&t->stop)) {
        int n = 0;
        pfd[n++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
        for (int i = 0; i < t->n_listen; i++)
            pfd[n++] = (struct pollfd){.fd = t->listen_fd[i], .events = POLLIN};
        int first_conn = n, n_conns = 0;
        uint64_t now = sl_now_ns(), next = now + 1000000000ull;
        for (int i = 0; i < SL_SHM_SOCKET_CONNS; i++) {
            struct conn *c = &t->conns[i];
            if (c->fd < 0)
                continue;
            if (c->deadline_ns <= now) { /* stalled: dropped unanswered */
                dispose(t, c->uid, c->fd, 0);
                c->fd = -1;
                continue;
            }
            if (c->deadline_ns < next)
                next = c->deadline_ns;
            of[n_conns++] = c;
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
        }
        int timeout_ms = (int) ((next - now) / 1000000ull) + 1;
        if (poll(pfd, (nfds_t) n, timeout_ms) < 0 && errno != EINTR) {
            sl_log_err("shm.poll", "descriptor socket poll failed: %s", strerror(errno));
            break;
        }
        if (pfd[0].revents) {
            uint64_t v;
            (void) !read(t->wake_fd, &v, sizeof v);
        }
        sl_shm_reap(t->plane);
        for (int i = 0; i < n_conns; i++)
            if (pfd[first_conn + i].revents)
                serve(t, of[i]);
        for (int i = 0; i < t->n_listen; i++)
            if (pfd[1 + i].revents & POLLIN)
                accept_all(t, t->listen_fd[i]);
    }
    return NULL;
}

/* Binds and listens on path with the ipc:// listener's permissions. */
static int listen_at(const char *path, int mode)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* the ipc:// listener bound PATH, so no live salusd owns PATH.fd: what
     * is there is left over from one that died */
    (void) unlink(path);
    /* born with its final permissions, never connectable by others
     * meanwhile (as the ipc:// listener's socket file) */
    mode_t old_mask = umask((mode_t) (~mode & 0777));
    int rc = bind(fd, (struct sockaddr *) &sa, sizeof sa);
    umask(old_mask);
    if (rc != 0 || listen(fd, SL_SHM_SOCKET_CONNS) != 0) {
        int e = errno;
        (void) close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sl_shm_socket_start(const sl_config *cfg, pthread_mutex_t *lock, sl_sessions *ss,
                        sl_shm_plane *plane, sl_shm_socket **out)
{
    *out = NULL;
    sl_shm_socket *t = sl_calloc(1, sizeof *t);
    if (!t)
        return SL_ENOMEM;
    t->lock = lock;
    t->ss = ss;
    t->plane = plane;
    for (int i = 0; i < SL_SHM_SOCKET_CONNS; i++)
        t->conns[i].fd = -1;
    for (int i = 0; i < cfg->n_listen; i++) {
        const char *url = cfg->listen[i];
        if (strncmp(url, "ipc://", 6) != 0)
            continue;
        char *path = t->path[t->n_listen];
        if ((size_t) snprintf(path, sizeof t->path[0], "%s.fd", url + 6) >= sizeof t->path[0]) {
            sl_log_warn("shm.listen",
                        "no descriptor socket for %s: the path is too long; its "
                        "clients send bytes inline",
                        url);
            continue;
        }
        int fd = listen_at(path, cfg->ipc_mode);
        if (fd < 0) {
            sl_log_warn("shm.listen",
                        "cannot listen on descriptor socket %s: %s; its clients "
                        "send bytes inline",
                        path, strerror(errno));
            continue;
        }
        t->listen_fd[t->n_listen++] = fd;
        sl_log_info("shm.listen", "descriptor socket %s", path);
    }
    if (!t->n_listen) {
        sl_free(t);
        return SL_OK;
    }
    int rc = SL_ENOMEM;
    if ((t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        goto out_close;
    plane->wake_fd = t->wake_fd;
    if (!(t->closer = closer_start()))
        sl_log_warn("shm.closer", "no closer thread: refused descriptors are closed inline");
    if (pthread_create(&t->thread, NULL, socket_main, t) != 0) {
        rc = SL_EINTERNAL;
        goto out_close;
    }
    t->thread_started = true;
    *out = t;
    return SL_OK;

out_close:
    sl_shm_socket_stop(t);
    return rc;
}

void sl_shm_socket_stop(sl_shm_socket *t)
{
    if (!t)
        return;
    atomic_store(&t->stop, true);
    if (t->thread_started) {
        uint64_t one = 1;
        (void) !write(t->wake_fd, &one, sizeof one);
        pthread_join(t->thread, NULL);
    }
    for (int i = 0; i < SL_SHM_SOCKET_CONNS; i++)
        if (t->conns[i].fd >= 0)
            dispose(t, t->conns[i].uid, t->conns[i].fd, 0);
    closer_stop(t->closer);
    for (int i = 0; i < t->n_listen; i++) {
        (void) close(t->listen_fd[i]);
        (void) unlink(t->path[i]);
    }
    /* retiring unmaps at once from here on */
    pthread_mutex_lock(&t->plane->lock);
    t->plane->wake_fd = -1;
    pthread_mutex_unlock(&t->plane->lock);
    sl_shm_reap(t->plane);
    if (t->wake_fd >= 0)
        (void) close(t->wake_fd);
    sl_free(t);
}
