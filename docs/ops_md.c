/* Writes the op reference (docs/ops.md) from the op registry, so the
 * reference says exactly what validation accepts.
 *
 *   ops_md                 the reference on stdout
 *   ops_md --output FILE   writes FILE (ninja update-ops-md)
 *   ops_md --check FILE    exits 1, saying how to regenerate, when FILE
 *                          differs from what the registry gives (the
 *                          ops-reference test) */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text inside a table cell: a '|' would end the cell. */
static void cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', f);
        fputc(*s, f);
    }
}

static void args_table(FILE *f, const char *title, const char *prefix, const sl_op_arg *args,
                       unsigned n, unsigned mutates)
{
    fprintf(f, "%s:\n\n", title);
    fprintf(f, "| | name | meaning |\n|---|---|---|\n");
    for (unsigned i = 0; i < n; i++) {
        fprintf(f, "| %s%u | `%s` | ", prefix, i, args[i].name);
        cell(f, args[i].doc);
        if (mutates & (1u << i))
            fputs("; **updated in place**", f);
        fputs(" |\n", f);
    }
    fputc('\n', f);
}

static void attrs_rows(FILE *f, const char *list, const sl_op_attr *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        fprintf(f, "| `%s[%u]` | `%s` | %s | ", list, i, attrs[i].name,
                attrs[i].required ? "**yes**" : "no");
        cell(f, attrs[i].required ? "—" : attrs[i].dflt);
        fputs(" | ", f);
        cell(f, attrs[i].doc);
        fputs(" |\n", f);
    }
}

static void write_op(FILE *f, const sl_op_def *d)
{
    fprintf(f, "### %s\n\n%s\n\n", d->name, d->doc);
    char names[32];
    unsigned dtypes = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
    fprintf(f, "Computes in: %s", sl_dtypes_str(dtypes, names, sizeof names));
    if (dtypes & SL_DTS_HALF)
        fprintf(f, "; bf16 and f16 accumulate in %s", sl_dtype_name(d->accum));
    fputs(".\n\n", f);
    args_table(f, "Inputs", "in", d->ins, d->n_in, d->mutates);
    if (d->n_out)
        args_table(f, "Outputs", "out", d->outs, d->n_out, 0);
    else
        fputs("Outputs: none.\n\n", f);
    if (d->n_iattrs + d->n_fattrs == 0) {
        fputs("Attributes: none.\n\n", f);
        return;
    }
    fputs("Attributes:\n\n| position | name | required | absent or 0 means | meaning |\n"
          "|---|---|---|---|---|\n",
          f);
    attrs_rows(f, "iattrs", d->iattrs, d->n_iattrs);
    attrs_rows(f, "fattrs", d->fattrs, d->n_fattrs);
    fputc('\n', f);
}

