"""The node suite judged: memory, host links, GPU pairs, all-reduce, network, and whose a
short figure is."""
