#include "sl_alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* <0: never fail. Otherwise the number of successful allocations left. */
static atomic_long fail_countdown = -1;

static bool should_fail(void)
{
    long left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (left < 0)
        return false;
    while (left > 0 && !atomic_compare_exchange_weak(&fail_countdown, &left, left - 1)) {
    }
    return left == 0;
}

void sl_alloc_fail_after(long n)
{
    atomic_store(&fail_countdown, n <= 0 ? -1 : n - 1);
}

void *sl_malloc(size_t size)
{
    if (should_fail())
        return NULL;
    return malloc(size ? size : 1);
}

void *sl_calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total) || should_fail())
        return NULL;
    return calloc(total ? n : 1, total ? size : 1);
}

void *sl_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total) || should_fail())
        return NULL;
    return realloc(p, total ? total : 1);
}

void *sl_aligned_alloc(size_t align, size_t size)
{
    void *p = NULL;
    if (should_fail())
        return NULL;
    if (posix_memalign(&p, align, size ? size : align) != 0)
        return NULL;
    return p;
}

char *sl_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = sl_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void sl_free(void *p)
{
    free(p);
}

void *sl_pages_alloc(size_t size)
{
    if (should_fail())
        return NULL;
    void *p =
        mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void sl_pages_free(void *p, size_t size)
{
    if (p)
        (void) munmap(p, size ? size : 1);
}
