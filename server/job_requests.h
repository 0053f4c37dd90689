/* Job requests: RegisterJob and CloseJob from a cluster manager (jobs.h has
 * the table, proto/salus.proto the wire contract). Which step a new
 * session belongs to is the session layer's to find (sl_sessions_open),
 * and the step's quota the tenants' to hold (tenants.h).
 *
 * Called with the server lock held; nothing here blocks. Operator rights
 * are the gate's to check before these run. */
#ifndef SL_JOB_REQUESTS_H
#define SL_JOB_REQUESTS_H

#include "session.h"

/* REGISTER_JOB (operator): registers or replaces the step. Refusals go
 * into r: INVALID_ARGUMENT (the step belongs to another uid),
 * RESOURCE_EXHAUSTED (SL_JOBS_MAX steps), HOST_OUT_OF_MEMORY. */
void sl_job_request_register(sl_sessions *ss, const Salus__RegisterJob *m, sl_reply *r);
/* CLOSE_JOB (operator): closes the sessions of the step (or of every step
 * of the job) and forgets it; the reply says how many of each. Closing
 * replies to the sessions' own queued requests go into box. */
void sl_job_request_close(sl_sessions *ss, const Salus__CloseJob *m, sl_reply *r, sl_outbox *box);

#endif
