"""Chapter 14's computations: the published configurations read into cache sizes, the state of
a Gated DeltaNet layer against a KV cache, decode cost per token, and the learned-sink
experiment (one attention head trained with and without a sink, or with an output gate)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import torch

from course_lib.attention import OpenAttention
from course_lib.attention.delta_rule import delta_state_bytes
from course_lib.attention.kv_cache import kv_cache_bytes
from course_lib.attention.layer_pattern import interleaved, pattern_string
from course_lib.attention.masks import causal_mask
from course_lib.attention.positions import apply_rope
from course_lib.attention.sink_softmax import sink_softmax

MIB = 2**20

# ---------------------------------------------------------------- published configurations


def load_configs() -> list[dict]:
    """The four models of ``data/open_configs.json``: name, source, config fields, and what the
    modeling code does (``architecture``)."""
    text = resources.files(__package__).joinpath("data/open_configs.json").read_text("utf-8")
    return json.loads(text)["models"]


def layer_kinds(config: dict) -> list[str]:
    """``config.layer_types`` as transformers builds it from the published fields: an explicit
    ``layer_types``, else ``sliding_window_pattern`` (Gemma 3), ``full_attention_interval``
    (Qwen3-Next) or one kind for every layer."""
    n = config["num_hidden_layers"]
    if "layer_types" in config:
        return list(config["layer_types"])
    if "sliding_window_pattern" in config:
        return interleaved(n, config["sliding_window_pattern"])
    if "full_attention_interval" in config:
        return interleaved(n, config["full_attention_interval"], local="linear_attention")
    if config.get("use_sliding_window"):
        return ["sliding_attention"] * n
    return ["full_attention"] * n


def layer_cache_bytes(config: dict, kind: str, tokens: int, bytes_per_element: int = 2) -> int:
    """Bytes one layer of ``kind`` keeps after ``tokens`` tokens (batch 1): all keys and values
    (full), the last ``sliding_window`` (sliding), or the gated delta rule's state plus the
    convolution's last inputs (linear), which do not grow."""
    if kind == "linear_attention":
        Hk, Hv = config["linear_num_key_heads"], config["linear_num_value_heads"]
        Ek, Ev = config["linear_key_head_dim"], config["linear_value_head_dim"]
        conv = (2 * Hk * Ek + Hv * Ev) * (config["linear_conv_kernel_dim"] - 1)
        return delta_state_bytes(1, Hv, Ek, Ev, bytes_per_element) + conv * bytes_per_element
    kept = tokens if kind == "full_attention" else min(tokens, config["sliding_window"])
    return kv_cache_bytes(kept, 1, config["num_key_value_heads"], config["head_dim"],
                          bytes_per_element)


def cache_bytes(config: dict, tokens: int, bytes_per_element: int = 2) -> int:
    """All layers' :func:`layer_cache_bytes` after ``tokens`` tokens."""
    return sum(layer_cache_bytes(config, kind, tokens, bytes_per_element)
               for kind in layer_kinds(config))


def config_table(models: list[dict], contexts: tuple[int, ...] = (32768, 131072),
                 bytes_per_element: int = 2) -> list[dict[str, str]]:
    """One row per model: the attention fields, the layer pattern, and the cache (bf16,
    batch 1) at each context, in MiB and in bytes per token of context."""
    rows = []
    for m in models:
        c, a = m["config"], m["architecture"]
        kinds = layer_kinds(c)
        counts = {k: kinds.count(k) for k in ("full_attention", "sliding_attention",
                                              "linear_attention") if k in kinds}
        short = {"full_attention": "full", "sliding_attention": "sliding",
                 "linear_attention": "DeltaNet"}
        extras = [name for name, on in (("QK-norm", a["qk_norm"]), ("sinks", a["learned_sinks"]),
                                        ("gate", a["output_gate"])) if on]
        row = {"model": m["name"], "heads / KV heads": f"{c['num_attention_heads']} / "
               f"{c['num_key_value_heads']}", "head dim": str(c["head_dim"]),
               "layers": ", ".join(f"{v} {short[k]}" for k, v in counts.items()),
               "window": str(c.get("sliding_window") or "-"),
               "extras": ", ".join(extras) or "-"}
        for t in contexts:
            total = cache_bytes(c, t, bytes_per_element)
            row[f"cache at {t // 1024}k (MiB)"] = f"{total / MIB:,.0f}"
            row[f"bytes per token at {t // 1024}k"] = f"{total / t:,.0f}"
        rows.append(row)
    return rows


