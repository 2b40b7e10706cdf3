"""Chapter 7 (complexity): count the FLOPs and the score-matrix memory of attention."""

from __future__ import annotations

from course_lib.toolkit.checking import Case, Exercise, Mistake

# --------------------------------------------------------------------------- FLOPs


def _flops_cases(gen) -> list[Case]:
    return [Case("n=8, d=64", (8, 64)), Case("n=1024, d=64", (1024, 64)),
            Case("n=7, d=3", (7, 3)), Case("n=1, d=1", (1, 1))]


def attention_flops(n: int, d: int) -> int:
    """FLOPs of QKᵀ and weights·V for one head of n tokens, width d: 2·(2·n·n·d) = 4n²d."""
    scores = 2 * n * n * d          # (n, d) @ (d, n)
    weighted_sum = 2 * n * n * d    # (n, n) @ (n, d)
    return scores + weighted_sum


_FLOAT_COUNT = ("Your count is right but it is a float (a float literal such as 4.0, or a "
                "`/` somewhere): a count of FLOPs or bytes is a whole number. Stay in integer "
                "arithmetic (`*`, `//`) or return int(...).")

ATTENTION_FLOPS = Exercise(
    id="attention_flops",
    chapter="07_complexity",
    title="Count the FLOPs of attention",
    signature="attention_flops(n, d) -> int",
    params=("n", "d"),
    cases=_flops_cases,
    oracle=lambda n, d: 4 * n * n * d,
    solution=attention_flops,
    hints=(
        "Two matrix products: the scores QKᵀ, (n, d) @ (d, n), and the mix weights @ V, "
        "(n, n) @ (n, d). Ignore the softmax and the projections.",
        "A product (a, b) @ (b, c) makes a·c dot products of length b: a·b·c multiply-adds, "
        "and each multiply-add counts as 2 FLOPs.",
        "Each product costs 2·n·n·d FLOPs: return 4 * n * n * d",
    ),
    mistakes=(
        Mistake("half_count", "Your count is exactly half the right one: either a multiply-add "
                "was counted as 1 FLOP instead of 2, or only QKᵀ was counted and weights·V "
                "forgotten. Each of the two products costs 2·n²·d.", lambda n, d: 2 * n * n * d),
        Mistake("quarter_count", "Your count is a quarter of the right one: count both products "
                "(QKᵀ and weights·V), each multiply-add as 2 FLOPs.", lambda n, d: n * n * d),
        Mistake("included_projections", "You also counted the Q, K, V and output projections "
                "(4 · 2·n·d²). This exercise asks only for QKᵀ and weights·V.",
                lambda n, d: 4 * n * n * d + 8 * n * d * d),
        Mistake("included_qkv_projections", "You also counted the Q, K, V projections "
                "(3 · 2·n·d²). This exercise asks only for QKᵀ and weights·V.",
                lambda n, d: 4 * n * n * d + 6 * n * d * d),
        Mistake("linear_in_n", "Your count grows linearly with n; attention compares every "
                "token with every token, so it grows as n².", lambda n, d: 4 * n * d),
        Mistake("n_and_d_swapped", "Your count grows as n·d² instead of n²·d. QKᵀ is "
                "(n, d) @ (d, n): n·n dot products of length d, 2·n²·d FLOPs; weights·V is "
                "(n, n) @ (n, d), 2·n²·d again.", lambda n, d: 4 * n * d * d),
        *(Mistake(f"included_softmax_{k}", "You also counted the softmax (a few operations per "
                  "score: max, subtract, exp, sum, divide). This exercise counts only the two "
                  "matrix products QKᵀ and weights·V: drop it.",
                  lambda n, d, k=k: 4 * n * n * d + k * n * n, family="included_softmax")
          for k in range(1, 6)),
        Mistake("float_count", _FLOAT_COUNT, lambda n, d: float(4 * n * n * d)),
    ),
)

# --------------------------------------------------------------------------- memory


def _memory_cases(gen) -> list[Case]:
    return [Case("n=1024, defaults", (1024,)), Case("n=512, 8 heads", (512, 8)),
            Case("n=100, 12 heads, 2 bytes", (100, 12, 2)), Case("n=7, 3 heads, 8 bytes",
                                                                   (7, 3, 8))]


def attention_memory(n: int, heads: int = 1, bytes_per_element: int = 4) -> int:
    """Bytes of the score matrices: one (n, n) matrix per head."""
    return heads * n * n * bytes_per_element


ATTENTION_MEMORY = Exercise(
    id="attention_memory",
    chapter="07_complexity",
    title="Memory of the score matrices",
    signature="attention_memory(n, heads=1, bytes_per_element=4) -> int (bytes)",
    params=("n", "heads", "bytes_per_element"),
    cases=_memory_cases,
    oracle=lambda n, heads=1, bytes_per_element=4: heads * n * n * bytes_per_element,
    solution=attention_memory,
    hints=(
        "Each head materialises its own score matrix: one score per (query, key) pair.",
        "One head holds n·n numbers; each number takes bytes_per_element bytes.",
        "return heads * n * n * bytes_per_element",
    ),
    mistakes=(
        Mistake("forgot_heads", "You counted a single score matrix: every head has its own, "
                "multiply by heads.", lambda n, heads=1, b=4: n * n * b),
        Mistake("bits_not_bytes", "Your answer is 8 times too large: bytes_per_element is "
                "already in bytes, do not multiply by 8 (bits).",
                lambda n, heads=1, b=4: 8 * heads * n * n * b),
        Mistake("linear_in_n", "Your count grows linearly with n; a score matrix has n × n "
                "entries.", lambda n, heads=1, b=4: heads * n * b),
        Mistake("elements_not_bytes", "You counted the entries of the score matrices, not their "
                "bytes: multiply by bytes_per_element.", lambda n, heads=1, b=4: heads * n * n),
        Mistake("scores_and_weights", "You counted two matrices per head (the scores and the "
                "softmax weights). The exercise asks for the score matrices: one (n, n) matrix "
                "per head (the weights can overwrite the scores in place).",
                lambda n, heads=1, b=4: 2 * heads * n * n * b),
    ),
)

