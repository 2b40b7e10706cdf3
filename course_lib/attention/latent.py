r"""Multi-head latent attention (MLA, DeepSeek-V2): cache one small latent per token, not K and V.

.. math:: c = \mathrm{RMSNorm}(x W_{DKV}),\quad k^h = [W_{UK}^h c;\ \mathrm{RoPE}(x W_{KR})],
          \quad v^h = W_{UV}^h c,\quad q^h = [q_C^h;\ \mathrm{RoPE}(q_R^h)]

Per token the cache holds the latent ``c`` (``kv_lora_rank = r`` numbers) and one rotary key
shared by all heads (``qk_rope_head_dim = R``): ``r + R`` numbers per layer, whatever ``H``.
Scores use the full query-key width: scale ``1/√(N + R)`` with ``N = qk_nope_head_dim``.

RoPE scaling (``rope_scaling``, the dicts of :func:`~course_lib.attention.positions.rope_cache`)
rescales the rotary frequencies (YaRN's attention factor multiplies cos and sin); with
``mscale_all_dim`` it also multiplies the softmax scale by
:func:`~course_lib.attention.positions.softmax_mscale` (DeepSeek-V2's long-context recipe, as
in its released code and transformers): ``m² / √(N + R)``, ``m = 0.1·mscale_all_dim·ln s + 1``.

Two ways to decode over the latent cache (both equal the full-sequence forward):

* **naive**: decompress every cached latent into per-head keys and values, then attend;
* **absorbed**: :math:`q_C^h \cdot W_{UK}^h c = (W_{UK}^{h\top} q_C^h) \cdot c`, so the query
  is moved into the latent space and attends to ``c`` directly; the weighted sum of latents
  goes through :math:`W_{UV}^h` once, after attention. The rotary part cannot be absorbed (its
  rotation depends on the key's position), hence the separate shared rotary key.

Names and shapes follow transformers' ``DeepseekV3Attention`` (``q_a_proj``, ``kv_b_proj``, ...);
RoPE uses the course's split-halves layout (DeepSeek's checkpoints use interleaved pairs:
:meth:`MultiHeadLatentAttention.from_transformers` permutes their rows). Input ``(B, L, D)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .kv_cache import KVCache
from .masks import causal_mask
from .multihead import merge_heads
from .positions import ROPE_TYPES, apply_rope, scaled_rope_frequencies, softmax_mscale
from .registry import IMPLEMENTATIONS


def deinterleave_rows(weight: torch.Tensor, heads: int, nope: int, rope: int) -> torch.Tensor:
    """Rows ``(heads·(nope+rope), ·)`` whose rotary rows are in interleaved pairs
    ``(x0, x1), (x2, x3), …`` → split halves ``(x0, x2, …, x1, x3, …)``, per head."""
    w = weight.reshape(heads, nope + rope, -1)
    r = w[:, nope:]
    return torch.cat([w[:, :nope], r[:, 0::2], r[:, 1::2]], 1).reshape(weight.shape)


class MultiHeadLatentAttention(nn.Module):
    """MLA with low-rank query (``q_lora_rank``, None: a full ``q_proj``) and KV compression.

    ``forward(x)`` runs causal attention over the whole sequence; ``forward(x, cache, mode)``
    decodes ``L`` new tokens after ``len(cache)`` cached ones: ``cache`` is a :class:`KVCache`
    holding the latents ``(B, S, r)`` as its "keys" and the rotated shared keys ``(B, S, R)``
    as its "values"; ``mode`` is ``"naive"`` or ``"absorbed"``.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, kv_lora_rank: int,
                 qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
                 q_lora_rank: int | None = None, rope_base: float = 10000.0,
                 rope_scaling: dict | None = None,
                 norm_eps: float = 1e-6, implementation: str = "sdpa") -> None:
        super().__init__()
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {sorted(IMPLEMENTATIONS)}, "
                             f"got {implementation!r}")
        if qk_rope_head_dim <= 0 or qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even and > 0, got {qk_rope_head_dim}")
        H, N, R, V = num_heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
        scaled_rope_frequencies(R, rope_base, rope_scaling)   # validates rope_scaling now
        self.rope_scaling = None if rope_scaling is None else dict(rope_scaling)
        self.embed_dim, self.num_heads, self.implementation = embed_dim, H, implementation
        self.kv_lora_rank, self.q_lora_rank, self.rope_base = kv_lora_rank, q_lora_rank, rope_base
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = N, R, V
        # the full query-key width, times DeepSeek's mscale² under RoPE scaling
        self.scale = (N + R) ** -0.5 * softmax_mscale(rope_scaling)
        if q_lora_rank is None:
            self.q_proj = nn.Linear(embed_dim, H * (N + R), bias=False)
        else:
            self.q_a_proj = nn.Linear(embed_dim, q_lora_rank, bias=False)
            self.q_a_layernorm = nn.RMSNorm(q_lora_rank, eps=norm_eps)
            self.q_b_proj = nn.Linear(q_lora_rank, H * (N + R), bias=False)
        # rows [W_DKV; W_KR]: the latent and the shared rotary key
        self.kv_a_proj_with_mqa = nn.Linear(embed_dim, kv_lora_rank + R, bias=False)
        self.kv_a_layernorm = nn.RMSNorm(kv_lora_rank, eps=norm_eps)
        self.kv_b_proj = nn.Linear(kv_lora_rank, H * (N + V), bias=False)   # [W_UK^h; W_UV^h] per h
        self.o_proj = nn.Linear(H * V, embed_dim, bias=False)

    def up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_UK (H, N, r), W_UV (H, V, r))``: the per-head up-projections of the latent."""
        w = self.kv_b_proj.weight.view(self.num_heads, -1, self.kv_lora_rank)
        return w[:, :self.qk_nope_head_dim], w[:, self.qk_nope_head_dim:]

    def queries(self, x: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_nope (B, H, L, N), q_rope (B, H, L, R))``, the rotary part rotated."""
        B, L, _ = x.shape
        q = (self.q_proj(x) if self.q_lora_rank is None
             else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))))
        q = q.view(B, L, self.num_heads, -1).transpose(1, 2)
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return q_nope, apply_rope(q_rope, offset=offset, base=self.rope_base,
                                  rope_scaling=self.rope_scaling)

    def latents(self, x: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What the cache stores: ``(c (B, L, r), k_rope (B, L, R))``, the key rotated."""
        c, k_rope = self.kv_a_proj_with_mqa(x).split(
            [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        return self.kv_a_layernorm(c), apply_rope(k_rope, offset=offset, base=self.rope_base,
                                                  rope_scaling=self.rope_scaling)

    def _naive(self, q_nope, q_rope, c, k_rope, mask, is_causal):
        """Decompress: k^h = [W_UK^h c; k_rope], v^h = W_UV^h c for all S tokens, then attend."""
        B, S, _ = c.shape
        kv = self.kv_b_proj(c).view(B, S, self.num_heads, -1).transpose(1, 2)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_rope[:, None].expand(-1, self.num_heads, -1, -1)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)
        return IMPLEMENTATIONS[self.implementation](q, k, v, attn_mask=mask,
                                                    is_causal=is_causal, scale=self.scale)

    def _absorbed(self, q_nope, q_rope, c, k_rope, mask):
        """Attend in the latent space: W_UK folded into the query, W_UV applied after."""
        w_uk, w_uv = self.up_weights()
        q_lat = q_nope @ w_uk                                       # (B, H, L, r)
        scores = (q_lat @ c[:, None].transpose(-2, -1)
                  + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        o_lat = torch.softmax(scores, dim=-1) @ c[:, None]          # (B, H, L, r)
        return o_lat @ w_uv.transpose(-2, -1)                       # (B, H, L, V)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None,
                mode: str = "naive") -> torch.Tensor:
        """``x (B, L, D)`` → ``(B, L, D)``: causal over ``x`` alone, or after the cache."""
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must be (B, L, {self.embed_dim}), got {tuple(x.shape)}")
        if mode not in ("naive", "absorbed"):
            raise ValueError(f"mode must be 'naive' or 'absorbed', got {mode!r}")
        if cache is not None and cache.window is not None:
            raise ValueError("MultiHeadLatentAttention supports a cache without a window")
        P = 0 if cache is None else cache.seen
        L = x.shape[1]
        q_nope, q_rope = self.queries(x, P)
        c, k_rope = self.latents(x, P)
        if cache is not None:
            cache.append(c, k_rope)
            c, k_rope = cache.view()
        S = c.shape[1]
        mask = None if L == 1 else causal_mask(L, S, device=x.device, align="bottom_right")
        if mode == "naive":
            out = self._naive(q_nope, q_rope, c, k_rope, mask, False)
        else:
            out = self._absorbed(q_nope, q_rope, c, k_rope, mask)
        return self.o_proj(merge_heads(out))

    @classmethod
    def from_transformers(cls, attn: nn.Module) -> MultiHeadLatentAttention:
        """Copy a transformers ``DeepseekV3Attention``/``DeepseekV2Attention`` (no biases).

        DeepSeek rotates interleaved pairs (V2 always; V3 when ``config.rope_interleave``):
        their rotary rows of ``q_b_proj``/``q_proj`` and ``kv_a_proj_with_mqa`` are reordered
        to split halves (:func:`deinterleave_rows`); scores are unchanged by the reordering.
        RoPE scaling (``config.rope_parameters``, or the older ``config.rope_scaling``) is
        carried over (:func:`rope_scaling_from_config`); a configuration the course cannot
        reproduce raises ``ValueError`` naming the field.
        """
        cfg = attn.config
        H, N, R = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") or getattr(
            cfg, "rope_theta", 10000.0)
        eps = attn.kv_a_layernorm.variance_epsilon
        new = cls(cfg.hidden_size, H, kv_lora_rank=cfg.kv_lora_rank, qk_nope_head_dim=N,
                  qk_rope_head_dim=R, v_head_dim=cfg.v_head_dim, q_lora_rank=cfg.q_lora_rank,
                  rope_base=float(theta), rope_scaling=rope_scaling_from_config(cfg),
                  norm_eps=eps)
        state = {k: v.detach().clone() for k, v in attn.state_dict().items()}
        if any(k.endswith(".bias") for k in state):
            raise ValueError("from_transformers supports attention_bias=False only")
        if getattr(cfg, "rope_interleave", "deepseek_v2" in cfg.model_type):
            q_name = "q_proj.weight" if cfg.q_lora_rank is None else "q_b_proj.weight"
            state[q_name] = deinterleave_rows(state[q_name], H, N, R)
            w = state["kv_a_proj_with_mqa.weight"]
            state["kv_a_proj_with_mqa.weight"] = torch.cat(
                [w[:cfg.kv_lora_rank], deinterleave_rows(w[cfg.kv_lora_rank:], 1, 0, R)])
        new.load_state_dict(state)
        p = next(attn.parameters())
        return new.to(device=p.device, dtype=p.dtype)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"q_lora_rank={self.q_lora_rank}, kv_lora_rank={self.kv_lora_rank}, "
                f"qk_nope_head_dim={self.qk_nope_head_dim}, "
                f"qk_rope_head_dim={self.qk_rope_head_dim}, v_head_dim={self.v_head_dim}"
                + (f", rope_scaling={self.rope_scaling}" if self.rope_scaling else ""))


#: the rope_scaling keys the course reads (positions.scaled_rope_frequencies, softmax_mscale)
_ROPE_KEYS = {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
              "attention_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow",
              "truncate", "low_freq_factor", "high_freq_factor", "partial_rotary_factor"}
#: transformers' types the course reproduces: "dynamic" is refused (transformers' dynamic NTK
#: is stateful: its table grows with the longest sequence a module has seen, from
#: max_position_embeddings), "longrope" and "proportional" are not in the core
_FROM_TRANSFORMERS_TYPES = ("default", "linear", "yarn", "llama3")


def rope_scaling_from_config(cfg) -> dict | None:
    """The course's ``rope_scaling`` for a transformers DeepSeek config (``rope_parameters``,
    or the older ``rope_scaling``), or None for plain RoPE. Raises ``ValueError`` naming the
    field for anything the course would not reproduce exactly."""
    field = "rope_parameters"
    params = getattr(cfg, "rope_parameters", None)
    if params is None:
        field, params = "rope_scaling", getattr(cfg, "rope_scaling", None)
    if params is None:
        return None
    if not isinstance(params, dict) or any(isinstance(v, dict) for v in params.values()):
        raise ValueError(f"from_transformers needs config.{field} as one flat dict, got "
                         f"{params!r}")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in _FROM_TRANSFORMERS_TYPES:
        why = (" (transformers' dynamic NTK grows its table with the longest sequence seen)"
               if kind == "dynamic" else
               f" (the course's RoPE scaling has {', '.join(ROPE_TYPES)})")
        raise ValueError(f"from_transformers cannot reproduce config.{field}['rope_type'] = "
                         f"{kind!r}{why}; supported: {', '.join(_FROM_TRANSFORMERS_TYPES)}")
    unknown = sorted(set(params) - _ROPE_KEYS)
    if unknown:
        raise ValueError(f"from_transformers cannot reproduce config.{field} with the keys "
                         f"{unknown} (the course reads {sorted(_ROPE_KEYS)})")
    partial = params.get("partial_rotary_factor", 1.0)
    if partial not in (None, 1, 1.0):
        raise ValueError(f"from_transformers cannot reproduce config.{field}"
                         f"['partial_rotary_factor'] = {partial!r} (MLA rotates all "
                         f"qk_rope_head_dim features)")
    head_dim = getattr(cfg, "head_dim", cfg.qk_rope_head_dim)
    if head_dim != cfg.qk_rope_head_dim:
        raise ValueError(f"from_transformers cannot reproduce config.head_dim = {head_dim} != "
                         f"config.qk_rope_head_dim = {cfg.qk_rope_head_dim} (transformers "
                         f"sizes RoPE scaling by head_dim, MLA rotates qk_rope_head_dim)")
    if kind == "default":            # transformers ignores mscale_all_dim here too
        return None
    scaling = {k: v for k, v in params.items()
               if k not in ("rope_theta", "type", "partial_rotary_factor")}
    scaling["rope_type"] = kind
    if kind == "yarn" and scaling.get("factor") is None:   # transformers' yarn: the ratio
        scaling["factor"] = (cfg.max_position_embeddings
                             / scaling["original_max_position_embeddings"])
    return scaling


def mla_cache_bytes(tokens: int, layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
                    bytes_per_element: int = 2, batch: int = 1) -> int:
    """Bytes of an MLA cache: ``layers · (r + R) · bytes`` per token (one latent, one shared
    rotary key), times ``tokens`` and ``batch``."""
    return layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element * tokens * batch


__all__ = ["MultiHeadLatentAttention", "deinterleave_rows", "mla_cache_bytes",
           "rope_scaling_from_config"]
