"""Shared pieces of the observability tests: a real salusd in a private
folder, real clients (obs_client), free loopback ports, and SKIP (exit 77)
when a tool the test needs is missing. Paths come from the environment
meson sets: SALUSD, SALUSCTL, OBS_CLIENT."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def skip(why):
    # under CI only the gpu suite may skip (scripts/testsummary)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        print("FAIL (CI, where this test must run): " + why, flush=True)
        sys.exit(1)
    print("SKIP: " + why, flush=True)
    sys.exit(SKIP)


def need(tool):
    path = shutil.which(tool) or (tool if os.path.exists(tool) else None)
    if not path:
        skip("%s not installed (scripts/install-deps.sh observe)" % tool)
    return path


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Salusd:
    """A salusd on an ipc:// socket of its own; stop() drains it."""

    def __init__(self, *extra, metrics=False, shared=False):
        """shared: other users may connect (the folder 0755, the socket
        0666), to check what non-operators are refused."""
        self.dir = tempfile.mkdtemp(prefix="salus-obs-")
        if shared:
            os.chmod(self.dir, 0o755)
            extra = extra + ("--ipc-mode", "0666")
        self.url = "ipc://%s/salus.sock" % self.dir
        self.metrics_port = free_port() if metrics else None
        args = [os.environ["SALUSD"], "--listen", self.url, "--memory-limit", "512M",
                "--log-level", "warn"]
        if self.metrics_port:
            args += ["--metrics-listen", str(self.metrics_port)]
        if os.geteuid() == 0:
            args.append("--allow-root")
        self.args = args + list(extra)
        self.log = open(os.path.join(self.dir, "salusd.log"), "w+")
        self.start()

    def start(self):
        """Starts salusd (again, after it exited: the same folder, socket
        and flags) and waits until it answers."""
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while self.ctl("health").returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError("salusd did not start:\n" + self.log.read())
            time.sleep(0.1)

    def ctl(self, *args, check=False, timeout=60):
        p = subprocess.run([os.environ["SALUSCTL"], "--url", self.url] + list(args),
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError("salusctl %s: %d\n%s%s" % (args, p.returncode, p.stdout, p.stderr))
        return p

    def ctl_json(self, *args):
        p = self.ctl("--json", *args)
        return p.returncode, json.loads(p.stdout)

    def client(self, name, iterations, priority=0, hold=True, width=256, persistent_mib=0):
        args = [os.environ["OBS_CLIENT"], "--url", self.url, "--name", name, "--iterations",
                str(iterations), "--priority", str(priority), "--width", str(width),
                "--persistent", str(persistent_mib << 20)]
        if hold:
            args.append("--hold")
        p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline().split()
        if len(line) != 2 or line[0] != "session":
            raise RuntimeError("client %s did not open a session: %r" % (name, line))
        p.session = int(line[1])
        p.name = name
        return p

    @staticmethod
    def wait_done(p, timeout=120):
        """Reads the client's 'done N' line (it holds its session after)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = p.stdout.readline()
            if line.startswith("done"):
                return int(line.split()[1])
            if not line:
                raise RuntimeError("client %s exited (%s)" % (p.name, p.wait()))
        raise RuntimeError("client %s timed out" % p.name)

    @staticmethod
    def release(p):
        p.stdin.close()
        return p.wait(timeout=30)

    def scrape(self):
        url = "http://127.0.0.1:%d/metrics" % self.metrics_port
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.headers.get("Content-Type", ""), r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode, text

    def finish(self, jobs):
        """Releases the held clients, stops salusd and prints its log;
        returns its exit status."""
        for j in jobs:
            Salusd.release(j)
        rc, log = self.stop()
        print(log)
        return rc


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of an exposition text."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        if "{" in head:
            name, rest = head.split("{", 1)
            labels = {}
            for part in rest.rstrip("}").split('",'):
                k, v = part.split('="', 1)
                labels[k] = v.rstrip('"')
        else:
            name, labels = head, {}
        out[(name, frozenset(labels.items()))] = float(value)
    return out


def series(metrics, name, **want):
    return [(dict(k[1]), v) for k, v in metrics.items()
            if k[0] == name and all(dict(k[1]).get(a) == b for a, b in want.items())]
