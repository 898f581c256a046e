"""Compositions compile to a graph: prerequisites, value shapes, validation (no database)."""

from __future__ import annotations

import pytest

from django_workqueue import chain, group
from django_workqueue.exceptions import InvalidArguments, InvalidOption
from django_workqueue.workflow.graph import Graph
from testproject.testapp.tasks import add, double, echo, total


def compiled(step):
    graph = Graph()
    sinks, value = graph.add(step, [], None, "workflow")
    return graph.nodes, sinks, value


def test_a_chain_step_waits_for_the_previous_one_and_receives_its_result():
    nodes, sinks, value = compiled(chain(add.s(1, 2), double.s(), double.s()))
    assert [n.prerequisites for n in nodes] == [[], [0], [1]]
    assert [n.input_shape for n in nodes] == [None, 0, 0]
    assert [n.template.waiting_on for n in nodes] == [0, 1, 1]
    assert (sinks, value) == ([2], 2)


def test_a_chord_callback_receives_the_group_results_in_declared_order():
    nodes, sinks, value = compiled(group(double.s(i) for i in range(3)).then(total.s()))
    assert nodes[3].prerequisites == [0, 1, 2]
    assert nodes[3].input_shape == [0, 1, 2]
    assert (sinks, value) == ([3], 3)


def test_nested_groups_give_nested_shapes_and_members_receive_the_previous_value():
    step = chain(echo.s(1), group(double.s(), chain(double.s(), group(double.s(), double.s()))),
                 total.s())  # fmt: skip
    nodes, _, value = compiled(step)
    # Members of the group after echo each receive echo's value.
    assert [nodes[i].input_shape for i in (1, 2)] == [0, 0]
    # The last step waits for the group's last nodes and receives [x, [y, z]].
    assert nodes[-1].prerequisites == [1, 3, 4]
    assert nodes[-1].input_shape == [0, [1, 2]]
    assert value == len(nodes) - 1


def test_an_empty_group_has_the_empty_list_as_its_value():
    nodes, sinks, value = compiled(group().then(total.s()))
    assert nodes[0].prerequisites == [] and nodes[0].input_shape == []
    assert (sinks, value) == ([0], 0)


def test_a_step_whose_arguments_do_not_fit_is_refused_naming_the_step():
    with pytest.raises(InvalidArguments) as raised:
        compiled(chain(echo.s(1), add.s(1, 2)))  # add gets the previous result too: 3 args
    assert "add" in str(raised.value)


def test_steps_must_be_signatures_or_compositions():
    with pytest.raises(
        InvalidOption,
        match=r"chain\(\) step 1 is <Task .*echo>, not a signature, chain or group \(call task\.s",
    ):
        chain(echo.s(), echo)
    with pytest.raises(InvalidOption, match="at least one step"):
        chain()


def test_run_if_must_be_a_known_condition():
    with pytest.raises(InvalidOption, match="run_if must be one of 'all_succeeded'"):
        compiled(chain(echo.s(), echo.using(run_if="most").s()))


def test_unique_keys_are_refused_in_workflows():
    with pytest.raises(
        InvalidOption, match=r"unique jobs \(unique_key, unique_on, unique_for\) are not supported"
    ):
        compiled(group(echo.using(unique_key="k").s()))
