"""Ring attention (course_lib.attention.distributed) on 2 and 4 CPU processes (gloo): outputs and
gradients against single-process attention, the zigzag's balance of causal work, clear errors,
and the peer, torch's context_parallel, where it runs.

Each world size starts one group of processes that runs every check (tests/distributed_cases.py)
and returns plain tensors; the tests below compare in this process. Bounded waits and cleanup are
the launcher's (course_lib/chapters/ch13_across_devices/launch.py, tested at the end).
"""

from __future__ import annotations

import distributed_cases as dc
import pytest
import torch

from course_lib.attention import distributed as cp
from course_lib.chapters.ch13_across_devices import launch

WORLDS = (2, 4)
#: max |ring − single process|, outputs and gradients, per dtype (inputs rounded alike)
TOL = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 6e-2}


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("index", range(len(dc.RING_CONFIGS)),
                         ids=[c[0] for c in dc.RING_CONFIGS])
def test_ring_equals_one_process(world, index):
    layout, dtype = dc.RING_CONFIGS[index][1], dc.RING_CONFIGS[index][3]
    ranks = [r["ring"][index] for r in dc.results(world)]
    want = dc.expected("ring", index, world)
    out = cp.unshard_sequence([r["out"] for r in ranks], layout)
    assert out.dtype == dtype and out.shape == want["out"].shape
    assert (out.double() - want["out"]).abs().max().item() <= TOL[dtype]
    for i, name in enumerate("qkv"):
        grad = cp.unshard_sequence([r["grads"][i] for r in ranks], layout)
        assert grad.dtype == dtype, name
        err = (grad.double() - want["grads"][i]).abs().max().item()
        assert err <= TOL[dtype] * (1 + want["grads"][i].abs().max().item()), (name, err)


def test_low_precision_is_not_computed_in_low_precision():
    # bf16 inputs are accumulated in float32: the error is that of rounding the output once
    ranks = [r["ring"][6] for r in dc.results(2)]
    want = dc.expected("ring", 6, 2)["out"]
    out = cp.unshard_sequence([r["out"] for r in ranks], "zigzag").double()
    assert (out - want).abs().max().item() <= 2 ** -8 * want.abs().max().item() * 1.01


@pytest.mark.parametrize("world", WORLDS)
def test_zigzag_balances_measured_causal_flops(world):
    work = [r["work"] for r in dc.results(world)]
    contiguous = [w["contiguous"] for w in work]
    zigzag = [w["zigzag"] for w in work]
    # shards of 4 positions, E = Ev = 2: one chunk pair costs 2·c·c·(E + Ev) FLOPs
    block = 2 * 4 * 4 * 4
    assert contiguous == [(r + 1) * block for r in range(world)]      # rank r: r + 1 blocks
    half = block // 4                                                  # zigzag chunks: c / 2
    assert zigzag == [(2 * world + 1) * half] * world                  # 2W + 1 pairs each
    assert sum(zigzag) < sum(contiguous)   # and less in all: half-size diagonals waste less
    assert max(contiguous) - min(contiguous) == (world - 1) * block   # imbalance: W - 1 blocks


@pytest.mark.parametrize("world", (1, 2, 3, 4, 8))
def test_schedule_counts_match_useful_scores(world):
    """Independent of the schedule: count the (query, key) pairs with key <= query that each
    rank's positions need. Zigzag gives every rank exactly the same; contiguous rank r needs
    2r + 1 times rank 0's."""
    L = 4 * world
    pos = torch.arange(L)
    for layout, equal in (("zigzag", True), ("contiguous", False)):
        need = [int((cp.shard_sequence(pos[:, None], r, world, layout)[:, 0] + 1).sum())
                for r in range(world)]
        assert (len(set(need)) == 1) == (equal or world == 1)
        sched = cp.ring_schedule(world, is_causal=True, layout=layout)
        c = L // (world * cp.chunks_per_rank(layout))
        for r in range(world):
            pairs = [p for step in sched for p in step[r].pairs]
            full = sum(p.kind == "full" for p in pairs)
            diag = sum(p.kind == "diagonal" for p in pairs)
            assert full * c * c + diag * c * (c + 1) // 2 == need[r]
            assert {step[r].source for step in sched} == set(range(world))


