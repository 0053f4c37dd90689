"""The timeline: two training jobs and a high-priority job on one salusd
(priority policy), `salusctl trace` while they run, then the trace rendered
by client/timeline.html in headless Chromium. The page's DOM after its
script ran must show the lanes, every job's iterations and low-priority ops
filled into the high-priority job's gaps, a time axis whose ticks sit where
their times are, and a key giving each session the colour of its
iterations. A second load drives the page's own zoom and pan handlers
(wheel, buttons, drag: events dispatched by a script of the test) and
checks the visible range and the axis follow. A screenshot is kept next to
the test's build folder (OBS_ARTIFACTS) for people to look at.

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


# Run inside the page after it rendered: drives its zoom and pan through
# the events a person's wheel, clicks and drag send, and leaves what it saw
# as JSON in <pre id="zoom-test">.
ZOOM_SCRIPT = r"""
(function () {
  function run() {
    if (document.body.dataset.rendered !== "1") return setTimeout(run, 10);
    const chart = document.getElementById("chart");
    const svg = () => document.getElementById("timeline");
    const left = Number(svg().dataset.plotLeft), width = Number(svg().dataset.plotWidth);
    const clientX = f => svg().getBoundingClientRect().left + left + f * width;
    const state = () => ({
      view: [Number(chart.dataset.viewStart), Number(chart.dataset.viewEnd)],
      iterations: svg().querySelectorAll(".iteration").length,
      unit: document.getElementById("axis").dataset.unit,
      ticks: [...svg().querySelectorAll(".tick")].map(
        t => [Number(t.dataset.t), Number(t.dataset.x), t.textContent])});
    const wheel = (f, dy, shift) => svg().dispatchEvent(new WheelEvent("wheel", {
      deltaY: dy, deltaMode: 0, clientX: clientX(f), clientY: 40, shiftKey: !!shift,
      bubbles: true, cancelable: true}));
    const click = id => document.getElementById(id).click();
    const out = {full: state()};
    for (let i = 0; i < 3; i++) wheel(0.25, -100);
    out.wheel = state();
    click("zoom-in"); out.zoomIn = state();
    click("pan-right"); out.panRight = state();
    click("zoom-out"); out.zoomOut = state();
    svg().dispatchEvent(new MouseEvent("mousedown", {button: 0, clientX: clientX(0.5),
                                                     clientY: 40, bubbles: true}));
    window.dispatchEvent(new MouseEvent("mousemove", {clientX: clientX(0.4), clientY: 40}));
    window.dispatchEvent(new MouseEvent("mouseup", {clientX: clientX(0.4), clientY: 40}));
    out.drag = state();
    wheel(0.5, 100, true); out.shiftWheel = state();
    for (let i = 0; i < 40; i++) wheel(0.5, -100);
    out.deep = state();
    click("zoom-reset"); out.reset = state();
    click("zoom-out"); out.outAtFull = state();
    const pre = document.createElement("pre");
    pre.id = "zoom-test";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  setTimeout(run, 0);
})();
"""


def close(a, b, tol):
    return abs(a - b) <= tol


def check_axis(ticks, view, unit):
    """Ticks: (t, x, label); evenly spaced, inside the view, placed where
    their times are on the plot, labelled in the axis's unit."""
    left, width = 190, 1400
    assert len(ticks) >= 4, ticks
    ts = [t for t, _, _ in ticks]
    steps = {round(b - a, 6) for a, b in zip(ts, ts[1:])}
    assert len(steps) == 1 and min(steps) > 0, ts
    step = steps.pop()
    assert view[0] - 1e-6 <= ts[0] < view[0] + step and view[1] - step < ts[-1] <= view[1] + 1e-6, \
        (ts, view)
    for t, x, label in ticks:
        assert close(x, left + (t - view[0]) / (view[1] - view[0]) * width, 0.02), (t, x, view)
        assert label.endswith(" " + unit), label
        value = float(label.split()[0]) * (1000 if unit == "ms" else 1)
        assert close(value, t, step / 100), (label, t)


def check_zoom(z, end):
    full = z["full"]
    assert full["view"] == [0, end] or close(full["view"][1], end, 1e-6), (full["view"], end)
    assert full["unit"] == "ms", full["unit"]
    check_axis(full["ticks"], full["view"], "ms")

    def width(s):
        return s["view"][1] - s["view"][0]

    # three wheel notches at a quarter of the plot: 1.25^3 narrower, the
    # time under the pointer stays under it
    w = z["wheel"]
    assert close(width(w), end / 1.25 ** 3, end * 1e-6), (w["view"], end)
    assert close(w["view"][0] + 0.25 * width(w), 0.25 * end, end * 1e-6), w["view"]
    assert w["iterations"] < full["iterations"], (w["iterations"], full["iterations"])
    check_axis(w["ticks"], w["view"], w["unit"])
    zi = z["zoomIn"]  # the button: half as wide about the middle
    assert close(width(zi), width(w) / 2, end * 1e-6), zi["view"]
    assert close(sum(zi["view"]) / 2, sum(w["view"]) / 2, end * 1e-6), zi["view"]
    pr = z["panRight"]  # a quarter of the view later
    assert close(pr["view"][0], zi["view"][0] + width(zi) / 4, end * 1e-6), pr["view"]
    assert close(width(pr), width(zi), end * 1e-6)
    zo = z["zoomOut"]
    assert close(width(zo), 2 * width(pr), end * 1e-6), zo["view"]
    dr = z["drag"]  # dragged a tenth of the plot to the left: a tenth later
    assert close(dr["view"][0], zo["view"][0] + width(zo) / 10, end * 1e-6), dr["view"]
    sw = z["shiftWheel"]  # shift+wheel pans
    assert sw["view"][0] > dr["view"][0] and close(width(sw), width(dr), end * 1e-6), sw["view"]
    deep = z["deep"]  # down to microseconds: the axis says so
    assert width(deep) < 2000 and deep["unit"] == "us", deep["view"]
    check_axis(deep["ticks"], deep["view"], "us")
    for k in ("reset", "outAtFull"):
        assert z[k]["view"] == full["view"] and z[k]["iterations"] == full["iterations"], z[k]


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
        job_names = {j.session: j.name for j in jobs}
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

        # the time axis, over the whole trace
        end = max(e["ts"] + e.get("dur", 0) for e in ev if "ts" in e)
        ticks = [(float(t), float(x), label) for t, x, label in re.findall(
            r'<g class="tick" data-t="([-\d.e+]+)" data-x="([-\d.]+)">'
            r'<line[^>]*></line><text[^>]*>([^<]*)</text></g>', html)]
        assert 'id="axis" data-unit="ms"' in html
        check_axis(ticks, (0, end), "ms")
        print("axis:", [label for _, _, label in ticks])
        # the key: a colour per session, that of its iterations
        key = dict(re.findall(r'<span class="key-session" data-session="(\d+)" '
                              r'data-colour="([^"]+)">', html))
        fills = {}
        for fill, sid in re.findall(r'class="iteration" x="[^"]*" y="[^"]*" width="[^"]*" '
                                    r'height="[^"]*" fill="([^"]+)" data-session="(\d+)"', html):
            fills.setdefault(sid, set()).add(fill)
        assert set(fills) <= set(key) and {str(s) for s in want} <= set(key), (fills, key)
        assert all(f == {key[s]} for s, f in fills.items()), (fills, key)
        assert len(set(key.values())) == len(key), key
        for sid in want:
            label = re.search(r'data-session="%d" data-colour="[^"]+"><i [^>]*></i>([^<]*)<' % sid,
                              html).group(1)
            assert label == "%d %s" % (sid, job_names[sid]), label
        print("key:", key)

        # zoom and pan, through the page's own handlers
        with open(os.path.join(tmp, "zoom.js"), "w") as f:
            f.write("window.TRACE = ")
            json.dump(trace, f)
            f.write(";\n" + ZOOM_SCRIPT)
        zoomed = chromium("--dump-dom", "file://%s/timeline.html?trace=zoom.js" % tmp)
        assert zoomed.returncode == 0, zoomed.stderr[-2000:]
        m = re.search(r'<pre id="zoom-test">([^<]*)</pre>', zoomed.stdout)
        assert m, zoomed.stdout[-3000:]
        z = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
        check_zoom(z, end)
        print("zoom:", {k: v["view"] for k, v in z.items()})

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
