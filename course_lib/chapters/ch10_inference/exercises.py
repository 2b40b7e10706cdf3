"""Chapter 10 (inference): a cached decoding step, GQA's ``repeat_kv``, the sliding-window mask
and the size of a KV cache."""

from __future__ import annotations

import math

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import Probe, choice_probe, scale_probe

#: The (L, S) masks a step may use, by name: the right one (bottom-right causal) and the slips.
_MASKS = {
    "bottom_right": lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L),
    "top_left": lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(),
    "none": lambda L, S: torch.ones(L, S, dtype=torch.bool),
    "excludes_self": lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L - 1),
    "sees_next": lambda L, S: torch.ones(L, S, dtype=torch.bool).tril(S - L + 1),
    "inverted": lambda L, S: ~torch.ones(L, S, dtype=torch.bool).tril(S - L),
}

_DECODE_SECTION = "10_inference: One cached step: offset, append, attend"
_MLA_SECTION = "10_inference: Compress instead of share: multi-head latent attention"


def _position_probe(model, section: str) -> Probe:
    """Which first position explains the output: 0 (no offset), P ± 1, P ± 2 (``model(start,
    *args)`` rotates the new tokens from ``start(P)``). One diagnosis for every cached step."""
    shifts = {"0 … L-1": lambda P: 0, "P+1 … P+L": lambda P: P + 1,
              "P-1 … P+L-2": lambda P: P - 1, "P+2 … P+L+1": lambda P: P + 2,
              "P-2 … P+L-3": lambda P: P - 2}
    return choice_probe(
        "position_offset", model, shifts,
        {k: f"attention with the new tokens rotated by positions {k} (P cached)"
         for k in shifts},
        "The P cached tokens hold positions 0 … P-1, so the L new ones sit at P … P+L-1: "
        "rotate with rows P:P+L of cos and sin (the offset is the cache's length, read from "
        "its shape).", section,
        ids={"0 … L-1": "no_position_offset", "P+1 … P+L": "positions_off_by_one"})


def _mask_probe(model, section: str) -> Probe:
    """Which mask explains the output (``model(name, *args)``, a name of :data:`_MASKS`)."""
    shows = {"top_left": "attention under a causal mask aligned top-left (j <= i)",
             "none": "attention with no mask at all",
             "excludes_self": "attention under a mask that hides each new token from itself "
                              "(tril(S - L - 1))",
             "sees_next": "attention under a mask that lets each new token see the next one "
                          "(tril(S - L + 1))",
             "inverted": "attention under the inverted mask (True where a key is hidden)"}
    return choice_probe(
        "mask", model, {k: k for k in shows}, shows,
        "The L new queries are the last L of the S = P + L positions: query i may see keys "
        "j <= i + (S - L), itself included. Use the bottom-right causal mask "
        "tril(diagonal=S - L), True where a key may be seen.", section,
        ids={"top_left": "top_left_mask", "none": "no_causal_mask",
             "excludes_self": "mask_excludes_self", "sees_next": "mask_sees_next",
             "inverted": "mask_inverted"})


# --------------------------------------------------------------------------- decode_step


def _decode_cases(gen: torch.Generator) -> list[Case]:
    from course_lib.attention.positions import rope_cache

    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    def case(name, B, P, L, E, note, dtype=torch.float32, D=None):
        D = E if D is None else D          # x's width D, the head's width E
        w = [r(D, E, dtype=dtype) / D ** 0.5 for _ in range(3)]
        cos, sin = rope_cache(32, E, base=100.0, dtype=dtype)
        return Case(name, (r(B, L, D, dtype=dtype), *w, r(B, P, E, dtype=dtype),
                           r(B, P, E, dtype=dtype), cos, sin), note=note)

    return [
        case("one new token", 1, 5, 1, 4, "5 tokens cached, 1 new at position 5"),
        case("a chunk of 3", 2, 4, 3, 4, "4 cached, 3 new at positions 4, 5, 6"),
        case("float64, long cache", 1, 9, 2, 6, "9 cached, 2 new", torch.float64),
        case("empty cache", 1, 0, 4, 4, "the prompt (prefill): nothing cached yet"),
        # drawn last, so the cases above keep their values for every seed
        case("x wider than a head", 2, 3, 2, 4, "D = 8, E = 4: w_q, w_k, w_v are (8, 4)", D=8),
    ]


def _rot(t, cos, sin, P, sign=1.0):
    """RoPE of t (B, L, E) at positions P .. P+L-1 (split halves); ``sign=-1``: backwards."""
    L = t.shape[-2]
    t1, t2 = t.chunk(2, dim=-1)
    return t * cos[P:P + L] + sign * torch.cat([-t2, t1], dim=-1) * sin[P:P + L]


