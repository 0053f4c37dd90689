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
 * A session may also be charged framework memory of its own that the device
 * allocates outside the arena (its recorded graphs: sl_mem_charge_framework);
 * it has no address here but counts like the rest. A session with a
 * persistent region holds what fits of that charge in the region's unused
 * bytes, which its tensors then cannot use (see "Framework memory of a
 * session" below).
 *
 * Lanes hold no data between iterations, so an idle lane can be created,
 * grown, shrunk, merged and moved at zero copy cost. Several sessions share a
 * lane when their ephemeral peaks fit in it (they then take turns).
 *
 * Admission rule. A session declares (persistent P, ephemeral E). It is
 * admitted when P + E <= the per-session quota, and
 *     sum over admitted sessions of max(P, used persistent)
 *   + sum of lane sizes + framework            <= capacity
 * (framework: every lane's part, plus the sessions' own charges)
 * still holds with it, and it is assigned a lane whose size >= E (an
 * existing lane if one fits — sharing is preferred — else a new one). When
 * it does not fit it is refused, or queued if it asked to wait, with a
 * reason: QUOTA (can never fit: exceeds the per-session quota or the whole
 * capacity), CAPACITY (not enough free memory now), FRAGMENTATION (enough
 * free memory, but no contiguous block even after compacting idle lanes).
 * Queued sessions are admitted in rank order as memory frees up: arrival
 * order, unless the caller ranks them (sl_mem_admit_ranked: the scheduling
 * policy's order, e.g. shortest declared job first under srtf). A session
 * ranked behind a waiting one, if it fits, may be admitted before it at most
 * SL_MEM_MAX_BYPASS times, after which admission waits for the head (no
 * starvation by sessions ranked behind it). Those ranked before it pass it
 * as they would on the device, SL_MEM_MAX_OVERTAKEN times at most, counting
 * only later arrivals: then it moves to the front.
 *
 * Persistent regions. A session that declares P > 0 gets its P in one
 * contiguous region at admission, and its tensors are placed best fit inside
 * it: sessions never fragment each other's memory, a session that leaves
 * gives back one block of its full size, and a session whose P is not
 * available in one piece (even after compacting idle lanes) is refused with
 * FRAGMENTATION at admission rather than halfway through its uploads. Its
 * own frees can still fragment its region (FRAGMENTATION on its alloc). A
 * session that declares P = 0 allocates block by block from the arena.
 * Either way the arena holds exactly the left side of the rule, less the
 * sessions' framework charges (they have no block).
 *
 * Units. Every size is charged in 256-byte units: declared P and E,
 * ephemeral peaks, persistent blocks (an allocation of n bytes uses and is
 * charged align_up(n, 256)) and framework_per_lane are rounded up, and an
 * ephemeral need is at least 256 bytes. Declare P as the sum of rounded
 * tensor sizes.
 *
 * Ephemeral need. What a session's lane must hold: max(E, peak) when it
 * declared E > 0 (a declared E is a guarantee: graphs up to E always fit);
 * when it declared 0, cfg.default_ephemeral until sl_mem_set_ephemeral, and
 * from then on the peak last set (the default is a placeholder, not a
 * promise, and is given back once the real peak is known). Lanes are sized
 * to the largest need among their sessions: created at exactly that, grown
 * when a member outgrows it, shrunk back when the largest member leaves or
 * lowers its peak (at once when idle, else when it goes idle).
 *
 * Lane choice on admission, cheapest first: share an existing lane of size
 * >= need (the one with the fewest sessions, then the smallest, then the
 * lowest id: sharing costs no memory, and the emptiest lane makes the fewest
 * sessions take turns); else a new lane of exactly need + framework; else,
 * when that breaks the rule or finds no contiguous block, grow the idle
 * lane that needs the least growth and share it.
 *
 * Determinism. Decisions depend only on the sequence of calls: replaying it
 * replays every admission, lane, address and reason.
 *
 * Complexity (n persistent blocks and regions in the arena, L lanes, Q
 * queued sessions; blocks inside a region do not count): admit O(L + Q +
 * log n); alloc and free O(log n); release O(k log n) for its k blocks;
 * lane_busy O(1), lane_idle O(1) + a shrink; each call that may free memory
 * also pumps the queue, O(Q) attempts per admission it makes. When a block
 * finds no contiguous space: a compaction plan, O(L x windows) against a
 * cached sorted persistent layout (O(n log n) to rebuild after persistent
 * memory changed), and O(n) to apply it.
 *
 * Pure library: no I/O, no threads, no device calls; addresses are offsets
 * in [0, capacity). Not thread-safe: the caller serialises all calls. */
#ifndef SL_MEM_MANAGER_H
#define SL_MEM_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_MEM_MAX_BYPASS 8
/* A waiting session that later arrivals ranked before it have got ahead of
 * this many times goes to the front of the queue (rank 0), where the
 * bypass bound then protects it: a rank may pass a waiting session for a
 * while, never without end (8 times the bound: srtf passes long jobs with
 * short ones on purpose). */
#define SL_MEM_MAX_OVERTAKEN 64

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
    uint64_t capacity;           /* arena bytes (multiple of 256) */
    uint64_t session_quota;      /* max P + E of one session; 0 = capacity */
    uint64_t framework_per_lane; /* framework bytes charged for every lane */
    uint64_t default_ephemeral;  /* E of a session that declares 0 (e.g. 64 MiB) */
    /* Space sharing: while the memory held (reserved persistent + lanes +
     * framework) would stay at most this many bytes, a new session gets a
     * lane of its own (its iterations run concurrently with the others')
     * rather than sharing one (taking turns). 0 = always share when a lane
     * fits (the most memory-frugal choice). */
    uint64_t spread_limit;
} sl_mem_config;

/* Creates a manager. session_quota is capped at capacity. Errors:
 * SL_EINVAL (cfg or out NULL, capacity 0 or not 256-aligned,
 * default_ephemeral + framework_per_lane > capacity), SL_ENOMEM. On success
 * *out is owned by the caller (sl_mem_mgr_destroy). */
int sl_mem_mgr_create(const sl_mem_config *cfg, sl_mem_mgr **out);
/* Frees the manager and all its bookkeeping. NULL is fine. */
void sl_mem_mgr_destroy(sl_mem_mgr *m);

/* ---- sessions ---- */

/* Asks to admit session id (nonzero, unique) declaring persistent bytes p and
 * ephemeral peak e (0 = cfg.default_ephemeral). On SL_OK the session is
 * admitted and *lane is its lane id. Otherwise *reason says why and the
 * result is SL_EEXHAUSTED; with wait = true the session is queued (unless the
 * reason is QUOTA, which can never be satisfied) and will be reported by
 * sl_mem_next_admitted once it fits. A session that would fit but arrives
 * while a queued one has already been bypassed SL_MEM_MAX_BYPASS times is
 * refused or queued with CAPACITY: the free memory is being kept for the
 * head. reason and lane may be NULL. Errors: SL_EINVAL (m NULL, id 0 or in
 * use), SL_EEXHAUSTED, SL_ENOMEM (nothing changed). */
int sl_mem_admit(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, bool wait, int *reason,
                 uint32_t *lane);

/* sl_mem_admit with flags: SL_MEM_ADMIT_WAIT (queue instead of refusing)
 * and SL_MEM_ADMIT_EXCLUSIVE (the session gets a lane of its own that no
 * other session joins, for sessions that must never wait behind another's
 * iteration: high priority). An exclusive session is never moved into a
 * shared lane. */
#define SL_MEM_ADMIT_WAIT 1u
#define SL_MEM_ADMIT_EXCLUSIVE 2u
int sl_mem_admit_ex(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, unsigned flags, int *reason,
                    uint32_t *lane);
/* sl_mem_admit_ex with a rank: while it waits, the session is queued after
 * every waiting session of a smaller rank, or of the same rank that arrived
 * before it (sl_mem_admit_ex: rank 0, so arrival order). A session it is
 * ranked behind counts it as a bypass when it gets in first. */
int sl_mem_admit_ranked(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, unsigned flags,
                        uint64_t rank, int *reason, uint32_t *lane);
/* Changes a session's rank (a change of policy): a waiting session moves to
 * its new place in the queue; bypass counts are kept, and a session moved
 * to the front for being overtaken stays there. SL_OK or SL_ENOTFOUND.
 * O(queue). */
int sl_mem_set_rank(sl_mem_mgr *m, uint64_t id, uint64_t rank);

/* Pops the next queued session that is now admitted. The queue is served
 * eagerly: every call that may free memory (sl_mem_release, sl_mem_free,
 * sl_mem_set_ephemeral, sl_mem_lane_idle, sl_mem_compact, sl_mem_alloc
 * after a compaction, sl_mem_uncharge_framework) admits, in rank order and within the bypass bound,
 * the queued sessions that fit, and they wait here to be reported. So call it
 * in a loop after any of those. Returns true with *id and *lane set, false
 * when none is. */
bool sl_mem_next_admitted(sl_mem_mgr *m, uint64_t *id, uint32_t *lane);

/* Removes a session, admitted or queued: frees all its persistent blocks,
 * drops it from its lane (an empty lane is reclaimed, a lane that held it as
 * its largest session shrinks; if busy, both at sl_mem_lane_idle). Unknown
 * ids are ignored. */
void sl_mem_release(sl_mem_mgr *m, uint64_t id);

/* ---- persistent memory ---- */

/* Allocates bytes (charged rounded up to 256) for admitted session id;
 * *addr is the block's offset. Errors: SL_ENOTFOUND (not admitted),
 * SL_EEXHAUSTED with *reason QUOTA (the session's used + bytes would exceed
 * its declared P less what its framework charge holds in its region, both
 * rounded, when P > 0; when P = 0, used + bytes + its ephemeral need + its
 * framework charge would exceed the session quota), CAPACITY (would break the admission rule:
 * only possible beyond a declared P, i.e. for P = 0) or FRAGMENTATION (no
 * contiguous block, even after compacting idle lanes), SL_EINVAL (m or addr
 * NULL, bytes 0), SL_ENOMEM (nothing allocated). reason may be NULL. */
int sl_mem_alloc(sl_mem_mgr *m, uint64_t id, uint64_t bytes, uint64_t *addr, int *reason);
/* Frees a block of session id. Errors: SL_ENOTFOUND (session not
 * admitted), SL_EINVAL (not the start of one of its blocks). */
int sl_mem_free(sl_mem_mgr *m, uint64_t id, uint64_t addr);

/* ---- framework memory of a session ----
 *
 * Device memory a session holds that the device allocates outside the
 * arena (its recorded graphs' executables). A charge has no address. It
 * counts in the admission rule, where it stands in bytes of the arena
 * left free (sl_mem_stats framework, less free) or held in the session's
 * region (below), so memory salusd spends for a session beyond its
 * tensors and lanes cannot crowd out other sessions.
 *
 * In the region first. A session that declared P > 0 holds as much of a
 * charge as fits in its region's unused bytes (P less its tensors' bytes
 * less what earlier charges hold there: *in the region*), and only the
 * rest *outside*. Bytes held in the region are taken from its tensors: an
 * allocation may use P less them. Whoever counts a session's memory
 * against a quota beyond this manager (the server's tenants) counts the
 * outside part only: the in-region part is inside the P it counted
 * already. Here the rule and the session's quota likewise count the
 * outside part only (rounded): the quota max(P, used) + it + the
 * ephemeral need, the rule it in sl_mem_stats framework_sessions. Freeing tensors later
 * moves nothing from outside into the region: the split changes only by
 * charges, uncharges and sl_mem_framework_move_out (a tensor that needs
 * the bytes the region holds), so a counter outside stays in step by
 * reading sl_mem_session_info.framework_outside after each. A session
 * without a region holds all of its charge outside. */

/* The bytes of a charge of `bytes` made now to session id that its region
 * would not hold (all of them for a session without a region, or one not
 * admitted). Changes nothing; O(1). A caller that must approve the outside
 * part (a tenant's quota) asks this first and then charges, with nothing
 * between. */
uint64_t sl_mem_framework_outside(const sl_mem_mgr *m, uint64_t id, uint64_t bytes);
/* Charges `bytes` more to admitted session id's own framework memory, in
 * its region first (above). A session's charges are summed exactly and
 * counted rounded up to 256 as a whole: giving back exactly the bytes
 * charged restores every figure but the split (below). The charge goes
 * with the session (sl_mem_release). On success *outside (may be NULL)
 * gets the bytes of this charge held outside the region, as
 * sl_mem_framework_outside said. reason may be NULL. Errors: SL_EINVAL (m
 * NULL), SL_ENOTFOUND (not admitted), SL_EEXHAUSTED with *reason QUOTA
 * (the session's quota would be exceeded) or CAPACITY (the rule would
 * break); nothing changes on error. O(1). */
int sl_mem_charge_framework(sl_mem_mgr *m, uint64_t id, uint64_t bytes, int *reason,
                            uint64_t *outside);
/* The bytes of session id's framework charge its region holds that an
 * allocation of `bytes` needs to fit in the region: 0 when it fits as it
 * is, and when nothing could make it fit (no region, nothing held there,
 * or more than P). Changes nothing; O(1). */
uint64_t sl_mem_framework_blocking(const sl_mem_mgr *m, uint64_t id, uint64_t bytes);
/* Moves `bytes` of session id's framework charge out of its region, so
 * that its tensors may use them again: they are then held outside, and
 * count as a charge of that much would (the session's quota and the
 * rule; a counter outside reads sl_mem_session_info.framework_outside
 * after). Errors: SL_EINVAL (m NULL, or more than the region holds),
 * SL_ENOTFOUND (not admitted), SL_EEXHAUSTED with *reason QUOTA or
 * CAPACITY; nothing changes on error. O(1). */
int sl_mem_framework_move_out(sl_mem_mgr *m, uint64_t id, uint64_t bytes, int *reason);
/* Gives back `bytes` of session id's framework charge, at most what it
 * holds: first what it holds outside its region (what costs a quota),
 * then what the region holds (its tensors may use those bytes again).
 * Admits queued sessions that fit now (sl_mem_next_admitted). Unknown or
 * queued ids are ignored: a released session's charge went with it. */
void sl_mem_uncharge_framework(sl_mem_mgr *m, uint64_t id, uint64_t bytes);

/* ---- ephemeral memory and lanes ---- */

/* Sets session id's ephemeral peak (a graph was registered: pass the
 * largest planned peak of its graphs) and makes sure its lane holds the
 * resulting need (see "Ephemeral need" above). Nothing moves if the lane
 * holds it (a lower need may shrink the lane); otherwise, cheapest first:
 * move the session to another lane that fits, grow its own lane (zero copy,
 * idle lanes may be compacted), or, when growing finds no contiguous block
 * and other sessions still need the old lane, a new lane. A need above the
 * declared E is allowed only within the session quota. On SL_OK *lane is the
 * (possibly new) lane; lane and reason may be NULL. Errors: SL_ENOTFOUND
 * (not admitted), SL_EEXHAUSTED with *reason (QUOTA, CAPACITY,
 * FRAGMENTATION; the peak is unchanged), SL_EBUSY (the lane must change but
 * is running an iteration: retry when idle), SL_ENOMEM. */
int sl_mem_set_ephemeral(sl_mem_mgr *m, uint64_t id, uint64_t peak, uint32_t *lane, int *reason);

/* Marks a lane busy (an iteration runs in it) or idle. Busy lanes are never
 * moved or resized (read the lane's base after marking it busy: idle lanes
 * move). sl_mem_lane_idle reclaims an empty lane and shrinks an oversized
 * one. Unknown ids are ignored. */
void sl_mem_lane_busy(sl_mem_mgr *m, uint32_t lane);
void sl_mem_lane_idle(sl_mem_mgr *m, uint32_t lane);

typedef struct sl_mem_lane_info {
    uint32_t id;         /* from 1; a reclaimed lane's id goes to the next new lane */
    uint64_t serial;     /* from 1, never reused: a new lane under an old id differs */
    uint64_t base, size; /* the ephemeral part: [base, base + size) */
    uint64_t framework_base, framework; /* the workspace part, just below base */
    uint32_t n_sessions;
    uint64_t max_peak; /* largest need among its sessions (see "Ephemeral need") */
    bool busy;
} sl_mem_lane_info;

/* Geometry of lane id. Ids start at 1 and a new lane takes the lowest id
 * no lane holds, so ids stay below the most lanes that ever existed at once;
 * whoever keeps an id while not a member of the lane (a lane record, a
 * statistic) compares the serial to tell a new lane under that id. Errors:
 * SL_ENOTFOUND. */
int sl_mem_lane_get(const sl_mem_mgr *m, uint32_t id, sl_mem_lane_info *out);

/* Lanes that exist now, ids ascending: writes up to max and returns how many
 * exist (may be > max). */
size_t sl_mem_lanes(const sl_mem_mgr *m, sl_mem_lane_info *out, size_t max);

/* Moves idle lanes so free memory is contiguous (zero copy: idle lanes hold
 * no data) and sizes each to its largest need; never touches persistent
 * blocks or busy lanes. Applied only if it makes the largest free block
 * larger or gives memory back. Returns the number of lanes moved. Called
 * automatically when an allocation or admission finds no contiguous block;
 * exposed for tests and the status "defragment" command. O(n log n). */
size_t sl_mem_compact(sl_mem_mgr *m);

/* ---- status ---- */

typedef struct sl_mem_stats {
    uint64_t capacity;
    uint64_t persistent_used;     /* bytes in persistent blocks */
    uint64_t persistent_reserved; /* sum over admitted sessions of max(P, used) */
    uint64_t lanes;               /* sum of lane sizes */
    uint64_t framework;           /* every lane's part + framework_sessions */
    uint64_t framework_sessions;  /* the sessions' own charges beyond what their
                                   * regions hold, each rounded */
    uint64_t free;                /* capacity - persistent_reserved - lanes - framework */
    uint64_t largest_free;        /* largest contiguous free block, at most free */
    double fragmentation;         /* 1 - largest_free / free (0 when free == 0) */
    uint32_t n_lanes, n_sessions, n_queued;
} sl_mem_stats;
void sl_mem_get_stats(const sl_mem_mgr *m, sl_mem_stats *st);

typedef struct sl_mem_session_info {
    uint64_t id;
    uint64_t declared_p, declared_e;
    uint64_t used;                     /* persistent bytes allocated */
    uint64_t framework;                /* its framework charge, rounded up to 256 */
    uint64_t framework_region;         /* exact bytes of it held in its region */
    uint64_t framework_outside;        /* exact bytes of it held outside */
    uint64_t peak;                     /* ephemeral peak set by sl_mem_set_ephemeral */
    uint64_t need;                     /* bytes its lane must hold (see "Ephemeral need") */
    uint32_t lane;                     /* 0 while queued */
    uint64_t region_base, region_size; /* its persistent region (size 0: none) */
    bool queued;
    int reason; /* why it waits (queued sessions) */
} sl_mem_session_info;
/* Info on one session, admitted or queued. Errors: SL_ENOTFOUND. */
int sl_mem_session_get(const sl_mem_mgr *m, uint64_t id, sl_mem_session_info *out);
/* Queued sessions in admission order: writes up to max, returns the count. */
size_t sl_mem_queue(const sl_mem_mgr *m, sl_mem_session_info *out, size_t max);

/* Checks every invariant: no two live blocks (persistent blocks, lanes,
 * framework) overlap, all inside [0, capacity) and exactly as the pool
 * holds them; per-session, per-lane and per-class accounting exact (the
 * sessions' framework charges included, the part a region holds within
 * the charge and, with the tensors' bytes, within the region's P); the
 * admission rule holds; every admitted session's lane
 * holds its need and no session exceeds its quota; queue and lists consistent. Returns SL_OK,
 * SL_EINTERNAL, or SL_ENOMEM (no host memory to check). O(n log n), for
 * tests. */
int sl_mem_check(const sl_mem_mgr *m);

#endif
