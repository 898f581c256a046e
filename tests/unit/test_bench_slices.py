"""The long drain's pure helpers (bench/slices.py): rates per slice from sampled progress, and
the jobs table's growth over its steady-state size."""

import pytest

from bench.slices import growth, slice_rates


def test_rates_from_the_samples_that_bracket_each_slice():
    samples = [(0.0, 0), (1.0, 0), (2.0, 60), (3.0, 100), (4.0, 150), (5.0, 200)]
    # The clock starts at the last sample with nothing done (1.0); slice 1 ends at 3.0 (100),
    # slice 2 at 5.0 (200).
    assert slice_rates(samples, 100) == [pytest.approx(50.0), pytest.approx(50.0)]


def test_a_sample_past_a_boundary_counts_its_own_completions():
    samples = [(0.0, 0), (1.0, 130), (2.0, 200)]
    # Slice 1 reaches 130 at 1.0 (130 jobs/s, not 100); slice 2 has the 70 left, over 1 s.
    assert slice_rates(samples, 100) == [pytest.approx(130.0), pytest.approx(70.0)]


def test_a_sample_past_several_boundaries_ends_one_slice():
    samples = [(0.0, 0), (1.0, 250), (2.0, 300)]
    assert slice_rates(samples, 100) == [pytest.approx(250.0), pytest.approx(50.0)]


def test_a_last_partial_slice_is_left_out():
    assert slice_rates([(0.0, 0), (1.0, 100), (2.0, 150)], 100) == [pytest.approx(100.0)]


def test_work_done_before_the_first_sample_starts_the_clock_there():
    assert slice_rates([(10.0, 5), (11.0, 105)], 100) == [pytest.approx(100.0)]


@pytest.mark.parametrize("samples, size", [([], 100), ([(0.0, 0), (1.0, 10)], 0)])
def test_nothing_to_slice(samples, size):
    assert slice_rates(samples, size) == []


def test_growth_over_the_first_halfs_largest_size():
    sizes = [(0, 10), (200, 80), (500, 100), (600, 90), (900, 110), (1000, 105)]
    assert growth(sizes, 1000, 95) == {
        "steady": 100.0,
        "later_ratio": pytest.approx(1.1),
        "end_ratio": pytest.approx(0.95),
    }


def test_growth_without_a_second_half_compares_the_end_alone():
    assert growth([(10, 50)], 1000, 75) == {
        "steady": 50.0,
        "later_ratio": 1.0,
        "end_ratio": pytest.approx(1.5),
    }
