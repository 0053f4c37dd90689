/* The networks' layer tables (zoo.h). */
#include "zoo.h"

#include "sl_error.h"

#include <stddef.h>
#include <string.h>

/* One network: its family, input, and the family's per-network numbers
 * (VGG: 3x3 convolutions per stage; ResNet: bottleneck blocks per stage;
 * MLP: the hidden and output widths, 0-ended). */
typedef struct net {
    const char *name;
    enum sl_zoo_family family;
    int64_t c, h, w;
    int64_t n[5];
    bool v15; /* ResNet v1.5: the 3x3 convolution strides */
} net;

static const net nets[] = {
    {"mlp-784-256-128-10", SL_ZOO_MLP, 784, 1, 1, {256, 128, 10}, false},
    {"mlp-4096x3-1000", SL_ZOO_MLP, 4096, 1, 1, {4096, 4096, 1000}, false},
    {"lenet5", SL_ZOO_CNN, 1, 28, 28, {0}, false},
    {"cifar-cnn", SL_ZOO_CNN, 3, 32, 32, {0}, false},
    {"vgg11", SL_ZOO_VGG, 3, 224, 224, {1, 1, 2, 2, 2}, false},
    {"vgg16", SL_ZOO_VGG, 3, 224, 224, {2, 2, 3, 3, 3}, false},
    {"vgg19", SL_ZOO_VGG, 3, 224, 224, {2, 2, 4, 4, 4}, false},
    {"resnet50", SL_ZOO_RESNET, 3, 224, 224, {3, 4, 6, 3}, false},
    {"resnet101", SL_ZOO_RESNET, 3, 224, 224, {3, 4, 23, 3}, false},
    {"resnet152", SL_ZOO_RESNET, 3, 224, 224, {3, 8, 36, 3}, false},
    {"resnet50_v1.5", SL_ZOO_RESNET, 3, 224, 224, {3, 4, 6, 3}, true},
};

static const net *find(const char *model)
{
    for (size_t i = 0; model && i < sizeof nets / sizeof nets[0]; i++)
        if (strcmp(nets[i].name, model) == 0)
            return &nets[i];
    return NULL;
}

bool sl_zoo_known(const char *model)
{
    return find(model) != NULL;
}

enum sl_zoo_family sl_zoo_family(const char *model)
{
    const net *n = find(model);
    return n ? n->family : SL_ZOO_NONE;
}

static void conv(const sl_zoo_builder *b, int64_t out, int64_t k, int64_t stride, int64_t pad,
                 bool bn, bool relu)
{
    sl_zoo_conv c = {.out = out, .k = k, .stride = stride, .pad = pad, .bn = bn, .relu = relu};
    b->conv(b->ctx, &c);
}

/* Simonyan & Zisserman 2015, Table 1: 3x3 convolutions per stage, each
 * stage ending in a 2x2 max pool, then three fully connected layers. */
static void vgg(const sl_zoo_builder *b, const net *n)
{
    static const int64_t width[5] = {64, 128, 256, 512, 512};
    for (unsigned s = 0; s < 5; s++) {
        for (int64_t c = 0; c < n->n[s]; c++)
            conv(b, width[s], 3, 1, 1, false, true);
        b->maxpool(b->ctx, 2, 2, 0);
    }
    b->fc(b->ctx, 4096, true);
    b->fc(b->ctx, 4096, true);
    b->fc(b->ctx, 1000, false);
}

/* He et al. 2016, Table 1: a 7x7 stem and a padded 3x3 max pool, then
 * bottleneck blocks per stage (1x1, 3x3, 1x1 to 4x the width, every
 * convolution with a batch norm; the first block of a stage projects its
 * shortcut with a strided 1x1 convolution), global average pooling and
 * the classifier. */
