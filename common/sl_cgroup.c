/* Control groups' memory limits (sl_cgroup.h). */
#include "sl_cgroup.h"

#include "sl_error.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit
 * count; anything this large is no limit. */
#define V1_UNLIMITED (1ull << 62)

/* The limit in file: false when it is absent, unreadable, "max" or
 * unlimited. */
static bool read_limit(const char *file, uint64_t *out)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return false;
    char text[64];
    bool ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || (*end && *end != '\n') || v >= V1_UNLIMITED)
        return false;
    *out = v;
    return true;
}

/* Lowers *lowest to the limit in file of cgroup path (as /proc names it)
 * and of each of its ancestors under mount. */
static void lowest_on_path(const char *mount, const char *path, const char *file, uint64_t *lowest,
                           bool *found)
{
    char dir[PATH_MAX], name[PATH_MAX + 32];
    size_t base = strlen(mount);
    if (snprintf(dir, sizeof dir, "%s%s", mount, path) >= (int) sizeof dir)
        return;
    size_t len = strlen(dir);
    while (len > base && dir[len - 1] == '/')
        dir[--len] = '\0';
    for (;;) {
        uint64_t v;
        snprintf(name, sizeof name, "%s/%s", dir, file);
        if (read_limit(name, &v) && (!*found || v < *lowest)) {
            *lowest = v;
            *found = true;
        }
        char *slash = strrchr(dir + base, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
}

/* Whether v1 controller list ctl ("cpu,cpuacct", "memory") has memory. */
static bool has_memory(const char *ctl, size_t len)
{
    for (const char *p = ctl; p < ctl + len;) {
        size_t n = strcspn(p, ",:");
        if (n == 6 && strncmp(p, "memory", 6) == 0)
            return true;
        p += n + 1;
    }
    return false;
}

int sl_cgroup_memory_limit(const char *root, uint64_t *out)
{
    if (!root)
        root = "";
    char file[PATH_MAX], v2[PATH_MAX], v1[PATH_MAX];
    snprintf(file, sizeof file, "%s/proc/self/cgroup", root);
    snprintf(v2, sizeof v2, "%s/sys/fs/cgroup", root);
    snprintf(v1, sizeof v1, "%s/sys/fs/cgroup/memory", root);
    FILE *f = fopen(file, "r");
    if (!f)
        return SL_ENOTFOUND;
    uint64_t lowest = 0;
    bool found = false;
    char line[PATH_MAX + 64];
    /* hierarchy-id:controllers:path; v2's is "0::path" */
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *ctl = strchr(line, ':');
        char *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path || path[1] != '/')
            continue;
        ctl++;
        path++;
        if (strncmp(line, "0:", 2) == 0 && ctl == path - 1)
            lowest_on_path(v2, path, "memory.max", &lowest, &found);
        else if (has_memory(ctl, (size_t) (path - 1 - ctl)))
            lowest_on_path(v1, path, "memory.limit_in_bytes", &lowest, &found);
    }
    fclose(f);
    if (!found)
        return SL_ENOTFOUND;
    *out = lowest;
    return SL_OK;
}

uint64_t sl_host_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    uint64_t host = pages > 0 && page > 0 ? (uint64_t) pages * (uint64_t) page : 0, limit;
    if (sl_cgroup_memory_limit(getenv("SALUS_TEST_CGROUP_ROOT"), &limit) == SL_OK &&
        (!host || limit < host))
        return limit;
    return host;
}
