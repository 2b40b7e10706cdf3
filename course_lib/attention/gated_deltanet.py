r"""A Gated DeltaNet layer as Qwen3-Next builds it around the gated delta rule (:mod:`.delta_rule`).

.. math:: q, k, v = \mathrm{SiLU}(\mathrm{conv}_4(X[W_q; W_k; W_v])),\quad
          \beta = \sigma(XW_b),\quad g = -e^{A}\,\mathrm{softplus}(XW_a + \Delta),

          o = \big(\mathrm{RMSNorm}(\mathrm{GDR}(\hat q, \hat k, v, g, \beta))
          \odot \mathrm{SiLU}(XW_z)\big) W_o

with :math:`\hat q, \hat k` L2-normalised per head, a causal depthwise convolution of width 4
over time, a decay per head and token from a softplus "time step" (Mamba 2's
parametrisation) and an output gate ``z``. Value heads may outnumber key heads (``Hv = r·Hk``:
query and key head ``h`` serve value heads ``h·r … h·r + r − 1``). The state per layer is
``Hv·Ek·Ev`` numbers and the convolution's last ``3`` inputs, whatever the context length.
Input ``(B, L, D)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .delta_rule import gated_delta_rule_chunked, gated_delta_rule_recurrent


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / √(Σ x² + eps)`` over the last dim (the FLA library's form, Qwen3-Next's)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet mixer: ``num_k_heads`` query/key heads of width ``key_dim``,
    ``num_v_heads`` value heads of width ``value_dim``; ``mode`` ``"chunked"`` or
    ``"recurrent"`` picks the form of the delta rule (same result)."""

    def __init__(self, embed_dim: int, num_k_heads: int, num_v_heads: int, key_dim: int,
                 value_dim: int, *, conv_kernel: int = 4, norm_eps: float = 1e-6,
                 chunk_size: int = 64) -> None:
        super().__init__()
        if num_v_heads % num_k_heads:
            raise ValueError(f"num_k_heads={num_k_heads} must divide num_v_heads={num_v_heads}")
        self.embed_dim, self.num_k_heads, self.num_v_heads = embed_dim, num_k_heads, num_v_heads
        self.key_dim, self.value_dim, self.chunk_size = key_dim, value_dim, chunk_size
        self.norm_eps = norm_eps
        Hk, Hv = num_k_heads, num_v_heads
        self.q_proj = nn.Linear(embed_dim, Hk * key_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, Hk * key_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, Hv * value_dim, bias=False)
        self.z_proj = nn.Linear(embed_dim, Hv * value_dim, bias=False)
        self.b_proj = nn.Linear(embed_dim, Hv, bias=False)
        self.a_proj = nn.Linear(embed_dim, Hv, bias=False)
        channels = 2 * Hk * key_dim + Hv * value_dim
        self.conv_weight = nn.Parameter(torch.randn(channels, conv_kernel) / conv_kernel)
        self.A_log = nn.Parameter(torch.zeros(Hv))
        self.dt_bias = nn.Parameter(torch.ones(Hv))
        self.norm_weight = nn.Parameter(torch.ones(value_dim))
        self.out_proj = nn.Linear(Hv * value_dim, embed_dim, bias=False)

    def _conv(self, x: torch.Tensor) -> torch.Tensor:
        """Causal depthwise convolution over time, then SiLU: ``(B, L, C)`` → ``(B, L, C)``."""
        K = self.conv_weight.shape[1]
        y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), self.conv_weight[:, None],
                     groups=x.shape[-1])
        return F.silu(y).transpose(1, 2)

    def forward(self, x: torch.Tensor, mode: str = "chunked") -> torch.Tensor:
        """``x (B, L, D)`` → ``(B, L, D)``."""
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must have shape (B, L, D) with D={self.embed_dim}, got "
                             f"{tuple(x.shape)}")
        if mode not in ("chunked", "recurrent"):
            raise ValueError(f"mode must be 'chunked' or 'recurrent', got {mode!r}")
        B, L, _ = x.shape
        Hk, Hv, Ek, Ev = self.num_k_heads, self.num_v_heads, self.key_dim, self.value_dim
        mixed = self._conv(torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1))
        q, k, v = mixed.split([Hk * Ek, Hk * Ek, Hv * Ev], dim=-1)
        q, k = (l2_normalize(t.view(B, L, Hk, Ek)).repeat_interleave(Hv // Hk, dim=2)
                .transpose(1, 2) for t in (q, k))                       # (B, Hv, L, Ek)
        v = v.view(B, L, Hv, Ev).transpose(1, 2)
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)              # (B, Hv, L)
        g = (-self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)).transpose(1, 2)
        if mode == "chunked":
            o, _ = gated_delta_rule_chunked(q, k, v, g, beta, chunk_size=self.chunk_size)
        else:
            o, _ = gated_delta_rule_recurrent(q, k, v, g, beta)
        o = o.transpose(1, 2)                                             # (B, L, Hv, Ev)
        z = self.z_proj(x).view(B, L, Hv, Ev)
        o = F.rms_norm(o, (Ev,), self.norm_weight, self.norm_eps) * F.silu(z)
        return self.out_proj(o.reshape(B, L, Hv * Ev))

    def state_numbers(self) -> int:
        """Numbers kept between tokens: the delta-rule states and the convolution's inputs."""
        K = self.conv_weight.shape[1]
        return self.num_v_heads * self.key_dim * self.value_dim + \
            self.conv_weight.shape[0] * (K - 1)

    @classmethod
    def from_transformers(cls, layer: nn.Module) -> GatedDeltaNet:
        """Copy a transformers ``Qwen3NextGatedDeltaNet``: its ``in_proj_qkvz`` and
        ``in_proj_ba`` hold, per key head, ``[q, k, v·r, z·r]`` and ``[b·r, a·r]`` rows."""
        Hk, Hv = layer.num_k_heads, layer.num_v_heads
        Ek, Ev, r = layer.head_k_dim, layer.head_v_dim, Hv // Hk
        new = cls(layer.hidden_size, Hk, Hv, Ek, Ev, conv_kernel=layer.conv_kernel_size,
                  norm_eps=layer.layer_norm_epsilon)
        w = layer.in_proj_qkvz.weight.detach().view(Hk, 2 * Ek + 2 * r * Ev, -1)
        q, k, v, z = w.split([Ek, Ek, r * Ev, r * Ev], dim=1)
        ba = layer.in_proj_ba.weight.detach().view(Hk, 2 * r, -1)
        b, a = ba.split([r, r], dim=1)
        state = {"q_proj.weight": q, "k_proj.weight": k, "v_proj.weight": v,
                 "z_proj.weight": z, "b_proj.weight": b, "a_proj.weight": a}
        state = {name: t.reshape(-1, t.shape[-1]).clone() for name, t in state.items()}
        state.update({"conv_weight": layer.conv1d.weight.detach()[:, 0].clone(),
                      "A_log": layer.A_log.detach().clone(),
                      "dt_bias": layer.dt_bias.detach().clone(),
                      "norm_weight": layer.norm.weight.detach().clone(),
                      "out_proj.weight": layer.out_proj.weight.detach().clone()})
        new = new.to(dtype=layer.out_proj.weight.dtype)
        new.load_state_dict(state)
        return new


__all__ = ["GatedDeltaNet", "l2_normalize"]
