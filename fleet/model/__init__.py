"""What crosses boundaries, model by model (docs/layout.md): the agent document
(document.py, `fleet-agent/1`) and the shapes it shares with the suites' own models
(base.py; matmul.py, job.py, network.py, settings.py; cluster.py for a step between
nodes, step.py for what one step measured as the controller holds it)."""
