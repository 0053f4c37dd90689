/* Request decoding under a memory budget (decode.h). Each request's
 * decoded form lives in an arena: a first chunk that starts with the
 * arena's header and then holds the Request itself (protobuf-c allocates
 * the message before anything else, which sl_decode_request checks), so
 * that sl_request_free finds the arena from the message alone. Small
 * pieces are bumped out of chunks that double up to CHUNK_MAX; a piece
 * larger than a quarter of the next chunk (a bulk bytes field) gets a block
 * of its own, so a large tensor costs its size and no more. protobuf-c's
 * frees are no-ops: its temporary scan tables stay charged until the
 * request is freed, which the budget allows for. */
#include "decode.h"
#include "sl_alloc.h"
#include "sl_cgroup.h"
#include "sl_error.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ALIGN 16u
#define FIRST_MIN 1024u
#define FIRST_MAX (64u << 10)
#define CHUNK_MIN (16u << 10) /* chunks after the first */
#define CHUNK_MAX (1u << 20)
#define PAGE 4096u
#define PAGES_FROM (256u << 10)

/* A block of an arena after its first: linked for freeing. Its size keeps
 * the data after it aligned like malloc's. Blocks of PAGES_FROM bytes or
 * more are pages of their own, so that a flood of large requests leaves
 * nothing behind in the heap; smaller ones come from malloc, which is
 * faster for them. */
typedef struct block {
    struct block *next;
    uint64_t size;
} block;

typedef struct arena {
    sl_decoder *dec;
    block *blocks;
    char *cur, *end; /* the free part of the current chunk */
    void *first;     /* protobuf-c's first allocation: the Request */
    uint64_t charged, budget;
    size_t next_chunk;
    bool large;    /* counted against the decoder's cap */
    int failure;   /* why an allocation was refused (SL_OK: none) */
    bool over_cap; /* the refusal was the decoder's cap, not the budget */
} arena;

#define HEADER ((size_t) sl_align_up(sizeof(arena), ALIGN))

_Static_assert(sizeof(block) % ALIGN == 0, "block headers must keep data aligned");

void sl_decoder_init(sl_decoder *d, uint64_t cap)
{
    if (!cap) {
        /* what the host lets salusd use: its cgroup's limit where one is
         * set, so that decoding cannot get it OOM-killed */
        uint64_t eighth = sl_host_memory() / 8;
        cap = eighth && eighth < SL_DEFAULT_MAX_DECODING ? eighth : SL_DEFAULT_MAX_DECODING;
    }
    d->cap = cap;
    atomic_store(&d->held, 0);
    atomic_store(&d->refused, 0);
}

uint64_t sl_decode_budget(size_t len)
{
    uint64_t structure = (uint64_t) len * SL_DECODE_STRUCT_FACTOR;
    if (structure > SL_DECODE_STRUCT_MAX)
        structure = SL_DECODE_STRUCT_MAX;
    return (uint64_t) len + structure + SL_DECODE_SLACK;
}

/* Counts bytes against a's budget and, for a large request, the decoder's
 * cap; false (a->failure set) when either would be exceeded. */
static bool charge(arena *a, uint64_t bytes)
{
    if (a->charged + bytes > a->budget) {
        a->failure = SL_EEXHAUSTED;
        return false;
    }
    uint64_t held = atomic_fetch_add(&a->dec->held, bytes) + bytes;
    if (a->large && held > a->dec->cap) {
        atomic_fetch_sub(&a->dec->held, bytes);
        a->failure = SL_EEXHAUSTED;
        a->over_cap = true;
        return false;
    }
    a->charged += bytes;
    return true;
}

static void *new_block(arena *a, size_t size)
{
    if (size > SIZE_MAX - sizeof(block) - PAGE) {
        a->failure = SL_EEXHAUSTED;
        return NULL;
    }
    size_t total = sizeof(block) + size;
    if (total >= PAGES_FROM)
        total = (size_t) sl_align_up(total, PAGE);
    if (!charge(a, total))
        return NULL;
    block *b = total >= PAGES_FROM ? sl_pages_alloc(total) : sl_malloc(total);
    if (!b) {
        atomic_fetch_sub(&a->dec->held, total);
        a->charged -= total;
        a->failure = SL_ENOMEM;
        return NULL;
    }
    b->next = a->blocks;
    b->size = total;
    a->blocks = b;
    return b + 1;
}

