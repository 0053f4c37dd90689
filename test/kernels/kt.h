/* Helpers shared by the kernels tests (test_kernels and test_cuda). */
#ifndef KT_H
#define KT_H

#include "sl_test.h"

#include "device.h"
#include "ops.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A shape literal: KT_SHAPE(SL_F32, 2, 3, 4) is f32[3,4]. */
#define KT_SHAPE(dt, nd, ...) ((sl_shape){.dtype = (dt), .ndim = (nd), .dims = {__VA_ARGS__}})
#define KT_F32(nd, ...) KT_SHAPE(SL_F32, nd, __VA_ARGS__)

/* Deterministic pseudo-random floats in [lo, hi). */
void kt_rand(float *x, size_t n, uint64_t seed, float lo, float hi);

/* A device, one stream, and a bump allocator over one device arena. */
typedef struct kt_env {
    sl_device *dev;
    sl_stream *stream;
    char *arena;
    size_t arena_bytes, used;
} kt_env;

/* Opens spec with a 64 MiB arena and one stream. Returns the sl_dev_open
 * error (the env stays closed) or SL_OK; other failures fail the test. */
int kt_env_open(kt_env *e, const char *spec);
void kt_env_close(kt_env *e);
/* cmocka group fixtures: open a kt_env on spec into *state (-1, the group
 * fails, when spec does not open), and close and free it. */
int kt_group_open(void **state, const char *spec);
int kt_group_close(void **state);
/* Device memory from the arena (256-aligned); fails the test when full. */
void *kt_dev_alloc(kt_env *e, size_t bytes);

/* What host callbacks saw (kt_record_cb): how many ran, the last status. */
typedef struct kt_cb_record {
    atomic_int calls, status;
} kt_cb_record;
/* A device host callback that counts itself and keeps status in arg, a
 * kt_cb_record. */
void kt_record_cb(void *arg, int status);

/* Builds *call for op: device copies of in[i] (shapes[i], uploaded on the
 * env's stream) and outputs shaped by sl_op_infer, all from the arena
 * (the caller resets e->used). out_shapes (SL_OP_MAX_OUT) receives the
 * output shapes when not NULL. Fails the test when the shapes do not
 * validate. */
void kt_call_prepare(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                     void *const *in, unsigned n_in, sl_op_call *call, sl_shape *out_shapes);
/* kt_call_prepare and launch, followed by a fill of a device canary that a
 * device error must skip; the canary's final value is copied back into
 * *canary (nothing synchronizes: the caller looks for the error). */
void kt_launch_then_canary(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                           void *const *in, unsigned n_in, float *canary);

/* Launches y = x * x on stream s for an m x m matrix x of ones (every y is
 * m): host (m * m floats, the caller's, and left holding ones) is uploaded
 * into x; x and y come from the arena. Returns y (device memory) to be
 * downloaded and checked after the caller's own callbacks. */
float *kt_matmul_ones(kt_env *e, sl_stream *s, int m, float *host);
/* Opens the cuda device into *dev and returns 0; without one prints a skip
 * line and returns 77 (meson's SKIP); on another error prints it and
 * returns 1. For a cuda test's main. */
int kt_cuda_open(sl_device **dev);

/* Runs one op through the device contract: validates the shapes with
 * sl_op_infer, uploads the inputs, launches, downloads the outputs into
 * out[i] (and every mutated input back into in[i]), then checks that a host
 * callback saw SL_OK and that synchronize returns SL_OK. Arena space is
 * reclaimed afterwards. */
void kt_run_op(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
               float *const *in, unsigned n_in, float *const *out);

/* Defines `int fn(const char *spec)`, a group of tests run on the backend
 * spec: it stores spec in spec_var (where the group's setup reads it),
 * names the group "<what> on <spec>" and returns how many tests failed. The
 * tests follow setup and teardown, as in SL_TEST_GROUP. */
#define KT_GROUP_ON(fn, what, spec_var, setup, teardown, ...)                                      \
    int fn(const char *kt_spec_)                                                                   \
    {                                                                                              \
        const struct CMUnitTest kt_tests_[] = {__VA_ARGS__};                                       \
        spec_var = kt_spec_;                                                                       \
        char kt_name_[64];                                                                         \
        snprintf(kt_name_, sizeof kt_name_, "%s on %s", what, kt_spec_);                           \
        return _cmocka_run_group_tests(kt_name_, kt_tests_,                                        \
                                       sizeof kt_tests_ / sizeof kt_tests_[0], setup, teardown);   \
    }

/* Test groups; each returns the number of failed tests (cmocka). */
int kt_run_exec_tests(const char *spec); /* every op on spec ("cpu", "cuda") */
int kt_run_registry_tests(void);
int kt_run_device_tests(void);           /* specs, memory, streams on cpu */
int kt_run_cpu_ops_tests(void);          /* what only the cpu kernels have: oneDNN cache, threads */
int kt_run_axes_tests(const char *spec); /* the ops along axes (ops_axes.h) on spec */
int kt_run_train_tests(const char *spec); /* the transformer training ops on spec */

#endif
