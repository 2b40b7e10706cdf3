"""Chapter 4 (multi-head): ``split_heads``, ``merge_heads``, ``multi_head_attention``."""

from __future__ import annotations

import math

import torch

from course_lib.attention import reference
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import choice_probe, scale_probe


def _r(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32,
       s: float = 1.0) -> torch.Tensor:
    return s * torch.randn(*shape, generator=gen, dtype=dtype)


# --------------------------------------------------------------------------- split_heads


def _split_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("3 heads of width 4", (_r(gen, 2, 5, 12), 3)),
        Case("float64, 2 heads of width 3", (_r(gen, 1, 7, 6, dtype=torch.float64), 2)),
        Case("4 heads of width 2", (_r(gen, 3, 4, 8), 4)),
        Case("one head", (_r(gen, 2, 3, 5), 1)),
    ]


def _split_oracle(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, L, HD = x.shape
    return x.reshape(B, L, num_heads, HD // num_heads).transpose(1, 2).clone()


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, H·E) -> (B, H, L, E): head h gets features h·E ... (h+1)·E - 1 of every token."""
    B, L, D = x.shape
    x = x.reshape(B, L, num_heads, D // num_heads)   # cut the features
    return x.permute(0, 2, 1, 3)                     # (B, H, L, E)


def _split_no_permute(x, num_heads):
    B, L, HD = x.shape
    return x.reshape(B, num_heads, L, HD // num_heads)


def _split_wrong_order(x, num_heads):
    B, L, HD = x.shape
    return x.reshape(B, L, HD // num_heads, num_heads).permute(0, 3, 1, 2)


def _split_no_transpose(x, num_heads):
    B, L, HD = x.shape
    return x.reshape(B, L, num_heads, HD // num_heads)


def _split_count_as_width(x, num_heads):
    B, L, HD = x.shape
    return x.reshape(B, L, HD // num_heads, num_heads).transpose(1, 2)


SPLIT_HEADS = Exercise(
    id="split_heads",
    chapter="04_multi_head",
    title="Split the features into heads",
    signature="split_heads(x (B, L, H·E), num_heads) -> (B, H, L, E)",
    params=("x", "num_heads"),
    cases=_split_cases,
    oracle=_split_oracle,
    solution=split_heads,
    hints=(
        "Head h owns a contiguous slice of each token's features: h·E to (h+1)·E, "
        "E = x.shape[-1] // num_heads.",
        "First reshape to (B, L, H, E) (that cuts each token's features into H slices), then "
        "move the head axis in front of the token axis.",
        "return x.reshape(B, L, num_heads, E).transpose(1, 2)",
    ),
    mistakes=(
        Mistake("reshape_without_permute", "You reshaped straight to (B, H, L, E). The shape is "
                "right but the numbers are scrambled: a reshape keeps memory order, so a 'head' "
                "gets features of different tokens. Reshape to (B, L, H, E), then "
                "transpose(1, 2).", _split_no_permute),
        Mistake("wrong_head_order", "You cut the features as (E, H) instead of (H, E): head h "
                "should get the contiguous slice h·E ... (h+1)·E - 1, so reshape to "
                "(B, L, H, E).", _split_wrong_order),
        Mistake("missing_transpose", "You returned (B, L, H, E): move the head axis before the "
                "token axis with .transpose(1, 2).", _split_no_transpose),
        Mistake("count_as_width", "You cut each token's features into pieces of width "
                "num_heads (x.split(n) takes the size of the pieces, not their number), so you "
                "got D / num_heads heads of width num_heads. Heads are num_heads pieces of "
                "width E = D // num_heads: x.chunk(num_heads, -1), or reshape to (B, L, H, E).",
                _split_count_as_width),
    ),
)

# --------------------------------------------------------------------------- merge_heads


def _merge_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("3 heads of width 4", (_r(gen, 2, 3, 5, 4),)),
        Case("float64, 2 heads of width 3", (_r(gen, 1, 2, 7, 3, dtype=torch.float64),)),
        Case("4 heads of width 2", (_r(gen, 3, 4, 6, 2),)),
        Case("one head", (_r(gen, 2, 1, 3, 5),)),
    ]


def _merge_oracle(x: torch.Tensor) -> torch.Tensor:
    B, H, L, E = x.shape
    return x.transpose(1, 2).reshape(B, L, H * E).clone()


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, E) -> (B, L, H·E): the inverse of split_heads."""
    B, H, L, E = x.shape
    x = x.permute(0, 2, 1, 3)                        # (B, L, H, E)
    return x.reshape(B, L, H * E)                    # copies: not contiguous


def _merge_no_permute(x):
    B, H, L, E = x.shape
    return x.reshape(B, L, H * E)


def _merge_wrong_order(x):
    B, H, L, E = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * E)


def _merge_along_tokens(x):
    B, H, L, E = x.shape
    return x.reshape(B, H * L, E)