def _decode_oracle(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    from torch.nn.attention.bias import causal_lower_right

    from course_lib.attention.positions import apply_rope
    P, L = k_cache.shape[-2], x.shape[-2]
    q = apply_rope(x @ w_q, cos, sin, offset=P)
    k = torch.cat([k_cache, apply_rope(x @ w_k, cos, sin, offset=P)], -2)
    v = torch.cat([v_cache, x @ w_v], -2)
    out = reference.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=causal_lower_right(L, k.shape[-2]))
    return out.to(x.dtype), k, v


def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    """Project the L new tokens, rotate q and k by positions P..P+L-1 (RoPE), attend over
    cache + new (bottom-right causal); return (out, k_cache extended, v_cache extended)."""
    P, L = k_cache.shape[-2], x.shape[-2]       # P tokens cached, L new ones
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v

    def rope(t):                                # positions P .. P+L-1: the offset is P
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    q, k_new = rope(q), rope(k_new)             # values carry no position
    k = torch.cat([k_cache, k_new], dim=-2)     # append first: a token sees itself
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)  # bottom-right
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v, k, v


def _attend(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0) @ v


def _ds(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin, *, at=lambda P: P, rotate_v=False,
        cache_k=None, mask="bottom_right", before_append=None, rotate_k=True, sign=1.0,
        nan_rows=False, factor=None):
    """The solution with one thing changed: positions start at ``at(P)``, the values rotated
    too, the keys not rotated, a backwards rotation, ``cache_k(x, w_k, k_rot)`` appended
    instead of the rotated keys, another mask, or the queries attending before the append
    (``before_append``: the mask then is ``"none"`` or made for the cache's (L, P) shape,
    ``"bottom_right"``). ``nan_rows``: a query with no allowed key gets NaN (a plain softmax),
    not zeros."""
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_raw, v_new = x @ w_q, x @ w_k, x @ w_v
    q, k_new = _rot(q, cos, sin, at(P), sign), _rot(k_raw, cos, sin, at(P), sign)
    if not rotate_k:
        k_new = k_raw
    if rotate_v:
        v_new = _rot(v_new, cos, sin, at(P), sign)
    k, v = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
    S = k.shape[-2]
    masks = {"bottom_right": torch.ones(L, S, dtype=torch.bool).tril(S - L),
             "top_left": torch.ones(L, S, dtype=torch.bool).tril(), "none": None,
             "cache_length": torch.ones(L, S, dtype=torch.bool).tril(P - L),
             **{k: m(L, S) for k, m in _MASKS.items() if k not in ("none",)}}
    if factor is not None:   # the scale itself: scores q·k times factor
        q = q * (factor * math.sqrt(q.shape[-1]))
    if before_append == "none":
        out = _attend(q, k_cache, v_cache) if P else torch.zeros_like(v_new)
    elif before_append == "bottom_right":
        out = _attend(q, k_cache, v_cache, torch.ones(L, P, dtype=torch.bool).tril(P - L))
    elif nan_rows:
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            ~masks[mask], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
    else:
        out = _attend(q, k, v, masks[mask])
    if cache_k is not None:
        k = torch.cat([k_cache, cache_k(x, w_k, k_new)], -2)
    return out, k, v


def _mistake(**change):
    return lambda *args: _ds(*args, **change)


_BEFORE_APPEND = (
    "Your new queries see only the P keys cached before this step, not their own: you "
    "attended before appending the new keys and values, or built the mask from the cache's "
    "length before the append (tril(P - L) hides every new key). A token must see itself and "
    "the new tokens before it: append first, then attend over all S = P + L keys under "
    "tril(diagonal=S - L), with S read from the extended cache.")

_DECODE_POSITIONS = _position_probe(lambda start, *a: _ds(*a, at=start), _DECODE_SECTION)

