/* Device faults (device.h "error classes").
 *
 * A per-request device error just fails its request. A device-lost error
 * (SL_EDEVICERESET) halts the executor (exec.h) and comes here
 * (sl_fault_lost): session requests that arrive meanwhile are held, not
 * failed (a client retrying at once would only see the reset again), and
 * the fault thread waits until nothing runs on the device, resets it
 * through the executor (every tensor keeps its offset, id and shape; its
 * contents are gone), then has the server go on and replays the held
 * requests. A reset that fails leaves the device dead, and cfg.device_dead
 * is called. What sessions are told, and in which words, is the session
 * layer's and the gate's business. */
#ifndef SL_FAULT_H
#define SL_FAULT_H

#include "config.h"
#include "exec.h"
#include "salus.pb-c.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl_fault_hooks {
    void *arg;
    /* Lock held: nothing runs on the device and no reply is being sent. */
    bool (*idle)(void *arg);
    /* Lock held: the reset is over (dead: it failed). */
    void (*recovered)(void *arg, bool dead);
    /* Lock not held: a held request goes on (after a reset), or is dropped
     * (dropping: salusd stops). Takes msg. */
    void (*release)(void *arg, sl_req *req, Salus__Request *msg, bool dropping);
} sl_fault_hooks;

typedef struct sl_fault {
    pthread_mutex_t *lock; /* the server's: guards all of this */
    const sl_config *cfg;
    sl_exec *ex;
    sl_fault_hooks hooks;
    bool lost; /* a device-lost error: no device work starts until the reset */
    bool dead; /* the reset failed: session requests get NO_DEVICE */
    bool thread_started, thread_stop;
    pthread_t thread;
    pthread_cond_t cond;
    struct sl_held *held, *held_tail; /* session requests held during a reset */
    uint64_t resets;                  /* device resets done */
    uint64_t faults;                  /* device-lost errors that started a reset */
} sl_fault;

/* Sets f up (no thread yet: it starts with the first fault). */
void sl_fault_init(sl_fault *f, const sl_config *cfg, sl_exec *ex, pthread_mutex_t *lock,
                   const sl_fault_hooks *hooks);
/* A device-lost error was seen (lock held). Returns true the first time
 * (until the reset): the caller then tells the sessions. Never blocks. */
bool sl_fault_lost(sl_fault *f);
/* Holds a session request until the reset is over (lock held; takes msg on
 * success). Returns false without memory to hold it. */
bool sl_fault_hold(sl_fault *f, sl_req *req, Salus__Request *msg);
/* Reads cfg.fault_file, applies its commands through the device's
 * inject_fault (device.h) and removes the file (the acknowledgement).
 * Called by salusd's main thread on SIGUSR1; lock not held. Errors:
 * SL_EINVAL (no file configured, bad command), SL_ENOTFOUND (unreadable),
 * SL_EUNSUPPORTED (the device injects no faults). */
int sl_fault_inject_file(sl_fault *f);
/* Stops and joins the fault thread, then drops the requests still held
 * (hooks.release with dropping). Call before the transport stops, lock not
 * held. Safe on a zeroed or never-started f. */
void sl_fault_fini(sl_fault *f);

#endif
