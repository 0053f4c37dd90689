"""salusctl's operator commands (each also with --json), salusd's
configuration file, and the man pages.

salusctl: sessions, top, health, policy, session, kill-session, trace and
          drain against a real salusd with real clients; --json output of
          every command parses; non-operators are refused the operator
          commands (as root: a second uid through setpriv).
config:   every flag of salusd --help is a configuration key; the file's
          settings apply, flags override them, errors name the file and
          line, --print-config's output reads back the same; a salusd
          started from a file serves with the file's policy.
man:      salusd.8 and salusctl.1 format without a warning (groff -ww) and
          name every flag and command."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAN = os.path.join(HERE, "..", "..", "docs", "man")


def salusd(*args):
    return subprocess.run([os.environ["SALUSD"]] + list(args), capture_output=True, text=True,
                          timeout=30)


def help_flags():
    text = salusd("--help").stdout
    return set(re.findall(r"(?<![\w-])--([a-z][a-z-]+)", text)) - {"help", "version"}


def test_salusctl():
    srv = obs.Salusd(shared=True)
    jobs = []
    try:
        jobs = [srv.client("one", 10), srv.client("two", 12)]
        for j in jobs:
            obs.Salusd.wait_done(j)
        p = srv.ctl("sessions", check=True)
        assert "one" in p.stdout and "two" in p.stdout, p.stdout
        rc, doc = srv.ctl_json("sessions")
        assert rc == 0 and {s["name"]: s["iterations"] for s in doc["sessions"]} == \
            {"one": 10, "two": 12}, doc
        rc, doc = srv.ctl_json("status")
        assert rc == 0 and doc["iterations_total"] >= 22 and doc["you"]["operator"], doc
        p = srv.ctl("top", "--iterations", "2", "--interval", "0.1", check=True)
        assert p.stdout.count("salusd ") == 2, p.stdout
        p = srv.ctl("--json", "top", "--iterations", "2", "--interval", "0.1", check=True)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 2 and all("sessions" in json.loads(x) for x in lines)
        assert srv.ctl("top", "--once", check=True).stdout.count("salusd ") == 1
        assert srv.ctl("health").returncode == 0
        assert srv.ctl_json("health") == (0, json.loads(srv.ctl("--json", "health").stdout))
        rc, doc = srv.ctl_json("policy", "srtf")
        assert rc == 0 and doc["ok"] and doc["policy"] == "srtf", doc
        assert srv.ctl_json("status")[1]["policy"] == "srtf"
        rc, doc = srv.ctl_json("session", str(jobs[0].session), "--weight", "2")
        assert rc == 0 and doc["ok"], doc
        rc, doc = srv.ctl_json("kill-session", "12345")
        assert rc == 1 and not doc["ok"] and doc["code"] == 4, doc  # NOT_FOUND
        rc, doc = srv.ctl_json("kill-session", str(jobs[1].session))
        assert rc == 0 and doc["ok"], doc
        names = [s["name"] for s in srv.ctl_json("status")[1]["sessions"]]
        assert names == ["one"], names
        out = os.path.join(srv.dir, "t.json")
        rc, doc = srv.ctl_json("trace", "--seconds", "0.5", "-o", out)
        assert rc == 0 and doc["ok"] and doc["file"] == out, doc
        assert "traceEvents" in json.load(open(out))
        operator_refusals(srv)
        rc, doc = srv.ctl_json("drain")
        assert rc == 0 and doc["ok"], doc
        srv.proc.wait(timeout=30)
        assert srv.proc.returncode == 0, srv.proc.returncode
        rc, doc = srv.ctl_json("health")
        assert rc == 1 and not doc["ok"], doc
    finally:
        for j in jobs:
            j.stdin.close()
            j.wait(timeout=30)
        rc, log = srv.stop()
        print(log)
    assert rc == 0


def operator_refusals(srv):
    """A second uid may not trace, drain or kill others' sessions."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        print("operator refusals not checked: needs root and setpriv for a second uid")
        return
    for args in (["trace", "--seconds", "0.1", "-o", "/dev/null"], ["drain"],
                 ["kill-session", str(srv.ctl_json("status")[1]["sessions"][0]["id"])]):
        p = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                            os.environ["SALUSCTL"], "--url", srv.url, "--json"] + args,
                           capture_output=True, text=True, timeout=30)
        doc = json.loads(p.stdout)
        assert p.returncode == 1 and doc["code"] == 5, (args, p.stdout, p.stderr)


