/* The Prometheus endpoint (metrics.h). */
#include "metrics.h"
#include "replay.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_text.h"
#include "sl_time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* A label value as the exposition format wants it: backslash, double quote
 * and newline escaped (names reach here escaped by sl_text.h already, so
 * there are no other control characters). */
static const char *label(const char *s, char *out, size_t cap)
{
    size_t k = 0;
    for (; *s && k + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            out[k++] = '\\';
            out[k++] = *s;
        } else if (*s == '\n') {
            out[k++] = '\\';
            out[k++] = 'n';
        } else {
            out[k++] = *s;
        }
    }
    out[k] = '\0';
    return out;
}

static void header(sl_textbuf *b, const char *name, const char *type, const char *help)
{
    sl_textbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the snapshot, taken under the server lock ---- */

typedef struct snap_session {
    uint64_t id, iterations, attained_ns, queue_ns, switches, skipped_steps;
    uint64_t graph_replays, graph_fallbacks; /* replay.h */
    uint64_t persistent, ephemeral_peak, host_bytes, declared_p, declared_e;
    uint64_t persistent_reserved, ephemeral_need, framework; /* the memory manager's figures */
    int priority;
    uint32_t lane;
    /* its labels: session="ID",name="NAME",tenant="OWNER" with
     * --metrics-names, else session="ID",tenant="HASH" */
    char labels[448];
} snap_session;

typedef struct snap {
    const char *device, *policy;
    bool strict;
    uint64_t uptime_ns, requests, errors, repeats, iterations, resets, faults;
    uint64_t decoded, refusals, metadata;
    bool dead;
    sl_mem_stats mem;
    snap_session *sessions;
    size_t n_sessions;
    sl_mem_lane_info *lanes;
    size_t n_lanes;
    uint64_t queued[SL_MEM_FRAGMENTATION + 1];
    /* time waited for admission by reason, the waits going on included */
    uint64_t waited_ns[SL_OBS_WAIT_REASONS];
} snap;

/* ---- who a session is, as the metrics show it ---- */

static uint64_t hash_key[2];
static pthread_once_t hash_once = PTHREAD_ONCE_INIT;

static void hash_key_init(void)
{
    /* without randomness the hash is still opaque to a tenant that cannot
     * read salusd's memory, if guessable from uids */
    if (getrandom(hash_key, sizeof hash_key, 0) != (ssize_t) sizeof hash_key) {
        hash_key[0] = sl_now_ns() * 0x9e3779b97f4a7c15ull;
        hash_key[1] = (uint64_t) getpid() * 0xc2b2ae3d27d4eb4full;
    }
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13) ^ v0;                                                                    \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16) ^ v2;                                                                    \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21) ^ v0;                                                                    \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17) ^ v2;                                                                    \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

/* SipHash-2-4 of one 64-bit word under this run's random key: a tenant's
 * label that groups its sessions without naming it, and that cannot be
 * turned back into a uid by trying every uid (the key never leaves). */
