/* Host allocation wrappers. Every host allocation in salus goes through these
 * so that tests can make the Nth allocation fail (sl_alloc_fail_after) and
 * exercise error paths. Sizes are overflow-checked: a product that overflows
 * fails like an exhausted heap (returns NULL), it never wraps. */
#ifndef SL_ALLOC_H
#define SL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* malloc(size); NULL on failure (size 0 returns a unique pointer). */
void *sl_malloc(size_t size);
/* calloc(n, size) with overflow check; NULL on failure. */
void *sl_calloc(size_t n, size_t size);
/* realloc(p, n * size) with overflow check; on failure p is untouched. */
void *sl_reallocarray(void *p, size_t n, size_t size);
/* aligned allocation (align a power of two >= sizeof(void *)). */
void *sl_aligned_alloc(size_t align, size_t size);
/* strdup; NULL on failure or when s is NULL. */
char *sl_strdup(const char *s);
void sl_free(void *p);
/* size bytes of fresh pages of their own (mmap), zeroed: for large buffers
 * that must go back to the system when freed, whatever the heap's state;
 * NULL on failure. Free with sl_pages_free and the same size. */
void *sl_pages_alloc(size_t size);
void sl_pages_free(void *p, size_t size);

/* Test hook: the n-th allocation from now (1 = the next) and every one after
 * it fail until sl_alloc_fail_after(0) resets. Thread-safe. */
void sl_alloc_fail_after(long n);

/* a * b into *out; false on overflow (out untouched). */
static inline bool sl_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
/* a + b into *out; false on overflow (out untouched). */
static inline bool sl_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
/* Rounds x up to a multiple of align (a power of two). Caller guarantees no
 * overflow (x <= UINT64_MAX - align). */
static inline uint64_t sl_align_up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* The struct of type `type` whose member `member` p points to (intrusive
 * links: a scheduler item inside an iteration, a task inside a request). */
#define sl_container_of(p, type, member) ((type *) ((char *) (p) -offsetof(type, member)))

#endif
