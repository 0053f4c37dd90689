/* Tests of the model zoo (eval/lib/zoo.h): each network's layers, walked
 * by a builder that counts parameters and follows the shapes, against the
 * parameter counts and output sizes the architectures are known by; the
 * residual blocks' structure; ResNet v1 against v1.5; unknown names. */
#include "sl_test.h"

#include "sl_error.h"
#include "zoo.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* What a walk saw. */
typedef struct walk {
    int64_t c, h, w, in_c, in_h, main_c, main_h;
    uint64_t params;
    unsigned convs, fcs, pools, blocks, projections, strided_1x1, strided_3x3;
    bool in_shortcut, input_first, loss_last, after_loss;
    int64_t fc_in_first, pool_h_last; /* the first fc's inputs; h before global pooling */
} walk;

static void w_input(void *ctx, int64_t c, int64_t h, int64_t w)
{
    walk *k = ctx;
    k->input_first = k->convs + k->fcs + k->pools == 0;
    k->c = c, k->h = h, k->w = w;
}

static void w_conv(void *ctx, const sl_zoo_conv *c)
{
    walk *k = ctx;
    k->after_loss |= k->loss_last;
    k->params += (uint64_t) (c->k * c->k * k->c * c->out) + (uint64_t) (c->bn ? 2 : 1) * c->out;
    k->h = (k->h + 2 * c->pad - c->k) / c->stride + 1;
    k->w = (k->w + 2 * c->pad - c->k) / c->stride + 1;
    k->c = c->out;
    k->convs++;
    k->projections += k->in_shortcut;
    k->strided_1x1 += c->k == 1 && c->stride > 1;
    k->strided_3x3 += c->k == 3 && c->stride > 1;
}

static void w_maxpool(void *ctx, int64_t kk, int64_t stride, int64_t pad)
{
    walk *k = ctx;
    k->h = (k->h + 2 * pad - kk) / stride + 1;
    k->w = (k->w + 2 * pad - kk) / stride + 1;
    k->pools++;
}

static void w_global_avgpool(void *ctx)
{
    walk *k = ctx;
    k->pool_h_last = k->h;
    k->h = k->w = 1;
    k->pools++;
}

static void w_fc(void *ctx, int64_t out, bool relu)
{
    (void) relu;
    walk *k = ctx;
    int64_t in = k->c * k->h * k->w;
    if (!k->fcs)
        k->fc_in_first = in;
    k->params += (uint64_t) (in * out + out);
    k->c = out, k->h = k->w = 1;
    k->fcs++;
}

static void w_residual_begin(void *ctx)
{
    walk *k = ctx;
    assert_false(k->in_shortcut);
    k->in_c = k->c, k->in_h = k->h;
    k->blocks++;
}

static void w_residual_shortcut(void *ctx)
{
    walk *k = ctx;
    k->main_c = k->c, k->main_h = k->h;
    k->c = k->in_c, k->h = k->w = k->in_h;
    k->in_shortcut = true;
}

static void w_residual_end(void *ctx)
{
    walk *k = ctx;
    assert_true(k->in_shortcut);
    /* both branches end in the same shape */
    assert_int_equal(k->c, k->main_c);
    assert_int_equal(k->h, k->main_h);
    k->in_shortcut = false;
}

static void w_loss(void *ctx)
{
    walk *k = ctx;
    k->loss_last = true;
}

static walk run(const char *model)
{
    walk k = {0};
    const sl_zoo_builder b = {.ctx = &k,
                              .input = w_input,
                              .conv = w_conv,
                              .maxpool = w_maxpool,
                              .global_avgpool = w_global_avgpool,
                              .fc = w_fc,
                              .residual_begin = w_residual_begin,
                              .residual_shortcut = w_residual_shortcut,
                              .residual_end = w_residual_end,
                              .loss = w_loss};
    assert_sl_ok(sl_zoo_build(model, &b));
    assert_true(k.input_first);
    assert_true(k.loss_last);
    assert_false(k.after_loss);
    assert_false(k.in_shortcut);
    return k;
}

