"""The Python examples run end to end against a real salusd (small slices of
the data, so they cannot rot without the suite noticing)."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run_example(server, *args):
    env = dict(os.environ, SALUS_URL=server.url)
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), EXAMPLES])
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=240, cwd=EXAMPLES)


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"),
                    reason="dataset-fashion-mnist is not installed")
def test_train_nn_example_learns(server):
    p = run_example(server, "train_nn.py", "--model", "mlp", "--limit", "4096")
    assert p.returncode == 0, p.stderr
    acc = float(p.stdout.split("test accuracy")[1].split("%")[0])
    assert acc > 60, p.stdout  # 10 classes: chance is 10 %


def _has_torch():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        return False
    return True


def _bench(stdout, name):
    line = [ln for ln in stdout.splitlines() if ln.startswith(f"BENCH {name} ")]
    assert line, stdout
    return dict(kv.split("=", 1) for kv in line[-1].split()[2:])


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"),
                    reason="dataset-fashion-mnist is not installed")
@pytest.mark.skipif(not _has_torch(), reason="python3-torch/python3-torchvision are not installed")
def test_onnx_train_example_runs(server):
    p = run_example(server, "onnx_train.py", "--limit", "1024", "--batch", "64", "--seeds", "2",
                    "--epochs", "1")
    assert p.returncode == 0, p.stderr
    b = _bench(p.stdout, "onnx_train")
    assert int(b["samples"]) == 1024 and int(b["seeds"]) == 2 and b["protocol"] == "custom"
    # same weights and batches: the first steps' losses agree (no systematic difference)
    assert int(b["loss_ok"]) == 1, p.stdout
    # both learned something on 1024 images (chance is 10 %), and agree
    assert float(b["salus_acc"]) > 40 and float(b["torch_acc"]) > 40, p.stdout
    assert abs(float(b["salus_acc"]) - float(b["torch_acc"])) < 10, p.stdout
    assert float(b["salus_sps"]) > 0 and float(b["torch_sps"]) > 0


@pytest.mark.skipif(not _has_torch(), reason="python3-torch/python3-torchvision are not installed")
def test_serve_resnet_example_runs(server):
    p = run_example(server, "serve_resnet.py", "--requests", "3", "--warmup", "1", "--size", "64")
    assert p.returncode == 0, p.stderr
    b = _bench(p.stdout, "serve_resnet")
    assert float(b["max_rel_err"]) <= 1e-4, p.stdout
    assert float(b["salus_p50_ms"]) > 0 and float(b["torch_p50_ms"]) > 0


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist"),
                    reason="dataset-fashion-mnist is not installed")
@pytest.mark.skipif(not _has_torch(), reason="python3-torch/python3-torchvision are not installed")
def test_torch_resnet_example_runs(server):
    p = run_example(server, "torch_resnet.py", "--steps", "3", "--batch", "8", "--test", "64")
    assert p.returncode == 0, p.stderr
    assert "step 3/3  loss" in p.stdout and "test accuracy" in p.stdout, p.stdout


@pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"),
                    reason="fortunes (the corpus) is not installed")
@pytest.mark.skipif(not _has_torch(), reason="python3-torch/python3-torchvision are not installed")
def test_gpt_finetune_example_learns_and_generates(server):
    p = run_example(server, "gpt_finetune.py", "--steps", "40", "--width", "64", "--layers",
                    "2", "--heads", "4", "--batch", "8", "--context", "64", "--tokens", "40",
                    "--corpus", "computers,linux")
    assert p.returncode == 0, p.stderr
    assert "step 40/40" in p.stdout and "tokens/s through salusd" in p.stdout, p.stdout
    assert "lr_scheduler.step()" not in p.stderr, p.stderr
    final, first = p.stdout.split("final loss ")[1].split(")")[0].split(" (first ")
    # bytes: ln 256 = 5.55 at the start; 40 steps learn the letters' frequencies
    assert float(first) > 5.0 and float(final) < 4.5, p.stdout
    text = p.stdout.split("-" * 60)[1]
    assert text.strip().startswith("The computer"), p.stdout
