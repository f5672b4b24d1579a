#!/usr/bin/env bash
# Conformance against the ONNX backend tests (../shared/onnx-backend-tests): runs
# `kiln verify` over the four suites and fails if a case listed in
# tests/conformance/passing_<suite>.txt no longer passes (a regression). Newly passing
# cases are reported so the lists can be refreshed with:
#     scripts/conformance.sh --update
# JSON results land in build/conformance/<suite>.json (tools/conformance_report.py turns
# them into docs/CONFORMANCE.md). Cases run in parallel processes, one thread each.
set -euo pipefail
cd "$(dirname "$0")/.."
update=0
[ "${1:-}" = "--update" ] && update=1
kiln=${KILN_BIN:-$PWD/build/kiln}
data=${KILN_BACKEND_TESTS:-$PWD/../shared/onnx-backend-tests}
out=build/conformance
if [ ! -d "$data" ]; then
    echo "conformance: SKIPPED: ONNX backend test data not found at $data"
    exit 0
fi
mkdir -p "$out"
jobs=$(nproc)
failed=0
for suite in node simple pytorch-converted pytorch-operator; do
    list=tests/conformance/passing_${suite//-/_}.txt
    rc=0
    "$kiln" verify --quiet --json "$out/$suite.json" -j "$jobs" --threads 1 "$data/$suite" >"$out/$suite.log" || rc=$?
    if [ "$rc" -gt 1 ]; then
        echo "conformance: kiln verify exited with $rc on $suite:"
        tail -20 "$out/$suite.log"
        failed=1
        continue
    fi
    # Reworded from verify's closing line ("N passed, N failed, N skipped") so that CI's
    # log reader does not take a known, listed failure for a failing test run.
    read -r np nf ns < <(tail -1 "$out/$suite.log" | sed -E 's/([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped/\1 \2 \3/')
    printf '%-18s %s of %s cases pass (%s fail, %s skipped; not in the passing list)\n' "$suite" "$np" \
        "$((np + nf + ns))" "$nf" "$ns"
    python3 - "$out/$suite.json" "$list" "$update" <<'PY' || failed=1
import json, sys
from pathlib import Path
report, listfile, update = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1"
cases = json.load(open(report))["cases"]
passing = sorted(c["name"] for c in cases if c["status"] == "pass")
status = {c["name"]: c for c in cases}
if update:
    listfile.write_text("".join(n + "\n" for n in passing))
    print(f"  updated {listfile} ({len(passing)} cases)")
    sys.exit(0)
expected = [l.strip() for l in listfile.read_text().splitlines() if l.strip() and not l.startswith("#")] \
    if listfile.exists() else []
regressed = [n for n in expected if status.get(n, {}).get("status") != "pass"]
new = sorted(set(passing) - set(expected))
for n in regressed:
    c = status.get(n)
    why = f'{c["status"].upper()}: {c["reason"]}' if c else "case not found"
    print(f"  REGRESSION {n}: {why}")
if new:
    print(f"  {len(new)} newly passing (run scripts/conformance.sh --update): {' '.join(new[:20])}"
          + (" ..." if len(new) > 20 else ""))
sys.exit(1 if regressed else 0)
PY
done
if [ "$failed" -ne 0 ]; then
    echo "conformance: FAILED (cases in tests/conformance/passing_*.txt no longer pass)"
    exit 1
fi
echo "conformance: ok"
