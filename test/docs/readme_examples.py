#!/usr/bin/env python3
"""Runs the README's first jobs exactly as written: the first ```c block and
the first ```python block under the heading "A first job", against a real
salusd started as the README starts it (no flags but --allow-root when run
as root), found by the clients the way a user's are: through the default
socket under $XDG_RUNTIME_DIR, here a private directory of the test's.

Each job must exit 0 and print "step N  loss X" lines whose last loss is
well under the first (the network learned); salusd must then drain on
SIGTERM and exit 0.

    readme_examples.py --readme README.md --salusd SALUSD --cc CC ...
        --include DIR --libdir DIR [--cflag FLAG ...]
        [--python PYTHON --pythonpath DIR]
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HEADING = "## A first job"


def first_job_blocks(readme):
    """The first ```c and ```python blocks of the first-job section."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n" + HEADING + "\n")
    if start < 0:
        sys.exit(f"{readme}: no heading '{HEADING}'")
    section = text[start + 1:]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    blocks = {}
    for m in re.finditer(r"^```(\w+)\n(.*?)^```\s*$", section, re.M | re.S):
        blocks.setdefault(m.group(1), m.group(2))
    for lang in ("c", "python"):
        if lang not in blocks:
            sys.exit(f"{readme}: no ```{lang} block under '{HEADING}'")
    return blocks["c"], blocks["python"]


def check_learned(name, out):
    losses = [float(x) for x in re.findall(r"^step +\d+ +loss +([-+0-9.eE]+|nan|inf)$", out, re.M)]
    if len(losses) < 2:
        return f"{name}: expected 'step N  loss X' lines, got:\n{out}"
    if not losses[-1] < 0.7 * losses[0]:
        return f"{name}: the loss did not fall ({losses[0]} -> {losses[-1]}):\n{out}"
    print(f"{name}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return None


def run(name, argv, env, cwd):
    try:
        p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        return f"{name}: did not finish within 240 s"
    if p.returncode != 0:
        return f"{name}: exit status {p.returncode}\n{p.stdout}{p.stderr}"
    return check_learned(name, p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--salusd", required=True)
    ap.add_argument("--cc", required=True, help="the C compiler command (may be several words)")
    ap.add_argument("--include", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--cflag", action="append", default=[])
    ap.add_argument("--python")
    ap.add_argument("--pythonpath")
    a = ap.parse_args()
    c_src, py_src = first_job_blocks(a.readme)

    tmp = tempfile.mkdtemp(prefix="salus-readme-")
    runtime = os.path.join(tmp, "runtime")  # the user's private runtime directory
    os.mkdir(runtime, 0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SALUS_")}
    env["XDG_RUNTIME_DIR"] = runtime
    sock = os.path.join(runtime, "salus", "salus.sock")
    server = None
    failures = []
    try:
        argv = [a.salusd] + (["--allow-root"] if os.geteuid() == 0 else [])
        server = subprocess.Popen(argv, env=env, cwd=tmp)
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if server.poll() is not None:
                sys.exit(f"salusd exited during start-up ({server.returncode})")
            if time.monotonic() > deadline:
                sys.exit(f"salusd made no socket at {sock} within 20 s")
            time.sleep(0.05)

        with open(os.path.join(tmp, "first_job.c"), "w") as f:
            f.write(c_src)
        # warnings too: what a newcomer copies should compile clean
        cc = shlex.split(a.cc) + ["-Wall", "-Wextra", "-Werror"] + a.cflag + [
            "first_job.c", "-o", "first_job", "-I" + a.include, "-L" + a.libdir,
            "-Wl,-rpath," + a.libdir, "-lsalusclient"]
        p = subprocess.run(cc, cwd=tmp, capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"C: does not compile ({' '.join(cc)}):\n{p.stdout}{p.stderr}")
        else:
            failures.append(run("C", [os.path.join(tmp, "first_job")], env, tmp))

        if a.python and a.pythonpath:
            with open(os.path.join(tmp, "first_job.py"), "w") as f:
                f.write(py_src)
            penv = dict(env, PYTHONPATH=a.pythonpath, PYTHONDONTWRITEBYTECODE="1")
            failures.append(run("Python", [a.python, "first_job.py"], penv, tmp))
        else:
            print("Python: not run (no binding in this build)")
    finally:
        if server and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = server.wait()
            if rc != 0:
                failures.append(f"salusd did not drain and exit 0 (status {rc})")
        shutil.rmtree(tmp, ignore_errors=True)
    failures = [f for f in failures if f]
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
