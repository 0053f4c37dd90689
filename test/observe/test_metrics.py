"""Prometheus metrics of a real salusd with real clients.

promtool:   a scrape passes `promtool check metrics` (format and naming
            conventions) and its per-session iteration counts are exactly
            what each client ran.
prometheus: a real Prometheus server scrapes salusd every 200 ms; its
            HTTP API (/api/v1/query) then reports the same counts."""
import json
import os
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
        if j.name.isalnum():
            assert got[0][0]["name"] == j.name
        dev = obs.series(m, "salus_session_device_seconds_total", session=str(j.session))
        assert dev and dev[0][1] > 0, dev
        mem = obs.series(m, "salus_session_memory_bytes", session=str(j.session),
                         **{"class": "persistent"})
        assert mem and mem[0][1] > 0, mem
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


def main():
    mode = sys.argv[1]
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
    print("ok")


if __name__ == "__main__":
    main()
