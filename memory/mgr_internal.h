/* Private to the memory manager (manager.c, lanes.c, compact.c,
 * admission.c): the records behind sl_mem_mgr and the operations the files
 * share. Nothing here is part of the contract in manager.h.
 *
 * Layout. One sl_mem_pool over [0, capacity) holds every live block:
 * persistent regions (one per session that declared P > 0: its whole
 * reservation in one piece, with its own pool inside for its tensors),
 * persistent blocks of sessions that declared P = 0 (one per sl_mem_alloc),
 * and lane blocks (framework part followed by the ephemeral part). The
 * manager keeps its own record of each block (address, size, owner) so that
 * it can check the pools, free a session's memory on release and, for
 * compaction, rebuild the arena pool with idle lanes at planned addresses
 * (compact.c).
 *
 * Why regions: tensors of many sessions interleaved in one best-fit pool
 * leave, when a session goes, holes between the tensors of the others, and
 * compaction cannot move tensors (they hold data). A region keeps a
 * session's tensors together: sessions never fragment each other, a session
 * that leaves gives back one block of its full size, and a session that
 * cannot get its P in one piece is refused (FRAGMENTATION) at admission,
 * before it uploads anything, not halfway through.
 *
 * Sizes are charged in 256-byte units: declared P and E, peaks, persistent
 * blocks and the framework part are rounded up to 256, and an ephemeral need
 * is at least 256 bytes (so that a lane block is never empty).
 *
 * A session's framework charge (sl_mem_charge_framework) is the one class
 * with no block: the device allocates that memory itself, outside the
 * arena. It is counted in the rule, so the pool holds exactly the left side
 * of the rule less the sessions' charges. A session with a region holds
 * as much of its charge as fits in the region's unused bytes there
 * (framework_region): its tensors cannot use those bytes (until
 * sl_mem_framework_move_out moves them beside P), which stand for that
 * part of the charge as the arena's free bytes stand for the rest, so
 * only the rest (mgr_outside) counts beside P: in the rule, in its quota
 * here, in its tenant's in the server. */
#ifndef SL_MEM_MGR_INTERNAL_H
#define SL_MEM_MGR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "manager.h"
#include "pool.h"
#include "sl_error.h"
#include "sl_map.h"

#define MGR_ALIGN 256u

struct mgr_session;
struct mgr_lane;
struct mgr_compact_cache;

/* A persistent block of one session. */
struct mgr_block {
    uint64_t addr, size; /* size after rounding: what the pool holds */
    struct mgr_session *owner;
    struct mgr_block *prev, *next; /* the owner's blocks */
};

enum mgr_state {
    MGR_QUEUED,   /* waiting in the admission queue */
    MGR_READY,    /* admitted by the queue, not yet reported by next_admitted */
    MGR_ADMITTED, /* admitted and reported */
};

struct mgr_session {
    uint64_t id;
    uint64_t declared_p, declared_e; /* as the caller passed them */
    uint64_t p;                      /* declared P, rounded: persistent reservation */
    uint64_t e;                      /* declared E rounded, or the default when 0 */
    uint64_t peak;                   /* as last set by sl_mem_set_ephemeral */
    bool peak_set;
    uint64_t used;      /* bytes in its persistent blocks */
    uint64_t framework; /* its own framework charge, exact (counted rounded up) */
    /* the part of framework held in its region's unused bytes (exact): its
     * tensors may use only p - align_up(framework_region) of the region */
    uint64_t framework_region;
    uint64_t region;          /* base of its persistent region (p bytes) */
    sl_mem_pool *region_pool; /* NULL: no region (P = 0, or not admitted) */
    enum mgr_state state;
    bool exclusive;     /* never shares its lane (high-priority sessions) */
    int reason;         /* why it waits (queued) */
    uint32_t bypassed;  /* sessions ranked behind it admitted while it waited */
    uint64_t rank;      /* the queue's order: smaller first (sl_mem_admit_ranked) */
    uint64_t seq;       /* arrival order, the tie break among equal ranks */
    uint32_t overtaken; /* later arrivals admitted while it waited */
    bool aged;          /* overtaken SL_MEM_MAX_OVERTAKEN times: rank 0 for good */
    struct mgr_lane *lane;
    struct mgr_session *lane_prev, *lane_next; /* sessions of its lane */
    struct mgr_block *blocks;
    struct mgr_session *q_prev, *q_next; /* queue or ready list */
};

