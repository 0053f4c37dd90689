/* The one translation of cudart, cuBLAS and cuDNN statuses into SL_E* codes.
 *
 * Faults that corrupt the CUDA context (illegal address, launch failure, ECC:
 * every status CUDA documents as "leaves the process in an inconsistent
 * state") map to SL_EDEVICERESET, the device contract's "device lost":
 * nothing on the device survives them, so callers must re-upload state. cuDNN 9 statuses are a
 * category (a multiple of 1000) plus a detail: a status without its own row takes its category's
 * row. Anything else is SL_EDEVICE. */
#include "cuda.h"

#include "sl_error.h"
#include "sl_log.h"

#include <stdbool.h>
#include <stddef.h>

static const struct {
    enum sl_cuda_lib lib;
    int status;
    int code;
} table[] = {
    {SL_CUDA_LIB_RT, cudaSuccess, SL_OK},
    {SL_CUDA_LIB_RT, cudaErrorInvalidValue, SL_EINVAL},
    {SL_CUDA_LIB_RT, cudaErrorMemoryAllocation, SL_EEXHAUSTED},
    {SL_CUDA_LIB_RT, cudaErrorInitializationError, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorCudartUnloading, SL_ESHUTDOWN},
    {SL_CUDA_LIB_RT, cudaErrorInsufficientDriver, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorDevicesUnavailable, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorNoDevice, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorInvalidDevice, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorStartupFailure, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorSystemNotReady, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorSystemDriverMismatch, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorCompatNotSupportedOnDevice, SL_ENODEV},
    {SL_CUDA_LIB_RT, cudaErrorNoKernelImageForDevice, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_RT, cudaErrorUnsupportedPtxVersion, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_RT, cudaErrorNotSupported, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_RT, cudaErrorIllegalAddress, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorLaunchTimeout, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorAssert, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorHardwareStackError, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorIllegalInstruction, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorMisalignedAddress, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorInvalidPc, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorLaunchFailure, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorECCUncorrectable, SL_EDEVICERESET},
    {SL_CUDA_LIB_RT, cudaErrorInvalidAddressSpace, SL_EDEVICERESET},
#if CUDART_VERSION >= 12000
    {SL_CUDA_LIB_RT, cudaErrorExternalDevice, SL_EDEVICERESET},
#endif
#if CUDART_VERSION >= 12040
    {SL_CUDA_LIB_RT, cudaErrorContained, SL_EDEVICERESET},
#endif
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_SUCCESS, SL_OK},
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_NOT_INITIALIZED, SL_ENODEV},
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_ALLOC_FAILED, SL_EEXHAUSTED},
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_INVALID_VALUE, SL_EINVAL},
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_ARCH_MISMATCH, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_CUBLAS, CUBLAS_STATUS_NOT_SUPPORTED, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_SUCCESS, SL_OK},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_NOT_INITIALIZED, SL_ENODEV},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_BAD_PARAM, SL_EINVAL},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_NOT_SUPPORTED, SL_EUNSUPPORTED},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, SL_ENOMEM},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, SL_EEXHAUSTED},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_INTERNAL_ERROR, SL_EDEVICE},
    {SL_CUDA_LIB_CUDNN, CUDNN_STATUS_EXECUTION_FAILED, SL_EDEVICE},
};

/* Writes the code of the row (lib, status) into *code; false if none. */
static bool lookup(enum sl_cuda_lib lib, int status, int *code)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].lib == lib && table[i].status == status) {
            *code = table[i].code;
            return true;
        }
    return false;
}

int sl_cuda_status(enum sl_cuda_lib lib, int status, const char *id, const char *what)
{
    if (status == 0)
        return SL_OK; /* cudaSuccess, CUBLAS_STATUS_SUCCESS: the hot path */
    int code = SL_EDEVICE;
    if (!lookup(lib, status, &code) && lib == SL_CUDA_LIB_CUDNN)
        (void) lookup(lib, (int) CUDNN_STATUS_CATEGORY(status), &code);
    if (code == SL_OK)
        return SL_OK;
    switch (lib) {
    case SL_CUDA_LIB_RT:
        sl_log_err(id, "%s failed: %s (%s) -> %s", what, cudaGetErrorName((cudaError_t) status),
                   cudaGetErrorString((cudaError_t) status), sl_errname(code));
        break;
    case SL_CUDA_LIB_CUBLAS:
        sl_log_err(id, "%s failed: %s (%s) -> %s", what,
                   cublasGetStatusName((cublasStatus_t) status),
                   cublasGetStatusString((cublasStatus_t) status), sl_errname(code));
        break;
    case SL_CUDA_LIB_CUDNN: {
        /* cuDNN keeps a more specific message of the last failure per thread. */
        char detail[256] = "";
        cudnnGetLastErrorString(detail, sizeof detail);
        sl_log_err(id, "%s failed: %s (%d%s%s) -> %s", what,
                   cudnnGetErrorString((cudnnStatus_t) status), status, detail[0] ? ": " : "",
                   detail, sl_errname(code));
        break;
    }
    }
    return code;
}