def _merge_wrong_axes(x):
    B, H, L, E = x.shape
    return x.transpose(2, 3).reshape(B, L, H * E)


MERGE_HEADS = Exercise(
    id="merge_heads",
    chapter="04_multi_head",
    title="Merge the heads back",
    signature="merge_heads(x (B, H, L, E)) -> (B, L, H·E)",
    params=("x",),
    cases=_merge_cases,
    oracle=_merge_oracle,
    solution=merge_heads,
    hints=(
        "merge_heads undoes split_heads: token n's output is head 0's E features, then head "
        "1's, and so on.",
        "Bring the token axis back in front of the head axis first, then glue the last two "
        "axes together with a reshape.",
        "return x.transpose(1, 2).reshape(B, L, H * E)",
    ),
    mistakes=(
        Mistake("reshape_without_permute", "You reshaped (B, H, L, E) straight to (B, L, H·E): "
                "a reshape keeps memory order, so tokens and heads get mixed up. First "
                ".transpose(1, 2) to (B, L, H, E), then reshape.", _merge_no_permute),
        Mistake("wrong_head_order", "You interleaved the heads feature by feature. Each token's "
                "output is head 0's E features, then head 1's...: transpose(1, 2) to "
                "(B, L, H, E), then reshape.", _merge_wrong_order),
        Mistake("along_tokens", "You put the heads one after the other along the token axis "
                "(B, H·L, E). Each token keeps its place; its heads' features are glued "
                "together: (B, L, H·E), e.g. torch.cat([x[:, h] for h in range(H)], dim=-1).",
                _merge_along_tokens),
        Mistake("transposed_wrong_axes", "You swapped the last two axes (tokens and features) "
                "before the reshape. The axes to swap are heads and tokens: "
                "x.transpose(1, 2) gives (B, L, H, E), then reshape to (B, L, H·E).",
                _merge_wrong_axes),
    ),
)

# --------------------------------------------------------------------------- multi-head attention


def _mha_cases(gen: torch.Generator) -> list[Case]:
    def weights(D: int, dtype: torch.dtype = torch.float32):
        return (_r(gen, D, 3 * D, dtype=dtype, s=1 / math.sqrt(D)),
                _r(gen, D, D, dtype=dtype, s=1 / math.sqrt(D)))

    f64 = torch.float64
    return [
        Case("3 heads", (_r(gen, 2, 5, 12), *weights(12), 3)),
        Case("float64, 2 heads", (_r(gen, 1, 7, 8, dtype=f64), *weights(8, f64), 2)),
        Case("4 heads of width 4", (_r(gen, 2, 6, 16, s=2.0), *weights(16), 4)),
        Case("one head", (_r(gen, 1, 4, 6), *weights(6), 1)),
    ]


def _mha_oracle(x, w_qkv, w_o, num_heads):
    dtype = x.dtype
    x, w_qkv, w_o = x.double(), w_qkv.double(), w_o.double()
    B, L, D = x.shape
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, L, num_heads, D // num_heads).transpose(1, 2) for t in (q, k, v))
    out = reference.scaled_dot_product_attention(q, k, v)          # (B, H, L, E)
    return (out.transpose(1, 2).reshape(B, L, D) @ w_o).to(dtype)


def multi_head_attention(x: torch.Tensor, w_qkv: torch.Tensor, w_o: torch.Tensor,
                         num_heads: int) -> torch.Tensor:
    """Multi-head self-attention: x (B, L, D) -> (B, L, D), heads of width E = D / H."""
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)   # split heads
               for t in (x @ w_qkv).split(D, dim=-1))            # (B, H, L, E)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)     # (B, H, L, L)
    heads = torch.softmax(scores, dim=-1) @ v           # (B, H, L, E)
    merged = heads.permute(0, 2, 1, 3).reshape(B, L, D)  # merge heads: (B, L, D)
    return merged @ w_o


def _mha(x, w_qkv, w_o, num_heads, *, project=True, permute=True, scale_width=None, heads=None,
         merge_permute=None, dim=-1, per_head_qkv=False, causal=False):
    B, L, D = x.shape
    H = num_heads if heads is None else heads
    E = D // H
    if per_head_qkv:   # columns read as [q_0 k_0 v_0 | q_1 k_1 v_1 | ...]
        q, k, v = (t.reshape(B, L, D) for t in
                   (x @ w_qkv).reshape(B, L, H, 3 * E).split(E, dim=-1))
    else:
        q, k, v = (x @ w_qkv).split(D, dim=-1)
    if permute:
        q, k, v = (t.reshape(B, L, H, E).transpose(1, 2) for t in (q, k, v))
    else:
        q, k, v = (t.reshape(B, H, L, E) for t in (q, k, v))
    width = E if scale_width is None else scale_width
    s = q @ k.transpose(-2, -1) / math.sqrt(width)
    if causal:
        s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    w = torch.softmax(s, dim=dim)
    o = w @ v
    merge_permute = permute if merge_permute is None else merge_permute
    merged = o.transpose(1, 2).reshape(B, L, D) if merge_permute else o.reshape(B, L, D)
    return merged @ w_o if project else merged


