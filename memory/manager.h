/* The device memory manager: every byte of the device arena in one of three
 * classes, ephemeral memory in lanes, and admission that never lets one
 * session hurt another.
 *
 * Classes. *Persistent* memory (session tensors) is allocated per session,
 * best-fit, and charged to the session. *Ephemeral* memory is organised in
 * lanes: a lane is one contiguous block that runs one iteration at a time;
 * the iteration's whole ephemeral plan lives at the lane's base. *Framework*
 * memory (library workspaces, scratchpads) belongs to lanes: every lane's
 * block starts with cfg.framework_per_lane bytes that the server hands to the
 * device backend as that lane's workspace, followed by the ephemeral part.
 *
 * Lanes hold no data between iterations, so an idle lane can be created,
 * grown, shrunk, merged and moved at zero copy cost. Several sessions share a
 * lane when their ephemeral peaks fit in it (they then take turns).
 *
 * Admission rule. A session declares (persistent P, ephemeral E). It is
 * admitted when P + E <= the per-session quota, and
 *     sum over admitted sessions of max(P, used persistent)
 *   + sum of lane sizes + framework            <= capacity
 * still holds with it, and it is assigned a lane whose size >= E (an
 * existing lane if one fits — sharing is preferred — else a new one). When
 * it does not fit it is refused, or queued if it asked to wait, with a
 * reason: QUOTA (can never fit: exceeds the per-session quota or the whole
 * capacity), CAPACITY (not enough free memory now), FRAGMENTATION (enough
 * free memory, but no contiguous block even after compacting idle lanes).
 * Queued sessions are admitted in arrival order as memory frees up; a
 * later, smaller session may be admitted before a waiting larger one at most
 * SL_MEM_MAX_BYPASS times, after which admission waits for the head (no
 * starvation).
 *
 * Pure library: no I/O, no threads, no device calls; addresses are offsets
 * in [0, capacity). Not thread-safe: the caller serialises all calls. */
#ifndef SL_MEM_MANAGER_H
#define SL_MEM_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_MEM_MAX_BYPASS 8

typedef struct sl_mem_mgr sl_mem_mgr;

enum sl_mem_reason {
    SL_MEM_FITS = 0,
    SL_MEM_QUOTA,
    SL_MEM_CAPACITY,
    SL_MEM_FRAGMENTATION,
};

/* Static name of a reason: "fits", "quota", "capacity", "fragmentation". */
const char *sl_mem_reason_name(int reason);

typedef struct sl_mem_config {
    uint64_t capacity;          /* arena bytes (multiple of 256) */
    uint64_t session_quota;     /* max P + E of one session; 0 = capacity */
    uint64_t framework_per_lane; /* framework bytes charged for every lane */
    uint64_t default_ephemeral; /* E of a session that declares 0 (e.g. 64 MiB) */
} sl_mem_config;

/* Creates a manager. Errors: SL_EINVAL (capacity 0 or not 256-aligned,
 * default_ephemeral + framework_per_lane > capacity), SL_ENOMEM. */
int sl_mem_mgr_create(const sl_mem_config *cfg, sl_mem_mgr **out);
/* Frees the manager and all its bookkeeping. NULL is fine. */
void sl_mem_mgr_destroy(sl_mem_mgr *m);

/* ---- sessions ---- */

/* Asks to admit session id (nonzero, unique) declaring persistent bytes p and
 * ephemeral peak e (0 = cfg.default_ephemeral). On SL_OK the session is
 * admitted and *lane is its lane id. Otherwise *reason says why and the
 * result is SL_EEXHAUSTED; with wait = true the session is queued (unless the
 * reason is QUOTA, which can never be satisfied) and will be reported by
 * sl_mem_next_admitted once it fits. Errors: SL_EINVAL (id 0 or in use),
 * SL_EEXHAUSTED, SL_ENOMEM. */
int sl_mem_admit(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, bool wait, int *reason,
                 uint32_t *lane);

/* After memory was released (sl_mem_release, sl_mem_free): pops the next
 * queued session that is now admitted. Returns true with *id and *lane set,
 * false when none is. Call in a loop. */
bool sl_mem_next_admitted(sl_mem_mgr *m, uint64_t *id, uint32_t *lane);

/* Removes a session, admitted or queued: frees all its persistent blocks,
 * drops it from its lane (an empty lane is reclaimed, unless busy: then at
 * sl_mem_lane_idle). Unknown ids are ignored. */
void sl_mem_release(sl_mem_mgr *m, uint64_t id);

/* ---- persistent memory ---- */

