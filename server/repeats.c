/* Repeated requests (repeats.h). */
#include "repeats.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

struct pipe_rec {
    sl_map in_flight; /* seq -> session id + 1 */
    bool has_last;
    uint64_t last_seq, last_session;
    size_t last_len; /* its encoded reply's length */
    bool last_kept;  /* last_reply holds it (it was small enough) */
    uint8_t last_reply[SL_REPEATS_KEEP];
};

int sl_repeats_init(sl_repeats *rp)
{
    return pthread_mutex_init(&rp->lock, NULL) == 0 ? SL_OK : SL_ENOMEM;
}

static void rec_free(struct pipe_rec *p)
{
    sl_map_fini(&p->in_flight);
    sl_free(p);
}

void sl_repeats_fini(sl_repeats *rp)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&rp->pipes, &i, NULL, &v))
        rec_free(v);
    sl_map_fini(&rp->pipes);
    pthread_mutex_destroy(&rp->lock);
}

int sl_repeats_check(sl_repeats *rp, uint32_t pipe_id, uint64_t session_id, uint64_t seq,
                     void **copy, size_t *len)
{
    if (seq == 0)
        return SL_REPEAT_NEW;
    int verdict = SL_REPEAT_NEW;
    pthread_mutex_lock(&rp->lock);
    struct pipe_rec *p = sl_map_get(&rp->pipes, pipe_id);
    if (!p) {
        for (size_t i = 0; i < sizeof rp->gone / sizeof rp->gone[0]; i++)
            if (rp->gone[i] == pipe_id)
                goto out; /* closed: a record now would never be dropped */
        if (!(p = sl_calloc(1, sizeof *p)) || sl_map_put(&rp->pipes, pipe_id, p) != SL_OK) {
            sl_free(p);
            goto out; /* untracked: a repeat would run again, as without this */
        }
    }
    void *first = sl_map_get(&p->in_flight, seq);
    if (first && (uint64_t) (uintptr_t) first == session_id + 1) {
        verdict = SL_REPEAT_IN_FLIGHT;
    } else if (p->has_last && p->last_seq == seq && p->last_session == session_id) {
        verdict = SL_REPEAT_ANSWERED;
        *copy = NULL;
        *len = p->last_len;
        if (p->last_kept && (*copy = sl_malloc(p->last_len)))
            memcpy(*copy, p->last_reply, p->last_len);
    } else {
        (void) sl_map_put(&p->in_flight, seq, (void *) (uintptr_t) (session_id + 1));
    }
    if (verdict != SL_REPEAT_NEW)
        atomic_fetch_add(&rp->seen, 1);
out:
    pthread_mutex_unlock(&rp->lock);
    return verdict;
}

void sl_repeats_answered(void *arg, sl_reply *r, const void *bytes, size_t len)
{
    sl_repeats *rp = arg;
    uint32_t pipe_id;
    uint64_t session_id;
    const Salus__Reply *m = sl_reply_msg(r);
    if (!sl_reply_tracked(r, &pipe_id, &session_id) || m->seq == 0)
        return;
    pthread_mutex_lock(&rp->lock);
    struct pipe_rec *p = sl_map_get(&rp->pipes, pipe_id);
    if (p) {
        (void) sl_map_del(&p->in_flight, m->seq);
        p->has_last = true;
        p->last_seq = m->seq;
        p->last_session = session_id;
        p->last_len = len;
        p->last_kept = bytes && len <= SL_REPEATS_KEEP;
        if (p->last_kept)
            memcpy(p->last_reply, bytes, len);
    }
    pthread_mutex_unlock(&rp->lock);
}

void sl_repeats_pipe_gone(sl_repeats *rp, uint32_t pipe_id)
{
    pthread_mutex_lock(&rp->lock);
    rp->gone[rp->gone_next++ % (sizeof rp->gone / sizeof rp->gone[0])] = pipe_id;
    struct pipe_rec *p = sl_map_del(&rp->pipes, pipe_id);
    pthread_mutex_unlock(&rp->lock);
    if (p)
        rec_free(p);
}