def _mha_no_projection(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, project=False)


def _mha_no_permute(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, permute=False)


def _mha_split_no_permute(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, permute=False, merge_permute=True)


def _mha_merge_no_permute(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, merge_permute=False)


def _mha_softmax_over_queries(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, dim=-2)


def _mha_qkv_per_head(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, per_head_qkv=True)


def _mha_scale_D(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, scale_width=x.shape[-1])


def _mha_one_head(x, w_qkv, w_o, num_heads):
    return _mha(x, w_qkv, w_o, num_heads, heads=1)


_MHA_NO_PERMUTE = ("You split or merged the heads with a plain reshape between (B, L, D) and "
                   "(B, H, L, E): that mixes tokens between heads. Split: reshape to "
                   "(B, L, H, E) then transpose(1, 2); merge: transpose(1, 2) back, then "
                   "reshape to (B, L, D).")

MULTI_HEAD_ATTENTION = Exercise(
    id="multi_head_attention",
    tolerances={torch.float32: (1e-4, 1e-3)},  # float32 attention: exp amplifies rounding
    chapter="04_multi_head",
    title="Multi-head self-attention",
    signature="multi_head_attention(x (B, L, D), w_qkv (D, 3D), w_o (D, D), num_heads) "
              "-> (B, L, D)",
    params=("x", "w_qkv", "w_o", "num_heads"),
    cases=_mha_cases,
    oracle=_mha_oracle,
    probes=(
        scale_probe(
            lambda f, *a: _mha(*a, scale_width=f ** -2),
            lambda x, w_qkv, w_o, H: (x.shape[-1] // H) ** -0.5,
            {"1/√D": lambda x, *a: x.shape[-1] ** -0.5,
             "1/√H": lambda x, w_qkv, w_o, H: H ** -0.5,
             "1/E": lambda x, w_qkv, w_o, H: H / x.shape[-1], "1": lambda *a: 1.0},
            "1/√E", "Each head attends on its own E = D / num_heads features: scale its scores "
            "by 1/√E, the head's width.", "04_multi_head: The math"),
        choice_probe(
            "causal_mask_applied", lambda change, *a: _mha(*a, **change),
            {"causal": {"causal": True}},
            {"causal": "multi-head attention under a causal mask"},
            "This exercise has no mask: every token attends to every token (an encoder's "
            "self-attention). Leave the scores unmasked.", "04_multi_head: The math"),
    ),
    solution=multi_head_attention,
    hints=(
        "One projection gives q, k and v at once: (x @ w_qkv).split(D, dim=-1). Then split "
        "each into heads (B, H, L, E) with E = D // num_heads.",
        "Each head does scaled dot-product attention on its own E features, scaled by 1/√E "
        "(the head width, not D). Merge the heads back to (B, L, D) and apply w_o.",
        "q, k, v = (t.reshape(B, L, H, E).transpose(1, 2) for t in (x @ w_qkv).split(D, -1)); "
        "w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), -1); "
        "return (w @ v).transpose(1, 2).reshape(B, L, D) @ w_o",
    ),
    mistakes=(
        Mistake("missing_output_projection", "You forgot the output projection: after merging "
                "the heads back to (B, L, D), multiply by w_o.", _mha_no_projection),
        Mistake("reshape_without_permute", _MHA_NO_PERMUTE, _mha_no_permute),
        Mistake("split_without_permute", _MHA_NO_PERMUTE, _mha_split_no_permute,
                family="reshape_without_permute"),
        Mistake("merge_without_permute", _MHA_NO_PERMUTE, _mha_merge_no_permute,
                family="reshape_without_permute"),
        Mistake("scaled_by_D", "You scaled the scores by 1/√D (the full width). Each head works "
                "on E = D / H features, so divide by √E.", _mha_scale_D),
        Mistake("single_head", "You computed one big head over all D features: split q, k, v "
                "into num_heads heads of width D // num_heads first.", _mha_one_head),
        Mistake("softmax_over_queries", "Your softmax runs over the queries (dim -2). Each "
                "query's weights over the keys must sum to 1: softmax over the last axis.",
                _mha_softmax_over_queries),
        Mistake("qkv_per_head", "You read q, k and v per head from interleaved column blocks "
                "[q k v of head 0 | q k v of head 1 | ...]. Here the columns of w_qkv are "
                "[all of q | all of k | all of v]: split x @ w_qkv into three blocks of D "
                "columns first, then split each into heads.", _mha_qkv_per_head),
    ),
    forbidden=("mha",),     # the exercise is the module: nn.MultiheadAttention may not do it
)
