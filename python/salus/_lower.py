"""The walk that lowers a captured aten graph (a torch.fx GraphModule
from make_fx) into a salus Graph with the rules of _aten: nodes in order,
in-place ops rebound to their functional results, every unsupported node
collected before anything is registered, and persistent tensors' new
values handed back for writing as early as the old ones are dead."""

import operator

from ._aten import (POISON, RULES, HostCounter, Lowering, Unsupported, _is_number, meta_dtype,
                    meta_shape, op_key)
from ._core import Code, Error

# ops whose output shares its input's memory (in-place updates reach them)
_ALIASING = {"detach", "alias", "view", "_reshape_alias", "reshape", "t", "expand", "permute",
             "transpose", "unsqueeze", "squeeze", "flatten", "slice", "select", "as_strided",
             "_unsafe_view"}
_IDENTITY_ALIASING = {"detach", "alias", "view", "_reshape_alias", "reshape", "unsqueeze",
                      "squeeze", "flatten", "_unsafe_view"}


def _is_mutating(node):
    schema = getattr(node.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def _live_nodes(graph):
    """The nodes the outputs need, plus every mutating op and what it needs."""
    nodes = list(graph.nodes)
    live = set()
    stack = [n for n in nodes if n.op == "output" or (n.op == "call_function" and _is_mutating(n))]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


def describe(node, where):
    """One line naming an aten node: its op, argument shapes, output
    shape and module path."""
    def arg(a):
        if hasattr(a, "meta"):
            s = meta_shape(a)
            dt = str(meta_dtype(a) or "").replace("torch.", "")
            return f"{dt}{list(s)}" if s is not None else a.name
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(arg(x) for x in a) + "]"
        return repr(a)
    args = ", ".join([arg(a) for a in node.args] + [f"{k}={arg(v)}" for k, v in node.kwargs.items()])
    out = meta_shape(node)
    text = f"{node.target}({args})"
    if out is not None:
        text += f" -> {list(out)}"
    return text + (f" in {where}" if where else "")


def _alias_closure(nodes):
    """{placeholder: last index at which it or a view of it is read}."""
    root, last = {}, {}
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            root[n] = n
        elif n.op == "call_function" and n.args and hasattr(n.args[0], "op") and \
                (op_key(n.target) or ("",))[0] in _ALIASING:
            if n.args[0] in root:
                root[n] = root[n.args[0]]
        for a in n.all_input_nodes:
            if a in root:
                last[root[a]] = max(last.get(root[a], -1), i)
    return last


def lower(gm, graph, placeholders, make_const, where, commits=None, on_start=None, seed=None,
          ignore_targets=False):
    """Lowers fx GraphModule gm's aten graph into salus Graph `graph`.

    placeholders: one entry per fx placeholder, in order (graph Values,
    HostCounters). make_const(value, shape) -> Value makes constants.
    where(node) -> str names the module path a node came from.

    Returns (outputs, assigned, cx): the entries of the graph's outputs
    (flattened), {placeholder index: entry} for each placeholder an
    in-place op changed, and the Lowering (cx.v() makes an entry a Value).

    commits: {placeholder index: output position, ...} and a function
    commit(placeholder index, entry), given as (dict, fn): each output is
    handed to commit() as soon as it is computed and every read of the
    placeholder's old value has been emitted, so new and old values of a
    tensor are not all alive at once. seed() -> the i32 [2] Value random
    ops (dropout) draw from, each with its own stream offset; None refuses
    them. ignore_targets: targets may hold cross-entropy's ignore_index
    (padded positions), so its lowering masks them. Raises salus.Error(EUNSUPPORTED) listing every
    unsupported node, or the graph builder's error naming the node."""
    cx = Lowering(graph, make_const)
    cx.seed, cx.ignore_targets = seed, ignore_targets
    if on_start:
        on_start(cx)
    live = _live_nodes(gm.graph)
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    last_use = {n: max((index[u] for u in n.users), default=-1) for n in nodes}
    env, storage, ph_index = {}, {}, {}
    assigned, problems = {}, []
    ph = iter(placeholders)
    outputs = None
    pending = []
    if commits:
        wanted, commit = commits
        phs = [n for n in nodes if n.op == "placeholder"]
        out_nodes = list(nodes[-1].args[0])
        last_read = _alias_closure(nodes)
        for p_idx, pos in wanted.items():
            src = out_nodes[pos]
            ready = max(index.get(src, -1), last_read.get(phs[p_idx], -1))
            pending.append((ready, p_idx, src))
        pending.sort(key=lambda t: t[0])

    def flush(upto):
        while pending and pending[0][0] <= upto:
            _, p_idx, src = pending.pop(0)
            e = env.get(src) if hasattr(src, "op") else src
            if e is not POISON and not problems:
                commit(p_idx, e)

    def fetch(a):
        if hasattr(a, "op") and hasattr(a, "users"):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(fetch(x) for x in a)
        if isinstance(a, dict):
            return {k: fetch(v) for k, v in a.items()}
        return a

    def poisoned(a):
        if a is POISON:
            return True
        if isinstance(a, (list, tuple)):
            return any(poisoned(x) for x in a)
        return False

    for i, node in enumerate(nodes):
        flush(i - 1)
        if node.op == "placeholder":
            env[node] = next(ph)
            storage[node] = node
            ph_index[node] = len(ph_index)
            continue
        if node.op == "output":
            outputs = fetch(node.args[0])
            continue
        if node.op == "get_attr":
            t = getattr(gm, node.target)
            env[node] = make_const(t, None)
            storage[node] = node
            continue
        if node not in live:
            continue
        storage[node] = node
        if node.target is operator.getitem:
            src, k = fetch(node.args[0]), node.args[1]
            env[node] = POISON if src is POISON else src[k]
            storage[node] = node
            continue
        key = op_key(node.target)
        args, kwargs = fetch(node.args), fetch(node.kwargs)
        name = key[0] if key else None
        inplace = bool(name and name.endswith("_") and not name.endswith("__"))
        base_name = name[:-1] if inplace else name
        rule = RULES.get(f"{base_name}.{key[1]}") if key else None
        if poisoned(args) or poisoned(list(kwargs.values())):
            # what an unsupported op feeds is listed too when it has no rule
            if rule is None:
                problems.append(f"{describe(node, where(node))}: no salus lowering")
            env[node] = POISON
            continue
        cx.node = node
        try:
            if isinstance(args[0] if args else None, HostCounter) and inplace and \
                    base_name == "add" and _is_number(args[1]):
                args[0].step += args[1] * kwargs.get("alpha", 1)
                env[node] = args[0]
                continue
            if rule is None:
                raise Unsupported("no salus lowering")
            result = rule(cx, *args, **kwargs)
        except Unsupported as e:
            problems.append(f"{describe(node, where(node))}: {e}")
            env[node] = POISON
            continue
        except Error as e:
            raise Error(e.code, f"lowering {describe(node, where(node))}: {e.message}") from None
        env[node] = result
        if name in _ALIASING and node.args and hasattr(node.args[0], "op"):
            storage[node] = storage[node.args[0]]
        if inplace:
            target = node.args[0]
            root = storage[target]
            storage[node] = root
            shape = meta_shape(target)
            for m in [n for n in storage if storage[n] is root and n is not node]:
                same = m is target or m is root or \
                    (op_key(m.target) or ("",))[0] in _IDENTITY_ALIASING
                if same and meta_shape(m) == shape:
                    env[m] = result
                elif last_use[m] > i:
                    problems.append(f"{describe(node, where(node))}: an in-place update of a "
                                    f"tensor whose view {m.name} is read later")
            if root.op == "placeholder":
                assigned[ph_index[root]] = result
    flush(len(nodes))
    if problems:
        raise Error(Code.EUNSUPPORTED,
                    f"{len(problems)} aten op(s) salus cannot run (nothing was registered):\n  "
                    + "\n  ".join(problems))
    return outputs, assigned, cx
