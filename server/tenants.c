/* Tenants, rights and limits (tenants.h). */
#include "tenants.h"
#include "reply.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_text.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Network clients: above every uid + 1. */
#define TENANT_REMOTE (1ull << 40)

/* The keys of a limits SPEC, as --tenant-limits and --user-limits take them. */
enum { LIMIT_PRIORITY, LIMIT_WEIGHT, LIMIT_SESSIONS, LIMIT_MEMORY, N_LIMIT_KEYS };
static const char *const limit_keys[N_LIMIT_KEYS] = {
    [LIMIT_PRIORITY] = "priority",
    [LIMIT_WEIGHT] = "weight",
    [LIMIT_SESSIONS] = "sessions",
    [LIMIT_MEMORY] = "memory",
};

/* key's LIMIT_*, or -1. */
static int limit_key(const char *key)
{
    for (int k = 0; k < N_LIMIT_KEYS; k++)
        if (strcmp(key, limit_keys[k]) == 0)
            return k;
    return -1;
}

/* One "key=value" of a SPEC (len bytes at s). */
static int parse_field(const char *s, size_t len, sl_limits *out, char *why, size_t why_len)
{
    char item[128];
    if (len >= sizeof item) {
        snprintf(why, why_len, "'%.*s...' is too long", 32, s);
        return SL_EINVAL;
    }
    memcpy(item, s, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1]) {
        snprintf(why, why_len, "'%s' is not key=value", item);
        return SL_EINVAL;
    }
    *eq = '\0';
    const char *key = item, *val = eq + 1;
    char *end;
    errno = 0;
    switch (limit_key(key)) {
    case LIMIT_PRIORITY: {
        long p = strtol(val, &end, 10);
        if (errno || *end || p < INT32_MIN || p > INT32_MAX)
            goto out_bad;
        out->max_priority = (int32_t) p;
        out->has_priority = true;
        break;
    }
    case LIMIT_WEIGHT: {
        double w = strtod(val, &end);
        if (errno || *end || !(w > 0 && w < 1e6))
            goto out_bad;
        out->max_weight = w;
        out->has_weight = true;
        break;
    }
    case LIMIT_SESSIONS: {
        long n = strtol(val, &end, 10);
        if (errno || *end || n < 1 || n > (1l << 30))
            goto out_bad;
        out->max_sessions = (uint32_t) n;
        out->has_sessions = true;
        break;
    }
    case LIMIT_MEMORY:
        if (sl_parse_size(val, &out->memory) != SL_OK)
            goto out_bad;
        out->has_memory = true;
        break;
    default:
        snprintf(why, why_len, "unknown limit '%s' (known: priority, weight, sessions, memory)",
                 key);
        return SL_EINVAL;
    }
    return SL_OK;

out_bad:
    snprintf(why, why_len,
             "bad value '%s' for %s (priority: an integer; weight: in (0, 1e6); sessions: "
             "1..2^30; memory: a size like 4G, 0 = none)",
             val, key);
    return SL_EINVAL;
}

int sl_limits_parse(const char *spec, sl_limits *out, char *why, size_t why_len)
{
    sl_limits l = *out;
    if (!*spec) {
        snprintf(why, why_len, "no limits given");
        return SL_EINVAL;
    }
    for (const char *s = spec; *s;) {
        size_t len = strcspn(s, ",");
        int rc = parse_field(s, len, &l, why, why_len);
        if (rc)
            return rc;
        s += len;
        if (*s == ',')
            s++;
    }
    *out = l;
    return SL_OK;
}

int sl_limit_rule_parse(const char *arg, sl_limit_rule *out, char *why, size_t why_len)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg) {
        snprintf(why, why_len, "'%s' is not WHO:SPEC (WHO: a user, a uid or remote)", arg);
        return SL_EINVAL;
    }
    char who[256];
    size_t len = (size_t) (colon - arg);
    if (len >= sizeof who) {
        snprintf(why, why_len, "user name too long");
        return SL_EINVAL;
    }
    memcpy(who, arg, len);
    who[len] = '\0';
    sl_limit_rule r = {0};
    char *end;
    errno = 0;
    unsigned long uid = strtoul(who, &end, 10);
    if (strcmp(who, "remote") == 0) {
        r.remote = true;
    } else if (!*end && !errno && uid < UINT32_MAX && who[0] != '-') {
        r.uid = (uint32_t) uid;
    } else {
        struct passwd *pw = getpwnam(who);
        if (!pw) {
            snprintf(why, why_len, "no user '%s'", who);
            return SL_EINVAL;
        }
        r.uid = (uint32_t) pw->pw_uid;
    }
    int rc = sl_limits_parse(colon + 1, &r.limits, why, why_len);
    if (rc)
        return rc;
    *out = r;
    return SL_OK;
}

