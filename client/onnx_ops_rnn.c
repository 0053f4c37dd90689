/* The recurrent nodes of the ONNX importer: RNN, GRU and LSTM, unrolled
 * over the sequence into the matrix products and element-wise ops of their
 * definitions (ONNX operator docs). The input's projection X W^T (plus both
 * biases) is one matrix product for the whole sequence; each step then adds
 * H R^T and applies the gates. The sequence length is the input's static
 * dim, so a step is a handful of ops and an iteration stays one graph.
 *
 * Refused: sequence_lens other than the full length for every sample,
 * activations other than Sigmoid, Tanh and Relu, LSTM's input_forget. */
#include "onnx_ops.h"

#include <stdlib.h>
#include <string.h>

enum rnn_kind { RNN_PLAIN, RNN_GRU, RNN_LSTM };

/* The gates per kind: RNN one (i), GRU three (z, r, h), LSTM four (i, o,
 * f, c); and the activations each direction lists. */
static const unsigned n_gates[] = {1, 3, 4};
static const unsigned n_acts[] = {1, 2, 3};

struct rnn {
    sl_onnx_imp *m;
    enum rnn_kind kind;
    int64_t seq, batch, hidden;
    float clip; /* 0: none */
    /* per direction: the activation ops ("sigmoid", "tanh", "relu") */
    const char *act[2][3];
    bool lbr; /* GRU's linear_before_reset */
};

static salus_value op1(sl_onnx_imp *m, const char *type, salus_value x)
{
    return sl_onnx_op(m, type, 1, &x, 0, NULL, 0, NULL);
}

/* x[..., start:end) along axis */
static salus_value cut(sl_onnx_imp *m, salus_value x, int64_t axis, int64_t start, int64_t end)
{
    int64_t a[3] = {axis, start, end};
    return sl_onnx_op(m, "slice", 1, &x, 3, a, 0, NULL);
}

static salus_value matmul_bt(sl_onnx_imp *m, salus_value a, salus_value b)
{
    int64_t t[2] = {0, 1};
    return sl_onnx_op(m, "matmul", 2, (salus_value[]){a, b}, 2, t, 0, NULL);
}

/* The gate pre-activation x, clipped where asked, through activation f. */
static salus_value gate(const struct rnn *r, const char *f, salus_value x)
{
    if (r->clip > 0)
        x = sl_onnx_unary(r->m, SL_EW_CLIP, x, -r->clip, r->clip);
    return op1(r->m, f, x);
}

/* Joins parts[0..n) along axis 0 as a balanced tree of concats. */
static salus_value join(sl_onnx_imp *m, salus_value *parts, size_t n)
{
    if (n == 1)
        return parts[0];
    salus_value a = join(m, parts, n / 2), b = join(m, parts + n / 2, n - n / 2);
    int64_t axis = 0;
    return sl_onnx_op(m, "concat", 2, (salus_value[]){a, b}, 1, &axis, 0, NULL);
}

static const char *activation(sl_onnx_imp *m, const ProtobufCBinaryData *s)
{
    static const char *const onnx[] = {"Sigmoid", "Tanh", "Relu"};
    static const char *const ours[] = {"sigmoid", "tanh", "relu"};
    for (int k = 0; k < 3; k++)
        if (s->len == strlen(onnx[k]) && !memcmp(s->data, onnx[k], s->len))
            return ours[k];
    sl_onnx_fail(m, SL_EUNSUPPORTED, "activation '%.*s' (salus has Sigmoid, Tanh and Relu)",
                 (int) (s->len > 40 ? 40 : s->len), (const char *) s->data);
    return NULL;
}

/* One direction d over x [S, B, I] (time in `reverse` order): the hidden
 * state of each step into ys[t] as [1, B, H], the last hidden (and cell)
 * state into *h_last, *c_last as [B, H]. w [G*H, I], rw [G*H, H], bias
 * (Wb + Rb, or Wb with GRU's Rb_h kept apart in rbh) [G*H] or none. */