DECODE_STEP = Exercise(
    id="decode_step",
    chapter="10_inference",
    title="One decoding step with a KV cache and RoPE",
    signature="decode_step(x (B, L, D), w_q, w_k, w_v (D, E), k_cache, v_cache (B, P, E), "
              "cos, sin (max_len, E)) -> (out (B, L, E), k_cache (B, P+L, E), v_cache)",
    params=("x", "w_q", "w_k", "w_v", "k_cache", "v_cache", "cos", "sin"),
    cases=_decode_cases,
    oracle=_decode_oracle,
    solution=decode_step,
    tolerances={torch.float32: (1e-5, 1e-4)},
    output_names=("out", "k_cache", "v_cache"),
    hints=(
        "P tokens are cached, L are new: q, k, v = x @ w_q, x @ w_k, x @ w_v. The new tokens are "
        "at positions P, ..., P+L-1: rotate q and k (not v) with rows P:P+L of cos and sin, "
        "t * cos + rotate_half(t) * sin, where rotate_half([t1, t2]) = [-t2, t1]. Then append "
        "the rotated keys and the values to the caches.",
        "The queries attend over all S = P + L keys. Query i is at position P + i, so it may "
        "see keys j <= i + (S - L): a causal mask aligned bottom-right, tril(diagonal=S - L).",
        "k = cat([k_cache, rope(x @ w_k)], -2); v = cat([v_cache, x @ w_v], -2); scores = "
        "rope(x @ w_q) @ k.T / √E; mask with torch.ones(L, S).tril(S - L); "
        "return softmax(scores) @ v, k, v",
    ),
    mistakes=(
        # the position probe's own words: one diagnosis of the offset in every cached step
        Mistake("positions_off_by_one", _DECODE_POSITIONS.message("P+1 … P+L"),
                _mistake(at=lambda P: P + 1)),
        Mistake("no_position_offset", _DECODE_POSITIONS.message("0 … L-1"),
                _mistake(at=lambda P: 0)),
        Mistake("positions_on_values", "You rotated the values too. RoPE puts positions into "
                "the scores q · k only: rotate q and k, and append v = x @ w_v unrotated.",
                _mistake(rotate_v=True)),
        Mistake("raw_keys_cached", "You appended the raw inputs x to the key cache, not the "
                "keys. Later steps compare their queries with the cache: append the projected "
                "and rotated keys rope(x @ w_k).", _mistake(cache_k=lambda x, w, kr: x)),
        Mistake("unrotated_keys_cached", "You appended the keys before rotating them. A cached "
                "key is never rotated again: append rope(x @ w_k), rotated by its own "
                "positions P … P+L-1.", _mistake(cache_k=lambda x, w, kr: x @ w)),
        Mistake("top_left_mask", "Your causal mask is aligned top-left (j <= i): the new "
                "query i is at position P + i, not i, so it must see keys j <= i + (S - L). "
                "Align the mask bottom-right: tril(diagonal=S - L) (for one new token it is "
                "all True).", _mistake(mask="top_left")),
        Mistake("attend_before_append", _BEFORE_APPEND, _mistake(before_append="none")),
        Mistake("attend_before_append_masked", _BEFORE_APPEND,
                _mistake(before_append="bottom_right"), family="attend_before_append"),
        # tril(P - L) on the extended (L, P + L) scores hides every new key: the same
        # outputs as a bottom-right mask on the cache before the append, but for the queries
        # left with no key at all (P < L), which a plain softmax turns into NaN
        Mistake("mask_from_cache_length", _BEFORE_APPEND,
                _mistake(mask="cache_length", nan_rows=True), family="attend_before_append"),
        Mistake("keys_not_rotated", "You rotated the queries but not the keys. RoPE turns "
                "both q and k by their positions, so that q · k depends on the distance "
                "between them; the cache holds rotated keys, so rotate the new keys too before "
                "scoring and appending them.", _mistake(rotate_k=False)),
        Mistake("rotated_backwards", "You rotated by -position·θ: the sign of the sin term "
                "is flipped (rotate_half([t1, t2]) is [-t2, t1], not [t2, -t1]). The cached "
                "keys were rotated forwards, so the new q and k must be too.",
                _mistake(sign=-1.0)),
        Mistake("no_causal_mask", "Without a mask, a chunk of several new tokens lets the "
                "earlier ones see the later ones. Mask with a bottom-right causal mask.",
                _mistake(mask="none")),
    ),
    allowed_course_calls=("course_lib.attention.masks.causal_mask",),
    probes=(
        _DECODE_POSITIONS,
        scale_probe(
            lambda f, *a: _ds(*a, factor=f), lambda x, w_q, *a: w_q.shape[-1] ** -0.5,
            {"1/E": lambda x, w_q, *a: 1 / w_q.shape[-1], "1": lambda *a: 1.0,
             "1/√D": lambda x, *a: x.shape[-1] ** -0.5},
            "1/√E", "Scale the scores by 1/√E, E = q.shape[-1] the width of a head (not D, the "
            "width of x), as in every attention of the course: a cached step computes the same "
            "scores as the full pass.", _DECODE_SECTION, ids={"1/√D": "sqrt_of_D"}),
        _mask_probe(lambda name, *a: _ds(*a, mask=name), _DECODE_SECTION),
    ),
)

# --------------------------------------------------------------------------- repeat_kv


def _repeat_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return [
        Case("2 kv heads, 4 query heads each", (r(1, 2, 3, 4), 4), note="8 query heads"),
        Case("float64, batched", (r(2, 3, 5, 2, dtype=torch.float64), 2), note="6 query heads"),
        Case("MQA: 1 kv head", (r(2, 1, 4, 3), 5), note="multi-query attention"),
        Case("n_rep=1", (r(1, 4, 2, 3), 1), note="plain multi-head: nothing to repeat"),
    ]


