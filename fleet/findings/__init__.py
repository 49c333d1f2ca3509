"""Findings, one layer under the report, the sweep and the metrics: what a finding is
(finding.py), the kinds there are (kinds.py, the registry), and how they are counted
(count.py), so that the report, `--fail-on`, the sweep's news and `fleet metrics` read one
list and one vocabulary (docs/findings.md, "Adding a finding")."""
