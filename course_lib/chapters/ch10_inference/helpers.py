"""Chapter 10 (inference): a tiny GPT decoded with and without a KV cache, cache sizes of
published models, the receptive field of sliding-window attention, and paged KV storage."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
from torch import nn

from course_lib.attention import IMPLEMENTATIONS, KVCache, TransformerBlock, decode_step
from course_lib.attention.multihead import merge_heads, split_heads
from course_lib.attention.positions import apply_rope

# --------------------------------------------------------------------------- a tiny GPT


class TinyGPT(nn.Module):
    """Token + learned absolute position embeddings, pre-norm :class:`TransformerBlock`s from the
    course core, a final LayerNorm and an unembedding. Seeded random weights (``sinks`` trains one).
    ``rope=True``: no position table; q and k are rotated (RoPE) by per-row ``position_ids``.

    Two ways to run it: :meth:`forward` over a whole prefix (causal, every position recomputed)
    and :meth:`step` for new tokens only, reading and extending one :class:`KVCache` per layer.
    ``attend`` is any function with torch's SDPA signature (default: the course's ``sdpa``).
    """

    def __init__(self, vocab: int = 64, dim: int = 64, heads: int = 4, layers: int = 2,
                 max_len: int = 1024, seed: int = 0, rope: bool = False) -> None:
        super().__init__()
        self.vocab, self.dim, self.heads, self.max_len = vocab, dim, heads, max_len
        self.rope = rope
        with torch.random.fork_rng(devices=[]):      # seeded, without touching the global RNG
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(max_len, dim)
            self.blocks = nn.ModuleList(TransformerBlock(dim, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)
        self.eval()

    @property
    def layers(self) -> int:
        return len(self.blocks)

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def _embed(self, tokens: torch.Tensor, offset: int,
               position_ids: torch.Tensor | None = None) -> torch.Tensor:
        positions = (torch.arange(offset, offset + tokens.shape[1]) if position_ids is None
                     else position_ids)
        if positions.max() >= self.max_len:
            raise ValueError(f"position {int(positions.max())} >= max_len={self.max_len}")
        return self.tok(tokens) if self.rope else self.tok(tokens) + self.pos(positions)

    def _block(self, block: TransformerBlock, x: torch.Tensor, attend, cache: KVCache | None,
               position_ids: torch.Tensor | None = None) -> torch.Tensor:
        h = block.ln1(x)
        q, k, v = (split_heads(t, self.heads) for t in block.attn.qkv(h).chunk(3, dim=-1))
        if self.rope:
            if position_ids is None:
                start = 0 if cache is None else cache.seen
                position_ids = torch.arange(start, start + x.shape[1]).expand(x.shape[0], -1)
            q = apply_rope(q, position_ids=position_ids)
            k = apply_rope(k, position_ids=position_ids)
        if cache is None:
            a = attend(q, k, v, is_causal=True)
        else:
            a = decode_step(q, k, v, cache, attend)
        x = x + block.attn.out_proj(merge_heads(a))
        return x + block.mlp(block.ln2(x))

    def logits(self, tokens: torch.Tensor, attend=None) -> torch.Tensor:
        """``tokens (B, N)`` → logits ``(B, N, vocab)``, every position computed (no cache),
        differentiable: the forward pass used to train the model."""
        attend = attend or IMPLEMENTATIONS["sdpa"]
        x = self._embed(tokens, 0)
        for block in self.blocks:
            x = self._block(block, x, attend, None)
        return self.head(self.ln_f(x))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, attend=None) -> torch.Tensor:
        """:meth:`logits` without autograd (decoding)."""
        return self.logits(tokens, attend)

    def new_caches(self, window: int | None = None, sinks: int = 0) -> list[KVCache]:
        """One empty :class:`KVCache` per layer (``window``, ``sinks``: a rolling cache that also
        keeps the first ``sinks`` tokens)."""
        return [KVCache(window=window, sinks=sinks) for _ in self.blocks]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, caches: list[KVCache], attend=None,
             position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(B, L, vocab)`` of ``L`` new tokens; their positions start at the number of
        tokens the caches have seen (the position offset); the caches grow by ``L``.
        ``position_ids (B, L)``: each row's own positions instead (rows of a padded batch)."""
        attend = attend or IMPLEMENTATIONS["sdpa"]
        x = self._embed(tokens, caches[0].seen, position_ids)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = self._block(block, x, attend, cache, position_ids)
        return self.head(self.ln_f(x))


