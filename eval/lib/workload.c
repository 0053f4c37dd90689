/* Workload profiles from the Salus CSV and the section 5.1 trace
 * (workload.h). */
#include "workload.h"

#include "graphs.h"
#include "zoo.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length class of a measured JCT: the nearest of 1, 5, 10 minutes. */
static unsigned length_class(double jct_s)
{
    static const unsigned classes[] = {1, 5, 10};
    unsigned best = 1;
    for (unsigned i = 0; i < 3; i++)
        if (fabs(jct_s - 60.0 * classes[i]) < fabs(jct_s - 60.0 * best))
            best = classes[i];
    return best;
}

static int parse_row(char *line, void *row)
{
    sl_eval_workload *w = row;
    char *fields[7];
    char *save = NULL;
    unsigned k = 0;
    for (char *f = strtok_r(line, ",\r\n", &save); f && k < 7; f = strtok_r(NULL, ",\r\n", &save))
        fields[k++] = f;
    if (k != 7 || strlen(fields[0]) >= sizeof w->name || strlen(fields[1]) >= sizeof w->model)
        return SL_EINVAL;
    memset(w, 0, sizeof *w);
    strcpy(w->name, fields[0]);
    strcpy(w->model, fields[1]);
    char *end;
    w->batch = (unsigned) strtoul(fields[2], &end, 10);
    w->jct_s = strtod(fields[4], &end);
    double peak_mb = strtod(fields[5], &end);
    w->iterations = strtoull(fields[6], &end, 10);
    if (!w->batch || !(w->jct_s > 0) || !(peak_mb > 0) || !w->iterations)
        return SL_EINVAL;
    w->length_min = length_class(w->jct_s);
    uint64_t params = sl_zoo_published_params(w->model);
    uint64_t peak = (uint64_t) (peak_mb * 1048576.0);
    w->peak_bytes = peak;
    w->persistent_bytes = params * 4;
    if (!params || peak <= w->persistent_bytes)
        return SL_EINVAL;
    w->ephemeral_bytes = peak - w->persistent_bytes;
    return SL_OK;
}

/* Reads a CSV file's rows after its header line, each non-empty line
 * parsed by parse into an array of elem-byte rows (sl_free); a line parse
 * refuses ends the read with its error. */
static int read_csv(const char *path, size_t elem, int (*parse)(char *line, void *row), void **out,
                    size_t *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return SL_ENOTFOUND;
    char *rows = NULL, line[256];
    size_t n = 0, cap = 0;
    int rc = SL_OK;
    for (bool header = true; rc == SL_OK && fgets(line, sizeof line, f); header = false) {
        if (header || line[0] == '\n' || line[0] == '\0')
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 64;
            char *nr = sl_reallocarray(rows, c, elem);
            if (!nr) {
                rc = SL_ENOMEM;
                break;
            }
            rows = nr;
            cap = c;
        }
        rc = parse(line, rows + n * elem);
        n += rc == SL_OK;
    }
    fclose(f);
    if (rc != SL_OK) {
        sl_free(rows);
        return rc;
    }
    *out = rows;
    *n_out = n;
    return SL_OK;
}

int sl_eval_workloads_load(const char *path, sl_eval_workload **out, size_t *n_out)
{
    void *rows = NULL;
    size_t n = 0;
    int rc = read_csv(path, sizeof(sl_eval_workload), parse_row, &rows, &n);
    if (rc != SL_OK)
        return rc;
    sl_eval_workload *w = rows;
    /* iteration time of every row: its model and batch's 10-minute row */
    for (size_t i = 0; i < n && rc == SL_OK; i++) {
        w[i].iteration_ns = 0;
        for (size_t k = 0; k < n; k++)
            if (w[k].length_min == 10 && w[k].batch == w[i].batch &&
                strcmp(w[k].model, w[i].model) == 0)
                w[i].iteration_ns = (uint64_t) (w[k].jct_s * 1e9 / (double) w[k].iterations);
        if (!w[i].iteration_ns)
            rc = SL_EINVAL;
    }
    if (rc == SL_OK && n == 0)
        rc = SL_EINVAL;
    if (rc != SL_OK) {
        sl_free(w);
        return rc;
    }
    *out = w;
    *n_out = n;
    return SL_OK;
}

