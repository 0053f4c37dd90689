/* The client half of the shared-memory data plane (server/shm.c explains
 * the server half and the checks it makes; salus.proto AttachShm the
 * protocol).
 *
 * A session connected over ipc:// gets a memfd, sealed against shrinking,
 * the first time a run moves enough bytes to be worth it; it grows (a new
 * segment, attached again) when a run needs more. The descriptor travels
 * to salusd over the descriptor socket next to the ipc:// path (SCM_RIGHTS:
 * salusd receives this process's own open file, and opens nothing on its
 * behalf), which answers with a ticket; AttachShm then names the ticket, in
 * order with the session's runs. The client's descriptor is closed once the
 * server has mapped the segment: both mappings keep it alive, and nothing
 * is left behind if either process dies. Its pages are allocated before
 * it is handed over (salusd refuses sparse segments). When salusd refuses (another
 * user's session, no descriptor socket, a transport without peer
 * credentials) the session quietly stays inline; when a segment would pass
 * its budget, runs needing one that large stay inline. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_internal.h"

/* Below this a run's bytes are cheaper inline than the extra copy logic. */
#define SHM_MIN_RUN_BYTES (16u << 10)
#define SHM_MIN_SEGMENT (1u << 20)
/* How long staging may take before the session gives up on it: salusd
 * maps (and, on a GPU, pins) the segment before it answers. */
#define SHM_STAGE_TIMEOUT_S 30

enum { SHM_UNTRIED, SHM_ON, SHM_OFF };

static void stage_error(salus_session *s, const char *what, const char *why)
{
    salus_client *c = s->client;
    pthread_mutex_lock(&c->lock);
    snprintf(c->last_error, sizeof c->last_error, "%s%s", what, why);
    pthread_mutex_unlock(&c->lock);
}

/* Hands descriptor fd (size bytes) to salusd for s; the ticket that names
 * it, or why not. */
static int stage(salus_session *s, int fd, size_t size, uint64_t *ticket)
{
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return SL_EUNSUPPORTED;
    struct timeval tv = {SHM_STAGE_TIMEOUT_S, 0};
    (void) setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void) setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s->client->fd_path);
    int rc = SL_ECONN;
    if (connect(sock, (struct sockaddr *) &sa, sizeof sa) != 0) {
        stage_error(s, "no shared memory: cannot reach salusd's descriptor socket ",
                    s->client->fd_path);
        goto out_close;
    }
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__StageShm m = SALUS__STAGE_SHM__INIT;
    m.size = size;
    req.session_id = s->id;
    req.token = s->token;
    req.body_case = SALUS__REQUEST__BODY_STAGE_SHM;
    req.stage_shm = &m;
    uint8_t buf[256];
    size_t len = salus__request__get_packed_size(&req);
    if (len > sizeof buf)
        goto out_close;
    (void) salus__request__pack(&req, buf);
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.bytes,
                        .msg_controllen = sizeof control.bytes};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(sock, &mh, MSG_NOSIGNAL) != (ssize_t) len)
        goto out_close;
    uint8_t answer[512];
    ssize_t n = recv(sock, answer, sizeof answer, 0);
    Salus__Reply *rep = n > 0 ? salus__reply__unpack(NULL, (size_t) n, answer) : NULL;
    if (!rep) {
        stage_error(s, "no shared memory: ", "salusd's descriptor socket did not answer");
        goto out_close;
    }
    rc = (int) rep->code;
    if (rc == SL_OK && rep->body_case == SALUS__REPLY__BODY_STAGE_SHM)
        *ticket = rep->stage_shm->ticket;
    else if (rc == SL_OK)
        rc = SL_EPROTO;
    else
        stage_error(s, "", rep->message ? rep->message : sl_strerror(rc));
    salus__reply__free_unpacked(rep, NULL);
out_close:
    (void) close(sock);
    return rc;
}

static int attach(salus_session *s, uint64_t ticket, size_t size)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__AttachShm m = SALUS__ATTACH_SHM__INIT;
    m.ticket = ticket;
    m.size = size;
    req.body_case = SALUS__REQUEST__BODY_ATTACH_SHM;
    req.attach_shm = &m;
    Salus__Reply *rep;
    int rc = sl_client_session_call(s, &req, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

/* A new mapped segment of size bytes, attached to s; SL_OK or why not. */
static int grow(salus_session *s, size_t size)
{
    int fd = memfd_create("salus-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return SL_EUNSUPPORTED;
    void *p = MAP_FAILED;
    uint64_t ticket = 0;
    int rc = SL_ENOMEM;
    if (ftruncate(fd, (off_t) size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
        goto out_close;
    /* salusd takes only segments whose pages are all allocated (its own
     * faults would be charged to its memory): allocating them is charged
     * here. When that fails (no memory), runs this large stay inline. */
    if (fallocate(fd, 0, 0, (off_t) size) != 0) {
        rc = SL_EEXHAUSTED;
        goto out_close;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto out_close;
    if ((rc = stage(s, fd, size, &ticket)) != SL_OK || (rc = attach(s, ticket, size)) != SL_OK) {
        (void) munmap(p, size);
        goto out_close;
    }
    sl_client_shm_fini(s); /* the server has let go of the old one */
    s->shm = p;
    s->shm_size = size;
out_close:
    (void) close(fd);
    return rc;
}

void *sl_client_shm_get(salus_session *s, size_t need)
{
    if (s->shm_state == SHM_OFF || !s->client || !s->client->local || need < SHM_MIN_RUN_BYTES)
        return NULL;
    if (s->shm_size >= need)
        return s->shm;
    size_t size = SHM_MIN_SEGMENT;
    while (size < need || size < 2 * s->shm_size)
        size *= 2;
    if (s->shm_refused && size >= s->shm_refused)
        return NULL; /* past the budget: this run goes inline */
    int rc = grow(s, size);
    if (rc == SL_OK) {
        s->shm_state = SHM_ON;
        return s->shm;
    }
    if (rc == SL_EEXHAUSTED) {
        s->shm_refused = size;
        return NULL;
    }
    /* refused outright: this session stays inline; a failed growth of a
     * working segment only sends this run inline */
    if (s->shm_state == SHM_UNTRIED || rc == SL_EPERM || rc == SL_EUNSUPPORTED || rc == SL_ECONN)
        s->shm_state = SHM_OFF;
    return NULL;
}

void sl_client_shm_fini(salus_session *s)
{
    if (s->shm)
        (void) munmap(s->shm, s->shm_size);
    s->shm = NULL;
    s->shm_size = 0;
}

size_t salus_session_shm_bytes(salus_session *s)
{
    pthread_mutex_lock(&s->shm_lock);
    size_t n = s->shm_size;
    pthread_mutex_unlock(&s->shm_lock);
    return n;
}
