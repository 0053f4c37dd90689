#!/usr/bin/python3
"""Validates deploy/k8s/*.yaml offline (no cluster is reachable here, and
`kubectl apply --dry-run=client` needs one for API discovery).

What it checks:
  schema   every object against the Kubernetes API models of Debian's
           python3-kubernetes (API 1.22): each field name exists where it is
           used (a typo or a field in the wrong place fails), each value has
           the model's type, required fields are present (the models refuse
           None for them);
  salus    what these manifests promise: every salusd container has
           resource requests, runs non-root with a read-only root file
           system, no privilege escalation and no capabilities, has liveness
           and readiness probes running `salusctl ... health` on the socket
           it listens on; the pod is annotated for Prometheus on port 9400,
           which the container exposes; the socket folder is an emptyDir
           (sidecar) or a hostPath (DaemonSet) mounted by salusd and by every
           client container at the folder of their SALUS_URL.
What it does not: admission by a real API server (defaults, webhooks,
quotas), newer API fields than 1.22, and whether the pods run (no cluster).
"""
import re
import sys
import glob
import os

try:
    import yaml
    from kubernetes import client
except ImportError as e:
    print(f"SKIP: {e} (Debian python3-kubernetes, python3-yaml: scripts/install-deps.sh deploy)")
    sys.exit(77)

KINDS = {
    "Deployment": "V1Deployment",
    "DaemonSet": "V1DaemonSet",
    "Pod": "V1Pod",
    "Job": "V1Job",
    "Namespace": "V1Namespace",
    "NetworkPolicy": "V1NetworkPolicy",
}
PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float)}
errors = []


def err(where, msg):
    errors.append(f"{where}: {msg}")


def check_type(value, typ, where):
    """Walks value against the model type name typ."""
    if value is None:
        return
    m = re.match(r"list\[(.*)\]$", typ)
    if m:
        if not isinstance(value, list):
            return err(where, f"expected a list ({typ})")
        for i, v in enumerate(value):
            check_type(v, m.group(1), f"{where}[{i}]")
        return
    m = re.match(r"dict\(([^,]*), (.*)\)$", typ)
    if m:
        if not isinstance(value, dict):
            return err(where, f"expected a map ({typ})")
        for k, v in value.items():
            check_type(v, m.group(2), f"{where}.{k}")
        return
    if typ in PRIMITIVE:
        if isinstance(value, bool) and typ != "bool":
            return err(where, f"expected {typ}, got a boolean")
        if not isinstance(value, PRIMITIVE[typ]):
            err(where, f"expected {typ}, got {type(value).__name__} {value!r}")
        return
    if typ == "object":  # int-or-string, quantities
        return
    cls = getattr(client, typ, None)
    if cls is None:
        return err(where, f"unknown model {typ}")
    if not isinstance(value, dict):
        return err(where, f"expected an object ({typ})")
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            err(where, f"unknown field '{key}' for {typ}")
            continue
        check_type(v, cls.openapi_types[by_json[key]], f"{where}.{key}")


def deserialize(doc, typ, where):
    """The models' own constructors: they refuse a missing required field."""
    api = client.ApiClient()
    try:
        return api._ApiClient__deserialize(doc, typ)
    except (ValueError, TypeError) as e:
        err(where, f"rejected by {typ}: {e}")
        return None


def image_programs():
    """What the image built by deploy/container/build-image.sh can run: the
    programs it stages into bin/, and the base's shell."""
    script = open(os.path.join(os.environ["DEPLOY_DIR"], "container", "build-image.sh")).read()
    staged = re.search(r'cp "\$salusd"(.*?)"\$ctx/bin/"', script, re.S)
    names = {"salusd", "/bin/sh"}
    if staged:
        names |= {os.path.basename(p.strip('"\\ \n')) for p in staged.group(1).split()}
    return names - {""}


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj["spec"], obj["metadata"]
    return obj["spec"]["template"]["spec"], obj["spec"]["template"]["metadata"]


def flag(args, name):
    if name in args:
        i = args.index(name)
        return args[i + 1] if i + 1 < len(args) else None
    return None