def repeat_kv(x, n_rep):
    """(B, Hkv, S, E) -> (B, Hkv*n_rep, S, E): head h of the result is kv head h // n_rep."""
    B, Hkv, S, E = x.shape
    x = x[:, :, None].expand(B, Hkv, n_rep, S, E)   # each kv head n_rep times, side by side
    return x.reshape(B, Hkv * n_rep, S, E)


REPEAT_KV = Exercise(
    id="repeat_kv",
    chapter="10_inference",
    title="Share key/value heads (GQA)",
    signature="repeat_kv(x (B, Hkv, S, E), n_rep) -> (B, Hkv·n_rep, S, E)",
    params=("x", "n_rep"),
    cases=_repeat_cases,
    oracle=lambda x, n_rep: x.repeat_interleave(n_rep, dim=1),
    solution=repeat_kv,
    hints=(
        "Query heads come in groups of n_rep consecutive heads; group g reads kv head g. So "
        "query head h must find kv head h // n_rep at index h of the result.",
        "Each kv head must appear n_rep times *in a row*: [k0, k0, k0, k1, k1, k1], not "
        "[k0, k1, k0, k1, ...]. The head dim is dim 1 of (B, Hkv, S, E).",
        "x[:, :, None].expand(B, Hkv, n_rep, S, E).reshape(B, Hkv * n_rep, S, E), or "
        "x.repeat_interleave(n_rep, dim=1)",
    ),
    mistakes=(
        Mistake("tiled", "Your heads are tiled [k0, k1, k0, k1, ...] (x.repeat): query head h "
                "would read kv head h % Hkv. GQA groups consecutive query heads: repeat each "
                "kv head n_rep times in a row (repeat_interleave).",
                lambda x, n: x.repeat(1, n, 1, 1)),
        Mistake("wrong_dim_seq", "You repeated along the sequence dim (-2): the result has "
                "n_rep times more keys, not more heads. Repeat along dim 1, the heads.",
                lambda x, n: x.repeat_interleave(n, dim=-2)),
        Mistake("wrong_dim_batch", "You repeated along the batch dim (0). The heads are dim 1 "
                "of (B, Hkv, S, E).", lambda x, n: x.repeat_interleave(n, dim=0)),
    ),
)

# --------------------------------------------------------------------------- sliding window


def _window_cases(gen: torch.Generator) -> list[Case]:
    return [Case("n=6, window=3", (6, 3)), Case("n=5, window=1", (5, 1), note="itself only"),
            Case("n=8, window=4", (8, 4)),
            Case("n=4, window=10", (4, 10), note="window longer than the sequence: causal")]


def _window_oracle(n: int, window: int) -> torch.Tensor:
    from course_lib.attention.masks import sliding_window_mask
    return sliding_window_mask(n, window=window)


