/* A hash map from nonzero uint64 keys to pointers (open addressing, linear
 * probing, backward-shift deletion). Used for the server's id tables.
 * Not thread-safe: the owner serialises calls. */
#ifndef SL_MAP_H
#define SL_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_map {
    uint64_t *keys; /* 0 = empty slot */
    void **vals;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t count;
} sl_map;

/* A zeroed sl_map is an empty map; sl_map_fini frees its storage. */
void sl_map_fini(sl_map *m);
/* Inserts or replaces key (nonzero). Errors: SL_EINVAL (key 0), SL_ENOMEM. */
int sl_map_put(sl_map *m, uint64_t key, void *val);
/* The value for key, or NULL. */
void *sl_map_get(const sl_map *m, uint64_t key);
/* Removes key; returns its value, or NULL if absent. */
void *sl_map_del(sl_map *m, uint64_t key);

/* Iteration: for (size_t i = 0; sl_map_next(m, &i, &k, &v);) ... The map must
 * not be modified during iteration. */
int sl_map_next(const sl_map *m, size_t *cursor, uint64_t *key, void **val);

#endif
