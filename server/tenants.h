/* Tenants: who a request comes from, what rights it has, and the limits a
 * tenant's sessions live under (fair use on a shared device).
 *
 * Who. Over ipc:// a tenant is the peer's uid (SO_PEERCRED). Clients of
 * network listeners carry no identity salusd can check per user (NNG 1.5
 * exposes no certificate subject), so all of them together are one tenant,
 * "remote". A request has operator rights when it comes over ipc:// from
 * root or from salusd's own uid (after --user, that user), or from a
 * verified client of an --operator-listen listener (transport.h).
 *
 * Limits. Every non-operator tenant gets the defaults (--tenant-limits, else
 * the built-in ones below), field by field overridden by the rule for its
 * user or for "remote" (--user-limits WHO:SPEC). Operators have none.
 *   priority  highest priority its sessions may have (OpenSession hints are
 *             clamped to it; SetSession above it is refused)
 *   weight    the tenant's share of the device beside other tenants
 *             (sched/scheduler.h: tenants first), and the highest weight
 *             its sessions may have among themselves, clamped the same way
 *   sessions  sessions open at once, waiting ones included (refused beyond)
 *   memory    device memory all its sessions together may declare, each
 *             session counting persistent + ephemeral bytes (refused
 *             beyond: OpenSession and a RegisterGraph whose peak would pass
 *             the quota). Ephemeral: its declared bytes, or its graphs'
 *             planned peak when larger; a session that declares none is
 *             counted for the default lane, but for no more than what is
 *             left after its declared persistent bytes, or half of what is
 *             left when it declares none either (the default lane is a
 *             placeholder until its graphs are known, and a quota of one
 *             lane must still leave room for tensors). A session that
 *             declares no persistent bytes is given the rest of what is
 *             left, so that what it can allocate stays inside the quota.
 *             Recorded graphs (replay.h) count too: a recording is held
 *             first in the unused bytes of its session's persistent
 *             reservation (a tensor that needs them moves them beside
 *             it, counted as the rest is), and only the rest is charged
 *             to the quota; a recording the quota has no room for is not
 *             made (its iterations run op by op, the reason in status). So more sessions buy a
 * tenant no memory beyond its quota. SPEC is a comma-separated list of those, e.g.
 * "priority=0,weight=2, sessions=8,memory=4G"; a configuration file mirrors it as one section per
 * WHO with the same keys. */
#ifndef SL_TENANTS_H
#define SL_TENANTS_H

#include "jobs.h"
#include "sl_map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* reply.h: refusals are written into a reply */
typedef struct sl_reply sl_reply;

/* Built-in defaults: no tenant outranks the default priority or weight
 * unless the operator grants it; a tenant may hold the device's memory
 * divided by the tenants the host expects (--expected-tenants), so that one
 * tenant declaring all of it leaves the others room, and at most
 * SL_TENANT_DEFAULT_SESSIONS sessions (fewer when --max-sessions divided by
 * the expected tenants is less): each session may pin --session-metadata of
 * host memory, 1G in all with the defaults. */
#define SL_TENANT_DEFAULT_PRIORITY 0
#define SL_TENANT_DEFAULT_WEIGHT 1.0
#define SL_TENANT_DEFAULT_SESSIONS 16
#define SL_DEFAULT_EXPECTED_TENANTS 4
#define SL_MAX_LIMIT_RULES 64

/* Limits; has_ says which fields a flag set (an override sets some). */
typedef struct sl_limits {
    bool has_priority, has_weight, has_sessions, has_memory;
    int32_t max_priority;
    double max_weight;     /* in (0, 1e6) */
    uint32_t max_sessions; /* >= 1 */
    uint64_t memory;       /* bytes; 0 = no limit of its own */
} sl_limits;

/* One --user-limits rule. */
typedef struct sl_limit_rule {
    bool remote;  /* for network clients without operator rights */
    uint32_t uid; /* else for this uid */
    sl_limits limits;
} sl_limit_rule;

/* Who sent a request (filled by the gate from the transport). */
typedef struct sl_peer {
    uint32_t pipe_id; /* its connection */
    bool has_uid;     /* over ipc:// */
    uint64_t uid;
    bool is_operator;
} sl_peer;

/* Parses SPEC into *out (fields not named stay unset). Errors: SL_EINVAL
 * with the reason in why. */
int sl_limits_parse(const char *spec, sl_limits *out, char *why, size_t why_len);
/* Parses "WHO:SPEC" (WHO: a user name, a numeric uid, or "remote"); user
 * names are looked up now. Errors: SL_EINVAL with the reason in why. */
int sl_limit_rule_parse(const char *arg, sl_limit_rule *out, char *why, size_t why_len);
/* The built-in session and memory defaults for max_sessions_all sessions
 * (--max-sessions) and capacity bytes of device memory (0: unknown, no
 * default quota) shared by expected tenants (0: the default). */
uint32_t sl_tenant_default_sessions(uint32_t max_sessions_all, uint32_t expected);
uint64_t sl_tenant_default_memory(uint64_t capacity, uint32_t expected);

/* The key a tenant's usage is counted under (never 0). */
uint64_t sl_tenant_key(const sl_peer *peer);
/* Writes the tenant's name for people ("uid 1000", "remote") into buf.
 * Never blocks. */
void sl_tenant_name(uint64_t key, char *buf, size_t len);