/* Copies the fields src sets over dst. */
static void overlay(sl_limits *dst, const sl_limits *src)
{
    if (src->has_priority)
        dst->max_priority = src->max_priority;
    if (src->has_weight)
        dst->max_weight = src->max_weight;
    if (src->has_sessions)
        dst->max_sessions = src->max_sessions;
    if (src->has_memory)
        dst->memory = src->memory;
}

uint32_t sl_tenant_default_sessions(uint32_t max_sessions_all, uint32_t expected)
{
    uint32_t n = max_sessions_all / (expected ? expected : SL_DEFAULT_EXPECTED_TENANTS);
    return n < 1 ? 1 : n > SL_TENANT_DEFAULT_SESSIONS ? SL_TENANT_DEFAULT_SESSIONS : n;
}

uint64_t sl_tenant_default_memory(uint64_t capacity, uint32_t expected)
{
    uint64_t share = capacity / (expected ? expected : SL_DEFAULT_EXPECTED_TENANTS);
    return share & ~(uint64_t) 255;
}

void sl_limits_for(const sl_tenants *t, const sl_peer *peer, sl_limits *out)
{
    *out = (sl_limits){
        .has_priority = true,
        .has_weight = true,
        .has_sessions = true,
        .has_memory = true,
        .max_priority = SL_TENANT_DEFAULT_PRIORITY,
        .max_weight = SL_TENANT_DEFAULT_WEIGHT,
        .max_sessions = t->default_sessions ? t->default_sessions : 1,
        .memory = t->default_memory,
    };
    if (t->defaults)
        overlay(out, t->defaults);
    for (int i = 0; i < t->n_rules; i++) {
        const sl_limit_rule *r = &t->rules[i];
        if (r->remote ? !peer->has_uid : peer->has_uid && peer->uid == r->uid)
            overlay(out, &r->limits); /* a later rule for the same tenant wins */
    }
}

uint64_t sl_tenant_key(const sl_peer *peer)
{
    return peer->has_uid ? peer->uid + 1 : TENANT_REMOTE;
}

void sl_tenant_name(uint64_t key, char *buf, size_t len)
{
    /* numbers only: a name lookup can go to the network (NSS), and this
     * runs under the server lock */
    if (sl_job_tenant_name(key, buf, len))
        return;
    if (key == TENANT_REMOTE || key == 0)
        snprintf(buf, len, "remote");
    else
        snprintf(buf, len, "uid %llu", (unsigned long long) (key - 1));
}

sl_tenant_use sl_tenants_get(const sl_tenants *t, uint64_t key)
{
    const sl_tenant_use *u = sl_map_get(&t->use, key);
    return u ? *u : (sl_tenant_use){0};
}

int sl_tenants_add(sl_tenants *t, uint64_t key, uint64_t memory)
{
    sl_tenant_use *u = sl_map_get(&t->use, key);
    if (!u) {
        if (!(u = sl_calloc(1, sizeof *u)))
            return SL_ENOMEM;
        if (sl_map_put(&t->use, key, u) != SL_OK) {
            sl_free(u);
            return SL_ENOMEM;
        }
    }
    u->sessions++;
    u->memory += memory;
    return SL_OK;
}

void sl_tenants_charge(sl_tenants *t, uint64_t key, uint64_t memory)
{
    sl_tenant_use *u = sl_map_get(&t->use, key);
    if (u)
        u->memory = u->memory + memory < u->memory ? UINT64_MAX : u->memory + memory;
}

void sl_tenants_discharge(sl_tenants *t, uint64_t key, uint64_t memory)
{
    sl_tenant_use *u = sl_map_get(&t->use, key);
    if (u)
        u->memory -= memory < u->memory ? memory : u->memory;
}

