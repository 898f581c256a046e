"""The test project with a short autoscaling idle time: an idle worker shrinks after 1 s."""

from testproject.settings import *  # noqa: F403

WORKQUEUE = {**WORKQUEUE, "AUTOSCALE_IDLE_SECONDS": 1.0}  # noqa: F405
