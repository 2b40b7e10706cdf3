"""Chapter 5 (positions): ``apply_rope`` and ``alibi_bias``.

RoPE uses the split-halves pairing of :mod:`course_lib.attention.positions`: feature ``i`` is
rotated together with feature ``i + E/2``.
"""

from __future__ import annotations

import torch

from course_lib.attention import positions
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._probes import Probe, choice_probe

# --------------------------------------------------------------------------- apply_rope


def _rope_cases(gen: torch.Generator) -> list[Case]:
    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    return [
        Case("batched heads", (r(2, 3, 5, 8),), note="positions 0 ... 4"),
        Case("decoding, offset 7", (r(2, 4, 6), 7), note="positions 7 ... 10"),
        Case("float64, base 100", (r(6, 12, dtype=torch.float64), 3, 100.0),
             note="positions 3 ... 8, base 100"),
        Case("one pair", (r(1, 9, 2), 2), note="E = 2, positions 2 ... 10"),
        Case("wide head", (r(1, 5, 32, dtype=torch.float64), 1000),
             note="E = 32, positions 1000 ... 1004: float32 angles are off by ~1e-4 here"),
        # drawn last, so the cases above keep their values for every seed
        Case("float16, offset 3000", (r(1, 4, 8, dtype=torch.float16), 3000),
             note="positions 3000 ... 3003 of a float16 x: angles computed in float16 are off "
                  "by whole radians (float16 steps by 2 above 2048); compute them in float32 "
                  "or wider, then cast cos and sin to x's dtype"),
    ]


def _rope_times(times: int, x: torch.Tensor, offset: int = 0,
                base: float = 10000.0) -> torch.Tensor:
    """RoPE applied ``times`` times (in float64): each pair turned by times·m·θ_i."""
    out = x.double()
    for _ in range(times):
        out = positions.apply_rope(out, offset=offset, base=base)
    return out.to(x.dtype)


