/* Sessions: the table of open sessions, admission, and each session's queue
 * of work. A session's requests run strictly in the order they arrived:
 * its head runs (through the tensor, graph and run handlers) while the rest
 * waits. A session lives as long as the connection that opened it.
 *
 * Every function here is called with the server lock held and never
 * blocks; replies go into the outbox given. */
#ifndef SL_SESSION_H
#define SL_SESSION_H

#include "config.h"
#include "exec.h"
#include "fault.h"
#include "graph.h"
#include "jobs.h"
#include "manager.h"
#include "reply.h"
#include "shm.h"
#include "sl_map.h"
#include "tenants.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_session sl_session;

/* One request queued on a session. */
typedef struct sl_work {
    struct sl_work *next;
    sl_session *session;
    sl_req *req;         /* NULL for a close from a lost connection */
    Salus__Request *msg; /* decoded request, owned (or the static lost-close) */
    sl_reply *reply;     /* built while it runs, sent when it ends */
    sl_graph *graph;     /* a registration waiting for its lane */
    sl_exec_task task;   /* its device work (runs, control copies) */
    float *amp_found;    /* a run of a loss-scaled graph: its step's found flag */
} sl_work;

struct sl_session {
    uint64_t id;
    uint64_t token;
    uint32_t pipe_id; /* connection that opened it */
    bool has_uid;     /* opened over ipc://: only peers of uid may use it */
    uint64_t uid;
    uint64_t tenant;        /* its tenant's key (tenants.h) */
    bool limited;           /* opened without operator rights: its tenant's limits hold */
    uint64_t tenant_charge; /* memory counted against its tenant's quota */
    /* its recorded graphs' bytes beyond its persistent reservation, counted
     * against its tenant's quota besides tenant_charge (replay.h) */
    uint64_t recording_charge;
    bool reset_pending; /* the device was reset: its next request gets DEVICE_RESET */
    char name[64];      /* escaped (sl_text.h): safe in logs and status */
    sl_exec_job job;
    sl_map tensors; /* id -> sl_tensor */
    sl_map graphs;  /* id -> sl_graph */
    uint64_t next_object_id;
    uint64_t persistent_bytes;
    uint64_t persistent_by_dtype[SL_DTYPE_COUNT]; /* persistent_bytes by enum sl_dtype */
    /* host memory held for it: its graphs' and tensors' bookkeeping, at
     * most cfg->session_metadata */
    uint64_t host_bytes;
    uint64_t declared_persistent, declared_ephemeral;
    uint64_t ephemeral_peak; /* largest planned peak of its graphs */
    uint64_t skipped_steps;  /* loss-scaled iterations that skipped their update */
    sl_work *head, *tail;    /* pending work, head is executing when busy */
    bool busy;
    bool closing;
    bool admitted;     /* false while it waits in the admission queue */
    int wait_reason;   /* while it waits: the manager's reason it began waiting for */
    bool blocked;      /* its head waits for its lane to go idle (lane move) */
    sl_req *admit_req; /* the open request answered at admission */
    sl_reply *admit_reply;
    uint64_t open_ns;
    sl_shm *shm;         /* its shared-memory segment, or NULL */
    sl_shm *shm_staged;  /* one handed over and waiting for AttachShm */
    uint64_t shm_ticket; /* names shm_staged in AttachShm */
};

/* The session table and what the session layer needs of the others. */
typedef struct sl_sessions {
    const sl_config *cfg;
    sl_exec *ex;
    sl_fault *fault;
    sl_mem_mgr *mem;
    sl_shm_plane *shm; /* segments' budget; retired ones are unmapped there */
    /* the memory manager's sizes, for explaining refusals */
    uint64_t capacity, quota, default_ephemeral, framework_per_lane;
    sl_map table;       /* id -> sl_session */
    sl_tenants tenants; /* what each tenant holds */
    sl_jobs jobs;       /* cluster job steps registered by an operator */
    uint64_t next_id;
    /* host bytes held by all sessions' graphs and tensors, and the most
     * they may hold (cfg->max_metadata, or a quarter of the host's memory) */
    uint64_t host_bytes, host_limit;
    bool draining;      /* no new sessions or runs */
    uint32_t n_blocked; /* sessions whose head waits for its lane to go idle */
    /* connections that went away most recently (a ring): an open-session
     * request read before its connection closed but handled after must not
     * make a session nobody can ever close */
    uint32_t gone_pipes[256];
    uint32_t gone_next;
} sl_sessions;

