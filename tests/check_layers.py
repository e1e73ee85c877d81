#!/usr/bin/env python3
"""check_layers.py — the folders of src/ form a DAG in pipeline order, and
nothing may add an edge that src/layers.txt does not declare.

Two kinds of edge are checked, so neither an include nor a bare extern
declaration can sneak a dependency in:
  * includes: a quoted #include of another layer's header (src/<layer>/...),
  * symbols (with --objects DIR): an object file of layer A that references a
    function or variable defined in an object file of layer B (nm).
Public headers (include/tessel/*.h) are the API: any layer may include them,
but calling what they declare is a symbol edge to the implementing layer.
tools/ may include public headers and util/ (the one tool-facing internal
layer); examples/ only public headers; public headers only each other.

Usage: check_layers.py ROOT [--objects DIR]   (exit 1 and a list on a violation)
"""
import os, re, subprocess, sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(root):
    """src/layers.txt: 'layer: dep dep ...' lines in pipeline order; a layer
    marked [api] uses the layers below only through the public API."""
    allowed, order, api_only = {}, [], set()
    with open(os.path.join(root, "src", "layers.txt")) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, deps = line.partition(":")
            name = name.strip()
            if name.endswith("[api]"):
                name = name[: -len("[api]")].strip()
                api_only.add(name)
            deps = deps.split()
            for d in deps:
                if d not in allowed:
                    sys.exit(f"src/layers.txt:{n}: '{name}' depends on '{d}', which is not declared above it")
            allowed[name] = set(deps)
            order.append(name)
    return order, allowed, api_only


def public_names(root):
    """Every function name declared in include/tessel/*.h."""
    names = set()
    d = os.path.join(root, "include", "tessel")
    for f in os.listdir(d):
        with open(os.path.join(d, f)) as h:
            names |= set(re.findall(r"\b(ts_\w+)\s*\(", h.read()))
    return names


def layer_of_include(inc, here):
    """The layer a quoted include names, 'public' for the API, or None (same folder)."""
    if inc.startswith("tessel/"):
        return "public"
    if "/" in inc:
        return inc.split("/", 1)[0]
    return here


def include_edges(root, order):
    edges = []  # (file, from, to, include)
    dirs = [(os.path.join("src", l), l) for l in order] + [("tools", "tools"), ("examples", "examples"),
                                                        (os.path.join("include", "tessel"), "public")]
    for d, layer in dirs:
        full = os.path.join(root, d)
        if not os.path.isdir(full):
            continue
        for name in sorted(os.listdir(full)):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(d, name)
            with open(os.path.join(root, path), errors="replace") as f:
                for inc in INCLUDE.findall(f.read()):
                    to = layer_of_include(inc, layer)
                    if to != layer:
                        edges.append((path, layer, to, inc))
    return edges


def symbol_edges(root, objdir, layers):
    """(object, from, to, symbol) for every cross-layer reference of the library's objects."""
    defs, undefs = {}, {}
    for dirpath, _, files in os.walk(objdir):
        for f in files:
            if not f.endswith(".o"):
                continue
            path = os.path.join(dirpath, f)
            m = re.search(r"/(src/([^/]+)/.+)\.o$", path)
            if not m or m.group(2) not in layers or not os.path.exists(os.path.join(root, m.group(1))):
                continue  # not the library's, or a stale object whose source is gone
            m = re.match(r"src/([^/]+)/", m.group(1))
            out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "TDBRCV":
                    defs[p[2]] = m.group(1)
                elif len(p) == 2 and p[0] == "U":
                    undefs.setdefault((path, m.group(1)), set()).add(p[1])
    edges = []
    for (path, layer), syms in undefs.items():
        for s in sorted(syms):
            to = defs.get(s)
            if to and to != layer:
                edges.append((os.path.relpath(path, objdir), layer, to, s))
    return edges


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    root = args[0]
    objdir = args[args.index("--objects") + 1] if "--objects" in args else None
    order, allowed, api_only = read_layers(root)
    public = public_names(root)
    present = {d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d))}
    bad = [f"src/{d}/ is not declared in src/layers.txt" for d in sorted(present - set(order))]
    for path, a, b, inc in include_edges(root, order):
        if b == "public":
            ok = True  # the API: a call through it is checked as a symbol edge
        elif a in ("public", "examples"):
            ok = False
        elif a == "tools" or a in api_only:
            ok = b == "util"
        else:
            ok = b in allowed[a]
        if not ok:
            bad.append(f"{path}: #include \"{inc}\": {a} -> {b} is not an allowed edge")
    n_sym = 0
    if objdir:
        for obj, a, b, sym in symbol_edges(root, objdir, set(order)):
            n_sym += 1
            if b not in allowed[a]:
                bad.append(f"{obj}: uses {sym} from {b}/: {a} -> {b} is not an allowed edge")
            elif a in api_only and b != "util" and sym not in public:
                bad.append(f"{obj}: uses {sym} from {b}/, which is not public API ({a} is [api] in src/layers.txt)")
    if bad:
        print("layer check FAILED (allowed edges: src/layers.txt):")
        for b in bad:
            print("  " + b)
        sys.exit(1)
    print(f"layers OK: {len(order)} layers in order {' -> '.join(order)}; "
          f"includes checked{f', {n_sym} cross-layer symbol references checked' if objdir else ''}")


if __name__ == "__main__":
    main()
