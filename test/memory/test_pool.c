#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "sl_alloc.h"
#include "sl_test.h"
#include "test_memory.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static sl_mem_pool *make_pool(uint64_t base, uint64_t size, uint64_t align)
{
    sl_mem_pool *p = NULL;
    assert_sl_ok(sl_mem_pool_create(base, size, align, &p));
    assert_non_null(p);
    assert_sl_ok(sl_mem_pool_check(p));
    return p;
}

static uint64_t alloc_ok(sl_mem_pool *p, uint64_t size)
{
    uint64_t addr = 0;
    assert_sl_ok(sl_mem_pool_alloc(p, size, &addr));
    assert_sl_ok(sl_mem_pool_check(p));
    return addr;
}

static void free_ok(sl_mem_pool *p, uint64_t addr)
{
    assert_sl_ok(sl_mem_pool_free(p, addr));
    assert_sl_ok(sl_mem_pool_check(p));
}

static void assert_layout(const sl_mem_pool *p, uint64_t used, uint64_t n_allocated,
                          uint64_t n_free_blocks, uint64_t largest_free)
{
    sl_mem_pool_stats st;
    sl_mem_pool_get_stats(p, &st);
    assert_int_equal(st.used, used);
    assert_int_equal(st.free, st.capacity - used);
    assert_int_equal(st.n_allocated, n_allocated);
    assert_int_equal(st.n_free_blocks, n_free_blocks);
    assert_int_equal(st.largest_free, largest_free);
}

/* A test that fails between sl_alloc_fail_after(n) and its reset must not
 * poison the tests after it. */
static int reset_alloc_failures(void **state)
{
    (void) state;
    sl_alloc_fail_after(0);
    return 0;
}

static void test_create_args(void **state)
{
    (void) state;
    sl_mem_pool *p = (sl_mem_pool *) 0x1;
    assert_sl_err(sl_mem_pool_create(0, MIB, 3, &p), SL_EINVAL);
    assert_sl_err(sl_mem_pool_create(0, MIB, 768, &p), SL_EINVAL);
    assert_sl_err(sl_mem_pool_create(128, MIB, 0, &p), SL_EINVAL);
    assert_sl_err(sl_mem_pool_create(4096 + 256, MIB, 4096, &p), SL_EINVAL);
    assert_sl_err(sl_mem_pool_create(UINT64_MAX - MIB + 1, MIB, 0, &p), SL_EINVAL);
    assert_sl_err(sl_mem_pool_create(0, MIB, 0, NULL), SL_EINVAL);
    assert_ptr_equal(p, (sl_mem_pool *) 0x1);

    /* align 0 means 256; size rounds down to it. */
    p = make_pool(256, 1000, 0);
    sl_mem_pool_stats st;
    sl_mem_pool_get_stats(p, &st);
    assert_int_equal(st.capacity, 768);
    assert_layout(p, 0, 0, 1, 768);
    assert_int_equal(alloc_ok(p, 1), 256);
    assert_int_equal(alloc_ok(p, 257), 512);
    assert_sl_err(sl_mem_pool_alloc(p, 1, &(uint64_t){0}), SL_EEXHAUSTED);
    sl_mem_pool_destroy(p);
    sl_mem_pool_destroy(NULL);
}

static void test_empty_capacity(void **state)
{
    (void) state;
    sl_mem_pool *p = make_pool(0, 255, 256);
    assert_layout(p, 0, 0, 0, 0);
    uint64_t addr = 7;
    assert_sl_err(sl_mem_pool_alloc(p, 1, &addr), SL_EEXHAUSTED);
    assert_int_equal(addr, 7);
    assert_sl_err(sl_mem_pool_free(p, 0), SL_EINVAL);
    assert_sl_ok(sl_mem_pool_check(p));
    sl_mem_pool_destroy(p);
}

