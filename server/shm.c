/* Shared-memory data plane for clients on the server's host (DESIGN.md
 * section 7).
 *
 * Over ipc:// a training iteration's feeds would otherwise be packed into a
 * protobuf, written through the socket, read, unpacked and only then copied
 * to the device: four copies and a large allocation per iteration. A client
 * on this host instead hands over a memfd once per session; runs then name
 * slices of it, so an iteration's bytes are copied exactly once each way
 * (client buffer to segment, segment to device, and back for fetches).
 *
 * NNG cannot pass descriptors, so the server opens the client's descriptor
 * through /proc/<pid>/fd/<n>, which needs the same access as reading the
 * client's memory (same uid, or root). What it opens is checked, not
 * trusted: a regular file owned by the session's uid, at least as large as
 * asked, and sealed against shrinking. The seal is what makes the mapping
 * safe for the server: without it the client could truncate the file and
 * turn the server's next access into SIGBUS. Contents may change under the
 * server at any time; it only ever copies bytes in and out, so a client
 * racing its own segment can only garble its own data. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server.h"
#include "sl_error.h"
#include "sl_log.h"

/* Mappings beyond this are refused: address space, not memory, but a
 * client should not make the server map terabytes. */
#define SHM_MAX_BYTES (16ull << 30)

void sl_shm_detach(sl_session *s)
{
    if (s->shm)
        (void) munmap(s->shm, s->shm_size);
    s->shm = NULL;
    s->shm_size = 0;
}

/* Opens and checks the client's segment; the fd on success. */
static int open_segment(const sl_session *s, const sl_req *req, uint32_t fd, uint64_t size,
                        int *out, sl_reply *r)
{
    uint64_t pid;
    if (!s->has_uid || !sl_req_peer_pid(req, &pid)) {
        sl_reply_error(r, SL_EUNSUPPORTED, "shared memory needs an ipc:// connection");
        return SL_EUNSUPPORTED;
    }
    if (size == 0 || size > SHM_MAX_BYTES) {
        sl_reply_error(r, SL_EINVAL, "shared memory of %" PRIu64 " bytes (1 to %llu allowed)", size,
                       (unsigned long long) SHM_MAX_BYTES);
        return SL_EINVAL;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/fd/%" PRIu32, pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        int e = errno;
        sl_reply_error(r, SL_EPERM, "cannot open the client's descriptor %" PRIu32 ": %s", fd,
                       strerror(e));
        return SL_EPERM;
    }
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    const char *bad = NULL;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode))
        bad = "is not a regular file";
    else if ((uint64_t) st.st_uid != s->uid)
        bad = "belongs to another user";
    else if ((uint64_t) st.st_size < size)
        bad = "is smaller than the size asked for";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        bad = "is not sealed against shrinking (memfd with F_SEAL_SHRINK)";
    if (bad) {
        (void) close(f);
        sl_reply_error(r, SL_EPERM, "descriptor %" PRIu32 " %s", fd, bad);
        return SL_EPERM;
    }
    *out = f;
    return SL_OK;
}

void sl_shm_attach(sl_session *s, const sl_req *req, const Salus__AttachShm *m, sl_reply *r)
{
    int f;
    if (open_segment(s, req, m->fd, m->size, &f, r) != SL_OK)
        return;
    void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    int e = errno;
    (void) close(f); /* the mapping keeps the segment */
    if (p == MAP_FAILED) {
        sl_reply_error(r, SL_ENOMEM, "cannot map %" PRIu64 " bytes of shared memory: %s", m->size,
                       strerror(e));
        return;
    }
    sl_shm_detach(s); /* runs of s are done: requests of a session run in order */
    s->shm = p;
    s->shm_size = m->size;
    sl_log_debug("ses.shm", "session %llu attached %llu bytes of shared memory",
                 (unsigned long long) s->id, (unsigned long long) m->size);
}

void *sl_shm_slice(const sl_session *s, const Salus__ShmSlice *slice, uint64_t bytes)
{
    if (!s->shm || !slice || slice->length != bytes || slice->offset > s->shm_size ||
        bytes > s->shm_size - slice->offset)
        return NULL;
    return (char *) s->shm + slice->offset;
}
