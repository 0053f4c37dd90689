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

void sl_sim_psc_submit(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                       double cap)
{
    sl_sim_psc_submit_ex(ps, job, arrive_ns, solo_ns, cap, 0.0);
}

void sl_sim_psc_submit_ex(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                          double cap, double launch)
{
    job->launch = launch > 0 && launch < 1 ? launch : 0.0;
    job->rho = 1.0;
    job->done = false;
    job->done_ns = 0;
    job->solo_ns = solo_ns;
    job->cap = cap > 0 && cap <= 1 ? cap : 1.0;
    job->arrive_ns = arrive_ns < ps->now_ns ? ps->now_ns : arrive_ns;
    sl_sim_psc_job **link = &ps->pending;
    while (*link && (*link)->arrive_ns <= job->arrive_ns)
        link = &(*link)->next;
    job->next = *link;
    *link = job;
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

static void relevel(sl_sim_psc *ps)
{
    if (ps->n_launching) {
        launch_level(ps);
        sort_by_effective_cap(ps);
    }
    double c = 0.0;
    unsigned m = ps->n_active;
    bool capping = true;
    for (sl_sim_psc_job *j = ps->active; j; j = j->next) {
        double e = j->cap * j->rho; /* rho 1 without launches: e is cap, exactly */
        bool cap_it = capping && e * (double) m < 1.0 - c;
        if (cap_it) {
            c += e;
            m--;
        } else {
            capping = false;
        }
        if (cap_it && !j->capped)
            j->left = (j->finish_v - ps->v) / j->cap;
        else if (!cap_it && j->capped)
            j->finish_v = ps->v + j->left * j->cap;
        j->capped = cap_it;
    }
    ps->capped_sum = c;
    ps->n_uncapped = m;
}

static uint64_t next_departure(const sl_sim_psc *ps)
{
    if (ps->n_active == 0)
        return UINT64_MAX;
    double min_finish = INFINITY, min_left = INFINITY;
    for (const sl_sim_psc_job *j = ps->active; j; j = j->next) {
        if (j->capped)
            min_left = fmin(min_left, j->left / j->rho);
        else
            min_finish = fmin(min_finish, j->finish_v);
    }
    double dt = min_left;
    if (ps->n_uncapped)
        dt = fmin(dt, (min_finish - ps->v) * (double) ps->n_uncapped / (1.0 - ps->capped_sum));
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
    if (ps->n_uncapped)
        ps->v += (double) (t - ps->now_ns) * (1.0 - ps->capped_sum) / (double) ps->n_uncapped;
    if (ps->n_uncapped < ps->n_active)
        for (sl_sim_psc_job *j = ps->active; j && j->capped; j = j->next)
            j->left -= (double) (t - ps->now_ns) * j->rho;
    ps->now_ns = t;
}

static unsigned depart(sl_sim_psc *ps, sl_sim_psc_done_fn done_fn, void *arg)
{
    sl_sim_psc_job *gone = NULL, **link = &ps->active;
    while (*link) {
        sl_sim_psc_job *j = *link;
        bool due = j->capped ? j->left <= PSC_EPS_NS : j->finish_v <= ps->v + PSC_EPS_NS;
        if (due) {
            *link = j->next;
            j->next = gone;
            gone = j;
            ps->n_active--;
            if (j->launch > 0)
                ps->n_launching--;
        } else {
            link = &j->next;
        }
    }
    if (ps->n_active == 0)
        ps->v = 0;
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

/* Joins the active list at its cap's place, ahead of equal caps (with every
 * cap 1 this is sl_sim_ps's push to the front). */
static void activate(sl_sim_psc *ps, sl_sim_psc_job *j)
{
    sl_sim_psc_job **link = &ps->active;
    while (*link && (*link)->cap < j->cap)
        link = &(*link)->next;
    j->next = *link;
    *link = j;
    j->capped = true; /* its progress as solo time left, converted by relevel */
    j->left = (double) j->solo_ns;
    ps->n_active++;
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
