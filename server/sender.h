/* The sender: the one place replies leave the server. Parts collect
 * replies in an outbox while the server lock is held; the sender takes it
 * once the lock is released, runs a small iteration the box holds on this
 * thread first (device.h stream_hold), then hands every reply to the
 * transport. It also counts replies being sent, so a drain does not tear
 * the transport down under them. */
#ifndef SL_SENDER_H
#define SL_SENDER_H

#include "device.h"
#include "observe.h"
#include "repeats.h"
#include "reply.h"
#include "transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl_sender {
    pthread_mutex_t *lock; /* the server's */
    pthread_cond_t idle;   /* broadcast when sending ends while draining */
    sl_device *dev;
    sl_repeats *repeats;
    _Atomic uint32_t completing; /* boxes being sent */
    _Atomic bool draining;       /* someone waits on idle */
    _Atomic uint64_t replies, errors;
    sl_hist *latency; /* request latency, observed as replies go; NULL = none */
} sl_sender;

int sl_sender_init(sl_sender *s, pthread_mutex_t *lock, sl_device *dev, sl_repeats *repeats);
void sl_sender_fini(sl_sender *s);
/* Sends box (lock not held). */
void sl_sender_send(sl_sender *s, sl_outbox *box);
/* Releases the lock (held on entry) and sends box; a drain waiting for
 * the device to go quiet waits for these replies too. */
void sl_sender_unlock_send(sl_sender *s, sl_outbox *box);
/* Whether no box is being sent. */
bool sl_sender_quiet(const sl_sender *s);

#endif