def sliding_window_mask(n, window):
    """(n, n) bool: True where i - window < j <= i (the last `window` keys, itself included)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (j > i - window)


def _sw(n, window, keep):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return keep(i, j, window)


_WINDOW_NOT_CAUSAL = (
    "Your window lets queries see future keys (j > i): a decoder's window looks only back. "
    "Require j <= i as well as j > i - window.")

SLIDING_WINDOW_MASK = Exercise(
    id="sliding_window_mask",
    chapter="10_inference",
    title="The sliding-window mask",
    signature="sliding_window_mask(n, window) -> bool (n, n), True where i - window < j <= i",
    params=("n", "window"),
    cases=_window_cases,
    oracle=_window_oracle,
    solution=sliding_window_mask,
    hints=(
        "Query i may see itself and the window - 1 keys before it: window keys in total, and "
        "never a future key.",
        "Two conditions combined with &: causal (j <= i) and recent (j > i - window). Build "
        "i as a column and j as a row of aranges and let broadcasting make (n, n).",
        "i = torch.arange(n)[:, None]; j = torch.arange(n)[None, :]; "
        "return (j <= i) & (j > i - window)",
    ),
    mistakes=(
        Mistake("off_by_one", "Each query sees window + 1 keys: the window counts the query's "
                "own position, so keep j > i - window (not j >= i - window).",
                lambda n, w: _sw(n, w, lambda i, j, w: (j <= i) & (j >= i - w))),
        Mistake("not_causal", _WINDOW_NOT_CAUSAL,
                lambda n, w: _sw(n, w, lambda i, j, w: (i - j).abs() < w)),
        Mistake("not_causal_one_sided", _WINDOW_NOT_CAUSAL,
                lambda n, w: _sw(n, w, lambda i, j, w: j > i - w), family="not_causal"),
        Mistake("too_short", "Each query sees only window - 1 keys: the window includes the "
                "query itself, so keep j > i - window (not j > i - window + 1).",
                lambda n, w: _sw(n, w, lambda i, j, w: (j <= i) & (j > i - w + 1))),
        Mistake("excludes_self", "Your window leaves out the query itself (j < i): a token "
                "always attends to its own position. Keep i - window < j <= i: the query and "
                "the window - 1 keys before it.",
                lambda n, w: _sw(n, w, lambda i, j, w: (j < i) & (j >= i - w))),
        Mistake("excludes_self_short", "Your window leaves out the query itself (j < i), so "
                "each query sees window - 1 keys, or none at all with window = 1. Keep "
                "i - window < j <= i: the query and the window - 1 keys before it.",
                lambda n, w: _sw(n, w, lambda i, j, w: (j < i) & (j > i - w))),
        Mistake("inverted", "Your mask is inverted: True must mean 'may attend', i.e. True "
                "for i - window < j <= i and False elsewhere (the future and the distant past).",
                lambda n, w: ~_sw(n, w, lambda i, j, w: (j <= i) & (j > i - w))),
    ),
)

# --------------------------------------------------------------------------- cache bytes


def _bytes_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("GQA, 8 kv heads, float16", (4096, 32, 32, 8, 128, torch.float16)),
        Case("MQA, float32", (100, 12, 16, 1, 64, torch.float32)),
        Case("GQA, bfloat16", (7, 3, 6, 2, 5, torch.bfloat16)),
        Case("MHA, float64", (1, 1, 4, 4, 3, torch.float64)),
    ]


def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    """Bytes to cache K and V of `tokens` tokens: 2 · layers · kv_heads · head_dim · bytes."""
    bytes_per_element = torch.finfo(dtype).bits // 8
    return 2 * layers * kv_heads * head_dim * bytes_per_element * tokens


KV_CACHE_BYTES = Exercise(
    id="kv_cache_bytes",
    chapter="10_inference",
    title="How big is the KV cache?",
    signature="kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype) -> int",
    params=("tokens", "layers", "heads", "kv_heads", "head_dim", "dtype"),
    cases=_bytes_cases,
    oracle=lambda t, L, h, kv, d, dt: 2 * L * kv * d * dt.itemsize * t,
    solution=kv_cache_bytes,
    hints=(
        "Every layer stores, for every token, one key and one value vector per key/value head.",
        "Count elements: 2 (K and V) · layers · kv_heads · head_dim per token. Query heads "
        "are never cached. Then multiply by the bytes of one element of dtype.",
        "bytes_per_element = torch.finfo(dtype).bits // 8 (or dtype.itemsize); return "
        "2 * layers * kv_heads * head_dim * bytes_per_element * tokens",
    ),
    mistakes=(
        Mistake("no_factor_two", "Your count is half the right one: the cache holds keys *and* "
                "values, a factor 2.",
                lambda t, L, h, kv, d, dt: L * kv * d * dt.itemsize * t),
        Mistake("query_heads", "You used the number of query heads. Only key/value heads are "
                "cached: with GQA or MQA kv_heads is smaller than heads.",
                lambda t, L, h, kv, d, dt: 2 * L * h * d * dt.itemsize * t),
        Mistake("bits_not_bytes", "Your count is 8 times too large: you multiplied by the bits "
                "of the dtype. One byte is 8 bits: use torch.finfo(dtype).bits // 8.",
                lambda t, L, h, kv, d, dt: 2 * L * kv * d * torch.finfo(dt).bits * t),
        Mistake("two_bytes_hardcoded", "You counted 2 bytes per element whatever the dtype: "
                "right for float16 and bfloat16 only. Use the dtype's size: "
                "torch.finfo(dtype).bits // 8, or dtype.itemsize.",
                lambda t, L, h, kv, d, dt: 2 * L * kv * d * 2 * t),
        Mistake("queries_cached", "You cached the queries too (3 tensors per layer: Q, K, V). "
                "Only keys and values are cached: a new token's query is used once, at its own "
                "step, and never again.",
                lambda t, L, h, kv, d, dt: 3 * L * kv * d * dt.itemsize * t),
        Mistake("query_heads_cached", "You cached the queries too, one vector per query head "
                "(heads + 2·kv_heads per layer). Only keys and values are cached: a new "
                "token's query is used once, at its own step.",
                lambda t, L, h, kv, d, dt: (h + 2 * kv) * L * d * dt.itemsize * t),
        Mistake("ignores_tokens", "Your count is the size for one token: the cache holds K "
                "and V for every token, so multiply by tokens.",
                lambda t, L, h, kv, d, dt: 2 * L * kv * d * dt.itemsize),
        Mistake("float_bytes", "Your count is right but it is a float: "
                "torch.finfo(dtype).bits / 8 is 2.0, not 2 (`/` always gives a float). Use "
                "// 8, or dtype.itemsize, so that the count stays an int.",
                lambda t, L, h, kv, d, dt: 2 * L * kv * d * (torch.finfo(dt).bits / 8) * t),
    ),
)

# --------------------------------------------------------------------------- absorbed MLA step


def _mla_cases(gen: torch.Generator) -> list[Case]:
    from course_lib.attention.positions import rope_cache

    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    def case(name, B, H, P, L, N, R, V, rank, note, dtype=torch.float32):
        cos, sin = rope_cache(32, R, base=100.0, dtype=dtype)
        args = (r(B, H, L, N, dtype=dtype), r(B, H, L, R, dtype=dtype),
                r(B, L, rank, dtype=dtype), r(B, L, R, dtype=dtype),
                r(B, P, rank, dtype=dtype), r(B, P, R, dtype=dtype),
                r(H * (N + V), rank, dtype=dtype) / rank ** 0.5, cos, sin)
        return Case(name, args, note=note)

    return [
        case("one new token", 1, 2, 5, 1, 4, 2, 4, 6, "5 latents cached, 1 new at position 5"),
        case("a chunk of 3", 2, 3, 4, 3, 4, 4, 4, 8, "4 cached, 3 new at positions 4, 5, 6"),
        case("float64, long cache", 1, 2, 9, 2, 6, 4, 6, 10, "9 cached, 2 new",
             torch.float64),
        case("value width != key width", 1, 2, 3, 2, 4, 2, 6, 8, "N = 4, V = 6"),
    ]


def _mla_oracle(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos, sin):
    """Decompress every latent into per-head keys and values (the naive path), in float64."""
    from torch.nn.attention.bias import causal_lower_right

    from course_lib.attention.positions import apply_rope
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    c = torch.cat([c_cache, c_new], -2)
    k_r = torch.cat([k_rope_cache, apply_rope(k_rope_new, cos, sin, offset=P)], -2)
    w = w_kv_b.view(H, -1, c.shape[-1]).double()
    k = torch.cat([torch.einsum("bsr,hnr->bhsn", c.double(), w[:, :N]),
                   k_r.double()[:, None].expand(B, H, -1, R)], -1)
    v = torch.einsum("bsr,hvr->bhsv", c.double(), w[:, N:])
    q = torch.cat([q_nope.double(), apply_rope(q_rope, cos, sin, offset=P).double()], -1)
    out = reference.scaled_dot_product_attention(q, k, v,
                                                 attn_mask=causal_lower_right(L, P + L))
    return out.to(q_nope.dtype), c, k_r


def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    """Rotate the rope parts by positions P..P+L-1, append the latents and rotated keys, attend
    in the latent space (W_UK folded into the query, W_UV applied after), return
    (out (B, H, L, V), c_cache (B, P+L, r), k_rope_cache (B, P+L, R))."""
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]

    def rope(t):                                   # positions P .. P+L-1
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)                  # cache the latent, not K and V
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])                      # per head: [W_UK (N, r); W_UV]
    w_uk, w_uv = w[:, :N], w[:, N:]
    q_lat = q_nope @ w_uk                                    # (B, H, L, r): W_UK absorbed
    scores = (q_lat @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)   # bottom-right
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    out = (p @ c[:, None]) @ w_uv.transpose(-2, -1)          # W_UV after the weighted sum
    return out, c, k_rope


def _mla(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos, sin, *,
         rotate_nope=False, rope_term=True, width=None, cache="latent", swap=False,
         rotate_k=True, up_out=True, mask="bottom_right", layout="per_head", start=None,
         factor=None, rotate_q=True, sign=1.0, axis=-1):
    """The solution with one thing changed (see the mistakes and probes below): ``start(P)``
    the first new position, ``factor`` the scale itself, ``mask`` one of :data:`_MASKS`."""
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    at = P if start is None else start(P)
    rank = c_new.shape[-1]
    V = w_kv_b.shape[0] // H - N
    c = torch.cat([c_cache, c_new], -2)
    k_r = torch.cat([k_rope_cache,
                     _rot(k_rope_new, cos, sin, at, sign) if rotate_k else k_rope_new], -2)
    if layout == "per_head":
        w = w_kv_b.view(H, N + V, rank)
        w_uk, w_uv = w[:, :N], w[:, N:]
    elif layout == "values_first":              # each head's W_UV rows taken first
        w = w_kv_b.view(H, N + V, rank)
        w_uv, w_uk = w[:, :V], w[:, V:]
    elif layout == "heads_inner":               # read as (N + V, H, r): heads the middle axis
        w = w_kv_b.view(N + V, H, rank).transpose(0, 1)
        w_uk, w_uv = w[:, :N], w[:, N:]
    else:                                       # all heads' W_UK rows, then all W_UV rows
        w_uk, w_uv = w_kv_b[:H * N].view(H, N, rank), w_kv_b[H * N:].view(H, V, rank)
    if swap:
        w_uk, w_uv = w_uv, w_uk
    qn = _rot(q_nope, cos, sin, at) if rotate_nope else q_nope
    scores = (qn @ w_uk) @ c[:, None].transpose(-2, -1)
    if rope_term:
        qr = _rot(q_rope, cos, sin, at, sign) if rotate_q else q_rope
        scores = scores + qr @ k_r[:, None].transpose(-2, -1)
    if factor is not None:
        scores = scores * factor
    else:
        scores = scores / math.sqrt(N + R if width is None else width(N, R, rank))
    S = c.shape[-2]
    allowed = _MASKS[mask](L, S)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), axis)
    out = p @ c[:, None]
    if up_out:
        out = out @ w_uv.transpose(-2, -1)
    if cache == "decompressed":
        return out, torch.einsum("bsr,hnr->bhsn", c, w_uk), k_r
    return out, c, k_r


def _mla_mistake(**change):
    return lambda *args: _mla(*args, **change)


MLA_ABSORBED_STEP = Exercise(
    id="mla_absorbed_step",
    chapter="10_inference",
    title="One absorbed decoding step of multi-head latent attention",
    signature="mla_absorbed_step(q_nope (B, H, L, N), q_rope (B, H, L, R), c_new (B, L, r), "
              "k_rope_new (B, L, R), c_cache (B, P, r), k_rope_cache (B, P, R), "
              "w_kv_b (H·(N+V), r), cos, sin (max_len, R)) -> (out (B, H, L, V), "
              "c_cache (B, P+L, r), k_rope_cache (B, P+L, R))",
    params=("q_nope", "q_rope", "c_new", "k_rope_new", "c_cache", "k_rope_cache", "w_kv_b",
            "cos", "sin"),
    cases=_mla_cases,
    oracle=_mla_oracle,
    solution=mla_absorbed_step,
    tolerances={torch.float32: (1e-5, 1e-4)},
    output_names=("out", "c_cache", "k_rope_cache"),
    allowed_course_calls=("course_lib.attention.masks.causal_mask",),
    hints=(
        "The cache holds latents c (B, S, r) and rotated rope keys (B, S, R). Rotate q_rope and "
        "k_rope_new by positions P..P+L-1 (rows P:P+L of cos, sin; the nope parts and the "
        "latents carry no position), append c_new and the rotated keys, then attend over all "
        "S = P + L tokens.",
        "w_kv_b.view(H, N + V, r) holds per head W_UK (its first N rows) and W_UV (the last V). "
        "Head h's key is [W_UK c; k_rope], so q_nope · W_UK c = (q_nope @ W_UK) · c: move the "
        "query into the latent space. The scale is 1/√(N + R), the width of the full key.",
        "q_lat = q_nope @ w_uk; scores = (q_lat @ c.T + rope(q_rope) @ k_rope.T) / √(N + R); "
        "bottom-right causal mask tril(S - L); out = (softmax(scores) @ c) @ w_uv.T",
    ),
    mistakes=(
        Mistake("rope_through_absorption", "You rotated the nope part of the query by its "
                "position before absorbing W_UK. RoPE's rotation depends on the position, and "
                "the latent keys W_UK c were never rotated: no position-dependent turn can pass "
                "through W_UK into the cache. Only the decoupled part carries the position: "
                "rotate q_rope and the rope keys, leave q_nope as it is.",
                _mla_mistake(rotate_nope=True)),
        Mistake("rope_term_dropped", "Your scores leave out the rotary part q_rope · k_rope: "
                "only the nope part is absorbed into the latent space, the shared rotary key "
                "is added on top. Without it the scores carry no position at all.",
                _mla_mistake(rope_term=False)),
        Mistake("scale_without_rope", "You scaled by 1/√N, the width of the nope part only. "
                "The full key of a head is [W_UK c; k_rope], N + R wide: scale by 1/√(N + R).",
                _mla_mistake(width=lambda N, R, rank: N)),
        Mistake("scale_latent_width", "You scaled by 1/√(r + R), the width of the vectors you "
                "attend with in the latent space. Absorbing W_UK rewrites the same scores, so "
                "the scale stays that of the original keys: 1/√(N + R).",
                _mla_mistake(width=lambda N, R, rank: rank + R)),
        Mistake("decompressed_keys_cached", "Your returned cache holds decompressed per-head "
                "keys W_UK c (B, H, S, N), not the latents. Caching the keys undoes what MLA "
                "is for: append c_new to c_cache and keep the cache (B, P+L, r).",
                _mla_mistake(cache="decompressed")),
        Mistake("projections_swapped", "You absorbed W_UV into the query and applied W_UK to "
                "the output. Per head, the first N rows of w_kv_b.view(H, N + V, r) are W_UK "
                "(the keys: they go with the query) and the last V rows W_UV (the values: "
                "after the weighted sum).", _mla_mistake(swap=True)),
        Mistake("keys_then_values_layout", "You took the first H·N rows of w_kv_b as every "
                "head's W_UK. The rows are grouped by head: w_kv_b.view(H, N + V, r), W_UK = "
                "[:, :N], W_UV = [:, N:].", _mla_mistake(layout="keys_then_values")),
        Mistake("rope_keys_not_rotated", "You appended (and scored) the new rope keys without "
                "rotating them. The cache holds rotated rope keys: rotate k_rope_new by "
                "positions P..P+L-1 before appending, as the query's rope part.",
                _mla_mistake(rotate_k=False)),
        Mistake("latent_output", "Your output is the weighted sum of latents (B, H, L, r): "
                "W_UV still has to take it back to the value width, out = (p @ c) @ W_UV.T.",
                _mla_mistake(up_out=False)),
        Mistake("top_left_mask", "Your causal mask is aligned top-left (j <= i): the new "
                "query i is at position P + i, so it must see keys j <= i + (S - L). Use "
                "tril(diagonal=S - L).", _mla_mistake(mask="top_left")),
    ),
    probes=(
        _position_probe(lambda start, *a: _mla(*a, start=start), _MLA_SECTION),
        scale_probe(
            lambda f, *a: _mla(*a, factor=f),
            lambda qn, qr, *a: 1 / math.sqrt(qn.shape[-1] + qr.shape[-1]),
            {"1/√r": lambda qn, qr, c, *a: c.shape[-1] ** -0.5,
             "1/√(r + R)": lambda qn, qr, c, *a: (c.shape[-1] + qr.shape[-1]) ** -0.5,
             "1/√N": lambda qn, *a: qn.shape[-1] ** -0.5,
             "1/√R": lambda qn, qr, *a: qr.shape[-1] ** -0.5,
             "1/(N + R)": lambda qn, qr, *a: 1 / (qn.shape[-1] + qr.shape[-1]),
             "1": lambda *a: 1.0},
            "1/√(N + R)",
            "This exercise scales by 1/√(N + R), the width of a head's full key "
            "[W_UK c; k_rope]: absorbing W_UK rewrites the same scores q · k in the latent "
            "space, so their scale stays that of the original keys, whatever the latent's "
            "width r.", _MLA_SECTION),
        _mask_probe(lambda name, *a: _mla(*a, mask=name), _MLA_SECTION),
        choice_probe(
            "rotation", lambda change, *a: _mla(*a, **change),
            {"q": {"rotate_q": False}, "k": {"rotate_k": False},
             "qk": {"rotate_q": False, "rotate_k": False}, "back": {"sign": -1.0}},
            {"q": "attention with the rope part of the query left unrotated",
             "k": "attention with the new rope keys left unrotated",
             "qk": "attention with neither rope part rotated",
             "back": "attention with q_rope and the new rope keys rotated backwards "
                     "(by -position·θ)"},
            "Rotate both q_rope and k_rope_new forwards by their positions P … P+L-1: "
            "t · cos + rotate_half(t) · sin with rotate_half([t1, t2]) = [-t2, t1]; the "
            "cached rope keys were rotated the same way.", _MLA_SECTION,
            ids={"k": "rope_keys_not_rotated", "back": "rotated_backwards"}),
        choice_probe(
            "softmax_axis", lambda axis, *a: _mla(*a, axis=axis), {"queries": -2},
            {"queries": "attention whose softmax runs over the queries (dim -2)"},
            "Each query's weights over its S keys must sum to 1: softmax over the last dim.",
            _MLA_SECTION, ids={"queries": "softmax_over_queries"}),
        choice_probe(
            "w_kv_b_layout", lambda layout, *a: _mla(*a, layout=layout),
            {"values_first": "values_first", "heads_inner": "heads_inner",
             "stacked": "keys_then_values"},
            {"values_first": "attention with each head's W_UV read from the first V rows of "
                             "its block of w_kv_b and W_UK from the last N",
             "heads_inner": "attention with w_kv_b read as (N + V, H, r), the heads as the "
                            "middle axis",
             "stacked": "attention with w_kv_b read as all heads' W_UK rows, then all heads' "
                        "W_UV rows"},
            "w_kv_b is (H·(N+V), r), head by head: view it as (H, N + V, r); in each head's "
            "block the first N rows are W_UK (keys) and the last V rows W_UV (values).",
            _MLA_SECTION, ids={"values_first": "w_kv_b_split_wrong",
                               "heads_inner": "w_kv_b_split_wrong",
                               "stacked": "w_kv_b_split_wrong"}),
    ),
)
