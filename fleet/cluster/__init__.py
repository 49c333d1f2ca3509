"""Between nodes: which hosts form a cluster, the order their pairs are tested in, and the
rendezvous their ranks meet at (docs/cluster.md)."""