static uint64_t tenant_hash(uint64_t tenant)
{
    pthread_once(&hash_once, hash_key_init);
    uint64_t v0 = 0x736f6d6570736575ull ^ hash_key[0], v1 = 0x646f72616e646f6dull ^ hash_key[1];
    uint64_t v2 = 0x6c7967656e657261ull ^ hash_key[0], v3 = 0x7465646279746573ull ^ hash_key[1];
    const uint64_t last = 8ull << 56; /* the length block of an 8-byte message */
    v3 ^= tenant;
    SIPROUND;
    SIPROUND;
    v0 ^= tenant;
    v3 ^= last;
    SIPROUND;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static void session_labels(const sl_session *x, bool names, char *out, size_t cap)
{
    if (names) {
        char name[64], owner[96], n[160], o[200];
        memcpy(name, x->name, sizeof name);
        name[sizeof name - 1] = '\0';
        sl_tenant_name(x->tenant, owner, sizeof owner);
        snprintf(out, cap, "session=\"%llu\",name=\"%s\",tenant=\"%s\"", (unsigned long long) x->id,
                 label(name, n, sizeof n), label(owner, o, sizeof o));
    } else {
        snprintf(out, cap, "session=\"%llu\",tenant=\"%016llx\"", (unsigned long long) x->id,
                 (unsigned long long) tenant_hash(x->tenant));
    }
}

static int take(sl_server *srv, snap *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&srv->lock);
    size_t cap = srv->sessions.table.count;
    size_t nl = sl_mem_lanes(srv->mem, NULL, 0);
    sl_mem_get_stats(srv->mem, &s->mem);
    size_t nq = s->mem.n_queued;
    s->sessions = sl_calloc(cap ? cap : 1, sizeof *s->sessions);
    s->lanes = sl_calloc(nl ? nl : 1, sizeof *s->lanes);
    sl_mem_session_info *q = sl_calloc(nq ? nq : 1, sizeof *q);
    if (!s->sessions || !s->lanes || !q) {
        pthread_mutex_unlock(&srv->lock);
        sl_free(q);
        return SL_ENOMEM;
    }
    s->device = srv->dev->description;
    s->policy = sl_sched_policy(srv->exec.sched)->name;
    s->strict = sl_sched_strict(srv->exec.sched);
    s->uptime_ns = sl_now_ns() - srv->start_ns;
    s->iterations = sl_exec_get_stats(&srv->exec).iterations;
    s->resets = srv->fault.resets;
    s->faults = srv->fault.faults;
    s->dead = srv->fault.dead;
    s->metadata = srv->sessions.host_bytes;
    /* ended waits and the ones going on, read together under the lock
     * (waits end under it): the sum never goes back */
    uint64_t now = sl_now_ns();
    for (int r = 0; r < SL_OBS_WAIT_REASONS; r++)
        s->waited_ns[r] = atomic_load(&srv->obs.admission_wait_ns[r]);
    size_t i = 0;
    void *v;
    while (s->n_sessions < cap && sl_map_next(&srv->sessions.table, &i, NULL, &v)) {
        const sl_session *x = v;
        if (!x->admitted) { /* counted in the admission queue */
            if (x->wait_reason > 0 && x->wait_reason < SL_OBS_WAIT_REASONS)
                s->waited_ns[x->wait_reason] += now - x->open_ns;
            continue;
        }
        snap_session *o = &s->sessions[s->n_sessions++];
        sl_mem_session_info mi;
        if (sl_mem_session_get(srv->mem, x->id, &mi) == SL_OK) {
            o->persistent_reserved = mi.declared_p > mi.used ? mi.declared_p : mi.used;
            o->ephemeral_need = mi.need;
            o->framework = mi.framework;
        }
        o->id = x->id;
        o->iterations = x->job.sched.iterations_done;
        o->attained_ns = x->job.sched.attained_ns;
        o->queue_ns = x->job.sched.queue_sum_ns;
        o->switches = x->job.sched.switches;
        o->skipped_steps = x->skipped_steps;
        sl_replay_sums sum = {0};
        size_t gi = 0;
        void *gv;
        while (sl_map_next(&x->graphs, &gi, NULL, &gv))
            sl_replay_add(((const sl_graph *) gv)->replay, &sum);
        o->graph_replays = sum.replays;
        o->graph_fallbacks = sum.fallbacks;
        o->persistent = x->persistent_bytes;
        o->ephemeral_peak = x->ephemeral_peak;
        o->host_bytes = x->host_bytes;
        o->declared_p = x->declared_persistent;
        o->declared_e = x->declared_ephemeral;
        o->priority = x->job.sched.priority;
        o->lane = x->job.sched.lane;
        session_labels(x, srv->cfg.metrics_names, o->labels, sizeof o->labels);
    }
    s->n_lanes = sl_mem_lanes(srv->mem, s->lanes, nl);
    nq = sl_mem_queue(srv->mem, q, nq);
    for (size_t k = 0; k < nq && k < s->mem.n_queued; k++)
        if (q[k].reason >= 0 && q[k].reason <= SL_MEM_FRAGMENTATION)
            s->queued[q[k].reason]++;
    pthread_mutex_unlock(&srv->lock);
    sl_free(q);
    s->requests = atomic_load(&srv->requests);
    s->errors = atomic_load(&srv->sender.errors);
    s->repeats = atomic_load(&srv->repeats.seen);
    s->decoded = atomic_load(&srv->decoder.held);
    s->refusals = atomic_load(&srv->decoder.refused);
    return SL_OK;
}

/* One histogram's series; labels ("" or `reason="x",`, comma included)
 * go before le. */
