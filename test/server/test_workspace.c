/* Backend workspaces are the lanes' framework memory: on an
 * embedded server on the cpu device, a lane whose framework block is too
 * small for a convolution's oneDNN scratch fails that iteration with
 * RESOURCE_EXHAUSTED (never touching memory outside the block), while ops
 * needing no scratch still run and the default block runs the model. */
#include "server.h"
#include "sl_log.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <string.h>

static void serve(sl_server *srv, const char *url, bool tiny_framework)
{
    memset(srv, 0, sizeof *srv);
    srv->cfg = (sl_config) SL_CONFIG_DEFAULTS;
    srv->cfg.listen[srv->cfg.n_listen++] = url;
    srv->cfg.memory_limit = 512ull << 20;
    if (tiny_framework) {
        srv->cfg.framework_set = true;
        srv->cfg.framework_per_lane = 4096;
    }
    assert_sl_ok(sl_server_start(srv));
}

/* One training step of a small CNN (conv 8x3x3 on 1x16x16, batch 8). */
static int cnn_step(const char *url)
{
    salus_client *c;
    salus_session *s;
    assert_sl_ok(salus_connect(url, &c));
    assert_sl_ok(salus_session_open(c, NULL, &s));
    salus_model *m = salus_model_new(3, (int64_t[]){1, 16, 16});
    salus_model_conv2d(m, 8, 3, 1, 1);
    salus_model_relu(m);
    salus_model_flatten(m);
    salus_model_dense(m, 10);
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    assert_sl_ok(salus_model_compile(m, s, &sgd, 8, 8, 1));
    float x[8 * 256] = {0};
    int32_t labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int i = 0; i < 8 * 256; i++)
        x[i] = (float) (i % 17) / 17.0f;
    float loss = 0;
    int rc = salus_model_train_step(m, x, labels, &loss);
    salus_model_free(m);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    return rc;
}

/* Dense layers only: cblas needs no workspace. */
static int mlp_step(const char *url)
{
    salus_client *c;
    salus_session *s;
    assert_sl_ok(salus_connect(url, &c));
    assert_sl_ok(salus_session_open(c, NULL, &s));
    salus_model *m = salus_model_new(1, (int64_t[]){32});
    salus_model_dense(m, 16);
    salus_model_relu(m);
    salus_model_dense(m, 4);
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    assert_sl_ok(salus_model_compile(m, s, &sgd, 4, 4, 1));
    float x[4 * 32] = {0}, loss = 0;
    int32_t labels[4] = {0, 1, 2, 3};
    int rc = salus_model_train_step(m, x, labels, &loss);
    salus_model_free(m);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    return rc;
}

static void undersized_lane_workspace_fails_the_iteration_only(void **state)
{
    (void) state;
    sl_server srv;
    const char *url = "inproc://salus-test-ws-tiny";
    serve(&srv, url, true);
    assert_sl_err(cnn_step(url), SALUS_EEXHAUSTED);
    assert_sl_ok(mlp_step(url)); /* the server and other lanes carry on */
    assert_sl_err(cnn_step(url), SALUS_EEXHAUSTED);
    sl_server_stop(&srv);
}

static void default_lane_workspace_runs_a_cnn(void **state)
{
    (void) state;
    sl_server srv;
    const char *url = "inproc://salus-test-ws-default";
    serve(&srv, url, false);
    assert_sl_ok(cnn_step(url));
    sl_server_stop(&srv);
}

int main(void)
{
    sl_log_set_level("error");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(undersized_lane_workspace_fails_the_iteration_only),
        cmocka_unit_test(default_lane_workspace_runs_a_cnn),
    };
    return cmocka_run_group_tests_name("lane_workspace", tests, NULL, NULL);
}