static void test_rounding_alignment(void **state)
{
    (void) state;
    const uint64_t base = 3 * 4096;
    sl_mem_pool *p = make_pool(base, 64 * KIB, 4096);
    uint64_t a = alloc_ok(p, 1);
    uint64_t b = alloc_ok(p, 4096);
    uint64_t c = alloc_ok(p, 4097);
    assert_int_equal(a, base);
    assert_int_equal(b, base + 4096);
    assert_int_equal(c, base + 8192);
    assert_int_equal(sl_mem_pool_block_size(p, a), 4096);
    assert_int_equal(sl_mem_pool_block_size(p, b), 4096);
    assert_int_equal(sl_mem_pool_block_size(p, c), 8192);
    assert_int_equal(sl_mem_pool_block_size(p, c + 4096), 0);
    assert_int_equal(sl_mem_pool_block_size(p, base + 60 * KIB), 0);
    assert_layout(p, 16 * KIB, 3, 1, 48 * KIB);
    sl_mem_pool_destroy(p);

    /* Small alignments work the same way. */
    p = make_pool(0, 1024, 16);
    assert_int_equal(alloc_ok(p, 1), 0);
    assert_int_equal(alloc_ok(p, 17), 16);
    assert_int_equal(alloc_ok(p, 16), 48);
    sl_mem_pool_destroy(p);
}

static void test_best_fit_exact(void **state)
{
    (void) state;
    const uint64_t base = 0x10000;
    sl_mem_pool *p = make_pool(base, 64 * KIB, 256);
    /* Holes of 1024, 512 and 768 bytes separated by live 256-byte blocks,
     * then a large free tail. */
    uint64_t s0 = alloc_ok(p, 256);
    uint64_t h1 = alloc_ok(p, 1024);
    uint64_t s1 = alloc_ok(p, 256);
    uint64_t h2 = alloc_ok(p, 512);
    uint64_t s2 = alloc_ok(p, 256);
    uint64_t h3 = alloc_ok(p, 768);
    uint64_t s3 = alloc_ok(p, 256);
    assert_int_equal(s3, base + 3072);
    free_ok(p, h1);
    free_ok(p, h2);
    free_ok(p, h3);
    const uint64_t tail = 64 * KIB - 3328;
    assert_layout(p, 1024, 4, 4, tail);

    /* 513 rounds to 768: only the 768 hole is exact. */
    assert_int_equal(alloc_ok(p, 513), h3);
    assert_int_equal(alloc_ok(p, 300), h2);
    /* 256 fits the 1024 hole best (the tail is larger): split it. */
    assert_int_equal(alloc_ok(p, 1), h1);
    assert_layout(p, 1024 + 768 + 512 + 256, 7, 2, tail);
    assert_int_equal(alloc_ok(p, 700), h1 + 256);
    assert_layout(p, 1024 + 768 + 512 + 1024, 8, 1, tail);
    /* Nothing fits a hole any more: the tail is used. */
    assert_int_equal(alloc_ok(p, 256), base + 3328);
    (void) s0;
    (void) s1;
    (void) s2;
    sl_mem_pool_destroy(p);
}

static void test_best_fit_ties_lowest_address(void **state)
{
    (void) state;
    sl_mem_pool *p = make_pool(0, 64 * KIB, 0);
    uint64_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = alloc_ok(p, 512);
    /* Freed out of address order so that tree insertion order differs from
     * address order. */
    free_ok(p, x[5]);
    free_ok(p, x[1]);
    free_ok(p, x[3]);
    assert_int_equal(alloc_ok(p, 512), x[1]);
    assert_int_equal(alloc_ok(p, 400), x[3]);
    assert_int_equal(alloc_ok(p, 512), x[5]);
    assert_int_equal(alloc_ok(p, 512), 8 * 512);
    sl_mem_pool_destroy(p);
}

/* Four live 256-byte blocks a, b, c, d at 0..1024 and a free tail. */
static sl_mem_pool *four_blocks(uint64_t blk[4])
{
    sl_mem_pool *p = make_pool(0, 64 * KIB, 256);
    for (int i = 0; i < 4; i++)
        blk[i] = alloc_ok(p, 256);
    assert_layout(p, 1024, 4, 1, 63 * KIB);
    return p;
}

