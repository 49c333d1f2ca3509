"""The cards' health, verdicts of older rules judged again, and what a run could not measure."""
