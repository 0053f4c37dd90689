/* The shared-memory data plane for clients on the server's host: a
 * client's segment mapped into its session, and slices of it that runs name
 * instead of carrying bytes (shm.c explains the checks). */
#ifndef SL_SHM_H
#define SL_SHM_H

#include "salus.pb-c.h"

#include <stddef.h>
#include <stdint.h>

/* A mapped segment; zeroed = none. */
typedef struct sl_shm {
    void *base;
    uint64_t size;
} sl_shm;

/* Maps descriptor fd of process pid (size bytes), after checking it is an
 * ordinary file of user uid sealed against shrinking, replacing any segment
 * seg held. Errors, with what failed in *why (static text): SL_EINVAL (size
 * out of range), SL_EPERM (cannot open it, or it fails a check), SL_ENOMEM
 * (mmap). Blocks only in the open and mmap system calls. */
int sl_shm_attach(sl_shm *seg, uint64_t pid, uint64_t uid, uint32_t fd, uint64_t size,
                  const char **why);
/* Unmaps seg's segment, if any. */
void sl_shm_detach(sl_shm *seg);
/* The bytes slice names inside seg when it lies within it and is exactly
 * `bytes` long; NULL otherwise. */
void *sl_shm_slice(const sl_shm *seg, const Salus__ShmSlice *slice, uint64_t bytes);

/* Largest segment accepted. */
#define SL_SHM_MAX_BYTES (16ull << 30)

#endif
