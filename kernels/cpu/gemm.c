/* Every GEMM of the cpu kernels: one single-threaded call on the calling
 * thread (cpu.h), through oneDNN's sgemm by default or OpenBLAS's with
 * SALUS_CPU_GEMM=openblas.
 *
 * Why oneDNN: it generates its kernels for the instruction set it finds
 * (AVX-512 where there is one), while OpenBLAS picks one from its table of
 * known cores, which the environment may pin to an older one
 * (OPENBLAS_CORETYPE). On the 2-core Zen 5 development VM, one thread, the
 * MLP's shapes (128x784 by 784x256 and its gradients): oneDNN 230-250
 * GFLOP/s; OpenBLAS 200-230 with the kernel it picks itself (SkylakeX) and
 * 110-120 with OPENBLAS_CORETYPE=Haswell, which that VM sets. The choice
 * is read once per process. */
#include "cpu.h"

#include "sl_log.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static sl_cpu_gemm_lib chosen = SL_CPU_GEMM_ONEDNN;
static atomic_ulong fallbacks; /* oneDNN calls OpenBLAS had to take over */
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    const char *v = getenv("SALUS_CPU_GEMM");
    if (!v || !*v || !strcmp(v, "onednn"))
        return;
    if (!strcmp(v, "openblas"))
        chosen = SL_CPU_GEMM_OPENBLAS;
    else
        sl_log_warn("cpu.gemm", "SALUS_CPU_GEMM=%s is neither onednn nor openblas: using onednn",
                    v);
}

sl_cpu_gemm_lib sl_cpu_gemm_chosen(void)
{
    pthread_once(&chosen_once, choose);
    return chosen;
}

const char *sl_cpu_gemm_name(sl_cpu_gemm_lib lib)
{
    return lib == SL_CPU_GEMM_OPENBLAS ? "OpenBLAS" : "oneDNN";
}

static void openblas(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sl_cpu_sgemm_with(sl_cpu_gemm_lib lib, bool ta, bool tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc)
{
    if (k == 0) { /* C = beta C, which oneDNN skips: it returns C as it was */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t) i * (size_t) ldc + j] =
                    beta == 0.0f ? 0.0f : beta * c[(size_t) i * (size_t) ldc + j];
        return;
    }
    if (lib == SL_CPU_GEMM_OPENBLAS) {
        openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    /* oneDNN's sgemm sizes its own OpenMP team from the calling thread's
     * setting, which a worker may have raised for a convolution (dnnl.c):
     * one thread here, as the team's bands and the lanes expect */
    int threads = omp_get_max_threads();
    if (threads != 1)
        omp_set_num_threads(1);
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (threads != 1)
        omp_set_num_threads(threads);
    /* it refuses only arguments sl_cpu_op_check has ruled out; should it
     * refuse, OpenBLAS computes the same product, and the log says so once */
    if (st != dnnl_success) {
        if (atomic_fetch_add(&fallbacks, 1) == 0)
            sl_log_warn("cpu.gemm.fallback",
                        "oneDNN refused a %dx%dx%d GEMM (status %d): OpenBLAS computes it", m, n, k,
                        (int) st);
        openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
}

unsigned long sl_cpu_gemm_fallbacks(void)
{
    return atomic_load(&fallbacks);
}

void sl_cpu_sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc)
{
    sl_cpu_sgemm_with(sl_cpu_gemm_chosen(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
