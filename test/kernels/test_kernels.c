/* Unit tests of kernels/: the op registry, the cpu device and every op on it. */
#include "kt.h"

int main(void)
{
    int failed = kt_run_registry_tests();
    failed += kt_run_device_tests();
    failed += kt_run_exec_tests("cpu");
    return failed ? 1 : 0;
}
