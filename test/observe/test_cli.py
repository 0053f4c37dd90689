"""salusctl's operator commands (each also with --json), salusd's
configuration file, and the man pages.

salusctl: sessions, top, health, policy, session, kill-session, trace and
          drain against a real salusd with real clients; --json output of
          every command parses; non-operators are refused the operator
          commands (as root: a second uid through setpriv).
status-memory: a session that reserves persistent memory shows its reservation
          in status, top and sessions, and the memory classes add up to the
          capacity (text and --json).
top-restart: salusctl top (text and --json) outlives a restart of salusd,
          showing reconnecting... with a growing backoff meanwhile.
ctl-partitions: salusctl partitions queries (text, --json, any user) and sets.
trace-limits: the trace's duration limits: sub-second traces, refusals naming
          the range, nothing written (exit 1) when nothing was recorded.
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
import signal
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
        # both jobs are done: a trace of the idle device is refused
        out = os.path.join(srv.dir, "t.json")
        rc, doc = srv.ctl_json("trace", "--seconds", "0.2", "-o", out)
        assert rc == 1 and not doc["ok"] and doc["events"] == 0, doc
        assert not os.path.exists(out)
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


MIB = 1 << 20
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def memory_line(text):
    """{class: bytes} of status's memory line (values as printed, rounded
    to a tenth of their unit)."""
    line = next(x for x in text.splitlines() if x.startswith("memory: capacity"))
    found = re.findall(r"(capacity|persistent|reserved|lanes|framework|free) "
                       r"([0-9.]+) (B|KiB|MiB|GiB|TiB)", line)
    got = {k: float(v) * UNITS[u] for k, v, u in found}
    assert set(got) == {"capacity", "persistent", "reserved", "lanes", "framework", "free"}, line
    return got, line


def check_memory_adds_up(doc):
    m = doc["memory"]
    parts = (m["persistent_used"], m["reserved_unused"], m["ephemeral_lanes"], m["framework"],
             m["free"])
    assert sum(parts) == m["capacity"], m
    assert m["reserved_unused"] == m["persistent_reserved"] - m["persistent_used"], m


def test_memory():
    srv = obs.Salusd()
    jobs = []
    try:
        rc, doc = srv.ctl_json("status")
        check_memory_adds_up(doc)
        assert doc["memory"]["reserved_unused"] == 0, doc["memory"]
        jobs = [srv.client("reserver", 3, persistent_mib=300), srv.client("plain", 3)]
        for j in jobs:
            obs.Salusd.wait_done(j)
        rc, doc = srv.ctl_json("status")
        assert rc == 0, doc
        check_memory_adds_up(doc)
        by = {s["name"]: s for s in doc["sessions"]}
        r, p = by["reserver"], by["plain"]
        # its declaration from admission on, of which its tensors use a little
        assert r["persistent_reserved"] == 300 * MIB, r
        assert 0 < r["persistent_bytes"] < 300 * MIB, r
        # a session that declared none holds what it allocated
        assert p["persistent_reserved"] == p["persistent_bytes"] > 0, p
        m = doc["memory"]
        assert m["reserved_unused"] == 300 * MIB - r["persistent_bytes"], m
        assert m["persistent_reserved"] == 300 * MIB + p["persistent_bytes"], m

        for args in (["status"], ["top", "--once"]):
            text = srv.ctl(*args, check=True).stdout
            got, line = memory_line(text)
            # each figure is rounded to a tenth of its unit
            slack = sum(0.05 * UNITS[u] for u in re.findall(r"\d (B|KiB|MiB|GiB)", line)[1:])
            assert abs(sum(v for k, v in got.items() if k != "capacity") - got["capacity"]) <= \
                slack, line
            assert abs(got["reserved"] - m["reserved_unused"]) <= 0.05 * MIB, line
            row = next(x for x in text.splitlines() if " reserver " in x)
            assert "300.0 MiB" in row, row
            header = next(x for x in text.splitlines() if x.strip().startswith("id "))
            assert header.index("reserved") == \
                row.index("300.0 MiB") + len("300.0 MiB") - len("reserved"), (header, row)
        text = srv.ctl("sessions", check=True).stdout
        header, row = text.splitlines()[0], next(x for x in text.splitlines() if "reserver" in x)
        assert "reserved MiB" in header and "300.0" in row, text

        # the reservation goes with its session
        obs.Salusd.release(jobs[0])
        deadline = time.time() + 30
        while len(srv.ctl_json("status")[1]["sessions"]) != 1:
            assert time.time() < deadline
            time.sleep(0.05)
        rc, doc = srv.ctl_json("status")
        check_memory_adds_up(doc)
        assert doc["memory"]["reserved_unused"] == 0, doc["memory"]
        jobs = jobs[1:]
    finally:
        rc = srv.finish(jobs)
    assert rc == 0


def next_record(top):
    """The next JSON record `salusctl --json top` printed; fails, with its
    exit status, if it exited instead."""
    while True:
        line = top.stdout.readline()
        if not line:
            raise AssertionError(f"salusctl top exited early (status {top.wait(timeout=10)})")
        if line.strip():
            return json.loads(line)


def test_top_restart():
    srv = obs.Salusd()
    tops = []
    try:
        base = [os.environ["SALUSCTL"], "--url", srv.url]
        # NNG's own objects for the client closed as salusd goes: see the file
        env = dict(os.environ, LSAN_OPTIONS="suppressions=" +
                   os.path.join(HERE, "nng-reconnect.lsan.supp"))
        # enough refreshes to outlast the restart on a slow (sanitized) build
        want = 40
        js = subprocess.Popen(base + ["--json", "top", "--interval", "0.2", "--iterations",
                                      str(want)], stdout=subprocess.PIPE, text=True, env=env)
        tx = subprocess.Popen(base + ["top", "--interval", "0.2", "--iterations", str(want)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        tops = [js, tx]
        before = [next_record(js) for _ in range(2)]
        assert all(d["policy"] == "fair" for d in before), before
        # a mark of the first salusd: the second starts with the default
        srv.ctl("policy", "srtf", check=True)
        while next_record(js)["policy"] != "srtf":
            pass
        time.sleep(0.3)  # the text one refreshes too
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=30) == 0
        # while it is away: reconnecting..., backing off
        states = []
        while len(states) < 3:
            d = next_record(js)
            if d.get("state") == "reconnecting":
                states.append(d)
            else:
                assert d["policy"] == "srtf", d
        assert [d["attempt"] for d in states] == [1, 2, 3], states
        assert [d["retry_s"] for d in states] == [0.25, 0.5, 1], states
        assert all(not d["ok"] and d["code"] == 12 for d in states), states
        srv.start()
        after = [json.loads(x) for x in js.stdout]
        assert js.wait(timeout=30) == 0
        after = [d for d in after if "policy" in d]
        assert after and all(d["policy"] == "fair" for d in after), after
        out, err = tx.communicate(timeout=60)
        assert tx.returncode == 0, err
        heads = [x for x in out.splitlines() if x.startswith("salusd ")]
        assert len(heads) == want, out
        policies = [re.search(r"policy: (\w+)", h).group(1) for h in heads]
        first_srtf = policies.index("srtf")
        last_srtf = len(policies) - 1 - policies[::-1].index("srtf")
        assert set(policies[first_srtf:last_srtf + 1]) == {"srtf"} and \
            set(policies[last_srtf + 1:]) == {"fair"}, policies
        assert "reconnecting... attempt 1" in err and "reconnecting... attempt 2" in err, err
    finally:
        for t in tops:
            if t.poll() is None:
                t.kill()
            t.wait()
        rc, log = srv.stop()
        print(log)
    assert rc == 0


def test_partitions():
    srv = obs.Salusd(shared=True)
    try:
        p = srv.ctl("partitions", check=True)
        assert p.stdout.startswith("mode ") and "device " in p.stdout, p.stdout
        rc, doc = srv.ctl_json("partitions")
        assert rc == 0 and doc["ok"] and doc["command"] == "partitions", doc
        d = doc["partitions"]["detail"]
        assert doc["partitions"]["description"] == srv.ctl_json("status")[1]["partitions"]
        assert d["mode"] in ("off", "demand", "auto", "fixed"), d
        if not d["supported"]:
            print("this device has no compute partitions: setting them not checked")
            return
        assert d["units"] >= 1 and d["unit"], d
        if d["units"] >= 2:
            rc, doc = srv.ctl_json("partitions", "1")
            assert rc == 0 and doc["ok"] and doc["mode"] == "1", doc
            d = srv.ctl_json("partitions")[1]["partitions"]["detail"]
            assert d["mode"] == "fixed" and d["on"] and d["online"] == 1, d
            assert 1 <= d["offline"] <= d["units"] - 1, d
            text = srv.ctl("partitions", check=True).stdout
            assert re.search(r"^online +1 %s\b" % d["unit"], text, re.M), text
            assert re.search(r"^offline +%d %s" % (d["offline"], d["unit"]), text, re.M), text
        assert srv.ctl("partitions", "off", check=True).stdout == "partitions: off\n"
        d = srv.ctl_json("partitions")[1]["partitions"]["detail"]
        assert d["mode"] == "off" and not d["on"] and d["online"] == 0, d
        assert srv.ctl("partitions", "demand", check=True).returncode == 0
        assert srv.ctl_json("partitions")[1]["partitions"]["detail"]["mode"] == "demand"
        p = srv.ctl("partitions", "off", "extra")
        assert p.returncode == 2 and "partitions [off|" in p.stderr, p.stderr
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            # anyone may look; only operators may change them
            user = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                    os.environ["SALUSCTL"], "--url", srv.url, "--json", "partitions"]
            p = subprocess.run(user, capture_output=True, text=True, timeout=30)
            assert p.returncode == 0 and json.loads(p.stdout)["partitions"]["detail"]["mode"] \
                == "demand", (p.stdout, p.stderr)
            p = subprocess.run(user + ["off"], capture_output=True, text=True, timeout=30)
            assert p.returncode == 1 and json.loads(p.stdout)["code"] == 5, p.stdout
    finally:
        rc, log = srv.stop()
        print(log)
    assert rc == 0


def test_trace():
    srv = obs.Salusd()
    jobs = []
    try:
        out = os.path.join(srv.dir, "t.json")
        for bad in ("0.05", "0", "-1", "3601", "abc", "0.5s", ""):
            p = srv.ctl("trace", "--seconds", bad, "-o", out)
            assert p.returncode == 2 and "from 0.1 to 3600" in p.stderr, (bad, p.stderr)
        assert not os.path.exists(out)
        p = srv.ctl("trace", "--seconds", "0.2", "-o", "/nonexistent/t.json")
        assert p.returncode == 1 and "cannot write /nonexistent/t.json" in p.stderr, p.stderr
        # nothing runs: nothing recorded, nothing written
        p = srv.ctl("trace", "--seconds", "0.2", "-o", out)
        assert p.returncode == 1 and "no events" in p.stderr and "not written" in p.stderr, \
            p.stderr
        assert not os.path.exists(out)

        jobs = [srv.client("busy", 10**7)]
        rc, doc = srv.ctl_json("trace", "--seconds", "0.5", "-o", out)
        assert rc == 0 and doc["ok"] and doc["events"] > 0 and doc["seconds"] == 0.5, doc
        with open(out) as f:
            trace = json.load(f)
        its = [e for e in trace["traceEvents"] if e.get("cat", "").startswith("iteration")]
        assert its and {e["args"]["session"] for e in its} == {jobs[0].session}, its[:3]
        assert 0.45e6 <= trace["otherData"]["duration_us"] < 5e6, trace["otherData"]
        p = srv.ctl("trace", "--seconds", "0.3", "-o", "-")
        assert p.returncode == 0 and "tracing 0.3 of 0.3 s" in p.stderr, p.stderr
        assert json.loads(p.stdout)["traceEvents"], p.stdout[:300]
        p = srv.ctl("trace", "--seconds", "1.5", "-o", out)
        assert p.returncode == 0, p.stderr
        assert "tracing 1 of 1.5 s" in p.stderr and "tracing 1.5 of 1.5 s" in p.stderr, p.stderr
    finally:
        for j in jobs:
            j.kill()
            j.wait(timeout=30)
        rc, log = srv.stop()
        print(log)
    assert rc == 0


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
    # a bad line is named, never shown; a file others may write is refused
    with open(path, "w") as f:
        f.write("the-secret-is hunter2\n")
    p = salusd("--config", path)
    assert p.returncode == 2 and "%s:1" % path in p.stderr and "hunter2" not in p.stderr, p.stderr
    with open(path, "w") as f:
        f.write("policy = srtf\n")
    os.chmod(path, 0o666)
    p = salusd("--config", path)
    assert p.returncode == 2 and path in p.stderr and "0666" in p.stderr, p.stderr
    os.chmod(path, 0o644)

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
    {"salusctl": test_salusctl, "status-memory": test_memory, "top-restart": test_top_restart,
     "ctl-partitions": test_partitions, "trace-limits": test_trace, "config": test_config,
     "man": test_man}[sys.argv[1]]()
    print("ok")
