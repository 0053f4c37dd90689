/* Unit tests of kernels/: the op registry, the cpu device and every op on it. */
#include "kt_nn.h"

int main(void)
{
    int failed = kt_run_registry_tests();
    failed += kt_run_device_tests();
    failed += kt_run_exec_tests("cpu");
    failed += kt_run_nn_tests("cpu");
    failed += kt_run_cnn_tests("cpu");
    failed += kt_run_cpu_ops_tests();
    failed += kt_run_axes_tests("cpu");
    failed += kt_run_train_tests("cpu");
    return failed ? 1 : 0;
}
