#!/usr/bin/env python3
"""The docs agree with the scripts and with themselves (issue 65).

  docs_agree.py REPO

1. The device check's limits: every step limit, the reserve, the machine's limit and both budgets
   that apps/scripts/device_check.sh uses are the ones in docs/gh200.md's step table; each total row
   of the table ("N s of M") is the sum of the limits of the steps that run on that path and the
   script's budget, and fits in it; the defaults and budgets the script's header and the docs' prose
   name (`JOULE_DEVICE_BUILD_LIMIT` "default N s", "--budget: N s with --bundle, M s when",
   "the build's limit, N s", the quick start's minutes) are the script's.
2. Test counts: README.md, BENCHMARKS.md and docs/*.md state no count of tests ("76 unit tests",
   "every test (296)", "(81) under qemu") unless the same line dates it ("then", a year, "issue N"):
   a count that changes with every commit is given by the command that prints it instead.

Then it proves that it can fail: copies of the docs with a wrong limit, a wrong total, a wrong
budget or an undated count must each be refused, naming what disagrees. Prints PASS at the end.
"""
import pathlib
import re
import shutil
import sys
import tempfile

SCRIPT = "apps/scripts/device_check.sh"
GH200 = "docs/gh200.md"


def script_limits(text):
    """{step: limit}, budgets (bundle, kokkos_root) and the header's stated defaults."""
    limits, problems = {}, []
    for m in re.finditer(r'^\s*(?:if\s+)?step\s+(\w+)\s+(?:"\$\{(\w+):-(\d+)\}"|(\d+))\s+(?:host|gpu|any)\b',
                         text, re.M):
        name, var, default, plain = m.groups()
        value = int(default or plain)
        if name in limits and limits[name][0] != value:
            problems.append(f"{SCRIPT}: step {name} has two limits, {limits[name][0]} and {value} s")
        limits[name] = (value, var)
    for var in ("machine_limit", "reserve"):
        m = re.search(rf'^{var}=(\d+)\b', text, re.M)
        if not m:
            problems.append(f"{SCRIPT}: no {var}=N found")
            continue
        limits[var.replace("_limit", "")] = (int(m.group(1)), None)
    m = re.search(r'budget="\$\{budget:-\$\(\[ -n "\$bundle" \] && echo (\d+) \|\| echo (\d+)\)\}"', text)
    if not m:
        problems.append(f"{SCRIPT}: the default budgets (--bundle, Kokkos_ROOT) were not found")
        budgets = (None, None)
    else:
        budgets = (int(m.group(1)), int(m.group(2)))
    header = text.split("\nset -uo pipefail", 1)[0]
    # The header's own statements: "budget N s" of each path, each JOULE_DEVICE_*_LIMIT default.
    for label, pattern, value in (("--bundle", r"--bundle B .*?budget (\d+) s", budgets[0]),
                                  ("Kokkos_ROOT", r"Kokkos_ROOT your own .*?budget (\d+) s", budgets[1])):
        h = re.search(pattern, header, re.S)
        if not h:
            problems.append(f"{SCRIPT}: the header states no budget for {label}")
        elif value is not None and int(h.group(1)) != value:
            problems.append(f"{SCRIPT}: the header says budget {h.group(1)} s for {label}, the script uses {value} s")
    for var, stated in re.findall(r'(JOULE_DEVICE_\w+_LIMIT)\s+[^\n]*?\(default (\d+) s', header):
        used = [v for v, (lim, w) in limits.items() if w == var]
        if not used:
            problems.append(f"{SCRIPT}: the header names {var}, which no step uses")
        elif limits[used[0]][0] != int(stated):
            problems.append(f"{SCRIPT}: the header says {var} defaults to {stated} s, the script uses {limits[used[0]][0]} s")
    return {k: v for k, (v, _) in limits.items()}, budgets, problems


