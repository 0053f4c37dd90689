/* PyTorch models exported to ONNX (torch_export.py), run through a real
 * salusd and compared with PyTorch's own outputs for the same weights and
 * input. A model passes when every output element is within a tolerance
 * of PyTorch's relative to the output's largest magnitude:
 * max |salus - torch| <= tol * max |torch|. PyTorch's output is its f32
 * one; tol is 1e-4 for f32 models, and for float16 and bfloat16 models
 * (which salus computes in the half type, f32 accumulation in each op,
 * one rounding per op output) 5e-3 and 2e-2: a few times the types' unit
 * roundoffs (2^-11 and 2^-8), for the roundings that compound through a
 * network's depth.
 *
 *   onnx_torch_check DIR      (DIR/models.txt lists NAME; NAME.onnx,
 *                              NAME.in, NAME.out as torch_export.py writes)
 * salusd is started by the integration harness (SALUSD names it). Exits 0
 * when every model passes, 1 otherwise. */
#include "../integration/harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static double rel_tol(int dtype)
{
    return dtype == SALUS_F16 ? 5e-3 : dtype == SALUS_BF16 ? 2e-2 : 1e-4;
}

static size_t elem_size(int dtype)
{
    return dtype == SALUS_F16 || dtype == SALUS_BF16 ? 2 : 4;
}

/* want elements of `size` bytes each from path. */
static void *read_elems(const char *path, size_t want, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc((want + 1) * size);
    size_t got = buf ? fread(buf, size, want + 1, f) : 0;
    fclose(f);
    if (got != want) {
        fprintf(stderr, "%s: %zu elements, expected %zu\n", path, got, want);
        free(buf);
        return NULL;
    }
    return buf;
}

static double elem(const void *buf, int dtype, size_t i)
{
    if (dtype == SALUS_F16)
        return salus_f32_from_f16(((const uint16_t *) buf)[i]);
    if (dtype == SALUS_BF16)
        return salus_f32_from_bf16(((const uint16_t *) buf)[i]);
    return ((const float *) buf)[i];
}

static size_t elems(int ndim, const int64_t *dims)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t) dims[d];
    return n;
}

static bool check(salus_client *c, const char *dir, const char *name)
{
    salus_session_opts so = {0};
    salus_session *s;
    if (salus_session_open(c, &so, &s) != SALUS_OK) {
        printf("FAIL %s: session: %s\n", name, salus_last_error(c));
        return false;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
    salus_onnx_model *m;
    int rc = salus_onnx_load(s, path, NULL, &m);
    if (rc != SALUS_OK) {
        printf("FAIL %s: load: %s: %s\n", name, salus_strerror(rc), salus_last_error(c));
        (void) salus_session_close(s);
        return false;
    }
    bool ok = false;
    int dtype, odtype, ndim, ondim;
    int64_t dims[8], odims[8];
    void *x = NULL, *got = NULL;
    float *want = NULL;
    if (salus_onnx_n_inputs(m) != 1 || salus_onnx_n_outputs(m) != 1) {
        printf("FAIL %s: expected one input and one output\n", name);
        goto out;
    }
    (void) salus_onnx_input(m, 0, NULL, &dtype, &ndim, dims);
    (void) salus_onnx_output(m, 0, NULL, &odtype, &ondim, odims);
    size_t n_in = elems(ndim, dims), n_out = elems(ondim, odims);
    snprintf(path, sizeof path, "%s/%s.in", dir, name);
    x = read_elems(path, n_in, elem_size(dtype));
    snprintf(path, sizeof path, "%s/%s.out", dir, name);
    want = read_elems(path, n_out, sizeof *want);
    got = calloc(n_out, elem_size(odtype));
    if (!x || !want || !got) {
        printf("FAIL %s: cannot read the input or PyTorch's output\n", name);
        goto out;
    }
    const void *in[1] = {x};
    void *outs[1] = {got};
    if ((rc = salus_onnx_run(m, in, outs)) != SALUS_OK) {
        printf("FAIL %s: run: %s: %s\n", name, salus_strerror(rc), salus_last_error(c));
        goto out;
    }
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < n_out; i++) {
        double e = fabs(elem(got, odtype, i) - (double) want[i]);
        max_err = isnan(e) ? INFINITY : e > max_err ? e : max_err;
        max_ref = fabs((double) want[i]) > max_ref ? fabs((double) want[i]) : max_ref;
    }
    ok = max_err <= rel_tol(odtype) * max_ref;
    printf("%s %s: %zu outputs, max_abs_err=%.3g max_abs_torch=%.3g relative=%.3g (limit %g)\n",
           ok ? "PASS" : "FAIL", name, n_out, max_err, max_ref,
           max_ref > 0 ? max_err / max_ref : max_err, rel_tol(odtype));
out:
    free(x);
    free(want);
    free(got);
    salus_onnx_free(m);
    (void) salus_session_close(s);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: onnx_torch_check DIR\n");
        return 2;
    }
    char path[1100], name[128];
    snprintf(path, sizeof path, "%s/models.txt", argv[1]);
    FILE *list = fopen(path, "r");
    if (!list) {
        fprintf(stderr, "cannot read %s\n", path);
        return 2;
    }
    static const char *const args[] = {"--memory-limit", "2G", NULL};
    sl_test_server srv;
    sl_test_server_start(&srv, args);
    salus_client *c = sl_test_connect(&srv);
    unsigned passed = 0, failed = 0;
    while (fscanf(list, "%127s", name) == 1)
        check(c, argv[1], name) ? passed++ : failed++;
    fclose(list);
    salus_disconnect(c);
    int status = sl_test_server_stop(&srv);
    printf("%u passed, %u failed\n", passed, failed);
    return failed == 0 && passed > 0 && status == 0 ? 0 : 1;
}
