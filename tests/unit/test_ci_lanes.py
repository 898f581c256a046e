"""`.ci/run` runs tox's env_list in two lanes by label: every environment must be in exactly one
lane, or CI would silently skip it (or run it twice)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _names(value: str) -> list[str]:
    return [name.strip() for name in value.replace(",", "\n").splitlines() if name.strip()]


def _expand(name: str) -> list[str]:
    """Expand tox's generative names: ``py311-django52-{sqlite,postgres}``."""
    if "{" not in name:
        return [name]
    head, rest = name.split("{", 1)
    choices, tail = rest.split("}", 1)
    return [
        expanded
        for choice in choices.split(",")
        for expanded in _expand(head + choice.strip() + tail)
    ]


def test_every_environment_of_env_list_runs_in_exactly_one_ci_lane() -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    env_list = [env for name in config["tox"]["env_list"].split() for env in _expand(name)]
    lanes = {}
    for line in config["tox"]["labels"].strip().splitlines():
        label, _, envs = line.partition("=")
        lanes[label.strip()] = _names(envs)
    in_lanes = [env for envs in lanes.values() for env in envs]
    assert sorted(in_lanes) == sorted(env_list), (lanes, env_list)
    assert set(lanes) == {"postgres", "sqlite"}
    run = (ROOT / ".ci" / "run").read_text()
    for label in lanes:
        assert f"-m {label}" in run
