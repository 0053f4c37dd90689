"""Writes the C source of salus._native, the cffi extension over libsalusclient.

Run at build time by meson (python/meson.build): `build_ffi.py OUT.c`. The
declarations below are what the Python layer calls; because the extension is
compiled in cffi's API mode against <salus/salus.h>, the C compiler checks
every one of them against the real header, so the two cannot drift apart.
"""
import sys

import cffi

CDEF = r"""
typedef struct salus_client salus_client;
typedef struct salus_session salus_session;
typedef struct salus_graph salus_graph;
typedef struct salus_model salus_model;
typedef uint32_t salus_value;

#define SALUS_PROTOCOL_VERSION ...
#define SALUS_MAX_DIMS ...
#define SALUS_NO_VALUE ...
enum salus_code {
    SALUS_OK, SALUS_EINVAL, SALUS_ENOMEM, SALUS_EEXHAUSTED, SALUS_ENOTFOUND, SALUS_EPERM,
    SALUS_EPROTO, SALUS_EDEVICE, SALUS_ENODEV, SALUS_ESHUTDOWN, SALUS_EUNSUPPORTED,
    SALUS_ETIMEDOUT, SALUS_ECONN, SALUS_EINTERNAL, SALUS_ESESSIONLOST, SALUS_EDEVICERESET,
    SALUS_EBUSY, ...
};
enum salus_dtype { SALUS_F32, SALUS_I32, ... };
enum salus_optimizer_kind { SALUS_SGD, SALUS_MOMENTUM, SALUS_ADAM, ... };

const char *salus_strerror(int code);
const char *salus_default_url(void);
int salus_connect(const char *url, salus_client **out);
void salus_disconnect(salus_client *c);
const char *salus_last_error(const salus_client *c);
const char *salus_server_device(const salus_client *c);

typedef struct salus_session_opts {
    const char *name;
    int priority;
    double weight;
    uint64_t persistent_bytes;
    uint64_t ephemeral_bytes;
    double expected_total_s;
    uint64_t expected_iterations;
    int wait_for_admission;
} salus_session_opts;

int salus_session_open(salus_client *c, const salus_session_opts *opts, salus_session **out);
int salus_session_close(salus_session *s);
uint64_t salus_session_id(const salus_session *s);
size_t salus_session_shm_bytes(salus_session *s);

int salus_tensor_create(salus_session *s, int dtype, int ndim, const int64_t *dims,
                        const void *init, uint64_t *id);
int salus_tensor_write(salus_session *s, uint64_t id, const void *data, size_t bytes);
int salus_tensor_read(salus_session *s, uint64_t id, void *buf, size_t bytes);
int salus_tensor_free(salus_session *s, uint64_t id);

salus_graph *salus_graph_new(void);
void salus_graph_free(salus_graph *g);
const char *salus_graph_error(const salus_graph *g);
salus_value salus_graph_input(salus_graph *g, int dtype, int ndim, const int64_t *dims);
salus_value salus_graph_param(salus_graph *g, uint64_t tensor_id, int dtype, int ndim,
                              const int64_t *dims);
salus_value salus_graph_op(salus_graph *g, const char *type, unsigned n_in,
                           const salus_value *inputs, unsigned n_iattrs, const int64_t *iattrs,
                           unsigned n_fattrs, const float *fattrs);
int salus_graph_shape(const salus_graph *g, salus_value v, int *dtype, int *ndim, int64_t *dims);
size_t salus_graph_bytes(const salus_graph *g, salus_value v);
unsigned salus_graph_n_inputs(const salus_graph *g);
salus_value salus_graph_input_value(const salus_graph *g, unsigned i);
int salus_graph_register(salus_session *s, salus_graph *g, uint64_t *planned_peak);
int salus_graph_memory(const salus_graph *g, uint64_t *planned_peak, uint64_t *naive_bytes);
uint64_t salus_graph_id(const salus_graph *g);
int salus_run(salus_session *s, const salus_graph *g, const void *const *feeds, unsigned n_fetch,
              const salus_value *fetch, void *const *out);

enum salus_optimizer_flags { SALUS_OPT_EXACT, SALUS_OPT_DECOUPLED_WD, SALUS_OPT_LR_PER_STEP, ... };
typedef struct salus_optimizer {
    int kind;
    float lr;
    float momentum;
    float weight_decay;
    float beta1, beta2, eps;
    unsigned flags;
} salus_optimizer;

salus_model *salus_model_new(int ndim, const int64_t *sample_dims);
void salus_model_free(salus_model *m);
const char *salus_model_error(const salus_model *m);
int salus_model_dense(salus_model *m, int64_t units);
int salus_model_conv2d(salus_model *m, int64_t filters, int64_t kernel, int64_t stride,
                       int64_t pad);
int salus_model_maxpool(salus_model *m, int64_t kernel, int64_t stride);
int salus_model_avgpool(salus_model *m, int64_t kernel, int64_t stride);
int salus_model_batchnorm(salus_model *m);
int salus_model_relu(salus_model *m);
int salus_model_sigmoid(salus_model *m);
int salus_model_tanh(salus_model *m);
int salus_model_flatten(salus_model *m);
int salus_model_compile(salus_model *m, salus_session *s, const salus_optimizer *opt,
                        int64_t batch, int64_t infer_batch, uint64_t seed);
int salus_model_train_step(salus_model *m, const float *x, const int32_t *labels, float *loss);
int salus_model_predict(salus_model *m, const float *x, int32_t *classes);
const salus_graph *salus_model_training_graph(const salus_model *m);
const salus_graph *salus_model_inference_graph(const salus_model *m);
int64_t salus_model_param_count(const salus_model *m);

enum salus_tensor_kind { SALUS_TENSOR_PARAM, SALUS_TENSOR_BUFFER, SALUS_TENSOR_OPTIMIZER, ... };
int salus_model_tensor_count(const salus_model *m);
const char *salus_model_tensor_name(const salus_model *m, int i);
int salus_model_tensor_find(const salus_model *m, const char *name);
int salus_model_tensor_info(const salus_model *m, int i, int *kind, int *ndim, int64_t *dims,
                            uint64_t *tensor_id);
int salus_model_tensor_read(salus_model *m, int i, float *buf, size_t bytes);
int salus_model_tensor_write(salus_model *m, int i, const float *buf, size_t bytes);
int salus_model_save(salus_model *m, const char *path);
int salus_model_load(salus_model *m, const char *path);
int salus_model_set_lr(salus_model *m, float lr);
int salus_model_export_onnx(salus_model *m, const char *path);

int salus_graph_gradients(salus_graph *g, salus_value loss, unsigned n, const salus_value *wrt,
                          salus_value *grads);
enum salus_loss_kind { SALUS_LOSS_SOFTMAX_XENT, SALUS_LOSS_MSE, SALUS_LOSS_SCALAR, ... };
typedef struct salus_trainer salus_trainer;
int salus_graph_train(salus_session *s, const salus_graph *forward, int loss_kind,
                      salus_value output, const salus_optimizer *opt, salus_trainer **out);
int salus_trainer_step(salus_trainer *t, const void *const *feeds, float *loss);
const salus_graph *salus_trainer_graph(const salus_trainer *t);
salus_value salus_trainer_loss(const salus_trainer *t);
unsigned salus_trainer_param_count(const salus_trainer *t);
uint64_t salus_trainer_param_tensor(const salus_trainer *t, unsigned i);
int salus_trainer_set_lr(salus_trainer *t, float lr);
void salus_trainer_free(salus_trainer *t);

typedef struct salus_onnx_model salus_onnx_model;
typedef struct salus_onnx_options {
    int64_t batch;
} salus_onnx_options;
int salus_onnx_load(salus_session *s, const char *path, const salus_onnx_options *opts,
                    salus_onnx_model **out);
int salus_onnx_load_buffer(salus_session *s, const void *data, size_t len,
                           const salus_onnx_options *opts, salus_onnx_model **out);
int salus_onnx_check_buffer(const void *data, size_t len, const salus_onnx_options *opts, char *why,
                            size_t why_len);
void salus_onnx_free(salus_onnx_model *m);
unsigned salus_onnx_n_inputs(const salus_onnx_model *m);
unsigned salus_onnx_n_outputs(const salus_onnx_model *m);
int salus_onnx_input(const salus_onnx_model *m, unsigned i, const char **name, int *dtype,
                     int *ndim, int64_t *dims);
int salus_onnx_output(const salus_onnx_model *m, unsigned i, const char **name, int *dtype,
                      int *ndim, int64_t *dims);
const salus_graph *salus_onnx_graph(const salus_onnx_model *m);
salus_value salus_onnx_output_value(const salus_onnx_model *m, unsigned i);
int salus_onnx_run(salus_onnx_model *m, const void *const *inputs, void *const *outputs);

int salus_set_policy(salus_client *c, const char *policy, int strict);
int salus_set_session(salus_client *c, uint64_t session_id, int set_priority, int priority,
                      int set_weight, double weight);
int salus_status_text(salus_client *c, char **text);
void salus_free(void *p);
"""


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build_ffi.py OUT.c")
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("salus._native", "#include <salus/salus.h>")
    ffi.emit_c_code(sys.argv[1])


if __name__ == "__main__":
    main()
