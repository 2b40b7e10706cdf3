r"""Chapter 11 (FlexAttention): the course's masks and biases as ``mask_mod`` / ``score_mod``.

FlexAttention (``torch.nn.attention.flex_attention``) computes

.. math:: O = \mathrm{softmax}\big(\mathrm{score\_mod}(QK^\top s)\ \text{where}\
          \mathrm{mask\_mod}\ \text{else}\ -\infty\big)\,V, \quad s = 1/\sqrt{E}

with two small functions of the *indices* of one score: ``mask_mod(b, h, q_idx, kv_idx) -> bool``
(True = may attend, as in the course's masks) and ``score_mod(score, b, h, q_idx, kv_idx) ->
score``. Each ``*_mod`` below builds one of the course's masks or biases; :data:`VARIANTS` pairs
it with the course's dense implementation (:mod:`course_lib.attention.masks`,
:mod:`course_lib.attention.positions`) so that both can be run and compared (tests and chapter).

Tiles: :func:`create_block_mask` (torch) evaluates the ``mask_mod`` once and records, per tile of
``BLOCK_SIZE`` queries × ``BLOCK_SIZE`` keys, whether it is *full* (every pair visible: no mask
needed inside), *partial* (the mask is applied inside) or *empty* (skipped, never computed).
:func:`tile_counts` reads those numbers; :func:`dense_tile_counts` recomputes them from a dense
mask, the tile map of chapter 8.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from course_lib.attention import masks, positions, reference
from course_lib.attention.softmax import safe_softmax

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                    torch.Tensor]



def eager_flex_without_dynamo() -> None:
    """Run eager ``flex_attention`` without its internal ``torch.compile(backend="eager")``
    wrapper: torch's own switch for debugging mods (named in its warning), exact in the forward
    pass. Without it, every new ``mask_mod``/``score_mod`` and shape is traced by TorchDynamo
    first (about a second each on a CPU), which makes a chapter and the exercise checks slow.
    ``torch.compile(flex_attention)`` is unaffected. Also silences the warning that eager flex
    materialises the scores (the chapter says so, and measures the compiled kernel)."""
    import torch.nn.attention.flex_attention as fa

    fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile",
                            category=UserWarning)


eager_flex_without_dynamo()


# --------------------------------------------------------------------------- mask_mods


def causal_mod(L: int, S: int, align: str = "top_left") -> MaskMod:
    """``kv_idx <= q_idx + d``: ``d = 0`` top-left, ``d = S - L`` bottom-right (as
    :func:`course_lib.attention.masks.causal_mask`)."""
    if align not in masks.ALIGNMENTS:
        raise ValueError(f"align must be one of {masks.ALIGNMENTS}, got {align!r}")
    d = 0 if align == "top_left" else S - L

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + d
    return causal


def sliding_window_mod(L: int, S: int, window: int, align: str = "top_left") -> MaskMod:
    """``pos(i) - window < kv_idx <= pos(i)``, ``pos(i) = q_idx + d`` (as
    :func:`course_lib.attention.masks.sliding_window_mask`)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    d = 0 if align == "top_left" else S - L

    def sliding_window(b, h, q_idx, kv_idx):
        pos = q_idx + d
        return (kv_idx <= pos) & (pos - kv_idx < window)
    return sliding_window


def padding_mod(tokens: torch.Tensor, pad_id: int = 0) -> MaskMod:
    """Key ``kv_idx`` of sequence ``b`` is visible if it is not padding; ``tokens (B, S)``."""
    real = tokens != pad_id                                   # (B, S), captured by the closure

    def padding(b, h, q_idx, kv_idx):
        return real[b, kv_idx]
    return padding


def document_mod(document_id: torch.Tensor) -> MaskMod:
    """Packed sequences: causal *within* a document, ``document_id (S,)`` the document of each
    token; a query never sees another document."""
    def document_causal(b, h, q_idx, kv_idx):
        return (document_id[q_idx] == document_id[kv_idx]) & (kv_idx <= q_idx)
    return document_causal


def prefix_lm_mod(prefix: torch.Tensor) -> MaskMod:
    """Prefix-LM: the first ``prefix[b]`` tokens see each other both ways, the rest is causal."""
    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix[b])
    return prefix_lm


def and_masks(*mods: MaskMod) -> MaskMod:
    """A key is visible only if every ``mask_mod`` allows it (``masks.combine_masks`` for mods)."""
    def combined(b, h, q_idx, kv_idx):
        out = mods[0](b, h, q_idx, kv_idx)
        for m in mods[1:]:
            out = out & m(b, h, q_idx, kv_idx)
        return out
    return combined


