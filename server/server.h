/* salusd as a library: configuration, start, stop. salusd's main is a thin
 * shell around it; tests and benchmarks embed one in-process.
 *
 * Inside, a request flows one way:
 *
 *   transport ──▶ gate ──▶ sessions ──▶ handlers (tensors, runs) ──▶ executor ──▶ device
 *   (NNG)        (decode,   (table,      (validate, lay out        (lanes, streams,
 *                 auth,      admission,   replies)                  scheduler, gaps)
 *                 repeats)   queues)
 *
 * and completion comes back through one hook: the executor's done hook
 * ends the session's head request, whose reply goes into an outbox that
 * the sender hands to the transport once the lock is released. Device
 * faults (fault.h) reach back only through their hooks, wired here. Each
 * part has its own header and sub-struct below, and no part writes
 * another's.
 *
 * Threads and locks. NNG's callback threads run the gate; device stream
 * threads run the executor's completions; the gap timer and the fault
 * thread run their own. One mutex, `lock`, guards sessions, the executor
 * and the memory manager; it is held only for bookkeeping and for
 * submitting device work (which never waits), never across a device wait
 * or an NNG call that may block. The transport and the repeat table have
 * locks of their own, never held with another. The shared-memory plane's
 * lock is a leaf, taken with `lock` held or not. The descriptor socket's
 * thread (shm_socket.h) takes `lock` only for O(1) session lookups. Lock order: `lock`, then a
 * backend's internal stream locks. */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include "config.h"
#include "decode.h"
#include "exec.h"
#include "fault.h"
#include "metrics.h"
#include "observe.h"
#include "repeats.h"
#include "sender.h"
#include "session.h"
#include "shm.h"
#include "shm_socket.h"
#include "transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct sl_server {
    sl_config cfg;
    pthread_mutex_t lock;
    bool lock_ready;
    sl_device *dev;
    sl_mem_mgr *mem;
    sl_exec exec;
    sl_sessions sessions;
    sl_fault fault;
    sl_decoder decoder; /* the gate's */
    sl_repeats repeats;
    sl_sender sender;
    sl_transport *transport;
    sl_shm_plane shm;          /* shared-memory segments' budget */
    sl_shm_socket *shm_socket; /* where segments are handed over */
    sl_obs obs;                /* histograms, lane busy time, the trace ring */
    bool obs_ready;            /* obs initialised */
    sl_metrics *metrics;       /* the Prometheus listener, or NULL */
    uint64_t start_ns;
    _Atomic uint64_t requests;
    _Atomic bool stopping; /* connection events are ignored */
};

typedef struct sl_server sl_server;

/* Starts a server from srv->cfg (srv zeroed apart from cfg): device, memory,
 * executor, sessions, transport. On failure call sl_server_fini. Errors:
 * those of the device, memory and transport steps. */
int sl_server_start(sl_server *srv);
/* Drains (running iterations finish, queued ones fail with SHUTTING_DOWN)
 * and frees everything. May block until the device is idle. */
void sl_server_stop(sl_server *srv);
/* Frees everything; safe on a half-started server. Returns false when NNG
 * could not close its socket (its memory is then left to the process's
 * exit; nothing of the server is used any more). */
bool sl_server_fini(sl_server *srv);
/* Applies cfg.fault_file's fault commands (fault.h). Lock not held. */
int sl_server_inject_faults(sl_server *srv);

/* Counters, for status and tests (takes the lock). */
typedef struct sl_server_counters {
    uint64_t requests, replies, errors, repeats;
    sl_exec_stats exec;
    size_t sessions;
} sl_server_counters;
void sl_server_get_counters(sl_server *srv, sl_server_counters *out);

#endif
