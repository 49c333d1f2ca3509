"""What crosses boundaries, model by model (DESIGN.md, "Layout"); fleet/document.py holds
the agent document and refers to these."""
