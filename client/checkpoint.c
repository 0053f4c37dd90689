/* Checkpoints: named tensors of a session saved to a file and loaded back
 * (the format is documented in salus.h, salus_model_save). A file is read
 * whole and checked before any tensor is written, so a file that does not
 * fit the model changes nothing. Saving writes a temporary file next to
 * the target and renames it over the target: a crash leaves the old
 * checkpoint or the new one, never half of one. */
#include "checkpoint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Version 1 holds f32 tensors only; version 2 adds a dtype byte to each
 * entry. A checkpoint of f32 tensors is written as version 1, which
 * readers of either version take. */
#define MAGIC "SALUSCK1"
#define MAGIC2 "SALUSCK2"
#define MAX_NAME 255
#define MAX_ENTRIES 65536

__attribute__((format(printf, 3, 4))) static int seterr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return SL_EINVAL;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t) (v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t) p[i] << (8 * i);
    return v;
}

int sl_ckpt_save(salus_session *s, const sl_named *t, unsigned n, const char *path, char *err,
                 size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long) getpid()) >= (int) sizeof tmp)
        return seterr(err, len, "path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return seterr(err, len, "cannot create %s: %s", tmp, strerror(errno));
    int rc = SL_OK;
    bool v2 = false;
    for (unsigned i = 0; i < n; i++)
        v2 |= t[i].shape.dtype != SL_F32;
    uint8_t head[12];
    memcpy(head, v2 ? MAGIC2 : MAGIC, 8);
    put_u32(head + 8, n);
    if (fwrite(head, 1, sizeof head, f) != sizeof head)
        rc = seterr(err, len, "writing %s: %s", tmp, strerror(errno));
    for (unsigned i = 0; i < n && rc == SL_OK; i++) {
        size_t name_len = strlen(t[i].name), bytes = sl_shape_bytes(&t[i].shape);
        uint8_t rec[2 + MAX_NAME + 3 + 8 * SL_MAX_DIMS];
        size_t k = 0;
        rec[k++] = (uint8_t) name_len;
        rec[k++] = (uint8_t) (name_len >> 8);
        memcpy(rec + k, t[i].name, name_len);
        k += name_len;
        rec[k++] = (uint8_t) t[i].kind;
        if (v2)
            rec[k++] = t[i].shape.dtype;
        rec[k++] = t[i].shape.ndim;
        for (unsigned d = 0; d < t[i].shape.ndim; d++, k += 8)
            for (int b = 0; b < 8; b++)
                rec[k + b] = (uint8_t) ((uint64_t) t[i].shape.dims[d] >> (8 * b));
        uint8_t *data = sl_calloc(bytes + 1, 1);
        if (!data) {
            rc = SL_ENOMEM;
            seterr(err, len, "out of memory");
            break;
        }
        rc = salus_tensor_read(s, t[i].tensor, data, bytes);
        if (rc)
            seterr(err, len, "reading %s: %s", t[i].name, salus_last_error(s->client));
        /* elements are written as the host holds them: little-endian hosts
         * only (every host salus builds for) */
        else if (fwrite(rec, 1, k, f) != k || fwrite(data, 1, bytes, f) != bytes)
            rc = seterr(err, len, "writing %s: %s", tmp, strerror(errno));
        sl_free(data);
    }
    if (fclose(f) != 0 && rc == SL_OK)
        rc = seterr(err, len, "writing %s: %s", tmp, strerror(errno));
    if (rc == SL_OK && rename(tmp, path) != 0)
        rc = seterr(err, len, "renaming %s to %s: %s", tmp, path, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

typedef struct entry {
    char name[MAX_NAME + 1];
    sl_shape shape;
    long offset; /* of the data in the file */
    bool used;
} entry;

/* Reads exactly n bytes or fails naming the file. */
static int need(FILE *f, void *buf, size_t n, const char *path, char *err, size_t len)
{
    if (fread(buf, 1, n, f) == n)
        return SL_OK;
    return seterr(err, len, "%s: truncated checkpoint", path);
}

int sl_ckpt_load(salus_session *s, const sl_named *t, unsigned n, const char *path, char *err,
                 size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return seterr(err, len, "cannot open %s: %s", path, strerror(errno));
    uint8_t head[12];
    int rc = need(f, head, sizeof head, path, err, len);
    bool v2 = rc == SL_OK && memcmp(head, MAGIC2, 8) == 0;
    if (rc == SL_OK && !v2 && memcmp(head, MAGIC, 8) != 0)
        rc = seterr(err, len, "%s is not a salus checkpoint (no %s or %s magic)", path, MAGIC,
                    MAGIC2);
    uint32_t count = rc == SL_OK ? (uint32_t) get_le(head + 8, 4) : 0;
    if (rc == SL_OK && count > MAX_ENTRIES)
        rc = seterr(err, len, "%s: %u entries, more than %d", path, count, MAX_ENTRIES);
    entry *e = rc == SL_OK ? sl_calloc(count ? count : 1, sizeof *e) : NULL;
    if (rc == SL_OK && !e)
        rc = seterr(err, len, "out of memory"), rc = SL_ENOMEM;
    /* the file's index: names, shapes, where the data is */
    for (uint32_t i = 0; i < count && rc == SL_OK; i++) {
        uint8_t b[8];
        if ((rc = need(f, b, 2, path, err, len)) != SL_OK)
            break;
        size_t name_len = (size_t) get_le(b, 2);
        if (name_len > MAX_NAME) {
            rc = seterr(err, len, "%s: entry %u: name longer than %d", path, i, MAX_NAME);
            break;
        }
        /* kind, [dtype,] rank */
        if ((rc = need(f, e[i].name, name_len, path, err, len)) != SL_OK ||
            (rc = need(f, b, v2 ? 3 : 2, path, err, len)) != SL_OK)
            break;
        uint8_t dtype = v2 ? b[1] : SL_F32, rank = b[v2 ? 2 : 1];
        e[i].shape = (sl_shape){.dtype = dtype, .ndim = rank};
        if (dtype >= SL_DTYPE_COUNT) {
            rc = seterr(err, len, "%s: %s: unknown dtype %u", path, e[i].name, dtype);
            break;
        }
        if (rank > SL_MAX_DIMS) {
            rc = seterr(err, len, "%s: %s: rank %u", path, e[i].name, rank);
            break;
        }
        for (unsigned d = 0; d < e[i].shape.ndim && rc == SL_OK; d++)
            if ((rc = need(f, b, 8, path, err, len)) == SL_OK)
                e[i].shape.dims[d] = (int64_t) get_le(b, 8);
        if (rc == SL_OK && !sl_shape_valid(&e[i].shape))
            rc = seterr(err, len, "%s: %s: invalid shape", path, e[i].name);
        if (rc)
            break;
        e[i].offset = ftell(f);
        if (fseek(f, (long) sl_shape_bytes(&e[i].shape), SEEK_CUR) != 0)
            rc = seterr(err, len, "%s: truncated checkpoint", path);
    }
    if (rc == SL_OK) {
        long here = ftell(f);
        if (fseek(f, 0, SEEK_END) != 0 || ftell(f) != here)
            rc = seterr(err, len, "%s: truncated, or bytes after the last entry", path);
    }
    /* every tensor of the model, with its shape; nothing else */
    int *match = rc == SL_OK ? sl_calloc(n ? n : 1, sizeof *match) : NULL;
    if (rc == SL_OK && !match)
        rc = seterr(err, len, "out of memory"), rc = SL_ENOMEM;
    for (unsigned i = 0; i < n && rc == SL_OK; i++) {
        match[i] = -1;
        for (uint32_t j = 0; j < count; j++)
            if (!e[j].used && strcmp(e[j].name, t[i].name) == 0) {
                match[i] = (int) j;
                e[j].used = true;
                break;
            }
        char a[96], b[96];
        if (match[i] < 0)
            rc = seterr(err, len, "%s has no tensor %s", path, t[i].name);
        else if (!sl_shape_equal(&e[match[i]].shape, &t[i].shape))
            rc = seterr(err, len, "%s: %s is %s in the file, %s in the model", path, t[i].name,
                        sl_shape_str(&e[match[i]].shape, a, sizeof a),
                        sl_shape_str(&t[i].shape, b, sizeof b));
    }
    for (uint32_t j = 0; j < count && rc == SL_OK; j++)
        if (!e[j].used)
            rc = seterr(err, len, "%s: tensor %s is not in the model", path, e[j].name);
    for (unsigned i = 0; i < n && rc == SL_OK; i++) {
        size_t bytes = sl_shape_bytes(&t[i].shape);
        uint8_t *data = sl_calloc(bytes + 1, 1);
        if (!data) {
            rc = SL_ENOMEM;
            seterr(err, len, "out of memory");
            break;
        }
        if (fseek(f, e[match[i]].offset, SEEK_SET) != 0 || fread(data, 1, bytes, f) != bytes)
            rc = seterr(err, len, "%s: cannot read %s", path, t[i].name);
        else if ((rc = salus_tensor_write(s, t[i].tensor, data, bytes)) != SL_OK)
            seterr(err, len, "writing %s: %s", t[i].name, salus_last_error(s->client));
        sl_free(data);
    }
    sl_free(match);
    sl_free(e);
    fclose(f);
    return rc;
}
