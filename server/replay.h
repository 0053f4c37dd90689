/* Iteration graphs: a whole iteration recorded once on the device and
 * replayed in one launch (device.h, graph_begin .. graph_destroy).
 *
 * When. An iteration is replayed when the device records graphs, salusd
 * was not started with --no-graphs, and the iteration is launched whole or
 * as segments of a stepwise iteration (below), not traced op by op. The
 * feeds, the run's writes and the fetches stay ordinary copies before and
 * after the replay: they land in and leave from the lane's fixed
 * addresses.
 *
 * Key. A recording holds every address, shape and attribute its ops were
 * launched with, on one stream. A graph's ops, shapes and attributes never
 * change, so salusd hashes the rest (sl_replay_key_*): the stream, the math
 * bits and every operand's address, and replays only while the key is
 * unchanged; anything that moves an
 * address (a lane moved by compaction or resize, a new stream, a partition
 * bound to another stream) or changes a call (math mode) changes the key,
 * and the next iteration records again. So does a device reset, which
 * destroys every recording. An iteration with a new key runs
 * op by op and the next one with the same key records: one-off iterations
 * are never recorded, and a backend's first-run work (plan caches, cuDNN
 * algorithm searches, which may not be recorded) is done by then.
 *
 * Segments. A fetch between two ops (a training step's loss, fetched
 * right after its last reader so its memory can be reused) cuts the
 * iteration: each run of ops between fetches is its own recording, and
 * the fetch is an ordinary copy between two replays.
 *
 * Steps. A stepwise iteration (low-priority work beside high-priority
 * jobs) goes as segments of ops; a segment of more than one op is
 * recorded and replayed the same way, per its first op.
 *
 * Memory. A recording's device memory (as the device reports it) is
 * charged to the owning session's framework class in the memory manager
 * (sl_mem_charge_framework) once it is made, and given back whenever it is
 * destroyed: recorded again, the graph freed, the session closed, a device
 * reset. The charge is held first in the unused bytes of the session's
 * persistent reservation (a tensor that needs those bytes later moves
 * them beside it: sl_mem_framework_move_out), and the rest is counted
 * against its tenant's memory quota (tenants.h), so that opening more
 * sessions buys a tenant no recorded-graph memory beyond its quota. A charge that does not fit (the
 * capacity, the session's quota, or the tenant's quota for the part beyond its reservation: the
 * executor asks first, through its recording_room hook) destroys the recording: the iteration runs
 * op by op, as below.
 *
 * Fallback. A recording the device refuses, or whose memory cannot be
 * charged, runs that iteration op by op, and the graph keeps running op by
 * op, with the reason shown in status, until its key changes. */
#ifndef SL_SERVER_REPLAY_H
#define SL_SERVER_REPLAY_H

#include "device.h"
#include "manager.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* A recorded step: ops [first, end) of a stepwise iteration, keyed as a
 * whole iteration is (below), recorded on its second sighting. */
typedef struct sl_replay_step {
    uint32_t end;
    uint64_t key, seen_key, failed_key;
    sl_dev_graph *exec;
    size_t bytes;
} sl_replay_step;

typedef struct sl_replay {
    pthread_mutex_t lock; /* a leaf: held only while recording or launching */
    sl_device *dev;
    /* the recorded segments (ops [seg_end[i-1], seg_end[i])), n_seg of
     * them; a segment of views only has no executable */
    sl_dev_graph **exec;
    uint32_t *seg_end;
    uint32_t n_seg;
    uint64_t key;        /* exec's key; valid while n_seg > 0 */
    uint64_t seen_key;   /* the last iteration's key */
    uint64_t failed_key; /* recording failed for this key: op by op until it changes */
    size_t bytes;        /* exec's device memory, as the device reports it */
    /* recorded steps of stepwise iterations (low-priority segments), by
     * their first op; NULL until one is recorded */
    struct sl_replay_step *steps;
    uint32_t n_ops;
    uint64_t replays, recordings, fallbacks;
    char reason[448]; /* why the last recording failed ("" none) */
    /* The memory manager's charge for these recordings, in the framework
     * class of session `owner` (mem NULL: never charged). Written only
     * under the server lock, which serialises the manager's calls. */
    sl_mem_mgr *mem;
    uint64_t owner;
    uint64_t charged; /* bytes charged now */
} sl_replay;

/* A new record, or NULL without memory. */
sl_replay *sl_replay_new(void);
/* Frees the executables and the record, and gives back their charge
 * (sl_replay_release). NULL is fine. */
void sl_replay_free(sl_replay *r);
/* What status and metrics show of a session's records, summed. */
typedef struct sl_replay_sums {
    uint64_t replays, recordings, fallbacks, bytes;
    char reason[448]; /* the first refused record's reason, "" none */
} sl_replay_sums;
/* Adds r (NULL is fine) to *sum, under r's lock. */
void sl_replay_add(sl_replay *r, sl_replay_sums *sum);

/* Frees the whole iteration's executables, or the steps' (lock held or
 * the record unshared). Their charge stays until sl_replay_charge. */
void sl_replay_drop(sl_replay *r);
void sl_replay_drop_steps(sl_replay *r);

/* Device bytes r's recordings hold now, the whole iteration's and the
 * steps' (r->lock held, or called by r's one writer: the iteration in
 * flight). */
uint64_t sl_replay_bytes(const sl_replay *r);
/* Makes the charge to session owner's framework class in mem match
 * sl_replay_bytes(r): gives back what destroyed recordings held, charges
 * what new ones hold. Server lock held; r->lock not needed by r's one
 * writer (one iteration of a graph runs at a time). Errors: the manager's
 * (SL_EEXHAUSTED with *reason QUOTA or CAPACITY, SL_ENOTFOUND): nothing is
 * charged then, what was given back stays given back. */
int sl_replay_charge(sl_replay *r, sl_mem_mgr *mem, uint64_t owner, int *reason);
/* Frees every executable of r and gives back their charge: the device was
 * reset (its recordings are gone), or the graph goes. Server lock held,
 * nothing of r's graph in flight. */
void sl_replay_release(sl_replay *r);
/* The key, built in steps: start with the stream, add words (executor.c:
 * the math bits, the resets, every operand's address, each segment's
 * end). FNV-1a. */
uint64_t sl_replay_key_start(const void *stream);
uint64_t sl_replay_key_add(uint64_t h, uint64_t word);

#endif
