"""The timeline: two training jobs and a high-priority job on one salusd
(priority policy), `salusctl trace` while they run, then the trace rendered
by client/timeline.html in headless Chromium. The page's DOM after its
script ran must show the lanes, every job's iterations and low-priority ops
filled into the high-priority job's gaps; a screenshot is kept next to the
test's build folder (OBS_ARTIFACTS) for people to look at.

Why a page of our own: chrome://tracing and the Perfetto UI, which read
this format, are not available offline (Perfetto is a web app; Debian's
chromium does not ship the old trace viewer)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import obs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VIEWER = os.path.join(HERE, "..", "..", "client", "timeline.html")


def chromium(*args, timeout=120):
    exe = obs.need("chromium")
    base = [exe, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--virtual-time-budget=10000", "--user-data-dir=" + tempfile.mkdtemp()]
    if os.geteuid() == 0:
        base.append("--no-sandbox")  # chromium refuses root otherwise
    return subprocess.run(base + list(args), capture_output=True, text=True, timeout=timeout)


def main():
    obs.need("chromium")
    srv = obs.Salusd("--policy", "priority")
    jobs = []
    try:
        # more iterations than any job finishes during the trace (all are
        # killed after it): a job that finished before it would be missing
        jobs = [srv.client("train-a", 10**7, hold=True, width=512),
                srv.client("train-b", 10**7, hold=True, width=512)]
        hp = srv.client("urgent", 10**7, priority=5, hold=True, width=256)
        jobs.append(hp)
        want = {j.session for j in jobs}
        tmp = tempfile.mkdtemp(prefix="salus-trace-")
        out = os.path.join(tmp, "trace.json")
        p = srv.ctl("trace", "--seconds", "2", "-o", out, timeout=60)
        print(p.stdout, p.stderr)
        assert p.returncode == 0, p.stderr
        assert "tracing 2 of 2 s" in p.stderr, p.stderr  # progress shown
        # the jobs have done their part: end them (their sessions close)
        for j in jobs:
            j.kill()
            j.wait(timeout=30)
        jobs = []
        with open(out) as f:
            trace = json.load(f)
        ev = trace["traceEvents"]
        its = [e for e in ev if e.get("cat", "").startswith("iteration")]
        ops = [e for e in ev if e.get("cat", "") == "op"]
        gaps = [e for e in ev if e.get("cat", "") == "op,gap_fill"]
        sessions = {e["args"]["session"] for e in its}
        print("trace: %d events, %d iterations of %d sessions, %d ops, %d filled into gaps" %
              (len(ev), len(its), len(sessions), len(ops), len(gaps)))
        assert want <= sessions, (want, sessions)
        assert gaps, "no low-priority op was filled into a gap"
        assert ops, "no op of a whole iteration was timed"
        assert all(e["name"] != "op" for e in ops + gaps), "ops without their type's name"

        with open(os.path.join(tmp, "trace.js"), "w") as f:
            f.write("window.TRACE = ")
            json.dump(trace, f)
            f.write(";\n")
        shutil.copy(VIEWER, os.path.join(tmp, "timeline.html"))
        url = "file://%s/timeline.html?trace=trace.js" % tmp
        dom = chromium("--dump-dom", url)
        assert dom.returncode == 0, dom.stderr[-2000:]
        html = dom.stdout
        assert 'data-rendered="1"' in html, html[:3000]
        summary = re.search(r'<div id="summary"([^>]*)>', html).group(1)
        data = dict(re.findall(r'data-(\w+)="(\d+)"', summary))
        print("viewer:", data)
        lanes = set(re.findall(r'<g id="lane-(\d+)" class="lane"', html))
        lanes_traced = {e["tid"] for e in ev if e.get("pid") == 1 and e.get("ph") != "M"}
        assert lanes == {str(t) for t in lanes_traced} and len(lanes) >= 2, (lanes, lanes_traced)
        for lane in lanes:
            assert 'id="lane-label-%s"' % lane in html
        assert int(data["iterations"]) == len(its), data
        assert int(data["ops"]) == len(ops), data
        assert int(data["gapfills"]) == len(gaps), data
        assert int(data["sessions"]) == len(sessions) >= 3, data
        rendered_sessions = set(re.findall(r'class="iteration"[^>]*data-session="(\d+)"', html))
        assert {str(s) for s in want} <= rendered_sessions, rendered_sessions
        assert html.count('class="op gap-fill"') == len(gaps)
        assert html.count('class="op"') == len(ops)

        art = os.environ.get("OBS_ARTIFACTS", tmp)
        os.makedirs(art, exist_ok=True)
        shot = os.path.join(art, "timeline.png")
        r = chromium("--screenshot=" + shot, "--window-size=1650,%d" % (200 + 28 * 12), url)
        assert r.returncode == 0 and os.path.getsize(shot) > 10000, r.stderr[-2000:]
        shutil.copy(out, os.path.join(art, "timeline-trace.json"))
        print("screenshot:", shot)
    finally:
        rc = srv.finish(jobs)
    assert rc == 0, rc
    print("ok")


if __name__ == "__main__":
    main()
