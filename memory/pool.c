#include "pool.h"

#include <stdbool.h>
#include <stddef.h>

#include "sl_alloc.h"
#include "sl_error.h"

/* One contiguous piece of the range, free or allocated. Every block sits in
 * the address-ordered list; a free block also sits in the free tree (keyed by
 * size, then address) and an allocated one in the allocation tree (keyed by
 * address). A block is in exactly one tree at a time, so one set of tree links
 * serves both. */
struct block {
    uint64_t addr;
    uint64_t size;
    struct block *prev, *next; /* address order */
    struct block *left, *right;
    int height; /* AVL height; a leaf is 1 */
    bool is_free;
};

struct sl_mem_pool {
    uint64_t base;
    uint64_t capacity;
    uint64_t align;
    struct block *head;       /* lowest-address block, NULL when capacity is 0 */
    struct block *free_root;  /* by (size, addr): best fit is a lower bound */
    struct block *alloc_root; /* by addr: free() finds its block */
    uint64_t used;
    uint64_t n_allocated;
    uint64_t n_free_blocks;
};

/* ---- AVL tree over blocks ----
 *
 * AVL rather than a randomised tree so that O(log n) is a worst case, not an
 * expectation. Keys are unique: (size, addr) in the free tree because
 * addresses are, and addr alone in the allocation tree. A block's key must
 * not change while it is in a tree, so callers remove, edit, then reinsert. */

static int height(const struct block *n)
{
    return n ? n->height : 0;
}

static void update_height(struct block *n)
{
    int hl = height(n->left), hr = height(n->right);
    n->height = 1 + (hl > hr ? hl : hr);
}

static struct block *rotate_right(struct block *n)
{
    struct block *l = n->left;
    n->left = l->right;
    l->right = n;
    update_height(n);
    update_height(l);
    return l;
}

static struct block *rotate_left(struct block *n)
{
    struct block *r = n->right;
    n->right = r->left;
    r->left = n;
    update_height(n);
    update_height(r);
    return r;
}

