#!/usr/bin/env python3
"""docs_test.py: the README and doc/ stay true to the code.

    tests/docs_test.py path/to/sluice [REPO_ROOT]

For every Markdown file (README.md, doc/*.md):
- every `sluice SUBCOMMAND ...` line in a shell block names a real subcommand,
  and every --flag on it is one that subcommand's --help lists;
- every Python block parses;
- every relative link points at a file that exists, and an #anchor at a
  heading of that file.
Prints "ok"/"not ok" lines and "N passed, M failed"; exit 0 if all passed.
"""
import ast
import os
import re
import subprocess
import sys

if len(sys.argv) < 2:
    print(__doc__, file=sys.stderr)
    sys.exit(2)
sluice = sys.argv[1]
root = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
files = [os.path.join(root, "README.md")] + sorted(
    os.path.join(root, "doc", f) for f in os.listdir(os.path.join(root, "doc")) if f.endswith(".md"))
passed = failed = 0


def report(ok, what):
    global passed, failed
    print(("ok - " if ok else "not ok - ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


help_cache = {}


def help_of(sub):
    if sub not in help_cache:
        r = subprocess.run([sluice, sub, "--help"], capture_output=True, text=True)
        help_cache[sub] = r.stdout + r.stderr if r.returncode == 0 else None
    return help_cache[sub]


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def blocks(text):
    """(language, first line number, body) of each fenced block."""
    out, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*```(\w*)\s*$", line)
        if m and lang is None:
            lang, start, body = m.group(1) or "text", n + 1, []
        elif m:
            out.append((lang, start, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


commands = 0
for path in files:
    rel = os.path.relpath(path, root)
    text = open(path, encoding="utf-8").read()
    headings = {slug(re.sub(r"^#+\s*", "", l)) for l in text.split("\n") if l.startswith("#")}
    for lang, start, body in blocks(text):
        if lang == "python":
            try:
                ast.parse(body)
                report(True, f"{rel}:{start}: the Python block parses")
            except SyntaxError as e:
                report(False, f"{rel}:{start}: Python block: {e}")
            continue
        if lang not in ("sh", "bash"):
            continue
        # Join continued lines, then look at each sluice command.
        joined = re.sub(r"\\\n\s*", " ", body)
        for k, line in enumerate(joined.split("\n")):
            m = re.match(r"^\s*(?:[\w/.]*/)?sluice\s+([a-z][a-z-]*)(.*)$", line)
            if not m:
                continue
            commands += 1
            sub, rest = m.group(1), m.group(2).split("#", 1)[0]
            h = help_of(sub)
            if h is None:
                report(False, f"{rel}: 'sluice {sub}' is not a command")
                continue
            flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", rest))
            missing = sorted(f for f in flags if f != "help" and not re.search(r"--" + re.escape(f) + r"\b", h))
            report(not missing, f"{rel}: sluice {sub} " + (
                "with " + ", ".join("--" + f for f in sorted(flags)) if flags else "") +
                (f": not in its --help: {', '.join('--' + f for f in missing)}" if missing else ""))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+://", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            report(False, f"{rel}: link {target}: no such file")
            continue
        if anchor and dest.endswith(".md"):
            dtext = open(dest, encoding="utf-8").read()
            dheads = {slug(re.sub(r"^#+\s*", "", l)) for l in dtext.split("\n") if l.startswith("#")}
            report(anchor in dheads, f"{rel}: link {target}" + ("" if anchor in dheads else ": no such heading"))
        else:
            report(True, f"{rel}: link {target}")
# The schemes the backend registry opens, against what the public headers'
# first paragraphs and the Python package's docstring say about stores.
registry = open(os.path.join(root, "src", "backends", "backend_registry.cc"), encoding="utf-8").read()
schemes = set(re.findall(r'scheme == "([a-z0-9]+)"', registry))
report(len(schemes) >= 3, f"the backend registry opens {sorted(schemes)} (a parser that finds none would pass)")


def first_paragraph(header):
    lines = []
    for line in open(header, encoding="utf-8").read().split("\n"):
        if not line.startswith("//") or line.strip() == "//":
            break
        lines.append(line[2:])
    return " ".join(lines)


for h in sorted(os.listdir(os.path.join(root, "include", "sluice"))):
    para = first_paragraph(os.path.join(root, "include", "sluice", h))
    named = set(re.findall(r"\b([a-z0-9]+)://", para))
    unknown = sorted(named - schemes)
    report(not unknown, f"include/sluice/{h}: its first paragraph names no scheme the registry does not open" +
           (f": {', '.join(unknown)}" if unknown else ""))
    if h == "backend.h":
        missing = sorted(schemes - named)
        report(not missing, "include/sluice/backend.h: its first paragraph names every scheme the registry opens" +
               (f"; missing {', '.join(missing)}" if missing else ""))
doc = re.search(r'^"""(.*?)"""', open(os.path.join(root, "python", "sluice", "__init__.py"), encoding="utf-8").read(),
                re.S).group(1)
missing = sorted(s for s in schemes if s + "://" not in doc)
report(not missing, "python/sluice/__init__.py: its docstring names every scheme the registry opens" +
       (f"; missing {', '.join(missing)}" if missing else ""))
report(commands >= 20, f"{commands} sluice commands found in the docs (a parser that finds none would pass)")
print(f"{passed} passed, {failed} failed")
sys.exit(0 if failed == 0 else 1)