def patterns(models: list[dict]) -> dict[str, str]:
    """Each model's layer pattern, one letter per layer (G full, L sliding, D DeltaNet)."""
    return {m["name"]: pattern_string(layer_kinds(m["config"])) for m in models}


# ------------------------------------------------------------- state, cache and decode cost


def all_full(config: dict) -> dict:
    """The same model with every layer full attention (the baseline of a hybrid)."""
    return {**{k: v for k, v in config.items() if k not in (
        "layer_types", "sliding_window_pattern", "full_attention_interval")},
        "use_sliding_window": False}


def decode_bytes_per_token(config: dict, tokens: int, bytes_per_element: int = 2) -> int:
    """Bytes one decoding step reads from the cache or state at context ``tokens``: every
    layer's :func:`layer_cache_bytes` (a linear layer also writes its state back: counted
    twice)."""
    total = 0
    for kind in layer_kinds(config):
        b = layer_cache_bytes(config, kind, tokens, bytes_per_element)
        total += 2 * b if kind == "linear_attention" else b
    return total


def decode_flops_per_token(config: dict, tokens: int) -> int:
    """Multiply-adds ×2 of one decoding step's attention (projections left out): ``4·H·E·T``
    per full layer (QKᵀ and PV over ``T`` keys, ``min(T, W)`` for sliding), ``~8·Hv·Ek·Ev``
    per gated delta rule step (read Sᵀk, the rank-1 update, read Sᵀq, the decay)."""
    total = 0
    for kind in layer_kinds(config):
        if kind == "linear_attention":
            total += 8 * config["linear_num_value_heads"] * config["linear_key_head_dim"] * \
                config["linear_value_head_dim"]
        else:
            kept = tokens if kind == "full_attention" else min(tokens, config["sliding_window"])
            total += 4 * config["num_attention_heads"] * config["head_dim"] * kept
    return total


# ------------------------------------------------------------------ the learned-sink experiment


@dataclass(frozen=True)
class QuietTask:
    """Vectors ``x_t`` (width ``dim``) with a flag feature: a flagged query must output the
    previous vector, an unflagged one must output zero ("nothing to do"). Position 0 is a
    fixed BOS vector. One head of width ``dim`` with RoPE, trained by Adam in float64."""

    dim: int = 16
    length: int = 16
    flag_rate: float = 0.3
    batch_size: int = 32
    steps: int = 250
    lr: float = 1e-2


