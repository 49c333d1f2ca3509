"""The job suite judged: training and decode tokens/s, their comparisons, cost and whose."""