def test_config():
    tmp = tempfile.mkdtemp(prefix="salus-cfg-")
    printed = salusd("--print-config").stdout
    keys = set(re.findall(r"^#? ?([a-z][a-z-]+) =", printed, re.M))
    missing = help_flags() - keys - {"config", "print-config"}
    assert not missing, "flags without a configuration key: %s" % sorted(missing)
    assert "config" not in keys and "print-config" not in keys

    sock = "ipc://%s/s.sock" % tmp
    path = os.path.join(tmp, "salusd.conf")
    with open(path, "w") as f:
        f.write("# test\npolicy = srtf  # trailing comment\nstrict = true\n"
                "listen = %s\nmetrics-listen = \"9464\"\nno-gap-fill = false\n" % sock)
    out = salusd("--config", path, "--print-config").stdout
    assert "policy = srtf\n" in out and "strict = true\n" in out and \
        "metrics-listen = 9464\n" in out and "listen = %s\n" % sock in out, out
    assert "# no-gap-fill = false\n" in out and "# contexts = 256\n" in out
    out = salusd("--config", path, "--policy", "fifo", "--listen", "ipc://%s/t.sock" % tmp,
                 "--print-config").stdout
    assert "policy = fifo\n" in out and "s.sock" not in out and "t.sock" in out, out
    again = os.path.join(tmp, "again.conf")
    with open(again, "w") as f:
        f.write(out)
    assert salusd("--config", again, "--print-config").stdout == out
    for body, line, word in (("policy = srtf\nidle-timeout = soon\n", 2, "idle-timeout"),
                             ("\n\npolcy = srtf\n", 3, "polcy"),
                             ("strict = maybe\n", 1, "strict"),
                             ("policy srtf\n", 1, "key = value"),
                             ("policy = nonesuch\n", 1, "policy")):
        with open(path, "w") as f:
            f.write(body)
        p = salusd("--config", path)
        assert p.returncode == 2 and "%s:%d" % (path, line) in p.stderr and word in p.stderr, \
            (body, p.stderr)
    p = salusd("--config", os.path.join(tmp, "none.conf"))
    assert p.returncode == 2 and "none.conf" in p.stderr

    run = tempfile.mkdtemp(prefix="salus-cfgrun-")
    with open(path, "w") as f:
        f.write("policy = priority\nmemory-limit = 256M\nlog-level = warn\n")
        if os.geteuid() == 0:
            f.write("allow-root = true\n")
    url = "ipc://%s/salus.sock" % run
    proc = subprocess.Popen([os.environ["SALUSD"], "--config", path, "--listen", url])
    try:
        deadline = time.time() + 20
        while True:
            p = subprocess.run([os.environ["SALUSCTL"], "--url", url, "--json", "status"],
                               capture_output=True, text=True, timeout=30)
            if p.returncode == 0:
                break
            assert time.time() < deadline and proc.poll() is None, p.stderr
            time.sleep(0.1)
        assert json.loads(p.stdout)["policy"] == "priority"
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_man():
    groff = obs.need("groff")
    for page in ("salusd.8", "salusctl.1"):
        p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", os.path.join(MAN, page)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and not p.stderr, (page, p.stderr)
        p = subprocess.run([groff, "-man", "-Tutf8", "-ww", os.path.join(MAN, page)],
                           capture_output=True, text=True, timeout=60)
        plain = re.sub(r"\x1b\[[0-9;]*m|.\x08", "", p.stdout)
        assert "NAME" in plain and "SYNOPSIS" in plain, plain[:500]
    text = open(os.path.join(MAN, "salusd.8")).read().replace("\\-", "-")
    missing = [f for f in help_flags() if "--" + f not in text]
    assert not missing, "salusd.8 lacks %s" % missing
    text = open(os.path.join(MAN, "salusctl.1")).read().replace("\\-", "-")
    usage = subprocess.run([os.environ["SALUSCTL"], "--help"], capture_output=True,
                           text=True).stdout
    commands = re.findall(r"^  ([a-z-]+)\b", usage.split("options:")[0], re.M)
    missing = [c for c in commands
               if not re.search(r'^\.B[IR]? "?%s(\s|$)' % re.escape(c), text, re.M)]
    assert len(commands) >= 9 and not missing, (commands, missing)


if __name__ == "__main__":
    {"salusctl": test_salusctl, "config": test_config, "man": test_man}[sys.argv[1]]()
    print("ok")
