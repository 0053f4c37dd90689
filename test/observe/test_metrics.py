"""Prometheus metrics of a real salusd with real clients.

promtool:   a scrape passes `promtool check metrics` (format and naming
            conventions) and its per-session iteration counts are exactly
            what each client ran; latency histograms reach an hour; a
            session that waits for memory shows in the admission-wait
            counter while it waits and in the histogram by reason once
            admitted; each session's reserved memory is shown.
            By default sessions are labelled by id and tenants by an opaque
            hash: no session name and no uid is shown.
prometheus: a real Prometheus server scrapes salusd every 200 ms; its
            HTTP API (/api/v1/query) then reports the same counts.
exposure:   --metrics-names shows names and uids; a unix-socket endpoint
            is born 0600 and serves the same text; an https:// one serves a
            client with a certificate its CA signed and no other."""
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs  # noqa: E402

# the third name is hostile: a quote, a backslash, braces and a control
# character must not break the exposition format (label escaping)
RUNS = {"alpha": 37, "beta": 64, 'bad"na\\me{x}\x07': 5}


def start_jobs(srv):
    jobs = [srv.client(name, n) for name, n in RUNS.items()]
    for j in jobs:
        assert obs.Salusd.wait_done(j) == RUNS[j.name]
    return jobs


def check_promtool(srv, jobs):
    promtool = obs.need("promtool")
    ctype, text = srv.scrape()
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    assert "salus_session_iterations_total" in text, text[:2000]
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    print(p.stdout, p.stderr)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), \
        "promtool: %s %s" % (p.stdout, p.stderr)
    m = obs.parse_metrics(text)
    for j in jobs:
        got = obs.series(m, "salus_session_iterations_total", session=str(j.session))
        assert len(got) == 1 and got[0][1] == RUNS[j.name], (j.name, got)
        # the default names no one: no name label, the tenant a hash
        assert "name" not in got[0][0], got[0][0]
        assert re.fullmatch(r"[0-9a-f]{16}", got[0][0]["tenant"]), got[0][0]
        dev = obs.series(m, "salus_session_device_seconds_total", session=str(j.session))
        assert dev and dev[0][1] > 0, dev
        mem = obs.series(m, "salus_session_memory_bytes", session=str(j.session),
                         **{"class": "persistent"})
        assert mem and mem[0][1] > 0, mem
    assert len({obs.series(m, "salus_session_iterations_total", session=str(j.session))[0][0]
                ["tenant"] for j in jobs}) == 1, "one tenant's sessions share its hash"
    for j in jobs:
        if j.name.isalnum():
            assert j.name not in text, j.name
    assert "uid %d" % os.geteuid() not in text
    total = sum(RUNS.values())
    assert m[("salus_iterations_total", frozenset())] >= total
    count = m[("salus_iteration_duration_seconds_count", frozenset())]
    assert count >= total, count
    assert m[("salus_request_duration_seconds_count", frozenset())] > total
    busy = [v for k, v in m.items() if k[0] == "salus_lane_busy_seconds_total"]
    assert busy and sum(busy) > 0, busy
    assert any(k[0] == "salus_build_info" for k in m)
    for reason in ("quota", "capacity", "fragmentation"):
        assert ("salus_admission_queue_length", frozenset({("reason", reason)})) in m
    check_buckets(text)
    check_docs(text)


MIB = 1 << 20


def promtool_clean(text):
    p = subprocess.run([obs.need("promtool"), "check", "metrics"], input=text,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), \
        "promtool: %s %s" % (p.stdout, p.stderr)


