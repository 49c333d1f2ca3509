"""From stored documents to findings: mismatches, drift, provider gaps, stragglers, cost."""
