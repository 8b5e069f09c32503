"""Runs PyTorch's own device-generic test files on spyre and prints what happened.

    tools/dev torch-tests            # the CI selection (suites.py: CI), as ctest runs it
    tools/dev torch-tests --full     # the whole files (hours on two cores)
    tools/dev torch-tests --full test_view_ops.py   # one whole file

ctest runs the CI selection's files side by side, one test each (`--record DIR FILE`:
each file's counts, outcomes and coverage records kept in DIR), then `--summary DIR`
prints the table and checks the coverage over all of them.

The test tree is PyTorch's own, of the installed version, from Debian's source package
(tools/dev fetches and caches it; --tree names it). Each file runs in its own pytest
process with PYTORCH_TESTING_DEVICE_ONLY_FOR=spyre (classes `Test...PRIVATEUSE1`, ids
ending in `_spyre_<dtype>`). A process that dies (a crash) is restarted past the test
that was running, which counts as crashed. The expectations file lists the tests that
do not pass yet, each with its reason; one that starts passing fails the run, so the
list only shrinks.

Per file it prints passed / failed / expected failures / unexpected passes / skipped /
crashed and the time; the exit status is 1 when a test failed unexpectedly, passed
unexpectedly or crashed.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import suites  # noqa: E402

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped", "crashed")


def run_file(tree: pathlib.Path, entry: suites.Entry, full: bool, expectations: pathlib.Path, workdir: pathlib.Path,
             timeout: float, outcomes: dict) -> dict:
    log = workdir / (entry.file + ".log.jsonl")
    done = workdir / (entry.file + ".done")
    covered = workdir / (entry.file + ".coverage.jsonl")
    for path in (log, done, covered):
        path.write_text("")
    results, crashed = {}, []
    # The fallback's once-per-op warnings would break tests that count warnings. PyTorch's
    # tests expect a GPU's memory (some allocate GiBs; a failed test's traceback keeps its
    # tensors until the next failure replaces it): the chip gets 12 GiB (sparse on the host).
    # Their GPU-sized tensors also outlast the CI chip's 0.1 s watchdog (4 cores compare
    # test_pooling's 80 Mi-element gradients in more than that): 10 s, as the default chip.
    memory = "memory.capacity_bytes=16 GiB;memory.usable_bytes=12 GiB;firmware.watchdog_cycles=15000000000"
    chip = ";".join(x for x in (os.environ.get("SPYRE_SIM_SET", ""), memory) if x)
    env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="spyre", SPYRE_FALLBACK_WARN="0", SPYRE_SIM_SET=chip,
               SPYRE_SUITE_LOG=str(log),
               SPYRE_SUITE_DONE=str(done), SPYRE_SUITE_EXPECTATIONS=str(expectations),
               SPYRE_SUITE_COVERAGE=str(covered),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "pytest", entry.file, "-q", "-p", "no:cacheprovider", "-p", "spyre_suite_plugin",
               "--tb=no", "-rN"]
    select = entry.full_select if full else entry.select
    if select:
        command += ["-k", select]
    if not full and entry.device_ops:
        env["SPYRE_SUITE_DEVICE_OPS"] = "1"
    start = time.monotonic()
    for _attempt in range(200):  # each crash restarts the file once
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            break
        try:
            proc = subprocess.run(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=left)
            returncode, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            returncode, output = None, e.stdout or ""
        running = None
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if "start" in record:
                running = record["start"]
            else:
                results[record["id"]] = record["outcome"]
                if record["id"] == running:
                    running = None
        if returncode in (0, 1, 5):  # all passed / some failed / nothing collected
            break
        if returncode is None:
            print(f"  {entry.file}: timed out after {timeout:.0f} s", flush=True)
            break
        if running is None or running in crashed:
            tail = "\n".join(output.splitlines()[-15:])
            print(f"  {entry.file}: pytest exited with {returncode} outside a test:\n{tail}", flush=True)
            results["<" + entry.file + ">"] = "crashed"
            break
        crashed.append(running)
        results[running] = "crashed"
        print(f"  crashed: {running} (exit {returncode}); restarting past it", flush=True)
        done.write_text("\n".join(results) + "\n")
    outcomes.update(results)
    counts = {o: 0 for o in OUTCOMES}
    for outcome in results.values():
        counts[outcome if outcome in counts else "failed"] += 1
    counts["seconds"] = round(time.monotonic() - start)
    counts["unexpected"] = sorted(t for t, o in results.items() if o in ("failed", "error", "xpassed", "crashed"))
    (workdir / (entry.file + ".result.json")).write_text(json.dumps({"counts": counts, "outcomes": results}))
    return counts


def coverage(workdir: pathlib.Path, outcomes: dict) -> list:
    """Which ops with a spyre kernel were not tested in a dtype the device computes.

    The plugin records, per collected OpInfo test, the op, its dtype and the dtypes the
    OpInfo declares. An (op, dtype) is covered by a passing test, or else by a test that
    fails as the expectations file documents (strict xfail, with its reason), or else by
    the project's own test named in COVERED_ELSEWHERE. Each device-kernel op must be
    covered in every dtype of DEVICE_DTYPES its OpInfos declare. Prints the summary and
    returns one line per gap."""
    from spyre_suite_plugin import COVERED_ELSEWHERE, DEVICE_DTYPES

    device_ops, declared = set(), {}
    tested = {"passed": {}, "xfailed": {}}
    for path in sorted(workdir.glob("*.coverage.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "device_ops" in record:
                device_ops.update(record["device_ops"])
                continue
            outcome = outcomes.get(record["id"])
            for name in record["op"]:
                declared.setdefault(name, set()).update(record["supported"])
                if outcome in tested:
                    tested[outcome].setdefault(name, set()).add(record["dtype"])
    gaps, by_xfail, elsewhere = [], [], []
    for op in sorted(device_ops):
        wanted = set(DEVICE_DTYPES) & declared.get(op, set())
        if op in COVERED_ELSEWHERE:
            dtypes, where = COVERED_ELSEWHERE[op]
            wanted -= set(dtypes.split())
            if op not in declared:
                elsewhere.append(f"{op} ({dtypes}): {where}")
            else:
                elsewhere.append(f"{op} in {dtypes}: {where}")
        wanted -= tested["passed"].get(op, set())
        documented = wanted & tested["xfailed"].get(op, set())
        if documented:
            by_xfail.append(f"{op} in {', '.join(sorted(documented))}")
        missing = sorted(wanted - documented)
        if op not in declared and op not in COVERED_ELSEWHERE:
            gaps.append(f"{op}: no OpInfo test in the selection")
        elif missing:
            gaps.append(f"{op}: no test in {', '.join(missing)}")
    print(f"device-kernel ops tested in every device dtype their OpInfos declare: {len(device_ops) - len(gaps)} of "
          f"{len(device_ops)}")
    for line in by_xfail:
        print(f"    only by a documented expected failure: {line}")
    for line in elsewhere:
        print(f"    by the project's own tests: {line}")
    for gap in gaps:
        print(f"    not covered: {gap}")
    return gaps


HEADER = f"{'file':<28} {'passed':>7} {'failed':>7} {'xfail':>6} {'xpass':>6} {'skipped':>8} {'crashed':>8} {'time s':>7}"


def print_row(file: str, c: dict) -> None:
    print(f"{file:<28} {c['passed']:>7} {c['failed'] + c['error']:>7} {c['xfailed']:>6} {c['xpassed']:>6} "
          f"{c['skipped']:>8} {c['crashed']:>8} {c['seconds']:>7}", flush=True)
    for t in c["unexpected"][:50]:
        print(f"    unexpected: {t}")


def finish(table: dict, workdir: pathlib.Path, outcomes: dict, check_coverage: bool, json_path,
           report_coverage: bool = True) -> int:
    """The totals, the coverage report and check (for the CI selection) and the exit status."""
    totals = {o: sum(c[o] for c in table.values()) for o in OUTCOMES}
    gaps = coverage(workdir, outcomes) if report_coverage else []
    if not check_coverage:
        gaps = []
    ran = sum(totals[o] for o in OUTCOMES if o != "skipped")
    print(f"{'total':<28} {totals['passed']:>7} {totals['failed'] + totals['error']:>7} {totals['xfailed']:>6} "
          f"{totals['xpassed']:>6} {totals['skipped']:>8} {totals['crashed']:>8}")
    if ran:
        print(f"expected failures: {totals['xfailed']} of {ran} run ({100 * totals['xfailed'] / ran:.1f}%)")
    if json_path:
        json_path.write_text(json.dumps(table, indent=1))
    bad = totals["failed"] + totals["error"] + totals["xpassed"] + totals["crashed"] + len(gaps)
    return 1 if bad else 0


def summary(workdir: pathlib.Path, json_path) -> int:
    """The CI selection's table from the records its parts left in workdir (--record)."""
    table, outcomes, missing = {}, {}, []
    print(HEADER, flush=True)
    for entry in suites.CI:
        record = workdir / (entry.file + ".result.json")
        if not record.exists():
            missing.append(entry.file)
            continue
        saved = json.loads(record.read_text())
        table[entry.file] = saved["counts"]
        outcomes.update(saved["outcomes"])
        print_row(entry.file, saved["counts"])
    for entry in suites.EXTENDED:  # tools/dev test --full's parts, when they ran
        record = workdir / (entry.file + ".result.json")
        if record.exists():
            saved = json.loads(record.read_text())
            table[entry.file] = saved["counts"]
            outcomes.update(saved["outcomes"])
            print_row(entry.file, saved["counts"])
    for file in missing:
        print(f"{file:<28} not run: no record in {workdir} (run.py --record {workdir} {file} writes it)")
    return finish(table, workdir, outcomes, True, json_path) or (1 if missing else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=pathlib.Path, help="PyTorch's test/ folder (read from DIR/tree with --record)")
    parser.add_argument("--full", action="store_true", help="whole files instead of the CI selection")
    parser.add_argument("--expectations", type=pathlib.Path, default=HERE / "expectations.txt")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per file")
    parser.add_argument("--json", type=pathlib.Path, help="write the counts here")
    parser.add_argument("--record", type=pathlib.Path, metavar="DIR",
                        help="keep each file's counts, outcomes and coverage records in DIR (for --summary)")
    parser.add_argument("--summary", type=pathlib.Path, metavar="DIR",
                        help="run nothing: the CI selection's table and coverage check from DIR's records")
    parser.add_argument("files", nargs="*", help="only these files")
    args = parser.parse_args()
    if args.summary:
        return summary(args.summary, args.json)
    if args.tree is None and args.record and (args.record / "tree").exists():
        args.tree = pathlib.Path((args.record / "tree").read_text().strip())
    if args.tree is None:
        parser.error("--tree is required (or a DIR/tree file written by the set-up step, with --record DIR)")
    known = suites.CI + suites.EXTENDED + (suites.FULL_ONLY if args.full else [])
    entries = [e for e in known if not args.files or e.file in args.files]
    if args.files:
        entries += [suites.Entry(f) for f in args.files if f not in {e.file for e in entries}]
    table = {}
    outcomes = {}
    with tempfile.TemporaryDirectory(prefix="spyre-suites-") as tmp:
        workdir = pathlib.Path(tmp)
        if args.record:
            workdir = args.record
            workdir.mkdir(parents=True, exist_ok=True)
        print(HEADER, flush=True)
        for entry in entries:
            c = run_file(args.tree, entry, args.full, args.expectations, workdir, args.timeout, outcomes)
            table[entry.file] = c
            print_row(entry.file, c)
        # The CI selection must cover every op with a device kernel in each device dtype
        # (a run of chosen files or of --full reports the coverage without failing on it).
        # A part of ctest's run (--record DIR FILE) leaves the coverage to --summary.
        return finish(table, workdir, outcomes, not (args.files or args.full), args.json,
                      report_coverage=not (args.record and args.files))


if __name__ == "__main__":
    sys.exit(main())
