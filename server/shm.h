/* The shared-memory data plane for clients on the server's host: segments
 * that clients hand over (shm_socket.c receives them), checked and mapped
 * here, charged to a budget, and slices of them that runs name instead of
 * carrying bytes. shm.c explains the checks. */
#ifndef SL_SHM_H
#define SL_SHM_H

#include "device.h"
#include "salus.pb-c.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One mapped segment. Owned by one session (attached or staged) or by the
 * plane's retired list, never by two. */
typedef struct sl_shm {
    struct sl_shm *next; /* in the retired list */
    void *base;
    uint64_t size;
    bool registered; /* with the device (sl_device_ops.host_register) */
    /* salusd's own descriptor of the segment's file: a run asks it whether
     * the client punched holes since (sl_shm_allocated) */
    int fd;
} sl_shm;

/* What every session's segments together may map, and the segments waiting
 * to be unmapped. Unmapping a large segment takes milliseconds, so a
 * segment let go under the server lock is retired and unmapped later by
 * the descriptor socket's thread. */
typedef struct sl_shm_plane {
    /* guards mapped and retired; a leaf lock (taken with the server lock
     * held or not, never holding it while taking another) */
    pthread_mutex_t lock;
    bool lock_ready;
    sl_device *dev;
    uint64_t session_max; /* bytes one session's segments map together */
    uint64_t total_max;   /* bytes all segments map together */
    uint64_t mapped;      /* bytes mapped now (attached, staged, retired) */
    sl_shm *retired;
    /* written to when a segment is retired (an eventfd the unmapping thread
     * polls); -1: retired segments are unmapped at once */
    int wake_fd;
} sl_shm_plane;

/* Default budgets (salusd --shm-session-bytes, --shm-total-bytes). */
#define SL_SHM_DEFAULT_SESSION_BYTES (1ull << 30)
#define SL_SHM_DEFAULT_TOTAL_BYTES (8ull << 30)
/* Largest segment accepted whatever the budgets say. */
#define SL_SHM_MAX_BYTES (16ull << 30)

/* Sets up an empty plane charging segments to the given budgets (0 = the
 * defaults; the total at most a quarter of the host's memory when it is
 * not given). dev is used to register segments with the device. Errors:
 * SL_ENOMEM. */
int sl_shm_plane_init(sl_shm_plane *p, sl_device *dev, uint64_t session_max, uint64_t total_max);
/* Unmaps every retired segment; safe on a zeroed plane. Segments still held
 * by sessions must have been retired first. */
void sl_shm_plane_fini(sl_shm_plane *p);

/* Checks descriptor fd as a segment of size bytes, without opening
 * anything: an ordinary shared-memory file (tmpfs; hugetlbfs refused),
 * open read-write, sealed against shrinking, at least size bytes. Never
 * blocks. SL_OK or SL_EPERM / SL_EINVAL with the failed check in *why
 * (static text). */
int sl_shm_check_fd(int fd, uint64_t size, const char **why);

/* Whether every page of descriptor fd's file is allocated (st_blocks
 * covers its whole size), so that salusd's copies into it fault in pages
 * the client's memory cgroup already pays for rather than allocating new
 * ones charged to salusd's: a page of shared memory is charged to the
 * cgroup of whoever first touches it, and stays charged there for as long
 * as any process keeps the file. SL_OK, or SL_EINVAL with what to do in
 * *why (static text). One fstat of a file already checked to be on tmpfs:
 * never blocks. */
int sl_shm_allocated(int fd, const char **why);

/* Charges size bytes to the plane for a session whose segments already map
 * session_bytes. SL_OK, or SL_EEXHAUSTED / SL_EINVAL (size 0 or above
 * SL_SHM_MAX_BYTES) with the reason in *why (static text). Never blocks
 * (takes the plane lock). */
int sl_shm_reserve(sl_shm_plane *p, uint64_t session_bytes, uint64_t size, const char **why);
/* Gives back a reservation that was never mapped. */
void sl_shm_unreserve(sl_shm_plane *p, uint64_t size);

/* Maps size bytes of checked descriptor fd (reserved with sl_shm_reserve)
 * and registers them with the device. On success *out owns the mapping and
 * a duplicate of fd; fd may be closed. Errors (the reservation is kept: unreserve it):
 * SL_ENOMEM (mmap, allocation or no descriptor left), the device's registration error. May
 * block for as long as mapping and pinning size bytes take: call it
 * without the server lock. */
int sl_shm_map(sl_shm_plane *p, int fd, uint64_t size, sl_shm **out);

/* Lets go of seg (NULL is fine): it is unmapped and its bytes uncharged
 * later, outside the caller's locks. Never blocks. */
void sl_shm_retire(sl_shm_plane *p, sl_shm *seg);
/* Unmaps the retired segments (the plane's unmapping thread, or fini).
 * Call without the server lock. */
void sl_shm_reap(sl_shm_plane *p);

/* The bytes slice names inside seg when seg is not NULL, the slice lies
 * within it and is exactly `bytes` long; NULL otherwise. */
void *sl_shm_slice(const sl_shm *seg, const Salus__ShmSlice *slice, uint64_t bytes);

#endif
