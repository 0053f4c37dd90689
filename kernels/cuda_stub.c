/* Built instead of kernels/cuda/ when the CUDA backend is not: "cuda" specs
 * then fail with SL_EUNSUPPORTED. */
#include "device.h"

#include <stddef.h>

const sl_device_ops *const sl_cuda_device_ops_ptr = NULL;