def test_schedule_holds_each_block_once_per_step():
    for world in (2, 3, 4):
        for step in cp.ring_schedule(world):
            assert sorted(s.source for s in step) == list(range(world))
            assert all(s.source == (s.rank - s.step) % world for s in step)


@pytest.mark.parametrize("world", WORLDS)
def test_bad_calls_raise_the_same_error_on_every_rank(world):
    errors = [r["errors"] for r in dc.results(world)]
    expect = {
        "zigzag odd shard": ("ValueError", "must be even"),
        "ulysses heads": ("ValueError", f"not divisible by the group size W = {world}"),
        "mismatched ranks": ("ValueError", "every rank must pass the same shapes"),
        "one rank's dtype": ("ValueError", f"rank {world - 1}: "),   # SDPA's own message
        "causal lengths": ("ValueError", "same length"),
        "bad layout": ("ValueError", "layout must be one of"),
        "ulysses attend": ("ValueError", "attend must be one of"),
    }
    for name, (kind, text) in expect.items():
        got = [e[name] for e in errors]
        assert all(g is not None for g in got), name
        assert all(g == got[0] for g in got), name       # the same error everywhere
        assert got[0][0] == kind and text in got[0][1], (name, got[0])
    dtype = errors[0]["one rank's dtype"][1]
    assert "torch.int64" in dtype and f"rank {world - 1}: " in dtype and "rank 0" not in dtype


def test_errors_without_a_process_group():
    import torch.distributed as dist
    assert not dist.is_initialized()
    x = torch.zeros(1, 4, 2)
    with pytest.raises(RuntimeError, match="init_process_group"):
        cp.ring_attention(x, x, x)
    with pytest.raises(ValueError, match="not divisible by 4 chunks"):
        cp.shard_sequence(torch.zeros(6, 2), 0, 2, "zigzag")
    with pytest.raises(ValueError, match="rank must be in"):
        cp.chunk_ids(2, 2)


def test_shard_and_unshard_are_inverse():
    x = torch.arange(24.0).reshape(1, 24, 1)
    for world in (1, 2, 3):
        for layout in cp.LAYOUTS:
            shards = [cp.shard_sequence(x, r, world, layout) for r in range(world)]
            assert torch.equal(cp.unshard_sequence(shards, layout), x)
    zig = [cp.shard_sequence(x, r, 2, "zigzag")[0, :, 0].tolist() for r in range(2)]
    assert zig == [[0, 1, 2, 3, 4, 5, 18, 19, 20, 21, 22, 23],
                   [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]]


def test_peer_context_parallel():
    ranks = dc.peer_results()
    if not ranks[0]["ran"]:
        pytest.skip(f"torch's context_parallel does not run on this CPU mesh: {ranks[0]['error']}")
    ours, theirs = ranks[0]["ours"], ranks[0]["theirs"]
    assert (ours - theirs).abs().max().item() <= 1e-12


# --------------------------------------------------------------------------- the launcher


def _raise_on_rank_one(rank, world):
    if rank == 1:
        raise KeyError("deliberate")
    torch.distributed.barrier()      # rank 0 waits for a rank that never comes


def _sleep(rank, world):
    import time
    time.sleep(60)


def test_launcher_reports_a_rank_failure_and_leaves_no_process():
    import multiprocessing
    before = set(p.pid for p in multiprocessing.active_children())
    with pytest.raises(launch.RankFailed, match="(?s)rank 1 of 2 raised.*KeyError: 'deliberate'"):
        launch.run_ranks(_raise_on_rank_one, 2, timeout=30)
    left = [p for p in multiprocessing.active_children()
            if p.pid not in before and p.name != "ForkServerProcess"]
    assert left == []


def test_launcher_times_out_and_leaves_no_process():
    import multiprocessing
    before = set(p.pid for p in multiprocessing.active_children())
    with pytest.raises(TimeoutError, match="2 of 2 ranks did not finish within 2 s"):
        launch.run_ranks(_sleep, 2, timeout=2)
    assert [p for p in multiprocessing.active_children() if p.pid not in before] == []