def _rope_oracle(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    return positions.apply_rope(x, offset=offset, base=base)


def apply_rope(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Rotate pair (x_i, x_{i+E/2}) of the vector at position m by m·base^(-2i/E)."""
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / E)   # (E/2,)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)            # (L,)
    angle = pos[:, None] * theta[None, :]                                   # (L, E/2)
    cos = torch.cos(angle).repeat(1, 2).to(x.dtype)                         # (L, E): [c, c]
    sin = torch.sin(angle).repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    rotated = torch.cat([-x2, x1], dim=-1)                                  # 90° turn
    return x * cos + rotated * sin


def _rope_with(x, offset=0, base=10000.0, *, layout="halves", exponent=2.0, sign=1.0,
               use_offset=True, use_base=True, angles=torch.float64):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    b = base if use_base else 10000.0
    theta = b ** (-torch.arange(half, dtype=angles) * exponent / E)
    start = offset if use_offset else 0
    angle = sign * torch.arange(start, start + L, dtype=angles)[:, None] * theta
    if layout == "adjacent":          # RoFormer: pairs (2i, 2i+1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        return torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).flatten(-2)
    if layout == "mixed":             # interleaved cache, split-halves rotation
        c = torch.cos(angle).repeat_interleave(2, dim=-1).to(x.dtype)
        s = torch.sin(angle).repeat_interleave(2, dim=-1).to(x.dtype)
    else:
        c = torch.cos(angle).repeat(1, 2).to(x.dtype)
        s = torch.sin(angle).repeat(1, 2).to(x.dtype)
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * c + rotated * s


APPLY_ROPE = Exercise(
    id="apply_rope",
    chapter="05_positions",
    title="Rotary position embedding",
    signature="apply_rope(x (..., L, E), offset=0, base=10000.0) -> like x",
    params=("x", "offset", "base"),
    cases=_rope_cases,
    oracle=_rope_oracle,
    probes=(choice_probe(
        "position_offset", lambda shift, x, offset=0, base=10000.0: positions.apply_rope(
            x, offset=offset + shift, base=base),
        {"+1": 1, "-1": -1, "+2": 2},
        {"+1": "RoPE with every position one too far (offset + 1, offset + 2, …)",
         "-1": "RoPE with every position one short (offset - 1, …)",
         "+2": "RoPE with every position two too far"},
        "Row m of x sits at position offset + m, counting from 0: the first row turns by "
        "offset · θ_i (no turn at all when offset = 0).",
        "05_positions: Rotary position embeddings (RoPE)",
        ids={"+1": "positions_off_by_one", "-1": "positions_off_by_one",
             "+2": "position_offset"}),
        choice_probe(
            "angles_dtype", lambda dtype, x, offset=0, base=10000.0: _rope_with(
                x, offset, base, angles=x.dtype if dtype == "x" else dtype),
            {"x": "x", "float32": torch.float32},
            {"x": "RoPE with its positions and angles computed in x's own dtype",
             "float32": "RoPE with its angles computed in float32"},
            "Compute the positions and angles m·θ_i in float64 (or at least float32: float16 "
            "steps by 2 above position 2048 and by 32 above 32768), take cos and sin there, and "
            "cast only cos and sin to x's dtype.",
            "05_positions: Rotary position embeddings (RoPE)",
            ids={"x": "angles_in_input_dtype", "float32": "float32_angles"}),
        choice_probe(
            "frequencies", lambda exponent, x, offset=0, base=10000.0: _rope_with(
                x, offset, base, exponent=exponent),
            {"-4i/E": 4.0, "-i/E": 1.0},
            {"-4i/E": "RoPE with θ_i = base^(-4i/E) (the exponent divided by E/2, not E)",
             "-i/E": "RoPE with θ_i = base^(-i/E) (the exponent i/E, not 2i/E)"},
            "Pair i turns at θ_i = base^(-2i/E), i = 0 … E/2 - 1: the exponents run from 0 "
            "to nearly -1, so the slowest pair turns at about 1/base per position.",
            "05_positions: Rotary position embeddings (RoPE)",
            ids={"-4i/E": "wrong_frequencies", "-i/E": "wrong_frequencies"}),
        choice_probe(
            "rotated_twice", lambda times, x, offset=0, base=10000.0: _rope_times(
                times, x, offset, base), {"twice": 2},
            {"twice": "RoPE applied twice: each vector turned by 2·m·θ_i"},
            "Turn each pair once, by m·θ_i: apply the rotation a single time (a vector "
            "already rotated must not be rotated again).",
            "05_positions: Rotary position embeddings (RoPE)", ids={"twice": "rotated_twice"}),),
    solution=apply_rope,
    # float64: a float64 RoPE is exact to ~1e-13 even at position 1000, while a float32 step
    # anywhere (angles, cos/sin) costs ~1e-7 relative. The default rtol 1e-6 sat between the
    # two (float32 angles passed or failed by seed); 1e-9 rejects them on every seed, by
    # orders of magnitude, and names them (float32_angles).
    tolerances={torch.float64: (1e-10, 1e-9)},
    hints=(
        "The vector at row m (position offset + m) is rotated pair by pair. Pair i is "
        "(x[..., i], x[..., i + E/2]) and turns by the angle position · θ_i, "
        "θ_i = base^(-2i/E).",
        "Build the angles (L, E/2) = positions[:, None] * θ[None, :], repeat cos and sin to "
        "(L, E) as [c, c] and [s, s], and use rotate_half(x) = cat([-x2, x1]) with x1, x2 the "
        "two halves of the last dim.",
        "return x * cos + cat([-x2, x1], -1) * sin, with cos/sin of "
        "arange(offset, offset + L)[:, None] * base ** (-2 * arange(E/2) / E), repeated twice",
    ),
    mistakes=(
        Mistake("adjacent_pairs", "You rotated adjacent features (2i, 2i+1) together (the "
                "RoFormer paper's layout). This course, like GPT-NeoX and Hugging Face's "
                "Llama, pairs feature i with feature i + E/2 (split halves, rotate_half). Both "
                "are valid rotations, but a model's weights only work with the layout they "
                "were trained with.",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base,
                                                             layout="adjacent")),
        Mistake("mixed_layouts", "Your cos/sin are interleaved (each angle repeated twice in a "
                "row: c0 c0 c1 c1 ...) but you rotate split halves (rotate_half). Mixing the "
                "two layouts rotates features by angles meant for other pairs: repeat the whole "
                "(L, E/2) block instead, [c0 ... c_{E/2-1}, c0 ... c_{E/2-1}].",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base, layout="mixed")),
        Mistake("forgot_offset", "You started the positions at 0 and ignored offset. When "
                "decoding, the new tokens sit at positions offset, offset + 1, ...: use "
                "arange(offset, offset + L).",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base,
                                                             use_offset=False)),
        Mistake("ignored_base", "Your frequencies ignore the base argument (you used 10000): "
                "θ_i = base^(-2i/E).",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base, use_base=False)),
        Mistake("exponent_i_over_E", "Your frequencies are base^(-i/E): the exponent is 2i/E "
                "(i counts pairs, so it runs over 0 ... E/2 - 1 and 2i/E over [0, 1)).",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base, exponent=1.0)),
        Mistake("float32_angles", "Your angles are computed in float32 on a float64 input "
                "(as Hugging Face's code does): at position 1000 an angle is off by ~1e-4, far "
                "more than float64's precision. Compute positions · θ in float64 (or in "
                "x.dtype), then take cos and sin.",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base,
                                                             angles=torch.float32),
                # float32 rounding: another float32 formula is as far from this one as from
                # the answer; anything within float32's precision of it is this mistake
                tolerance=lambda dtype: (1e-4, 1e-3)),
        Mistake("rotated_backwards", "You rotated by -mθ (clockwise): the sign of the sin "
                "term is flipped. out = x·cos + rotate_half(x)·sin with rotate_half(x) = "
                "[-x2, x1].",
                lambda x, offset=0, base=10000.0: _rope_with(x, offset, base, sign=-1.0)),
    ),
)

# --------------------------------------------------------------------------- alibi_bias


def _alibi_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("8 heads, L = S = 5", (8, 5, 5)),
        Case("4 heads, decoding: L = 2, S = 6", (4, 2, 6),
             note="the 2 queries are the last 2 of the 6 positions"),
        Case("16 heads, L = S = 3", (16, 3, 3)),
        Case("2 heads, L = 1, S = 4", (2, 1, 4), note="one new token against 4 positions"),
    ]


def _alibi_oracle(H: int, L: int, S: int) -> torch.Tensor:
    return positions.alibi_bias(H, L, S)


def alibi_bias(H: int, L: int, S: int) -> torch.Tensor:
    """(H, L, S) float32: m_h · (j - i'), m_h = 2^(-8(h+1)/H), query i at i' = i + S - L."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)   # (H,)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]                # (L, 1)
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]                       # (1, S)
    return (slopes[:, None, None] * (k_pos - q_pos)).to(torch.float32)


def _alibi_with(H, L, S, *, slopes=None, rel="j-i", align=True, causal=False):
    h = torch.arange(1, H + 1, dtype=torch.float64)
    m = {None: 2.0 ** (-8.0 * h / H), "halves": 2.0 ** (-h), "linear": h / H,
         "reversed": 2.0 ** (-8.0 * (H + 1 - h) / H), "from_zero": 2.0 ** (-8.0 * (h - 1) / H),
         "precedence": 2.0 ** -8 * h / H}[slopes]
    i = torch.arange(L, dtype=torch.float64)[:, None] + (S - L if align else 0)
    j = torch.arange(S, dtype=torch.float64)[None, :]
    r = {"j-i": j - i, "i-j": i - j, "j": j + 0 * i, "-i": -i + 0 * j,
         "-|j-i|": -(j - i).abs()}[rel]
    bias = (m[:, None, None] * r).to(torch.float32)
    return bias.masked_fill(j > i, float("-inf")) if causal else bias


def _alibi_exponent(c: float, H: int, L: int, S: int) -> torch.Tensor:
    """ALiBi with slopes 2^(-c·(h+1)/H): c = 8 is the paper's (Press et al., 2022)."""
    h = torch.arange(1, H + 1, dtype=torch.float64)
    i = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    j = torch.arange(S, dtype=torch.float64)[None, :]
    return ((2.0 ** (-c * h / H))[:, None, None] * (j - i)).to(torch.float32)


_ALIBI_SLOPES = Probe(
    "slopes_exponent", _alibi_exponent, lambda *a: {"right": 8.0},
    lambda label: "ALiBi with slopes 2^(-c·(h+1)/H) for a c other than 8",
    "Head h (h = 0 … H-1) has slope m_h = 2^(-8(h+1)/H): the exponent's factor is 8 (for "
    "H = 8 heads the slopes are 1/2, 1/4, …, 1/256).",
    "05_positions: ALiBi: a bias on the scores", fit_scale=True)

ALIBI_BIAS = Exercise(
    id="alibi_bias",
    chapter="05_positions",
    title="The ALiBi bias",
    signature="alibi_bias(H, L, S) -> float32 (H, L, S)",
    params=("H", "L", "S"),
    cases=_alibi_cases,
    oracle=_alibi_oracle,
    probes=(_ALIBI_SLOPES,),
    solution=alibi_bias,
    hints=(
        "Head h has slope m_h = 2^(-8(h+1)/H) (h = 0 ... H-1; H is a power of two here). The "
        "bias of query i and key j is m_h times the key position minus the query position: 0 "
        "for the token itself, negative for the past.",
        "The L queries are the last L of the S positions: query i sits at position "
        "i + S - L. Build the (L, S) table of j - (i + S - L) by broadcasting, then multiply "
        "by the slopes as an (H, 1, 1) tensor.",
        "slopes[:, None, None] * (arange(S)[None, :] - arange(S - L, S)[:, None]), as float32",
    ),
    mistakes=(
        Mistake("wrong_sign", "Your bias is positive for past keys: it must be m_h · (j - i'), "
                "which is negative for j < i' (more distant keys are penalised).",
                lambda H, L, S: _alibi_with(H, L, S, rel="i-j")),
        Mistake("key_position_only", "Your bias is m_h · j, the key's absolute position. Every "
                "row of it differs from m_h · (j - i') by a constant, so the softmax weights are "
                "the same (some libraries use it for that reason), but the bias asked for is "
                "relative: 0 on the query's own position.",
                lambda H, L, S: _alibi_with(H, L, S, rel="j")),
        Mistake("query_position_only", "Your bias depends only on the query position i: it is "
                "the same for every key, so it changes nothing after the softmax. Use the "
                "distance j - i'.", lambda H, L, S: _alibi_with(H, L, S, rel="-i")),
        Mistake("top_left_alignment", "Your bias is right when L = S but not when the queries "
                "are the last L of S positions (decoding): query i sits at position "
                "i + S - L, not i.", lambda H, L, S: _alibi_with(H, L, S, align=False)),
        Mistake("transposed", "Your bias has shape (H, S, L): keys on the rows. Scores are "
                "(..., L, S), queries on the rows and keys on the columns, so the bias must be "
                "(H, L, S).", lambda H, L, S: _alibi_with(H, L, S).transpose(1, 2)),
        Mistake("slopes_halves", "Your slopes are 1/2, 1/4, 1/8, ... whatever H is. That is "
                "right only for H = 8: the slopes are 2^(-8(h+1)/H), a geometric sequence from "
                "2^(-8/H) down to 2^(-8).", lambda H, L, S: _alibi_with(H, L, S, slopes="halves")),
        Mistake("slopes_linear", "Your slopes grow linearly with the head index: ALiBi's slopes "
                "are geometric, m_h = 2^(-8(h+1)/H).",
                lambda H, L, S: _alibi_with(H, L, S, slopes="linear")),
        Mistake("slopes_from_zero", "Your slopes are 2^(-8h/H) with h = 0 ... H-1, so head 0 "
                "has slope 1 (no decay at all). ALiBi counts heads from 1: m_h = 2^(-8(h+1)/H) "
                "for h = 0 ... H-1, from 2^(-8/H) down to 2^(-8).",
                lambda H, L, S: _alibi_with(H, L, S, slopes="from_zero")),
        Mistake("slopes_precedence", "Your slopes grow linearly, (h+1)/(256·H): "
                "`2 ** -8 * (h+1) / H` is (2^-8)·(h+1)/H, since ** binds tighter than * and /. "
                "Put the whole exponent in parentheses: 2 ** (-8 * (h+1) / H).",
                lambda H, L, S: _alibi_with(H, L, S, slopes="precedence")),
        Mistake("symmetric_distance", "Your bias is -m_h·|j - i'|, symmetric in past and "
                "future. ALiBi's bias is m_h·(j - i'): negative for past keys, and positive for "
                "future keys (which a causal mask hides anyway), not a penalty both ways.",
                lambda H, L, S: _alibi_with(H, L, S, rel="-|j-i|")),
        Mistake("slopes_reversed", "Your slopes are in reverse order: head 0 has the largest "
                "slope, 2^(-8/H), and head H-1 the smallest, 2^(-8).",
                lambda H, L, S: _alibi_with(H, L, S, slopes="reversed")),
        Mistake("masked_future", "You set the future keys (j > i') to -inf. The bias is "
                "m_h·(j - i') for every (i, j): hiding the future is the causal mask's job, "
                "applied separately, and an ALiBi bias also serves attention that may look "
                "ahead.", lambda H, L, S: _alibi_with(H, L, S, causal=True)),
    ),
)

# --------------------------------------------------------------------------- llama3_frequencies


def _llama3_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case("Llama 3.1 8B: E=128, base 500000, factor 8, M=8192",
             (128, 500000.0, 8.0, 1.0, 4.0, 8192)),
        Case("E=64, base 10000, factor 4, M=512", (64, 10000.0, 4.0, 1.0, 4.0, 512)),
        Case("E=32, factor 2, low 2, high 8, M=1024", (32, 10000.0, 2.0, 2.0, 8.0, 1024)),
        Case("factor 1: nothing changes", (16, 10000.0, 1.0, 1.0, 4.0, 64)),
    ]


def _llama3_oracle(E, base, factor, low_freq_factor, high_freq_factor,
                   original_max_position_embeddings):
    from course_lib.attention.positions import scaled_rope_frequencies
    return scaled_rope_frequencies(E, base, {
        "rope_type": "llama3", "factor": factor, "low_freq_factor": low_freq_factor,
        "high_freq_factor": high_freq_factor,
        "original_max_position_embeddings": original_max_position_embeddings})[0]


def llama3_frequencies(E, base, factor, low_freq_factor, high_freq_factor,
                       original_max_position_embeddings):
    """(E/2,) float64: theta_i kept for short wavelengths, theta_i / factor for long ones,
    a linear blend (in M / wavelength) between."""
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    wavelength = 2 * torch.pi / theta
    M = original_max_position_embeddings
    # a = 1: the pair turns often in M positions (keep); a = 0: it turns rarely (interpolate)
    a = (M / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    a = a.clamp(0, 1)
    return (1 - a) * theta / factor + a * theta


def _llama3_with(E, base, s, lo, hi, M, *, blend=None, dtype=torch.float64, two_pi=True):
    theta = base ** (-torch.arange(0, E, 2, dtype=dtype) / E)
    turns = M * theta / (2 * torch.pi) if two_pi else M * theta   # M / wavelength
    a = ((turns - lo) / (hi - lo)).clamp(0, 1)
    if blend is not None:
        return blend(theta, a, s).to(torch.float64)
    return ((1 - a) * theta / s + a * theta).to(torch.float64)


def _bands_swapped(t, a, s):
    """Fast pairs (a = 1) divided, slow pairs (a = 0) kept; the middle band blended right."""
    middle = (1 - a) * t / s + a * t
    return torch.where(a >= 1, t / s, torch.where(a <= 0, t, middle))


#: A float32 computation of the frequencies, in whatever order (float32 theta then float64,
#: Hugging Face's inverse-then-where, all float32): each is within float32's rounding of the
#: others, amplified by the exponent (|log theta| up to ~13 for base 500000): ~1e-6 relative.
_FLOAT32_ROUNDING = (0.0, 1e-5)


_BANDS_SWAPPED = (
    "You divided the fast pairs (short wavelengths) by the factor and kept the slow ones. It "
    "is the other way round: the fast pairs already met every angle in training and stay; the "
    "slow pairs (wavelength > M / low_freq_factor), which would meet new angles at long range, "
    "get theta / factor.")
_NO_BLEND = (
    "Your middle band is not blended: between the two thresholds (M / high_freq_factor <= "
    "wavelength <= M / low_freq_factor) the frequency must move smoothly from theta / factor "
    "to theta, (1 - a) theta / factor + a theta with a = (M / wavelength - low) / (high - low).")

LLAMA3_FREQUENCIES = Exercise(
    id="llama3_frequencies",
    chapter="05_positions",
    title="Llama 3's RoPE frequency scaling",
    signature="llama3_frequencies(E, base, factor, low_freq_factor, high_freq_factor, "
              "original_max_position_embeddings) -> float64 (E/2,)",
    params=("E", "base", "factor", "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings"),
    cases=_llama3_cases,
    oracle=_llama3_oracle,
    solution=llama3_frequencies,
    tolerances={torch.float64: (0.0, 1e-12)},
    hints=(
        "Start from theta_i = base^(-2i/E) in float64 and the wavelength 2π / theta_i of each "
        "pair. With M = original_max_position_embeddings, M / wavelength is how many turns the "
        "pair makes within the training length.",
        "Pairs that turn more than high_freq_factor times keep theta_i; pairs that turn fewer "
        "than low_freq_factor times get theta_i / factor (position interpolation). Between, "
        "blend: a = (M / wavelength - low) / (high - low), result (1 - a) theta/factor + a theta.",
        "a = ((M / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor))"
        ".clamp(0, 1); return (1 - a) * theta / factor + a * theta",
    ),
    mistakes=(
        Mistake("high_frequencies_scaled", _BANDS_SWAPPED,
                lambda *a: _llama3_with(*a, blend=lambda t, w, s: w * t / s + (1 - w) * t)),
        Mistake("bands_swapped_blend_kept", _BANDS_SWAPPED,
                lambda *a: _llama3_with(*a, blend=_bands_swapped),
                family="high_frequencies_scaled"),
        Mistake("multiplied_by_factor", "You multiplied the slow frequencies by the factor. To "
                "stretch a wavelength by the factor (position interpolation), divide the "
                "frequency: theta / factor.",
                lambda *a: _llama3_with(*a, blend=lambda t, w, s: (1 - w) * t * s + w * t)),
        Mistake("no_blend", _NO_BLEND,
                lambda *a: _llama3_with(*a, blend=lambda t, w, s: torch.where(w > 0, t, t / s))),
        Mistake("no_blend_divided", _NO_BLEND,
                lambda *a: _llama3_with(*a, blend=lambda t, w, s: torch.where(w < 1, t / s, t)),
                family="no_blend"),
        Mistake("unclamped_blend", "Your blend weight a is not clamped to [0, 1]: outside the "
                "middle band it runs past 1 or below 0 and changes the frequencies that should "
                "be kept or divided exactly. Clamp a.",
                lambda E, b, s, lo, hi, M: _unclamped(E, b, s, lo, hi, M)),
        Mistake("computed_in_float32", "Your frequencies are computed in float32 (at least "
                "theta) and differ from float64 in the 7th digit. Compute "
                "base ** (-arange(0, E, 2) / E) in float64 (arange(..., dtype=torch.float64)) "
                "and stay in float64: a cast at the end cannot bring the lost digits back.",
                lambda *a: _llama3_with(*a, dtype=torch.float32),
                tolerance=lambda dtype: _FLOAT32_ROUNDING),
        Mistake("wavelength_without_2pi", "Your wavelength is 1 / theta. A pair turns by theta "
                "radians per position, so one full turn takes 2π / theta positions: "
                "wavelength = 2 * math.pi / theta (and M / wavelength = M · theta / 2π turns).",
                lambda *a: _llama3_with(*a, two_pi=False)),
    ),
)


def _unclamped(E, base, s, lo, hi, M):
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    a = (M * theta / (2 * torch.pi) - lo) / (hi - lo)
    return (1 - a) * theta / s + a * theta
