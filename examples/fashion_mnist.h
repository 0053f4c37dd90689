/* Fashion-MNIST loader: the idx files Debian's dataset-fashion-mnist package
 * installs under /usr/share/datasets/fashion-mnist (gzip-compressed). */
#ifndef FASHION_MNIST_H
#define FASHION_MNIST_H

#include <salus/salus.h>

#include <stdint.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define FMNIST_PIXELS (28 * 28)
#define FMNIST_CLASSES 10

typedef struct fmnist {
    int64_t n;       /* samples */
    float *images;   /* n * 784, scaled to [0, 1] */
    int32_t *labels; /* n, in [0, 10) */
} fmnist;

/* Loads the "train" or "t10k" split from dir (NULL = FMNIST_DIR), keeping at
 * most `limit` samples (0 = all). Returns 0, or -1 with a message on stderr. */
int fmnist_load(const char *dir, const char *split, int64_t limit, fmnist *out);
void fmnist_free(fmnist *d);

/* The two Fashion-MNIST models the examples and benchmarks train: "mlp"
 * (784-256-128-10) or "cnn" (conv 16 + pool, conv 32 + pool, dense 128,
 * dense 10; ReLUs between). NULL on an unknown kind or without memory;
 * the caller frees it (salus_model_free). */
salus_model *fmnist_model(const char *kind);

#endif