static void hist_series(sl_textbuf *b, const char *name, const char *labels, const sl_hist *h)
{
    uint64_t cum = 0;
    for (int i = 0; i < SL_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
        sl_textbuf_printf(b, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, sl_hist_bounds[i],
                          (unsigned long long) cum);
    }
    cum += atomic_load_explicit(&h->bucket[SL_HIST_BUCKETS], memory_order_relaxed);
    sl_textbuf_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels, (unsigned long long) cum);
    /* without labels a series has no braces at all */
    size_t n = strlen(labels);
    char bare[64] = "";
    if (n)
        snprintf(bare, sizeof bare, "{%.*s}", (int) (n - 1), labels);
    sl_textbuf_printf(b, "%s_sum%s %.9f\n%s_count%s %llu\n", name, bare,
                      (double) atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9, name,
                      bare, (unsigned long long) cum);
}

static void hist(sl_textbuf *b, const char *name, const char *help, const sl_hist *h)
{
    header(b, name, "histogram", help);
    hist_series(b, name, "", h);
}

/* One metric per session: value(x) for each. */
#define PER_SESSION(b, s, metric, type, help, fmt, expr)                                           \
    do {                                                                                           \
        header(b, metric, type, help);                                                             \
        for (size_t k_ = 0; k_ < (s)->n_sessions; k_++) {                                          \
            const snap_session *x = &(s)->sessions[k_];                                            \
            sl_textbuf_printf(b, "%s{%s} " fmt "\n", metric, x->labels, expr);                     \
        }                                                                                          \
    } while (0)