static int direction(const struct rnn *r, int d, bool reverse, salus_value x, salus_value w,
                     salus_value rw, salus_value bias, salus_value rbh, salus_value peep,
                     salus_value h, salus_value c, salus_value *ys, salus_value *h_last,
                     salus_value *c_last)
{
    sl_onnx_imp *m = r->m;
    int64_t S = r->seq, B = r->batch, H = r->hidden, G = n_gates[r->kind];
    sl_shape xs;
    sl_onnx_shape_of(m, x, &xs);
    if (m->code)
        return m->code;
    int64_t flat[2] = {S * B, xs.dims[2]};
    salus_value xw = matmul_bt(m, sl_onnx_reshape(m, x, 2, flat), w);
    if (bias != SALUS_NO_VALUE)
        xw = sl_onnx_binary(m, SL_EW_ADD, xw, bias);
    int64_t per_step[3] = {S, B, G * H}, bh[2] = {B, H}, row[3] = {1, B, H};
    xw = sl_onnx_reshape(m, xw, 3, per_step);
    /* GRU's h gate reads H through r: its part of R is applied apart */
    salus_value r_zr = rw, r_h = SALUS_NO_VALUE;
    if (r->kind == RNN_GRU) {
        r_zr = cut(m, rw, 0, 0, 2 * H);
        r_h = cut(m, rw, 0, 2 * H, 3 * H);
    }
    salus_value p_i = SALUS_NO_VALUE, p_o = SALUS_NO_VALUE, p_f = SALUS_NO_VALUE;
    if (peep != SALUS_NO_VALUE) {
        p_i = cut(m, peep, 0, 0, H);
        p_o = cut(m, peep, 0, H, 2 * H);
        p_f = cut(m, peep, 0, 2 * H, 3 * H);
    }
    if (h == SALUS_NO_VALUE || (r->kind == RNN_LSTM && c == SALUS_NO_VALUE)) {
        /* zero states, shaped like [B, H] of the first step */
        salus_value like =
            cut(m, sl_onnx_reshape(m, cut(m, xw, 0, 0, 1), 2, (int64_t[]){B, G * H}), 1, 0, H);
        float zero = 0;
        salus_value z = sl_onnx_op(m, "fill", 1, &like, 0, NULL, 1, &zero);
        h = h == SALUS_NO_VALUE ? z : h;
        c = c == SALUS_NO_VALUE ? z : c;
    }
    const char *const *f = r->act[d];
    for (int64_t k = 0; k < S && !m->code; k++) {
        int64_t t = reverse ? S - 1 - k : k;
        salus_value g = sl_onnx_reshape(m, cut(m, xw, 0, t, t + 1), 2, (int64_t[]){B, G * H});
        switch (r->kind) {
        case RNN_PLAIN:
            h = gate(r, f[0], sl_onnx_binary(m, SL_EW_ADD, g, matmul_bt(m, h, rw)));
            break;
        case RNN_GRU: {
            salus_value zr =
                sl_onnx_binary(m, SL_EW_ADD, cut(m, g, 1, 0, 2 * H), matmul_bt(m, h, r_zr));
            salus_value z = gate(r, f[0], cut(m, zr, 1, 0, H));
            salus_value rg = gate(r, f[0], cut(m, zr, 1, H, 2 * H));
            salus_value hh;
            if (r->lbr) { /* r * (H R_h^T + Rb_h) */
                hh = matmul_bt(m, h, r_h);
                if (rbh != SALUS_NO_VALUE)
                    hh = sl_onnx_binary(m, SL_EW_ADD, hh, rbh);
                hh = sl_onnx_binary(m, SL_EW_MUL, rg, hh);
            } else { /* (r * H) R_h^T + Rb_h */
                hh = matmul_bt(m, sl_onnx_binary(m, SL_EW_MUL, rg, h), r_h);
                if (rbh != SALUS_NO_VALUE)
                    hh = sl_onnx_binary(m, SL_EW_ADD, hh, rbh);
            }
            salus_value cand =
                gate(r, f[1], sl_onnx_binary(m, SL_EW_ADD, cut(m, g, 1, 2 * H, 3 * H), hh));
            /* H = (1 - z) * cand + z * H = cand + z * (H - cand) */
            h = sl_onnx_binary(
                m, SL_EW_ADD, cand,
                sl_onnx_binary(m, SL_EW_MUL, z, sl_onnx_binary(m, SL_EW_SUB, h, cand)));
            break;
        }
        case RNN_LSTM: {
            g = sl_onnx_binary(m, SL_EW_ADD, g, matmul_bt(m, h, rw));
            salus_value gi = cut(m, g, 1, 0, H), go = cut(m, g, 1, H, 2 * H);
            salus_value gf = cut(m, g, 1, 2 * H, 3 * H), gc = cut(m, g, 1, 3 * H, 4 * H);
            if (peep != SALUS_NO_VALUE) {
                gi = sl_onnx_binary(m, SL_EW_ADD, gi, sl_onnx_binary(m, SL_EW_MUL, p_i, c));
                gf = sl_onnx_binary(m, SL_EW_ADD, gf, sl_onnx_binary(m, SL_EW_MUL, p_f, c));
            }
            salus_value i = gate(r, f[0], gi), fg = gate(r, f[0], gf);
            salus_value cand = gate(r, f[1], gc);
            c = sl_onnx_binary(m, SL_EW_ADD, sl_onnx_binary(m, SL_EW_MUL, fg, c),
                               sl_onnx_binary(m, SL_EW_MUL, i, cand));
            if (peep != SALUS_NO_VALUE)
                go = sl_onnx_binary(m, SL_EW_ADD, go, sl_onnx_binary(m, SL_EW_MUL, p_o, c));
            h = sl_onnx_binary(m, SL_EW_MUL, gate(r, f[0], go), op1(m, f[2], c));
            break;
        }
        }
        h = sl_onnx_reshape(m, h, 2, bh);
        ys[t] = sl_onnx_reshape(m, h, 3, row);
    }
    *h_last = h;
    *c_last = c;
    return m->code;
}

