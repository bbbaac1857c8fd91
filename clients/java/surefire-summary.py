#!/usr/bin/env python3
"""Prints one line per module and a total from Surefire's XML reports, which `mvn -q`
keeps quiet about: run after `mvn verify` in clients/java (make test-java does)."""
import glob
import os
import sys
import xml.etree.ElementTree as ET

here = os.path.dirname(os.path.abspath(__file__))
total = [0, 0, 0, 0]
# modules one level down (dlock-core/) and two (dlock-spring-boot-tests/boot3/)
reports = glob.glob(os.path.join(here, "*", "target", "surefire-reports"))
reports += glob.glob(os.path.join(here, "*", "*", "target", "surefire-reports"))
for module in sorted(reports):
    counts = [0, 0, 0, 0]
    for path in glob.glob(os.path.join(module, "TEST-*.xml")):
        suite = ET.parse(path).getroot()
        for i, field in enumerate(("tests", "failures", "errors", "skipped")):
            counts[i] += int(suite.get(field, "0"))
    total = [a + b for a, b in zip(total, counts)]
    name = os.path.relpath(os.path.dirname(os.path.dirname(module)), here)
    print(f"{name}: {counts[0]} tests, {counts[1]} failures, {counts[2]} errors, {counts[3]} skipped")
print(f"java: {total[0]} tests, {total[1]} failures, {total[2]} errors, {total[3]} skipped")
sys.exit(1 if total[1] or total[2] else 0)