static void write_reference(FILE *f)
{
    fputs("# salus op reference\n\n"
          "<!-- Generated from the op registry (kernels/ops_table.c) by docs/ops_md.c: do not "
          "edit. Regenerate with `ninja -C build update-ops-md`. -->\n\n"
          "A graph's op names its type (`Op.type`), its inputs by value number (`Op.inputs`, in "
          "the order listed here) and its attributes by position: `Op.iattrs` (int64) and "
          "`Op.fattrs` (float), see `proto/salus.proto`. Where ONNX defines an op, salus "
          "follows its semantics.\n\n"
          "- **Required** attributes must be sent: a graph whose op's `iattrs` or `fattrs` list "
          "is too short to hold one is refused at registration, naming the op, the attribute "
          "and its position (`op 3 (scale): missing required attribute fattrs[0] (alpha)`). "
          "A required attribute sent as 0 is 0.\n"
          "- **Optional** attributes may be left out (send a shorter list) or sent as 0: "
          "either means the default shown.\n"
          "- Positions past an op's last attribute must be absent or 0, so that a later "
          "meaning for them can never be silently ignored.\n"
          "- *Computes in* lists the float dtypes an op accepts: its float inputs share one of "
          "them and its float outputs have it (i32 inputs are what the op says). A graph that "
          "gives an op another dtype is refused at registration, naming the op, the input and "
          "the dtype; so is one whose device has no kernel for that dtype. Sums and products "
          "of bf16 and f16 accumulate in the dtype shown, so an op rounds once, at its "
          "output.\n"
          "- f32 matmuls (matmul, matmul_acc, batch_matmul) and convolutions (conv2d and its "
          "gradients) follow the session's math choice (`salus_session_opts.math_matmul` and "
          "`math_conv`; Python `session(math_matmul=..., math_conv=...)`): `exact` f32 "
          "products, or `tf32`, which lets a device with TF32 tensor cores (cuda, Ampere and "
          "later) multiply with 10-bit mantissas and sum in f32; other devices stay exact. The "
          "defaults are PyTorch's: matmul exact, convolution TF32. `salusctl status` and the "
          "trace show the choice; bf16 and f16 ops are not affected.\n"
          "- Inputs marked *updated in place* are written by the op; give it a param (a "
          "session tensor) to keep the result across iterations.\n\n",
          f);
    fputs("| group | ops |\n|---|---|\n", f);
    for (unsigned g = 0; g < SL_OP_GROUP_COUNT; g++) {
        fprintf(f, "| %s |", sl_op_group_get(g)->title);
        const char *sep = " ";
        for (unsigned id = 0; id < SL_OP_COUNT; id++)
            if (sl_op_get(id)->group == g) {
                fprintf(f, "%s[%s](#%s)", sep, sl_op_get(id)->name, sl_op_get(id)->name);
                sep = ", ";
            }
        fputs(" |\n", f);
    }
    fputc('\n', f);
    for (unsigned g = 0; g < SL_OP_GROUP_COUNT; g++) {
        const sl_op_group_def *gd = sl_op_group_get(g);
        fprintf(f, "## %s\n\n%s\n\n", gd->title, gd->doc);
        for (unsigned id = 0; id < SL_OP_COUNT; id++)
            if (sl_op_get(id)->group == g)
                write_op(f, sl_op_get(id));
    }
}

/* The whole of path, NUL-terminated, or NULL. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *more = realloc(buf, cap);
            if (!more) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = more;
        }
        got = fread(buf + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    char *want = NULL;
    size_t want_len = 0;
    FILE *mem = open_memstream(&want, &want_len);
    if (!mem)
        return 2;
    write_reference(mem);
    if (fclose(mem) != 0)
        return 2;

    int rc = 0;
    if (argc == 1) {
        rc = fwrite(want, 1, want_len, stdout) == want_len ? 0 : 2;
    } else if (argc == 3 && strcmp(argv[1], "--output") == 0) {
        FILE *f = fopen(argv[2], "wb");
        rc = f && fwrite(want, 1, want_len, f) == want_len ? 0 : 2;
        if (f && fclose(f) != 0)
            rc = 2;
        if (rc)
            fprintf(stderr, "ops_md: cannot write %s\n", argv[2]);
    } else if (argc == 3 && strcmp(argv[1], "--check") == 0) {
        size_t have_len = 0;
        char *have = read_all(argv[2], &have_len);
        if (!have) {
            fprintf(stderr, "ops_md: cannot read %s\n", argv[2]);
            rc = 1;
        } else if (have_len != want_len || memcmp(have, want, want_len) != 0) {
            size_t line = 1;
            for (size_t i = 0; i < have_len && i < want_len && have[i] == want[i]; i++)
                line += have[i] == '\n';
            fprintf(stderr,
                    "%s differs from what the op registry (kernels/ops_table.c) generates, "
                    "from line %zu on.\nRegenerate it and commit the result:  ninja -C "
                    "<builddir> update-ops-md\n",
                    argv[2], line);
            rc = 1;
        }
        free(have);
    } else {
        fprintf(stderr, "usage: %s [--output FILE | --check FILE]\n", argv[0]);
        rc = 2;
    }
    free(want);
    return rc;
}
