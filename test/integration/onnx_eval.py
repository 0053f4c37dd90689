"""Checks an ONNX file that salus_model_export_onnx wrote: the onnx
package's checker, then an independent float64 evaluation of its graph in
NumPy (the ops the export emits), whose argmax per sample must equal the
classes salus_model_predict gave for the same input.

usage: onnx_eval.py MODEL INPUT.f32 CLASSES.i32
Exits 0 (agrees), 1 (differs or invalid), 77 (onnx or numpy missing)."""
import sys

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:
    print(f"onnx_eval: SKIP: {e} (python3-onnx, python3-numpy)", file=sys.stderr)
    sys.exit(77)


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def windows(x, k, s, pads):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])),
                constant_values=np.nan)
    oh, ow = (h + pads[0] + pads[2] - k[0]) // s[0] + 1, (w + pads[1] + pads[3] - k[1]) // s[1] + 1
    out = np.empty((n, c, oh, ow, k[0] * k[1]))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
            out[:, :, i, j, :] = win.reshape(n, c, -1)
    return out


def conv(x, w, b, a):
    k, s, p = a["kernel_shape"], a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0])
    win = np.nan_to_num(windows(x, k, s, p))  # zero padding
    n, c, oh, ow, _ = win.shape
    win = win.reshape(n, c, oh, ow, k[0], k[1])
    return np.einsum("nchwrs,kcrs->nkhw", win, w) + b[None, :, None, None]


def run(model, x):
    vals = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    vals[model.graph.input[0].name] = x
    for node in model.graph.node:
        i = [vals[n] for n in node.input]
        a = attrs(node)
        op = node.op_type
        if op == "Gemm":
            y = i[0] @ i[1] + i[2]
        elif op == "Conv":
            y = conv(i[0], i[1], i[2] if len(i) > 2 else np.zeros(i[1].shape[0]), a)
        elif op in ("MaxPool", "AveragePool"):
            win = windows(i[0], a["kernel_shape"], a.get("strides", [1, 1]),
                          a.get("pads", [0, 0, 0, 0]))
            y = np.nanmax(win, axis=-1) if op == "MaxPool" else np.nanmean(win, axis=-1)
        elif op == "BatchNormalization":
            sh = (1, -1) + (1,) * (i[0].ndim - 2)
            y = (i[0] - i[3].reshape(sh)) / np.sqrt(i[4].reshape(sh) + a["epsilon"])
            y = y * i[1].reshape(sh) + i[2].reshape(sh)
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Sigmoid":
            y = 1 / (1 + np.exp(-i[0]))
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        else:
            raise SystemExit(f"onnx_eval: unexpected op {op}")
        vals[node.output[0]] = y
    return vals[model.graph.output[0].name]


def main():
    model = onnx.load(sys.argv[1])
    onnx.checker.check_model(model, full_check=True)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    x = np.fromfile(sys.argv[2], dtype=np.float32).astype(np.float64).reshape([-1] + dims)
    want = np.fromfile(sys.argv[3], dtype=np.int32)
    got = run(model, x).argmax(axis=1)
    bad = int((got != want).sum())
    print(f"onnx_eval: {len(want) - bad}/{len(want)} samples agree "
          f"(opset {model.opset_import[0].version}, {len(model.graph.node)} nodes)")
    return 0 if bad == 0 else 1


sys.exit(main())
