"""The API's views, one module per resource family: jobs, workflows, and the fleet (queues,
schedules, workers, stats)."""