def section(text, heading):
    m = re.search(rf'^## {re.escape(heading)}.*?$(.*?)(?=^## |\Z)', text, re.M | re.S)
    return m.group(1) if m else None


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def doc_table(text):
    """The step table of the device check's section: {step: (limit, path)}, [(path, sum, of)]."""
    sec = section(text, "The device check")
    if sec is None:
        return None, None, [f"{GH200}: no section '## The device check'"]
    rows = [cells(l.replace("\\|", "/")) for l in sec.splitlines() if l.startswith("|")]
    head = next((i for i, r in enumerate(rows) if "step" in r and "limit" in r), None)
    if head is None:
        return None, None, [f"{GH200}: the device check's section has no table with a step and a limit column"]
    col_step, col_what, col_limit = rows[head].index("step"), rows[head].index("what"), rows[head].index("limit")
    steps, totals, problems = {}, [], []
    for r in rows[head + 2:]:
        if len(r) <= col_limit:
            continue
        name, what, limit = r[col_step], r[col_what], r[col_limit]
        t = re.fullmatch(r"\*\*(\d+) s of (\d+)\*\*", limit)
        if t:
            path = "bundle" if "--bundle" in name else "kokkos_root" if "Kokkos_ROOT" in name else None
            if path is None:
                problems.append(f"{GH200}: a total row names neither --bundle nor Kokkos_ROOT: {name}")
            totals.append((path, int(t.group(1)), int(t.group(2))))
            continue
        lm = re.fullmatch(r"(\d+) s", limit)
        if not lm:
            continue  # "the rest of the budget"
        key = name.strip("()` ")
        path = "bundle" if what.startswith("(`--bundle`)") else "kokkos_root" if what.startswith("(`Kokkos_ROOT`)") else "both"
        steps[key] = (int(lm.group(1)), path)
    if len(steps) < 10:
        problems.append(f"{GH200}: the device check's table lists only {len(steps)} steps with a limit")
    return steps, totals, problems


def check_device_check(repo):
    script = (repo / SCRIPT).read_text()
    gh200 = (repo / GH200).read_text()
    limits, budgets, problems = script_limits(script)
    steps, totals, more = doc_table(gh200)
    problems += more
    if steps is None:
        return problems
    for name, value in sorted(limits.items()):
        if name not in steps:
            problems.append(f"{GH200}: the step table has no row for {name} (limit {value} s in {SCRIPT})")
        elif steps[name][0] != value:
            problems.append(f"{GH200}: the step table gives {name} {steps[name][0]} s, {SCRIPT} {value} s")
    for name in sorted(set(steps) - set(limits)):
        problems.append(f"{GH200}: the step table lists {name} ({steps[name][0]} s), which {SCRIPT} has no limit for")
    budget_of = {"bundle": budgets[0], "kokkos_root": budgets[1]}
    for path in ("bundle", "kokkos_root"):
        total = sum(v for n, (v, p) in steps.items() if p in ("both", path) and n in limits)
        script_total = sum(limits[n] for n, (v, p) in steps.items() if p in ("both", path) and n in limits)
        stated = [t for t in totals if t[0] == path]
        if not stated:
            problems.append(f"{GH200}: the step table has no total row for {path}")
            continue
        _, said, of = stated[0]
        if said != total:
            problems.append(f"{GH200}: the total for {path} says {said} s, its steps add up to {total} s")
        if budget_of[path] is not None and of != budget_of[path]:
            problems.append(f"{GH200}: the total for {path} says 'of {of}', {SCRIPT}'s budget is {budget_of[path]} s")
        if budget_of[path] is not None and script_total > budget_of[path]:
            problems.append(f"{SCRIPT}: the limits of the {path} path add up to {script_total} s, over its budget of {budget_of[path]} s")
    # Prose that restates a limit or a budget.
    bundle_b, root_b = budgets
    for m in re.finditer(r"`--budget`: (\d+) s with `--bundle`, (\d+) s when", gh200):
        if (int(m.group(1)), int(m.group(2))) != budgets:
            problems.append(f"{GH200}: '--budget: {m.group(1)} s with --bundle, {m.group(2)} s' but the script's are {budgets}")
    for m in re.finditer(r"build's limit, (\d+) s", gh200):
        if "build" in limits and int(m.group(1)) != limits["build"]:
            problems.append(f"{GH200}: 'the build's limit, {m.group(1)} s', the script's is {limits['build']} s")
    for m in re.finditer(r"\((\d+) minutes from a prebuilt bundle, (\d+) when it builds\)", gh200):
        if bundle_b and root_b and (int(m.group(1)) * 60, int(m.group(2)) * 60) != (bundle_b, root_b):
            problems.append(f"{GH200}: '{m.group(0)}', the script's budgets are {bundle_b} and {root_b} s")
    quick = repo / "docs/gh200-quickstart.md"
    if quick.exists():
        for m in re.finditer(r"\((\d+) at most\)", quick.read_text()):
            if root_b and int(m.group(1)) * 60 != root_b:
                problems.append(f"docs/gh200-quickstart.md: '({m.group(1)} at most)' minutes, the script's budget is {root_b} s")
    return problems