/* A FIFO of sessions linked through q_prev/q_next. */
struct mgr_list {
    struct mgr_session *head, *tail;
    uint32_t count;
};

struct mgr_lane {
    uint32_t id;       /* the lowest free one at creation: ids are reused */
    uint64_t serial;   /* never reused: tells this lane from others with its id */
    uint64_t addr;     /* start of the block: the framework part comes first */
    uint64_t size;     /* ephemeral part, after it */
    uint64_t max_need; /* largest need among its sessions (0 when empty) */
    uint32_t n_sessions;
    bool busy;
    bool exclusive; /* holds an exclusive session: nobody else joins */
    struct mgr_session *sessions;
};

struct sl_mem_mgr {
    uint64_t capacity;
    uint64_t quota;        /* per-session P + E limit, <= capacity */
    uint64_t framework;    /* per lane, rounded */
    uint64_t default_e;    /* rounded, >= 256 */
    uint64_t spread_limit; /* see sl_mem_config */
    sl_mem_pool *pool;
    sl_map sessions;         /* id -> mgr_session, every state */
    sl_map blocks;           /* addr + 1 -> mgr_block */
    sl_map lane_ids;         /* id -> mgr_lane */
    struct mgr_lane **lanes; /* ascending ids */
    size_t n_lanes, lanes_cap;
    uint64_t next_lane_serial;    /* the last serial given (0 = none yet) */
    struct mgr_list queue, ready; /* queue: by (rank, seq); ready: as admitted */
    uint64_t next_seq;
    uint32_t n_admitted; /* READY + ADMITTED */
    uint64_t persistent_used;
    uint64_t persistent_reserved; /* sum of max(p, used) over admitted sessions */
    size_t n_arena_blocks;        /* persistent blocks outside regions */
    /* Bumped whenever persistent memory in the arena changes (a region or a
     * block of a session without one comes or goes): what compaction's
     * cache of the persistent layout is keyed on. */
    uint64_t persistent_gen;
    struct mgr_compact_cache *compact_cache;
    uint64_t lane_bytes; /* sum of lane sizes (ephemeral parts) */
    /* sum over admitted sessions of the part of their framework charge
     * their region does not hold (mgr_outside), each rounded
     * up to 256: counted in the rule, held by no block of the pool */
    uint64_t framework_charged;
};

/* ---- manager.c ---- */

/* Bytes s's lane must hold if its peak were (peak, peak_set): max(E, peak)
 * for a declared E; for a session that declared 0, the default until a peak
 * is set and the peak after (the default is a placeholder, not a promise).
 * At least 256. peak <= capacity. */
uint64_t mgr_need_with(const sl_mem_mgr *m, const struct mgr_session *s, uint64_t peak,
                       bool peak_set);
uint64_t mgr_need(const sl_mem_mgr *m, const struct mgr_session *s);
/* What s holds against its quota besides its ephemeral need: max(P,
 * used) plus the part of its framework charge its region does not hold,
 * rounded. */
uint64_t mgr_held(const struct mgr_session *s);
/* The part of s's framework charge its region does not hold, rounded up
 * to 256: what the rule and the quotas count of it. */
uint64_t mgr_outside(const struct mgr_session *s);
/* Left side of the admission rule: reserved persistent + lanes + framework
 * (the lanes' and the sessions' charges). */
uint64_t mgr_reserved(const sl_mem_mgr *m);
/* Whether the rule still holds after the reservation grows by delta. */
bool mgr_rule_allows(const sl_mem_mgr *m, uint64_t delta);

/* Fills the public record of s. */
void mgr_session_info(const sl_mem_mgr *m, const struct mgr_session *s, sl_mem_session_info *out);

void mgr_list_push(struct mgr_list *l, struct mgr_session *s);
/* Inserts s after every session ranked before it (mgr_ranked_before). */
void mgr_list_insert_ranked(struct mgr_list *l, struct mgr_session *s);
bool mgr_ranked_before(const struct mgr_session *a, const struct mgr_session *b);
void mgr_list_remove(struct mgr_list *l, struct mgr_session *s);

/* ---- lanes.c ---- */

struct mgr_lane *mgr_lane_find(const sl_mem_mgr *m, uint32_t id);
/* The lane a session of `need` bytes should share (size >= need, not skip),
 * or NULL. */
