/* A scan of an ONNX file's protobuf wire format before protobuf-c decodes
 * it. protobuf-c unpacks nested messages recursively with no depth limit,
 * and onnx.proto nests without bound along two paths: graphs inside node
 * attributes (GraphProto > NodeProto > AttributeProto > GraphProto ...)
 * and types inside types (TypeProto > Sequence/Map/Optional > TypeProto).
 * A hostile file only a few bytes per level deep would exhaust the stack.
 * This walks exactly the message-typed fields along those paths
 * (with a stack of its own, bounded by SL_ONNX_MAX_DEPTH) and skips everything else,
 * tensor data included, without looking inside: cost linear in the
 * structure, not in the weights. */
#include "onnx_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The message types on the recursive paths. */
enum wire_msg {
    W_MODEL,
    W_GRAPH,
    W_NODE,
    W_ATTR,
    W_TRAINING,
    W_FUNCTION,
    W_VALUE_INFO,
    W_TYPE,
    W_TYPE_NESTED, /* TypeProto.Sequence, .Map, .Optional */
    W_NONE,        /* a field not followed */
};

/* The type of field `field` of a message of type t (W_NONE: not followed). */
static enum wire_msg child(enum wire_msg t, uint64_t field)
{
    switch (t) {
    case W_MODEL:
        return field == 7 ? W_GRAPH : field == 20 ? W_TRAINING : field == 25 ? W_FUNCTION : W_NONE;
    case W_GRAPH:
        return field == 1                                  ? W_NODE
               : field == 11 || field == 12 || field == 13 ? W_VALUE_INFO
                                                           : W_NONE;
    case W_NODE:
        return field == 5 ? W_ATTR : W_NONE;
    case W_ATTR:
        return field == 6 || field == 11 ? W_GRAPH : field == 14 || field == 15 ? W_TYPE : W_NONE;
    case W_TRAINING:
        return field == 1 || field == 2 ? W_GRAPH : W_NONE;
    case W_FUNCTION:
        return field == 7 ? W_NODE : W_NONE;
    case W_VALUE_INFO:
        return field == 2 ? W_TYPE : W_NONE;
    case W_TYPE: /* sequence_type 4, map_type 5, optional_type 9 */
        return field == 4 || field == 5 || field == 9 ? W_TYPE_NESTED : W_NONE;
    case W_TYPE_NESTED: /* Sequence.elem_type 1, Map.value_type 2, Optional.elem_type 1 */
        return field == 1 || field == 2 ? W_TYPE : W_NONE;
    default:
        return W_NONE;
    }
}

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return false;
        uint8_t b = *(*p)++;
        r |= (uint64_t) (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

int sl_onnx_wire_check(const void *data, size_t len, char *err, size_t errlen)
{
    /* an explicit stack of open messages: where each ends, and its type */
    struct frame {
        const uint8_t *end;
        enum wire_msg type;
    } stack[SL_ONNX_MAX_DEPTH];
    unsigned depth = 1;
    const uint8_t *p = data;
    stack[0] = (struct frame){p + len, W_MODEL};
    while (depth) {
        struct frame *f = &stack[depth - 1];
        if (p == f->end) {
            depth--;
            continue;
        }
        uint64_t tag, n;
        if (!varint(&p, f->end, &tag))
            goto malformed;
        switch (tag & 7) {
        case 0:
            if (!varint(&p, f->end, &n))
                goto malformed;
            break;
        case 1:
            if (f->end - p < 8)
                goto malformed;
            p += 8;
            break;
        case 5:
            if (f->end - p < 4)
                goto malformed;
            p += 4;
            break;
        case 2: {
            if (!varint(&p, f->end, &n) || n > (uint64_t) (f->end - p))
                goto malformed;
            enum wire_msg t = child(f->type, tag >> 3);
            if (t == W_NONE) {
                p += n;
                break;
            }
            if (depth == SL_ONNX_MAX_DEPTH) {
                snprintf(err, errlen,
                         "messages nested deeper than %d (graphs in attributes, "
                         "types in types)",
                         SL_ONNX_MAX_DEPTH);
                return SL_EUNSUPPORTED;
            }
            stack[depth++] = (struct frame){p + n, t};
            break;
        }
        default: /* groups (3, 4) are not in onnx.proto; 6, 7 do not exist */
            goto malformed;
        }
    }
    return SL_OK;
malformed:
    snprintf(err, errlen, "not an ONNX model (malformed protobuf at byte %zu)",
             (size_t) (p - (const uint8_t *) data));
    return SL_EINVAL;
}
