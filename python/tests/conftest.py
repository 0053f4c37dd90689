"""A real salusd for the binding's tests: started once per test module on the
cpu backend, on a private ipc:// socket, and stopped (SIGTERM, a drain) after."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import salus


class Server:
    def __init__(self, extra=()):
        exe = os.environ.get("SALUSD")
        if not exe:
            pytest.fail("SALUSD (the salusd to test against) is not set; run through meson test")
        self.dir = tempfile.mkdtemp(prefix="salus-py-")
        self.url = f"ipc://{self.dir}/salus.sock"
        args = [exe, "--listen", self.url, "--memory-limit", "256M", "--log-level", "warn"]
        if os.geteuid() == 0:
            args.append("--allow-root")
        self.proc = subprocess.Popen(args + list(extra))
        deadline = time.monotonic() + 10
        while True:
            try:
                salus.connect(self.url).close()
                return
            except salus.Error:
                if self.proc.poll() is not None:
                    pytest.fail(f"salusd exited during start-up ({self.proc.returncode})")
                if time.monotonic() > deadline:
                    self.proc.kill()
                    pytest.fail("salusd did not answer within 10 s")
                time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


@pytest.fixture(scope="module")
def server():
    srv = Server()
    yield srv
    assert srv.stop() == 0, "salusd did not drain and exit 0"


@pytest.fixture
def client(server):
    with salus.connect(server.url) as c:
        yield c


@pytest.fixture
def session(client):
    with client.session(name="pytest") as s:
        yield s