int sl_eval_workloads_compute(sl_eval_workload *w, size_t *n, const sl_sim_profile *p)
{
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        if (!sl_eval_graph_known(w[i].model))
            continue;
        sl_eval_timeline t;
        int rc = sl_eval_timeline_build(w[i].model, w[i].batch, p, &t);
        if (rc != SL_OK)
            return rc;
        sl_eval_workload c = w[i];
        c.iteration_ns = sl_eval_timeline_pipelined_ns(&t); /* submitted whole */
        c.persistent_bytes = t.params * 4;
        c.utilisation = sl_eval_timeline_utilisation_ex(&t, true);
        c.computed = true;
        sl_eval_timeline_fini(&t);
        if (c.peak_bytes <= c.persistent_bytes)
            return SL_EINVAL;
        c.ephemeral_bytes = c.peak_bytes - c.persistent_bytes;
        w[kept++] = c;
    }
    if (kept == 0)
        return SL_EINVAL;
    *n = kept;
    return SL_OK;
}

void sl_eval_rng_seed(sl_eval_rng *r, uint64_t seed)
{
    r->state = seed;
}

uint64_t sl_eval_rng_next(sl_eval_rng *r)
{
    /* splitmix64 (Steele, Lea & Flood, OOPSLA 2014): full period, good
     * enough for traces, and the same on every platform */
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sl_eval_rng_uniform(sl_eval_rng *r)
{
    return (double) (sl_eval_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double sl_eval_rng_exp(sl_eval_rng *r, double mean)
{
    return -mean * log1p(-sl_eval_rng_uniform(r));
}

double sl_eval_rng_lognormal(sl_eval_rng *r, double median, double sigma)
{
    double u1 = sl_eval_rng_uniform(r), u2 = sl_eval_rng_uniform(r);
    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    return median * exp(sigma * z);
}

/* One line of a profile file: model,batch,iteration_ns,persistent,ephemeral. */
typedef struct nn_profile {
    char model[24];
    unsigned long batch;
    unsigned long long iteration_ns, persistent, ephemeral;
} nn_profile;

static int parse_profile(char *line, void *row)
{
    nn_profile *p = row;
    int used = 0;
    if (sscanf(line, "%23[^,],%lu,%llu,%llu,%llu%n", p->model, &p->batch, &p->iteration_ns,
               &p->persistent, &p->ephemeral, &used) != 5)
        return SL_EINVAL;
    line += used;
    while (*line == '\r' || *line == '\n' || *line == ' ')
        line++;
    return *line == '\0' && p->batch && p->iteration_ns && p->persistent && p->ephemeral
               ? SL_OK
               : SL_EINVAL;
}

int sl_eval_workloads_profiles(sl_eval_workload *w, size_t *n, const char *path)
{
    void *rows = NULL;
    size_t n_p = 0;
    int rc = read_csv(path, sizeof(nn_profile), parse_profile, &rows, &n_p);
    if (rc != SL_OK)
        return rc;
    nn_profile *p = rows;
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        const nn_profile *q = NULL;
        for (size_t k = 0; k < n_p && !q; k++)
            if (p[k].batch == w[i].batch && strcmp(p[k].model, w[i].model) == 0)
                q = &p[k];
        if (!q)
            continue;
        sl_eval_workload x = w[i];
        x.iteration_ns = q->iteration_ns;
        x.persistent_bytes = q->persistent;
        x.ephemeral_bytes = q->ephemeral;
        x.computed = true;
        w[kept++] = x;
    }
    sl_free(p);
    if (kept == 0)
        return SL_EINVAL;
    *n = kept;
    return SL_OK;
}

int sl_eval_workloads_utilisation(sl_eval_workload *w, size_t n, const sl_sim_profile *p)
{
    for (size_t i = 0; i < n; i++) {
        if (!sl_eval_graph_known(w[i].model))
            continue;
        sl_eval_timeline t;
        int rc = sl_eval_timeline_build(w[i].model, w[i].batch, p, &t);
        if (rc != SL_OK)
            return rc;
        w[i].utilisation = sl_eval_timeline_utilisation_ex(&t, true);
        sl_eval_timeline_fini(&t);
    }
    return SL_OK;
}

int sl_eval_trace_salus(const sl_eval_workload *w, size_t n_w, size_t n_jobs,
                        double mean_interarrival_s, uint64_t seed, sl_eval_job_spec *out)
{
    if (!w || n_w == 0 || !(mean_interarrival_s >= 0) || (!out && n_jobs))
        return SL_EINVAL;
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    double t = 0;
    for (size_t i = 0; i < n_jobs; i++) {
        if (i)
            t += sl_eval_rng_exp(&r, mean_interarrival_s);
        size_t k = (size_t) (sl_eval_rng_uniform(&r) * (double) n_w);
        const sl_eval_workload *wk = &w[k < n_w ? k : n_w - 1];
        out[i] = (sl_eval_job_spec){
            .id = i + 1,
            .arrival_ns = (uint64_t) (t * 1e9),
            .iterations = wk->iterations,
            .iteration_ns = wk->iteration_ns,
            .persistent_bytes = wk->persistent_bytes,
            .ephemeral_bytes = wk->ephemeral_bytes,
            .declare_length = true,
            .workload = (int) (wk - w),
            .utilisation = wk->utilisation,
        };
    }
    return SL_OK;
}

int sl_eval_trace_lognormal_lengths(const sl_eval_workload *w, size_t n_w, double sigma,
                                    uint64_t seed, sl_eval_job_spec *jobs, size_t n_jobs)
{
    if (!w || n_w == 0 || !(sigma >= 0 && sigma <= 5) || (!jobs && n_jobs))
        return SL_EINVAL;
    double mean = 0;
    for (size_t i = 0; i < n_w; i++)
        mean += (double) w[i].iterations * (double) w[i].iteration_ns / (double) n_w;
    double median = mean / exp(sigma * sigma / 2);
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed ^ 0x6c656e67746873ull); /* "lengths": apart from the trace's */
    for (size_t i = 0; i < n_jobs; i++) {
        double len = sl_eval_rng_lognormal(&r, median, sigma);
        double it = len / (double) jobs[i].iteration_ns;
        jobs[i].iterations = it < 1 ? 1 : (uint64_t) (it + 0.5);
    }
    return SL_OK;
}

int sl_eval_op_list_from(const sl_eval_timeline *t, size_t n_ops, sl_eval_op_list *out)
{
    sl_eval_op_list l = {.ops = sl_calloc(n_ops ? n_ops : 1, sizeof *l.ops),
                         .shapes = sl_calloc(n_ops ? n_ops : 1, sizeof *l.shapes),
                         .n = (uint32_t) n_ops};
    if (!l.ops || !l.shapes) {
        sl_eval_op_list_fini(&l);
        *out = (sl_eval_op_list){0};
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < n_ops; i++) {
        const sl_eval_op_time *o = &t->ops[i];
        l.ops[i] = (sl_eval_op){.launch_ns = o->launch_ns,
                                .work_ns = o->ns - o->launch_ns,
                                .split_max = o->split_max,
                                .occupancy = o->occupancy,
                                .block_ns = o->block_ns};
        l.shapes[i] = (sl_eval_op_shape){
            .compute_ns = o->compute_ns, .memory_ns = o->memory_ns, .waves = o->waves};
        l.ns += o->ns;
    }
    *out = l;
    return SL_OK;
}

void sl_eval_op_list_fini(sl_eval_op_list *l)
{
    sl_free(l->ops);
    sl_free(l->shapes);
    l->ops = NULL;
    l->shapes = NULL;
}
