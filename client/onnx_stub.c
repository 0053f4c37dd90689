/* ONNX import where libsalusclient was built without libonnx-dev: every
 * entry point of salus.h's ONNX section exists and refuses, saying why. */
#include "client_internal.h"

#include <stdio.h>

int salus_onnx_load_buffer(salus_session *s, const void *data, size_t len,
                           const salus_onnx_options *opts, salus_onnx_model **out)
{
    (void) data;
    (void) len;
    (void) opts;
    (void) out;
    if (s && s->client)
        snprintf(s->client->last_error, sizeof s->client->last_error,
                 "libsalusclient was built without ONNX import (libonnx-dev was missing)");
    return SALUS_EUNSUPPORTED;
}

int salus_onnx_load(salus_session *s, const char *path, const salus_onnx_options *opts,
                    salus_onnx_model **out)
{
    (void) path;
    return salus_onnx_load_buffer(s, NULL, 0, opts, out);
}

int salus_onnx_check_buffer(const void *data, size_t len, const salus_onnx_options *opts, char *why,
                            size_t why_len)
{
    (void) data, (void) len, (void) opts;
    if (why && why_len)
        snprintf(why, why_len,
                 "libsalusclient was built without ONNX import (libonnx-dev was missing)");
    return SALUS_EUNSUPPORTED;
}

void salus_onnx_free(salus_onnx_model *m)
{
    (void) m;
}

unsigned salus_onnx_n_inputs(const salus_onnx_model *m)
{
    (void) m;
    return 0;
}

unsigned salus_onnx_n_outputs(const salus_onnx_model *m)
{
    (void) m;
    return 0;
}

int salus_onnx_input(const salus_onnx_model *m, unsigned i, const char **name, int *dtype,
                     int *ndim, int64_t *dims)
{
    (void) m, (void) i, (void) name, (void) dtype, (void) ndim, (void) dims;
    return SALUS_EUNSUPPORTED;
}

int salus_onnx_output(const salus_onnx_model *m, unsigned i, const char **name, int *dtype,
                      int *ndim, int64_t *dims)
{
    (void) m, (void) i, (void) name, (void) dtype, (void) ndim, (void) dims;
    return SALUS_EUNSUPPORTED;
}

const salus_graph *salus_onnx_graph(const salus_onnx_model *m)
{
    (void) m;
    return NULL;
}

salus_value salus_onnx_output_value(const salus_onnx_model *m, unsigned i)
{
    (void) m, (void) i;
    return SALUS_NO_VALUE;
}

int salus_onnx_run(salus_onnx_model *m, const void *const *inputs, void *const *outputs)
{
    (void) m, (void) inputs, (void) outputs;
    return SALUS_EUNSUPPORTED;
}
