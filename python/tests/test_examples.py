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
