#!/usr/bin/python3
"""Validates deploy/k8s/*.yaml offline (no cluster is reachable here, and
`kubectl apply --dry-run=client` needs one for API discovery).

What it checks:
  schema    every object against the Kubernetes API models of Debian's
            python3-kubernetes (API 1.22): each field name exists where it is
            used (a typo or a field in the wrong place fails), each value has
            the model's type, required fields are present (the models refuse
            None for them);
  admission Pod Security: each namespace the manifests create names its
            enforced level; every pod in a "baseline" or "restricted"
            namespace, or in one the manifests do not create (the cluster's
            default), passes the baseline rules (no hostPath volume, host
            namespace, host port, privileged container, capability beyond
            baseline's list, unconfined seccomp, unsafe sysctl, custom
            AppArmor, SELinux or /proc mount); a "privileged" namespace holds
            salusd alone, never a tenant's pod;
  salus     what these manifests promise: every salusd container has
            resource requests, runs non-root with a read-only root file
            system, no privilege escalation and no capabilities, has liveness
            and readiness probes running `salusctl ... health` on the socket
            it listens on; the pod is annotated for Prometheus on port 9400,
            which the container exposes; the socket folder is an emptyDir
            (sidecar) or a hostPath (DaemonSet) mounted by salusd and by every
            client container of its pod at the folder of their SALUS_URL; a
            client pod of its own reaches salusd over tls+tcp:// through a
            node-local Service (internalTrafficPolicy: Local) whose port is a
            salusd's tls+tcp:// listener, with SALUS_TLS_CA, SALUS_TLS_CERT
            and SALUS_TLS_KEY in a mounted Secret (salusd's own certificate,
            key and client CA too); a pod placed on GPU nodes (a GPU
            nodeSelector or an nvidia.com/gpu request) tolerates their
            nvidia.com/gpu taint; every command is a program of the image.
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
    why = f"{e} (Debian python3-kubernetes, python3-yaml: scripts/install-deps.sh deploy)"
    # under CI only the gpu suite may skip (scripts/testsummary)
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        print("FAIL (CI, where this test must run): " + why)
        sys.exit(1)
    print("SKIP: " + why)
    sys.exit(77)

KINDS = {
    "Deployment": "V1Deployment",
    "DaemonSet": "V1DaemonSet",
    "Pod": "V1Pod",
    "Job": "V1Job",
    "Namespace": "V1Namespace",
    "NetworkPolicy": "V1NetworkPolicy",
    "Service": "V1Service",
}
WORKLOADS = ("Deployment", "DaemonSet", "Pod", "Job")
# Pod Security Standards, baseline: the capabilities a container may add,
# the sysctls a pod may set, the SELinux types it may ask for.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
BASELINE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                    "net.ipv4.ping_group_range"}
BASELINE_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
GPU_TAINT = "nvidia.com/gpu"
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


def env_of(c, name):
    return next((e.get("value") for e in c.get("env", []) if e.get("name") == name), None)


def mounted_from(c, vols, path):
    """The volume c mounts at the folder of path (None if none)."""
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    return vols.get(mounts.get(os.path.dirname(path)))


def in_secret(c, vols, path, what, w):
    if not path:
        err(w, f"no {what}")
    elif "secret" not in (mounted_from(c, vols, path) or {}):
        err(w, f"{what} {path} is not in a mounted Secret")


def check_salus(obj, where, ctx):
    spec, meta = pod_spec(obj)
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    salusd = [c for c in spec["containers"] if (c.get("command") or [""])[0] == "salusd"]
    clients = [c for c in spec["containers"] if env_of(c, "SALUS_URL") is not None]
    pod_sc = spec.get("securityContext", {})
    programs = image_programs()
    for c in spec["containers"] + spec.get("initContainers", []):
        w = f"{where} container {c.get('name')}"
        if (c.get("command") or [""])[0] not in programs:
            err(w, f"runs {(c.get('command') or ['(the image default)'])[0]}, not a program of the image")
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
        args = c.get("args", [])
        url = flag(args, "--listen")
        if not url or not url.startswith("ipc://"):
            err(w, "salusd has no ipc:// --listen")
            continue
        sock_dir = os.path.dirname(url[len("ipc://"):])
        for probe in ("livenessProbe", "readinessProbe"):
            cmd = c.get(probe, {}).get("exec", {}).get("command", [])
            if not cmd or cmd[0] != "salusctl" or cmd[-1] != "health" or flag(cmd, "--url") != url:
                err(w, f"{probe} is not `salusctl --url {url} health`")
        metrics = flag(args, "--metrics-listen")
        if not metrics or not metrics.endswith(":9400"):
            err(w, "no --metrics-listen on port 9400")
        if not any(p.get("containerPort") == 9400 for p in c.get("ports", [])):
            err(w, "port 9400 not declared")
        ann = meta.get("annotations", {})
        if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "9400":
            err(where, "pod not annotated prometheus.io/scrape=true, port 9400")
        if any(a.startswith("tls+tcp://") for a in listens(args)):
            # clients must show a certificate: anonymous ones would all be
            # `remote` to anyone who reaches the port
            if "--tls-allow-anonymous" in args:
                err(w, "a tls+tcp:// listener lets anonymous clients in")
            for f in ("--tls-cert", "--tls-key", "--tls-ca"):
                in_secret(c, vols, flag(args, f), f, w)
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vol = vols.get(mounts.get(sock_dir))
        if not vol:
            err(w, f"the socket folder {sock_dir} is not a volume")
            continue
        want = "emptyDir" if obj["kind"] != "DaemonSet" else "hostPath"
        if want not in vol:
            err(w, f"the socket folder is not a{'n' if want[0] == 'e' else ''} {want}")
        for cl in clients:
            curl = env_of(cl, "SALUS_URL")
            cm = {m["mountPath"]: m["name"] for m in cl.get("volumeMounts", [])}
            if curl != url or cm.get(sock_dir) != mounts[sock_dir]:
                err(f"{where} container {cl.get('name')}", f"does not reach {url} through the shared volume")
    if clients and not salusd:  # a client of the node's salusd
        for cl in clients:
            w = f"{where} container {cl.get('name')}"
            curl = env_of(cl, "SALUS_URL")
            if curl.startswith("ipc://"):  # the per-uid alternative: the host's folder
                if "hostPath" not in (mounted_from(cl, vols, curl[len("ipc://"):]) or {}):
                    err(w, f"{os.path.dirname(curl[len('ipc://'):])} is not the host's socket folder")
            elif curl.startswith("tls+tcp://"):
                check_tls_client(cl, vols, curl, w, ctx)
            else:
                err(w, f"SALUS_URL {curl} is neither ipc:// nor tls+tcp://")
    return len(salusd)


def listens(args):
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--listen"]


def check_tls_client(cl, vols, url, w, ctx):
    """url reaches a salusd tls+tcp:// listener through a node-local Service,
    and the client has its certificate and salusd's CA from a Secret."""
    m = re.fullmatch(r"tls\+tcp://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?:(\d+)", url)
    if not m:
        return err(w, f"{url} does not name a Service (NAME.NAMESPACE.svc:PORT)")
    name, ns, port = m.group(1), m.group(2), int(m.group(3))
    svc = ctx["services"].get((ns, name))
    if not svc:
        return err(w, f"{url}: no Service {ns}/{name} in the manifests")
    spec = svc["spec"]
    if spec.get("internalTrafficPolicy") != "Local":
        err(w, f"Service {ns}/{name} is not node-local (internalTrafficPolicy: Local): "
               "a client could reach another node's salusd")
    sport = next((p for p in spec.get("ports", []) if p.get("port") == port), None)
    if not sport:
        return err(w, f"Service {ns}/{name} has no port {port}")
    target = sport.get("targetPort", port)
    reached = False
    for wns, labels, c in ctx["salusd"]:
        if wns != ns or not spec.get("selector") or \
                any(labels.get(k) != v for k, v in spec["selector"].items()):
            continue
        cport = target if isinstance(target, int) else next(
            (p.get("containerPort") for p in c.get("ports", []) if p.get("name") == target), None)
        if any(re.fullmatch(rf"tls\+tcp://[^/]*:{cport}", u) for u in listens(c.get("args", []))):
            reached = True
    if not reached:
        err(w, f"Service {ns}/{name} port {port} is no salusd's tls+tcp:// listener")
    for var in ("SALUS_TLS_CA", "SALUS_TLS_CERT", "SALUS_TLS_KEY"):
        in_secret(cl, vols, env_of(cl, var), var, w)