static void test_coalesce_left(void **state)
{
    (void) state;
    uint64_t blk[4];
    sl_mem_pool *p = four_blocks(blk);
    free_ok(p, blk[0]);
    assert_layout(p, 768, 3, 2, 63 * KIB);
    free_ok(p, blk[1]);
    assert_layout(p, 512, 2, 2, 63 * KIB);
    /* The merged block [0, 512) is the best fit for 512. */
    assert_int_equal(alloc_ok(p, 512), 0);
    assert_layout(p, 1024, 3, 1, 63 * KIB);
    sl_mem_pool_destroy(p);
}

static void test_coalesce_right(void **state)
{
    (void) state;
    uint64_t blk[4];
    sl_mem_pool *p = four_blocks(blk);
    free_ok(p, blk[2]);
    free_ok(p, blk[1]);
    assert_layout(p, 512, 2, 2, 63 * KIB);
    assert_int_equal(alloc_ok(p, 512), 256);
    /* Freeing the last live block merges it into the free tail. */
    free_ok(p, blk[3]);
    assert_layout(p, 768, 2, 1, 63 * KIB + 256);
    sl_mem_pool_destroy(p);
}

static void test_coalesce_both(void **state)
{
    (void) state;
    uint64_t blk[4];
    sl_mem_pool *p = four_blocks(blk);
    free_ok(p, blk[0]);
    free_ok(p, blk[2]);
    assert_layout(p, 512, 2, 3, 63 * KIB);
    free_ok(p, blk[1]);
    assert_layout(p, 256, 1, 2, 63 * KIB);
    assert_int_equal(alloc_ok(p, 768), 0);
    free_ok(p, 0);
    /* d between two free blocks: everything becomes one block again. */
    free_ok(p, blk[3]);
    assert_layout(p, 0, 0, 1, 64 * KIB);
    sl_mem_pool_destroy(p);
}

static void test_bad_free(void **state)
{
    (void) state;
    const uint64_t base = 1 * MIB;
    sl_mem_pool *p = make_pool(base, 64 * KIB, 256);
    uint64_t a = alloc_ok(p, 1024);
    uint64_t b = alloc_ok(p, 256);
    free_ok(p, a);
    assert_sl_err(sl_mem_pool_free(p, a), SL_EINVAL);       /* double free */
    assert_sl_err(sl_mem_pool_free(p, b + 1), SL_EINVAL);   /* unaligned */
    assert_sl_err(sl_mem_pool_free(p, b + 256), SL_EINVAL); /* start of the free tail */
    assert_sl_err(sl_mem_pool_free(p, 0), SL_EINVAL);       /* below the range */
    assert_sl_err(sl_mem_pool_free(p, base + 64 * KIB), SL_EINVAL);
    assert_sl_err(sl_mem_pool_free(p, UINT64_MAX), SL_EINVAL);
    assert_sl_err(sl_mem_pool_free(NULL, b), SL_EINVAL);
    uint64_t c = alloc_ok(p, 2048);
    assert_sl_err(sl_mem_pool_free(p, c + 1024), SL_EINVAL); /* inside a block */
    assert_sl_ok(sl_mem_pool_check(p));
    assert_layout(p, 256 + 2048, 2, 2, 64 * KIB - 256 - 2048 - 1024);
    free_ok(p, b);
    assert_sl_err(sl_mem_pool_free(p, b), SL_EINVAL);
    free_ok(p, c);
    assert_layout(p, 0, 0, 1, 64 * KIB);
    sl_mem_pool_destroy(p);
}

static void test_exhaustion(void **state)
{
    (void) state;
    sl_mem_pool *p = make_pool(0, 4 * KIB, 256);
    uint64_t blk[16];
    for (int i = 0; i < 16; i++)
        blk[i] = alloc_ok(p, 256);
    uint64_t addr = 42;
    assert_sl_err(sl_mem_pool_alloc(p, 1, &addr), SL_EEXHAUSTED);
    assert_int_equal(addr, 42);
    /* Fragmentation: 2 KiB free in 256-byte holes, yet 512 does not fit. */
    for (int i = 0; i < 16; i += 2)
        free_ok(p, blk[i]);
    sl_mem_pool_stats st;
    sl_mem_pool_get_stats(p, &st);
    assert_int_equal(st.free, 2 * KIB);
    assert_int_equal(st.largest_free, 256);
    assert_sl_err(sl_mem_pool_alloc(p, 512, &addr), SL_EEXHAUSTED);
    assert_sl_err(sl_mem_pool_alloc(p, 257, &addr), SL_EEXHAUSTED);
    assert_int_equal(addr, 42);
    assert_int_equal(alloc_ok(p, 256), blk[0]);
    assert_sl_ok(sl_mem_pool_check(p));
    sl_mem_pool_destroy(p);
}

