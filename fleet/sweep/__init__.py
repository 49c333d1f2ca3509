"""The nightly sweep: a named probe run compared with its own past. `run` drives a night,
`nights` reads the past nights from the store, `history` compares them; `distributed`
(Celery), `schedule` (cron, systemd) and `lock` make it run unwatched."""
