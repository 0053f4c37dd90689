/* The CUDA driver API's header. The backend's own header is also named
 * cuda.h and comes first on the include path, so the driver's is reached
 * past it. Types only: nothing links libcuda (cuda.h, green contexts). */
#ifndef SL_CUDA_DRIVER_H
#define SL_CUDA_DRIVER_H

#include_next <cuda.h>

#endif