def spawn(srv, name, *extra):
    """An obs_client with extra options (--persistent, --wait), not waiting
    for its "session" line (a waiting client prints it once admitted)."""
    p = subprocess.Popen([os.environ["OBS_CLIENT"], "--url", srv.url, "--name", name,
                          "--iterations", "3", "--hold"] + list(extra),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.name = name
    return p


def opened(p):
    line = p.stdout.readline().split()
    assert len(line) == 2 and line[0] == "session", (p.name, line)
    p.session = int(line[1])
    return p


def check_admission_wait():
    srv = obs.Salusd(metrics=True)
    jobs = []
    try:
        # two sessions of 300 MiB do not fit 512 MiB: the second waits
        hog = opened(spawn(srv, "hog", "--persistent", str(300 * MIB)))
        jobs.append(hog)
        assert obs.Salusd.wait_done(hog) == 3
        waiter = spawn(srv, "waiter", "--persistent", str(300 * MIB), "--wait")
        jobs.append(waiter)
        capacity = frozenset({("reason", "capacity")})
        deadline = time.time() + 30
        while True:
            m = obs.parse_metrics(srv.scrape()[1])
            if m[("salus_admission_queue_length", capacity)] == 1:
                break
            assert time.time() < deadline, "the waiter never queued"
            time.sleep(0.1)
        time.sleep(0.3)
        text = srv.scrape()[1]
        promtool_clean(text)
        m = obs.parse_metrics(text)
        waiting = m[("salus_admission_waiting_seconds_total", capacity)]
        assert waiting >= 0.3, waiting  # a wait still going on counts
        assert m[("salus_admission_wait_seconds_count", capacity)] == 0
        frag = frozenset({("reason", "fragmentation")})
        assert ("salus_admission_waiting_seconds_total", frag) in m
        # what the hog holds: its whole declared region, however little it uses
        held = obs.series(m, "salus_session_memory_bytes", session=str(hog.session),
                          **{"class": "persistent_reserved"})
        used = obs.series(m, "salus_session_memory_bytes", session=str(hog.session),
                          **{"class": "persistent"})
        assert held and held[0][1] == 300 * MIB and used[0][1] < held[0][1], (held, used)
        need = obs.series(m, "salus_session_memory_bytes", session=str(hog.session),
                          **{"class": "ephemeral_need"})
        assert need and need[0][1] > 0, need

        obs.Salusd.release(hog)
        jobs.remove(hog)
        opened(waiter)
        assert obs.Salusd.wait_done(waiter) == 3
        text = srv.scrape()[1]
        promtool_clean(text)
        m = obs.parse_metrics(text)
        count = m[("salus_admission_wait_seconds_count", capacity)]
        total = m[("salus_admission_wait_seconds_sum", capacity)]
        assert count == 1 and total >= 0.3, (count, total)
        # the one wait sits in a bucket between its length and an hour
        le = {dict(k[1])["le"]: v for k, v in m.items()
              if k[0] == "salus_admission_wait_seconds_bucket"
              and ("reason", "capacity") in k[1]}
        assert le["3600"] == 1 and le["+Inf"] == 1, le
        assert m[("salus_admission_wait_seconds_count", frag)] == 0
        after = m[("salus_admission_waiting_seconds_total", capacity)]
        assert after >= total and after >= waiting, (after, total, waiting)
        print("admission wait: %.3f s (counter %.3f s)" % (total, after))
    finally:
        rc = srv.finish(jobs)
    assert rc == 0, rc


DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs")


def documented_metrics():
    """{name: (type, labels, {label: values})} from the docs' metrics table
    (the one headed | metric | type | labels | meaning |, wherever it is)."""
    out = {}
    for root, _, files in os.walk(DOCS):
        for f in files:
            if not f.endswith(".md"):
                continue
            rows = None
            for line in open(os.path.join(root, f), encoding="utf-8"):
                if line.startswith("| metric | type | labels |"):
                    rows = []
                elif rows is not None and line.startswith("|"):
                    rows.append([c.strip() for c in line.strip().strip("|").split("|")])
                elif rows is not None:
                    break
            for cells in (rows or [])[1:]:  # the |---| line
                names = re.findall(r"`([a-z_]+)`", cells[0])
                types = [t.strip() for t in cells[1].split(",")]
                labels, values = [], {}
                tokens = [t.strip() for t in cells[2].split(",") if t.strip()]
                for k, tok in enumerate(tokens):
                    if ":" in tok:
                        name, first = tok.split(":", 1)
                        labels.append(name.strip())
                        values[name.strip()] = {first.strip()} | set(tokens[k + 1:])
                        break
                    labels.append(tok)
                for k, n in enumerate(names):
                    out[n] = (types[k] if k < len(types) else types[-1], set(labels), values)
    return out


def check_docs(text):
    """The docs name every metric of the scrape, with its type, its labels
    and the values they list, and nothing the scrape lacks."""
    docs = documented_metrics()
    assert docs, "no metrics table under docs/"
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert set(docs) == set(types), ("documented, not served: %s; served, not documented: %s"
                                     % (sorted(set(docs) - set(types)),
                                        sorted(set(types) - set(docs))))
    m = obs.parse_metrics(text)
    for name, (kind, labels, values) in docs.items():
        assert types[name] == kind, (name, kind, types[name])
        fam = [dict(k[1]) for k in m if k[0] == name or
               (kind == "histogram" and k[0] in (name + "_bucket", name + "_count"))]
        assert fam, "no series of %s to check its labels" % name
        seen = set().union(*(set(x) for x in fam)) - {"le"}
        assert seen == labels, (name, "documented labels", labels, "served", seen)
        for label, want in values.items():
            got = {x[label] for x in fam}
            assert got == want, (name, label, "documented", want, "served", got)


def check_buckets(text):
    """Request and iteration histograms reach minutes, up to an hour."""
    for name in ("salus_request_duration_seconds", "salus_iteration_duration_seconds"):
        les = re.findall(r'^%s_bucket\{le="([^"]+)"\}' % name, text, re.M)
        for want in ("10", "60", "300", "3600", "+Inf"):
            assert want in les, (name, les)


def query(port, q):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def check_prometheus(srv, jobs):
    prom = obs.need("prometheus")
    tmp = tempfile.mkdtemp(prefix="salus-prom-")
    port = obs.free_port()
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write("global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\n"
                "scrape_configs:\n  - job_name: salusd\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % srv.metrics_port)
    log = open(os.path.join(tmp, "prometheus.log"), "w+")
    p = subprocess.Popen([prom, "--config.file", os.path.join(tmp, "prometheus.yml"),
                          "--storage.tsdb.path", os.path.join(tmp, "data"),
                          "--web.listen-address", "127.0.0.1:%d" % port],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        want = {str(j.session): RUNS[j.name] for j in jobs}
        deadline = time.time() + 60
        got = {}
        while time.time() < deadline:
            try:
                res = query(port, "salus_session_iterations_total")
                got = {r["metric"]["session"]: float(r["value"][1]) for r in res}
                up = query(port, 'up{job="salusd"}')
                if got == want and up and up[0]["value"][1] == "1":
                    break
            except (OSError, ValueError):
                pass  # Prometheus still starting
            time.sleep(0.3)
        print("prometheus saw", got, "clients ran", want)
        assert got == want, (got, want)
        info = query(port, "salus_build_info")
        assert info and info[0]["metric"].get("version"), info
        # a rate over the scrapes: the lanes were busy, so it is defined
        assert query(port, "salus_lane_busy_seconds_total")
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.seek(0)
        if p.returncode not in (0, -15):
            print(log.read())


def http_get(sock):
    """GET /metrics over a connected socket: (status, body)."""
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: salusd\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def check_names():
    srv = obs.Salusd("--metrics-names", metrics=True)
    jobs = []
    try:
        jobs = start_jobs(srv)
        m = obs.parse_metrics(srv.scrape()[1])
        for j in jobs:
            got = obs.series(m, "salus_session_iterations_total", session=str(j.session))
            assert len(got) == 1 and got[0][0]["tenant"] == "uid %d" % os.geteuid(), got
            if j.name.isalnum():
                assert got[0][0]["name"] == j.name, got
    finally:
        assert srv.finish(jobs) == 0


def check_unix():
    run = tempfile.mkdtemp(prefix="salus-met-")
    path = os.path.join(run, "metrics.sock")
    srv = obs.Salusd("--metrics-listen", "unix:" + path)
    jobs = []
    try:
        jobs = start_jobs(srv)
        st = os.lstat(path)
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid(), oct(st.st_mode)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        status, body = http_get(s)
        assert status == 200 and "salus_session_iterations_total" in body, (status, body[:300])
        promtool_clean(body)
    finally:
        assert srv.finish(jobs) == 0
    assert not os.path.exists(path), "the socket file outlived salusd"


def check_tls():
    if not shutil.which("openssl"):
        obs.skip("openssl not installed")
    pki = tempfile.mkdtemp(prefix="salus-met-pki-")
    key = "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out %s.key"

    def sh(cmd):
        subprocess.run(cmd, shell=True, cwd=pki, check=True, capture_output=True)

    for ca in ("ca", "other"):
        sh(key % ca + " && openssl req -x509 -new -key %s.key -days 2 -subj /CN=%s -out %s.crt"
           % (ca, ca, ca))
    for name, ca, ext in (("srv", "ca", "-extfile srv.ext"), ("scraper", "ca", ""),
                          ("stranger", "other", "")):
        if ext:
            sh("printf 'subjectAltName=IP:127.0.0.1\n' > srv.ext")
        sh(key % name + " && openssl req -new -key %s.key -subj /CN=%s -out %s.csr && "
           "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial -days 2 %s "
           "-out %s.crt" % (name, name, name, name, ca, ca, ext, name))
    os.chmod(os.path.join(pki, "srv.key"), 0o600)
    port = obs.free_port()
    srv = obs.Salusd("--metrics-listen", "https://127.0.0.1:%d" % port, "--tls-cert",
                     os.path.join(pki, "srv.crt"), "--tls-key", os.path.join(pki, "srv.key"),
                     "--metrics-tls-ca", os.path.join(pki, "ca.crt"))

    def get(cert):
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        if cert:
            ctx.load_cert_chain(os.path.join(pki, cert + ".crt"), os.path.join(pki, cert + ".key"))
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        return http_get(ctx.wrap_socket(raw, server_hostname="127.0.0.1"))

    try:
        status, body = get("scraper")
        assert status == 200 and "salus_uptime_seconds" in body, (status, body[:300])
        for cert in (None, "stranger"):
            try:
                status, body = get(cert)
            except (OSError, ssl.SSLError, IndexError, ValueError):
                continue  # refused in the handshake, or the connection dropped
            raise AssertionError("a scraper with %s got %d" % (cert or "no certificate", status))
    finally:
        assert srv.finish([]) == 0


def main():
    mode = sys.argv[1]
    if mode == "exposure":
        obs.need("promtool")
        check_names()
        check_unix()
        check_tls()
        print("ok")
        return
    if mode == "prometheus":
        obs.need("prometheus")
    else:
        obs.need("promtool")
    srv = obs.Salusd(metrics=True)
    jobs = []
    try:
        jobs = start_jobs(srv)
        (check_promtool if mode == "promtool" else check_prometheus)(srv, jobs)
    finally:
        rc = srv.finish(jobs)
    assert rc == 0, rc
    if mode == "promtool":
        check_admission_wait()
    print("ok")


if __name__ == "__main__":
    main()
