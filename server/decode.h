/* Request decoding under a memory budget, part of the gate (gate.h).
 *
 * protobuf-c allocates every sub-message, repeated array, string and bytes
 * field while it unpacks, before anything can be validated, and the
 * decoded form can be far larger than the bytes sent: an empty repeated
 * message costs 2 bytes on the wire and over 100 bytes decoded. So every
 * request is decoded into an arena of its own (one allocation for a small
 * request, a few for a large one) under two limits:
 *   - a per-request budget, sl_decode_budget(len): the message's own bytes
 *     (what bytes and string fields copy) plus room for its structure,
 *     SL_DECODE_STRUCT_FACTOR times its length but at most
 *     SL_DECODE_STRUCT_MAX, plus SL_DECODE_SLACK. Any request that passes
 *     validation fits (the largest valid graph decodes to a few MiB);
 *   - a cap on the bytes held by all decoded requests at once (queued ones
 *     included), counted only for requests whose budget exceeds
 *     SL_DECODE_SMALL: small requests never wait on large ones, and at
 *     most `contexts` of them exist, so decoded requests hold at most
 *     cap + contexts x SL_DECODE_SMALL bytes.
 * A request over either limit is refused before the allocation that would
 * exceed it, and everything it had allocated is freed at once. */
#ifndef SL_DECODE_H
#define SL_DECODE_H

#include "salus.pb-c.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SL_DECODE_STRUCT_FACTOR 32
#define SL_DECODE_STRUCT_MAX (16ull << 20)
#define SL_DECODE_SLACK (64ull << 10)
#define SL_DECODE_SMALL (1ull << 20)
/* Default cap on the bytes of all decoded requests held at once. */
#define SL_DEFAULT_MAX_DECODING (512ull << 20)

typedef struct sl_decoder {
    uint64_t cap;          /* bytes large requests may hold together */
    _Atomic uint64_t held; /* bytes held by decoded requests now */
    _Atomic uint64_t refused;
} sl_decoder;

/* Sets up a decoder whose large requests hold at most cap bytes together;
 * cap 0: SL_DEFAULT_MAX_DECODING, or an eighth of the memory salusd may
 * use (sl_host_memory: its cgroup's limit where lower) when that is less. */
void sl_decoder_init(sl_decoder *d, uint64_t cap);

/* The most bytes a request of len bytes may take decoded. */
uint64_t sl_decode_budget(size_t len);

/* Decodes len bytes of a Request. On SL_OK *out is owned by the caller and
 * freed with sl_request_free. Errors (nothing held, why says what): SL_EPROTO
 * (not a Request), SL_EEXHAUSTED (over its budget, or the decoder's cap is
 * reached now), SL_ENOMEM, SL_EINTERNAL (protobuf-c did not allocate the
 * message first; see decode.c). Never blocks; thread-safe. */
int sl_decode_request(sl_decoder *d, const void *body, size_t len, Salus__Request **out, char *why,
                      size_t whylen);

/* Frees a request from sl_decode_request and returns its bytes to the
 * decoder (NULL is fine). Thread-safe. */
void sl_request_free(Salus__Request *msg);

/* The seq field of a request that could not be decoded, read from its top
 * level without allocating (0 when there is none or the bytes are garbage),
 * so that a refusal still answers the client's seq. */
uint64_t sl_decode_peek_seq(const void *body, size_t len);

#endif