/* Input i's part for direction d: x[d] of [D, ...] as dims. */
static salus_value part(sl_onnx_imp *m, salus_value x, int d, unsigned nd, const int64_t *dims)
{
    return sl_onnx_reshape(m, cut(m, x, 0, d, d + 1), nd, dims);
}

static int map_rnn(sl_onnx_imp *m, const Onnx__NodeProto *n, enum rnn_kind kind)
{
    static const char *const k[] = {"activation_alpha",
                                    "activation_beta",
                                    "activations",
                                    "clip",
                                    "direction",
                                    "hidden_size",
                                    "layout",
                                    "input_forget",
                                    "linear_before_reset",
                                    NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct rnn r = {.m = m, .kind = kind};
    if (sl_onnx_attr(n, "activation_alpha") || sl_onnx_attr(n, "activation_beta"))
        return UNSUP("activation_alpha or activation_beta");
    if (sl_onnx_attr_i(n, "input_forget", 0))
        return UNSUP("input_forget");
    r.lbr = sl_onnx_attr_i(n, "linear_before_reset", 0) != 0;
    r.clip = sl_onnx_attr_f(n, "clip", 0.0f);
    if (r.clip < 0)
        return UNSUP("clip %g", (double) r.clip);
    int64_t layout = sl_onnx_attr_i(n, "layout", 0);
    if (layout != 0 && layout != 1)
        return UNSUP("layout %lld", (long long) layout);
    const Onnx__AttributeProto *dir = sl_onnx_attr(n, "direction");
    int n_dir = 1;
    bool reverse = false;
    if (dir && dir->s.len) {
        const char *s = (const char *) dir->s.data;
        size_t len = dir->s.len;
        if (len == 13 && !memcmp(s, "bidirectional", 13))
            n_dir = 2;
        else if (len == 7 && !memcmp(s, "reverse", 7))
            reverse = true;
        else if (!(len == 7 && !memcmp(s, "forward", 7)))
            return UNSUP("direction '%.*s'", (int) (len > 20 ? 20 : len), s);
    }
    static const char *const dflt[3][3] = {
        {"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
    unsigned na = n_acts[kind];
    const Onnx__AttributeProto *acts = sl_onnx_attr(n, "activations");
    for (int d = 0; d < n_dir; d++)
        for (unsigned a = 0; a < na; a++)
            r.act[d][a] = dflt[kind][a];
    if (acts && acts->n_strings) {
        if (acts->n_strings != na * (size_t) n_dir)
            return UNSUP("%zu activations for %d direction(s) of %u each", acts->n_strings, n_dir,
                         na);
        for (int d = 0; d < n_dir; d++)
            for (unsigned a = 0; a < na; a++)
                if (!(r.act[d][a] = activation(m, &acts->strings[d * na + a])))
                    return m->code;
    }

    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    salus_value w = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    salus_value rw = sl_onnx_fvalue(m, sl_onnx_input(m, n, 2));
    sl_shape xs, ws;
    sl_onnx_shape_of(m, x, &xs);
    sl_onnx_shape_of(m, w, &ws);
    if (m->code)
        return m->code;
    if (xs.ndim != 3 || ws.ndim != 3 || ws.dims[0] != n_dir)
        return UNSUP("X of rank %u, W of rank %u for %d direction(s)", xs.ndim, ws.ndim, n_dir);
    if (layout == 1) /* [B, S, I] -> [S, B, I] */
        x = sl_onnx_op(m, "transpose", 1, &x, 3, (int64_t[]){1, 0, 2}, 0, NULL);
    r.seq = layout ? xs.dims[1] : xs.dims[0];
    r.batch = layout ? xs.dims[0] : xs.dims[1];
    int64_t G = n_gates[kind];
    r.hidden = sl_onnx_attr_i(n, "hidden_size", ws.dims[1] / G);
    int64_t H = r.hidden, B = r.batch, S = r.seq, I = xs.dims[2];
    if (H < 1 || ws.dims[1] != G * H || ws.dims[2] != I)
        return UNSUP("W of [%lld, %lld, %lld] for hidden_size %lld", (long long) ws.dims[0],
                     (long long) ws.dims[1], (long long) ws.dims[2], (long long) H);
    if (S > 1024)
        return UNSUP("a sequence of %lld steps (salus unrolls up to 1024)", (long long) S);
    struct ent *lens = sl_onnx_input(m, n, 4);
    if (lens) {
        if (lens->kind != ENT_CONST || lens->n != (uint64_t) B)
            return UNSUP("sequence_lens that are not a constant of every sample's length");
        for (uint64_t i = 0; i < lens->n; i++)
            if (lens->d[i] != (double) S)
                return UNSUP("sequence_lens shorter than the sequence (%g of %lld)", lens->d[i],
                             (long long) S);
    }
    struct ent *b_in = sl_onnx_input(m, n, 3), *h0_in = sl_onnx_input(m, n, 5);
    struct ent *c0_in = kind == RNN_LSTM ? sl_onnx_input(m, n, 6) : NULL;
    struct ent *p_in = kind == RNN_LSTM ? sl_onnx_input(m, n, 7) : NULL;
    salus_value bv = b_in ? sl_onnx_fvalue(m, b_in) : SALUS_NO_VALUE;
    salus_value h0 = h0_in ? sl_onnx_fvalue(m, h0_in) : SALUS_NO_VALUE;
    salus_value c0 = c0_in ? sl_onnx_fvalue(m, c0_in) : SALUS_NO_VALUE;
    salus_value pv = p_in ? sl_onnx_fvalue(m, p_in) : SALUS_NO_VALUE;
    if (layout == 1) { /* [B, D, H] -> [D, B, H] */
        if (h0 != SALUS_NO_VALUE)
            h0 = sl_onnx_op(m, "transpose", 1, &h0, 3, (int64_t[]){1, 0, 2}, 0, NULL);
        if (c0 != SALUS_NO_VALUE)
            c0 = sl_onnx_op(m, "transpose", 1, &c0, 3, (int64_t[]){1, 0, 2}, 0, NULL);
    }
    if (m->code)
        return m->code;

    salus_value *ys = calloc((size_t) (S * n_dir), sizeof *ys);
    if (!ys)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    salus_value h_last[2], c_last[2];
    int64_t bh[2] = {B, H}, gh[1] = {G * H}, ghi[2] = {G * H, I}, ghh[2] = {G * H, H};
    for (int d = 0; d < n_dir && !m->code; d++) {
        salus_value wd = part(m, w, d, 2, ghi), rd = part(m, rw, d, 2, ghh);
        salus_value bias = SALUS_NO_VALUE, rbh = SALUS_NO_VALUE, peep = SALUS_NO_VALUE;
        if (bv != SALUS_NO_VALUE) {
            salus_value bd = part(m, bv, d, 1, (int64_t[]){2 * G * H});
            salus_value wb = cut(m, bd, 0, 0, G * H), rb = cut(m, bd, 0, G * H, 2 * G * H);
            if (kind == RNN_GRU) { /* Rb_h stays apart: it goes inside r's product */
                rbh = cut(m, rb, 0, 2 * H, 3 * H);
                salus_value zr =
                    sl_onnx_binary(m, SL_EW_ADD, cut(m, wb, 0, 0, 2 * H), cut(m, rb, 0, 0, 2 * H));
                bias = sl_onnx_op(m, "concat", 2, (salus_value[]){zr, cut(m, wb, 0, 2 * H, 3 * H)},
                                  1, (int64_t[]){0}, 0, NULL);
            } else {
                bias = sl_onnx_binary(m, SL_EW_ADD, wb, rb);
            }
            bias = sl_onnx_reshape(m, bias, 1, gh);
        }
        if (pv != SALUS_NO_VALUE)
            peep = part(m, pv, d, 1, (int64_t[]){3 * H});
        salus_value h = h0 != SALUS_NO_VALUE ? part(m, h0, d, 2, bh) : SALUS_NO_VALUE;
        salus_value c = c0 != SALUS_NO_VALUE ? part(m, c0, d, 2, bh) : SALUS_NO_VALUE;
        direction(&r, d, d == 1 || reverse, x, wd, rd, bias, rbh, peep, h, c, ys + d * S,
                  &h_last[d], &c_last[d]);
    }
    salus_value out[3] = {SALUS_NO_VALUE, SALUS_NO_VALUE, SALUS_NO_VALUE};
    if (!m->code) {
        /* Y [S, D, B, H]: each direction's steps joined, then the two side by side */
        int64_t one_dir[4] = {S, 1, B, H};
        salus_value y = sl_onnx_reshape(m, join(m, ys, (size_t) S), 4, one_dir);
        if (n_dir == 2)
            y = sl_onnx_op(
                m, "concat", 2,
                (salus_value[]){y, sl_onnx_reshape(m, join(m, ys + S, (size_t) S), 4, one_dir)}, 1,
                (int64_t[]){1}, 0, NULL);
        salus_value hl = sl_onnx_reshape(m, h_last[0], 3, (int64_t[]){1, B, H});
        salus_value cl = kind == RNN_LSTM ? sl_onnx_reshape(m, c_last[0], 3, (int64_t[]){1, B, H})
                                          : SALUS_NO_VALUE;
        if (n_dir == 2) {
            hl = sl_onnx_op(
                m, "concat", 2,
                (salus_value[]){hl, sl_onnx_reshape(m, h_last[1], 3, (int64_t[]){1, B, H})}, 1,
                (int64_t[]){0}, 0, NULL);
            if (kind == RNN_LSTM)
                cl = sl_onnx_op(
                    m, "concat", 2,
                    (salus_value[]){cl, sl_onnx_reshape(m, c_last[1], 3, (int64_t[]){1, B, H})}, 1,
                    (int64_t[]){0}, 0, NULL);
        }
        if (layout == 1) { /* back to [B, S, D, H] and [B, D, H] */
            y = sl_onnx_op(m, "transpose", 1, &y, 4, (int64_t[]){2, 0, 1, 3}, 0, NULL);
            hl = sl_onnx_op(m, "transpose", 1, &hl, 3, (int64_t[]){1, 0, 2}, 0, NULL);
            if (kind == RNN_LSTM)
                cl = sl_onnx_op(m, "transpose", 1, &cl, 3, (int64_t[]){1, 0, 2}, 0, NULL);
        }
        out[0] = y, out[1] = hl, out[2] = cl;
    }
    free(ys);
    if (m->code)
        return m->code;
    size_t produced = kind == RNN_LSTM ? 3 : 2;
    if (n->n_output < produced)
        produced = n->n_output;
    return sl_onnx_set_out(m, n, produced, out);
}

int sl_onnx_map_rnn(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    return map_rnn(m, n, RNN_PLAIN);
}

int sl_onnx_map_gru(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    return map_rnn(m, n, RNN_GRU);
}

int sl_onnx_map_lstm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    return map_rnn(m, n, RNN_LSTM);
}
