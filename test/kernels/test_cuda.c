/* Every op on the cuda backend. Skips (exit 77) where there is no GPU. */
#include "kt.h"

#include <stdio.h>

int main(void)
{
    sl_device *dev;
    int rc = sl_dev_open("cuda", &dev);
    if (rc == SL_ENODEV) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    if (rc != SL_OK) {
        fprintf(stderr, "sl_dev_open(\"cuda\"): %s\n", sl_strerror(rc));
        return 1;
    }
    printf("%s, %llu bytes\n", dev->description, (unsigned long long) dev->total_bytes);
    sl_dev_close(dev);
    return kt_run_exec_tests("cuda") ? 1 : 0;
}
