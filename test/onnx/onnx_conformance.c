/* ONNX conformance: every case of the ONNX project's backend test data
 * (Debian libonnx-testdata: node/, pytorch-converted/, pytorch-operator/,
 * simple/) through a real salusd. For each case: load model.onnx with
 * salus_onnx_load, feed each test_data_set_N/input_*.pb, run, and compare
 * with output_*.pb at the ONNX backend runner's tolerances (numpy's
 * assert_allclose with rtol 1e-3, atol 1e-7: |got - want| <= atol + rtol *
 * |want|, integers exactly). A case passes, fails, or is unsupported: the
 * importer refused it (the reason is printed) or its test data uses what
 * salus does not have (a data type, an empty tensor).
 *
 * Prints one line per case, a table per op (the distinct op types of the
 * case's graph) and `ONNX conformance passed=N failed=N unsupported=N`;
 * exits 1 when any case failed, 77 when the test data is not installed.
 *
 *   onnx_conformance [--data DIR] [--filter SUBSTRING]
 *                    [--markdown FILE | --check-markdown FILE]
 *
 * --markdown writes the per-op table as a Markdown page
 * (docs/onnx-conformance.md, `ninja update-onnx-md`); --check-markdown
 * also exits 1 when FILE differs from the page this run gives, so the
 * committed page cannot go stale (the conformance test).
 *
 * salusd is started by the integration harness (SALUSD names it). */
#include "../integration/harness.h"
#include "onnx.pb-c.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RTOL 1e-3
#define ATOL 1e-7
#define MAX_IO 16
#define MAX_OPS 512

enum result { PASS, FAIL, UNSUPPORTED };

struct op_row {
    char name[96];
    unsigned n[3];
    char reason[200]; /* the first unsupported case's */
};

static struct op_row rows[MAX_OPS];
static unsigned n_rows;

static struct op_row *row_of(const char *name)
{
    for (unsigned i = 0; i < n_rows; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    if (n_rows == MAX_OPS)
        return &rows[MAX_OPS - 1];
    snprintf(rows[n_rows].name, sizeof rows[n_rows].name, "%s", name);
    return &rows[n_rows++];
}

static void *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || st.st_size > (1l << 30)) {
        fclose(f);
        return NULL;
    }
    void *buf = malloc((size_t) st.st_size + 1);
    if (buf && fread(buf, 1, (size_t) st.st_size, f) != (size_t) st.st_size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t) st.st_size;
    return buf;
}

/* The distinct op types of a model's graph, joined with '+', in order of
 * first appearance. */
static void op_key(const char *model_path, char *key, size_t len)
{
    size_t n;
    void *buf = read_all(model_path, &n);
    snprintf(key, len, "(unreadable)");
    if (!buf)
        return;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, buf);
    free(buf);
    if (!m || !m->graph) {
        if (m)
            onnx__model_proto__free_unpacked(m, NULL);
        return;
    }
    key[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < m->graph->n_node; i++) {
        const char *op = m->graph->node[i]->op_type ? m->graph->node[i]->op_type : "?";
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = m->graph->node[j]->op_type && !strcmp(m->graph->node[j]->op_type, op);
        if (!seen && used + strlen(op) + 2 < len)
            used += (size_t) snprintf(key + used, len - used, "%s%s", used ? "+" : "", op);
    }
    onnx__model_proto__free_unpacked(m, NULL);
}

/* A TensorProto's values as double (floats) or int64 (integers). */
struct tensor {
    int dtype; /* ONNX data type */
    int ndim;
    int64_t dims[8];
    size_t n;
    double *d;
};

