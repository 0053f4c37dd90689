/* Shared-memory data plane for clients on the server's host (docs/architecture.md,
 * "Shared memory").
 *
 * Over ipc:// a training iteration's feeds would otherwise be packed into a
 * protobuf, written through the socket, read, unpacked and only then copied
 * to the device: four copies and a large allocation per iteration. A client
 * on this host instead hands over a memfd once per session; runs then name
 * slices of it, so an iteration's bytes are copied exactly once each way.
 *
 * The client's descriptor arrives as an open file description of its own
 * (SCM_RIGHTS, shm_socket.c): salusd never opens a path for a client, so a
 * root salusd cannot be made to open a file the client could not open
 * itself, and nothing a client controls (a lease, a FIFO without a writer,
 * a FUSE file) can make an open block. What arrives is checked, not
 * trusted, before it is mapped:
 *  - an ordinary shared-memory file: a regular file on tmpfs. hugetlbfs is
 *    refused: its pages come from a pool the client can drain after
 *    punching a hole, and the server's next access of the hole is SIGBUS;
 *    any other filesystem could fail or block a page fault in ways the
 *    client controls (FUSE, network filesystems);
 *  - open read-write: an O_PATH descriptor carries no access at all, and
 *    a read-only one would make fetches fail;
 *  - sealed against shrinking (F_SEAL_SHRINK): otherwise the client could
 *    truncate the file and turn the server's next access into SIGBUS;
 *  - at least as large as asked;
 *  - with every page allocated (sl_shm_allocated), at hand-over and again
 *    before each run that uses it: a page is charged to the memory cgroup
 *    of whoever first faults it in, and stays charged for as long as the
 *    client keeps the file, so pages salusd faulted into sparse segments
 *    would pile up in salusd's cgroup, segment after segment, beyond any
 *    bound on what it maps at once. With the client's pages already
 *    there, salusd's copies only map them.
 * Contents may change under the server at any time; it only ever copies
 * bytes in and out, and those copies are guarded (kernels/guard.h), so a
 * client racing its own segment can only garble its own data, and a fault
 * fails that client's run, never the server.
 *
 * Every mapped byte is charged to a per-session and a server-wide budget
 * before it is mapped: mapping is cheap, but the copies fault the pages into
 * salusd's memory. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "shm.h"
#include "sl_alloc.h"
#include "sl_cgroup.h"
#include "sl_error.h"
#include "sl_log.h"

int sl_shm_plane_init(sl_shm_plane *p, sl_device *dev, uint64_t session_max, uint64_t total_max)
{
    memset(p, 0, sizeof *p);
    p->wake_fd = -1;
    p->dev = dev;
    if (!total_max) {
        /* pages salusd faults in for tenants are charged to its cgroup */
        uint64_t quarter = sl_host_memory() / 4;
        total_max =
            quarter && quarter < SL_SHM_DEFAULT_TOTAL_BYTES ? quarter : SL_SHM_DEFAULT_TOTAL_BYTES;
    }
    if (!session_max) /* in a small cgroup, a session's default within the total */
        session_max =
            SL_SHM_DEFAULT_SESSION_BYTES < total_max ? SL_SHM_DEFAULT_SESSION_BYTES : total_max;
    p->session_max = session_max;
    p->total_max = total_max;
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return SL_ENOMEM;
    p->lock_ready = true;
    return SL_OK;
}

void sl_shm_plane_fini(sl_shm_plane *p)
{
    if (!p->lock_ready)
        return;
    sl_shm_reap(p);
    pthread_mutex_destroy(&p->lock);
    p->lock_ready = false;
}

int sl_shm_check_fd(int fd, uint64_t size, const char **why)
{
    /* seals first: only shared-memory files have them, and asking costs no
     * I/O, whereas fstat or fstatfs on a FUSE or network file could wait
     * for a server the client runs */
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0) {
        *why = "cannot be examined";
        return SL_EINVAL;
    }
    if (flags & O_PATH) {
        *why = "is an O_PATH descriptor (it grants no access; send a memfd opened read-write)";
        return SL_EPERM;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why = "is not a memfd sealed against shrinking (F_SEAL_SHRINK)";
        return SL_EPERM;
    }
    if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) {
        *why = "is sealed against writing (fetches are written into it)";
        return SL_EPERM;
    }
    struct stat st;
    struct statfs fs;
    if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0) {
        *why = "cannot be examined";
        return SL_EINVAL;
    }
    if (!S_ISREG(st.st_mode)) {
        *why = "is not a regular file (send a memfd)";
        return SL_EPERM;
    }
    if (fs.f_type == HUGETLBFS_MAGIC) {
        *why = "is on hugetlbfs (huge-page memfds are refused: send an ordinary memfd)";
        return SL_EPERM;
    }
    if (fs.f_type != TMPFS_MAGIC) {
        *why = "is not an ordinary shared-memory file (send a memfd)";
        return SL_EPERM;
    }
    if ((flags & O_ACCMODE) != O_RDWR) {
        *why = "is not open read-write";
        return SL_EPERM;
    }
    if (st.st_size < 0 || (uint64_t) st.st_size < size) {
        *why = "is smaller than the size asked for";
        return SL_EINVAL;
    }
    return SL_OK;
}