/* Sets up an empty table; session ids start at a random point in [2^39,
 * 2^40) so that a client of a previous salusd gets SESSION_LOST for its old
 * session, never someone else's that happens to have the same number. */
void sl_sessions_init(sl_sessions *ss, const sl_config *cfg, sl_exec *ex, sl_fault *fault,
                      sl_mem_mgr *mem, sl_shm_plane *shm);
/* Frees every session left (their device memory goes with the arena). */
void sl_sessions_fini(sl_sessions *ss);

/* OPEN_SESSION from peer. The session belongs to the job step m names
 * (which must be registered for peer's uid) or else to the uid's only
 * registered step, if any (jobs.h); a refusal is PERMISSION_DENIED.
 * Without operator rights its tenant's limits apply (tenants.h,
 * sl_tenants_admit): priority and weight hints are clamped, and a session
 * beyond the tenant's session count or memory quota is refused with
 * RESOURCE_EXHAUSTED. The reply r is filled now, or (returns true) kept
 * with req and sent at admission. */
bool sl_sessions_open(sl_sessions *ss, const Salus__OpenSession *m, sl_req *req,
                      const sl_peer *peer, sl_reply *r);
/* Whether s belongs to peer: over ipc:// the same uid, else the same
 * connection. */
bool sl_session_owned_by(const sl_session *s, const sl_peer *peer);
/* The peer whose limits s lives under (never an operator: an operator's
 * sessions are not limited). */
static inline sl_peer sl_session_owner(const sl_session *s)
{
    return (sl_peer){.pipe_id = s->pipe_id, .has_uid = s->has_uid, .uid = s->uid};
}
/* The limits of peer's tenant (every field set; see tenants.h). */
void sl_sessions_limits(const sl_sessions *ss, const sl_peer *peer, sl_limits *out);
/* The limits s lives under: its owner's, with its job step's memory
 * quota and priority cap when it belongs to a registered step. */
void sl_sessions_limits_of(const sl_sessions *ss, const sl_session *s, sl_limits *out);
/* Closes every session whose tenant key match() accepts, as if its
 * connection had gone; returns how many. */
uint32_t sl_sessions_close_tenants(sl_sessions *ss, bool (*match)(uint64_t tenant, void *arg),
                                   void *arg, sl_outbox *box);
/* The open, admitted session id, or NULL. */
sl_session *sl_sessions_find(sl_sessions *ss, uint64_t id);
/* Queues a request on s (taking msg and r) and runs what can run now. */
void sl_sessions_submit(sl_sessions *ss, sl_session *s, sl_req *req, Salus__Request *msg,
                        sl_reply *r, sl_outbox *box);
/* Whether a session (open or waiting for admission) belongs to connection
 * pipe_id. Caller holds the server lock. */
bool sl_sessions_pipe_holds(const sl_sessions *ss, uint32_t pipe_id);
/* Closes every session opened over connection pipe_id (it went away). */
void sl_sessions_pipe_gone(sl_sessions *ss, uint32_t pipe_id, sl_outbox *box);
/* A task of a session finished (the executor's done hook). */
void sl_sessions_task_done(sl_sessions *ss, sl_exec_task *t, int status, bool lane_idle,
                           sl_outbox *box);
/* Admits the sessions the memory manager let in and retries registrations
 * blocked on a lane move. Call after anything that frees device memory. */
void sl_sessions_memory_changed(sl_sessions *ss, sl_outbox *box);
/* Every waiting session's place in the admission queue follows the policy
 * (sl_exec_wait_rank): call after a change of policy. (A waiting session's
 * own hints cannot change: no request reaches it before it is admitted.) */