@dataclass
class Generation:
    tokens: torch.Tensor        # (B, n_new) generated ids
    logits: torch.Tensor        # (B, n_new, vocab) the logits each token was chosen from
    caches: list[KVCache] | None = None


def generate_uncached(model: TinyGPT, prompt: torch.Tensor, n_new: int, attend=None
                      ) -> Generation:
    """Greedy decoding that re-runs the model over the whole prefix for every new token."""
    seq, chosen = prompt, []
    for _ in range(n_new):
        logits = model(seq, attend)[:, -1]            # only the last row is used
        chosen.append(logits)
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    return Generation(seq[:, prompt.shape[1]:], torch.stack(chosen, 1))


def generate_cached(model: TinyGPT, prompt: torch.Tensor, n_new: int, attend=None,
                    window: int | None = None) -> Generation:
    """Greedy decoding with a KV cache: the prompt in one step (prefill), then one token per
    step."""
    caches = model.new_caches(window)
    logits = model.step(prompt, caches, attend)[:, -1]
    chosen, new = [], []
    for i in range(n_new):
        chosen.append(logits)
        nxt = logits.argmax(-1, keepdim=True)
        new.append(nxt)
        if i + 1 < n_new:
            logits = model.step(nxt, caches, attend)[:, -1]
    return Generation(torch.cat(new, 1), torch.stack(chosen, 1), caches)