# --------------------------------------------------------------------------- score_mods


def alibi_mod(H: int, L: int, S: int) -> ScoreMod:
    r"""ALiBi: ``score + m_h (kv_idx - q_idx - (S - L))``, slopes from
    :func:`course_lib.attention.positions.alibi_slopes` (as :func:`positions.alibi_bias`)."""
    slopes = positions.alibi_slopes(H)
    d = S - L

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx - d)
    return alibi


def softcap_mod(cap: float) -> ScoreMod:
    r"""Gemma 2's tanh soft-capping: ``cap · tanh(score / cap)``, scores squashed into
    ``(-cap, cap)``, almost unchanged where ``|score| ≪ cap``."""
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap!r}")

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return softcap


# --------------------------------------------------------------------------- dense truth


def document_ids(lengths: torch.Tensor | list[int]) -> torch.Tensor:
    """``(S,)`` int64 document of every token, from the documents' lengths (``S = sum``)."""
    lengths = torch.as_tensor(lengths, dtype=torch.long)
    if lengths.dim() != 1 or lengths.numel() == 0 or bool((lengths < 1).any()):
        raise ValueError(f"lengths must be a 1-D tensor of positive lengths, got {lengths}")
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def document_mask(document_id: torch.Tensor) -> torch.Tensor:
    """``(S, S)`` bool dense truth: same document and causal (``masks.causal_mask``)."""
    S = document_id.shape[0]
    same = document_id[:, None] == document_id[None, :]
    return masks.combine_masks(same, masks.causal_mask(S))


def prefix_lm_mask(prefix: torch.Tensor, S: int) -> torch.Tensor:
    """``(B, 1, S, S)`` bool dense truth: causal, or the key is in the sequence's prefix."""
    in_prefix = torch.arange(S)[None, :] < prefix[:, None]            # (B, S)
    return masks.causal_mask(S)[None, None] | in_prefix[:, None, None, :]


def softcap_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cap: float,
                      attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Dense soft-capped attention ``softmax(cap·tanh(QKᵀs/cap) [masked]) V``, ``(…, L, Ev)``."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = cap * torch.tanh(scores / cap)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return safe_softmax(scores) @ v


# --------------------------------------------------------------------------- the variants


