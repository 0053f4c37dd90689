/* cpu compute partitions (device.h): disjoint sets of the cores salusd was
 * allowed to run on when the device was opened. A partition's streams run
 * their worker thread and its OpenMP team on its cores only, and size an
 * op's thread count to those cores, so two partitions never compete for a
 * core: what one lane computes cannot slow the other's ops down, apart
 * from the memory bandwidth and the last-level cache they still share.
 *
 * A new partition takes the lowest free cores; a shrinking one gives back
 * its highest, a growing one takes the lowest free ones. Streams bound to a
 * partition pick a change up before their next op (generation counter), so
 * a resize between iterations costs the next op one sched_setaffinity per
 * thread of its team.
 *
 * Loans (partition_lend): a lending partition's cores also serve every
 * normal-priority stream bound to another partition. Its own below-normal
 * streams run SCHED_IDLE (stream.c), so a borrower's thread that wakes on
 * a lent core takes it at once, mid-op, and the lender's op goes on when
 * the borrower sleeps again: the offline lanes keep the online lane's
 * cores free of their work while the online lane still reaches every core
 * they leave idle or fill with below-normal work. Without the loan an
 * online request would queue for its one core behind any other process's
 * thread there while a core running only idle-class work stands by. */
#include "cpu.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

int sl_cpu_partitions_init(sl_cpu_shared *sh)
{
    CPU_ZERO(&sh->taken);
    CPU_ZERO(&sh->lent);
    atomic_init(&sh->lent_gen, 1);
    if (sched_getaffinity(0, sizeof sh->usable, &sh->usable) != 0 || CPU_COUNT(&sh->usable) == 0) {
        CPU_ZERO(&sh->usable);
        for (int c = 0; c < sh->cores && c < CPU_SETSIZE; c++)
            CPU_SET(c, &sh->usable);
    }
    return pthread_mutex_init(&sh->part_lock, NULL) == 0 ? SL_OK : SL_ENOMEM;
}

void sl_cpu_partitions_fini(sl_cpu_shared *sh)
{
    if (CPU_COUNT(&sh->usable) > 0)
        pthread_mutex_destroy(&sh->part_lock);
}

int sl_cpu_partition_caps(sl_device *dev, sl_partition_caps *caps)
{
    sl_cpu_shared *sh = sl_cpu_shared_of(dev);
    memset(caps, 0, sizeof *caps);
    caps->units = (unsigned) CPU_COUNT(&sh->usable);
    caps->min_units = 1;
    caps->align = 1;
    caps->live = true; /* streams pick changes up before their next op */
    snprintf(caps->unit, sizeof caps->unit, "core");
    snprintf(caps->note, sizeof caps->note, "core sets (affinity, OpenMP team per set)");
    return SL_OK;
}

/* Moves n free cores into *set, lowest first; into the loans too when
 * lends. Under part_lock. */
static void take_cores(sl_cpu_shared *sh, cpu_set_t *set, int n, bool lends)
{
    for (int c = 0; c < CPU_SETSIZE && n > 0; c++) {
        if (CPU_ISSET(c, &sh->usable) && !CPU_ISSET(c, &sh->taken)) {
            CPU_SET(c, &sh->taken);
            CPU_SET(c, set);
            if (lends)
                CPU_SET(c, &sh->lent);
            n--;
        }
    }
    if (lends)
        atomic_fetch_add(&sh->lent_gen, 1);
}

/* Gives n of *set's cores back, highest first (out of the loans too).
 * Under part_lock. */
static void give_cores(sl_cpu_shared *sh, cpu_set_t *set, int n, bool lends)
{
    for (int c = CPU_SETSIZE - 1; c >= 0 && n > 0; c--) {
        if (CPU_ISSET(c, set)) {
            CPU_CLR(c, set);
            CPU_CLR(c, &sh->taken);
            if (lends)
                CPU_CLR(c, &sh->lent);
            n--;
        }
    }
    if (lends)
        atomic_fetch_add(&sh->lent_gen, 1);
}

static int free_cores(const sl_cpu_shared *sh)
{
    return CPU_COUNT(&sh->usable) - CPU_COUNT(&sh->taken);
}

/* Under part_lock. */
static void unref_locked(sl_partition *p)
{
    if (p && --p->refs == 0)
        sl_free(p);
}

