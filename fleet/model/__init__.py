"""What crosses boundaries, model by model (docs/layout.md); fleet/document.py holds
the agent document and refers to these."""
