/* The client half of the shared-memory data plane (server/shm.c explains
 * the server half and the checks it makes).
 *
 * A session connected over ipc:// gets a memfd, sealed against shrinking,
 * the first time a run moves enough bytes to be worth it; it grows (a new
 * segment, attached again) when a run needs more. The client's descriptor
 * is closed once the server has mapped the segment: both mappings keep it
 * alive, and nothing is left behind if either process dies. When the server
 * cannot open it (another user without the right to read our memory, or a
 * transport without peer credentials), the session quietly stays inline. */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"

/* Below this a run's bytes are cheaper inline than the extra copy logic. */
#define SHM_MIN_RUN_BYTES (16u << 10)
#define SHM_MIN_SEGMENT (1u << 20)

enum { SHM_UNTRIED, SHM_ON, SHM_OFF };

static int attach(salus_session *s, int fd, size_t size)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__AttachShm m = SALUS__ATTACH_SHM__INIT;
    m.fd = (uint32_t) fd;
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
    int rc = SL_ENOMEM;
    if (ftruncate(fd, (off_t) size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0)
        goto out_close;
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto out_close;
    if ((rc = attach(s, fd, size)) != SL_OK) {
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
    int rc = grow(s, size);
    if (rc == SL_OK) {
        s->shm_state = SHM_ON;
        return s->shm;
    }
    /* refused outright: this session stays inline; a failed growth of a
     * working segment only sends this run inline */
    if (s->shm_state == SHM_UNTRIED || rc == SL_EPERM || rc == SL_EUNSUPPORTED)
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