def quiet_batch(n: int, task: QuietTask, gen: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x (n, L, D), target (n, L, D), flagged (n, L))``: the last two features are the BOS
    marker and the flag."""
    x = torch.randn(n, task.length, task.dim, generator=gen, dtype=torch.float64)
    flagged = torch.rand(n, task.length, generator=gen, dtype=torch.float64) < task.flag_rate
    flagged[:, :2] = False
    x[:, 0] = 0.0
    x[..., -2:] = 0.0
    x[:, 0, -2] = 1.0                                     # BOS marker
    x[..., -1] = flagged.double()                         # the flag
    target = torch.where(flagged[..., None], torch.roll(x, 1, dims=1), torch.zeros_like(x))
    target[..., -2:] = 0.0
    return x, target, flagged


def train_quiet_head(kind: str, seed: int = 0, task: QuietTask = QuietTask()) -> OpenAttention:
    """One head trained on :class:`QuietTask`: ``kind`` ``"plain"``, ``"sink"`` (a learned
    sink, starting at 0) or ``"gate"`` (a sigmoid output gate)."""
    if kind not in ("plain", "sink", "gate"):
        raise ValueError(f"kind must be 'plain', 'sink' or 'gate', got {kind!r}")
    torch.manual_seed(seed)
    head = OpenAttention(task.dim, 1, head_dim=task.dim, bias=True, sinks=kind == "sink",
                         gate=kind == "gate").double()
    opt = torch.optim.Adam(head.parameters(), lr=task.lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(task.steps):
        x, target, _ = quiet_batch(task.batch_size, task, gen)
        loss = ((head(x) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head


@torch.no_grad()
def head_weights(head: OpenAttention, x: torch.Tensor) -> torch.Tensor:
    """``(n, L, S)``: the trained head's attention weights (with its sink, if it has one)."""
    n, L, _ = x.shape
    q = head.q_proj(x).view(n, L, 1, -1)
    if head.gate:
        q = q.chunk(2, dim=-1)[0]
    k = head.k_proj(x).view(n, L, 1, -1)
    q, k = apply_rope(q.transpose(1, 2)), apply_rope(k.transpose(1, 2))
    scores = (q @ k.transpose(-1, -2)) / head.head_dim ** 0.5
    scores = scores.masked_fill(~causal_mask(L), float("-inf"))
    p = sink_softmax(scores, head.sinks) if hasattr(head, "sinks") else scores.softmax(-1)
    return p[:, 0]


@torch.no_grad()
def mass_report(head: OpenAttention, task: QuietTask = QuietTask(), seed: int = 99,
                n: int = 256) -> dict[str, float]:
    """On fresh sequences: the mean weight on BOS and on the sink of the unflagged queries
    (positions >= 2, nothing to do) and of the flagged ones, and the test loss."""
    x, target, flagged = quiet_batch(n, task, torch.Generator().manual_seed(seed))
    p = head_weights(head, x)
    quiet = ~flagged
    quiet[:, :2] = False
    sink = 1.0 - p.sum(-1)
    return {"bos_quiet": p[..., 0][quiet].mean().item(),
            "sink_quiet": sink[quiet].mean().item(),
            "bos_flagged": p[..., 0][flagged].mean().item(),
            "sink_flagged": sink[flagged].mean().item(),
            "loss": ((head(x) - target) ** 2).mean().item()}


@torch.no_grad()
def gate_openness(head: OpenAttention, task: QuietTask = QuietTask(), seed: int = 99,
                  n: int = 256) -> dict[str, float]:
    """A gated head's mean gate σ(x W_g) over its features, for unflagged queries (positions
    >= 2) and for flagged ones."""
    if not head.gate:
        raise ValueError("gate_openness needs a head built with gate=True")
    x, _, flagged = quiet_batch(n, task, torch.Generator().manual_seed(seed))
    z = head.q_proj(x).view(n, task.length, head.num_heads, -1).chunk(2, dim=-1)[1]
    gate = torch.sigmoid(z).mean(dim=(-1, -2))                       # (n, L)
    quiet = ~flagged
    quiet[:, :2] = False
    return {"quiet": gate[quiet].mean().item(), "flagged": gate[flagged].mean().item()}


# What the chapter asserts. Measured on seeds 0-3 (250 steps): no sink, BOS takes 0.94-0.98 of an
# unflagged query's mass; with a sink, the sink takes 0.88-0.92 and BOS 0.05-0.09; with a gate
# alone BOS keeps 0.94-0.95 while the gate half closes (seed 0: 0.30 quiet, 0.66 flagged);
# flagged queries give BOS at most 0.02 in every run.
THRESHOLDS = {"bos_without_sink": 0.8, "sink_share": 0.7, "bos_with_sink": 0.2,
              "bos_with_gate": 0.5, "bos_flagged": 0.1, "loss": 0.01, "gate_gap": 0.15}
