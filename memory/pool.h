/* Best-fit allocator over an abstract address range [base, base + size).
 *
 * The pool hands out offsets, never touches the memory itself (it may be
 * device memory), and keeps all metadata on the host. Every block is aligned
 * to the pool's alignment (a power of two, default 256) and sizes are rounded
 * up to it. Free blocks coalesce with free neighbours at once, so there are
 * never two adjacent free blocks. alloc and free are O(log n) in the number
 * of blocks (free blocks indexed by (size, address) in a balanced tree; all
 * blocks by address for free and coalescing).
 *
 * Not thread-safe: the owner serialises calls. */
#ifndef SL_MEM_POOL_H
#define SL_MEM_POOL_H

#include <stdint.h>

typedef struct sl_mem_pool sl_mem_pool;

typedef struct sl_mem_pool_stats {
    uint64_t capacity;      /* size given at init (rounded down to alignment) */
    uint64_t used;          /* bytes in allocated blocks (after rounding) */
    uint64_t free;          /* capacity - used */
    uint64_t largest_free;  /* largest single free block */
    uint64_t n_allocated;   /* allocated blocks */
    uint64_t n_free_blocks; /* free blocks (fragments) */
} sl_mem_pool_stats;

/* Creates a pool over [base, base + size). align must be a power of two
 * (0 = 256). size is rounded down to the alignment; a capacity of 0 is a
 * valid, always-exhausted pool. Errors: SL_EINVAL (bad align, base not
 * aligned, base + capacity overflows, out NULL), SL_ENOMEM.
 * On success *out is owned by the caller (sl_mem_pool_destroy). */
int sl_mem_pool_create(uint64_t base, uint64_t size, uint64_t align, sl_mem_pool **out);
/* Frees the pool's metadata (live allocations are forgotten). NULL is fine. */
void sl_mem_pool_destroy(sl_mem_pool *p);

/* Allocates the smallest free block that fits size (rounded up to the
 * alignment); ties go to the lowest address. Writes the block's address.
 * Errors: SL_EINVAL (size 0), SL_EEXHAUSTED (no free block fits: capacity
 * or fragmentation — compare stats.free with the size to tell which),
 * SL_ENOMEM (host metadata; the pool is unchanged). Never blocks. */
int sl_mem_pool_alloc(sl_mem_pool *p, uint64_t size, uint64_t *addr);

/* Frees the block that starts at addr and merges it with free neighbours.
 * Never allocates, so it cannot fail for lack of memory. Errors: SL_EINVAL
 * when addr is not the start of an allocated block (double free, wild
 * address). */
int sl_mem_pool_free(sl_mem_pool *p, uint64_t addr);

/* Size of the allocated block at addr (after rounding), or 0 if none. */
uint64_t sl_mem_pool_block_size(const sl_mem_pool *p, uint64_t addr);

void sl_mem_pool_get_stats(const sl_mem_pool *p, sl_mem_pool_stats *st);

/* Checks every internal invariant (tree order and balance, address list
 * contiguity, no adjacent free blocks, counters). Returns SL_OK or
 * SL_EINTERNAL (SL_EINVAL for a NULL pool). For tests; O(n log n). */
int sl_mem_pool_check(const sl_mem_pool *p);

#endif
