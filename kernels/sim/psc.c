/* Processor sharing with per-job rate caps (sim.h, sl_sim_psc). The
 * uncapped jobs share one service level v exactly as sl_sim_ps's jobs do;
 * the capped ones count down their own solo time. Every expression that
 * also exists in sl_sim_ps (model.c) is written the same way, so that with
 * no capped job the arithmetic, and hence every departure time, is the same
 * to the bit. */
#include "sim.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <math.h>
#include <string.h>

/* As model.c: service below this many ns counts as done. */
#define PSC_EPS_NS 1e-6

void sl_sim_psc_init(sl_sim_psc *ps, uint64_t start_ns)
{
    memset(ps, 0, sizeof *ps);
    ps->now_ns = start_ns;
}

/* Queues job by arrival, after those arriving at the same time. */
static void pend(sl_sim_psc *ps, sl_sim_psc_job *job)
{
    sl_sim_psc_job **link = &ps->pending;
    while (*link && (*link)->arrive_ns <= job->arrive_ns)
        link = &(*link)->next;
    job->next = *link;
    *link = job;
}

void sl_sim_psc_submit(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                       double cap)
{
    sl_sim_psc_submit_ex(ps, job, arrive_ns, solo_ns, cap, 0.0);
}

void sl_sim_psc_submit_ex(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                          double cap, double launch)
{
    sl_sim_psc_submit_prio(ps, job, arrive_ns, solo_ns, cap, launch, 0, 0);
}

void sl_sim_psc_submit_prio(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns,
                            uint64_t solo_ns, double cap, double launch, int priority,
                            uint64_t block_ns)
{
    job->cls = priority > 0 ? 0u : priority == 0 ? 1u : 2u;
    job->block_ns = block_ns;
    job->waited = false;
    job->launch = launch > 0 && launch < 1 ? launch : 0.0;
    job->rho = 1.0;
    job->done = false;
    job->done_ns = 0;
    job->solo_ns = solo_ns;
    job->cap = cap > 0 && cap <= 1 ? cap : 1.0;
    job->arrive_ns = arrive_ns < ps->now_ns ? ps->now_ns : arrive_ns;
    pend(ps, job);
}

/* Water-filling: the capped jobs are the longest prefix (by cap, ascending)
 * whose every cap is below the level the rest would get. A job whose status
 * changes converts its progress at the current service level. */
/* The launch server's water-filling (sim.h): rho of every active job.
 * Only called while some active job launches. */
static void launch_level(sl_sim_psc *ps)
{
    double total = 0.0;
    unsigned n = 0;
    for (sl_sim_psc_job *j = ps->active; j; j = j->next)
        if (j->launch > 0) {
            total += j->launch;
            n++;
        }
    double level = INFINITY;
    if (total > 1.0) {
        /* the level M: jobs below it keep their demand, the rest share
         * what is left equally; each pass moves at least one job below */
        level = 1.0 / (double) n;
        for (;;) {
            double below = 0.0;
            unsigned above = 0;
            for (sl_sim_psc_job *j = ps->active; j; j = j->next) {
                if (j->launch <= 0)
                    continue;
                if (j->launch < level)
                    below += j->launch;
                else
                    above++;
            }
            double next = above ? (1.0 - below) / (double) above : level;
            if (next <= level)
                break;
            level = next;
        }
    }
    for (sl_sim_psc_job *j = ps->active; j; j = j->next)
        j->rho = j->launch > level ? level / j->launch : 1.0;
}

/* The active list by effective cap (cap x rho), ascending, stable: an
 * insertion sort, the list being nearly sorted from the last call. */
static void sort_by_effective_cap(sl_sim_psc *ps)
{
    sl_sim_psc_job *sorted = NULL;
    for (sl_sim_psc_job *j = ps->active, *next; j; j = next) {
        next = j->next;
        double e = j->cap * j->rho;
        sl_sim_psc_job **link = &sorted;
        while (*link && (*link)->cap * (*link)->rho <= e)
            link = &(*link)->next;
        j->next = *link;
        *link = j;
    }
    ps->active = sorted;
}

/* Each class water-fills what the classes above leave it (sim.h). With one
 * class in use its share is 1.0 exactly, and the expressions are those of
 * the single-class model. */
