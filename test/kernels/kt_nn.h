/* Shared helpers and double-precision references for the tests of the ops
 * of the neural-network set (element-wise, reductions, softmax family, optimisers,
 * convolution, pooling, batch normalisation). The test groups built on them
 * (test_exec_nn.c, test_exec_cnn.c) run on any backend spec, so the cpu and
 * cuda backends are held to the same references.
 *
 * References follow docs/ops.md literally and are written independently of the
 * registry's own geometry code (kernels/ops_geom.h), so that they check it
 * too. Every gradient reference is the exact adjoint of its forward
 * reference; the test groups also compare device gradients with central
 * finite differences of the forward references. */
#ifndef KT_NN_H
#define KT_NN_H

#include "kt.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- helpers ---- */

/* Zeroed host vectors (at least one element); fail the test when out of
 * memory. Free with sl_free. */
float *kt_fvec(size_t n);
double *kt_dvec(size_t n);
/* y[i] = x[i] widened to double. */
void kt_widen(const float *x, double *y, size_t n);
/* Fails the test unless |got - want| <= tol * (1 + |want|) for every element. */
void kt_expect_close(const char *what, const float *got, const double *want, size_t n, double tol);
/* Fails the test unless got and want are equal element by element. */
void kt_expect_equal_i32(const char *what, const int32_t *got, const int32_t *want, size_t n);

/* A scalar function of x, for central finite differences. */
typedef double (*kt_scalar_fn)(const double *x, const void *ctx);
/* grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h with h = 1e-6; x is restored. */
void kt_fd_grad(kt_scalar_fn f, const void *ctx, double *x, size_t n, double *grad);

/* ---- geometry (ONNX defaults applied: stride/dilation/group 0 = 1) ---- */

/* Output extent floor((in + pb + pe - dil*(k-1) - 1) / stride) + 1. */
int64_t kt_out_extent(int64_t in, int64_t k, int64_t stride, int64_t pb, int64_t pe, int64_t dil);
/* y dims of conv2d over x dims xd with w dims wd and attrs a. */
void kt_conv_out(const int64_t xd[4], const int64_t wd[4], const sl_op_attrs *a, int64_t yd[4]);
/* y dims of maxpool/avgpool over x dims xd with attrs a. */
void kt_pool_out(const int64_t xd[4], const sl_op_attrs *a, int64_t yd[4]);
/* Product of n dims. */
size_t kt_elems(const int64_t *d, unsigned n);

/* ---- references ---- */

void kt_ref_conv2d(const double *x, const double *w, double *y, const int64_t xd[4],
                   const int64_t wd[4], const sl_op_attrs *a);
void kt_ref_conv2d_grad_input(const double *dy, const double *w, double *dx, const int64_t xd[4],
                              const int64_t wd[4], const sl_op_attrs *a);
void kt_ref_conv2d_grad_filter(const double *dy, const double *x, double *dw, const int64_t xd[4],
                               const int64_t wd[4], const sl_op_attrs *a);

/* maxpool (max) or avgpool. Ties are decided on x as given: widened from
 * the device's f32 input, they are exactly the device's ties. */
void kt_ref_pool(bool max, const double *x, double *y, const int64_t xd[4], const sl_op_attrs *a);
void kt_ref_pool_grad(bool max, const double *dy, const double *x, double *dx, const int64_t xd[4],
                      const sl_op_attrs *a);

/* batchnorm (training) over x [n, c, inner]: writes y, the saved mean and
 * inverse std, and updates running mean/var in place. */
void kt_ref_batchnorm(const double *x, const double *scale, const double *bias, double *run_mean,
                      double *run_var, double *y, double *saved_mean, double *saved_inv, size_t n,
                      size_t c, size_t inner, double eps, double momentum);
void kt_ref_batchnorm_infer(const double *x, const double *scale, const double *bias,
                            const double *mean, const double *var, double *y, size_t n, size_t c,
                            size_t inner, double eps);
void kt_ref_batchnorm_grad(const double *dy, const double *x, const double *scale,
                           const double *saved_mean, const double *saved_inv, double *dx,
                           double *dscale, double *dbias, size_t n, size_t c, size_t inner);

/* matmul_acc: acc[m,n] = beta * acc + alpha * op(a) op(b), op as matmul's
 * transposes (a is [m,k] or [k,m], b [k,n] or [n,k]); beta = 0 does not read
 * acc. */
void kt_ref_matmul_acc(const double *a, const double *b, double *acc, size_t m, size_t n, size_t k,
                       bool ta, bool tb, double alpha, double beta);

/* Row-wise over [n, c]. */
void kt_ref_softmax(const double *x, double *p, size_t n, size_t c);
/* Mean cross-entropy of softmax(x) against labels (all in [0, c)). */
double kt_ref_xent(const double *x, const int32_t *labels, size_t n, size_t c);
void kt_ref_xent_grad(const double *probs, const int32_t *labels, double *dx, size_t n, size_t c);
/* First index of each row's maximum (NaN-free input). */
void kt_ref_argmax(const float *x, int32_t *out, size_t n, size_t c);

/* ---- test groups: every neural-network op on spec; failed test count ---- */

/* Element-wise, reductions, softmax family, optimisers. */
int kt_run_nn_tests(const char *spec);
/* conv2d (+ gradients), channel bias, pooling (+ gradients), batchnorm. */
int kt_run_cnn_tests(const char *spec);

/* cuda only (test_cuda_paths.c): shapes that reach every code path of the
 * cuda kernels (warp or block rows, sliced reductions, device-side steps). */
int kt_run_cuda_paths_tests(void);
/* cuda only (test_cuda_half.c): bf16 and f16 against f32, cast bit for bit
 * against half.h, TF32 against exact f32. */
int kt_run_cuda_half_tests(void);

#endif
