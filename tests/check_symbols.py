#!/usr/bin/env python3
"""check_symbols.py — the API edge: libtessel.so exports exactly the functions
declared in include/tessel/*.h, and the `ts_` prefix means public: no function
the library defines with a ts_ name is missing from the public headers.

Usage: check_symbols.py ROOT LIBTESSEL_SO OBJECTS_DIR
"""
import os, re, subprocess, sys

# A declaration: return type, then `ts_name(` at the start of a declarator.
DECL = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(ts_\w+)\s*\(", re.M)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def declared(root):
    names = set()
    d = os.path.join(root, "include", "tessel")
    for f in sorted(os.listdir(d)):
        text = strip_comments(open(os.path.join(d, f)).read())
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)  # macros are not symbols
        for m in DECL.finditer(text):
            line = text[m.start():m.end()]
            if "typedef" in line or "(*" in line:
                continue
            names.add(m.group(1))
    return names


def nm(args):
    out = subprocess.run(["nm"] + args, capture_output=True, text=True, check=True).stdout
    return {p[2] for p in (l.split() for l in out.splitlines()) if len(p) == 3 and p[1] in "TDBRVW"}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    root, lib, objdir = sys.argv[1:]
    api = declared(root)
    exported = nm(["-D", "--defined-only", lib])
    objs = [os.path.join(dp, f) for dp, _, fs in os.walk(objdir) for f in fs if f.endswith(".o")]
    defined_ts = {s for s in nm(["--defined-only"] + objs) if s.startswith("ts_")} if objs else set()
    bad = []
    bad += [f"exported but not declared in include/tessel: {s}" for s in sorted(exported - api)]
    bad += [f"declared in include/tessel but not exported: {s}" for s in sorted(api - exported)]
    bad += [f"internal function with the public ts_ prefix: {s}" for s in sorted(defined_ts - api)]
    if bad:
        print(f"symbol check FAILED ({len(bad)}):")
        for b in bad:
            print("  " + b)
        sys.exit(1)
    print(f"symbols OK: libtessel.so exports the {len(api)} declared functions and nothing else")


if __name__ == "__main__":
    main()
