"""The flow control options of ``@task``: what is accepted, what is refused and why, and the
flow key each job gets."""

from __future__ import annotations

import pytest

from django_workqueue import registry, task
from django_workqueue.exceptions import InvalidOption
from django_workqueue.flow.keys import check_batch_item, flow_key
from django_workqueue.registry import Rate, parse_rate


@pytest.fixture(autouse=True)
def forget_tasks():
    before = set(registry._registry)
    yield
    for name in set(registry._registry) - before:
        del registry._registry[name]


@pytest.mark.parametrize(
    ("text", "rate"),
    [("10/s", Rate(10, 1)), ("100/m", Rate(100, 60)), ("5000/h", Rate(5000, 3600)),
     ("1/d", Rate(1, 86400)), ("3/10s", Rate(3, 10)), (" 2 / min ", Rate(2, 60))],
)  # fmt: skip
def test_rates_are_read_from_their_short_forms(text, rate):
    assert parse_rate("task t", text) == rate


@pytest.mark.parametrize("text", ["10", "10/y", "0/s", "ten/s", "/s", 10, "10/0s", "3/.s"])
def test_a_rate_not_understood_is_refused_with_the_forms_accepted(text):
    with pytest.raises(InvalidOption, match=r"task t: rate"):
        parse_rate("task t", text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number of at least 1"),
        ({"concurrency": True}, "concurrency must be a whole number"),
        ({"limit_key": lambda **kw: "k"}, "limit_key needs concurrency= or rate="),
        ({"concurrency": 1, "limit_key": "customer"}, "limit_key must be a function"),
        ({"fair_key": lambda **kw: "t", "rate": "1/s"}, "fair_key cannot be combined"),
        ({"batch_size": 0}, "batch_size must be a whole number"),
        ({"batch_size": 5, "batch_wait": -1}, "batch_wait must be a number"),
        ({"batch_size": 5, "batch_wait": float("inf")}, "batch_wait must be a number"),
        ({"batch_size": 5, "batch_wait": float("nan")}, "batch_wait must be a number"),
        ({"batch_size": 5, "concurrency": 2}, "batch_size cannot be combined"),
    ],
)
def test_flow_options_that_cannot_work_are_refused_when_the_task_is_declared(options, message):
    def work(customer_id=0):
        return None

    with pytest.raises(InvalidOption, match=message):
        task(name="flow.refused", **options)(work)


def test_each_job_gets_the_flow_key_of_its_limit_fairness_or_batch():
    @task(name="flow.a", concurrency=1)
    def plain_limit(x):
        return x

    @task(name="flow.b", rate="1/s", limit_key=lambda customer_id, **kw: customer_id)
    def per_customer(customer_id, note=""):
        return note

    @task(name="flow.c", fair_key=lambda tenant, **kw: tenant.upper())
    def fair(tenant, row=None):
        return row

    @task(name="flow.d")
    def unlimited(x):
        return x

    assert flow_key(plain_limit.spec, [1], {}, "o") == "limit:flow.a"
    assert flow_key(per_customer.spec, [], {"customer_id": 42}, "o") == "limit:flow.b:42"
    assert flow_key(per_customer.spec, [42, "n"], {}, "o") == "limit:flow.b:42"
    assert flow_key(fair.spec, ["acme"], {}, "o") == "fair:ACME"
    assert flow_key(unlimited.spec, [1], {}, "o") is None


def test_a_key_function_that_fails_or_returns_no_string_is_reported_with_its_task():
    @task(name="flow.e", concurrency=1, limit_key=lambda customer_id: customer_id["id"])
    def broken(customer_id):
        return None

    @task(name="flow.f", concurrency=1, limit_key=lambda customer_id: None)
    def empty(customer_id):
        return None

    with pytest.raises(InvalidOption, match=r"flow.e: limit_key raised TypeError"):
        flow_key(broken.spec, [7], {}, "flow.e")
    with pytest.raises(InvalidOption, match=r"limit_key returned None"):
        flow_key(empty.spec, [7], {}, "flow.f")


def test_a_long_key_is_shortened_to_a_stable_digest():
    @task(name="flow.g", fair_key=lambda tenant: tenant)
    def fair(tenant):
        return None

    long = flow_key(fair.spec, ["x" * 400], {}, "o")
    assert long is not None and len(long) <= 255
    assert long == flow_key(fair.spec, ["x" * 400], {}, "o")
    assert long != flow_key(fair.spec, ["x" * 399 + "y"], {}, "o")


def test_a_batch_tasks_job_is_one_positional_item():
    @task(name="flow.h", batch_size=10)
    def embed(items):
        return items

    class Call:
        args, kwargs = [1, 2], {}

    with pytest.raises(InvalidOption, match="one positional argument"):
        check_batch_item(embed.spec, Call, "flow.h")
