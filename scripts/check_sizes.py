#!/usr/bin/env python3
"""Fails (exit 1, naming each) when a non-test source file is over 600 lines
or a function in one is over 120 lines. The build runs it (target
check_sizes, part of ALL), beside scripts/check_layers.sh.

What it reads: C++ (.cc, .h) under src/, include/, tools/, python/ and
bench/, and Python (.py) under python/sluice/, bench/ and examples/. Test
files (*_test.cc, *_test_fixture.h, python/tests/) are exempt: a test's
length follows the cases it covers.

Offenders that predate the rule are listed in scripts/size_allowlist.txt
with their size when it was written: such an entry may shrink but not
grow, and the check fails for an entry that no longer offends, so that the
list only gets shorter. A new offender is never listed.

    scripts/check_sizes.py [SOURCE_ROOT]
"""
import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120

CXX_DIRS = ["src", "include", "tools", "python", "bench"]
PY_DIRS = ["python/sluice", "bench", "examples"]
NOT_FUNCTIONS = re.compile(
    r"^(namespace|class|struct|union|enum|extern|if|else|for|while|do|switch|try|catch)\b|=\s*\{$|^\{$|^\}"
)


def is_test(path):
    base = os.path.basename(path)
    return (base.endswith("_test.cc") or base.endswith("_test_fixture.h") or "/tests/" in "/" + path
            or base.startswith("test_") or base.endswith("_fixture.h"))


def strip_code(line, in_block_comment):
    """The line without comments, string and char literals; whether a /* */
    comment is still open at its end."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if in_block_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i = end + 2
            in_block_comment = False
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block_comment = True
            i += 2
            continue
        if c in "\"'":
            # R"(...)" raw strings on one line are skipped like any string.
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), in_block_comment


def cxx_functions(lines):
    """(name, first line, length in lines) of each function body: a block
    opened at namespace or class scope whose statement is not a type,
    namespace or initializer. Lambdas and blocks inside a function count
    toward it."""
    found = []
    stack = []  # per open brace: ("function", name, start) or ("scope", ...) or ("inner",)
    statement = ""  # text since the last ; { or } at declaration scope
    in_comment = False
    for number, raw in enumerate(lines, 1):
        code, in_comment = strip_code(raw, in_comment)
        if code.lstrip().startswith("#"):
            continue
        for ch in code:
            in_function = any(kind[0] == "function" for kind in stack)
            if ch == "{":
                if in_function:
                    stack.append(("inner",))
                    continue
                text = " ".join(statement.split())
                if "(" in text and not NOT_FUNCTIONS.search(text) and not text.endswith("="):
                    name = re.findall(r"([~\w:]+)\s*\(", text)
                    stack.append(("function", name[0] if name else text[:40], number))
                else:
                    stack.append(("scope",))
                statement = ""
            elif ch == "}":
                if stack:
                    kind = stack.pop()
                    if kind[0] == "function":
                        found.append((kind[1], kind[2], number - kind[2] + 1))
                if not any(kind[0] == "function" for kind in stack):
                    statement = ""
            elif ch == ";" and not in_function:
                statement = ""
            elif not in_function:
                statement += ch
        if not any(kind[0] == "function" for kind in stack):
            statement += " "
    return found


def py_functions(lines):
    found = []
    open_defs = []  # (indent, name, start)
    last_code = 0
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        while open_defs and indent <= open_defs[-1][0]:
            d = open_defs.pop()
            found.append((d[1], d[2], last_code - d[2] + 1))
        m = re.match(r"(async\s+)?def\s+(\w+)", stripped)
        if m:
            open_defs.append((indent, m.group(2), number))
        last_code = number
    for d in open_defs:
        found.append((d[1], d[2], last_code - d[2] + 1))
    return found


def sources(root):
    for top in CXX_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".cc", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, f), root)
    for top in PY_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith(".py"):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    allowed = {}
    with open(os.path.join(root, "scripts/size_allowlist.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                key, size = line.rsplit(None, 1)
                allowed[key] = int(size)
    offenders = {}
    for path in sorted(set(sources(root))):
        if is_test(path):
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) > MAX_FILE_LINES:
            offenders[path] = len(lines)
        functions = py_functions(lines) if path.endswith(".py") else cxx_functions(lines)
        for name, start, length in functions:
            if length > MAX_FUNCTION_LINES:
                key = "%s:%s" % (path, name)
                offenders[key] = max(length, offenders.get(key, 0))
    bad = 0
    for key, size in sorted(offenders.items()):
        limit = MAX_FUNCTION_LINES if ":" in key else MAX_FILE_LINES
        what = "function" if ":" in key else "file"
        if key not in allowed:
            print("size: %s %s is %d lines (at most %d)" % (what, key, size, limit), file=sys.stderr)
            bad = 1
        elif size > allowed[key]:
            print("size: %s %s grew to %d lines (listed at %d in scripts/size_allowlist.txt; at most %d)"
                  % (what, key, size, allowed[key], limit), file=sys.stderr)
            bad = 1
    for key in sorted(set(allowed) - set(offenders)):
        print("size: %s is within the limit now: remove it from scripts/size_allowlist.txt" % key, file=sys.stderr)
        bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
