"""A private salusd for the Python benches: started on an ipc:// socket in
a fresh directory, with idle OpenMP threads of its oneDNN ops sleeping
instead of spinning against PyTorch peers (which keep PyTorch's
defaults)."""
import os
import subprocess
import tempfile
import time


def start(salusd, tag, memory="2G"):
    """(the salusd process, its URL), once it answers; SystemExit naming
    tag when it does not within 10 s."""
    import salus
    d = tempfile.mkdtemp(prefix=f"{tag}-")
    url = f"ipc://{d}/salus.sock"
    args = [salusd, "--listen", url, "--memory-limit", memory, "--log-level", "warn"]
    if os.geteuid() == 0:
        args.append("--allow-root")
    # the setting docs/operations.md gives a host salusd shares: oneDNN's
    # idle OpenMP threads poll briefly, then sleep
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    server = subprocess.Popen(args, env=dict(env, GOMP_SPINCOUNT="10000"))
    deadline = time.monotonic() + 10
    while True:
        try:
            salus.connect(url).close()
            return server, url
        except salus.Error:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                server.wait()
                raise SystemExit(f"{tag}: salusd did not start")
            time.sleep(0.05)
