r"""Attention at inference: a key/value cache, one decoding step, and grouped-query helpers.

Autoregressive decoding feeds ``L`` new tokens (usually 1) per step. Their keys and values are
appended to a :class:`KVCache`; the new queries attend to everything cached so far plus
themselves. Because the ``L`` queries are the *last* ``L`` of the ``S`` key positions, the causal
mask of a step is aligned bottom-right (``masks.causal_mask(L, S, align="bottom_right")``); with
``L = 1`` it is all True and no mask is needed.

Shapes follow torch's SDPA: query ``(B, Hq, L, E)``, cached keys/values ``(B, Hkv, S, E|Ev)``.
With grouped-query attention (GQA) ``Hq`` is a multiple of ``Hkv``: query head ``h`` reads
key/value head ``h // (Hq // Hkv)``; multi-query attention (MQA) is ``Hkv = 1``.
"""

from __future__ import annotations

import torch

from .masks import causal_mask, sliding_window_mask
from .registry import IMPLEMENTATIONS, AttentionFn


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(B, Hkv, S, E)`` → ``(B, Hkv·n_rep, S, E)``: each key/value head repeated ``n_rep``
    times *consecutively* (head ``h`` of the result is head ``h // n_rep`` of ``x``), the order
    torch's ``scaled_dot_product_attention(..., enable_gqa=True)`` uses."""
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1, got {n_rep}")
    if x.dim() < 3:
        raise ValueError(f"repeat_kv needs (..., H, S, E), got shape {tuple(x.shape)}")
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=-3)


def kv_cache_bytes(tokens: int, layers: int, kv_heads: int, head_dim: int,
                   bytes_per_element: int = 2, batch: int = 1) -> int:
    """Bytes of a KV cache: ``2 (K and V) · layers · kv_heads · head_dim · bytes`` per token,
    times ``tokens`` and ``batch``."""
    return 2 * layers * kv_heads * head_dim * bytes_per_element * tokens * batch


