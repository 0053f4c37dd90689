/* Tests' own client of salusd's descriptor socket (salus.proto AttachShm),
 * written from the protocol as another-language client would be, so that
 * tests can hand over descriptors libsalusclient never would; and the
 * AttachShm and shared-memory Run requests that go with it, sent through a
 * session of the client library (whose internals the includer sees). */
#ifndef SL_TEST_SHM_STAGE_H
#define SL_TEST_SHM_STAGE_H

#include "client_internal.h"
#include "salus.pb-c.h"
#include "sl_error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Stages descriptor fd (none when fd < 0) as size bytes for session id
 * with token, over the descriptor socket of ipc:// path sock_path (the
 * socket is sock_path + ".fd"); give_away closes fd as soon as it is sent,
 * so that salusd holds the last reference. Returns the reply's code
 * (SL_ECONN: no socket or no answer), its ticket in *ticket and its
 * message in msg. */
static inline int sl_test_stage_shm_ex(const char *sock_path, uint64_t id, uint64_t token, int fd,
                                       bool give_away, uint64_t size, uint64_t *ticket, char *msg,
                                       size_t msg_len)
{
    if (msg_len)
        msg[0] = '\0';
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return SL_ECONN;
    struct timeval tv = {30, 0};
    (void) setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if ((size_t) snprintf(sa.sun_path, sizeof sa.sun_path, "%s.fd", sock_path) >=
            sizeof sa.sun_path ||
        connect(sock, (struct sockaddr *) &sa, sizeof sa) != 0) {
        snprintf(msg, msg_len, "cannot connect to %s", sa.sun_path);
        close(sock);
        return SL_ECONN;
    }
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__StageShm m = SALUS__STAGE_SHM__INIT;
    m.size = size;
    req.seq = 7;
    req.session_id = id;
    req.token = token;
    req.body_case = SALUS__REQUEST__BODY_STAGE_SHM;
    req.stage_shm = &m;
    uint8_t buf[256];
    size_t len = salus__request__pack(&req, buf);
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = control.bytes;
        mh.msg_controllen = sizeof control.bytes;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    }
    int rc = SL_ECONN;
    uint8_t answer[512];
    bool sent = sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t) len;
    if (give_away && fd >= 0)
        close(fd);
    ssize_t n = sent ? recv(sock, answer, sizeof answer, 0) : -1;
    Salus__Reply *rep = n > 0 ? salus__reply__unpack(NULL, (size_t) n, answer) : NULL;
    if (rep) {
        rc = (int) rep->code;
        if (rc == SL_OK && rep->body_case == SALUS__REPLY__BODY_STAGE_SHM)
            *ticket = rep->stage_shm->ticket;
        snprintf(msg, msg_len, "%s", rep->message ? rep->message : "");
        salus__reply__free_unpacked(rep, NULL);
    } else {
        snprintf(msg, msg_len, "no answer from the descriptor socket");
    }
    close(sock);
    return rc;
}

static inline int sl_test_stage_shm(const char *sock_path, uint64_t id, uint64_t token, int fd,
                                    uint64_t size, uint64_t *ticket, char *msg, size_t msg_len)
{
    return sl_test_stage_shm_ex(sock_path, id, token, fd, false, size, ticket, msg, msg_len);
}

/* Sends req through session s and drops the reply; returns its code. */
static inline int sl_test_session_call(salus_session *s, Salus__Request *req)
{
    Salus__Reply *rep = NULL;
    int rc = sl_client_session_call(s, req, &rep);
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

/* AttachShm for s of size bytes: the segment staged as ticket, or, with fd
 * not 0, a descriptor number of the caller's (which salusd must refuse).
 * Returns the reply's code. */
static inline int sl_test_attach_shm(salus_session *s, int fd, uint64_t ticket, uint64_t size)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__AttachShm m = SALUS__ATTACH_SHM__INIT;
    m.fd = (uint32_t) fd;
    m.ticket = ticket;
    m.size = size;
    req.body_case = SALUS__REQUEST__BODY_ATTACH_SHM;
    req.attach_shm = &m;
    return sl_test_session_call(s, &req);
}

/* Runs graph graph_id of s with its one feed at slice feed of the attached
 * segment and one fetch, value number fetch (on the wire: inputs, params,
 * then op outputs), written at slice out. Returns the reply's code. */
static inline int sl_test_shm_run(salus_session *s, uint64_t graph_id, Salus__ShmSlice feed,
                                  uint32_t fetch, Salus__ShmSlice out)
{
    Salus__ShmSlice *feeds[] = {&feed}, *fetches[] = {&out};
    Salus__Run run = SALUS__RUN__INIT;
    run.graph_id = graph_id;
    run.n_shm_feeds = 1;
    run.shm_feeds = feeds;
    run.n_fetches = 1;
    run.fetches = &fetch;
    run.n_shm_fetches = 1;
    run.shm_fetches = fetches;
    Salus__Request req = SALUS__REQUEST__INIT;
    req.body_case = SALUS__REQUEST__BODY_RUN;
    req.run = &run;
    return sl_test_session_call(s, &req);
}

#endif
