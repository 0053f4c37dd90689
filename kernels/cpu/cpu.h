/* The cpu backend's internal interface: device memory and streams
 * (device.c, stream.c) and the kernels (ops.c). Device addresses are host
 * addresses. Only the test hook below is meant for use outside kernels/cpu/. */
#ifndef SL_CPU_H
#define SL_CPU_H

#include "device.h"

/* Runs one op synchronously on the calling thread. The call must have passed
 * sl_cpu_op_check. Returns SL_OK or an SL_E* code (cannot fail today). */
int sl_cpu_run_op(const sl_op_call *call);

/* Whether the cpu kernels can run this call: a known op with the registry's
 * arity, and (matmul) dimensions that fit the BLAS integer type.
 * Returns SL_OK, SL_EUNSUPPORTED or SL_EINVAL (wrong arity). Never blocks. */
int sl_cpu_op_check(const sl_op_call *call);

/* Stream functions of sl_cpu_device_ops; contracts in device.h. */
int sl_cpu_stream_create(sl_device *dev, int priority, sl_stream **out);
void sl_cpu_stream_destroy(sl_device *dev, sl_stream *s);
int sl_cpu_memcpy(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n);
int sl_cpu_launch(sl_device *dev, sl_stream *s, const sl_op_call *call);
int sl_cpu_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg);
int sl_cpu_synchronize(sl_device *dev, sl_stream *s);

/* Test hook: enqueues on s a command that fails with `code` (an SL_E* code
 * other than SL_OK) when it executes, exactly as a failing kernel would: the
 * error becomes s's sticky error. Errors: SL_EINVAL (code is SL_OK or out of
 * range), SL_ENOMEM. Never blocks on device work. */
int sl_cpu_inject_error(sl_stream *s, int code);

#endif
