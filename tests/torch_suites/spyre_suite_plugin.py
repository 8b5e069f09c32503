"""A pytest plugin for running PyTorch's own test files on spyre (tests/torch_suites/run.py).

- Marks the tests listed in the expectations file (SPYRE_SUITE_EXPECTATIONS) as expected
  failures (strict: a test that starts passing fails the run, so the list only shrinks)
  or as skipped, each with its reason.
- Leaves out tests an earlier attempt already ran (SPYRE_SUITE_DONE, one node id per
  line): after a crash the runner restarts the file past the test that crashed.
- Appends one JSON line per event to SPYRE_SUITE_LOG ({"start": id} before a test runs,
  {"id", "outcome", "seconds"} after), so a crash still leaves the results so far and
  the name of the test that was running.
"""

import json
import os

import pytest


def _load_expectations(path):
    expected = {}
    if not path:
        return expected
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                kind, test_id, reason = (part.strip() for part in line.split("|", 2))
            except ValueError:
                raise pytest.UsageError(f"{path}:{number}: expected 'xfail|skip | test id | reason', got {line!r}")
            if kind not in ("xfail", "skip") or not reason:
                raise pytest.UsageError(f"{path}:{number}: the kind is xfail or skip and the reason is not empty")
            expected[test_id] = (kind, reason)
    return expected


class _Log:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8") if path else None

    def write(self, record):
        if self.file:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()


_LOG = _Log(os.environ.get("SPYRE_SUITE_LOG"))


def _short_id(nodeid):
    """file.py::Class::test (parametrisations kept), as the expectations file names them."""
    return nodeid.split("/")[-1]


def pytest_collection_modifyitems(config, items):
    expected = _load_expectations(os.environ.get("SPYRE_SUITE_EXPECTATIONS"))
    done = set()
    done_path = os.environ.get("SPYRE_SUITE_DONE")
    if done_path and os.path.exists(done_path):
        with open(done_path, encoding="utf-8") as f:
            done = {line.strip() for line in f if line.strip()}
    kept, dropped = [], []
    for item in items:
        test_id = _short_id(item.nodeid)
        if test_id in done:
            dropped.append(item)
            continue
        kept.append(item)
        if test_id in expected:
            kind, reason = expected[test_id]
            if kind == "xfail":
                item.add_marker(pytest.mark.xfail(reason=f"spyre: {reason}", strict=True, run=True))
            else:
                item.add_marker(pytest.mark.skip(reason=f"spyre: {reason}"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_logstart(nodeid, location):
    _LOG.write({"start": _short_id(nodeid)})


def pytest_runtest_logreport(report):
    # One outcome per test: the call's, or the setup's when it did not get that far.
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            outcome = "xpassed"
        elif report.failed and report.when == "setup":
            outcome = "error"
        _LOG.write({"id": _short_id(report.nodeid), "outcome": outcome, "seconds": round(report.duration, 3)})
    elif report.when == "teardown" and report.failed:
        _LOG.write({"id": _short_id(report.nodeid), "outcome": "error", "seconds": round(report.duration, 3)})
