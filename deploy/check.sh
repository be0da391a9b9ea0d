#!/usr/bin/env bash
# Offline checks of everything in deploy/: the kustomize base and overlay render, every
# rendered object passes `kubernetes-validate --strict` with no warning, the alert rules
# pass `promtool check rules` and their unit tests, the dashboard is valid JSON with a
# stable uid, and the Prometheus Operator overlay renders its ServiceMonitor.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in kubernetes/base kubernetes/overlays/example kubernetes/overlays/cloudnativepg; do
  kubectl kustomize "$k" >"$tmp/rendered.yaml"
  out=$(kubernetes-validate --strict "$tmp/rendered.yaml" 2>&1) || { echo "$out"; echo "deploy: $k is not valid" >&2; exit 1; }
  if echo "$out" | grep -Eq '^(WARN|ERROR)'; then echo "$out"; echo "deploy: $k: warnings count as failures" >&2; exit 1; fi
  echo "deploy: $k: $(echo "$out" | grep -c passed) objects valid"
done
# The ServiceMonitor's CRD has no schema offline: that overlay is rendered, not validated.
kubectl kustomize kubernetes/overlays/prometheus-operator | grep -q '^kind: ServiceMonitor' \
  || { echo "deploy: the prometheus-operator overlay does not render a ServiceMonitor" >&2; exit 1; }
promtool check rules prometheus/rules.yml
(cd prometheus && promtool test rules rules_test.yml)
python3 -c 'import json; d=json.load(open("grafana/drcheck.json")); assert d["uid"] == "drcheck-overview" and d["templating"]["list"][0]["type"] == "datasource"; print("deploy: dashboard", d["uid"], len(d["panels"]), "panels")'
echo "deploy: all checks passed"