# A count of tests: "76 unit tests", "224 of 224 tests", "every test (296)", "(81) under qemu".
NUM = r"(?<![-\w.,])\d{1,3}(?:,\d{3})*(?![\d.])"
COUNT = re.compile(NUM + r"\s+(?:of\s+" + NUM + r"\s+)?(?:unit\s+|Catch2\s+|ctest\s+)?(?:tests|test cases)\b"
                   r"|\btests?\b[^|\n()]{0,80}\(\d+\)"
                   r"|\(\d+\)\s+under qemu")
DATED = re.compile(r"\bthen\b|\b(?:19|20)\d\d\b|\bissue \d+|\bat the time\b", re.I)


def check_counts(repo):
    problems = []
    files = [repo / "README.md", repo / "BENCHMARKS.md"] + sorted((repo / "docs").glob("*.md"))
    for f in files:
        if not f.exists():
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            # Inline code quotes a command or its output ("0 tests failed out of N"), not a claim.
            for m in COUNT.finditer(re.sub(r"`[^`]*`", "`…`", line)):
                if not DATED.search(line):
                    problems.append(f"{f.relative_to(repo)}:{n}: an undated count of tests, '{m.group(0)}': "
                                    "give the command that prints it (ctest -N | tail -1), or date it ('… then', a date)")
    return problems


def check(repo):
    return check_device_check(repo) + check_counts(repo)


def mutants(repo):
    """(what, file, old, new, a word the refusal must hold): each must make check() fail."""
    gh = (repo / GH200).read_text()
    row = re.search(r"^\| – \| build \|.*\| (\d+) s \|", gh, re.M)
    total = re.search(r"\*\*(\d+) s of (\d+)\*\*", gh)
    yield ("a build limit the script does not use", GH200, row.group(0),
           row.group(0).replace(f"| {row.group(1)} s |", f"| {int(row.group(1)) + 20} s |"), "build")
    yield ("a total that is not the steps' sum", GH200, total.group(0),
           f"**{int(total.group(1)) + 20} s of {total.group(2)}**", "add up")
    yield ("a budget the script does not have", SCRIPT, "&& echo 300 ||", "&& echo 360 ||", "budget")
    yield ("a step limit changed in the script alone", SCRIPT, "step step_medium 40 gpu", "step step_medium 45 gpu",
           "step_medium")
    yield ("an undated count of tests", "README.md", "## Status", "## Status\n\nThe suite has 325 tests.", "undated")
    yield ("a count in parentheses", "docs/testing.md", "## aarch64 under emulation",
           "## aarch64 under emulation\n\nThe unit tests under qemu (76) pass.", "undated")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: docs_agree.py REPO")
    repo = pathlib.Path(sys.argv[1]).resolve()
    problems = check(repo)
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print(f"ok: {SCRIPT}'s limits and budgets are {GH200}'s; no undated count of tests in the docs")
    # The check can fail: each mutant of a copy of the files it reads is refused.
    with tempfile.TemporaryDirectory() as tmp:
        for what, rel, old, new, word in mutants(repo):
            copy = pathlib.Path(tmp) / "repo"
            shutil.rmtree(copy, ignore_errors=True)
            for f in [SCRIPT, "README.md", "BENCHMARKS.md"] + [str(p.relative_to(repo)) for p in (repo / "docs").glob("*.md")]:
                if (repo / f).exists():
                    (copy / f).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(repo / f, copy / f)
            text = (copy / rel).read_text()
            if old not in text:
                sys.exit(f"FAIL: self-test '{what}': '{old[:60]}' not found in {rel}")
            (copy / rel).write_text(text.replace(old, new, 1))
            refused = check(copy)
            if not any(word in p for p in refused):
                print(f"FAIL: self-test '{what}' was not refused (problems: {refused})")
                sys.exit(1)
            print(f"ok: refused {what}: {refused[0]}")
    print("PASS")


if __name__ == "__main__":
    main()