static void test_size_zero(void **state)
{
    (void) state;
    sl_mem_pool *p = make_pool(0, 4 * KIB, 256);
    uint64_t addr = 42;
    assert_sl_err(sl_mem_pool_alloc(p, 0, &addr), SL_EINVAL);
    assert_sl_err(sl_mem_pool_alloc(p, 256, NULL), SL_EINVAL);
    assert_sl_err(sl_mem_pool_alloc(NULL, 256, &addr), SL_EINVAL);
    assert_int_equal(addr, 42);
    assert_layout(p, 0, 0, 1, 4 * KIB);
    sl_mem_pool_destroy(p);
}

static void test_full_capacity(void **state)
{
    (void) state;
    const uint64_t base = 256 * MIB;
    sl_mem_pool *p = make_pool(base, 16 * MIB + 100, 256);
    assert_int_equal(alloc_ok(p, 16 * MIB), base);
    assert_layout(p, 16 * MIB, 1, 0, 0);
    assert_sl_err(sl_mem_pool_alloc(p, 1, &(uint64_t){0}), SL_EEXHAUSTED);
    free_ok(p, base);
    assert_layout(p, 0, 0, 1, 16 * MIB);
    /* A size that rounds up to exactly the capacity fits too. */
    assert_int_equal(alloc_ok(p, 16 * MIB - 255), base);
    assert_int_equal(sl_mem_pool_block_size(p, base), 16 * MIB);
    sl_mem_pool_destroy(p);
}

static void test_huge_sizes(void **state)
{
    (void) state;
    uint64_t addr = 42;
    sl_mem_pool *p = make_pool(0, MIB, 256);
    assert_sl_err(sl_mem_pool_alloc(p, UINT64_MAX, &addr), SL_EEXHAUSTED);
    assert_sl_err(sl_mem_pool_alloc(p, UINT64_MAX - 255, &addr), SL_EEXHAUSTED);
    assert_sl_err(sl_mem_pool_alloc(p, UINT64_MAX - 256, &addr), SL_EEXHAUSTED);
    assert_sl_err(sl_mem_pool_alloc(p, MIB + 1, &addr), SL_EEXHAUSTED);
    assert_int_equal(addr, 42);
    assert_layout(p, 0, 0, 1, MIB);
    sl_mem_pool_destroy(p);

    /* The whole 64-bit space, less the last unaligned bytes. */
    const uint64_t cap = UINT64_MAX & ~255ull;
    p = make_pool(0, UINT64_MAX, 256);
    assert_layout(p, 0, 0, 1, cap);
    assert_sl_err(sl_mem_pool_alloc(p, UINT64_MAX, &addr), SL_EEXHAUSTED);
    assert_int_equal(alloc_ok(p, cap - 255), 0);
    assert_layout(p, cap, 1, 0, 0);
    free_ok(p, 0);
    uint64_t half = alloc_ok(p, 1ull << 63);
    uint64_t rest = alloc_ok(p, cap - (1ull << 63));
    assert_int_equal(half, 0);
    assert_int_equal(rest, 1ull << 63);
    free_ok(p, half);
    free_ok(p, rest);
    assert_layout(p, 0, 0, 1, cap);
    sl_mem_pool_destroy(p);

    /* A range that ends just below 2^64. */
    const uint64_t top = 0xFFFFFFFF00000000ull;
    p = make_pool(top, 0xFFFFFFFFull, 256);
    assert_int_equal(alloc_ok(p, (1ull << 31) + 1), top);
    assert_sl_err(sl_mem_pool_alloc(p, 1ull << 31, &addr), SL_EEXHAUSTED);
    uint64_t last = alloc_ok(p, (1ull << 31) - 512);
    assert_int_equal(last, top + (1ull << 31) + 256);
    assert_int_equal(last + sl_mem_pool_block_size(p, last), 0xFFFFFFFFFFFFFF00ull);
    assert_layout(p, 0xFFFFFF00ull, 2, 0, 0);
    sl_mem_pool_destroy(p);
}