class KVCache:
    """Keys and values of the tokens seen so far, for one attention layer.

    ``window=None`` keeps every token: storage grows by doubling, so :meth:`append` copies rarely
    and :meth:`view` returns views (no copy). ``window=W`` keeps only the last ``W`` tokens in a
    fixed ring buffer of ``W`` slots (a *rolling* cache): memory stays constant however long the
    generation; :meth:`view` then returns them oldest first.

    ``sinks=n`` (with a window; StreamingLLM's *attention sinks*, Xiao et al.) also keeps the
    first ``n`` tokens for good: the cache holds positions ``0 … n−1`` plus the last ``W`` of
    the later ones, at most ``n + W`` tokens.

    ``seen`` counts every token ever appended; it is the absolute position of the next token
    (the *position offset* of the next step), also after old tokens were evicted.
    """

    def __init__(self, window: int | None = None, capacity: int = 16, *, sinks: int = 0) -> None:
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        if not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an int >= 0, got {sinks!r}")
        if sinks and window is None:
            raise ValueError(f"sinks={sinks} needs a window: without one every token is kept")
        self.window = window
        self.sinks = sinks
        self._capacity0 = max(1, capacity)
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._sink_k: torch.Tensor | None = None
        self._sink_v: torch.Tensor | None = None
        self.seen = 0

    @property
    def _rolled(self) -> int:
        """Tokens that went to the ring (all but the sinks)."""
        return max(0, self.seen - self.sinks)

    def __len__(self) -> int:
        """Tokens currently stored (``min(seen, sinks + window)`` for a rolling cache)."""
        if self.window is None:
            return self.seen
        return min(self.seen, self.sinks) + min(self._rolled, self.window)

    def positions(self) -> torch.Tensor:
        """``(len(self),)`` int64 absolute positions of the stored tokens, in :meth:`view`'s
        order (sinks first, then the window oldest first)."""
        n_sink = min(self.seen, self.sinks)
        start = self.seen - (len(self) - n_sink)
        return torch.cat([torch.arange(n_sink), torch.arange(start, self.seen)])

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values stored (not of the spare capacity)."""
        ref = self._k if self._k is not None else self._sink_k
        ref_v = self._v if self._v is not None else self._sink_v
        if ref is None:
            return 0
        per_k = ref[..., :1, :].numel() * ref.element_size()
        per_v = ref_v[..., :1, :].numel() * ref_v.element_size()
        return len(self) * (per_k + per_v)

    def _allocate(self, k: torch.Tensor, v: torch.Tensor, slots: int) -> None:
        self._k = k.new_empty(*k.shape[:-2], slots, k.shape[-1])
        self._v = v.new_empty(*v.shape[:-2], slots, v.shape[-1])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new keys ``(..., L, E)`` and values ``(..., L, Ev)`` after the cached ones."""
        if k.shape[-2] != v.shape[-2] or k.shape[:-2] != v.shape[:-2]:
            raise ValueError(f"keys {tuple(k.shape)} and values {tuple(v.shape)} must agree on "
                             "all dims but the last")
        ref = self._k if self._k is not None else self._sink_k
        if ref is not None and (k.shape[:-2] != ref.shape[:-2] or k.shape[-1] != ref.shape[-1]):
            raise ValueError(f"new keys {tuple(k.shape)} do not match the cached "
                             f"{tuple(ref.shape[:-2])} + (S, {ref.shape[-1]})")
        L = k.shape[-2]
        if self.window is None:
            n = self.seen
            if self._k is None or n + L > self._k.shape[-2]:
                slots = max(self._capacity0, n + L)
                if self._k is not None:
                    slots = max(slots, 2 * self._k.shape[-2])
                old_k, old_v = self._k, self._v
                self._allocate(k, v, slots)
                if old_k is not None:
                    self._k[..., :n, :] = old_k[..., :n, :]
                    self._v[..., :n, :] = old_v[..., :n, :]
            self._k[..., n:n + L, :] = k
            self._v[..., n:n + L, :] = v
            self.seen += L
            return
        to_sink = max(0, min(L, self.sinks - self.seen))   # the first tokens stay for good
        if to_sink:
            if self._sink_k is None:
                self._sink_k = k.new_empty(*k.shape[:-2], self.sinks, k.shape[-1])
                self._sink_v = v.new_empty(*v.shape[:-2], self.sinks, v.shape[-1])
            self._sink_k[..., self.seen:self.seen + to_sink, :] = k[..., :to_sink, :]
            self._sink_v[..., self.seen:self.seen + to_sink, :] = v[..., :to_sink, :]
        W, rolled = self.window, self._rolled
        if L > to_sink and self._k is None:
            self._allocate(k, v, W)
        keep = min(L - to_sink, W)               # of a long chunk only the last W survive
        for i in range(L - keep, L):
            slot = (rolled + i - to_sink) % W
            self._k[..., slot, :] = k[..., i, :]
            self._v[..., slot, :] = v[..., i, :]
        self.seen += L

    def view(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keys, values)`` stored, oldest first: ``(..., len(self), E)`` and ``(..., ·, Ev)``.

        Empty (zero-length) tensors cannot be made before the first append: that raises."""
        if self._k is None and self._sink_k is None:
            raise ValueError("the cache is empty: append before viewing")
        if self.window is None:
            n = len(self)
            return self._k[..., :n, :], self._v[..., :n, :]
        n_sink = min(self.seen, self.sinks)
        rolled = self._rolled
        k = v = None                              # the window part (None: nothing rolled)
        if self._k is not None and rolled <= self.window:
            k, v = self._k[..., :rolled, :], self._v[..., :rolled, :]
        elif self._k is not None:
            start = rolled % self.window          # the oldest slot
            order = torch.cat([torch.arange(start, self.window), torch.arange(0, start)])
            order = order.to(self._k.device)
            k, v = self._k.index_select(-2, order), self._v.index_select(-2, order)
        if not n_sink:
            return k, v
        sk, sv = self._sink_k[..., :n_sink, :], self._sink_v[..., :n_sink, :]
        if k is None:
            return sk, sv
        return torch.cat([sk, k], dim=-2), torch.cat([sv, v], dim=-2)


def decode_step(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: KVCache,
                attend: str | AttentionFn = "sdpa", *, enable_gqa: bool = False,
                scale: float | None = None) -> torch.Tensor:
    """Attention of ``L`` new tokens over the cache and themselves; appends them to ``cache``.

    ``query (B, Hq, L, E)``, ``key (B, Hkv, L, E)``, ``value (B, Hkv, L, Ev)`` are the new
    tokens' projections (positions already applied). The keys attended are the cached ones
    followed by the new ones (``S = len(cache) + L``) under a bottom-right causal mask (none
    for ``L = 1``), or a bottom-right sliding-window mask if the cache has a window (the
    sinks of a ``KVCache(window, sinks=n)`` stay visible to every query). ``attend``
    is a name from :data:`IMPLEMENTATIONS` or any function with torch's SDPA signature.
    Returns ``(B, Hq, L, Ev)``.
    """
    fn = IMPLEMENTATIONS[attend] if isinstance(attend, str) else attend
    if len(cache):
        k_past, v_past = cache.view()
        k_all, v_all = torch.cat([k_past, key], dim=-2), torch.cat([v_past, value], dim=-2)
    else:
        k_all, v_all = key, value
    L, S = query.shape[-2], k_all.shape[-2]
    if cache.window is not None and cache.sinks:
        q_pos = torch.arange(cache.seen, cache.seen + L, device=query.device)[:, None]
        k_pos = torch.cat([cache.positions(), torch.arange(cache.seen, cache.seen + L)])
        k_pos = k_pos.to(query.device)[None, :]
        mask = (k_pos <= q_pos) & ((k_pos > q_pos - cache.window) | (k_pos < cache.sinks))
        mask = None if bool(mask.all()) else mask
    elif cache.window is not None:
        mask = sliding_window_mask(L, S, cache.window, device=query.device,
                                   align="bottom_right")
        mask = None if bool(mask.all()) else mask
    else:
        mask = None if L == 1 else causal_mask(L, S, device=query.device, align="bottom_right")
    out = fn(query, k_all, v_all, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
    cache.append(key, value)
    return out
