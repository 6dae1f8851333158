"""Differential fuzzing: random tensor programs (``fuzzgen.py``) compiled by
rdyn and compared with eager: values (against a float64 reference where
tolerances are tight), dtypes, sizes, stride order, storage sharing, and
gradients for the training cases.

A fixed range of seeds runs in CI. Other ranges, for longer hunts::

    RDYN_FUZZ_SEED=10000 RDYN_FUZZ_COUNT=2000 tools/test.sh tests/test_fuzz.py

A failure prints the program and its inputs; ``fuzzgen.generate(seed)``
rebuilds it.
"""

from __future__ import annotations

import os

import pytest

import fuzzgen

SEED = int(os.environ.get("RDYN_FUZZ_SEED", "0"))
COUNT = int(os.environ.get("RDYN_FUZZ_COUNT", "150"))


@pytest.mark.parametrize("seed", range(SEED, SEED + COUNT))
def test_random_program_matches_eager(seed: int) -> None:
    fuzzgen.check(fuzzgen.generate(seed))
