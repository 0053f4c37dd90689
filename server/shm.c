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

#include "shm.h"
#include "sl_error.h"

void sl_shm_detach(sl_shm *seg)
{
    if (seg->base)
        (void) munmap(seg->base, seg->size);
    seg->base = NULL;
    seg->size = 0;
}

/* Opens and checks the client's segment; the fd on success. */
static int open_segment(uint64_t pid, uint64_t uid, uint32_t fd, uint64_t size, int *out,
                        const char **why)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%" PRIu64 "/fd/%" PRIu32, pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (f < 0) {
        *why = "cannot be opened by salusd (cannot open it through /proc)";
        return SL_EPERM;
    }
    struct stat st;
    int seals = fcntl(f, F_GET_SEALS);
    const char *bad = NULL;
    if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode))
        bad = "is not a regular file";
    else if ((uint64_t) st.st_uid != uid)
        bad = "belongs to another user";
    else if ((uint64_t) st.st_size < size)
        bad = "is smaller than the size asked for";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        bad = "is not sealed against shrinking (memfd with F_SEAL_SHRINK)";
    if (bad) {
        (void) close(f);
        *why = bad;
        return SL_EPERM;
    }
    *out = f;
    return SL_OK;
}

int sl_shm_attach(sl_shm *seg, uint64_t pid, uint64_t uid, uint32_t fd, uint64_t size,
                  const char **why)
{
    if (size == 0 || size > SL_SHM_MAX_BYTES) {
        *why = "has a size out of range";
        return SL_EINVAL;
    }
    int f, rc = open_segment(pid, uid, fd, size, &f, why);
    if (rc != SL_OK)
        return rc;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    (void) close(f); /* the mapping keeps the segment */
    if (p == MAP_FAILED) {
        *why = "cannot be mapped";
        return SL_ENOMEM;
    }
    sl_shm_detach(seg);
    seg->base = p;
    seg->size = size;
    return SL_OK;
}

void *sl_shm_slice(const sl_shm *seg, const Salus__ShmSlice *slice, uint64_t bytes)
{
    if (!seg->base || !slice || slice->length != bytes || slice->offset > seg->size ||
        bytes > seg->size - slice->offset)
        return NULL;
    return (char *) seg->base + slice->offset;
}