int sl_cpu_partition_create(sl_device *dev, unsigned units, sl_partition **out)
{
    sl_cpu_shared *sh = sl_cpu_shared_of(dev);
    if (units == 0 || units > (unsigned) CPU_COUNT(&sh->usable))
        return SL_EINVAL;
    sl_partition *p = sl_calloc(1, sizeof *p);
    if (!p)
        return SL_ENOMEM;
    p->shared = sh;
    CPU_ZERO(&p->cores);
    pthread_mutex_lock(&sh->part_lock);
    if (free_cores(sh) < (int) units) {
        pthread_mutex_unlock(&sh->part_lock);
        sl_free(p);
        return SL_EEXHAUSTED;
    }
    take_cores(sh, &p->cores, (int) units, false);
    p->refs = 1;
    pthread_mutex_unlock(&sh->part_lock);
    atomic_init(&p->n_cores, (int) units);
    atomic_init(&p->gen, 1);
    atomic_init(&p->running, 0);
    *out = p;
    return SL_OK;
}

int sl_cpu_partition_resize(sl_device *dev, sl_partition *p, unsigned units)
{
    sl_cpu_shared *sh = sl_cpu_shared_of(dev);
    if (units == 0 || units > (unsigned) CPU_COUNT(&sh->usable))
        return SL_EINVAL;
    pthread_mutex_lock(&sh->part_lock);
    int have = CPU_COUNT(&p->cores), want = (int) units;
    if (want > have && free_cores(sh) < want - have) {
        pthread_mutex_unlock(&sh->part_lock);
        return SL_EEXHAUSTED;
    }
    if (want > have)
        take_cores(sh, &p->cores, want - have, p->lends);
    else if (want < have)
        give_cores(sh, &p->cores, have - want, p->lends);
    atomic_store(&p->n_cores, want);
    atomic_fetch_add(&p->gen, 1);
    pthread_mutex_unlock(&sh->part_lock);
    return SL_OK;
}

void sl_cpu_partition_destroy(sl_device *dev, sl_partition *p)
{
    if (!p)
        return;
    sl_cpu_shared *sh = sl_cpu_shared_of(dev);
    pthread_mutex_lock(&sh->part_lock);
    give_cores(sh, &p->cores, CPU_COUNT(&p->cores), p->lends);
    p->lends = false;
    atomic_store(&p->n_cores, 0);
    unref_locked(p); /* a worker still inside an op on it frees it */
    pthread_mutex_unlock(&sh->part_lock);
}

int sl_cpu_partition_lend(sl_device *dev, sl_partition *p, bool lend)
{
    sl_cpu_shared *sh = sl_cpu_shared_of(dev);
    if (!p)
        return SL_EINVAL;
    pthread_mutex_lock(&sh->part_lock);
    if (p->lends != lend) {
        p->lends = lend;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &p->cores)) {
                if (lend)
                    CPU_SET(c, &sh->lent);
                else
                    CPU_CLR(c, &sh->lent);
            }
        atomic_fetch_add(&sh->lent_gen, 1);
    }
    pthread_mutex_unlock(&sh->part_lock);
    return SL_OK;
}

unsigned sl_cpu_partition_units(sl_device *dev, const sl_partition *p)
{
    (void) dev;
    return (unsigned) atomic_load(&((sl_partition *) p)->n_cores);
}

unsigned sl_cpu_partition_follow(sl_cpu_shared *sh, _Atomic(sl_partition *) *bound,
                                 sl_partition **held, cpu_set_t *cores, bool borrow,
                                 cpu_set_t *lent, unsigned *lent_gen)
{
    pthread_mutex_lock(&sh->part_lock);
    sl_partition *p = atomic_load(bound);
    unsigned gen = 0;
    CPU_ZERO(lent);
    *lent_gen = atomic_load(&sh->lent_gen);
    if (p) {
        p->refs++;
        *cores = p->cores;
        gen = atomic_load(&p->gen);
        if (borrow)
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &sh->lent) && !CPU_ISSET(c, &p->cores))
                    CPU_SET(c, lent);
    }
    unref_locked(*held);
    *held = p;
    pthread_mutex_unlock(&sh->part_lock);
    return gen;
}

void sl_cpu_partition_unref(sl_cpu_shared *sh, sl_partition *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&sh->part_lock);
    unref_locked(p);
    pthread_mutex_unlock(&sh->part_lock);
}

void sl_cpu_partition_bind(sl_cpu_shared *sh, _Atomic(sl_partition *) *bound, sl_partition *p)
{
    pthread_mutex_lock(&sh->part_lock);
    atomic_store(bound, p);
    pthread_mutex_unlock(&sh->part_lock);
}

int sl_cpu_apply_cores(const cpu_set_t *cores, int team)
{
    if (sched_setaffinity(0, sizeof *cores, cores) != 0)
        sl_log_warn("cpu.part.affinity", "cannot move a stream's worker to its cores: %s",
                    strerror(errno));
    sl_cpu_team_set_cores(cores);
    /* every thread of the OpenMP team that already exists, or that a later
     * op of up to `team` threads starts, ends up on the set */
    if (team > 1) {
#pragma omp parallel num_threads(team)
        (void) sched_setaffinity(0, sizeof *cores, cores);
    }
    return CPU_COUNT(cores);
}
