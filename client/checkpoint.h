/* Checkpoint files of named tensors (checkpoint.c); the format is
 * salus.h's (salus_model_save). Errors: SL_EINVAL (I/O, a file that does
 * not match the tensors, a malformed file), SL_ENOMEM, or the session's
 * error reading or writing a tensor; the reason is written into err. Not
 * thread-safe for one session's tensors (as the tensor calls are not). */
#ifndef SL_CHECKPOINT_H
#define SL_CHECKPOINT_H

#include "client_internal.h"

/* A tensor of a model, by name. kind: enum salus_tensor_kind. */
typedef struct sl_named {
    char name[64];
    uint64_t tensor;
    sl_shape shape;
    int kind;
} sl_named;

/* Writes t[0..n) to path (replaced at once by a rename). */
int sl_ckpt_save(salus_session *s, const sl_named *t, unsigned n, const char *path, char *err,
                 size_t len);
/* Loads every t[i] from path: the file must hold exactly these names with
 * these shapes, else nothing is written. */
int sl_ckpt_load(salus_session *s, const sl_named *t, unsigned n, const char *path, char *err,
                 size_t len);

#endif
