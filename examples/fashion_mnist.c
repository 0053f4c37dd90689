#include "fashion_mnist.h"

#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <zlib.h>

/* Reads a whole gzip file into memory. */
static unsigned char *read_gz(const char *path, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fashion-mnist: cannot open %s (install dataset-fashion-mnist)\n", path);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    for (int r; buf && (r = gzread(f, buf + n, (unsigned) (cap - n))) > 0;) {
        n += (size_t) r;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
        }
    }
    gzclose(f);
    *len = n;
    return buf;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}

int fmnist_load(const char *dir, const char *split, int64_t limit, fmnist *out)
{
    char ipath[512], lpath[512];
    if (!dir)
        dir = FMNIST_DIR;
    snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    size_t ilen, llen;
    unsigned char *img = read_gz(ipath, &ilen), *lab = read_gz(lpath, &llen);
    int rc = -1;
    if (!img || !lab)
        goto out;
    /* idx: magic (0x0803 images, 0x0801 labels), counts, then bytes */
    if (ilen < 16 || llen < 8 || be32(img) != 0x803 || be32(lab) != 0x801 || be32(img + 8) != 28 ||
        be32(img + 12) != 28 || be32(img + 4) != be32(lab + 4) ||
        ilen < 16 + (size_t) be32(img + 4) * FMNIST_PIXELS || llen < 8 + (size_t) be32(lab + 4)) {
        fprintf(stderr, "fashion-mnist: %s or %s is not a valid idx file\n", ipath, lpath);
        goto out;
    }
    int64_t n = be32(img + 4);
    if (limit > 0 && limit < n)
        n = limit;
    out->n = n;
    out->images = malloc(sizeof(float) * (size_t) n * FMNIST_PIXELS);
    out->labels = malloc(sizeof(int32_t) * (size_t) n);
    if (!out->images || !out->labels) {
        fmnist_free(out);
        goto out;
    }
    for (int64_t i = 0; i < n * FMNIST_PIXELS; i++)
        out->images[i] = img[16 + i] / 255.0f;
    for (int64_t i = 0; i < n; i++) {
        out->labels[i] = lab[8 + i];
        if (out->labels[i] >= FMNIST_CLASSES) {
            fprintf(stderr, "fashion-mnist: label %d out of range\n", out->labels[i]);
            fmnist_free(out);
            goto out;
        }
    }
    rc = 0;
out:
    free(img);
    free(lab);
    return rc;
}

void fmnist_free(fmnist *d)
{
    free(d->images);
    free(d->labels);
    d->images = NULL;
    d->labels = NULL;
    d->n = 0;
}

salus_model *fmnist_model(const char *kind)
{
    salus_model *m;
    if (strcmp(kind, "mlp") == 0) {
        if (!(m = salus_model_new(1, (int64_t[]){FMNIST_PIXELS})))
            return NULL;
        salus_model_dense(m, 256);
        salus_model_relu(m);
        salus_model_dense(m, 128);
        salus_model_relu(m);
    } else if (strcmp(kind, "cnn") == 0) {
        if (!(m = salus_model_new(3, (int64_t[]){1, 28, 28})))
            return NULL;
        salus_model_conv2d(m, 16, 3, 1, 1);
        salus_model_relu(m);
        salus_model_maxpool(m, 2, 2);
        salus_model_conv2d(m, 32, 3, 1, 1);
        salus_model_relu(m);
        salus_model_maxpool(m, 2, 2);
        salus_model_flatten(m);
        salus_model_dense(m, 128);
        salus_model_relu(m);
    } else {
        return NULL;
    }
    salus_model_dense(m, FMNIST_CLASSES);
    return m;
}