void sl_sessions_rerank(sl_sessions *ss);
/* Starts draining: waiting opens and queued runs fail with SHUTTING_DOWN;
 * running ones go on. */
void sl_sessions_drain(sl_sessions *ss, sl_outbox *box);
/* The device was lost: every admitted session is told once (its next
 * request, or its queued run now, gets DEVICE_RESET). */
void sl_sessions_device_lost(sl_sessions *ss);
/* Fails the queued, not started runs of sessions still to be told. */
void sl_sessions_fail_queued_runs(sl_sessions *ss, sl_outbox *box);
/* The device was reset, which destroyed every recorded graph: frees their
 * records and gives back their memory (replay.h). Nothing runs on the
 * device. Call sl_sessions_memory_changed after: the memory may admit
 * waiting sessions. */
void sl_sessions_device_reset(sl_sessions *ss);
/* The executor's recording hooks (exec.h) for the session job is part of.
 * room: whether its tenant's quota has room for `outside` bytes of a
 * recording beyond its persistent reservation (always for an operator's
 * session, which is counted but never limited; tenants.h,
 * sl_tenants_recording_room). charged: counts the part of its recordings
 * the memory manager holds outside its reservation against its tenant,
 * as the manager has it now; also called by the session layer whenever a
 * recording goes without the executor (a graph freed). */
bool sl_sessions_recording_room(sl_sessions *ss, const sl_exec_job *job, uint64_t outside,
                                char *why, size_t len);
void sl_sessions_recordings_charged(sl_sessions *ss, sl_exec_job *job);
/* Staging a segment for session id (shm_socket.c), in two steps around the
 * mapping, which happens without the lock. begin: the session exists, the
 * token is its token, the peer uid is its owner's, and size bytes fit its
 * budget (then charged to the plane). end: installs seg as the session's
 * staged segment (retiring one staged before) and makes the ticket that
 * AttachShm names. Errors, with the reason in *why (static text):
 * SL_ESESSIONLOST (no such session, or a wrong token: one answer for
 * both), SL_EPERM, SL_EUNSUPPORTED (not opened over ipc://),
 * SL_EEXHAUSTED and SL_EINVAL (budget, size). On an error of end the caller
 * still owns seg. */
int sl_sessions_stage_begin(sl_sessions *ss, uint64_t id, uint64_t token, uint64_t uid,
                            uint64_t size, const char **why);
int sl_sessions_stage_end(sl_sessions *ss, uint64_t id, uint64_t token, sl_shm *seg,
                          uint64_t *ticket);

/* Closes session id (waiting for admission or admitted) as if its
 * connection had gone: queued work finishes or fails, then it goes. For
 * operators and its owner. Errors: SL_ENOTFOUND, SL_EPERM (another
 * tenant's), SL_ENOMEM. */
int sl_sessions_kill(sl_sessions *ss, uint64_t id, const sl_peer *peer, sl_outbox *box);

/* What a peer is told about a session id it cannot use, whether the id is
 * open (another tenant's, or a wrong token) or not: the same code and text
 * either way, so that answers never tell which ids are in use. The format
 * takes the id (unsigned long long). SL_NO_SESSION goes with
 * SL_ESESSIONLOST (requests that name a session and its token),
 * SL_NOT_YOURS_SESSION with SL_EPERM (SetSession and KillSession, which
 * name only the id, from a tenant without operator rights). */
#define SL_NO_SESSION                                                                              \
    "no session %llu with this token: it was closed, its connection closed (a session lives as "   \
    "long as the connection that opened it: open a new one on this connection), or salusd "        \
    "restarted"
#define SL_NOT_YOURS_SESSION                                                                       \
    "no open session %llu of yours (changing or closing another tenant's session takes operator "  \
    "rights)"

/* What a client is told after a device reset. */
#define SL_RESET_NOTICE                                                                            \
    "tensors keep their ids and shapes but their contents are lost: re-upload persistent state "   \
    "(write every tensor) and retry"

#endif
