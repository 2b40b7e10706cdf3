"""Random attention configurations shared by the core tests (not a test module itself)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

#: relative error ‖out − ref‖ / ‖ref‖ allowed against torch's SDPA (issue 2 acceptance)
TOL = {torch.float64: 1e-9, torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (absolute error when ref is all zeros)."""
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


@dataclass
class Case:
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    kwargs: dict = field(default_factory=dict)
    block_size: int | tuple[int, int] = 8
    label: str = ""


def _mask_shape(rng: random.Random, target: list[int]) -> list[int]:
    """Broadcast-compatible variant of ``target``: some dims 1, maybe fewer leading dims."""
    shape = [d if rng.random() < 0.6 else 1 for d in target]
    drop = rng.randint(0, len(target) - 2)
    return shape[drop:]


def random_case(seed: int, dtypes=(torch.float64, torch.float32, torch.bfloat16),
                device: str = "cpu") -> Case:
    """A random SDPA configuration: broadcast batch/heads, L ≠ S, odd sizes, masks, GQA, scale."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice(dtypes)
    nbatch = rng.choice([0, 1, 2, 2])
    batch = [rng.randint(1, 3) for _ in range(nbatch)]
    L, S, E, Ev = rng.randint(1, 33), rng.randint(1, 33), rng.randint(1, 12), rng.randint(1, 12)
    gqa = nbatch >= 1 and rng.random() < 0.2
    if gqa:
        hkv = rng.randint(1, 2)
        batch[-1] = hkv * rng.randint(1, 3)
        kbatch = vbatch = [*batch[:-1], hkv]
        scores_batch = batch
    else:
        kbatch = [b if rng.random() < 0.7 else 1 for b in batch]
        vbatch = [b if rng.random() < 0.7 else 1 for b in kbatch]
        scores_batch = [max(a, b, c) for a, b, c in zip(batch, kbatch, vbatch, strict=True)]

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).to(device)

    q, k, v = randn(*batch, L, E), randn(*kbatch, S, E), randn(*kbatch, S, Ev)
    if not gqa:
        v = randn(*vbatch, S, Ev)
    kwargs: dict = {"enable_gqa": True} if gqa else {}
    if rng.random() < 0.4:
        kwargs["scale"] = rng.uniform(0.05, 2.0)
    kind = rng.choice(["none", "bool", "float", "causal"])
    if kind == "causal":
        kwargs["is_causal"] = True
    elif kind != "none":
        shape = _mask_shape(rng, [*scores_batch, L, S])
        if kind == "bool":
            mask = torch.rand(shape, generator=gen) < 0.7
            if rng.random() < 0.4 and shape[-2] > 1:
                mask[..., rng.randrange(shape[-2]), :] = False        # a fully masked row
        else:
            mask = 2 * torch.randn(shape, generator=gen, dtype=torch.float64)
            if rng.random() < 0.4:
                mask[torch.rand(shape, generator=gen) < 0.3] = float("-inf")
            if rng.random() < 0.4 and shape[-2] > 1:
                mask[..., rng.randrange(shape[-2]), :] = float("-inf")  # a fully masked row
            mask = mask.to(dtype)
        kwargs["attn_mask"] = mask.to(device)
    block = rng.choice([rng.randint(1, 9), (rng.randint(1, 9), rng.randint(1, 17)), 16, 512])
    label = (f"seed={seed} {dtype} q{tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)} "
             f"{kind} gqa={gqa} block={block}")
    return Case(q, k, v, kwargs, block, label)
