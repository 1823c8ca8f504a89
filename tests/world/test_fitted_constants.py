"""The fitted-constants log tells the truth about the code: each entry's value is the default the policy runs
with, and each was fitted on the train side only (TRAIN_SEEDS, SELECTION_SEEDS; figures are reported on
TEST_SEEDS)."""

from __future__ import annotations

import dataclasses

import pytest

from services.decider.policy import PolicyConfig
from sim.world.families import FAMILIES, SELECTION_SEEDS, TEST_SEEDS, TRAIN_SEEDS
from sim.world.fitted import FITTED_CONSTANTS, FittedConstant

DEFAULTS = PolicyConfig()


def _default_of(name: str) -> object:
    owner, _, field = name.partition(".")
    assert owner == "PolicyConfig", f"{name}: only PolicyConfig fields are listed so far; teach this test the owner"
    assert field in {f.name for f in dataclasses.fields(PolicyConfig)}, f"{name}: no such PolicyConfig field"
    return getattr(DEFAULTS, field)


@pytest.mark.parametrize("constant", FITTED_CONSTANTS, ids=lambda c: c.name)
def test_the_logged_value_is_the_default_the_policy_runs_with(constant: FittedConstant) -> None:
    assert _default_of(constant.name) == constant.value


@pytest.mark.parametrize("constant", FITTED_CONSTANTS, ids=lambda c: c.name)
def test_each_constant_was_fitted_on_train_seeds_of_known_families(constant: FittedConstant) -> None:
    assert constant.seeds, f"{constant.name}: name the seeds it was measured on"
    train_side = set(TRAIN_SEEDS) | set(SELECTION_SEEDS)
    assert set(constant.seeds) <= train_side, f"{constant.name}: fitted on seeds outside the train side"
    assert not set(constant.seeds) & set(TEST_SEEDS)
    assert set(constant.families) <= set(FAMILIES), f"{constant.name}: unknown families {constant.families}"