/* Allocates bytes for admitted session id. Errors: SL_ENOTFOUND (not
 * admitted), SL_EEXHAUSTED with *reason QUOTA (the session's used + bytes
 * would exceed its declared P when P > 0), CAPACITY (would break the
 * admission rule) or FRAGMENTATION (no contiguous block, even after
 * compacting idle lanes), SL_EINVAL (bytes 0), SL_ENOMEM. reason may be
 * NULL. */
int sl_mem_alloc(sl_mem_mgr *m, uint64_t id, uint64_t bytes, uint64_t *addr, int *reason);
/* Frees a block of session id. Errors: SL_EINVAL (not its block). */
int sl_mem_free(sl_mem_mgr *m, uint64_t id, uint64_t addr);

/* ---- ephemeral memory and lanes ---- */

/* Makes sure session id's lane holds `peak` bytes (a graph was registered):
 * nothing to do if it does; otherwise moves the session to another lane
 * that fits, or grows its lane if the lane is idle and no other session
 * needs it smaller... (any zero-copy reshaping that keeps the admission rule),
 * or creates a new lane. peak > the session's declared E is allowed only
 * within its quota. On SL_OK *lane is the (possibly new) lane. Errors:
 * SL_ENOTFOUND, SL_EEXHAUSTED with *reason, SL_EBUSY (the session must move
 * but its lane is running its iteration: retry when idle). */
int sl_mem_set_ephemeral(sl_mem_mgr *m, uint64_t id, uint64_t peak, uint32_t *lane, int *reason);

/* Marks a lane busy (an iteration runs in it) or idle. Busy lanes are never
 * moved or resized. sl_mem_lane_idle may reclaim an empty lane. */
void sl_mem_lane_busy(sl_mem_mgr *m, uint32_t lane);
void sl_mem_lane_idle(sl_mem_mgr *m, uint32_t lane);

typedef struct sl_mem_lane_info {
    uint32_t id;
    uint64_t base, size;             /* the ephemeral part: [base, base + size) */
    uint64_t framework_base, framework; /* the workspace part, just below base */
    uint32_t n_sessions;
    uint64_t max_peak;   /* largest ephemeral peak among its sessions */
    bool busy;
} sl_mem_lane_info;

/* Geometry of lane id. Errors: SL_ENOTFOUND. */
int sl_mem_lane_get(const sl_mem_mgr *m, uint32_t id, sl_mem_lane_info *out);

/* Lanes that exist now, ids ascending: writes up to max and returns how many
 * exist (may be > max). */
size_t sl_mem_lanes(const sl_mem_mgr *m, sl_mem_lane_info *out, size_t max);

/* Moves idle lanes so free memory is contiguous (zero copy: idle lanes hold
 * no data); merges nothing that is in use. Returns the number of lanes
 * moved. Called automatically when an allocation or admission fails for
 * fragmentation; exposed for tests and the status "defragment" command. */
size_t sl_mem_compact(sl_mem_mgr *m);

/* ---- status ---- */

typedef struct sl_mem_stats {
    uint64_t capacity;
    uint64_t persistent_used;     /* bytes in persistent blocks */
    uint64_t persistent_reserved; /* sum over admitted sessions of max(P, used) */
    uint64_t lanes;               /* sum of lane sizes */
    uint64_t framework;
    uint64_t free;                /* capacity - used - lanes - framework */
    uint64_t largest_free;        /* largest contiguous free block */
    double fragmentation;         /* 1 - largest_free / free (0 when free == 0) */
    uint32_t n_lanes, n_sessions, n_queued;
} sl_mem_stats;
void sl_mem_get_stats(const sl_mem_mgr *m, sl_mem_stats *st);

typedef struct sl_mem_session_info {
    uint64_t id;
    uint64_t declared_p, declared_e;
    uint64_t used;  /* persistent bytes allocated */
    uint64_t peak;  /* ephemeral peak set by sl_mem_set_ephemeral */
    uint32_t lane;
    bool queued;
    int reason;     /* why it waits (queued sessions) */
} sl_mem_session_info;
/* Info on one session, admitted or queued. Errors: SL_ENOTFOUND. */
int sl_mem_session_get(const sl_mem_mgr *m, uint64_t id, sl_mem_session_info *out);
/* Queued sessions in admission order: writes up to max, returns the count. */
size_t sl_mem_queue(const sl_mem_mgr *m, sl_mem_session_info *out, size_t max);

/* Checks every invariant: no two live blocks (persistent blocks, lanes,
 * framework) overlap, all inside [0, capacity); per-session and per-class
 * accounting exact; the admission rule holds; every admitted session's lane
 * holds its peak. Returns SL_OK or SL_EINTERNAL. O(n log n), for tests. */
int sl_mem_check(const sl_mem_mgr *m);

#endif