# --------------------------------------------------------------------------- one whole layer


def _layer_cases(gen) -> list[Case]:
    return [Case("n=1000, d_model=512", (1000, 512)), Case("n=8, d_model=64", (8, 64)),
            Case("n=3, d_model=5", (3, 5)), Case("n=4096, d_model=768", (4096, 768))]


def layer_flops(n: int, d_model: int) -> int:
    """FLOPs of one self-attention layer on n tokens of model width D (any number of heads):
    the Q, K, V projections, QKᵀ, weights·V and the output projection W_O."""
    qkv = 3 * 2 * n * d_model * d_model     # X @ W_Q, X @ W_K, X @ W_V: (n, D) @ (D, D) each
    scores = 2 * n * n * d_model            # Q Kᵀ, all heads together: H · 2·n·n·E
    mix = 2 * n * n * d_model               # weights @ V, all heads together
    out = 2 * n * d_model * d_model         # concatenated heads @ W_O
    return qkv + scores + mix + out


def _layer(n: int, d: int) -> int:
    return 8 * n * d * d + 4 * n * n * d


LAYER_FLOPS = Exercise(
    id="layer_flops",
    chapter="07_complexity",
    title="Count the FLOPs of a whole attention layer",
    signature="layer_flops(n, d_model) -> int",
    params=("n", "d_model"),
    cases=_layer_cases,
    oracle=_layer,
    solution=layer_flops,
    hints=(
        "Four matrix products by weights (W_Q, W_K, W_V on the input, W_O on the concatenated "
        "heads) and two products between tokens (QKᵀ and weights·V). Heads split the width D "
        "into H pieces of E = D/H, so the heads together cost what one head of width D would.",
        "A product (a, b) @ (b, c) costs 2·a·b·c FLOPs. Each projection is (n, D) @ (D, D); "
        "QKᵀ over all heads is H · (n, E) @ (E, n).",
        "return 4 * 2 * n * d_model**2 + 2 * 2 * n * n * d_model",
    ),
    mistakes=(
        Mistake("forgot_w_o", "You left out the output projection W_O: the concatenated heads "
                "are multiplied by a (D, D) matrix, one more 2·n·D² FLOPs.",
                lambda n, d: _layer(n, d) - 2 * n * d * d),
        Mistake("multiply_add_as_one", "Your count is exactly half the right one: a "
                "multiply-add is 2 FLOPs (one multiplication, one addition).",
                lambda n, d: _layer(n, d) // 2),
        Mistake("forgot_pv", "You left out the product of the weights with V: after the "
                "softmax, (n, n) @ (n, E) per head, 2·n²·D FLOPs for all heads.",
                lambda n, d: _layer(n, d) - 2 * n * n * d),
        Mistake("core_only", "You counted only QKᵀ and weights·V; the layer also has the four "
                "projections W_Q, W_K, W_V and W_O.", lambda n, d: 4 * n * n * d),
        Mistake("projections_only", "You counted only the four projections; the layer also "
                "compares every token with every other (QKᵀ) and mixes the values "
                "(weights·V).", lambda n, d: 8 * n * d * d),
        Mistake("included_mlp", "You also counted the MLP (two (D, 4D) products, 16·n·D²). It "
                "follows the attention layer in a transformer block but is not part of it: "
                "count W_Q, W_K, W_V, QKᵀ, weights·V and W_O only.",
                lambda n, d: _layer(n, d) + 16 * n * d * d),
        Mistake("included_softmax", "You also counted the softmax (exp, sum and divide per "
                "score). Its O(n²) element-wise work is small next to the matrix products and "
                "this exercise counts only the six products: drop it.",
                lambda n, d: _layer(n, d) + 3 * n * n),
        Mistake("included_softmax_with_max", "You also counted the softmax (max, subtract, exp, "
                "sum and divide per score). This exercise counts only the six matrix products: "
                "drop it.", lambda n, d: _layer(n, d) + 5 * n * n),
        Mistake("included_biases", "You also counted the biases of the four projections "
                "(n·D additions each). This exercise counts only the six matrix products "
                "(bias-free projections, as in most modern models): drop them.",
                lambda n, d: _layer(n, d) + 4 * n * d),
        Mistake("fused_qkv_as_one", "You counted the fused Q, K, V projection as one (D, D) "
                "product. It is (n, D) @ (D, 3D): three products' worth, 3 · 2·n·D² FLOPs, plus "
                "2·n·D² for W_O.", lambda n, d: 4 * n * d * d + 4 * n * n * d),
        Mistake("float_count", _FLOAT_COUNT, lambda n, d: float(_layer(n, d))),
    ),
)