static void test_host_alloc_failure(void **state)
{
    (void) state;
    /* create: the pool, then its first block. */
    sl_mem_pool *p = (sl_mem_pool *) 0x1;
    for (long n = 1; n <= 2; n++) {
        sl_alloc_fail_after(n);
        assert_sl_err(sl_mem_pool_create(0, MIB, 256, &p), SL_ENOMEM);
        assert_ptr_equal(p, (sl_mem_pool *) 0x1);
    }
    sl_alloc_fail_after(3);
    assert_sl_ok(sl_mem_pool_create(0, MIB, 256, &p));
    sl_alloc_fail_after(0);
    assert_sl_ok(sl_mem_pool_check(p));

    uint64_t a = alloc_ok(p, 1024);
    sl_mem_pool_stats before, after;
    sl_mem_pool_get_stats(p, &before);

    /* A split needs a node: it fails cleanly and changes nothing. */
    uint64_t addr = 42;
    sl_alloc_fail_after(1);
    assert_sl_err(sl_mem_pool_alloc(p, 256, &addr), SL_ENOMEM);
    assert_int_equal(addr, 42);
    assert_sl_ok(sl_mem_pool_check(p));
    sl_mem_pool_get_stats(p, &after);
    assert_memory_equal(&before, &after, sizeof(before));

    /* An exact fit and a free need no host memory at all. */
    assert_int_equal(alloc_ok(p, MIB - 1024), 1024);
    free_ok(p, a);
    free_ok(p, 1024);
    assert_layout(p, 0, 0, 1, MIB);
    sl_alloc_fail_after(0);

    /* Still fully usable afterwards. */
    assert_int_equal(alloc_ok(p, 256), 0);
    sl_mem_pool_destroy(p);

    /* An empty pool needs no block node. */
    sl_alloc_fail_after(2);
    assert_sl_ok(sl_mem_pool_create(0, 0, 256, &p));
    sl_alloc_fail_after(0);
    sl_mem_pool_destroy(p);
}

/* Many blocks: quick with O(log n) operations, very slow with a linear scan
 * of the free blocks per call. */
static void test_many_blocks(void **state)
{
    (void) state;
    enum { N = 1 << 16 };
    sl_mem_pool *p = make_pool(0, (uint64_t) N * 256, 256);
    for (uint64_t i = 0; i < N; i++) {
        uint64_t addr;
        assert_sl_ok(sl_mem_pool_alloc(p, 256, &addr));
        assert_int_equal(addr, i * 256);
    }
    for (uint64_t i = 0; i < N; i += 2)
        assert_sl_ok(sl_mem_pool_free(p, i * 256));
    assert_sl_ok(sl_mem_pool_check(p));
    assert_layout(p, (uint64_t) N / 2 * 256, N / 2, N / 2, 256);
    /* Equal holes everywhere: each refill takes the lowest. */
    for (uint64_t i = 0; i < N; i += 2) {
        uint64_t addr;
        assert_sl_ok(sl_mem_pool_alloc(p, 1, &addr));
        assert_int_equal(addr, i * 256);
    }
    for (uint64_t i = 0; i < N; i++)
        assert_sl_ok(sl_mem_pool_free(p, i * 256));
    assert_sl_ok(sl_mem_pool_check(p));
    assert_layout(p, 0, 0, 1, (uint64_t) N * 256);
    sl_mem_pool_destroy(p);
}

/* ---- randomized property test against a shadow model ---- */

struct live_block {
    uint64_t addr;
    uint64_t size;
};

struct shadow {
    uint64_t base, capacity, align;
    struct live_block *live; /* in allocation order */
    struct live_block *sorted;
    size_t n;
    uint64_t used;
};