static void format(sl_textbuf *b, const snap *s, const sl_obs *obs)
{
    char d[512], p[64];
    header(b, "salus_build_info", "gauge",
           "Always 1; labels: salusd's version, protocol, device and policy.");
    sl_textbuf_printf(
        b, "salus_build_info{version=\"%s\",protocol=\"%d\",device=\"%s\",policy=\"%s\"} 1\n",
        SL_SERVER_VERSION, SL_PROTOCOL_VERSION, label(s->device, d, sizeof d),
        label(s->policy, p, sizeof p));
    header(b, "salus_uptime_seconds", "gauge", "Seconds since salusd started.");
    sl_textbuf_printf(b, "salus_uptime_seconds %.3f\n", (double) s->uptime_ns / 1e9);
    header(b, "salus_requests_total", "counter", "Requests received.");
    sl_textbuf_printf(b, "salus_requests_total %llu\n", (unsigned long long) s->requests);
    header(b, "salus_request_errors_total", "counter", "Replies with a code other than OK.");
    sl_textbuf_printf(b, "salus_request_errors_total %llu\n", (unsigned long long) s->errors);
    header(b, "salus_request_repeats_total", "counter",
           "Repeated requests answered from the first one's reply.");
    sl_textbuf_printf(b, "salus_request_repeats_total %llu\n", (unsigned long long) s->repeats);
    header(b, "salus_iterations_total", "counter", "Iterations finished, all sessions.");
    sl_textbuf_printf(b, "salus_iterations_total %llu\n", (unsigned long long) s->iterations);
    header(b, "salus_device_faults_total", "counter", "Device-lost errors seen.");
    sl_textbuf_printf(b, "salus_device_faults_total %llu\n", (unsigned long long) s->faults);
    header(b, "salus_device_resets_total", "counter", "Device resets done after a fault.");
    sl_textbuf_printf(b, "salus_device_resets_total %llu\n", (unsigned long long) s->resets);
    header(b, "salus_device_up", "gauge", "0 once the device could not be recovered.");
    sl_textbuf_printf(b, "salus_device_up %d\n", s->dead ? 0 : 1);
    header(b, "salus_decode_refusals_total", "counter",
           "Requests refused for the memory decoding them would take.");
    sl_textbuf_printf(b, "salus_decode_refusals_total %llu\n", (unsigned long long) s->refusals);
    header(b, "salus_host_memory_bytes", "gauge",
           "salusd's host memory held for clients, by what holds it.");
    sl_textbuf_printf(b, "salus_host_memory_bytes{class=\"metadata\"} %llu\n",
                      (unsigned long long) s->metadata);
    sl_textbuf_printf(b, "salus_host_memory_bytes{class=\"decoding\"} %llu\n",
                      (unsigned long long) s->decoded);

    header(b, "salus_memory_bytes", "gauge", "Device memory by class.");
    const sl_mem_stats *m = &s->mem;
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"capacity\"} %llu\n",
                      (unsigned long long) m->capacity);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"persistent\"} %llu\n",
                      (unsigned long long) m->persistent_used);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"persistent_reserved\"} %llu\n",
                      (unsigned long long) m->persistent_reserved);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"ephemeral\"} %llu\n",
                      (unsigned long long) m->lanes);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"framework\"} %llu\n",
                      (unsigned long long) m->framework);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"free\"} %llu\n", (unsigned long long) m->free);
    sl_textbuf_printf(b, "salus_memory_bytes{class=\"largest_free\"} %llu\n",
                      (unsigned long long) m->largest_free);

    header(b, "salus_admission_queue_length", "gauge",
           "Sessions waiting for admission, by why they wait.");
    for (int r = SL_MEM_QUOTA; r <= SL_MEM_FRAGMENTATION; r++)
        sl_textbuf_printf(b, "salus_admission_queue_length{reason=\"%s\"} %llu\n",
                          sl_mem_reason_name(r), (unsigned long long) s->queued[r]);

    /* only these two wait: a session beyond its quota is refused */
    static const int waits[] = {SL_MEM_CAPACITY, SL_MEM_FRAGMENTATION};
    header(b, "salus_admission_waiting_seconds_total", "counter",
           "Time sessions spent waiting for admission, by the reason they began waiting for "
           "(capacity: not enough free device memory; fragmentation: enough, but in pieces), "
           "waits still going on included.");
    for (size_t k = 0; k < sizeof waits / sizeof waits[0]; k++)
        sl_textbuf_printf(b, "salus_admission_waiting_seconds_total{reason=\"%s\"} %.9f\n",
                          sl_mem_reason_name(waits[k]), (double) s->waited_ns[waits[k]] / 1e9);
    header(b, "salus_admission_wait_seconds", "histogram",
           "From a session's OpenSession to its admission, for sessions that waited, by the "
           "reason they began waiting for (capacity, fragmentation).");
    for (size_t k = 0; k < sizeof waits / sizeof waits[0]; k++) {
        char labels[48];
        snprintf(labels, sizeof labels, "reason=\"%s\",", sl_mem_reason_name(waits[k]));
        hist_series(b, "salus_admission_wait_seconds", labels, &obs->admission_wait[waits[k]]);
    }

    header(b, "salus_sessions", "gauge", "Admitted sessions.");
    sl_textbuf_printf(b, "salus_sessions %zu\n", s->n_sessions);
    PER_SESSION(b, s, "salus_session_iterations_total", "counter", "Iterations finished.", "%llu",
                (unsigned long long) x->iterations);
    PER_SESSION(b, s, "salus_session_device_seconds_total", "counter",
                "Device time charged to the session.", "%.9f", (double) x->attained_ns / 1e9);
    PER_SESSION(b, s, "salus_session_queue_seconds_total", "counter",
                "Time its iterations waited between their Run and their start.", "%.9f",
                (double) x->queue_ns / 1e9);
    PER_SESSION(b, s, "salus_session_switches_total", "counter",
                "Times the session took a lane from another session.", "%llu",
                (unsigned long long) x->switches);
    PER_SESSION(b, s, "salus_session_skipped_steps_total", "counter",
                "Iterations of loss-scaled (f16) graphs that skipped their update for an inf or "
                "NaN gradient.",
                "%llu", (unsigned long long) x->skipped_steps);
    PER_SESSION(b, s, "salus_session_graph_replays_total", "counter",
                "Iterations replayed from a recorded graph in one launch.", "%llu",
                (unsigned long long) x->graph_replays);
    PER_SESSION(b, s, "salus_session_graph_fallbacks_total", "counter",
                "Recordings of its iterations that the device refused; those graphs run op by "
                "op (the reason is in status).",
                "%llu", (unsigned long long) x->graph_fallbacks);
    PER_SESSION(b, s, "salus_session_priority", "gauge", "The session's scheduling priority.", "%d",
                x->priority);
    PER_SESSION(b, s, "salus_session_lane", "gauge", "The lane the session runs on.", "%u",
                x->lane);
    header(b, "salus_session_memory_bytes", "gauge",
           "The session's memory by class: persistent (allocated on the device), "
           "persistent_reserved (held for it: the larger of its declared and allocated "
           "persistent bytes), ephemeral (planned peak of its iterations, inside its lane), "
           "ephemeral_need (what its lane must hold for it; sessions share lanes, so these do "
           "not add up), framework (what its recorded graphs hold, charged to it), "
           "declared_persistent, declared_ephemeral, host (salusd's host memory for its graphs "
           "and tensors).");
    for (size_t k = 0; k < s->n_sessions; k++) {
        const snap_session *x = &s->sessions[k];
        const struct {
            const char *cls;
            uint64_t v;
        } c[] = {
            {"persistent", x->persistent},         {"persistent_reserved", x->persistent_reserved},
            {"ephemeral", x->ephemeral_peak},      {"ephemeral_need", x->ephemeral_need},
            {"framework", x->framework},           {"declared_persistent", x->declared_p},
            {"declared_ephemeral", x->declared_e}, {"host", x->host_bytes},
        };
        for (size_t j = 0; j < sizeof c / sizeof c[0]; j++)
            sl_textbuf_printf(b, "salus_session_memory_bytes{%s,class=\"%s\"} %llu\n", x->labels,
                              c[j].cls, (unsigned long long) c[j].v);
    }

    header(b, "salus_lanes", "gauge", "Lanes now.");
    sl_textbuf_printf(b, "salus_lanes %zu\n", s->n_lanes);
    header(b, "salus_lane_busy_seconds_total", "counter",
           "Device time of the lane's iterations (rate() is its busy fraction); a reclaimed "
           "lane's id keeps counting for the next lane under it.");
    for (size_t k = 0; k < s->n_lanes; k++) {
        uint32_t id = s->lanes[k].id;
        uint64_t ns = id < SL_OBS_LANES ? atomic_load(&obs->lane_busy_ns[id]) : 0;
        sl_textbuf_printf(b, "salus_lane_busy_seconds_total{lane=\"%u\"} %.9f\n", id,
                          (double) ns / 1e9);
    }
    header(b, "salus_lane_busy", "gauge", "1 while an iteration runs on the lane.");
    for (size_t k = 0; k < s->n_lanes; k++)
        sl_textbuf_printf(b, "salus_lane_busy{lane=\"%u\"} %d\n", s->lanes[k].id,
                          s->lanes[k].busy ? 1 : 0);
    header(b, "salus_lane_sessions", "gauge", "Sessions on the lane.");
    for (size_t k = 0; k < s->n_lanes; k++)
        sl_textbuf_printf(b, "salus_lane_sessions{lane=\"%u\"} %u\n", s->lanes[k].id,
                          s->lanes[k].n_sessions);
    header(b, "salus_lane_memory_bytes", "gauge",
           "The lane's memory: ephemeral (its size), framework (its workspace), peak (the "
           "largest planned need of its sessions).");
    for (size_t k = 0; k < s->n_lanes; k++) {
        const sl_mem_lane_info *l = &s->lanes[k];
        sl_textbuf_printf(b, "salus_lane_memory_bytes{lane=\"%u\",class=\"ephemeral\"} %llu\n",
                          l->id, (unsigned long long) l->size);
        sl_textbuf_printf(b, "salus_lane_memory_bytes{lane=\"%u\",class=\"framework\"} %llu\n",
                          l->id, (unsigned long long) l->framework);
        sl_textbuf_printf(b, "salus_lane_memory_bytes{lane=\"%u\",class=\"peak\"} %llu\n", l->id,
                          (unsigned long long) l->max_peak);
    }
    hist(b, "salus_request_duration_seconds",
         "From a request's arrival to its reply leaving salusd, every request.", &obs->requests);
    hist(b, "salus_iteration_duration_seconds",
         "From a Run's arrival to its iteration's end (queueing included).", &obs->iterations);
}

int sl_metrics_render(sl_server *srv, char **text, size_t *len)
{
    snap s;
    int rc = take(srv, &s);
    sl_textbuf b = {0};
    if (rc == SL_OK) {
        format(&b, &s, &srv->obs);
    }
    sl_free(s.sessions);
    sl_free(s.lanes);
    if (rc != SL_OK || b.failed || !b.p) {
        sl_free(b.p);
        return SL_ENOMEM;
    }
    *text = b.p;
    *len = b.len;
    return SL_OK;
}
