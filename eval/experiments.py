#!/usr/bin/env python3
"""The eval experiments as a set: run them, check them, turn their JSON into
tables gnuplot reads, draw their plots. Used by eval/run (every figure) and
by the eval test suite (every experiment at a tiny scale).

Which experiments exist is meson's to say, in one place each:
  - the full runs are the meson benchmarks named eval_* (or in suite 'eval'),
    read from BUILD/meson-info/intro-benchmarks.json;
  - the tiny runs are the `eval_tiny` dictionary built in eval/meson.build
    from its `eval_drivers` table (BENCH name -> executable, tiny
    arguments), one meson test 'tiny-NAME' each;
    test 'eval-coverage' fails while a benchmark has no tiny run.

  experiments.py list BUILD                    the eval benchmarks, one a line
  experiments.py targets BUILD                 the ninja targets they need
  experiments.py run BUILD OUT [NAME...]       run them (all, or those named);
                                               stdout to OUT/NAME.txt, files they
                                               write into BUILD copied into OUT
  experiments.py check NAME OUT EXE [ARG...]   run EXE ARG... --json OUT/NAME.json
                                               (@OUT@ in ARGs is OUT), check its
                                               BENCH line and JSON, draw its plots
  experiments.py coverage BUILD NAME...        every eval benchmark is a NAME
  experiments.py tables OUT                    OUT/X.json -> OUT/X.KEY.dat
  experiments.py plots OUT [NAME...]           eval/plots/*.gp -> OUT/*.png

Plots: eval/plots/NAME*.gp, run as
`gnuplot -e "results='OUT'; plots='eval/plots'" FILE`; each loads
plots/common.gnuplot (terminal, OUT/<its name>.png), then
reads OUT's tables (X.KEY.dat: one row per object of the JSON list KEY,
columns named in the first line) or CSVs.
Without gnuplot, plots are skipped with a message (never an error)."""

import json
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLOTS = os.path.join(HERE, "plots")


def is_eval(bench):
    # meson names a suite "PROJECT:SUITE" in its introspection
    suites = [s.split(":")[-1] for s in bench.get("suite", [])]
    return bench["name"].startswith("eval_") or "eval" in suites


def benchmarks(build):
    with open(os.path.join(build, "meson-info", "intro-benchmarks.json")) as f:
        return [b for b in json.load(f) if is_eval(b)]


def bench_lines(text, name=None):
    return [l for l in text.splitlines()
            if l.startswith("BENCH ") and (name is None or l.split()[1] == name)]


def check_bench_line(line):
    """key=value pairs after the name; values numbers (or words such as a
    policy list), never nan/inf: a figure that did not come out is an
    error, not a value."""
    fields = line.split()[2:]
    if not fields:
        return "no key=value after the name"
    for kv in fields:
        k, sep, v = kv.partition("=")
        if not sep or not k or not v:
            return "not key=value: %r" % kv
        if v.lower() in ("nan", "-nan", "inf", "-inf"):
            return "%s is %s" % (k, v)
    return None


def reject_constant(c):
    raise ValueError("JSON has no %s" % c)


def load_json(path):
    with open(path) as f:
        return json.load(f, parse_constant=reject_constant)


def cmd_targets(build):
    """The ninja targets the eval benchmarks need (their executables and
    what they depend on, salusd for the real-server ones): eval/run builds
    only these, not the whole project."""
    with open(os.path.join(build, "meson-info", "intro-targets.json")) as f:
        files = {t["id"]: t["filename"] for t in json.load(f)}
    build = os.path.abspath(build)
    want = []
    for b in benchmarks(build):
        for path in [b["cmd"][0]] + [p for d in b.get("depends", []) for p in files.get(d, [])]:
            rel = os.path.relpath(path, build)
            if rel not in want:
                want.append(rel)
    for t in want:
        print(t)
    return 0


def cmd_list(build):
    for b in benchmarks(build):
        print(b["name"])
    return 0


