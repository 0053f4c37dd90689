/* The optimizer updates that are worth vectorising, built for AVX-512,
 * AVX2 and baseline x86-64 as vmath.c is, but without fused multiply-adds
 * (-ffp-contract=off, this file's own library): each product and sum
 * rounds on its own, as PyTorch's separate ops round them. An Adam update
 * fused into FMAs moves a weight by an ulp, and that was enough to carry
 * MobileNetV3's AdamW run past PyTorch's by 6 % of its movement in 20
 * steps, where the unfused one stays within float32's own spread. */
#include "cpu.h"
#include "elementwise.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OPTIM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OPTIM_CLONES
#endif

/* adam_update over n elements: elementwise.h's sl_ew_adam (the square root
 * vectorises under -fno-math-errno; the arrays may be any tensors, so the
 * compiler checks them for overlap). */
OPTIM_CLONES void sl_cpu_vadam(float *p, const float *g, float *m, float *v, uint64_t n,
                               const sl_cpu_adam_k *k)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = sl_ew_adam(p[i], g[i], &m[i], &v[i], k->lr, k->beta1, k->beta2, k->eps, k->bc1,
                          k->bc2, k->decay);
}
