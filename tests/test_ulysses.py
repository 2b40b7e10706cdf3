"""Ulysses (all-to-all) sequence parallelism on 2 and 4 CPU processes: outputs and gradients
equal single-process attention; the all-to-all re-shards and its gradient is the reverse one.
The processes are the ring tests' group (tests/distributed_cases.py), started once per world."""

from __future__ import annotations

import distributed_cases as dc
import pytest
import torch

from course_lib.attention import distributed as cp

TOL = {torch.float64: 1e-12, torch.bfloat16: 6e-2}


@pytest.mark.parametrize("world", (2, 4))
@pytest.mark.parametrize("index", range(len(dc.ULYSSES_CONFIGS)),
                         ids=[c[0] for c in dc.ULYSSES_CONFIGS])
def test_ulysses_equals_one_process(world, index):
    dtype = dc.ULYSSES_CONFIGS[index][2]
    ranks = [r["ulysses"][index] for r in dc.results(world)]
    want = dc.expected("ulysses", index, world)
    out = cp.unshard_sequence([r["out"] for r in ranks])
    assert out.dtype == dtype and out.shape == want["out"].shape
    assert (out.double() - want["out"]).abs().max().item() <= TOL[dtype]
    for i, name in enumerate("qkv"):
        grad = cp.unshard_sequence([r["grads"][i] for r in ranks])
        err = (grad.double() - want["grads"][i]).abs().max().item()
        assert err <= TOL[dtype] * (1 + want["grads"][i].abs().max().item()), (name, err)
