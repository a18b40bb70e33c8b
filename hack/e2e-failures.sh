#!/usr/bin/env bash
# hack/e2e-failures.sh REPORT.json: each failed spec of an e2e run — where it
# failed, its failure message (meshctl's standard error, for a failed
# command) and the end of what it wrote — from the JSON report ginkgo writes.
#
# make e2e / make test print it when the suite fails, as the last thing in
# their output: Ginkgo's own summary names only each failure's place, and a
# CI log is often read from its end (the artifacts directory may be gone).
set -euo pipefail
[[ $# == 1 ]] || { echo "usage: hack/e2e-failures.sh REPORT.json (ginkgo's --json-report)" >&2; exit 2; }
if [[ ! -s $1 ]]; then
  echo "e2e failures: no report at $1 (the suite did not get to write one)" >&2
  exit 0
fi
jq -r '
  # at most n lines of s: the first ones (head) or the last ones
  def head(n): split("\n") | if length > n then .[:n] + ["… (\(length - n) more lines)"] else . end | join("\n");
  def tail(n): split("\n") | if length > n then ["… (\(length - n) lines before)"] + .[-n:] else . end | join("\n");
  def indent: split("\n") | map("    " + .) | join("\n");
  [.[].SpecReports[] | select(.State | IN("failed", "panicked", "timedout", "interrupted", "aborted"))] as $failed
  | if ($failed | length) == 0 then "e2e failures: none in the report"
    else
      "==================== e2e failures: \($failed | length) ====================",
      ($failed[] |
        "--- [\(.State)] \(((.ContainerHierarchyTexts // []) + [.LeafNodeText]) | map(select(. != "")) | join(" / "))",
        "  at \(.Failure.Location.FileName):\(.Failure.Location.LineNumber) (in \(.Failure.FailureNodeType))",
        "  message:",
        ((.Failure.Message // "") | head(80) | indent),
        (if (.Failure.ForwardedPanic // "") != "" then "  panic: \(.Failure.ForwardedPanic)" else empty end),
        (if (.CapturedGinkgoWriterOutput // "") != "" then "  its output, last lines:", (.CapturedGinkgoWriterOutput | rtrimstr("\n") | tail(40) | indent) else empty end))
    end
' "$1"
