"""The probe: ship the agent to every inventory host at once (bounded fan-out), validate what
each sends, store it. `run` drives the hosts; `local` runs the agent on this machine."""
