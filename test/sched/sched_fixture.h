/* Shared fixture for the sched/ tests: a fake clock (every call gets an
 * explicit `now`), a pool of items the way the server embeds them, and a
 * fixed-seed LCG so a randomized failure replays exactly. */
#ifndef SL_TEST_SCHED_FIXTURE_H
#define SL_TEST_SCHED_FIXTURE_H

#include "sl_test.h"

#include <stdbool.h>
#include <stdint.h>

#include "scheduler.h"

/* An iteration as the server would embed it: the item plus who made it. */
typedef struct titem {
    sl_sched_item item;
    int job; /* index of the owning test job */
    int seq; /* per-job submission number */
    bool in_use;
} titem;

#define MAX_ITEMS 4096
#define MAX_TEST_JOBS 16

typedef struct fixture {
    sl_sched *s;
    titem items[MAX_ITEMS];
    int cursor;                  /* where the search for a free item starts */
    int next_seq[MAX_TEST_JOBS]; /* per test job */
} fixture;

/* The fixture every test uses; setup zeroes it, teardown frees the
 * scheduler and resets the allocation-failure hook. */
extern fixture fx;
int sched_setup(void **state);
int sched_teardown(void **state);

/* Creates fx.s with the named policy (the test fails if unknown). */
void make(const char *policy, bool strict);
/* Zeroes j, sets its "in" fields and adds it at now. */
void add(sl_sched_job *j, uint64_t id, double weight, uint32_t lane, uint64_t now);
/* Queues one item for test job index idx. Items are recycled once picked
 * or returned by a removal, as the server would recycle its iterations. */
titem *enq(sl_sched_job *j, int idx, uint64_t now);
titem *as_titem(sl_sched_item *it);
/* Returns a removed job's items to the pool; their count. */
int release_list(sl_sched_item *list);
/* Picks on lane; returns the picked job (NULL when idle), item in *t. */
sl_sched_job *pick(uint32_t lane, uint64_t now, titem **t);
/* Picks, checks the pick is `want`, completes with device_ns at
 * now + device_ns. */
#define run_one(lane, want, device_ns, now) run_one_at(__LINE__, lane, want, device_ns, now)
void run_one_at(int line, uint32_t lane, sl_sched_job *want, uint64_t device_ns, uint64_t now);

/* Fixed-seed LCG. */
extern uint64_t rng_state;
uint32_t rnd(void);
uint32_t rnd_range(uint32_t lo, uint32_t hi); /* [lo, hi] */

/* Random admissions, submissions, picks, completions and departures on
 * three lanes under a non-strict policy; checks work conservation, one item
 * per lane, per-job order and n_queued after every step. */
void core_property(const char *policy, uint64_t seed);

/* The test groups, one per file; each returns its number of failures. */
int sched_group_core(void);
int sched_group_policies(void);
int sched_group_accounting(void);
int sched_group_gaps(void);
int sched_group_share(void);

#define SCHED_TEST(f) cmocka_unit_test_setup_teardown(f, sched_setup, sched_teardown)

#endif
