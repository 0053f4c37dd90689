/* Private to the cpu backend: sums of float data accumulated in double.
 * Eight independent lanes let the compiler vectorise the loop without
 * reassociating anything (fewer elements than lanes are added in order,
 * the same sum without adding up empty lanes: a batch norm over 1x1
 * planes calls these once per element), and double accumulators keep a sum over millions
 * of elements accurate to float precision. */
#ifndef SL_CPU_SUM_H
#define SL_CPU_SUM_H

#include <stdint.h>

#define SL_CPU_SUM_LANES 8

/* Sum of x[0..n). */
static inline double sl_cpu_sum(const float *x, uint64_t n)
{
    double acc[SL_CPU_SUM_LANES] = {0}, s = 0;
    uint64_t i = 0;
    if (n < SL_CPU_SUM_LANES) { /* the same sum without the empty lanes */
        for (; i < n; i++)
            s += x[i];
        return s;
    }
    for (; i + SL_CPU_SUM_LANES <= n; i += SL_CPU_SUM_LANES)
        for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++)
            acc[j] += x[i + j];
    for (; i < n; i++)
        s += x[i];
    for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++)
        s += acc[j];
    return s;
}

/* Sum of (x - m)^2 over x[0..n), each deviation taken in double. */
static inline double sl_cpu_sum_sqdev(const float *x, uint64_t n, double m)
{
    double acc[SL_CPU_SUM_LANES] = {0}, s = 0;
    uint64_t i = 0;
    if (n < SL_CPU_SUM_LANES) {
        for (; i < n; i++) {
            double d = x[i] - m;
            s += d * d;
        }
        return s;
    }
    for (; i + SL_CPU_SUM_LANES <= n; i += SL_CPU_SUM_LANES)
        for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++) {
            double d = x[i + j] - m;
            acc[j] += d * d;
        }
    for (; i < n; i++) {
        double d = x[i] - m;
        s += d * d;
    }
    for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++)
        s += acc[j];
    return s;
}

/* Adds sum(dy) to *sdy and sum(dy * (x - m)) to *sdyx over [0..n). */
static inline void sl_cpu_sum_dot(const float *dy, const float *x, float m, uint64_t n, double *sdy,
                                  double *sdyx)
{
    double a[SL_CPU_SUM_LANES] = {0}, b[SL_CPU_SUM_LANES] = {0}, s = 0, d = 0;
    uint64_t i = 0;
    if (n < SL_CPU_SUM_LANES) {
        for (; i < n; i++) {
            s += dy[i];
            d += (double) dy[i] * (x[i] - m);
        }
        *sdy += s;
        *sdyx += d;
        return;
    }
    for (; i + SL_CPU_SUM_LANES <= n; i += SL_CPU_SUM_LANES)
        for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++) {
            a[j] += dy[i + j];
            b[j] += (double) dy[i + j] * (x[i + j] - m);
        }
    for (; i < n; i++) {
        s += dy[i];
        d += (double) dy[i] * (x[i] - m);
    }
    for (unsigned j = 0; j < SL_CPU_SUM_LANES; j++) {
        s += a[j];
        d += b[j];
    }
    *sdy += s;
    *sdyx += d;
}

/* Columns [j0, j1) of a [rows, cols] matrix summed down its rows (a bias's
 * gradient), y[j] = the sum / div: a block of columns at a time, the rows
 * added in order into double accumulators and read a row at a time. */
static inline void sl_cpu_col_sums(const float *x, uint64_t rows, uint64_t cols, uint64_t j0,
                                   uint64_t j1, double div, float *y)
{
    enum { BLOCK = 256 };
    for (uint64_t b = j0; b < j1; b += BLOCK) {
        uint64_t w = j1 - b < BLOCK ? j1 - b : BLOCK;
        double acc[BLOCK] = {0};
        for (uint64_t r = 0; r < rows; r++) {
            const float *xr = x + r * cols + b;
            for (uint64_t j = 0; j < w; j++)
                acc[j] += xr[j];
        }
        for (uint64_t j = 0; j < w; j++)
            y[b + j] = (float) (acc[j] / div);
    }
}

#endif