static void resnet(const sl_zoo_builder *b, const net *n)
{
    static const int64_t mid[4] = {64, 128, 256, 512}, out[4] = {256, 512, 1024, 2048},
                         stride[4] = {1, 2, 2, 2};
    conv(b, 64, 7, 2, 3, true, true);
    b->maxpool(b->ctx, 3, 2, 1);
    for (unsigned s = 0; s < 4; s++)
        for (int64_t k = 0; k < n->n[s]; k++) {
            int64_t st = k == 0 ? stride[s] : 1;
            b->residual_begin(b->ctx);
            conv(b, mid[s], 1, n->v15 ? 1 : st, 0, true, true);
            conv(b, mid[s], 3, n->v15 ? st : 1, 1, true, true);
            conv(b, out[s], 1, 1, 0, true, false);
            b->residual_shortcut(b->ctx);
            if (k == 0)
                conv(b, out[s], 1, st, 0, true, false);
            b->residual_end(b->ctx);
        }
    b->global_avgpool(b->ctx);
    b->fc(b->ctx, 1000, false);
}

/* LeNet-5 (LeCun et al. 1998): a padded 5x5 convolution to 6, a 2x2 pool,
 * a valid 5x5 convolution to 16, a pool, then 120, 84 and 10 units. The
 * CIFAR CNN: two 3x3 convolutions to 32, a pool, two to 64, a pool, 512
 * units and 10 classes. */
static void small_cnn(const sl_zoo_builder *b, const net *n)
{
    if (n->c == 1) {
        conv(b, 6, 5, 1, 2, false, true);
        b->maxpool(b->ctx, 2, 2, 0);
        conv(b, 16, 5, 1, 0, false, true);
        b->maxpool(b->ctx, 2, 2, 0);
        b->fc(b->ctx, 120, true);
        b->fc(b->ctx, 84, true);
        b->fc(b->ctx, 10, false);
        return;
    }
    for (int64_t width = 32; width <= 64; width *= 2) {
        conv(b, width, 3, 1, 1, false, true);
        conv(b, width, 3, 1, 1, false, true);
        b->maxpool(b->ctx, 2, 2, 0);
    }
    b->fc(b->ctx, 512, true);
    b->fc(b->ctx, 10, false);
}

int sl_zoo_build(const char *model, const sl_zoo_builder *b)
{
    const net *n = find(model);
    if (!n)
        return SL_EINVAL;
    b->input(b->ctx, n->c, n->h, n->w);
    switch (n->family) {
    case SL_ZOO_MLP:
        for (unsigned i = 0; i < 5 && n->n[i]; i++)
            b->fc(b->ctx, n->n[i], i + 1 < 5 && n->n[i + 1]);
        break;
    case SL_ZOO_CNN:
        small_cnn(b, n);
        break;
    case SL_ZOO_VGG:
        vgg(b, n);
        break;
    case SL_ZOO_RESNET:
        resnet(b, n);
        break;
    case SL_ZOO_NONE:
        break;
    }
    b->loss(b->ctx);
    return SL_OK;
}

/* Parameter counts as published; the Salus CSV has no persistent memory,
 * and the weights are what a training session keeps between iterations. */
static const struct {
    const char *model;
    uint64_t params;
} published[] = {
    /* Simonyan & Zisserman, "Very Deep Convolutional Networks", ICLR 2015,
     * Table 2: configurations A (11 layers) 133 M, D (16) 138 M, E (19)
     * 144 M */
    {"vgg11", 133000000},
    {"vgg16", 138000000},
    {"vgg19", 144000000},
    /* He et al., "Deep Residual Learning", CVPR 2016, as counted by
     * torchvision's and Keras's model tables: 25.6 M, 44.5 M, 60.2 M */
    {"resnet50", 25600000},
    {"resnet101", 44500000},
    {"resnet152", 60200000},
    /* Krizhevsky et al., NIPS 2012: "60 million parameters" */
    {"alexnet", 60000000},
    /* Szegedy et al., "Going Deeper with Convolutions", CVPR 2015, Table 1:
     * about 6.8 M */
    {"googlenet", 6800000},
    /* Szegedy et al., "Rethinking the Inception Architecture", CVPR 2016:
     * 23.8 M as counted by Keras's table */
    {"inception3", 23800000},
    /* Szegedy et al., "Inception-v4", AAAI 2017: 42.7 M as commonly counted */
    {"inception4", 42700000},
    /* Sermanet et al., "OverFeat", ICLR 2014, Table 1 (fast model): 145 M */
    {"overfeat", 145000000},
};

uint64_t sl_zoo_published_params(const char *model)
{
    for (size_t i = 0; model && i < sizeof published / sizeof published[0]; i++)
        if (strcmp(published[i].model, model) == 0)
            return published[i].params;
    return 0;
}
