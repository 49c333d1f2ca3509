"""The soaked matmul judged: provider gaps, stragglers, cooling, cost, wrong products."""