static void relevel(sl_sim_psc *ps)
{
    if (ps->n_launching) {
        launch_level(ps);
        sort_by_effective_cap(ps);
    }
    double avail = 1.0;
    for (unsigned k = 0; k < SL_SIM_PSC_CLASSES; k++) {
        sl_sim_psc_class *cl = &ps->cls[k];
        cl->avail = avail;
        double c = 0.0;
        unsigned m = cl->n_active;
        bool capping = true;
        for (sl_sim_psc_job *j = ps->active; j && cl->n_active; j = j->next) {
            if (j->cls != k)
                continue;
            double e = j->cap * j->rho; /* rho 1 without launches: e is cap, exactly */
            bool cap_it = capping && e * (double) m < avail - c;
            if (cap_it) {
                c += e;
                m--;
            } else {
                capping = false;
            }
            if (cap_it && !j->capped)
                j->left = (j->finish_v - cl->v) / j->cap;
            else if (!cap_it && j->capped)
                j->finish_v = cl->v + j->left * j->cap;
            j->capped = cap_it;
        }
        cl->capped_sum = c;
        cl->n_uncapped = m;
        /* jobs at the level take all that is left */
        avail = m ? 0.0 : avail - c;
    }
}

/* The rate at which an uncapped job of class cl gains service level. */
static double level_rate(const sl_sim_psc_class *cl)
{
    double free = cl->avail - cl->capped_sum;
    return free > 0 ? free : 0.0;
}

double sl_sim_psc_used(const sl_sim_psc *ps)
{
    double used = 0.0;
    for (unsigned k = 0; k < SL_SIM_PSC_CLASSES; k++) {
        const sl_sim_psc_class *cl = &ps->cls[k];
        if (cl->n_uncapped && level_rate(cl) > 0)
            return 1.0;
        used += cl->capped_sum;
    }
    return used;
}

static uint64_t next_departure(const sl_sim_psc *ps)
{
    if (ps->n_active == 0)
        return UINT64_MAX;
    double min_finish[SL_SIM_PSC_CLASSES] = {INFINITY, INFINITY, INFINITY}, min_left = INFINITY;
    for (const sl_sim_psc_job *j = ps->active; j; j = j->next) {
        if (j->capped)
            min_left = fmin(min_left, j->left / j->rho);
        else
            min_finish[j->cls] = fmin(min_finish[j->cls], j->finish_v);
    }
    double dt = min_left;
    for (unsigned k = 0; k < SL_SIM_PSC_CLASSES; k++) {
        const sl_sim_psc_class *cl = &ps->cls[k];
        if (cl->n_uncapped && level_rate(cl) > 0)
            dt = fmin(dt, (min_finish[k] - cl->v) * (double) cl->n_uncapped /
                              (cl->avail - cl->capped_sum));
    }
    if (dt <= PSC_EPS_NS)
        return ps->now_ns;
    double step = ceil(dt - PSC_EPS_NS);
    if (step >= (double) (UINT64_MAX - 1 - ps->now_ns))
        return UINT64_MAX - 1;
    return ps->now_ns + (uint64_t) step;
}

uint64_t sl_sim_psc_next_event_ns(const sl_sim_psc *ps)
{
    uint64_t dep = next_departure(ps);
    uint64_t arr = ps->pending ? ps->pending->arrive_ns : UINT64_MAX;
    return dep < arr ? dep : arr;
}

static void progress(sl_sim_psc *ps, uint64_t t)
{
    unsigned uncapped = 0;
    for (unsigned k = 0; k < SL_SIM_PSC_CLASSES; k++) {
        sl_sim_psc_class *cl = &ps->cls[k];
        uncapped += cl->n_uncapped;
        if (cl->n_uncapped && level_rate(cl) > 0)
            cl->v +=
                (double) (t - ps->now_ns) * (cl->avail - cl->capped_sum) / (double) cl->n_uncapped;
    }
    if (uncapped < ps->n_active)
        for (sl_sim_psc_job *j = ps->active; j; j = j->next)
            if (j->capped)
                j->left -= (double) (t - ps->now_ns) * j->rho;
    ps->now_ns = t;
}

static unsigned depart(sl_sim_psc *ps, sl_sim_psc_done_fn done_fn, void *arg)
{
    sl_sim_psc_job *gone = NULL, **link = &ps->active;
    while (*link) {
        sl_sim_psc_job *j = *link;
        bool due =
            j->capped ? j->left <= PSC_EPS_NS : j->finish_v <= ps->cls[j->cls].v + PSC_EPS_NS;
        if (due) {
            *link = j->next;
            j->next = gone;
            gone = j;
            ps->n_active--;
            ps->cls[j->cls].n_active--;
            if (j->launch > 0)
                ps->n_launching--;
        } else {
            link = &j->next;
        }
    }
    for (unsigned k = 0; k < SL_SIM_PSC_CLASSES; k++)
        if (ps->cls[k].n_active == 0)
            ps->cls[k].v = 0; /* an idle class starts afresh */
    relevel(ps);
    unsigned n = 0;
    for (sl_sim_psc_job *j = gone, *next; j; j = next, n++) {
        next = j->next;
        j->next = NULL;
        j->done = true;
        j->done_ns = ps->now_ns;
        if (done_fn)
            done_fn(arg, j);
    }
    return n;
}

