#!/usr/bin/env python3
"""Prints the N slowest tests of nextest JUnit reports, slowest first.

usage: slowest-tests.py N REPORT.xml...
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    rows = []
    for path in sys.argv[2:]:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"slowest-tests: {path}: {e}", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            rows.append((float(case.get("time", "0")), case.get("classname", ""), case.get("name", "")))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"{len(rows)} tests, {total:.0f} s of test time; the {min(n, len(rows))} slowest:")
    for t, binary, name in rows[:n]:
        print(f"  {t:7.2f} s  {binary} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
