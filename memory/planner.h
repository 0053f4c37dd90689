/* Static ephemeral memory planner.
 *
 * An iteration's ephemeral tensors are known when its graph is registered:
 * their sizes and live ranges (the step that first writes one, the last step
 * that reads it). The planner assigns each an offset inside one block so that
 * tensors whose live ranges overlap never overlap in memory; the block's size
 * (the planned peak) is what a lane must hold to run the graph. Binding an
 * iteration's memory is then one add, and release is free.
 *
 * Algorithm: greedy by size (largest first), each tensor placed at the lowest
 * offset where it does not collide with an already placed tensor that is live
 * at the same time. O(n^2) in the number of tensors, done once per graph. */
#ifndef SL_MEM_PLANNER_H
#define SL_MEM_PLANNER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_plan_buf {
    uint64_t size;  /* bytes (0 allowed: gets offset 0, takes no space) */
    uint32_t first; /* first step at which the buffer is live */
    uint32_t last;  /* last step at which it is live (>= first) */
} sl_plan_buf;

typedef struct sl_plan_result {
    uint64_t peak;  /* size of the block that holds every buffer */
    uint64_t naive; /* sum of all buffer sizes (aligned): no reuse */
} sl_plan_result;

/* Plans n buffers; offsets[i] receives buffer i's offset, aligned to align (a
 * power of two; 0 = 256). Errors: SL_EINVAL (last < first, bad align,
 * overflow), SL_ENOMEM. offsets and *res are written only on success. */
int sl_mem_plan(const sl_plan_buf *bufs, size_t n, uint64_t align, uint64_t *offsets,
                sl_plan_result *res);

#endif