/* The rate at which active job j runs now, as a share of the resource. */
static double job_rate(const sl_sim_psc *ps, const sl_sim_psc_job *j)
{
    if (j->capped)
        return j->cap * j->rho;
    const sl_sim_psc_class *cl = &ps->cls[j->cls];
    return level_rate(cl) / (double) cl->n_uncapped;
}

/* The wait a job arriving now is charged before it joins (sim.h): the
 * longest block of the running lower-class jobs, when the SMs it needs are
 * not free. */
static uint64_t block_wait(const sl_sim_psc *ps, const sl_sim_psc_job *j)
{
    if (j->waited || j->cls + 1 >= SL_SIM_PSC_CLASSES)
        return 0;
    if (1.0 - sl_sim_psc_used(ps) >= j->cap)
        return 0;
    double wait = 0;
    for (const sl_sim_psc_job *a = ps->active; a; a = a->next) {
        if (a->cls <= j->cls || job_rate(ps, a) <= 0)
            continue;
        /* a block of it, or what is left of it alone if less: its running
         * blocks run at full speed and are done by then */
        double left = a->capped ? a->left : (a->finish_v - ps->cls[a->cls].v) / a->cap;
        double w = fmin((double) a->block_ns, left);
        wait = fmax(wait, w);
    }
    return wait > 0 ? (uint64_t) ceil(wait) : 0;
}

/* Joins the active list at its cap's place, ahead of equal caps (with every
 * cap 1 this is sl_sim_ps's push to the front), or waits for the lower
 * classes' running blocks first. */
static void activate(sl_sim_psc *ps, sl_sim_psc_job *j)
{
    uint64_t wait = block_wait(ps, j);
    if (wait > 0) {
        j->waited = true;
        j->arrive_ns = ps->now_ns + wait;
        ps->block_waits++;
        ps->block_wait_ns += wait;
        pend(ps, j);
        return;
    }
    sl_sim_psc_job **link = &ps->active;
    while (*link && (*link)->cap < j->cap)
        link = &(*link)->next;
    j->next = *link;
    *link = j;
    j->capped = true; /* its progress as solo time left, converted by relevel */
    j->left = (double) j->solo_ns;
    ps->n_active++;
    ps->cls[j->cls].n_active++;
    if (j->launch > 0)
        ps->n_launching++;
    relevel(ps);
}

unsigned sl_sim_psc_advance(sl_sim_psc *ps, uint64_t t_ns, sl_sim_psc_done_fn done_fn, void *arg)
{
    if (t_ns < ps->now_ns)
        return 0;
    unsigned n = 0;
    for (;;) {
        uint64_t dep = next_departure(ps);
        uint64_t arr = ps->pending ? ps->pending->arrive_ns : UINT64_MAX;
        uint64_t at = dep <= arr ? dep : arr;
        if (at == UINT64_MAX || at > t_ns)
            break;
        progress(ps, at);
        if (dep <= arr) {
            n += depart(ps, done_fn, arg);
        } else {
            sl_sim_psc_job *j = ps->pending;
            ps->pending = j->next;
            activate(ps, j);
        }
    }
    if (ps->n_active)
        progress(ps, t_ns);
    return n;
}

int sl_sim_psc_schedule(unsigned n, const uint64_t *arrive_ns, const uint64_t *solo_ns,
                        const double *cap, uint64_t *done_ns)
{
    if (n == 0)
        return SL_OK;
    if (!arrive_ns || !solo_ns || !cap || !done_ns)
        return SL_EINVAL;
    sl_sim_psc_job *jobs = sl_calloc(n, sizeof *jobs);
    if (!jobs)
        return SL_ENOMEM;
    uint64_t start = UINT64_MAX;
    for (unsigned i = 0; i < n; i++)
        start = arrive_ns[i] < start ? arrive_ns[i] : start;
    sl_sim_psc ps;
    sl_sim_psc_init(&ps, start);
    for (unsigned i = 0; i < n; i++)
        sl_sim_psc_submit(&ps, &jobs[i], arrive_ns[i], solo_ns[i], cap[i]);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    for (unsigned i = 0; i < n; i++)
        done_ns[i] = jobs[i].done_ns;
    sl_free(jobs);
    return SL_OK;
}
