/* ONNX export where the build had no onnx.proto (libonnx-dev): refused,
 * saying so. */
#include "nn_internal.h"

int salus_model_export_onnx(salus_model *m, const char *path)
{
    (void) path;
    return sl_nn_refuse(m, SL_EUNSUPPORTED,
                        "export: this libsalusclient was built without onnx.proto (libonnx-dev)");
}