/* What the model says about the free space: the gaps between live blocks. */
struct gaps {
    uint64_t n, largest;
    uint64_t best_addr, best_size; /* best fit for the asked size; size 0: none */
};

static int by_addr(const void *pa, const void *pb)
{
    const struct live_block *a = pa, *b = pb;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

/* Sorts the live blocks, asserts they lie in range and do not overlap, and
 * finds the smallest gap >= need, lowest address first. */
static void shadow_gaps(struct shadow *m, uint64_t need, struct gaps *g)
{
    memcpy(m->sorted, m->live, m->n * sizeof(*m->live));
    qsort(m->sorted, m->n, sizeof(*m->sorted), by_addr);
    memset(g, 0, sizeof(*g));
    uint64_t cursor = m->base;
    const uint64_t end = m->base + m->capacity;
    for (size_t k = 0; k <= m->n; k++) {
        uint64_t next = k < m->n ? m->sorted[k].addr : end;
        assert_true(next >= cursor); /* no overlap, nothing below base */
        uint64_t gap = next - cursor;
        if (gap > 0) {
            g->n++;
            if (gap > g->largest)
                g->largest = gap;
            if (need > 0 && gap >= need && (g->best_size == 0 || gap < g->best_size)) {
                g->best_size = gap;
                g->best_addr = cursor;
            }
        }
        if (k < m->n) {
            assert_true(m->sorted[k].size <= end - m->sorted[k].addr);
            cursor = m->sorted[k].addr + m->sorted[k].size;
        }
    }
}

static void shadow_check(sl_mem_pool *p, struct shadow *m)
{
    assert_sl_ok(sl_mem_pool_check(p));
    struct gaps g;
    shadow_gaps(m, 0, &g);
    sl_mem_pool_stats st;
    sl_mem_pool_get_stats(p, &st);
    assert_int_equal(st.capacity, m->capacity);
    assert_int_equal(st.used, m->used);
    assert_int_equal(st.free, m->capacity - m->used);
    assert_int_equal(st.n_allocated, m->n);
    assert_int_equal(st.n_free_blocks, g.n);
    assert_int_equal(st.largest_free, g.largest);
}

static uint64_t random_size(uint64_t *rng, uint64_t capacity)
{
    uint64_t pick = test_rng_next(rng) % 100;
    if (pick < 60)
        return test_rng_range(rng, 1, 4 * KIB);
    if (pick < 90)
        return test_rng_range(rng, 1, 64 * KIB);
    return test_rng_range(rng, 1, capacity / 4);
}

static void random_alloc(sl_mem_pool *p, struct shadow *m, uint64_t *rng)
{
    uint64_t size = random_size(rng, m->capacity);
    uint64_t need = (size + m->align - 1) & ~(m->align - 1);
    struct gaps g;
    shadow_gaps(m, need, &g);
    /* Sometimes the host heap runs dry: only a split needs a node. */
    bool starve = test_rng_next(rng) % 16 == 0;
    if (starve)
        sl_alloc_fail_after(1);
    uint64_t addr = 1;
    int rc = sl_mem_pool_alloc(p, size, &addr);
    sl_alloc_fail_after(0);
    if (g.best_size == 0) {
        assert_sl_err(rc, SL_EEXHAUSTED);
    } else if (starve && g.best_size > need) {
        assert_sl_err(rc, SL_ENOMEM);
    } else {
        assert_sl_ok(rc);
        assert_int_equal(addr, g.best_addr);
        assert_int_equal(sl_mem_pool_block_size(p, addr), need);
        m->live[m->n++] = (struct live_block){addr, need};
        m->used += need;
        return;
    }
    assert_int_equal(addr, 1);
}

static void shadow_remove(struct shadow *m, size_t k)
{
    m->used -= m->live[k].size;
    m->live[k] = m->live[--m->n];
}

static void random_free(sl_mem_pool *p, struct shadow *m, uint64_t *rng)
{
    size_t k = test_rng_next(rng) % m->n;
    uint64_t addr = m->live[k].addr;
    assert_sl_ok(sl_mem_pool_free(p, addr));
    shadow_remove(m, k);
    if (test_rng_next(rng) % 8 == 0)
        assert_sl_err(sl_mem_pool_free(p, addr), SL_EINVAL);
}

/* Frees an arbitrary address: most are not block starts and must be
 * refused without effect. */
static void random_wild_free(sl_mem_pool *p, struct shadow *m, uint64_t *rng)
{
    uint64_t addr = m->base + test_rng_next(rng) % (m->capacity + 4 * m->align);
    if (test_rng_next(rng) % 2)
        addr &= ~(m->align - 1);
    for (size_t k = 0; k < m->n; k++) {
        if (m->live[k].addr == addr) {
            assert_sl_ok(sl_mem_pool_free(p, addr));
            shadow_remove(m, k);
            return;
        }
    }
    assert_sl_err(sl_mem_pool_free(p, addr), SL_EINVAL);
}

static void random_ops(uint64_t base, uint64_t capacity, uint64_t align, uint64_t seed, int steps)
{
    sl_mem_pool *p = make_pool(base, capacity, align);
    struct shadow m = {.base = base, .capacity = capacity, .align = align};
    size_t max_live = capacity / align;
    m.live = calloc(max_live, sizeof(*m.live));
    m.sorted = calloc(max_live, sizeof(*m.sorted));
    assert_non_null(m.live);
    assert_non_null(m.sorted);

    uint64_t rng = seed;
    int exhausted = 0;
    for (int step = 0; step < steps; step++) {
        /* Alternate filling and draining phases so that the pool both
         * fragments and runs out. */
        unsigned alloc_pct = (step / 500) % 2 ? 35 : 70;
        uint64_t pick = test_rng_next(&rng) % 100;
        if (pick < 3) {
            random_wild_free(p, &m, &rng);
        } else if (m.n == 0 || pick < alloc_pct) {
            uint64_t n_before = m.n;
            random_alloc(p, &m, &rng);
            exhausted += m.n == n_before;
        } else {
            random_free(p, &m, &rng);
        }
        shadow_check(p, &m);
    }
    assert_true(exhausted > 0); /* the run did reach the edge cases */

    while (m.n > 0) {
        random_free(p, &m, &rng);
        shadow_check(p, &m);
    }
    assert_layout(p, 0, 0, 1, capacity);
    free(m.sorted);
    free(m.live);
    sl_mem_pool_destroy(p);
}

static void test_random_256(void **state)
{
    (void) state;
    random_ops(1ull << 40, 4 * MIB, 256, 0x5A105, 20000);
}

static void test_random_4096(void **state)
{
    (void) state;
    random_ops(0, 8 * MIB, 4096, 0xC0FFEE, 10000);
}

int test_pool_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_args, reset_alloc_failures),
        cmocka_unit_test_teardown(test_empty_capacity, reset_alloc_failures),
        cmocka_unit_test_teardown(test_rounding_alignment, reset_alloc_failures),
        cmocka_unit_test_teardown(test_best_fit_exact, reset_alloc_failures),
        cmocka_unit_test_teardown(test_best_fit_ties_lowest_address, reset_alloc_failures),
        cmocka_unit_test_teardown(test_coalesce_left, reset_alloc_failures),
        cmocka_unit_test_teardown(test_coalesce_right, reset_alloc_failures),
        cmocka_unit_test_teardown(test_coalesce_both, reset_alloc_failures),
        cmocka_unit_test_teardown(test_bad_free, reset_alloc_failures),
        cmocka_unit_test_teardown(test_exhaustion, reset_alloc_failures),
        cmocka_unit_test_teardown(test_size_zero, reset_alloc_failures),
        cmocka_unit_test_teardown(test_full_capacity, reset_alloc_failures),
        cmocka_unit_test_teardown(test_huge_sizes, reset_alloc_failures),
        cmocka_unit_test_teardown(test_host_alloc_failure, reset_alloc_failures),
        cmocka_unit_test_teardown(test_many_blocks, reset_alloc_failures),
        cmocka_unit_test_teardown(test_random_256, reset_alloc_failures),
        cmocka_unit_test_teardown(test_random_4096, reset_alloc_failures),
    };
    return cmocka_run_group_tests_name("memory/pool", tests, NULL, NULL);
}