/* What each tenant holds now, and where every tenant's limits come from.
 * Not thread-safe: the server lock guards it. */
typedef struct sl_tenant_use {
    uint32_t sessions;
    uint64_t memory;
} sl_tenant_use;
typedef struct sl_tenants {
    sl_map use; /* tenant key -> sl_tenant_use */
    /* salusd's flags (sl_limits_for's arguments); all zero: the built-in
     * defaults only */
    const sl_limits *defaults;
    const sl_limit_rule *rules;
    int n_rules;
    /* the built-in defaults (sl_tenant_default_sessions and _memory; 0:
     * one session, no quota) */
    uint32_t default_sessions;
    uint64_t default_memory;
    /* the registered job steps: a step's sessions live under its quota */
    const sl_jobs *jobs;
} sl_tenants;

/* The limits of a non-operator peer, every field set: the built-in
 * defaults, then t's defaults, then the rule for the peer. */
void sl_limits_for(const sl_tenants *t, const sl_peer *peer, sl_limits *out);

/* What tenant key holds (zeros when nothing). */
sl_tenant_use sl_tenants_get(const sl_tenants *t, uint64_t key);
/* Counts one more session of key holding memory bytes. Errors: SL_ENOMEM. */
int sl_tenants_add(sl_tenants *t, uint64_t key, uint64_t memory);
/* Counts memory bytes more for a session of key already counted (its
 * ephemeral need grew, its recorded graphs grew beyond its persistent
 * reservation). */
void sl_tenants_charge(sl_tenants *t, uint64_t key, uint64_t memory);
/* Undoes sl_tenants_charge of memory bytes (never below zero). */
void sl_tenants_discharge(sl_tenants *t, uint64_t key, uint64_t memory);
/* Undoes one sl_tenants_add. */
void sl_tenants_remove(sl_tenants *t, uint64_t key, uint64_t memory);
/* Frees the table. */
void sl_tenants_fini(sl_tenants *t);

/* ---- the per-tenant quota ----
 *
 * A session is counted under a tenant key: its owner's (sl_tenant_key), or
 * its job step's (jobs.h), whose figures then override the owner's: the
 * step's priority is the cap, its memory (when set) the quota. The
 * functions below take the owner (whose limits apply) and the key (whose
 * usage counts) and never see a session. */

/* Where a session's memory quota comes from. */
enum sl_quota_source {
    SL_QUOTA_NONE,   /* no memory quota */
    SL_QUOTA_TENANT, /* its owner's: --tenant-limits / --user-limits memory= */
    SL_QUOTA_STEP,   /* its job step's (RegisterJob: the Slurm plugin's shards) */
};

/* The limits of a session of owner (not an operator) counted under key,
 * every field set (see the top of this file). Returns the quota's
 * source. */
int sl_tenants_limits(const sl_tenants *t, const sl_peer *owner, uint64_t key, sl_limits *out);

/* What a new session asks of its limits, and what it is granted. */
typedef struct sl_tenant_ask {
    int32_t priority;    /* in: asked; out: at most the cap */
    double weight;       /* in: asked; out: at most the cap */
    uint64_t persistent; /* in: declared (0: none); out: what it may hold */
    uint64_t ephemeral;  /* declared (0: none) */
    uint64_t charge;     /* out: bytes counted against the quota */
} sl_tenant_ask;

/* Whether a new session of owner (not an operator), counted under key, may
 * open: below the tenant's session count; priority and weight clamped (a
 * job asking for more than it may have still runs, at what it may have);
 * its memory within what is left of the quota, with P + E exactly equal
 * to what is left admitted. default_ephemeral is the lane a session that
 * declares no ephemeral bytes gets from the memory manager, session_quota
 * the most P + E one session may have there. False with the refusal in r
 * (RESOURCE_EXHAUSTED), which names the limit that applies and what to do.
 * Changes nothing in t: sl_tenants_add counts the session once it opens. */
bool sl_tenants_admit(const sl_tenants *t, const sl_peer *owner, uint64_t key,
                      uint64_t default_ephemeral, uint64_t session_quota, sl_tenant_ask *ask,
                      sl_reply *r);
/* A graph of a session of owner under key, which is charged `charged`
 * bytes of which `persistent` are persistent, needs an ephemeral need of
 * bytes: whether the quota has room for what need adds to the ephemeral
 * bytes it was charged (false, with the refusal in r, when it would pass
 * the quota). Changes nothing. */
bool sl_tenants_room(const sl_tenants *t, const sl_peer *owner, uint64_t key, uint64_t charged,
                     uint64_t persistent, uint64_t need, sl_reply *r);
/* The need was granted: key is charged for what it adds, and so is
 * *charged. */
void sl_tenants_grow(sl_tenants *t, uint64_t key, uint64_t *charged, uint64_t persistent,
                     uint64_t need);
/* A recording of a session of owner under key is to be charged bytes of
 * which `outside` are beyond the session's persistent reservation (the
 * memory manager's split, replay.h): whether what is left of the quota
 * holds them (always, without a quota). False with the
 * reason in why (len bytes; may be NULL), which names the quota and what
 * to do. Changes nothing: the caller then charges key (sl_tenants_charge)
 * once the recording is charged. */
bool sl_tenants_recording_room(const sl_tenants *t, const sl_peer *owner, uint64_t key,
                               uint64_t outside, char *why, size_t len);

#endif