void sl_tenants_remove(sl_tenants *t, uint64_t key, uint64_t memory)
{
    sl_tenant_use *u = sl_map_get(&t->use, key);
    if (!u)
        return;
    u->sessions--;
    u->memory -= memory < u->memory ? memory : u->memory;
    if (!u->sessions)
        sl_free(sl_map_del(&t->use, key));
}

void sl_tenants_fini(sl_tenants *t)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&t->use, &i, NULL, &v))
        sl_free(v);
    sl_map_fini(&t->use);
}

/* ---- the per-tenant quota ---- */

int sl_tenants_limits(const sl_tenants *t, const sl_peer *owner, uint64_t key, sl_limits *out)
{
    sl_limits_for(t, owner, out);
    const sl_job *job = t->jobs ? sl_jobs_by_tenant(t->jobs, key) : NULL;
    if (job) {
        out->max_priority = job->priority;
        if (job->memory) {
            out->memory = job->memory;
            return SL_QUOTA_STEP;
        }
    }
    return out->memory ? SL_QUOTA_TENANT : SL_QUOTA_NONE;
}

/* What a refusal tells the user to change, by where the quota comes from. */
static const char *quota_remedy(int source)
{
    return source == SL_QUOTA_STEP
               ? "the quota is the job step's (the Slurm plugin's shard_memory times the job's "
                 "shards on this node): ask for more shards (srun --gres=shard:N)"
               : "the quota is this user's (salusd --tenant-limits / --user-limits memory=, by "
                 "default the device memory / --expected-tenants): ask the operator for more";
}

bool sl_tenants_admit(const sl_tenants *t, const sl_peer *owner, uint64_t key,
                      uint64_t default_ephemeral, uint64_t session_quota, sl_tenant_ask *ask,
                      sl_reply *r)
{
    char who[96];
    sl_tenant_name(key, who, sizeof who);
    sl_limits lim;
    int source = sl_tenants_limits(t, owner, key, &lim);
    sl_tenant_use use = sl_tenants_get(t, key);
    if (use.sessions >= lim.max_sessions) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "too many sessions for %s: %u open (its limit %u, salusd "
                       "--tenant-limits / --user-limits sessions=); close some",
                       who, use.sessions, lim.max_sessions);
        return false;
    }
    if (ask->priority > lim.max_priority || ask->weight > lim.max_weight) {
        sl_log_info("ses.clamp",
                    "session of %s on pipe %u asked for priority %d, weight %.3g: clamped to its "
                    "limits (priority %d, weight %.3g)",
                    who, owner->pipe_id, ask->priority, ask->weight, lim.max_priority,
                    lim.max_weight);
        if (ask->priority > lim.max_priority)
            ask->priority = lim.max_priority;
        if (ask->weight > lim.max_weight)
            ask->weight = lim.max_weight;
    }
    uint64_t e_mgr = ask->ephemeral ? ask->ephemeral : default_ephemeral;
    if (source == SL_QUOTA_NONE) {
        ask->charge = ask->persistent + e_mgr < e_mgr ? UINT64_MAX : ask->persistent + e_mgr;
        return true;
    }
    uint64_t left = lim.memory > use.memory ? lim.memory - use.memory : 0;
    if (!left) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "memory quota of %s: none of its %llu bytes is left (the sessions open "
                       "under it hold %llu); close a session; %s",
                       who, (unsigned long long) lim.memory, (unsigned long long) use.memory,
                       quota_remedy(source));
        return false;
    }
    /* an undeclared ephemeral need is the manager's placeholder lane, given
     * back once the session's graphs are known: it is counted for no more
     * than the quota can spare next to the persistent bytes */
    uint64_t e = ask->ephemeral;
    if (!e) {
        uint64_t spare =
            ask->persistent ? (left > ask->persistent ? left - ask->persistent : 0) : left / 2;
        e = default_ephemeral < spare ? default_ephemeral : spare & ~(uint64_t) 255;
        if (e < 256)
            e = 256; /* the least ephemeral need there is */
    }
    if (!ask->persistent && left > e) {
        /* the manager refuses P + its E beyond the session quota */
        uint64_t room = session_quota > e_mgr ? session_quota - e_mgr : 0;
        uint64_t p = left - e < room ? left - e : room;
        ask->persistent = p & ~(uint64_t) 255;
    }
    uint64_t charge = ask->persistent + e;
    if (charge < e || charge > left) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "memory quota of %s: this session needs %llu persistent + %llu ephemeral "
                       "bytes, more than the %llu bytes left of the quota of %llu (the sessions "
                       "open under it hold %llu); declare less or close a session; %s",
                       who, (unsigned long long) ask->persistent, (unsigned long long) e,
                       (unsigned long long) left, (unsigned long long) lim.memory,
                       (unsigned long long) use.memory, quota_remedy(source));
        return false;
    }
    if (!ask->persistent) {
        /* P = 0 would let the manager hand it blocks beyond the quota */
        sl_reply_error(r, SL_EEXHAUSTED,
                       "memory quota of %s: nothing is left for this session's tensors: its "
                       "%llu ephemeral bytes%s take all %llu bytes left of the quota of %llu (the "
                       "sessions open under it hold %llu); declare fewer ephemeral bytes or close "
                       "a session; %s",
                       who, (unsigned long long) e, ask->ephemeral ? "" : " (undeclared)",
                       (unsigned long long) left, (unsigned long long) lim.memory,
                       (unsigned long long) use.memory, quota_remedy(source));
        return false;
    }
    ask->charge = charge;
    return true;
}