struct mgr_lane *mgr_lane_best_fit(const sl_mem_mgr *m, uint64_t need, const struct mgr_lane *skip);
/* The idle lane that grows least to hold need (largest size < need), or
 * NULL. */
struct mgr_lane *mgr_lane_grow_candidate(const sl_mem_mgr *m, uint64_t need);
/* Creates an empty lane of `size` ephemeral bytes. The caller has checked
 * the admission rule. Errors: SL_EEXHAUSTED (no contiguous block even after
 * compaction), SL_ENOMEM; nothing changes on error except that idle lanes
 * may have been compacted. */
int mgr_lane_create(sl_mem_mgr *m, uint64_t size, struct mgr_lane **out);
/* Gives idle lane l `size` ephemeral bytes (zero copy; it may move). The
 * caller has checked the rule when it grows. Errors as mgr_lane_create; on
 * error l keeps its size. */
int mgr_lane_resize(sl_mem_mgr *m, struct mgr_lane *l, uint64_t size);
void mgr_lane_join(sl_mem_mgr *m, struct mgr_lane *l, struct mgr_session *s);
/* Takes s out of its lane; the caller then calls mgr_lane_tidy. */
void mgr_lane_leave(sl_mem_mgr *m, struct mgr_session *s);
/* Recomputes max_need after a member's need changed. */
void mgr_lane_refresh(struct mgr_lane *l, const sl_mem_mgr *m);
/* If l is idle: reclaims it when empty, else shrinks it to its max_need
 * (best effort: a lane that cannot shrink now stays larger). */
void mgr_lane_tidy(sl_mem_mgr *m, struct mgr_lane *l);
/* Places a new persistent block: best fit, else compaction. Errors as
 * mgr_lane_create. */
int mgr_place_block(sl_mem_mgr *m, uint64_t size, uint64_t *addr);

/* ---- compact.c ---- */

/* What a compaction must make room for (all zero: nothing). */
struct mgr_request {
    uint64_t size;           /* a new block (persistent or lane), 0 = none */
    struct mgr_lane *resize; /* an idle lane that gets a new ephemeral size */
    uint64_t resize_to;
    uint64_t addr; /* out: where the new block is */
};

/* Replans every idle lane (moved, and shrunk to its max_need) plus req
 * around the fixed blocks (persistent blocks, busy lanes) and rebuilds the
 * pool to match. With apply_if_better, applies only when the plan makes the
 * largest free block larger or shrinks a lane (sl_mem_compact). *moved gets
 * the number of lanes whose address changed. Errors: SL_EEXHAUSTED (the plan
 * does not fit), SL_ENOMEM, SL_EINTERNAL (the pool did not place a block
 * where planned); the manager is unchanged on error. */
int mgr_compact(sl_mem_mgr *m, struct mgr_request *req, bool apply_if_better, size_t *moved);
/* Frees compaction's cache (sl_mem_mgr_destroy). */
void mgr_compact_fini(sl_mem_mgr *m);
/* Rebuilds the pool with lane l at its current address and `size`
 * ephemeral bytes, everything else in place (shrinking in place). Errors:
 * SL_ENOMEM, SL_EINTERNAL; unchanged on error. */
int mgr_shrink_in_place(sl_mem_mgr *m, struct mgr_lane *l, uint64_t size);

/* ---- admission.c ---- */

/* Tries to admit s (not admitted) now: picks or makes its lane and charges
 * its reservation. Errors: SL_EEXHAUSTED with *reason CAPACITY or
 * FRAGMENTATION, SL_ENOMEM, SL_EINTERNAL. Ignores the queue. */
int mgr_try_place(sl_mem_mgr *m, struct mgr_session *s, int *reason);
/* Admits queued sessions that fit now, in order and within the bypass
 * bound, moving them to the ready list. Called at the end of every public
 * call that may have freed memory; never from inside another operation. */
void mgr_pump(sl_mem_mgr *m);

/* A refusal for lack of device memory: *reason (when asked for) says why
 * (SL_MEM_QUOTA, _CAPACITY or _FRAGMENTATION). Returns SL_EEXHAUSTED. */
static inline int sl_mem_refuse(int *reason, int why)
{
    if (reason)
        *reason = why;
    return SL_EEXHAUSTED;
}

#endif
