"""Steps between nodes judged: each pair against its fabric, the slow node, their trend."""
