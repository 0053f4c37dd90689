/* Memory limits of control groups: how much memory this process may use
 * when a container, a systemd unit or a batch system caps it below the
 * host's RAM. Budgets sized from "the host's memory" read
 * sl_host_memory(), not sysconf, so that they fit the container. */
#ifndef SL_CGROUP_H
#define SL_CGROUP_H

#include <stdint.h>

/* The lowest memory limit that applies to this process: its own cgroup's
 * and every ancestor's memory.max (cgroup v2) and memory.limit_in_bytes
 * (cgroup v1, the memory controller's hierarchy), the cgroups named by
 * ROOT/proc/self/cgroup and found under ROOT/sys/fs/cgroup. An ancestor
 * counts because its limit caps all below it; in a container the own path
 * may not exist under the mount (the container's cgroup is its root), and
 * then the nearest ancestor that does is the container's. root: "" or
 * NULL for the real files; tests pass a folder holding a fake tree.
 * Writes *out only on success. Errors: SL_ENOTFOUND when no limit applies
 * ("max", v1's near-2^63 "unlimited", or no file readable). Reads a few
 * small files; does not block otherwise. */
int sl_cgroup_memory_limit(const char *root, uint64_t *out);

/* The host memory this process may use: physical memory, or its cgroup
 * memory limit when lower (sl_cgroup_memory_limit with the root in
 * $SALUS_TEST_CGROUP_ROOT, a test's fake tree, else the real one). 0 when
 * the system says neither. */
uint64_t sl_host_memory(void);

#endif