/* The ephemeral bytes a session is counted for: what is not its P. */
static uint64_t charged_ephemeral(uint64_t charged, uint64_t persistent)
{
    return charged - (persistent < charged ? persistent : charged);
}

bool sl_tenants_room(const sl_tenants *t, const sl_peer *owner, uint64_t key, uint64_t charged,
                     uint64_t persistent, uint64_t need, sl_reply *r)
{
    uint64_t counted = charged_ephemeral(charged, persistent);
    if (need <= counted)
        return true;
    sl_limits lim;
    int source = sl_tenants_limits(t, owner, key, &lim);
    sl_tenant_use use = sl_tenants_get(t, key);
    uint64_t more = need - counted;
    if (source == SL_QUOTA_NONE || (use.memory <= lim.memory && more <= lim.memory - use.memory))
        return true;
    char who[96];
    sl_tenant_name(key, who, sizeof who);
    sl_reply_error(r, SL_EEXHAUSTED,
                   "memory quota of %s: this graph needs %llu ephemeral bytes per iteration, "
                   "%llu more than the session is counted for, and %llu of the quota of %llu are "
                   "left; open the session declaring its ephemeral bytes (and fewer persistent "
                   "ones), or close a session; %s",
                   who, (unsigned long long) need, (unsigned long long) more,
                   (unsigned long long) (lim.memory > use.memory ? lim.memory - use.memory : 0),
                   (unsigned long long) lim.memory, quota_remedy(source));
    return false;
}

bool sl_tenants_recording_room(const sl_tenants *t, const sl_peer *owner, uint64_t key,
                               uint64_t outside, char *why, size_t len)
{
    sl_limits lim;
    int source = sl_tenants_limits(t, owner, key, &lim);
    sl_tenant_use use = sl_tenants_get(t, key);
    uint64_t left = lim.memory > use.memory ? lim.memory - use.memory : 0;
    if (source == SL_QUOTA_NONE || outside <= left)
        return true;
    char who[96];
    sl_tenant_name(key, who, sizeof who);
    if (why)
        snprintf(why, len,
                 "no memory for the graph: %llu bytes beyond the session's persistent bytes, %llu "
                 "left of the memory quota of %s (%llu); declare persistent bytes with room for "
                 "recorded graphs, or close a session; %s",
                 (unsigned long long) outside, (unsigned long long) left, who,
                 (unsigned long long) lim.memory, quota_remedy(source));
    return false;
}

void sl_tenants_grow(sl_tenants *t, uint64_t key, uint64_t *charged, uint64_t persistent,
                     uint64_t need)
{
    uint64_t counted = charged_ephemeral(*charged, persistent);
    if (need <= counted)
        return;
    sl_tenants_charge(t, key, need - counted);
    *charged = *charged + (need - counted) < *charged ? UINT64_MAX : *charged + (need - counted);
}
