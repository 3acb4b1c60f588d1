"""Packs the guest's standard library and bundled packages into one zip of bytecode.

Run with the build's own native CPython (the same version as the guest, so the bytecode's
magic number matches):

    python pack.py OUT.zip STDLIB_DIR SITE_DIR...

Every `.py` under the folders becomes a `.pyc` at the same path (unchecked hash: the zip
never changes under the guest); other files are copied as they are, the packages'
`NAME-VERSION.dist-info/` folders among them (Warden reads the bundled packages' names and
versions from those). Folders the guest
never needs (tests, IDLE, Tk, ensurepip) are left out. Entries are sorted and dated
1980-01-01, so the same inputs give the same bytes.
"""

import importlib.util
import marshal
import os
import sys
import zipfile

LEFT_OUT = {
    "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib-dynload",
    "__pycache__", "site-packages", "config-3.13-wasm32-wasi", "venv",
}
DATE = (1980, 1, 1, 0, 0, 0)


def bytecode(path, name):
    with open(path, "rb") as f:
        source = f.read()
    code = compile(source, name, "exec", dont_inherit=True, optimize=0)
    flags = 0b01  # hash-based, unchecked
    header = importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code)


def entries(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in LEFT_OUT)
        for file in sorted(files):
            path = os.path.join(folder, file)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            yield path, rel


def main(out, *roots):
    seen = {}
    for root in roots:
        for path, rel in entries(root):
            if rel.endswith(".py"):
                name, data = rel + "c", bytecode(path, rel)
            elif rel.endswith((".pyc", ".pyo")):
                continue
            else:
                with open(path, "rb") as f:
                    name, data = rel, f.read()
            seen.setdefault(name, data)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(seen):
            info = zipfile.ZipInfo(name, DATE)
            info.compress_type = zipfile.ZIP_STORED  # the guest has no zlib
            info.external_attr = 0o644 << 16
            z.writestr(info, seen[name])
    print(f"{out}: {len(seen)} files", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