static int load_tensor(const char *path, struct tensor *t, char *why, size_t wlen)
{
    size_t len;
    void *buf = read_all(path, &len);
    if (!buf)
        return snprintf(why, wlen, "cannot read %s", path), -1;
    Onnx__TensorProto *p = onnx__tensor_proto__unpack(NULL, len, buf);
    free(buf);
    if (!p)
        return snprintf(why, wlen, "%s: not a TensorProto", path), -1;
    int rc = 0;
    t->dtype = p->data_type;
    t->ndim = (int) p->n_dims;
    t->n = 1;
    if (p->n_dims > 8)
        rc = -1;
    for (size_t i = 0; rc == 0 && i < p->n_dims; i++) {
        t->dims[i] = p->dims[i];
        if (p->dims[i] < 0 || p->dims[i] > (1 << 28))
            rc = -1;
        else
            t->n *= (size_t) p->dims[i];
    }
    if (rc || t->n > (1u << 28)) {
        onnx__tensor_proto__free_unpacked(p, NULL);
        return snprintf(why, wlen, "%s: bad dims", path), -1;
    }
    bool f16 = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
         bf16 = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16,
         boolean = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL; /* fed as i32 0/1 */
    size_t esize = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT   ? 4
                   : p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ? 8
                   : p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 ? 4
                   : f16 || bf16                                          ? 2
                   : boolean                                              ? 1
                                                                          : 0;
    if (!esize) {
        onnx__tensor_proto__free_unpacked(p, NULL);
        return snprintf(why, wlen,
                        "test data of ONNX type %d (salus has float, float16, bfloat16, int32, "
                        "int64, bool)",
                        t->dtype),
               1;
    }
    t->d = calloc(t->n ? t->n : 1, sizeof *t->d);
    size_t have = p->has_raw_data                                        ? p->raw_data.len / esize
                  : esize == 8                                           ? p->n_int64_data
                  : p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? p->n_float_data
                                                                         : p->n_int32_data;
    if (!t->d || have != t->n || (p->has_raw_data && p->raw_data.len != t->n * esize)) {
        onnx__tensor_proto__free_unpacked(p, NULL);
        free(t->d);
        return snprintf(why, wlen, "%s: data does not match its dims", path), -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        if (p->has_raw_data) {
            const uint8_t *q = p->raw_data.data + i * esize;
            if (p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
                float v;
                memcpy(&v, q, 4);
                t->d[i] = v;
            } else if (esize == 1) {
                t->d[i] = *q != 0;
            } else if (esize == 2) {
                uint16_t h;
                memcpy(&h, q, 2);
                t->d[i] = f16 ? salus_f32_from_f16(h) : salus_f32_from_bf16(h);
            } else if (esize == 8) {
                int64_t v;
                memcpy(&v, q, 8);
                t->d[i] = (double) v;
            } else {
                int32_t v;
                memcpy(&v, q, 4);
                t->d[i] = v;
            }
        } else
            t->d[i] = p->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? p->float_data[i]
                      : esize == 8 ? (double) p->int64_data[i]
                      : f16        ? salus_f32_from_f16((uint16_t) p->int32_data[i])
                      : bf16       ? salus_f32_from_bf16((uint16_t) p->int32_data[i])
                                   : p->int32_data[i];
    }
    onnx__tensor_proto__free_unpacked(p, NULL);
    return 0;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Runs every test_data_set of one loaded model. */
static enum result run_sets(salus_onnx_model *m, salus_client *c, const char *dir, char *why,
                            size_t wlen)
{
    unsigned n_in = salus_onnx_n_inputs(m), n_out = salus_onnx_n_outputs(m);
    if (n_in > MAX_IO || n_out > MAX_IO)
        return snprintf(why, wlen, "more than %d inputs or outputs", MAX_IO), UNSUPPORTED;
    enum result res = PASS;
    unsigned sets = 0;
    for (unsigned set = 0; set < 64 && res == PASS; set++) {
        char sdir[1200];
        snprintf(sdir, sizeof sdir, "%s/test_data_set_%u", dir, set);
        if (!is_dir(sdir))
            break;
        sets++;
        void *in[MAX_IO] = {0}, *out[MAX_IO] = {0};
        struct tensor want[MAX_IO] = {0};
        for (unsigned i = 0; i < n_in && res == PASS; i++) {
            char path[1300];
            snprintf(path, sizeof path, "%s/input_%u.pb", sdir, i);
            struct tensor t = {0};
            int rc = load_tensor(path, &t, why, wlen);
            if (rc)
                res = rc > 0 ? UNSUPPORTED : FAIL;
            int dtype, ndim;
            int64_t dims[8];
            (void) salus_onnx_input(m, i, NULL, &dtype, &ndim, dims);
            if (res == PASS && (ndim != t.ndim || memcmp(dims, t.dims, (size_t) ndim * 8))) {
                snprintf(why, wlen, "input %u: test data shape differs from the model's", i);
                res = FAIL;
            }
            if (res == PASS) {
                in[i] = malloc(t.n * 4 + 4);
                for (size_t k = 0; in[i] && k < t.n; k++) {
                    if (dtype == SALUS_F32) {
                        float v = (float) t.d[k];
                        memcpy((char *) in[i] + 4 * k, &v, 4);
                    } else if (dtype == SALUS_F16 || dtype == SALUS_BF16) {
                        uint16_t h = dtype == SALUS_F16 ? salus_f16_from_f32((float) t.d[k])
                                                        : salus_bf16_from_f32((float) t.d[k]);
                        memcpy((char *) in[i] + 2 * k, &h, 2);
                    } else {
                        if (t.d[k] < INT32_MIN || t.d[k] > INT32_MAX) {
                            snprintf(why, wlen, "input %u: an integer beyond i32", i);
                            res = UNSUPPORTED;
                            break;
                        }
                        int32_t v = (int32_t) t.d[k];
                        memcpy((char *) in[i] + 4 * k, &v, 4);
                    }
                }
            }
            free(t.d);
        }
        for (unsigned j = 0; j < n_out && res == PASS; j++) {
            char path[1300];
            snprintf(path, sizeof path, "%s/output_%u.pb", sdir, j);
            int rc = load_tensor(path, &want[j], why, wlen);
            if (rc)
                res = rc > 0 ? UNSUPPORTED : FAIL;
            int dtype, ndim;
            int64_t dims[8];
            (void) salus_onnx_output(m, j, NULL, &dtype, &ndim, dims);
            if (res == PASS &&
                (ndim != want[j].ndim || memcmp(dims, want[j].dims, (size_t) ndim * 8))) {
                snprintf(why, wlen, "output %u: shape differs from the expected one", j);
                res = FAIL;
            }
            if (res == PASS)
                out[j] = malloc(want[j].n * 4 + 4);
        }
        if (res == PASS) {
            int rc = salus_onnx_run(m, (const void *const *) in, out);
            if (rc != SALUS_OK) {
                snprintf(why, wlen, "run: %s: %s", salus_strerror(rc), salus_last_error(c));
                res = FAIL;
            }
        }
        for (unsigned j = 0; j < n_out && res == PASS; j++) {
            int dtype;
            (void) salus_onnx_output(m, j, NULL, &dtype, NULL, NULL);
            bool ints = want[j].dtype != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
                        want[j].dtype != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 &&
                        want[j].dtype != ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
            for (size_t k = 0; k < want[j].n; k++) {
                double got;
                if (dtype == SALUS_F32) {
                    float v;
                    memcpy(&v, (char *) out[j] + 4 * k, 4);
                    got = v;
                } else if (dtype == SALUS_F16 || dtype == SALUS_BF16) {
                    uint16_t h;
                    memcpy(&h, (char *) out[j] + 2 * k, 2);
                    got = dtype == SALUS_F16 ? salus_f32_from_f16(h) : salus_f32_from_bf16(h);
                } else {
                    int32_t v;
                    memcpy(&v, (char *) out[j] + 4 * k, 4);
                    got = v;
                }
                double w = want[j].d[k];
                bool ok = ints ? got == w
                               : (isnan(w) && isnan(got)) || (isinf(w) && got == w) ||
                                     fabs(got - w) <= ATOL + RTOL * fabs(w);
                if (!ok) {
                    snprintf(why, wlen, "set %u output %u element %zu: got %.9g, want %.9g", set, j,
                             k, got, w);
                    res = FAIL;
                    break;
                }
            }
        }
        for (unsigned i = 0; i < MAX_IO; i++) {
            free(in[i]);
            free(out[i]);
            free(want[i].d);
        }
    }
    if (res == PASS && sets == 0)
        return snprintf(why, wlen, "no test data sets"), UNSUPPORTED;
    return res;
}

static enum result run_case(salus_client *c, const char *dir, char *why, size_t wlen)
{
    salus_session_opts so = {0};
    salus_session *s;
    int rc = salus_session_open(c, &so, &s);
    if (rc != SALUS_OK)
        return snprintf(why, wlen, "session: %s", salus_last_error(c)), FAIL;
    char path[1200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    salus_onnx_model *m;
    enum result res;
    rc = salus_onnx_load(s, path, NULL, &m);
    if (rc == SALUS_EUNSUPPORTED) {
        snprintf(why, wlen, "%s", salus_last_error(c));
        res = UNSUPPORTED;
    } else if (rc != SALUS_OK) {
        snprintf(why, wlen, "load: %s: %s", salus_strerror(rc), salus_last_error(c));
        res = FAIL;
    } else {
        res = run_sets(m, c, dir, why, wlen);
        salus_onnx_free(m);
    }
    (void) salus_session_close(s);
    return res;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The page docs/onnx-conformance.md: the totals and one row per op key. */
static void write_markdown(FILE *f, const unsigned *tot)
{
    fprintf(f, "# ONNX conformance\n\n"
               "<!-- Generated by test/onnx/onnx_conformance.c from a run over the test data: "
               "do not edit. Regenerate with `ninja -C build update-onnx-md`. -->\n\n"
               "The ONNX project's backend test data (Debian's libonnx-testdata: node, "
               "pytorch-converted, pytorch-operator, simple) through salusd on the cpu "
               "backend, compared at rtol 1e-3, atol 1e-7. A row is the set of distinct op "
               "types of a case's graph. What the importer reads: [onnx.md](onnx.md).\n\n");
    fprintf(f, "**passed=%u failed=%u unsupported=%u**\n\n", tot[PASS], tot[FAIL],
            tot[UNSUPPORTED]);
    fprintf(f, "| ops | passed | failed | unsupported | why unsupported (first case) |\n");
    fprintf(f, "|---|---|---|---|---|\n");
    for (unsigned i = 0; i < n_rows; i++) {
        char reason[220];
        size_t k = 0;
        for (const char *p = rows[i].reason; *p && k + 2 < sizeof reason; p++) {
            if (*p == '|')
                reason[k++] = '\\';
            reason[k++] = *p;
        }
        reason[k] = '\0';
        fprintf(f, "| %s | %u | %u | %u | %s |\n", rows[i].name, rows[i].n[PASS], rows[i].n[FAIL],
                rows[i].n[UNSUPPORTED], reason);
    }
}

/* Writes the page to path, or with check compares it with path's contents;
 * returns 0 when written or equal. */
static int markdown_page(const char *path, bool check, const unsigned *tot)
{
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    if (!mem)
        return 1;
    write_markdown(mem, tot);
    if (fclose(mem) != 0) {
        free(want);
        return 1;
    }
    int rc = 0;
    if (!check) {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(want, 1, want_len, f) != want_len)
            rc = 1;
        if (f && fclose(f) != 0)
            rc = 1;
        if (rc)
            fprintf(stderr, "cannot write %s\n", path);
        free(want);
        return rc;
    }
    FILE *f = fopen(path, "rb");
    char *have = malloc(want_len + 1);
    size_t have_len = f && have ? fread(have, 1, want_len + 1, f) : 0;
    if (!f || !have) {
        printf("cannot read %s\n", path);
        rc = 1;
    } else if (have_len != want_len || memcmp(have, want, want_len) != 0) {
        size_t line = 1;
        for (size_t i = 0; i < have_len && i < want_len && have[i] == want[i]; i++)
            line += have[i] == '\n';
        printf("%s differs from what this run gives, from line %zu on.\nRegenerate it and "
               "commit the result:  ninja -C <builddir> update-onnx-md\n",
               path, line);
        rc = 1;
    }
    if (f)
        fclose(f);
    free(have);
    free(want);
    return rc;
}

static int by_row(const void *a, const void *b)
{
    return strcmp(((const struct op_row *) a)->name, ((const struct op_row *) b)->name);
}

int main(int argc, char **argv)
{
    const char *data = "/usr/share/libonnx-testdata/data", *markdown = NULL, *filter = NULL;
    bool check = false;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && !strcmp(argv[i], "--data")) {
            data = argv[i + 1];
        } else if (i + 1 < argc && !strcmp(argv[i], "--markdown")) {
            markdown = argv[i + 1];
        } else if (i + 1 < argc && !strcmp(argv[i], "--check-markdown")) {
            markdown = argv[i + 1];
            check = true;
        } else if (i + 1 < argc && !strcmp(argv[i], "--filter")) {
            filter = argv[i + 1];
        } else {
            fprintf(stderr,
                    "usage: %s [--data DIR] [--filter SUBSTRING] [--markdown FILE | "
                    "--check-markdown FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (filter && check) {
        fprintf(stderr, "--check-markdown compares a run over every case: drop --filter\n");
        return 2;
    }
    if (!is_dir(data)) {
        printf("SKIP: %s not found (apt-get install libonnx-testdata)\n", data);
        return 77;
    }
    sl_test_server srv;
    sl_test_server_start(&srv, NULL);
    salus_client *c = sl_test_connect(&srv);
    static const char *const suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
    unsigned tot[3] = {0};
    for (size_t si = 0; si < sizeof suites / sizeof suites[0]; si++) {
        char sdir[512];
        snprintf(sdir, sizeof sdir, "%s/%s", data, suites[si]);
        DIR *d = opendir(sdir);
        if (!d)
            continue;
        char **names = NULL;
        size_t n = 0, cap = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                names = realloc(names, cap * sizeof *names);
            }
            names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t i = 0; i < n; i++) {
            char dir[1024], model[1100], key[96], why[400] = "";
            snprintf(dir, sizeof dir, "%s/%s", sdir, names[i]);
            snprintf(model, sizeof model, "%s/model.onnx", dir);
            struct stat st;
            if ((filter && !strstr(dir, filter)) || stat(model, &st) != 0) {
                free(names[i]);
                continue;
            }
            op_key(model, key, sizeof key);
            enum result r = run_case(c, dir, why, sizeof why);
            static const char *const label[] = {"PASS", "FAIL", "UNSUPPORTED"};
            printf("%-11s %s/%s [%s]%s%s\n", label[r], suites[si], names[i], key,
                   r == PASS ? "" : ": ", r == PASS ? "" : why);
            struct op_row *row = row_of(key);
            row->n[r]++;
            if (r == UNSUPPORTED && !row->reason[0])
                snprintf(row->reason, sizeof row->reason, "%s", why);
            tot[r]++;
            free(names[i]);
        }
        free(names);
    }
    salus_disconnect(c);
    int status = sl_test_server_stop(&srv);
    qsort(rows, n_rows, sizeof rows[0], by_row);
    printf("\n%-48s %6s %6s %11s\n", "ops", "passed", "failed", "unsupported");
    for (unsigned i = 0; i < n_rows; i++)
        printf("%-48s %6u %6u %11u\n", rows[i].name, rows[i].n[PASS], rows[i].n[FAIL],
               rows[i].n[UNSUPPORTED]);
    int page = markdown ? markdown_page(markdown, check, tot) : 0;
    if (status != 0)
        printf("salusd did not exit cleanly (status %d)\n", status);
    printf("ONNX conformance passed=%u failed=%u unsupported=%u\n", tot[PASS], tot[FAIL],
           tot[UNSUPPORTED]);
    return tot[FAIL] == 0 && status == 0 && page == 0 ? 0 : 1;
}