@dataclass(frozen=True)
class Problem:
    """One attention problem: ``B`` sequences, ``H`` heads, ``L`` queries, ``S`` keys, width
    ``E``, seeded."""

    B: int = 2
    H: int = 4
    L: int = 64
    S: int = 64
    E: int = 16
    seed: int = 0

    def qkv(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(self.seed)
        q = torch.randn(self.B, self.H, self.L, self.E, generator=g, dtype=dtype)
        k = torch.randn(self.B, self.H, self.S, self.E, generator=g, dtype=dtype)
        v = torch.randn(self.B, self.H, self.S, self.E, generator=g, dtype=dtype)
        return q, k, v

    def tokens(self) -> torch.Tensor:
        """``(B, S)`` ids, sequence ``b`` right-padded (id 0) after ``S/2 − 3 + 11·b`` tokens."""
        g = torch.Generator().manual_seed(self.seed + 1)
        t = torch.randint(1, 100, (self.B, self.S), generator=g)
        for b in range(self.B):
            t[b, min(self.S, max(1, self.S // 2 - 3 + 11 * b)):] = 0
        return t

    def document_id(self) -> torch.Tensor:
        """``(S,)`` documents of lengths 40 %, 35 %, 25 % of ``S`` (at least 1 each)."""
        a = max(1, round(0.4 * self.S))
        b = max(1, round(0.35 * self.S))
        return document_ids([a, b, self.S - a - b]) if self.S - a - b > 0 else \
            document_ids([self.S])

    def prefix(self) -> torch.Tensor:
        """``(B,)`` prefix lengths: a quarter, then half of ``S``."""
        return torch.tensor([max(1, self.S * (b + 1) // 4) for b in range(self.B)])


@dataclass(frozen=True)
class Variant:
    """A mask or bias twice: as flex mods, and as the course's dense ``attn_mask`` for SDPA."""

    name: str
    mask_mod: Callable[[Problem], MaskMod | None]
    score_mod: Callable[[Problem], ScoreMod | None]
    dense: Callable[[Problem, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    square: bool = True     # the variant needs L == S (documents, prefix-LM, padding)


WINDOW = 16
CAP = 5.0


def _sdpa(mask_fn: Callable[[Problem], torch.Tensor]):
    def dense(p: Problem, q, k, v):
        return reference.scaled_dot_product_attention(q, k, v, attn_mask=mask_fn(p))
    return dense


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("causal (top-left)", lambda p: causal_mod(p.L, p.S, "top_left"), lambda p: None,
            _sdpa(lambda p: masks.causal_mask(p.L, p.S, align="top_left")), square=False),
    Variant("causal (bottom-right)", lambda p: causal_mod(p.L, p.S, "bottom_right"),
            lambda p: None,
            _sdpa(lambda p: masks.causal_mask(p.L, p.S, align="bottom_right")), square=False),
    Variant("padding", lambda p: padding_mod(p.tokens()), lambda p: None,
            _sdpa(lambda p: masks.padding_mask(p.tokens()))),
    Variant(f"sliding window ({WINDOW})", lambda p: sliding_window_mod(p.L, p.S, WINDOW),
            lambda p: None, _sdpa(lambda p: masks.sliding_window_mask(p.L, p.S, WINDOW)),
            square=False),
    Variant("ALiBi (causal)", lambda p: causal_mod(p.L, p.S, "bottom_right"),
            lambda p: alibi_mod(p.H, p.L, p.S),
            _sdpa(lambda p: positions.alibi_bias(p.H, p.L, p.S, causal=True)), square=False),
    Variant("documents", lambda p: document_mod(p.document_id()), lambda p: None,
            _sdpa(lambda p: document_mask(p.document_id()))),
    Variant("prefix-LM", lambda p: prefix_lm_mod(p.prefix()), lambda p: None,
            _sdpa(lambda p: prefix_lm_mask(p.prefix(), p.S))),
    Variant(f"soft-cap ({CAP:g}, causal)", lambda p: causal_mod(p.L, p.S),
            lambda p: softcap_mod(CAP),
            lambda p, q, k, v: softcap_attention(q, k, v, CAP, masks.causal_mask(p.L, p.S)),
            square=False),
)}


def block_mask(mask_mod: MaskMod | None, p: Problem, block: int = 16) -> BlockMask | None:
    """``create_block_mask`` for problem ``p`` with square tiles of ``block`` (None: no mask).

    The mask is built per batch element only if it depends on ``b`` (padding, prefix-LM); it
    never depends on the head here, so ``H=None`` broadcasts it over heads.
    """
    if mask_mod is None:
        return None
    return create_block_mask(mask_mod, p.B, None, p.L, p.S, device="cpu", BLOCK_SIZE=block)


def run_flex(variant: Variant, p: Problem, q, k, v, block: int = 16) -> torch.Tensor:
    """The variant through eager ``flex_attention``: ``(B, H, L, E)``."""
    return flex_attention(q, k, v, score_mod=variant.score_mod(p),
                          block_mask=block_mask(variant.mask_mod(p), p, block))


def flex_vs_dense(p: Problem | None = None, dtype: torch.dtype = torch.float32
                  ) -> list[dict[str, object]]:
    """For every variant: ``max |flex − course dense|`` over the outputs of problem ``p``."""
    p = p or Problem()
    q, k, v = p.qkv(dtype)
    rows = []
    for var in VARIANTS.values():
        if var.square and p.L != p.S:
            continue
        flex = run_flex(var, p, q, k, v)
        dense = var.dense(p, q, k, v)
        rows.append({"variant": var.name, "max_abs_diff": float((flex - dense).abs().max())})
    return rows


# --------------------------------------------------------------------------- tiles


@dataclass(frozen=True)
class Tiles:
    """Tile counts of one ``(L, S)`` mask: full + partial + skipped = total."""

    full: int
    partial: int
    skipped: int

    @property
    def total(self) -> int:
        return self.full + self.partial + self.skipped

    @property
    def skipped_fraction(self) -> float:
        return self.skipped / self.total


def tile_counts(bm: BlockMask, batch: int = 0, head: int = 0) -> Tiles:
    """Full / partial / skipped tiles of one ``(batch, head)`` of torch's ``BlockMask``."""
    b = min(batch, bm.kv_num_blocks.shape[0] - 1)
    h = min(head, bm.kv_num_blocks.shape[1] - 1)
    partial = int(bm.kv_num_blocks[b, h].sum())
    full = int(bm.full_kv_num_blocks[b, h].sum()) if bm.full_kv_num_blocks is not None else 0
    n_q, n_kv = bm.kv_indices.shape[-2], bm.kv_indices.shape[-1]
    return Tiles(full, partial, n_q * n_kv - full - partial)


def tile_map(mask: torch.Tensor, block: int) -> torch.Tensor:
    """``(⌈L/block⌉, ⌈S/block⌉)`` int: 2 = full tile, 1 = partial, 0 = empty, of a dense ``(L, S)``
    bool mask; ragged edge tiles are padded with *hidden* pairs, as flex does."""
    if mask.dim() != 2:
        raise ValueError(f"tile_map needs an (L, S) mask, got shape {tuple(mask.shape)}")
    L, S = mask.shape
    nq, nk = -(-L // block), -(-S // block)
    padded = torch.zeros(nq * block, nk * block, dtype=torch.bool)
    padded[:L, :S] = mask
    t = padded.view(nq, block, nk, block).permute(0, 2, 1, 3).reshape(nq, nk, block * block)
    visible = t.sum(-1)
    out = torch.where(visible > 0, 1, 0)
    return torch.where(visible == block * block, 2, out)


def dense_tile_counts(mask: torch.Tensor, block: int) -> Tiles:
    """:class:`Tiles` of a dense ``(L, S)`` mask (the tile map of chapter 8)."""
    t = tile_map(mask, block)
    return Tiles(int((t == 2).sum()), int((t == 1).sum()), int((t == 0).sum()))


def dense_mask(variant: Variant, p: Problem, batch: int = 0) -> torch.Tensor:
    """The ``(L, S)`` bool mask ``variant.mask_mod`` defines for ``batch`` (head 0), via torch's
    ``create_mask``; all True for a variant without a ``mask_mod``."""
    from torch.nn.attention.flex_attention import create_mask

    mod = variant.mask_mod(p)
    if mod is None:
        return torch.ones(p.L, p.S, dtype=torch.bool)
    return create_mask(mod, p.B, 1, p.L, p.S, device="cpu")[batch, 0]


#: The masks whose tiles the chapter counts, each on its problem: the two causal alignments
#: differ only when L != S. Score mods (ALiBi, soft-capping) change no tile: they are left out.
TILE_CASES: dict[str, tuple[str, Problem]] = {
    "causal, top-left (L=32, S=64)": ("causal (top-left)", Problem(L=32, S=64)),
    "causal, bottom-right (L=32, S=64)": ("causal (bottom-right)", Problem(L=32, S=64)),
    "padding (64)": ("padding", Problem()),
    f"sliding window {WINDOW} (64)": (f"sliding window ({WINDOW})", Problem()),
    "documents (64)": ("documents", Problem()),
    "prefix-LM (64)": ("prefix-LM", Problem()),
}


def tile_case(label: str, block: int = 16) -> tuple[torch.Tensor, Tiles]:
    """The dense ``(L, S)`` mask (batch 0) of a :data:`TILE_CASES` entry and torch's tile counts.

    Raises if torch's ``BlockMask`` and the dense tile map of the same mask disagree."""
    name, p = TILE_CASES[label]
    var = VARIANTS[name]
    mask = dense_mask(var, p)
    tiles = tile_counts(block_mask(var.mask_mod(p), p, block))
    if tiles != dense_tile_counts(mask, block):
        raise AssertionError(f"{label}: BlockMask {tiles} != dense tile map "
                             f"{dense_tile_counts(mask, block)}")
    return mask, tiles


def tile_table(block: int = 16) -> list[dict[str, object]]:
    """Per :data:`TILE_CASES` entry: tiles full / partial / skipped (batch 0), fraction skipped."""
    rows = []
    for label in TILE_CASES:
        _, t = tile_case(label, block)
        rows.append({"mask": label, "full": t.full, "partial": t.partial,
                     "skipped": t.skipped, "skipped_fraction": t.skipped_fraction})
    return rows


# --------------------------------------------------------------------------- benchmark results

BENCH_RESULTS = "flex-cpu.json"


def load_bench_results(name: str = BENCH_RESULTS) -> dict[str, Any]:
    """The committed benchmark (``python -m course_lib.chapters.ch11_flex_attention.bench``)."""
    text = resources.files("course_lib.chapters.ch11_flex_attention").joinpath("data", name)
    return json.loads(text.read_text(encoding="utf-8"))


def bench_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: mask, L, tiles skipped, ms of eager flex / compiled flex / SDPA with a dense
    mask, and the compile time of the first compiled call (wall and CPU seconds)."""
    return [{"mask": r["mask"], "L = S": r["L"],
             "tiles skipped": f"{100 * r['tiles_skipped_fraction']:.0f} %",
             "flex eager (ms)": 1e3 * r["seconds_flex_eager"],
             "flex compiled (ms)": 1e3 * r["seconds_flex_compiled"],
             "SDPA, dense mask (ms)": 1e3 * r["seconds_sdpa_dense"],
             "compile, wall (s)": r["compile_seconds_wall"],
             "compile, CPU (s)": r["compile_seconds_cpu"]} for r in data["results"]]