def check_salus(obj, where):
    spec, meta = pod_spec(obj)
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    salusd = [c for c in spec["containers"] if (c.get("command") or [""])[0] == "salusd"]
    clients = [c for c in spec["containers"]
               if any(e.get("name") == "SALUS_URL" for e in c.get("env", []))]
    pod_sc = spec.get("securityContext", {})
    for c in spec["containers"] + spec.get("initContainers", []):
        w = f"{where} container {c.get('name')}"
        if not c.get("resources", {}).get("requests"):
            err(w, "no resource requests")
        sc = c.get("securityContext", {})
        init = c in spec.get("initContainers", [])
        if sc.get("allowPrivilegeEscalation") is not False:
            err(w, "allowPrivilegeEscalation is not false")
        if sc.get("readOnlyRootFilesystem") is not True:
            err(w, "root file system is not read-only")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            err(w, "capabilities are not all dropped")
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
        if not init and (non_root is not True or uid in (None, 0)):
            err(w, "does not run as a non-root uid")
        if init and set(sc.get("capabilities", {}).get("add", [])) - {"CHOWN", "FOWNER"}:
            err(w, "an init container holds more than CHOWN and FOWNER")
    for c in salusd:
        w = f"{where} container {c.get('name')}"
        url = flag(c.get("args", []), "--listen")
        if not url or not url.startswith("ipc://"):
            err(w, "salusd has no ipc:// --listen")
            continue
        sock_dir = os.path.dirname(url[len("ipc://"):])
        for probe in ("livenessProbe", "readinessProbe"):
            cmd = c.get(probe, {}).get("exec", {}).get("command", [])
            if not cmd or cmd[0] != "salusctl" or cmd[-1] != "health" or flag(cmd, "--url") != url:
                err(w, f"{probe} is not `salusctl --url {url} health`")
        metrics = flag(c.get("args", []), "--metrics-listen")
        if not metrics or not metrics.endswith(":9400"):
            err(w, "no --metrics-listen on port 9400")
        if not any(p.get("containerPort") == 9400 for p in c.get("ports", [])):
            err(w, "port 9400 not declared")
        ann = meta.get("annotations", {})
        if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "9400":
            err(where, "pod not annotated prometheus.io/scrape=true, port 9400")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vol = vols.get(mounts.get(sock_dir))
        if not vol:
            err(w, f"the socket folder {sock_dir} is not a volume")
            continue
        want = "emptyDir" if obj["kind"] != "DaemonSet" else "hostPath"
        if want not in vol:
            err(w, f"the socket folder is not a{'n' if want[0] == 'e' else ''} {want}")
        for cl in clients:
            curl = next(e["value"] for e in cl["env"] if e["name"] == "SALUS_URL")
            cm = {m["mountPath"]: m["name"] for m in cl.get("volumeMounts", [])}
            if curl != url or cm.get(sock_dir) != mounts[sock_dir]:
                err(f"{where} container {cl.get('name')}", f"does not reach {url} through the shared volume")
    if obj["kind"] == "Pod" and clients and not salusd:  # a client of the node's salusd
        for cl in clients:
            curl = next(e["value"] for e in cl["env"] if e["name"] == "SALUS_URL")
            d = os.path.dirname(curl[len("ipc://"):])
            cm = {m["mountPath"]: m["name"] for m in cl.get("volumeMounts", [])}
            if "hostPath" not in vols.get(cm.get(d), {}):
                err(f"{where} container {cl.get('name')}", f"{d} is not the host's socket folder")
    return len(salusd)


def self_test(root):
    """The checks catch what they claim to: three broken copies of the
    sidecar must each fail, for the right reason."""
    import copy
    base = list(yaml.safe_load_all(open(os.path.join(root, "sidecar.yaml"))))[0]
    c0 = lambda d: d["spec"]["template"]["spec"]["containers"][0]
    cases = []
    d = copy.deepcopy(base)
    sc = c0(d)["securityContext"]
    sc["readOnlyRootFileSystem"] = sc.pop("readOnlyRootFilesystem")  # a typo
    cases.append((d, "unknown field 'readOnlyRootFileSystem'"))
    d = copy.deepcopy(base)
    del c0(d)["name"]  # required
    cases.append((d, "rejected by V1Deployment"))
    d = copy.deepcopy(base)
    del c0(d)["readinessProbe"]
    cases.append((d, "readinessProbe is not"))
    ok = True
    for d, want in cases:
        del errors[:]
        check_type(d, "V1Deployment", "selftest")
        deserialize(d, "V1Deployment", "selftest")
        check_salus(d, "selftest")
        if not any(want in e for e in errors):
            print(f"FAIL: self-test: a manifest that should fail with '{want}' gave {errors}")
            ok = False
    del errors[:]
    print(f"self-test: {len(cases)} broken manifests refused" if ok else "self-test failed")
    return ok


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ["DEPLOY_DIR"], "k8s")
    if not self_test(root):
        return 1
    files = sorted(glob.glob(os.path.join(root, "*.yaml")))
    if not files:
        print(f"FAIL: no manifests in {root}")
        return 1
    n_objects = n_salusd = 0
    kinds = set()
    for f in files:
        for i, doc in enumerate(yaml.safe_load_all(open(f))):
            if doc is None:
                continue
            where = f"{os.path.basename(f)}#{i} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            typ = KINDS.get(doc.get("kind"))
            if not typ:
                err(where, "kind not covered by this check")
                continue
            check_type(doc, typ, where)
            deserialize(doc, typ, where)
            n_objects += 1
            kinds.add(doc["kind"])
            if doc["kind"] in ("Deployment", "DaemonSet", "Pod", "Job"):
                n_salusd += check_salus(doc, where)
    if not {"Deployment", "DaemonSet"} <= kinds or n_salusd < 2:
        err(root, "expected the sidecar Deployment and the DaemonSet, each with salusd")
    for e in errors:
        print("FAIL:", e)
    print(f"{n_objects} objects in {len(files)} files checked, {n_salusd} salusd containers, "
          f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