static void *arena_alloc(void *data, size_t size)
{
    arena *a = data;
    if (size > SIZE_MAX / 2) {
        a->failure = SL_EEXHAUSTED;
        return NULL;
    }
    size_t need = (size_t) sl_align_up(size ? size : 1, ALIGN);
    void *p;
    if ((size_t) (a->end - a->cur) >= need) {
        p = a->cur;
        a->cur += need;
    } else if (need > a->next_chunk / 4) {
        p = new_block(a, need);
    } else {
        size_t chunk = a->next_chunk - sizeof(block);
        if (!(p = new_block(a, chunk)))
            return NULL;
        a->cur = (char *) p + need;
        a->end = (char *) p + chunk;
        if (a->next_chunk < CHUNK_MAX)
            a->next_chunk *= 2;
    }
    if (p && !a->first)
        a->first = p;
    return p;
}

static void arena_free(void *data, void *p)
{
    (void) data;
    (void) p; /* everything goes at once, with the arena */
}

static void arena_release(arena *a)
{
    for (block *b = a->blocks, *next; b; b = next) {
        next = b->next;
        if (b->size >= PAGES_FROM)
            sl_pages_free(b, (size_t) b->size);
        else
            sl_free(b);
    }
    atomic_fetch_sub(&a->dec->held, a->charged);
    sl_free(a);
}

int sl_decode_request(sl_decoder *d, const void *body, size_t len, Salus__Request **out, char *why,
                      size_t whylen)
{
    uint64_t budget = sl_decode_budget(len);
    /* the first chunk fits a small request whole */
    uint64_t first = 2 * (uint64_t) len + 512 + HEADER;
    first = first < FIRST_MIN ? FIRST_MIN : first > FIRST_MAX ? FIRST_MAX : first;
    arena *a = sl_malloc((size_t) first);
    if (!a) {
        snprintf(why, whylen, "out of host memory decoding a %zu-byte request", len);
        return SL_ENOMEM;
    }
    *a = (arena){.dec = d,
                 .cur = (char *) a + HEADER,
                 .end = (char *) a + first,
                 .budget = budget,
                 .charged = first,
                 .next_chunk = CHUNK_MIN,
                 .large = budget > SL_DECODE_SMALL};
    /* the first chunk is at most FIRST_MAX and one exists per request in
     * flight: it is counted, never refused */
    atomic_fetch_add(&d->held, first);
    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_free, .allocator_data = a};
    Salus__Request *msg = salus__request__unpack(&alloc, len, body);
    if (msg && (void *) msg == a->first && a->first == (char *) a + HEADER) {
        *out = msg;
        return SL_OK;
    }
    int rc = msg ? SL_EINTERNAL : a->failure ? a->failure : SL_EPROTO;
    if (rc == SL_EINTERNAL)
        snprintf(why, whylen,
                 "protobuf-c did not allocate the request first: decoding is "
                 "unusable with this protobuf-c");
    else if (rc == SL_EPROTO)
        snprintf(why, whylen, "undecodable request: not a salus.Request message");
    else if (rc == SL_ENOMEM)
        snprintf(why, whylen, "out of host memory decoding a %zu-byte request", len);
    else if (a->over_cap)
        snprintf(why, whylen,
                 "salusd is holding %llu MiB of decoded requests, its limit (salusd "
                 "--max-decoding %llu MiB): retry later, or send smaller requests",
                 (unsigned long long) (atomic_load(&d->held) >> 20),
                 (unsigned long long) (d->cap >> 20));
    else
        snprintf(why, whylen,
                 "a %zu-byte request needs more than %llu bytes to decode (its size, plus %d "
                 "times its size for its structure but at most %llu MiB, plus %llu KiB): it "
                 "holds too many small elements",
                 len, (unsigned long long) budget, SL_DECODE_STRUCT_FACTOR,
                 (unsigned long long) (SL_DECODE_STRUCT_MAX >> 20),
                 (unsigned long long) (SL_DECODE_SLACK >> 10));
    if (rc == SL_EEXHAUSTED)
        atomic_fetch_add(&d->refused, 1);
    arena_release(a);
    return rc;
}

void sl_request_free(Salus__Request *msg)
{
    if (msg)
        arena_release((arena *) ((char *) msg - HEADER));
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t) (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

uint64_t sl_decode_peek_seq(const void *body, size_t len)
{
    const uint8_t *p = body, *end = p + len;
    uint64_t seq = 0, key, v;
    while (p < end && read_varint(&p, end, &key)) {
        switch (key & 7) {
        case 0: /* varint; Request.seq is field 1 */
            if (!read_varint(&p, end, &v))
                return seq;
            if (key >> 3 == 1)
                seq = v;
            break;
        case 1:
            if (end - p < 8)
                return seq;
            p += 8;
            break;
        case 2:
            if (!read_varint(&p, end, &v) || v > (uint64_t) (end - p))
                return seq;
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return seq;
            p += 4;
            break;
        default:
            return seq;
        }
    }
    return seq;
}
