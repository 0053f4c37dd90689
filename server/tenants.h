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
 *   weight    highest fair-share weight, the same way
 *   sessions  sessions open at once, waiting ones included (refused beyond)
 *   memory    device memory all its sessions together may declare, each
 *             session counting persistent + ephemeral bytes (ephemeral: its
 *             declared bytes or the default lane, or its graphs' planned
 *             peak when larger); a session that declares no persistent
 *             bytes is given what is left of the quota, so that what it can
 *             allocate stays inside it (refused beyond: OpenSession and a
 *             RegisterGraph whose peak would pass the quota)
 * SPEC is a comma-separated list of those, e.g. "priority=0,weight=2,
 * sessions=8,memory=4G"; a configuration file mirrors it as one section
 * per WHO with the same keys. */
#ifndef SL_TENANTS_H
#define SL_TENANTS_H

#include "sl_map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Built-in defaults: no tenant outranks the default priority or weight
 * unless the operator grants it, and none holds more than a quarter of the
 * sessions (--max-sessions). */
#define SL_TENANT_DEFAULT_PRIORITY 0
#define SL_TENANT_DEFAULT_WEIGHT 1.0
#define SL_TENANT_DEFAULT_SESSIONS_DIV 4
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
/* The limits of a non-operator peer, every field set: the built-in
 * defaults, then defaults, then the rule for the peer. max_sessions_all is
 * salusd's --max-sessions (for the built-in session default). */
void sl_limits_for(const sl_limits *defaults, const sl_limit_rule *rules, int n_rules,
                   uint32_t max_sessions_all, const sl_peer *peer, sl_limits *out);

/* The key a tenant's usage is counted under (never 0). */
uint64_t sl_tenant_key(const sl_peer *peer);
/* Writes the tenant's name for people ("uid 1000", "remote") into buf.
 * Never blocks. */
void sl_tenant_name(uint64_t key, char *buf, size_t len);

/* What each tenant holds now. Not thread-safe: the server lock guards it. */
typedef struct sl_tenant_use {
    uint32_t sessions;
    uint64_t memory;
} sl_tenant_use;
typedef struct sl_tenants {
    sl_map use; /* tenant key -> sl_tenant_use */
} sl_tenants;

/* What tenant key holds (zeros when nothing). */
sl_tenant_use sl_tenants_get(const sl_tenants *t, uint64_t key);
/* Counts one more session of key holding memory bytes. Errors: SL_ENOMEM. */
int sl_tenants_add(sl_tenants *t, uint64_t key, uint64_t memory);
/* Counts memory bytes more for a session of key already counted (its
 * ephemeral need grew). */
void sl_tenants_charge(sl_tenants *t, uint64_t key, uint64_t memory);
/* Undoes one sl_tenants_add. */
void sl_tenants_remove(sl_tenants *t, uint64_t key, uint64_t memory);
/* Frees the table. */
void sl_tenants_fini(sl_tenants *t);

#endif
