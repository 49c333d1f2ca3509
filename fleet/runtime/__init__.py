"""fleet's pinned runtime on each host: one torch, installed once, seen and removed by the
user (`fleet runtime show|remove`)."""
