/* Memory limits of cgroups (common/sl_cgroup.h) read from fake trees of
 * /proc/self/cgroup and /sys/fs/cgroup in a temporary folder, and the cpu
 * device sized by them: a cpu salusd in a 1 GiB container must not size
 * itself to the host's memory. */
#include "sl_test.h"

#include "device.h"
#include "sl_cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64];

/* Writes text at root/rel, making the folders on the way. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            fail_msg("mkdir %s: %s", path, strerror(errno));
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int fresh_root(void **state)
{
    (void) state;
    snprintf(root, sizeof root, "/tmp/salus-cgroup-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int remove_root(void **state)
{
    (void) state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static uint64_t limit_of(void)
{
    uint64_t v = 0;
    assert_sl_ok(sl_cgroup_memory_limit(root, &v));
    return v;
}

/* v2: an ancestor's limit caps its descendants; the lowest one counts. */
static void v2_ancestors(void **state)
{
    (void) state;
    put("proc/self/cgroup", "0::/user.slice/job.scope\n");
    put("sys/fs/cgroup/user.slice/job.scope/memory.max", "max\n");
    put("sys/fs/cgroup/user.slice/memory.max", "1073741824\n");
    assert_int_equal(limit_of(), 1ull << 30);
    put("sys/fs/cgroup/user.slice/job.scope/memory.max", "536870912\n");
    assert_int_equal(limit_of(), 512ull << 20);
}

/* In a container the path /proc names (the host's) is absent under the
 * mount, whose root is the container's cgroup. */
static void v2_container(void **state)
{
    (void) state;
    put("proc/self/cgroup", "0::/system.slice/docker-0123abcd.scope\n");
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    assert_int_equal(limit_of(), 1ull << 30);
}

/* v1: the memory controller's line, "unlimited" ignored, ancestors too. */
static void v1_memory_controller(void **state)
{
    (void) state;
    put("proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n"
                            "7:memory:/docker/abc\n"
                            "1:name=systemd:/docker/abc\n");
    put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "2147483648\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/memory.limit_in_bytes", "1024\n");
    assert_int_equal(limit_of(), 2ull << 30);
}

/* Both hierarchies mounted (hybrid): the lower limit. */
static void hybrid(void **state)
{
    (void) state;
    put("proc/self/cgroup", "5:blkio,memory:/a\n0::/a\n");
    put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "3221225472\n");
    put("sys/fs/cgroup/a/memory.max", "4294967296\n");
    assert_int_equal(limit_of(), 3ull << 30);
}

static void no_limit(void **state)
{
    (void) state;
    uint64_t v = 7;
    assert_sl_err(sl_cgroup_memory_limit(root, &v), SL_ENOTFOUND); /* no proc file */
    put("proc/self/cgroup", "0::/a\n");
    assert_sl_err(sl_cgroup_memory_limit(root, &v), SL_ENOTFOUND); /* no cgroup files */
    put("sys/fs/cgroup/a/memory.max", "max\n");
    put("sys/fs/cgroup/memory.max", "garbage\n");
    assert_sl_err(sl_cgroup_memory_limit(root, &v), SL_ENOTFOUND);
    assert_int_equal(v, 7); /* untouched on error */
}

/* The cpu device's capacity: half of the host memory it may use, here the
 * fake container's 1 GiB (this host has more). */
static void cpu_device_fits_the_container(void **state)
{
    (void) state;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if ((uint64_t) pages * (uint64_t) page <= (1ull << 30))
        skip();
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    assert_int_equal(setenv("SALUS_TEST_CGROUP_ROOT", root, 1), 0);
    assert_int_equal(sl_host_memory(), 1ull << 30);
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    assert_int_equal(dev->total_bytes, 512ull << 20);
    sl_dev_close(dev);
    /* without a limit: the host's memory */
    put("sys/fs/cgroup/memory.max", "max\n");
    assert_int_equal(sl_host_memory(), (uint64_t) pages * (uint64_t) page);
    unsetenv("SALUS_TEST_CGROUP_ROOT");
}

/* Each test in a fake tree of its own. */
#define IN_FRESH_ROOT(t) cmocka_unit_test_setup_teardown(t, fresh_root, remove_root)

SL_TEST_MAIN("cgroup", NULL, NULL, IN_FRESH_ROOT(v2_ancestors), IN_FRESH_ROOT(v2_container),
             IN_FRESH_ROOT(v1_memory_controller), IN_FRESH_ROOT(hybrid), IN_FRESH_ROOT(no_limit),
             IN_FRESH_ROOT(cpu_device_fits_the_container))
