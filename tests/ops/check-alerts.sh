#!/bin/sh
# tests/ops: contrib/prometheus/gpusysd-alerts.yml is valid Prometheus rules,
# as Prometheus itself reads them (`promtool check rules`: YAML, PromQL,
# templates). promtool comes with Debian's prometheus package; without it
# the test is skipped (77) and says so.
# check-alerts.sh RULES
rules=$1
if ! command -v promtool >/dev/null 2>&1; then
	echo "SKIP: promtool not found (apt-get install prometheus; the service need not run)" >&2
	exit 77
fi
promtool check rules "$rules"
