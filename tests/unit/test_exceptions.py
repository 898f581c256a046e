"""The error types the engine records in ``Job.errors`` name classes users can import."""

import importlib

import pytest

from django_workqueue.exceptions import WorkqueueError
from django_workqueue.operations.workflows import FAILED_EXTERNALLY
from django_workqueue.workflow.release import UNMET_TYPE


@pytest.mark.parametrize("dotted", [UNMET_TYPE, FAILED_EXTERNALLY])
def test_recorded_error_types_are_importable_exception_classes(dotted: str) -> None:
    module, _, name = dotted.rpartition(".")
    assert module == "django_workqueue.exceptions"
    assert issubclass(getattr(importlib.import_module(module), name), WorkqueueError)
