#include "sl_test.h"
#include "test_memory.h"

int main(void)
{
    int failed = test_pool_run();
    failed += test_planner_run();
    failed += test_manager_run();
    failed += test_manager_layout_run();
    failed += test_manager_prop_run();
    return failed ? 1 : 0;
}