int sl_shm_allocated(int fd, const char **why)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 0 || st.st_blocks < 0) {
        *why = "cannot be examined";
        return SL_EINVAL;
    }
    /* tmpfs allocates whole pages, so an allocated file's blocks cover its
     * size; the whole file, not only what salusd maps, so that pages
     * allocated past the mapped part cannot stand in for holes inside it */
    if ((uint64_t) st.st_blocks < ((uint64_t) st.st_size + 511) / 512) {
        *why = "has pages that are not allocated (salusd would fault them in, charged to its own "
               "memory): allocate them first, fallocate(fd, 0, 0, size)";
        return SL_EINVAL;
    }
    return SL_OK;
}

int sl_shm_reserve(sl_shm_plane *p, uint64_t session_bytes, uint64_t size, const char **why)
{
    if (size == 0 || size > SL_SHM_MAX_BYTES) {
        *why = "has a size out of range (1 byte to 16 GiB)";
        return SL_EINVAL;
    }
    if (size > p->session_max || session_bytes > p->session_max - size) {
        *why = "would take the session's shared memory past salusd --shm-session-bytes";
        return SL_EEXHAUSTED;
    }
    int rc = SL_OK;
    pthread_mutex_lock(&p->lock);
    if (p->mapped > p->total_max || size > p->total_max - p->mapped) {
        *why = "would take salusd's shared memory past --shm-total-bytes";
        rc = SL_EEXHAUSTED;
    } else {
        p->mapped += size;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void sl_shm_unreserve(sl_shm_plane *p, uint64_t size)
{
    pthread_mutex_lock(&p->lock);
    p->mapped -= size;
    pthread_mutex_unlock(&p->lock);
}

int sl_shm_map(sl_shm_plane *p, int fd, uint64_t size, sl_shm **out)
{
    sl_shm *seg = sl_calloc(1, sizeof *seg);
    if (!seg)
        return SL_ENOMEM;
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        sl_free(seg);
        return SL_ENOMEM;
    }
    seg->base = base;
    seg->size = size;
    seg->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (seg->fd < 0) {
        (void) munmap(base, size);
        sl_free(seg);
        return SL_ENOMEM;
    }
    if (p->dev && p->dev->ops->host_register) {
        int rc = p->dev->ops->host_register(p->dev, base, size);
        if (rc != SL_OK) {
            (void) close(seg->fd);
            (void) munmap(base, size);
            sl_free(seg);
            return rc;
        }
        seg->registered = true;
    }
    *out = seg;
    return SL_OK;
}

/* Unregisters and unmaps seg, uncharges it and frees it. */
static void unmap(sl_shm_plane *p, sl_shm *seg)
{
    if (seg->registered)
        p->dev->ops->host_unregister(p->dev, seg->base);
    (void) munmap(seg->base, seg->size);
    (void) close(seg->fd); /* a checked tmpfs file: its close never blocks */
    sl_shm_unreserve(p, seg->size);
    sl_free(seg);
}

void sl_shm_retire(sl_shm_plane *p, sl_shm *seg)
{
    if (!seg)
        return;
    pthread_mutex_lock(&p->lock);
    bool later = p->wake_fd >= 0;
    if (later) {
        seg->next = p->retired;
        p->retired = seg;
        uint64_t one = 1;
        /* a non-blocking eventfd: a write fails only when the counter would
         * overflow, and then the thread is awake anyway */
        (void) !write(p->wake_fd, &one, sizeof one);
    }
    pthread_mutex_unlock(&p->lock);
    if (!later)
        unmap(p, seg);
}

void sl_shm_reap(sl_shm_plane *p)
{
    pthread_mutex_lock(&p->lock);
    sl_shm *list = p->retired;
    p->retired = NULL;
    pthread_mutex_unlock(&p->lock);
    while (list) {
        sl_shm *next = list->next;
        unmap(p, list);
        list = next;
    }
}

void *sl_shm_slice(const sl_shm *seg, const Salus__ShmSlice *slice, uint64_t bytes)
{
    if (!seg || !slice || slice->length != bytes || slice->offset > seg->size ||
        bytes > seg->size - slice->offset)
        return NULL;
    return (char *) seg->base + slice->offset;
}
