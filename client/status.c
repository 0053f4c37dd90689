/* salus_status_text: the server's status reply rendered for people. */
#include "client_internal.h"
#include "sl_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct text {
    char *buf;
    size_t len, cap;
    int failed;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->cap - t->len;
        int n = t->buf ? vsnprintf(t->buf + t->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t) n < room) {
            t->len += (size_t) n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 1024;
        char *b = sl_reallocarray(t->buf, cap, 1);
        if (!b) {
            t->failed = 1;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

/* A session's resolved MathMode (SessionStatus) as status shows it. */
static const char *math_name(int mode)
{
    return mode == SALUS__MATH_MODE__MATH_TF32    ? "tf32"
           : mode == SALUS__MATH_MODE__MATH_EXACT ? "exact"
                                                  : "default";
}

/* 1536 -> "1.5 KiB": bytes in the largest binary unit that keeps >= 1. */
static const char *mib(uint64_t bytes, char *buf)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double) bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* A string from the server made safe for a terminal (a server escapes
 * names already; an older or hostile one may not). */
static const char *safe(const char *s, char *buf, size_t len)
{
    if (!s)
        return "";
    sl_escape(buf, len, s, strlen(s), 0);
    return buf;
}

int salus_status_text(salus_client *c, char **out)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep;
    int rc = sl_client_call(c, &req, &rep);
    if (rc)
        return rc;
    if (rep->body_case != SALUS__REPLY__BODY_STATUS) {
        salus__reply__free_unpacked(rep, NULL);
        return SL_EPROTO;
    }
    const Salus__StatusReply *s = rep->status;
    text t = {0};
    char a[32], b[32], d[32], e1[256], e2[256], e3[256];
    put(&t, "salusd %s  device: %s  policy: %s%s  up %.1f s\n",
        safe(s->server_version, e1, sizeof e1), safe(s->device, e2, sizeof e2),
        safe(s->policy, e3, sizeof e3), s->strict ? " (strict)" : "", (double) s->uptime_ns / 1e9);
    if (s->partitions && s->partitions[0])
        put(&t, "partitions: %s\n", safe(s->partitions, e1, sizeof e1));
    if (s->you && s->you->operator_)
        put(&t, "you: %s, operator (every session, no limits)\n",
            safe(s->you->tenant, e1, sizeof e1));
    else if (s->you)
        put(&t,
            "you: %s (your sessions only); limits: priority <= %d, weight <= %g, sessions "
            "%u of %u, memory %s of %s\n",
            safe(s->you->tenant, e1, sizeof e1), s->you->max_priority, s->you->max_weight,
            s->you->sessions, s->you->max_sessions, mib(s->you->memory_used, a),
            s->you->memory ? mib(s->you->memory, b) : "no quota");
    put(&t, "requests %llu  errors %llu  iterations %llu\n", (unsigned long long) s->requests_total,
        (unsigned long long) s->errors_total, (unsigned long long) s->iterations_total);
    if (s->memory) {
        /* every class, so that they add up to the capacity */
        const Salus__MemoryStatus *m = s->memory;
        put(&t, "memory: capacity %s = persistent %s", mib(m->capacity, a),
            mib(m->persistent_used, b));
        put(&t, " + reserved %s + lanes %s", mib(m->reserved_unused, a),
            mib(m->ephemeral_lanes, b));
        put(&t, " + framework %s + free %s\n", mib(m->framework, a), mib(m->free, b));
        put(&t,
            "  reserved: declared for persistent tensors, not allocated yet; largest free block "
            "%s (fragmentation %.2f)\n",
            mib(m->largest_free, a), m->fragmentation);
    }
    put(&t, "host memory: graphs and tensors %s  decoded requests %s (%llu refused for it)\n",
        mib(s->metadata_bytes, a), mib(s->decoded_bytes, b),
        (unsigned long long) s->decode_refusals);
    if (s->switch_other_p50_ns || s->switch_same_p50_ns)
        put(&t,
            "lane idle gap between iterations: same session p50 %.1f us p99 %.1f us, "
            "other session p50 %.1f us p99 %.1f us\n",
            (double) s->switch_same_p50_ns / 1e3, (double) s->switch_same_p99_ns / 1e3,
            (double) s->switch_other_p50_ns / 1e3, (double) s->switch_other_p99_ns / 1e3);
    if (s->n_lanes)
        put(&t, "%zu lane%s\n  %4s %12s %12s %10s %8s %5s\n", s->n_lanes,
            s->n_lanes == 1 ? "" : "s", "lane", "size", "max peak", "framework", "sessions",
            "busy");
    for (size_t i = 0; i < s->n_lanes; i++) {
        const Salus__LaneStatus *l = s->lanes[i];
        put(&t, "  %4u %12s %12s %10s %8u %5s\n", l->id, mib(l->size, a), mib(l->max_peak, b),
            mib(l->framework, d), l->sessions, l->busy ? "yes" : "no");
    }
    if (s->n_queue)
        put(&t, "admission queue: %zu waiting\n", s->n_queue);
    for (size_t i = 0; i < s->n_queue; i++) {
        const Salus__QueuedSession *q = s->queue[i];
        put(&t, "  session %llu %-16.16s persistent %s ephemeral %s waiting %.1f s: %s\n",
            (unsigned long long) q->id, safe(q->name, e1, sizeof e1), mib(q->persistent, a),
            mib(q->ephemeral, b), (double) q->waited_ns / 1e9, safe(q->reason, e2, sizeof e2));
    }
    put(&t, "%zu session%s\n", s->n_sessions, s->n_sessions == 1 ? "" : "s");
    /* ids are wide (40 bits): the column fits the widest */
    int idw = 2;
    for (size_t i = 0; i < s->n_sessions; i++) {
        int w = snprintf(NULL, 0, "%llu", (unsigned long long) s->sessions[i]->id);
        idw = w > idw ? w : idw;
    }
    if (s->n_sessions)
        put(&t, "  %*s %-16s %4s %4s %6s %12s %12s %12s %10s %10s %6s %9s %8s %8s  %s\n", idw, "id",
            "name", "lane", "prio", "weight", "persistent", "reserved", "eph. peak", "iters",
            "device s", "queued", "switches", "wait ms", "slowdown", "owner");
    for (size_t i = 0; i < s->n_sessions; i++) {
        const Salus__SessionStatus *x = s->sessions[i];
        put(&t, "  %*llu %-16.16s %4u %4d %6.2f %12s %12s %12s", idw, (unsigned long long) x->id,
            safe(x->name, e1, sizeof e1), x->lane, x->priority, x->weight,
            mib(x->persistent_bytes, a), mib(x->persistent_reserved, b), mib(x->ephemeral_peak, d));
        put(&t, " %10llu %10.3f %6u %9llu %8.2f %8.2f  %s%s\n", (unsigned long long) x->iterations,
            (double) x->attained_ns / 1e9, x->queued, (unsigned long long) x->switches,
            x->iterations ? (double) x->queue_delay_ns / 1e6 / (double) x->iterations : 0,
            x->slowdown, safe(x->owner, e2, sizeof e2), x->limited ? "" : " (operator)");
        put(&t, "  %*s math: matmul %s, conv %s", idw, "", math_name(x->math_matmul),
            math_name(x->math_conv));
        if (x->skipped_steps)
            put(&t, "; %llu skipped step%s (loss scaling)", (unsigned long long) x->skipped_steps,
                x->skipped_steps == 1 ? "" : "s");
        if (x->graph_replays || x->graph_fallbacks)
            put(&t, "; graphs: %llu replayed, %llu recorded", (unsigned long long) x->graph_replays,
                (unsigned long long) x->graph_recordings);
        if (x->framework_bytes)
            put(&t, "; framework %s", mib(x->framework_bytes, a));
        if (x->graph_fallback_reason && *x->graph_fallback_reason) {
            char why[160];
            put(&t, "; op by op: %s", safe(x->graph_fallback_reason, why, sizeof why));
        }
        for (size_t k = 0; k < x->n_persistent_by_dtype; k++)
            put(&t, "%s %s %s", k ? "," : "; persistent",
                sl_dtype_name(x->persistent_by_dtype[k]->dtype),
                mib(x->persistent_by_dtype[k]->bytes, a));
        put(&t, "\n");
    }
    salus__reply__free_unpacked(rep, NULL);
    if (t.failed) {
        sl_free(t.buf);
        return SL_ENOMEM;
    }
    *out = t.buf;
    return SL_OK;
}
