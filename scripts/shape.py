#!/usr/bin/env python3
"""The shape of the workspace's code, per crate: non-test lines, functions
over 80 lines, the longest functions, and the module import cycles.

    scripts/shape.py                  every crate, a summary each
    scripts/shape.py --cycles         also each cycle's modules
    scripts/shape.py --long 80        also every function over 80 lines
    scripts/shape.py --crate lane-proxy

Test code is left out: files under a `tests` folder or named `tests.rs`,
modules declared under `#[cfg(test)]`, and inline `#[cfg(test)] mod` blocks.
A module's edges are the paths it names (`use crate::a::b`, `super::c::D`,
`crate::a::f()`), resolved to the longest module they reach; a `mod`
declaration is not an edge (a parent owns its children; it is a cycle when
a child also uses its parent's items).
"""
import argparse
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def blank(src):
    """The source with comments, strings and char literals replaced by
    spaces (newlines kept), so braces and paths can be read off it."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 260]) and not (
            i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")
        ):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and not (
            i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")
        )):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 16])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def test_blocks(text):
    """Ranges of inline `#[cfg(test)] mod x { … }` blocks."""
    ranges = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        open_at = m.end() - 1
        ranges.append((m.start(), match_brace(text, open_at)))
    return ranges


def functions(text, skip):
    """(name, first line, line count) of every fn with a body."""
    found = []
    for m in re.finditer(r"\bfn\s+([A-Za-z_]\w*)", text):
        if any(a <= m.start() <= b for a, b in skip):
            continue
        depth, j = 0, m.end()
        while j < len(text):
            ch = text[j]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1 if text[j - 1] != "-" else 0
            elif ch == ";" and depth <= 0:
                j = -1
                break
            elif ch == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(text):
            continue
        end = match_brace(text, j)
        first = text.count("\n", 0, m.start()) + 1
        last = text.count("\n", 0, end) + 1
        found.append((m.group(1), first, last - first + 1))
    return found


def crate_files(crate_dir):
    src = os.path.join(crate_dir, "src")
    files = []
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.join(dirpath, name))
    return src, sorted(files)


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return ()
    if rel and rel[0] == "bin":
        return None  # each binary is a crate of its own
    return tuple(rel)


def is_test_path(mod):
    return any(p == "tests" or p.endswith("_tests") for p in mod)


def analyse(crate_dir):
    src, files = crate_files(crate_dir)
    texts, mods = {}, {}
    for f in files:
        mod = module_of(src, f)
        if mod is None or is_test_path(mod):
            continue
        with open(f, encoding="utf-8") as fh:
            texts[mod] = blank(fh.read())
        mods[mod] = f
    # Modules declared under #[cfg(test)] are test code too.
    test_mods = set()
    for mod, text in texts.items():
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            test_mods.add(mod + (m.group(3),))
    for t in list(texts):
        if any(t[: len(x)] == x for x in test_mods):
            del texts[t]
    lines, funcs, edges = 0, [], {m: set() for m in texts}
    known = set(texts)
    for mod, text in texts.items():
        skip = test_blocks(text)
        kept = list(text)
        for a, b in skip:
            for k in range(a, b + 1):
                if kept[k] != "\n":
                    kept[k] = " "
        kept = "".join(kept)
        lines += sum(1 for ln in kept.split("\n") if ln.strip())
        for name, first, count in functions(text, skip):
            funcs.append((count, f"{os.path.relpath(mods[mod], ROOT)}:{first}", name))
        for target in referenced(mod, kept, mods[mod]):
            while target and target not in known:
                target = target[:-1]
            if target != mod and target in known:
                edges[mod].add(target)
    return lines, funcs, edges


def referenced(mod, text, path):
    """Module paths this module's code names."""
    # The module `self`/`super` are relative to: a file `a/b.rs` is `a::b`.
    here = mod
    out = []
    for m in re.finditer(r"\b(crate|super|self)((?:\s*::\s*\w+)+)", text):
        head, rest = m.group(1), [p for p in re.split(r"\s*::\s*", m.group(2)) if p]
        if head == "crate":
            base = ()
        elif head == "self":
            base = here
        else:
            base = here[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        out.append(base + tuple(rest))
    # use groups: `use crate::a::{b, c::D}` names a::b and a::c too.
    for m in re.finditer(r"\buse\s+(crate|super|self)\s*::([^;]*);", text):
        body = m.group(2)
        head = m.group(1)
        base = () if head == "crate" else here if head == "self" else here[:-1]
        for path_ in expand_use(body):
            p = list(path_)
            b = base
            while head == "super" and p and p[0] == "super":
                b, p = b[:-1], p[1:]
            out.append(b + tuple(p))
    return out


def expand_use(body):
    body = re.sub(r"\s+", "", body)
    results = []

    def walk(prefix, s):
        if "{" not in s:
            for part in split_top(s):
                if part and part != "self":
                    results.append(prefix + tuple(x for x in part.split("::") if x))
                elif part == "self":
                    results.append(prefix)
            return
        for part in split_top(s):
            if "{" in part:
                head, inner = part.split("{", 1)
                walk(prefix + tuple(x for x in head.split("::") if x), inner[:-1])
            elif part:
                walk(prefix, part)

    walk((), body)
    return results


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(mod):
    return "crate::" + "::".join(mod) if mod else "crate"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--crate", action="append", help="only this crate (folder under crates/)")
    ap.add_argument("--cycles", action="store_true", help="print each cycle's modules")
    ap.add_argument("--long", type=int, metavar="N", help="list every function over N lines")
    ap.add_argument("--top", type=int, default=5, help="longest functions to list (5)")
    args = ap.parse_args()
    crates_dir = os.path.join(ROOT, "crates")
    names = args.crate or sorted(os.listdir(crates_dir))
    all_funcs, total_lines = [], 0
    print(f"{'crate':<18}{'lines':>8}{'fns':>7}{'>80':>6}{'cycles':>8}")
    for c in names:
        d = os.path.join(crates_dir, c)
        if not os.path.isdir(os.path.join(d, "src")):
            continue
        lines, funcs, edges = analyse(d)
        cyc = cycles(edges)
        over = sum(1 for f in funcs if f[0] > 80)
        total_lines += lines
        all_funcs += funcs
        print(f"{c:<18}{lines:>8}{len(funcs):>7}{over:>6}{len(cyc):>8}")
        if args.cycles:
            for comp in cyc:
                print("    cycle: " + " <-> ".join(name(m) for m in comp))
    over = [f for f in all_funcs if f[0] > 80]
    share = 100.0 * len(over) / max(1, len(all_funcs))
    print(f"{'all':<18}{total_lines:>8}{len(all_funcs):>7}{len(over):>6}   ({share:.1f} % of functions over 80 lines)")
    print(f"longest {args.top}:")
    for count, where, fname in sorted(all_funcs, reverse=True)[: args.top]:
        print(f"  {count:>5}  {fname}  {where}")
    if args.long:
        print(f"over {args.long} lines:")
        for count, where, fname in sorted(all_funcs, reverse=True):
            if count > args.long:
                print(f"  {count:>5}  {fname}  {where}")


if __name__ == "__main__":
    main()