def cmd_run(build, out, names):
    os.makedirs(out, exist_ok=True)
    build = os.path.abspath(build)
    todo = [b for b in benchmarks(build) if not names or b["name"] in names]
    missing = set(names) - {b["name"] for b in todo}
    if missing:
        print("experiments: no eval benchmark named %s" % ", ".join(sorted(missing)),
              file=sys.stderr)
        return 2
    lines, failed = [], []
    for b in todo:
        name, cmd = b["name"], b["cmd"]
        print("== %s: %s" % (name, " ".join(cmd)), file=sys.stderr, flush=True)
        env = dict(os.environ)
        env.update(b.get("env") or {})
        start = time.time()
        try:
            p = subprocess.run(cmd, cwd=b.get("workdir") or build, env=env,
                               stdout=subprocess.PIPE, text=True,
                               timeout=b.get("timeout") or None)
            text, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            # run() hands back what was read so far as bytes, text or not
            text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
            text, rc = text or "", "timeout"
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write(text)
        found = bench_lines(text)
        lines += found
        for l in found:
            print(l, flush=True)
        if rc != 0 or not found:
            failed.append("%s (exit %s%s)" % (name, rc, "" if found else ", no BENCH line"))
        # the files it wrote: its arguments that name files in the build
        # folder written during the run (--json, --jobs-csv, ...)
        for a in cmd[1:]:
            if a.startswith(build + os.sep) and os.path.isfile(a) and os.path.getmtime(a) >= start - 1:
                shutil.copyfile(a, os.path.join(out, os.path.basename(a)))
    # every experiment's BENCH lines, this run's and earlier ones' (a run of
    # some experiments keeps the others' results)
    every = []
    for fn in sorted(os.listdir(out)):
        if fn.endswith(".txt") and fn != "BENCH.txt":
            with open(os.path.join(out, fn)) as f:
                every += bench_lines(f.read())
    with open(os.path.join(out, "BENCH.txt"), "w") as f:
        f.write("".join(l + "\n" for l in every))
    if failed:
        print("experiments: failed: %s" % "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def table_value(v):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "NaN"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v).replace(" ", "_")
    return s if s else "-"


def cmd_tables(out):
    n = 0
    for fn in sorted(os.listdir(out)):
        if not fn.endswith(".json"):
            continue
        data = load_json(os.path.join(out, fn))
        if not isinstance(data, dict):
            continue
        for key, rows in data.items():
            if not (isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows)):
                continue
            cols = []
            for r in rows:
                cols += [k for k in r if k not in cols and not isinstance(r[k], (dict, list))]
            path = os.path.join(out, "%s.%s.dat" % (fn[:-5], key))
            with open(path, "w") as f:
                f.write(" ".join(cols) + "\n")
                for r in rows:
                    f.write(" ".join(table_value(r.get(c)) for c in cols) + "\n")
            n += 1
    return n


def cmd_plots(out, names):
    """Draws eval/plots/*.gp (those starting with one of names, or all).
    Returns (drawn, failed) lists; prints why a plot is skipped."""
    if shutil.which("gnuplot") is None:
        print("experiments: gnuplot not found (scripts/install-deps.sh installs gnuplot-nox): "
              "plots skipped", file=sys.stderr)
        return [], []
    cmd_tables(out)
    drawn, failed = [], []
    for fn in sorted(os.listdir(PLOTS)):
        if not fn.endswith(".gp") or (names and not any(fn.startswith(n) for n in names)):
            continue
        p = subprocess.run(["gnuplot", "-e", "results='%s'; plots='%s'" % (out, PLOTS),
                            os.path.join(PLOTS, fn)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        png = os.path.join(out, fn[:-3] + ".png")
        if p.returncode == 0 and os.path.isfile(png) and os.path.getsize(png) > 0:
            drawn.append(png)
        else:
            failed.append(fn)
            print("experiments: plot %s failed:\n%s" % (fn, p.stdout), file=sys.stderr)
    return drawn, failed


def cmd_check(name, out, exe, args):
    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, name + ".json")
    if os.path.exists(json_path):
        os.remove(json_path)
    cmd = [exe] + [a.replace("@OUT@", out) for a in args] + ["--json", json_path]
    print(" ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(p.stdout)
    errors = []
    if p.returncode != 0:
        errors.append("exit status %d" % p.returncode)
    found = bench_lines(p.stdout, name)
    if len(found) != 1:
        errors.append("%d lines 'BENCH %s ...' (want 1)" % (len(found), name))
    else:
        why = check_bench_line(found[0])
        if why:
            errors.append("BENCH line: " + why)
    try:
        data = load_json(json_path)
        if not isinstance(data, dict):
            errors.append("JSON is not an object")
        elif data.get("bench", name) != name:
            errors.append("JSON says bench %r" % data.get("bench"))
    except (OSError, ValueError) as e:
        errors.append("JSON %s: %s" % (json_path, e))
    if not errors:
        drawn, failed = cmd_plots(out, [name])
        errors += ["plot %s" % f for f in failed]
        for d in drawn:
            print("plot: %s" % d)
    for e in errors:
        print("FAIL %s: %s" % (name, e))
    return 1 if errors else 0


def cmd_coverage(build, names):
    missing = [b["name"] for b in benchmarks(build) if b["name"] not in names]
    for m in missing:
        print("FAIL benchmark %s has no tiny run: add it to eval_tiny (eval/meson.build)" % m)
    print("%d eval benchmarks, %d tiny runs" % (len(benchmarks(build)), len(names)))
    return 1 if missing else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[1], argv[2:]
    if cmd == "list" and len(rest) == 1:
        return cmd_list(rest[0])
    if cmd == "targets" and len(rest) == 1:
        return cmd_targets(rest[0])
    if cmd == "run" and len(rest) >= 2:
        return cmd_run(rest[0], rest[1], rest[2:])
    if cmd == "check" and len(rest) >= 3:
        return cmd_check(rest[0], os.path.abspath(rest[1]), rest[2], rest[3:])
    if cmd == "coverage" and len(rest) >= 1:
        return cmd_coverage(rest[0], rest[1:])
    if cmd == "tables" and len(rest) == 1:
        print("%d tables" % cmd_tables(rest[0]))
        return 0
    if cmd == "plots" and len(rest) >= 1:
        drawn, failed = cmd_plots(rest[0], rest[1:])
        for d in drawn:
            print("plot: %s" % d)
        return 1 if failed else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
