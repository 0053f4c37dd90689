#include "sl_map.h"
#include "sl_alloc.h"
#include "sl_error.h"

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Fibonacci hashing spreads sequential ids across the table */
    return (size_t) ((key * 0x9E3779B97F4A7C15ull) >> 7) & (cap - 1);
}

void sl_map_fini(sl_map *m)
{
    sl_free(m->keys);
    sl_free(m->vals);
    *m = (sl_map){0};
}

static int grow(sl_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = sl_calloc(cap, sizeof *keys);
    void **vals = sl_calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        sl_free(keys);
        sl_free(vals);
        return SL_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = slot_of(m->keys[i], cap);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    sl_free(m->keys);
    sl_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return SL_OK;
}

int sl_map_put(sl_map *m, uint64_t key, void *val)
{
    if (!key)
        return SL_EINVAL;
    if ((m->count + 1) * 4 > m->cap * 3) {
        int rc = grow(m);
        if (rc)
            return rc;
    }
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->count++;
    m->keys[i] = key;
    m->vals[i] = val;
    return SL_OK;
}

void *sl_map_get(const sl_map *m, uint64_t key)
{
    if (!key || !m->cap)
        return NULL;
    for (size_t i = slot_of(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key)
            return m->vals[i];
    }
    return NULL;
}

void *sl_map_del(sl_map *m, uint64_t key)
{
    if (!key || !m->cap)
        return NULL;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->keys[i] != key) {
        if (!m->keys[i])
            return NULL;
        i = (i + 1) & mask;
    }
    void *val = m->vals[i];
    /* backward-shift: pull later entries of the probe run into the hole */
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->count--;
    return val;
}

int sl_map_next(const sl_map *m, size_t *cursor, uint64_t *key, void **val)
{
    for (size_t i = *cursor; i < m->cap; i++) {
        if (m->keys[i]) {
            if (key)
                *key = m->keys[i];
            if (val)
                *val = m->vals[i];
            *cursor = i + 1;
            return 1;
        }
    }
    return 0;
}
