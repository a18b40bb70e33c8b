#!/usr/bin/env bash
# hack/e2e-times.sh REPORT.json: how long each container of an e2e run took,
# from the JSON report ginkgo writes, e.g.
#
#   make e2e E2E_ARGS='--json-report=/tmp/e2e.json' && hack/e2e-times.sh /tmp/e2e.json
#
# A container's time runs from its first spec's start (its BeforeAll
# included) to its last spec's end (its cleanup included); nested containers
# count apart from the one they are in; a container a --focus left out
# says "not run". The last line is the suite's own
# run time. README's e2e figures are this script's output.
#
#   hack/e2e-times.sh -s REPORT.json: each spec's time instead, in the order
#   they ran (a container's BeforeAll counts in its first spec).
set -euo pipefail
specs=0
if [[ ${1:-} == -s ]]; then specs=1; shift; fi
[[ $# == 1 && -f $1 ]] || { echo "usage: hack/e2e-times.sh [-s] REPORT.json (ginkgo's --json-report)" >&2; exit 2; }
if ((specs)); then
	jq -r '
	  def secs: capture("^(?<s>[^.Z+]+)(?<f>\\.[0-9]+)?") | (.s + "Z" | fromdateiso8601) + ((.f // "0") | tonumber);
	  [.[0].SpecReports[] | select(.LeafNodeType == "It")
	   | {c: ((.ContainerHierarchyTexts // []) | join(" / ")), t: .LeafNodeText, start: (.StartTime | secs), end: (.EndTime | secs), state: .State}
	   | select(.end > 0)]
	  | sort_by(.start)
	  | .[] | "\((.end - .start) * 10 | round / 10 | tostring | (" " * (6 - length)) + .) s  \(.state)  \(.c) :: \(.t)"
	' "$1"
	exit
fi
jq -r '
  # RFC 3339 with nanoseconds, to seconds since the epoch
  def secs: capture("^(?<s>[^.Z+]+)(?<f>\\.[0-9]+)?") | (.s + "Z" | fromdateiso8601) + ((.f // "0") | tonumber);
  .[0] as $r
  | [$r.SpecReports[] | select(.LeafNodeType == "It")
     | {c: ((.ContainerHierarchyTexts // []) | join(" / ")), start: (.StartTime | secs), end: (.EndTime | secs), state: .State}]
  | group_by(.c)
  # a spec a --focus left out has no end time (year 1): its container did not run
  | map({c: .[0].c, ran: map(select(.end > 0)), n: length,
         passed: (map(select(.state == "passed")) | length)})
  | map(. + if (.ran | length) > 0 then {start: (.ran | map(.start) | min), end: (.ran | map(.end) | max)} else {start: null} end)
  | sort_by(.start // infinite)
  | (.[] | if .start == null then "    - s  not run  \(.c)"
           else "\(.end - .start | round | tostring | (" " * (5 - length)) + .) s  \(.passed)/\(.n) passed  \(.c)" end),
    "suite: \($r.RunTime / 1e9 | round) s"
' "$1"
