#include "sl_test.h"
#include "test_memory.h"

int main(void)
{
    int failed = test_pool_run();
    failed += test_planner_run();
    return failed ? 1 : 0;
}