def left_pad(prompts: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths → ``(tokens (B, P), real (B, P) bool)``, padded on the
    left so that every row's last token is in the last column."""
    P = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    real = torch.zeros(len(prompts), P, dtype=torch.bool)
    for b, p in enumerate(prompts):
        tokens[b, P - len(p):], real[b, P - len(p):] = p, True
    return tokens, real


def padded_attention(real: torch.Tensor, attend=None):
    """An SDPA-like function that also hides the pad keys of a left-padded batch.

    ``real (B, P)``: which prompt columns are tokens. Keys past the prompt are always real.
    A pad *query* keeps plain causal attention (its output is never used; a row with every key
    hidden would be NaN and spread through the values of the next layer)."""
    attend = attend or IMPLEMENTATIONS["sdpa"]

    def fn(q, k, v, attn_mask=None, **kw):
        L, S = q.shape[-2], k.shape[-2]
        keys = torch.ones(real.shape[0], S, dtype=torch.bool)
        keys[:, :real.shape[1]] = real
        queries = keys[:, S - L:]
        keep = keys[:, None, :] | ~queries[:, :, None]                 # (B, L, S)
        if attn_mask is not None:
            keep = keep & attn_mask
        return attend(q, k, v, attn_mask=keep[:, None], **kw)
    return fn


def generate_batched(model: TinyGPT, prompts: list[torch.Tensor], n_new: int, attend=None,
                     pad_id: int = 0, per_row_positions: bool = True) -> torch.Tensor:
    """Greedy cached decoding of prompts of different lengths in one batch: left padding, pad
    keys hidden, and per-row positions (``position_ids``) so that every row's first real token
    is at position 0. Returns the ``(B, n_new)`` generated ids. ``per_row_positions=False``:
    one shared offset (positions counted from the padded column 0), to see what goes wrong."""
    tokens, real = left_pad(prompts, pad_id)
    attend = padded_attention(real, attend)
    lengths = real.sum(1)                                         # (B,)
    pos = (real.long().cumsum(1) - 1).clamp(min=0)                # pads: 0; tokens 0, 1, ...
    caches = model.new_caches()
    logits = model.step(tokens, caches, attend, position_ids=pos if per_row_positions
                        else None)[:, -1]
    new = []
    for i in range(n_new):
        nxt = logits.argmax(-1, keepdim=True)
        new.append(nxt)
        if i + 1 < n_new:
            ids = (lengths + i)[:, None] if per_row_positions else None
            logits = model.step(nxt, caches, attend, position_ids=ids)[:, -1]
    return torch.cat(new, 1)


def top2_margin(logits: torch.Tensor) -> float:
    """Smallest gap between the best and second-best logit over all steps (a tie would make
    greedy decoding fragile to rounding)."""
    top = logits.topk(2, dim=-1).values
    return float((top[..., 0] - top[..., 1]).min())


class CountingAttention:
    """Wraps an attention function and counts the query-key scores it computes (``L·S`` per
    head and batch row, minus nothing: masked scores are computed too)."""

    def __init__(self, fn=None) -> None:
        self.fn = fn or IMPLEMENTATIONS["sdpa"]
        self.scores = 0
        self.calls = 0

    def __call__(self, q, k, v, **kw):
        self.scores += q.shape[-2] * k.shape[-2] * math.prod(q.shape[:-2])
        self.calls += 1
        return self.fn(q, k, v, **kw)


def scores_per_step(prefix: int, cached: bool) -> int:
    """Scores one layer-head computes to produce the token after a ``prefix`` of this length:
    ``prefix²`` when everything is recomputed, ``prefix`` with a cache (one new query)."""
    return prefix if cached else prefix * prefix


def total_scores(prompt: int, n_new: int, cached: bool) -> int:
    """Scores per layer-head for ``n_new`` greedy tokens after a ``prompt`` (the cached prefill
    computes the prompt's ``prompt²`` once; the last token is never fed back)."""
    if cached:
        return prompt * prompt + sum(prompt + i for i in range(1, n_new))
    return sum((prompt + i) ** 2 for i in range(n_new))


# --------------------------------------------------------------------------- cache sizes

#: Published attention configurations (see the chapter's references for each source).
MODEL_CONFIGS: tuple[dict[str, Any], ...] = (
    {"model": "Llama 2 7B", "kind": "MHA", "layers": 32, "heads": 32, "kv_heads": 32,
     "head_dim": 128, "source": "touvron2023llama2"},
    {"model": "Llama 3 8B", "kind": "GQA", "layers": 32, "heads": 32, "kv_heads": 8,
     "head_dim": 128, "source": "grattafiori2024llama3"},
    {"model": "Mistral 7B", "kind": "GQA + window 4096", "layers": 32, "heads": 32,
     "kv_heads": 8, "head_dim": 128, "window": 4096, "source": "jiang2023mistral"},
    {"model": "Falcon 7B", "kind": "MQA", "layers": 32, "heads": 71, "kv_heads": 1,
     "head_dim": 64, "source": "almazrouei2023falcon"},
)


def bytes_per_token(cfg: dict[str, Any], bytes_per_element: int = 2) -> int:
    """``2 · layers · kv_heads · head_dim · bytes``: one token's keys and values, all layers."""
    return 2 * cfg["layers"] * cfg["kv_heads"] * cfg["head_dim"] * bytes_per_element


def cache_rows(tokens: int = 8192, bytes_per_element: int = 2) -> list[dict[str, Any]]:
    """One row per :data:`MODEL_CONFIGS` entry: per-token bytes and the cache for ``tokens``
    (a rolling window caps the tokens kept)."""
    rows = []
    for cfg in MODEL_CONFIGS:
        per = bytes_per_token(cfg, bytes_per_element)
        kept = min(tokens, cfg.get("window", tokens))
        rows.append({"model": cfg["model"], "attention": cfg["kind"],
                     "layers": cfg["layers"], "heads": cfg["heads"],
                     "kv_heads": cfg["kv_heads"], "head_dim": cfg["head_dim"],
                     "KiB/token": per / 1024, f"GiB at {tokens} tokens": per * kept / 2**30})
    return rows


# --------------------------------------------------------------------------- sliding windows


def receptive_field(n: int, window: int, layers: int) -> torch.Tensor:
    """``(n, n)`` bool: True where position ``j`` can influence position ``i`` after ``layers``
    sliding-window attention layers (the residual stream keeps each position's own past)."""
    from course_lib.attention.masks import sliding_window_mask
    step = sliding_window_mask(n, window=window).to(torch.int64)
    reach = torch.eye(n, dtype=torch.int64)
    for _ in range(layers):
        reach = ((step @ reach) > 0).to(torch.int64)
    return reach.bool()


def farthest_reach(n: int, window: int, layers: int) -> int:
    """How many positions back the last token can see after ``layers`` layers (measured)."""
    row = receptive_field(n, window, layers)[-1]
    return n - 1 - int(row.nonzero().min())


# --------------------------------------------------------------------------- paged storage


class PagedKVPool:
    """A sketch of paged KV storage: one pool of fixed-size blocks shared by all sequences,
    and a block table per sequence mapping its logical block ``b`` to a physical block.

    Keys and values of token ``t`` of a sequence live in physical block
    ``table[t // block_size]`` at offset ``t % block_size``. A block is taken from the free list
    only when a sequence's last block is full, so a sequence wastes less than one block.
    """

    def __init__(self, num_blocks: int, block_size: int, heads: int, head_dim: int) -> None:
        self.block_size = block_size
        self.k = torch.zeros(num_blocks, heads, block_size, head_dim)
        self.v = torch.zeros(num_blocks, heads, block_size, head_dim)
        self.free = list(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def append(self, seq: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """One token's ``k, v (heads, head_dim)`` for sequence ``seq``."""
        table = self.tables.setdefault(seq, [])
        n = self.lengths.get(seq, 0)
        if n % self.block_size == 0:
            if not self.free:
                raise MemoryError("the KV pool is out of blocks")
            table.append(self.free.pop(0))
        block, offset = table[n // self.block_size], n % self.block_size
        self.k[block, :, offset] = k
        self.v[block, :, offset] = v
        self.lengths[seq] = n + 1

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values ``(heads, n, head_dim)`` in order, from its blocks."""
        n, table = self.lengths[seq], self.tables[seq]
        k = self.k[table].permute(1, 0, 2, 3).reshape(self.k.shape[1], -1, self.k.shape[-1])
        v = self.v[table].permute(1, 0, 2, 3).reshape(self.v.shape[1], -1, self.v.shape[-1])
        return k[:, :n], v[:, :n]


def allocation_rows(lengths: list[int], max_len: int, block_size: int) -> list[dict[str, Any]]:
    """Token slots reserved vs used for sequences of these lengths: contiguous (``max_len``
    reserved per sequence, as a server must without knowing the final length) vs paged."""
    used = sum(lengths)
    contiguous = max_len * len(lengths)
    paged = sum(math.ceil(n / block_size) * block_size for n in lengths)
    return [
        {"allocation": "contiguous, max_len each", "slots reserved": contiguous,
         "slots used": used, "wasted": contiguous - used,
         "wasted %": 100 * (contiguous - used) / contiguous},
        {"allocation": f"paged, blocks of {block_size}", "slots reserved": paged,
         "slots used": used, "wasted": paged - used, "wasted %": 100 * (paged - used) / paged},
    ]


# --------------------------------------------------------------------------- benchmark results

RESULTS = "decode-cpu.json"


def load_decode_results(name: str = RESULTS) -> dict[str, Any]:
    """The committed benchmark results (``python -m course_lib.chapters.ch10_inference.bench``)."""
    text = resources.files("course_lib.chapters.ch10_inference").joinpath("data", name)
    return json.loads(text.read_text(encoding="utf-8"))


def results_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Table rows: generated tokens, tokens/s without and with the cache, speed-up, cache KiB."""
    rows = []
    for r in data["results"]:
        rows.append({"generated tokens": r["n_new"],
                     "tokens/s, no cache": r["tokens_per_s_uncached"],
                     "tokens/s, KV cache": r["tokens_per_s_cached"],
                     "speed-up": r["tokens_per_s_cached"] / r["tokens_per_s_uncached"],
                     "cache KiB": r["cache_bytes"] / 1024})
    return rows


# --------------------------------------------------------------------------- GQA: copies of K/V


def kv_copies(attend, B: int = 1, H: int = 8, H_kv: int = 2, L: int = 3, S: int = 5,
              E: int = 4, Ev: int = 6) -> list[str]:
    """The aten ops ``attend(q, k, v, enable_gqa=True)`` runs that *materialise* keys or values
    for all ``H`` query heads: non-view ops whose output has ``B·H·S·E`` or ``B·H·S·Ev``
    elements (a view or ``expand`` of ``k``/``v`` does not count). The default sizes make those
    counts unambiguous (no other tensor has them). Recorded with ``TorchDispatchMode``."""
    from course_lib.toolkit.dispatch_mode import EagerDispatchMode

    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, E, generator=g)
    k, v = torch.randn(B, H_kv, S, E, generator=g), torch.randn(B, H_kv, S, Ev, generator=g)
    sizes = {B * H * S * E, B * H * S * Ev}
    found: list[str] = []

    class Record(EagerDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor) and t.numel() in sizes and not func.is_view:
                    found.append(str(func.overloadpacket.__name__))
            return out

    with Record():
        attend(q, k, v, enable_gqa=True)
    return found


def aten_ops(attend, E: int = 4, Ev: int = 4, H: int = 8, H_kv: int = 2) -> list[str]:
    """Names of the aten ops ``attend(q, k, v, enable_gqa=True)`` dispatches (outermost first
    as they run), for keys of width ``E`` and values of width ``Ev``: which kernel torch picks."""
    from course_lib.toolkit.dispatch_mode import EagerDispatchMode

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, 3, E, generator=g)
    k, v = torch.randn(1, H_kv, 5, E, generator=g), torch.randn(1, H_kv, 5, Ev, generator=g)
    seen: list[str] = []

    class Record(EagerDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    with Record():
        attend(q, k, v, enable_gqa=True)
    return seen


# --------------------------------------------------------------------------- decode roofline

# Datasheet peaks (dense, no sparsity) and memory bandwidths: NVIDIA H100 SXM5 (bf16 989.4
# TFLOP/s, HBM3 3.35 TB/s) and A100 SXM4 80GB (bf16 312 TFLOP/s, HBM2e 2.039 TB/s).
GPU_DATASHEETS = {"H100 SXM, bf16": (989.4e12, 3.35e12), "A100 SXM 80GB, bf16": (312e12, 2.039e12)}


def decode_intensity(heads: int, kv_heads: int, head_dim: int, cache: int,
                     bytes_per_element: int = 2) -> dict[str, float]:
    """FLOPs and bytes of the attention of ONE new token over ``cache`` cached tokens, one layer.

    FLOPs ``4·H·E·S`` (``q·kᵀ`` and ``p·v``, a multiply-add = 2; softmax not counted). Bytes:
    the cached K and V read once, ``2·H_kv·S·E``, plus the query and output, ``2·H·E``, times
    the element size. Intensity → ``2·H / (H_kv · bytes)`` for a long cache."""
    flops = 4 * heads * head_dim * cache
    nbytes = (2 * kv_heads * cache * head_dim + 2 * heads * head_dim) * bytes_per_element
    return {"FLOPs": flops, "bytes": nbytes, "FLOP/byte": flops / nbytes}


def grouped_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One new token's attention with ``H_kv`` shared heads and no copy of K/V: ``q (B, H, 1, E)``
    is viewed as ``(B, H_kv, H/H_kv, E)`` so each group's queries meet their one K/V head in a
    batched matmul. ``k, v (B, H_kv, S, E)`` → ``(B, H, 1, E)``."""
    B, H, _, E = q.shape
    H_kv = k.shape[1]
    qg = q.reshape(B, H_kv, H // H_kv, E)
    p = torch.softmax(qg @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (p @ v).reshape(B, H, 1, v.shape[-1])


def time_decode_step(heads: int, kv_heads: int, head_dim: int, cache: int, rounds: int = 7,
                     dtype: torch.dtype = torch.float32) -> float:
    """Best-of-``rounds`` seconds of :func:`grouped_decode_attention` for one token over a
    cache of ``cache`` tokens (the same FLOPs for every ``kv_heads``)."""
    import time

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, 1, head_dim, generator=g, dtype=dtype)
    k = torch.randn(1, kv_heads, cache, head_dim, generator=g, dtype=dtype)
    v = torch.randn(1, kv_heads, cache, head_dim, generator=g, dtype=dtype)
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        grouped_decode_attention(q, k, v)
        best = min(best, time.perf_counter() - t0)
    return best


def committed_matmul_rate() -> float:
    """FLOP/s of the best float32 matmul in the committed CPU benchmark
    (``course_lib/toolkit/bench/results/cpu-float32.json``)."""
    path = resources.files("course_lib.toolkit.bench") / "results" / "cpu-float32.json"
    return json.loads(path.read_text())["meta"]["matmul"]["gflops_best"] * 1e9


# --------------------------------------------------------------------------- latent attention

#: Published configurations compared with MLA: Llama 3 70B (Grattafiori et al., Table 3) and
#: DeepSeek-V3 (DeepSeek-AI 2024, §4.2; the names of its Hugging Face config).
LLAMA3_70B: dict[str, Any] = {"model": "Llama 3 70B", "layers": 80, "heads": 64, "kv_heads": 8,
                              "head_dim": 128, "source": "grattafiori2024llama3"}
DEEPSEEK_V3: dict[str, Any] = {"model": "DeepSeek-V3", "layers": 61, "heads": 128,
                               "hidden_size": 7168, "q_lora_rank": 1536, "kv_lora_rank": 512,
                               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                               "v_head_dim": 128, "source": "deepseekai2024v3"}


def cached_numbers(scheme: str, cfg: dict[str, Any]) -> int:
    """Numbers one layer caches per token. ``"MHA"``/``"GQA"``/``"MQA"`` (Llama-style, K and V
    of ``kv_heads`` = heads / 8 / 1 heads), ``"MLA"`` (latent + shared rotary key), and
    ``"MLA decompressed"`` (the per-head keys and values MLA would cache without its latent)."""
    if scheme == "MLA":
        return cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    if scheme == "MLA decompressed":
        return cfg["heads"] * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
                               + cfg["v_head_dim"])
    kv = {"MHA": cfg["heads"], "GQA": cfg["kv_heads"], "MQA": 1}[scheme]
    return 2 * kv * cfg["head_dim"]


CACHE_SCHEMES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("MHA", "Llama 3 70B shape, if every head were cached", LLAMA3_70B),
    ("GQA", "Llama 3 70B as published (8 kv heads)", LLAMA3_70B),
    ("MQA", "Llama 3 70B shape, with 1 kv head", LLAMA3_70B),
    ("MLA", "DeepSeek-V3 as published", DEEPSEEK_V3),
    ("MLA decompressed", "DeepSeek-V3, per-head K and V cached", DEEPSEEK_V3),
)


def scheme_rows(tokens: int = 131072, bytes_per_element: int = 2) -> list[dict[str, Any]]:
    """Cache per token (all layers) and for ``tokens`` tokens, one row per :data:`CACHE_SCHEMES`."""
    rows = []
    for scheme, what, cfg in CACHE_SCHEMES:
        per_layer = cached_numbers(scheme, cfg)
        per = per_layer * cfg["layers"] * bytes_per_element
        rows.append({"scheme": scheme, "configuration": what, "layers": cfg["layers"],
                     "numbers per token and layer": per_layer, "KiB/token": per / 1024,
                     f"GiB at {tokens:,} tokens": per * tokens / 2**30})
    return rows


def mla_decode_costs(cfg: dict[str, Any], cache: int, bytes_per_element: int = 2
                     ) -> dict[str, dict[str, float]]:
    """FLOPs and bytes of one new token's attention over ``cache`` tokens, one layer, three ways:

    * ``naive``: decompress all S latents (``2·S·r·H(N+V)``), then attend per head
      (``2·H·S(N+R) + 2·H·S·V``); reads the latent cache ``S(r+R)``;
    * ``absorbed``: move the query into the latent space and back (``2·H·N·r + 2·H·r·V``, once
      per token), attend over ``S`` latents (``2·H·S(r+R) + 2·H·S·r``); reads ``S(r+R)``;
    * ``decompressed cache``: attend over cached per-head K and V (MHA-sized):
      ``2·H·S(N+R) + 2·H·S·V`` FLOPs, reading ``S·H(N+R+V)``.

    Bytes add the query and output of the attention; softmax and projections from x not counted.
    """
    H, r, R = cfg["heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    N, V, S, b = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cache, bytes_per_element
    attend_heads = 2 * H * S * (N + R) + 2 * H * S * V
    io_heads = (H * (N + R) + H * V) * b
    rows = {
        "naive": (2 * S * r * H * (N + V) + attend_heads, S * (r + R) * b + io_heads),
        "absorbed": (2 * H * N * r + 2 * H * r * V + 2 * H * S * (r + R) + 2 * H * S * r,
                     S * (r + R) * b + (H * (r + R) + H * r) * b),
        "decompressed cache": (attend_heads, S * H * (N + R + V) * b + io_heads),
    }
    return {k: {"FLOPs": f, "bytes": n, "FLOP/byte": f / n} for k, (f, n) in rows.items()}


def absorbed_break_even(cfg: dict[str, Any]) -> float:
    """Cache length above which the absorbed step needs fewer FLOPs than the naive one: its
    fixed ``2·H·r(N+V)`` against the naive path's extra FLOPs per cached token."""
    H, r, R = cfg["heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    N, V = cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    naive_per = 2 * r * H * (N + V) + 2 * H * (N + R) + 2 * H * V
    absorbed_per = 2 * H * (r + R) + 2 * H * r
    return 2 * H * r * (N + V) / (naive_per - absorbed_per)


def decompress_wins_above(cfg: dict[str, Any], cache: int) -> float:
    """Query tokens per step (a chunk, a prefill) over ``cache`` latents above which
    decompressing them once (``2·S·r·H(N+V)``) and attending per head costs fewer FLOPs than
    attending in the latent space, whose extra FLOPs grow with every query:
    ``L · (2Hr(N+V) + S·extra) = S · 2rH(N+V)``, with ``extra`` the absorbed path's additional
    FLOPs per query-key pair."""
    H, r, R = cfg["heads"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    N, V, S = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cache
    extra_per_pair = (2 * H * (r + R) + 2 * H * r) - (2 * H * (N + R) + 2 * H * V)
    decompress = 2 * r * H * (N + V)
    return S * decompress / (decompress + S * extra_per_pair)


def time_mla_decode(model, cache_lengths, repeats: int = 5, seed: int = 0
                    ) -> list[dict[str, float]]:
    """Seconds of one decode step (one new token) of ``model`` (a ``MultiHeadLatentAttention``)
    after each cache length, naive and absorbed, best of ``repeats`` (toolkit ``best_time``,
    process CPU clock). After each timed call the cache is rewound (``seen = S``), so every call
    decodes the same token over the same ``S`` latents. Each row checks that both modes agree."""
    from course_lib.toolkit.bench.timing import best_time

    g = torch.Generator().manual_seed(seed)
    rows = []
    for S in cache_lengths:
        x = torch.randn(1, S + 1, model.embed_dim, generator=g)
        cache = KVCache()
        row: dict[str, float] = {"cache": S}
        outs = {}
        with torch.no_grad():
            model(x[:, :S], cache)                 # prefill S tokens
            for mode in ("naive", "absorbed"):

                def step(mode=mode, x=x, S=S, cache=cache):
                    out = model(x[:, S:], cache, mode)
                    cache.seen = S                 # rewind: the next call decodes it again
                    return out
                outs[mode] = step()
                row[f"{mode} ms"] = best_time(step, repeats=repeats, clock="cpu")[0] * 1e3
        row["max |difference|"] = float((outs["naive"] - outs["absorbed"]).abs().max())
        rows.append(row)
    return rows