static struct block *rebalance(struct block *n)
{
    update_height(n);
    int balance = height(n->left) - height(n->right);
    if (balance > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (balance < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

/* Strict order of a before b in the free tree (by_size) or the allocation
 * tree. */
static bool before(const struct block *a, const struct block *b, bool by_size)
{
    if (by_size && a->size != b->size)
        return a->size < b->size;
    return a->addr < b->addr;
}

static struct block *tree_insert(struct block *root, struct block *n, bool by_size)
{
    if (!root) {
        n->left = n->right = NULL;
        n->height = 1;
        return n;
    }
    if (before(n, root, by_size))
        root->left = tree_insert(root->left, n, by_size);
    else
        root->right = tree_insert(root->right, n, by_size);
    return rebalance(root);
}

static struct block *tree_detach_min(struct block *root, struct block **min)
{
    if (!root->left) {
        *min = root;
        return root->right;
    }
    root->left = tree_detach_min(root->left, min);
    return rebalance(root);
}

/* Removes n, which must be in the tree rooted at root. */
static struct block *tree_remove(struct block *root, struct block *n, bool by_size)
{
    if (root == n) {
        if (!n->left)
            return n->right;
        if (!n->right)
            return n->left;
        struct block *succ;
        struct block *right = tree_detach_min(n->right, &succ);
        succ->left = n->left;
        succ->right = right;
        return rebalance(succ);
    }
    if (before(n, root, by_size))
        root->left = tree_remove(root->left, n, by_size);
    else
        root->right = tree_remove(root->right, n, by_size);
    return rebalance(root);
}

/* The smallest free block of at least size bytes; on equal sizes the lowest
 * address, since (size, addr) order puts it first. */
static struct block *free_lower_bound(struct block *n, uint64_t size)
{
    struct block *best = NULL;
    while (n) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

static struct block *alloc_find(struct block *n, uint64_t addr)
{
    while (n && n->addr != addr)
        n = addr < n->addr ? n->left : n->right;
    return n;
}

/* Finds n by its key; used by the checker to prove n is reachable. */
static bool tree_contains(const struct block *root, const struct block *n, bool by_size)
{
    while (root && root != n)
        root = before(n, root, by_size) ? root->left : root->right;
    return root == n;
}

/* ---- pool ---- */

int sl_mem_pool_create(uint64_t base, uint64_t size, uint64_t align, sl_mem_pool **out)
{
    if (!out)
        return SL_EINVAL;
    if (align == 0)
        align = 256;
    if ((align & (align - 1)) != 0 || (base & (align - 1)) != 0)
        return SL_EINVAL;
    uint64_t capacity = size & ~(align - 1);
    uint64_t end;
    /* The end address must be representable: the checker and callers compare
     * against it. */
    if (!sl_add_ok(base, capacity, &end))
        return SL_EINVAL;

    sl_mem_pool *p = sl_calloc(1, sizeof(*p));
    if (!p)
        return SL_ENOMEM;
    p->base = base;
    p->capacity = capacity;
    p->align = align;
    if (capacity > 0) {
        struct block *all = sl_calloc(1, sizeof(*all));
        if (!all)
            goto out_free_pool;
        all->addr = base;
        all->size = capacity;
        all->is_free = true;
        p->head = all;
        p->free_root = tree_insert(NULL, all, true);
        p->n_free_blocks = 1;
    }
    *out = p;
    return SL_OK;

out_free_pool:
    sl_free(p);
    return SL_ENOMEM;
}

void sl_mem_pool_destroy(sl_mem_pool *p)
{
    if (!p)
        return;
    struct block *b = p->head;
    while (b) {
        struct block *next = b->next;
        sl_free(b);
        b = next;
    }
    sl_free(p);
}

int sl_mem_pool_alloc(sl_mem_pool *p, uint64_t size, uint64_t *addr)
{
    if (!p || !addr || size == 0)
        return SL_EINVAL;
    /* Also guards the rounding below: capacity is aligned, so rounding any
     * size <= capacity cannot overflow. */
    if (size > p->capacity)
        return SL_EEXHAUSTED;
    uint64_t need = sl_align_up(size, p->align);

    struct block *b = free_lower_bound(p->free_root, need);
    if (!b)
        return SL_EEXHAUSTED;

    /* Get the only host allocation done before touching any structure, so
     * that SL_ENOMEM leaves the pool exactly as it was. */
    struct block *rest = NULL;
    if (b->size > need) {
        rest = sl_calloc(1, sizeof(*rest));
        if (!rest)
            return SL_ENOMEM;
    }

    p->free_root = tree_remove(p->free_root, b, true);
    p->n_free_blocks--;
    if (rest) {
        /* The remainder stays at the high end so that allocations pack
         * towards the low end. It cannot touch another free block: b's right
         * neighbour was not free (free neighbours are always merged). */
        rest->addr = b->addr + need;
        rest->size = b->size - need;
        rest->is_free = true;
        rest->prev = b;
        rest->next = b->next;
        if (b->next)
            b->next->prev = rest;
        b->next = rest;
        b->size = need;
        p->free_root = tree_insert(p->free_root, rest, true);
        p->n_free_blocks++;
    }
    b->is_free = false;
    p->alloc_root = tree_insert(p->alloc_root, b, false);
    p->n_allocated++;
    p->used += need;
    *addr = b->addr;
    return SL_OK;
}

/* Absorbs b's right neighbour victim (free, already out of its tree) into b. */
static void absorb_next(sl_mem_pool *p, struct block *b)
{
    struct block *victim = b->next;
    b->size += victim->size;
    b->next = victim->next;
    if (victim->next)
        victim->next->prev = b;
    p->n_free_blocks--;
    sl_free(victim);
}

int sl_mem_pool_free(sl_mem_pool *p, uint64_t addr)
{
    if (!p)
        return SL_EINVAL;
    struct block *b = alloc_find(p->alloc_root, addr);
    if (!b)
        return SL_EINVAL;

    p->alloc_root = tree_remove(p->alloc_root, b, false);
    p->n_allocated--;
    p->used -= b->size;
    b->is_free = true;
    p->n_free_blocks++;

    /* Neighbours leave the free tree before their size changes: the tree is
     * keyed by size. */
    if (b->next && b->next->is_free) {
        p->free_root = tree_remove(p->free_root, b->next, true);
        absorb_next(p, b);
    }
    if (b->prev && b->prev->is_free) {
        struct block *left = b->prev;
        p->free_root = tree_remove(p->free_root, left, true);
        absorb_next(p, left);
        b = left;
    }
    p->free_root = tree_insert(p->free_root, b, true);
    return SL_OK;
}

uint64_t sl_mem_pool_block_size(const sl_mem_pool *p, uint64_t addr)
{
    if (!p)
        return 0;
    const struct block *b = alloc_find(p->alloc_root, addr);
    return b ? b->size : 0;
}

void sl_mem_pool_get_stats(const sl_mem_pool *p, sl_mem_pool_stats *st)
{
    if (!p || !st)
        return;
    const struct block *largest = p->free_root;
    while (largest && largest->right)
        largest = largest->right;
    st->capacity = p->capacity;
    st->used = p->used;
    st->free = p->capacity - p->used;
    st->largest_free = largest ? largest->size : 0;
    st->n_allocated = p->n_allocated;
    st->n_free_blocks = p->n_free_blocks;
}

/* ---- invariant checker ---- */

/* Verifies order, heights, balance and that every node is in the right tree;
 * counts nodes into *count. Returns the height, or -1 on a violation. lo and
 * hi bound the subtree (NULL: unbounded). */
static int check_tree(const struct block *n, bool by_size, const struct block *lo,
                      const struct block *hi, uint64_t *count)
{
    if (!n)
        return 0;
    if (n->is_free != by_size)
        return -1;
    if ((lo && !before(lo, n, by_size)) || (hi && !before(n, hi, by_size)))
        return -1;
    int hl = check_tree(n->left, by_size, lo, n, count);
    int hr = check_tree(n->right, by_size, n, hi, count);
    if (hl < 0 || hr < 0 || hl - hr > 1 || hr - hl > 1)
        return -1;
    int h = 1 + (hl > hr ? hl : hr);
    if (n->height != h)
        return -1;
    (*count)++;
    return h;
}

int sl_mem_pool_check(const sl_mem_pool *p)
{
    if (!p)
        return SL_EINVAL;
    uint64_t n_free = 0, n_alloc = 0, used = 0, expect_addr = p->base;
    const struct block *prev = NULL;
    for (const struct block *b = p->head; b; prev = b, b = b->next) {
        if (b->prev != prev || b->addr != expect_addr || b->size == 0)
            return SL_EINTERNAL;
        if ((b->addr | b->size) & (p->align - 1))
            return SL_EINTERNAL;
        if (b->size > p->base + p->capacity - b->addr)
            return SL_EINTERNAL;
        if (b->is_free && prev && prev->is_free)
            return SL_EINTERNAL;
        if (!tree_contains(b->is_free ? p->free_root : p->alloc_root, b, b->is_free))
            return SL_EINTERNAL;
        if (b->is_free) {
            n_free++;
        } else {
            n_alloc++;
            used += b->size;
        }
        expect_addr = b->addr + b->size;
    }
    if (expect_addr != p->base + p->capacity)
        return SL_EINTERNAL;
    if (n_free != p->n_free_blocks || n_alloc != p->n_allocated || used != p->used)
        return SL_EINTERNAL;

    /* Every listed block was found in its tree; equal node counts then mean
     * the trees hold nothing else. */
    uint64_t tree_free = 0, tree_alloc = 0;
    if (check_tree(p->free_root, true, NULL, NULL, &tree_free) < 0 ||
        check_tree(p->alloc_root, false, NULL, NULL, &tree_alloc) < 0)
        return SL_EINTERNAL;
    if (tree_free != n_free || tree_alloc != n_alloc)
        return SL_EINTERNAL;
    return SL_OK;
}
