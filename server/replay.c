/* Iteration graph records (replay.h). */
#include "replay.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

sl_replay *sl_replay_new(void)
{
    sl_replay *r = sl_calloc(1, sizeof *r);
    if (r && pthread_mutex_init(&r->lock, NULL) != 0) {
        sl_free(r);
        return NULL;
    }
    return r;
}

void sl_replay_drop_steps(sl_replay *r)
{
    for (uint32_t k = 0; r->steps && k < r->n_ops; k++)
        if (r->steps[k].exec)
            r->dev->ops->graph_destroy(r->dev, r->steps[k].exec);
    sl_free(r->steps);
    r->steps = NULL;
}

void sl_replay_drop(sl_replay *r)
{
    for (uint32_t i = 0; i < r->n_seg; i++)
        if (r->exec[i])
            r->dev->ops->graph_destroy(r->dev, r->exec[i]);
    sl_free(r->exec);
    sl_free(r->seg_end);
    r->exec = NULL;
    r->seg_end = NULL;
    r->n_seg = 0;
    r->bytes = 0;
}

void sl_replay_add(sl_replay *r, sl_replay_sums *sum)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    sum->replays += r->replays;
    sum->recordings += r->recordings;
    sum->fallbacks += r->fallbacks;
    sum->bytes += r->bytes;
    for (uint32_t k = 0; r->steps && k < r->n_ops; k++)
        sum->bytes += r->steps[k].bytes;
    if (r->reason[0] && !sum->reason[0])
        memcpy(sum->reason, r->reason, sizeof sum->reason);
    pthread_mutex_unlock(&r->lock);
}

uint64_t sl_replay_bytes(const sl_replay *r)
{
    uint64_t bytes = r->bytes;
    for (uint32_t k = 0; r->steps && k < r->n_ops; k++)
        bytes += r->steps[k].bytes;
    return bytes;
}

int sl_replay_charge(sl_replay *r, sl_mem_mgr *mem, uint64_t owner, int *reason)
{
    uint64_t want = sl_replay_bytes(r);
    if (r->mem && r->charged > want) {
        sl_mem_uncharge_framework(r->mem, r->owner, r->charged - want);
        r->charged = want;
    }
    if (want > r->charged) {
        int rc = sl_mem_charge_framework(mem, owner, want - r->charged, reason, NULL);
        if (rc != SL_OK)
            return rc;
        r->charged = want;
    }
    r->mem = mem;
    r->owner = owner;
    return SL_OK;
}

void sl_replay_release(sl_replay *r)
{
    if (!r)
        return;
    sl_replay_drop(r);
    sl_replay_drop_steps(r);
    if (r->mem && r->charged)
        sl_mem_uncharge_framework(r->mem, r->owner, r->charged);
    r->charged = 0;
}

void sl_replay_free(sl_replay *r)
{
    if (!r)
        return;
    sl_replay_release(r);
    pthread_mutex_destroy(&r->lock);
    sl_free(r);
}

/* FNV-1a, eight bytes a step where it can (the key is computed for every
 * replayable iteration: a few kilobytes of calls). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t sl_replay_key_start(const void *stream)
{
    return fnv(14695981039346656037ull, &stream, sizeof stream);
}

uint64_t sl_replay_key_add(uint64_t h, uint64_t word)
{
    return fnv(h, &word, sizeof word);
}
