"""kombu's integration mixins pass on zkqueue:// (see tests/celery/kombu_suite.py for how they are run)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.celery import kombu_suite


def test_kombu_integration_mixins(zk_server: Any, tmp_path: Path) -> None:
    try:
        tarball = kombu_suite.fetch_sdist()
    except Exception as exc:  # no network, no index: nothing to run
        pytest.skip(f"kombu's sdist could not be fetched: {exc}")
    common = kombu_suite.extract_common(tarball, tmp_path)
    mixins = kombu_suite.available_mixins(common)
    assert {"BasicFunctionality", "BaseMessage", "BasePriority", "BaseExchangeTypes"} <= set(mixins)
    kombu_suite.generate(tmp_path, mixins)
    junit = tmp_path / "junit.xml"
    proc = kombu_suite.run(tmp_path, zk_server.connect_string, junit)
    report = proc.stdout[-6000:] + proc.stderr[-2000:]
    root = ET.parse(junit).getroot()
    cases = root.iter("testcase")
    failed, skipped, passed = [], [], []
    for case in cases:
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif (skip := case.find("skipped")) is not None:
            assert skip.get("message"), f"{name} skipped without a reason"
            skipped.append(f"{name}: {skip.get('message')}")
        else:
            passed.append(name)
    print(f"kombu mixins: {len(passed)} passed, {len(skipped)} skipped, {len(failed)} failed")
    for line in skipped:
        print("  skipped", line)
    assert not failed, f"failed: {failed}\n{report}"
    assert proc.returncode == 0, report
    assert passed
