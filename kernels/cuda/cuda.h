/* The cuda backend's internal interface. The only header in salus that may
 * name CUDA or cuBLAS types: include it from kernels/cuda/ alone. Included by
 * both C (gcc) and CUDA C++ (nvcc) translation units. */
#ifndef SL_CUDA_H
#define SL_CUDA_H

#include "device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sl_cuda_lib { SL_CUDA_LIB_RT, SL_CUDA_LIB_CUBLAS };

/* Translates a cudart (cudaError_t) or cuBLAS (cublasStatus_t) status into an
 * SL_E* code, through one table. On any status but success it logs one error
 * line under log id `id`: `what` (the failing call), the library's status
 * name and the library's own description. Never blocks. */
int sl_cuda_status(enum sl_cuda_lib lib, int status, const char *id, const char *what);

/* Evaluate a cudart / cuBLAS call and translate its status at the call site. */
#define SL_CUDA_RT(id, call) sl_cuda_status(SL_CUDA_LIB_RT, (int) (call), id, #call)
#define SL_CUBLAS(id, call) sl_cuda_status(SL_CUDA_LIB_CUBLAS, (int) (call), id, #call)

/* Whether ops.cu has a kernel for op id (every op but copy and matmul, which
 * device.c runs through cudaMemcpyAsync and cuBLAS). */
bool sl_cuda_has_kernel(unsigned op);

/* Enqueues the kernel of a registry-validated call on stream, on the calling
 * thread's current device. Returns the launch status (cudaGetLastError);
 * cudaErrorNotSupported when sl_cuda_has_kernel(call->op) is false. Never
 * waits for the device. */
cudaError_t sl_cuda_launch_kernel(const sl_op_call *call, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
