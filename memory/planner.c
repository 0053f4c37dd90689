#include "planner.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sl_alloc.h"
#include "sl_error.h"

struct order_entry {
    uint64_t size;
    size_t index;
};

/* Largest first: big buffers are the hardest to fit, and placing them while
 * the block is emptiest keeps the peak low. The index tie-break makes the
 * plan independent of qsort's instability. */
static int by_size_desc(const void *pa, const void *pb)
{
    const struct order_entry *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    return a->index < b->index ? -1 : (a->index > b->index);
}

static bool live_together(const sl_plan_buf *a, const sl_plan_buf *b)
{
    return a->first <= b->last && b->first <= a->last;
}

int sl_mem_plan(const sl_plan_buf *bufs, size_t n, uint64_t align, uint64_t *offsets,
                sl_plan_result *res)
{
    if (!res || (n > 0 && (!bufs || !offsets)))
        return SL_EINVAL;
    if (align == 0)
        align = 256;
    if ((align & (align - 1)) != 0)
        return SL_EINVAL;

    /* Validate everything first: after this the only failure left is host
     * memory, which happens before any output is written. */
    uint64_t naive = 0;
    for (size_t i = 0; i < n; i++) {
        if (bufs[i].last < bufs[i].first || bufs[i].size > UINT64_MAX - (align - 1))
            return SL_EINVAL;
        if (!sl_add_ok(naive, sl_align_up(bufs[i].size, align), &naive))
            return SL_EINVAL;
    }
    if (n == 0) {
        res->peak = 0;
        res->naive = 0;
        return SL_OK;
    }

    struct order_entry *order = sl_calloc(n, sizeof(*order));
    if (!order)
        return SL_ENOMEM;
    /* Indices of placed, non-empty buffers in offset order, so that one pass
     * finds the lowest gap: O(n) per buffer, O(n^2) in all. */
    size_t *placed = sl_calloc(n, sizeof(*placed));
    if (!placed)
        goto out_free_order;

    for (size_t i = 0; i < n; i++) {
        order[i].size = bufs[i].size;
        order[i].index = i;
    }
    qsort(order, n, sizeof(*order), by_size_desc);

    size_t n_placed = 0;
    uint64_t peak = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k].index;
        uint64_t size = sl_align_up(bufs[i].size, align);
        offsets[i] = 0;
        if (size == 0)
            continue;

        /* No sum below overflows: by induction every buffer ends within the
         * sum of the sizes placed so far, which is at most naive. */
        uint64_t at = 0;
        for (size_t j = 0; j < n_placed; j++) {
            size_t q = placed[j];
            if (!live_together(&bufs[i], &bufs[q]))
                continue;
            if (at + size <= offsets[q])
                break;
            uint64_t end = offsets[q] + sl_align_up(bufs[q].size, align);
            if (end > at)
                at = end;
        }
        offsets[i] = at;
        if (at + size > peak)
            peak = at + size;

        size_t pos = n_placed;
        while (pos > 0 && offsets[placed[pos - 1]] > at)
            pos--;
        memmove(&placed[pos + 1], &placed[pos], (n_placed - pos) * sizeof(*placed));
        placed[pos] = i;
        n_placed++;
    }

    res->peak = peak;
    res->naive = naive;
    sl_free(placed);
    sl_free(order);
    return SL_OK;

out_free_order:
    sl_free(order);
    return SL_ENOMEM;
}