def check_baseline(obj, where):
    """Pod Security Standards, baseline level (Kubernetes 1.22-1.30)."""
    spec, meta = pod_spec(obj)
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            err(where, f"baseline: {key}")
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            err(where, f"baseline: hostPath volume {v.get('name')}")
    pod_sc = spec.get("securityContext", {})
    for sysctl in pod_sc.get("sysctls", []):
        if sysctl.get("name") not in BASELINE_SYSCTLS:
            err(where, f"baseline: sysctl {sysctl.get('name')}")
    for k, v in meta.get("annotations", {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and \
                v != "runtime/default" and not v.startswith("localhost/"):
            err(where, f"baseline: AppArmor profile {v}")
    containers = spec["containers"] + spec.get("initContainers", []) + \
        spec.get("ephemeralContainers", [])
    for sc, w in [(pod_sc, where)] + [(c.get("securityContext", {}), f"{where} container {c.get('name')}")
                                      for c in containers]:
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            err(w, "baseline: seccomp Unconfined")
        se = sc.get("seLinuxOptions", {})
        if se.get("type", "") not in BASELINE_SELINUX_TYPES or se.get("user") or se.get("role"):
            err(w, "baseline: SELinux options")
        if sc.get("windowsOptions", {}).get("hostProcess"):
            err(w, "baseline: a Windows host process")
    for c in containers:
        w = f"{where} container {c.get('name')}"
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            err(w, "baseline: privileged")
        extra = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        if extra:
            err(w, f"baseline: adds capabilities {sorted(extra)}")
        if sc.get("procMount", "Default") != "Default":
            err(w, "baseline: procMount")
        for p in c.get("ports", []):
            if p.get("hostPort"):
                err(w, f"baseline: hostPort {p['hostPort']}")


def check_gpu_toleration(obj, where):
    """A pod placed on GPU nodes tolerates their taint, or never starts."""
    spec, _ = pod_spec(obj)
    wants_gpu = any(k.startswith(GPU_TAINT) for k in spec.get("nodeSelector", {})) or any(
        GPU_TAINT in c.get("resources", {}).get(part, {})
        for c in spec["containers"] for part in ("limits", "requests"))
    tolerated = any(t.get("key") == GPU_TAINT and t.get("effect") in (None, "NoSchedule")
                    for t in spec.get("tolerations", []))
    if wants_gpu and not tolerated:
        err(where, f"runs on GPU nodes but does not tolerate their {GPU_TAINT} taint")


def check_docs(docs):
    """All checks over (file, index, object) triples; returns the number of
    salusd containers."""
    namespaces = {d["metadata"]["name"]: d for _, _, d in docs if d.get("kind") == "Namespace"}
    ctx = {"services": {}, "salusd": []}
    for _, _, d in docs:
        ns = d.get("metadata", {}).get("namespace", "default")
        if d.get("kind") == "Service":
            ctx["services"][(ns, d["metadata"]["name"])] = d
        elif d.get("kind") in WORKLOADS:
            spec, meta = pod_spec(d)
            for c in spec.get("containers", []):
                if (c.get("command") or [""])[0] == "salusd":
                    ctx["salusd"].append((ns, meta.get("labels", {}), c))
    n_salusd = 0
    for f, i, doc in docs:
        where = f"{f}#{i} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        typ = KINDS.get(doc.get("kind"))
        if not typ:
            err(where, "kind not covered by this check")
            continue
        check_type(doc, typ, where)
        deserialize(doc, typ, where)
        if doc["kind"] == "Namespace":
            if "pod-security.kubernetes.io/enforce" not in doc["metadata"].get("labels", {}):
                err(where, "the namespace enforces no Pod Security level")
        if doc["kind"] not in WORKLOADS:
            continue
        n = check_salus(doc, where, ctx)
        n_salusd += n
        check_gpu_toleration(doc, where)
        ns = doc["metadata"].get("namespace", "default")
        level = namespaces.get(ns, {}).get("metadata", {}).get("labels", {}).get(
            "pod-security.kubernetes.io/enforce", "baseline")
        spec, _ = pod_spec(doc)
        tenant = any(env_of(c, "SALUS_URL") is not None for c in spec["containers"])
        if level == "privileged" and (tenant or not n):
            err(where, f"runs in {ns}, a privileged namespace, and is not salusd alone")
        elif level != "privileged":
            check_baseline(doc, where)
    return n_salusd


def load(root):
    docs = []
    for f in sorted(glob.glob(os.path.join(root, "*.yaml"))):
        for i, doc in enumerate(yaml.safe_load_all(open(f))):
            if doc is not None:
                docs.append((os.path.basename(f), i, doc))
    return docs


def self_test(root):
    """The checks catch what they claim to: broken copies of the manifests
    must each fail, for the right reason."""
    import copy
    base = load(root)

    def find(docs, kind, name=None):
        return next(d for _, _, d in docs
                    if d.get("kind") == kind and name in (None, d["metadata"]["name"]))

    sidecar_c0 = lambda d: find(d, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    trainer = lambda d: find(d, "Pod", "trainer-example")
    cases = []

    def case(want, change):
        d = copy.deepcopy(base)
        change(d)
        cases.append((d, want))

    def typo(d):
        sc = sidecar_c0(d)["securityContext"]
        sc["readOnlyRootFileSystem"] = sc.pop("readOnlyRootFilesystem")
    case("unknown field 'readOnlyRootFileSystem'", typo)
    case("rejected by V1Deployment", lambda d: sidecar_c0(d).pop("name"))  # required
    case("readinessProbe is not", lambda d: sidecar_c0(d).pop("readinessProbe"))

    def tenant_hostpath(d):  # the per-uid alternative in a baseline namespace
        t = trainer(d)
        t["spec"]["volumes"].append({"name": "run", "hostPath": {"path": "/run/salus"}})
        t["spec"]["containers"][0]["env"][0]["value"] = "ipc:///run/salus/salus.sock"
        t["spec"]["containers"][0]["volumeMounts"].append({"name": "run", "mountPath": "/run/salus"})
    case("baseline: hostPath volume run", tenant_hostpath)
    case("does not tolerate their nvidia.com/gpu taint", lambda d: trainer(d)["spec"].pop("tolerations"))
    case("does not tolerate their nvidia.com/gpu taint",
         lambda d: find(d, "Deployment")["spec"]["template"]["spec"].pop("tolerations"))
    case("baseline: privileged",
         lambda d: trainer(d)["spec"]["containers"][0]["securityContext"].update(privileged=True))
    case("baseline: hostNetwork", lambda d: trainer(d)["spec"].update(hostNetwork=True))
    case("is not node-local", lambda d: find(d, "Service")["spec"].pop("internalTrafficPolicy"))
    case("SALUS_TLS_KEY", lambda d: trainer(d)["spec"]["containers"][0]["env"].pop())
    case("a privileged namespace, and is not salusd alone",
         lambda d: trainer(d)["metadata"].update(namespace="salus-system"))
    case("enforces no Pod Security level",
         lambda d: find(d, "Namespace", "ml-team")["metadata"]["labels"].clear())
    ok = True
    for d, want in cases:
        del errors[:]
        check_docs(d)
        if not any(want in e for e in errors):
            print(f"FAIL: self-test: manifests that should fail with '{want}' gave {errors}")
            ok = False
    del errors[:]
    print(f"self-test: {len(cases)} broken manifests refused" if ok else "self-test failed")
    return ok


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ["DEPLOY_DIR"], "k8s")
    if not self_test(root):
        return 1
    docs = load(root)
    if not docs:
        print(f"FAIL: no manifests in {root}")
        return 1
    n_salusd = check_docs(docs)
    kinds = {d["kind"] for _, _, d in docs}
    if not {"Deployment", "DaemonSet"} <= kinds or n_salusd < 2:
        err(root, "expected the sidecar Deployment and the DaemonSet, each with salusd")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(docs)} objects in {len({f for f, _, _ in docs})} files checked, "
          f"{n_salusd} salusd containers, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
