#!/usr/bin/env bash
# no_exit.sh [BUILD_DIR] — the library never ends the process: no call of
# exit, _exit, _Exit, quick_exit or abort anywhere in src/ except in the body of
# ts_client_abort (src/runtime/client.c), the documented MPI_Abort path.
# Comments and string literals are blanked first, so prose such as "its exit
# (a PAD ...)" does not count. Fails listing every offending line.
set -u
src="$(cd "$(dirname "$0")/.." && pwd)/src"
exec python3 - "$src" <<'PY'
import pathlib, re, sys
src = pathlib.Path(sys.argv[1])
call = re.compile(r'\b(exit|_exit|_Exit|quick_exit|abort)\s*\(')
blank = lambda m: re.sub(r'[^\n]', ' ', m.group(0))
bad, seen_abort_exit = [], False
for path in sorted(list(src.rglob('*.c')) + list(src.rglob('*.h'))):
    text = re.sub(r'/\*.*?\*/|//[^\n]*|"(\\.|[^"\\\n])*"', blank, path.read_text(), flags=re.S)
    lines = text.split('\n')
    if path.relative_to(src).as_posix() == 'runtime/client.c':
        inside, depth = False, 0
        for i, l in enumerate(lines):  # blank ts_client_abort's body
            if re.match(r'void ts_client_abort\s*\(', l):
                inside = True
            if inside:
                depth += l.count('{') - l.count('}')
                seen_abort_exit |= bool(call.search(l))
                lines[i] = ''
                if depth == 0 and '}' in l:
                    inside = False
    bad += [f"{path}:{i}: {l.strip()}" for i, l in enumerate(lines, 1) if call.search(l)]
for b in bad:
    print(b)
if bad:
    sys.exit("FAIL: the library must not end the process (report an error; only ts_client_abort exits)")
if not seen_abort_exit:
    sys.exit("FAIL: no exit( in ts_client_abort (src/runtime/client.c): moved? update this check")
print("ok   no exit/abort in src/ outside ts_client_abort")
PY
