"""What the peers need to run: their apps, tasks, settings and worker entry points."""