/* Parameter counts (weights, biases, batch norms' scale and shift) as the
 * reference implementations count them (torchvision's resnet50, vgg16,
 * vgg11; LeNet-5 and the MLPs by hand). */
static void test_params(void **state)
{
    (void) state;
    static const struct {
        const char *model;
        uint64_t params;
        int64_t classes;
    } want[] = {
        {"resnet50", 25557032, 1000},
        {"resnet50_v1.5", 25557032, 1000},
        {"resnet101", 44549160, 1000},
        {"resnet152", 60192808, 1000},
        {"vgg11", 132863336, 1000},
        {"vgg16", 138357544, 1000},
        {"vgg19", 143667240, 1000},
        {"lenet5", 61706, 10},
        {"mlp-784-256-128-10", 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10, 10},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        walk k = run(want[i].model);
        if (k.params != want[i].params)
            fail_msg("%s: %llu parameters, want %llu", want[i].model, (unsigned long long) k.params,
                     (unsigned long long) want[i].params);
        assert_int_equal(k.c, want[i].classes);
    }
}

static void test_shapes(void **state)
{
    (void) state;
    walk r = run("resnet50");
    assert_int_equal(r.convs, 53); /* 1 + 16 x 3 + 4 projections */
    assert_int_equal(r.blocks, 16);
    assert_int_equal(r.projections, 4);
    assert_int_equal(r.pool_h_last, 7); /* 224 / 32 */
    assert_int_equal(r.fc_in_first, 2048);
    assert_int_equal(run("resnet152").blocks, 50);
    walk v = run("vgg16");
    assert_int_equal(v.convs, 13);
    assert_int_equal(v.fcs, 3);
    assert_int_equal(v.fc_in_first, 512 * 7 * 7);
    assert_int_equal(v.blocks, 0);
    walk c = run("cifar-cnn");
    assert_int_equal(c.fc_in_first, 64 * 8 * 8);
    assert_int_equal(run("lenet5").fc_in_first, 16 * 5 * 5);
}

/* v1 strides a block's first 1x1 convolution, v1.5 its 3x3 one; the
 * projections stride alike in both. */
static void test_resnet_versions(void **state)
{
    (void) state;
    walk v1 = run("resnet50"), v15 = run("resnet50_v1.5");
    assert_int_equal(v1.strided_1x1, 3 + 3);
    assert_int_equal(v1.strided_3x3, 0);
    assert_int_equal(v15.strided_1x1, 3);
    assert_int_equal(v15.strided_3x3, 3);
}

static void test_names(void **state)
{
    (void) state;
    static const char *const nets[] = {"mlp-784-256-128-10",
                                       "mlp-4096x3-1000",
                                       "lenet5",
                                       "cifar-cnn",
                                       "vgg11",
                                       "vgg16",
                                       "vgg19",
                                       "resnet50",
                                       "resnet101",
                                       "resnet152",
                                       "resnet50_v1.5"};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        assert_true(sl_zoo_known(nets[i]));
        assert_int_not_equal(sl_zoo_family(nets[i]), SL_ZOO_NONE);
    }
    assert_int_equal(sl_zoo_family("vgg19"), SL_ZOO_VGG);
    assert_int_equal(sl_zoo_family("resnet101"), SL_ZOO_RESNET);
    assert_int_equal(sl_zoo_family("lenet5"), SL_ZOO_CNN);
    assert_int_equal(sl_zoo_family("mlp-4096x3-1000"), SL_ZOO_MLP);
    assert_false(sl_zoo_known("alexnet"));
    assert_false(sl_zoo_known(NULL));
    assert_int_equal(sl_zoo_family("resnet"), SL_ZOO_NONE);
    walk k = {0};
    const sl_zoo_builder b = {.ctx = &k}; /* no hook may be called */
    assert_int_equal(sl_zoo_build("resnet5", &b), SL_EINVAL);
    assert_int_equal(sl_zoo_published_params("resnet50"), 25600000);
    assert_int_equal(sl_zoo_published_params("alexnet"), 60000000);
    assert_int_equal(sl_zoo_published_params("lenet5"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_resnet_versions),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests_name("eval zoo", tests, NULL, NULL);
}
