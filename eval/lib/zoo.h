/* The model zoo: the networks the benchmarks and the simulator build, each
 * defined once as its sequence of layers, and their published parameter
 * counts.
 *
 * sl_zoo_build walks a network's layers and calls a builder's hooks in
 * order; each builder makes of them what it needs: eval/lib/graphs.c a
 * timed op list (forward, backward, update), bench/bench_models.h the
 * tensors of one iteration for the memory planner, eval/profiles the
 * client's nn helpers. A layer is described as the papers give it; what a
 * builder fuses or leaves out (a ReLU folded into its convolution, a
 * padding the nn helpers lack) is that builder's to say.
 *
 * Networks: "mlp-784-256-128-10", "mlp-4096x3-1000" (multi-layer
 * perceptrons), "lenet5" (1x28x28, LeCun et al. 1998), "cifar-cnn" (3x32x32:
 * 2 x conv32, pool, 2 x conv64, pool, fc512, fc10), "vgg11", "vgg16",
 * "vgg19" (Simonyan & Zisserman 2015, Table 1), "resnet50", "resnet101",
 * "resnet152" (He et al. 2016, Table 1, v1 as tf_cnn_benchmarks builds it:
 * a strided block strides its first 1x1 convolution), "resnet50_v1.5"
 * (NVIDIA's: the 3x3 one). ImageNet networks take 3x224x224 inputs and
 * have 1000 classes. No state; thread-safe. */
#ifndef SL_ZOO_H
#define SL_ZOO_H

#include <stdbool.h>
#include <stdint.h>

enum sl_zoo_family { SL_ZOO_NONE, SL_ZOO_MLP, SL_ZOO_CNN, SL_ZOO_VGG, SL_ZOO_RESNET };

/* A k x k convolution to out channels. bn: a batch norm follows it and it
 * has no bias (a bias otherwise); relu: a ReLU follows (after the batch
 * norm). */
typedef struct sl_zoo_conv {
    int64_t out, k, stride, pad;
    bool bn, relu;
} sl_zoo_conv;

/* What sl_zoo_build calls, in the network's order, each with ctx. Every
 * hook is required. A residual block is residual_begin (the block's input
 * is kept), its main path, residual_shortcut (the main path is done; the
 * layers up to residual_end, none for an identity shortcut, build the
 * projection from the kept input) and residual_end (the two summed, then a
 * ReLU). */
typedef struct sl_zoo_builder {
    void *ctx;
    void (*input)(void *ctx, int64_t c, int64_t h, int64_t w); /* per sample; first */
    void (*conv)(void *ctx, const sl_zoo_conv *conv);
    void (*maxpool)(void *ctx, int64_t k, int64_t stride, int64_t pad);
    void (*global_avgpool)(void *ctx);             /* to c x 1 x 1 */
    void (*fc)(void *ctx, int64_t out, bool relu); /* of the flattened input */
    void (*residual_begin)(void *ctx);
    void (*residual_shortcut)(void *ctx);
    void (*residual_end)(void *ctx);
    void (*loss)(void *ctx); /* softmax cross-entropy on the logits; last */
} sl_zoo_builder;

/* Whether the zoo has the network named model. */
bool sl_zoo_known(const char *model);
/* Its family (SL_ZOO_NONE for an unknown name). */
enum sl_zoo_family sl_zoo_family(const char *model);

/* Walks model's layers through b. Errors: SL_EINVAL (an unknown name);
 * then no hook was called. */
int sl_zoo_build(const char *model, const sl_zoo_builder *b);

/* A network's parameter count as its paper or the usual model tables
 * publish it (also for networks the zoo does not build: alexnet,
 * googlenet, inception3, inception4, overfeat); 0 when none is known. */
uint64_t sl_zoo_published_params(const char *model);

#endif
