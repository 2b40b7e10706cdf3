"""A second blind corpus of learner submissions for measuring the exercise checkers (issue 51).

Written on 2026-11-28 for issue 51's acceptance, from chapter text only, by someone who had not
read the declared mistakes, the checkers or the earlier corpora. Its sources are the chapters
alone (the exercise statements, the starter cells, the chapter text and the solution cells) and
the pass/fail answer of ``exercises.check``. Each entry is one submission as a learner would type
it in a notebook cell: ``source`` defines a function named after the exercise (helpers allowed)
and may use the names a chapter notebook has imported (``torch``, ``math``, ``F``, ``masks``,
``merge``; see :data:`NAMESPACE_NAMES`).

``right`` says whether the submission is correct (each right one was compared with torch or the
course's own implementation by hand when written); ``label`` says in the corpus author's words
what a wrong one gets wrong, or what is special about a right one. The interface is that of
``tests/learner_corpus_blind.py``, so the same harness can measure either corpus.
"""

from __future__ import annotations

from learner_corpus_cells import NAMESPACE_NAMES, Submission, _s, load_from, namespace

__all__ = ["CORPUS", "NAMESPACE_NAMES", "Submission", "load", "namespace"]


CORPUS = [
    # ---------------------------------------------------------------- scaled_scores (ch. 2)
    _s("scaled_scores", "right: torch.matmul with mT and multiplication by E**-0.5", True, """
def scaled_scores(q, k):
    E = q.shape[-1]
    return torch.matmul(q, k.mT) * E ** -0.5
"""),
    _s("scaled_scores", "divides by E, not its square root", False, """
def scaled_scores(q, k):
    d = q.size(-1)
    return q @ k.transpose(-2, -1) / d
"""),
    _s("scaled_scores", "no scaling at all, plain dot products", False, """
def scaled_scores(q, k):
    # (..., L, E) x (..., E, S)
    return torch.einsum("...le,...se->...ls", q, k)
"""),
    _s("scaled_scores", "multiplies by sqrt(E) instead of dividing", False, """
def scaled_scores(q, k):
    scale = math.sqrt(q.shape[-1])
    return (q @ k.transpose(-1, -2)) * scale
"""),
    _s("scaled_scores", "scales by the square root of the number of keys S", False, """
def scaled_scores(q, k):
    S = k.shape[-2]
    return q @ k.transpose(-2, -1) / math.sqrt(S)
"""),
    _s("scaled_scores", "transposes axes 1 and 2 as if the input were always 3-D", False, """
def scaled_scores(q, k):
    E = q.shape[-1]
    return torch.matmul(q, k.transpose(1, 2)) / math.sqrt(E)
"""),
    _s("scaled_scores", "returns key-by-query scores k q^T (S, L)", False, """
def scaled_scores(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
"""),
    _s("scaled_scores", "scale taken from the number of queries L", False, """
def scaled_scores(q, k):
    L = q.shape[-2]
    scores = torch.einsum("...id,...jd->...ij", q, k)
    return scores / L ** 0.5
"""),

    # ---------------------------------------------------------------- softmax (ch. 3)
    _s("softmax", "right: max-shifted exp, normalised with torch.sum along dim", True, """
def softmax(x, dim=-1):
    shifted = x - torch.amax(x, dim=dim, keepdim=True)
    num = torch.exp(shifted)
    return num / torch.sum(num, dim=dim, keepdim=True)
"""),
    _s("softmax", "no max subtraction: overflows for large logits", False, """
def softmax(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "subtracts the global max of the whole tensor, not of each slice", False, """
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "ignores dim and always normalises the last axis", False, """
def softmax(x, dim=-1):
    m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)
"""),
    _s("softmax", "shifts by the minimum instead of the maximum", False, """
def softmax(x, dim=-1):
    m = x.amin(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "normalises by the sum over the whole tensor", False, """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()
"""),
    _s("softmax", "casts to float32, so float64 and float16 inputs come back as float32", False, """
def softmax(x, dim=-1):
    x = x.float()
    x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
"""),

    # ---------------------------------------------------------------- self_attention (ch. 3)
    _s("self_attention", "right: einsum projections and torch.softmax over keys", True, """
def self_attention(x, w_q, w_k, w_v):
    q = torch.einsum("bld,de->ble", x, w_q)
    k = torch.einsum("bld,de->ble", x, w_k)
    v = torch.einsum("bld,de->ble", x, w_v)
    scores = torch.einsum("bie,bje->bij", q, k) / math.sqrt(w_q.shape[1])
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
"""),
    _s("self_attention", "softmax over the query axis (columns sum to 1)", False, """
def self_attention(x, w_q, w_k, w_v):
    Q, K, V = x @ w_q, x @ w_k, x @ w_v
    scores = Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1])
    weights = torch.softmax(scores, dim=1)
    return weights @ V, weights
"""),
    _s("self_attention", "scales by sqrt of the model width D instead of E", False, """
def self_attention(x, w_q, w_k, w_v):
    D = x.shape[-1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return weights @ v, weights
"""),
    _s("self_attention", "forgets the 1/sqrt(E) scale", False, """
def self_attention(x, w_q, w_k, w_v):
    q = torch.matmul(x, w_q)
    k = torch.matmul(x, w_k)
    v = torch.matmul(x, w_v)
    weights = torch.softmax(torch.matmul(q, k.mT), dim=-1)
    out = torch.matmul(weights, v)
    return out, weights
"""),
    _s("self_attention", "returns (weights, out) in the wrong order", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    E = q.shape[-1]
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return weights, weights @ v
"""),
    _s("self_attention", "scales by sqrt of the value width Ev", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""),
    _s("self_attention", "multiplies V by the transposed weights", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    out = weights.transpose(-2, -1) @ v
    return out, weights
"""),

    # ---------------------------------------------------------------- split_heads (ch. 4)
    _s("split_heads", "right: chunk the features and stack the heads on axis 1", True, """
def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)
"""),
    _s("split_heads", "reshapes straight to (B, H, L, E) without moving the axes", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)
"""),
    _s("split_heads", "cuts features as (E, H), so heads get strided features", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    return x.view(B, L, E, num_heads).permute(0, 3, 1, 2)
"""),
    _s("split_heads", "permutes to (B, H, E, L)", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).permute(0, 2, 3, 1)
"""),
    _s("split_heads", "folds heads into the batch: returns (B*H, L, E)", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    x = x.reshape(B, L, num_heads, E).transpose(1, 2)
    return x.reshape(B * num_heads, L, E)
"""),
    _s("split_heads", "loop picks every H-th feature for head h", False, """
def split_heads(x, num_heads):
    heads = [x[..., h::num_heads] for h in range(num_heads)]
    return torch.stack(heads, dim=1)
"""),

    # ---------------------------------------------------------------- merge_heads (ch. 4)
    _s("merge_heads", "right: transpose then flatten the last two axes", True, """
def merge_heads(x):
    return x.transpose(1, 2).flatten(-2)
"""),
    _s("merge_heads", "reshapes to (B, L, H*E) without putting L before H", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.reshape(B, L, H * E)
"""),
    _s("merge_heads", "permutes to (B, L, E, H), interleaving the heads' features", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * E)
"""),
    _s("merge_heads", "view on the transposed (non-contiguous) tensor", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).view(B, L, H * E)
"""),
    _s("merge_heads", "concatenates the heads along the token axis", False, """
def merge_heads(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)
"""),
    _s("merge_heads", "flattens from axis 1, giving (B, L*H*E)", False, """
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(1)
"""),

    # ---------------------------------------------------------------- multi_head_attention (ch. 4)
    _s("multi_head_attention", "right: einsum per head with view/transpose", True, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.view(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v))
    s = torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(E)
    o = torch.einsum("bhij,bhje->bhie", s.softmax(-1), v)
    return o.transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention",
       "scales by 1/sqrt(D), the model width, not the head width",
       False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q = q.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)
    k = k.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)
    v = v.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return (w @ v).permute(0, 2, 1, 3).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "splits heads by reshaping to (B, H, L, E) directly", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, num_heads, L, E) for t in (q, k, v))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    out = (w @ v).reshape(B, L, D)
    return out @ w_o
"""),
    _s("multi_head_attention", "forgets the output projection w_o", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = x @ w_qkv
    q, k, v = [t.view(B, L, num_heads, E).transpose(1, 2) for t in qkv.split(D, dim=-1)]
    att = torch.softmax(q @ k.mT / math.sqrt(E), dim=-1) @ v
    return att.transpose(1, 2).reshape(B, L, D)
"""),
    _s("multi_head_attention", "softmax over the query axis", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-2)
    heads = weights @ v
    return heads.transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention",
       "splits q, k, v as interleaved (H, 3, E) instead of three blocks of D",
       False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = (x @ w_qkv).reshape(B, L, num_heads, 3, E).permute(3, 0, 2, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (w @ v).transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "merges heads without moving L back before H", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1) @ v
    return heads.reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention",
       "multiplies by w_o transposed, as if it were nn.Linear's weight",
       False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.view(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1) @ v
    return heads.transpose(1, 2).reshape(B, L, D) @ w_o.T
"""),
]

CORPUS += [
    # ---------------------------------------------------------------- apply_rope (ch. 5)
    _s("apply_rope", "right: complex-free rotation written pair by pair in float64", True, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    half = E // 2
    i = torch.arange(half, dtype=torch.float64)
    theta = base ** (-2.0 * i / E)
    m = offset + torch.arange(L, dtype=torch.float64)
    ang = torch.outer(m, theta)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
"""),
    _s("apply_rope",
       "right: second learner, same maths with float32 tables and torch.stack of halves",
       True, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, E, 2, dtype=torch.float64) / E))
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    freqs = pos[:, None] * inv_freq[None, :]
    cos = torch.cat([freqs.cos(), freqs.cos()], -1).to(x.dtype)
    sin = torch.cat([freqs.sin(), freqs.sin()], -1).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin
"""),
    _s("apply_rope", "frequency exponent -i/E, the factor 2 forgotten", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    angle = pos[:, None] * theta[None, :]
    cos = angle.cos().repeat(1, 2).to(x.dtype)
    sin = angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
"""),
    _s("apply_rope", "rotates adjacent pairs (x_2i, x_2i+1) instead of split halves", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    angle = pos[:, None] * theta
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.stack([xe * c - xo * s, xe * s + xo * c], dim=-1)
    return out.flatten(-2)
"""),
    _s("apply_rope", "ignores offset: positions always start at 0", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / E)
    angle = torch.arange(L, dtype=torch.float64)[:, None] * theta
    cos = torch.cat([angle.cos()] * 2, dim=-1).to(x.dtype)
    sin = torch.cat([angle.sin()] * 2, dim=-1).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
"""),
    _s("apply_rope", "rotates the wrong way: rotate_half written as [x2, -x1]", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    angle = torch.outer(pos, theta)
    cos = angle.cos().repeat(1, 2).to(x.dtype)
    sin = angle.sin().repeat(1, 2).to(x.dtype)
    rot = torch.cat([x[..., half:], -x[..., :half]], dim=-1)
    return x * cos + rot * sin
"""),
    _s("apply_rope", "positions start at offset + 1 (first row counted as position 1)", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / E)
    pos = torch.arange(1, L + 1, dtype=torch.float64) + offset
    angle = pos[:, None] * theta[None, :]
    c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
"""),
    _s("apply_rope",
       "cos/sin tables built with repeat_interleave, pairing frequencies as if interleaved",
       False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    angle = pos[:, None] * theta[None, :]
    cos = angle.cos().repeat_interleave(2, dim=-1).to(x.dtype)
    sin = angle.sin().repeat_interleave(2, dim=-1).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
"""),
    _s("apply_rope",
       "builds the angles in x's own dtype, so half-precision positions lose precision",
       False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=x.dtype) / E)
    pos = torch.arange(offset, offset + L, dtype=x.dtype)
    angle = pos[:, None] * theta[None, :]
    cos, sin = angle.cos().repeat(1, 2), angle.sin().repeat(1, 2)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
"""),

    # ---------------------------------------------------------------- alibi_bias (ch. 5)
    _s("alibi_bias", "right: broadcasting with integer positions then float32", True, """
def alibi_bias(H, L, S):
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float64)
    i = torch.arange(L)[:, None] + (S - L)
    j = torch.arange(S)[None, :]
    return (slopes.view(H, 1, 1) * (j - i)).float()
"""),
    _s("alibi_bias", "query i placed at position i, not i + S - L", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    qi = torch.arange(L, dtype=torch.float64)[:, None]
    kj = torch.arange(S, dtype=torch.float64)[None, :]
    return (slopes[:, None, None] * (kj - qi)).to(torch.float32)
"""),
    _s("alibi_bias", "distance with the wrong sign, m_h (i' - j)", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]
    return (slopes[:, None, None] * (q_pos - k_pos)).to(torch.float32)
"""),
    _s("alibi_bias", "slopes 2^(-8h/H) with h from 0, so the first head has slope 1", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(H, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]
    return (slopes[:, None, None] * (k_pos - q_pos)).to(torch.float32)
"""),
    _s("alibi_bias", "returns float64, the cast to float32 forgotten", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)
    rel = torch.arange(S, dtype=torch.float64)[None, :] - q_pos[:, None]
    return slopes[:, None, None] * rel
"""),
    _s("alibi_bias", "symmetric bias -m_h |j - i'| instead of the signed distance", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]
    return (-slopes[:, None, None] * (k_pos - q_pos).abs()).to(torch.float32)
"""),
    _s("alibi_bias",
       "masks the future keys with -inf although the statement says not to",
       False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    q_pos = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    k_pos = torch.arange(S, dtype=torch.float64)[None, :]
    bias = slopes[:, None, None] * (k_pos - q_pos)
    bias = bias.masked_fill(k_pos > q_pos, float("-inf"))
    return bias.to(torch.float32)
"""),
    _s("alibi_bias", "slopes 2^(-(h+1)/H), the factor 8 dropped", False, """
def alibi_bias(H, L, S):
    slopes = torch.pow(2.0, -torch.arange(1, H + 1, dtype=torch.float64) / H)
    offs = S - L
    rel = torch.arange(S)[None, :] - (torch.arange(L)[:, None] + offs)
    return (slopes[:, None, None] * rel).float()
"""),

    # ---------------------------------------------------------------- causal_mask (ch. 6)
    _s("causal_mask", "right: arange comparison j <= i", True, """
def causal_mask(n):
    idx = torch.arange(n)
    return idx[None, :] <= idx[:, None]
"""),
    _s("causal_mask", "upper triangle (keys after the query) instead of lower", False, """
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu()
"""),
    _s("causal_mask", "strict lower triangle: a query cannot see itself", False, """
def causal_mask(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
"""),
    _s("causal_mask", "polarity inverted: True where the key is in the future", False, """
def causal_mask(n):
    return torch.triu(torch.ones(n, n), diagonal=1).bool()
"""),
    _s("causal_mask", "returns a float 0/1 matrix instead of bool", False, """
def causal_mask(n):
    return torch.tril(torch.ones(n, n))
"""),
    _s("causal_mask", "strict comparison j < i with arange", False, """
def causal_mask(n):
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return j < i
"""),
    _s("causal_mask", "tril with diagonal=1 lets each query see the next key", False, """
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)
"""),

    # ---------------------------------------------------------------- padding_mask (ch. 6)
    _s("padding_mask", "right: ne, then view to (B, 1, 1, N)", True, """
def padding_mask(tokens, pad_id=0):
    B, N = tokens.shape
    return tokens.ne(pad_id).view(B, 1, 1, N)
"""),
    _s("padding_mask", "polarity inverted: True on the pad tokens", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens == pad_id)[:, None, None, :]
"""),
    _s("padding_mask", "unsqueezes to (B, 1, N, 1), masking queries instead of keys", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).unsqueeze(1).unsqueeze(-1)
"""),
    _s("padding_mask", "returns the (B, N) mask without the broadcast axes", False, """
def padding_mask(tokens, pad_id=0):
    return tokens != pad_id
"""),
    _s("padding_mask", "hard-codes pad id 0 and ignores the pad_id argument", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != 0)[:, None, None, :]
"""),
    _s("padding_mask", "returns a float mask instead of bool", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).float()[:, None, None, :]
"""),
    _s("padding_mask", "only one axis added: (B, 1, N)", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).unsqueeze(1)
"""),
    _s("padding_mask", "tests tokens > pad_id, wrong for token ids below the pad id", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens > pad_id)[:, None, None, :]
"""),

    # ---------------------------------------------------------------- masked_attention (ch. 6)
    _s("masked_attention", "right: torch.softmax then nan_to_num for rows with no key", True, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v
"""),
    _s("masked_attention", "no guard: a query with no allowed key gets NaN", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
"""),
    _s("masked_attention", "mask polarity inverted: hides the allowed keys", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(w) @ v
"""),
    _s("masked_attention", "forgets the 1/sqrt(E) scale", False, """
def masked_attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    w = torch.softmax(scores, dim=-1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return torch.matmul(w, v)
"""),
    _s("masked_attention",
       "zeroes masked weights after the softmax without renormalising",
       False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(scores, dim=-1) * mask
    return w @ v
"""),
    _s("masked_attention",
       "fills with -1e9, so a dead row averages all values instead of zeros",
       False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, -1e9)
    return torch.softmax(scores, dim=-1) @ v
"""),
    _s("masked_attention", "softmax over the query axis", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-2).nan_to_num(0.0)
    return w @ v
"""),
    _s("masked_attention", "scales by sqrt of the value width Ev", False, """
def masked_attention(q, k, v, mask):
    s = torch.einsum("...le,...se->...ls", q, k) / math.sqrt(v.shape[-1])
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("...ls,...sv->...lv", p, v)
"""),
    _s("masked_attention", "masked scores set to 0 instead of -inf", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores * mask
    return torch.softmax(scores, dim=-1) @ v
"""),
]

CORPUS += [
    # ---------------------------------------------------------------- online_softmax_stats (ch. 8)
    _s("online_softmax_stats",
       "right: python floats kept per step, math.exp rescaling, -inf guarded",
       True, """
def online_softmax_stats(blocks):
    m = float("-inf")
    l = 0.0
    for b in blocks:
        bm = b.max().item()
        m_new = max(m, bm)
        if m_new == float("-inf"):
            continue
        l = l * math.exp(m - m_new) + torch.exp(b.double() - m_new).sum().item()
        m = m_new
    return torch.tensor(m), torch.tensor(l)
"""),
    _s("online_softmax_stats", "never rescales the running sum when the max grows", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max())
        if torch.isinf(m_new) and m_new < 0:
            continue
        l = l + torch.exp(block - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "running max initialised to 0 instead of -inf", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(0.0)
    l = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max())
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "no guard for blocks of -inf: -inf - -inf gives NaN", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max())
        l = torch.exp(m - m_new) * l + torch.exp(block - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "rescale factor inverted: multiplies by e^(m_new - m)", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max())
        if m_new == float("-inf"):
            continue
        scale = torch.exp(m_new - m) if l > 0 else torch.tensor(1.0)
        l = l * scale + torch.exp(block - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats",
       "exponentiates the new block against the old max before updating it",
       False, """
def online_softmax_stats(blocks):
    m, l = None, None
    for block in blocks:
        if m is None:
            m = block.max()
            l = torch.exp(block - m).sum()
            continue
        l = l + torch.exp(block - m).sum()
        m_new = torch.maximum(m, block.max())
        l = l * torch.exp(m - m_new)
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats",
       "collects the blocks into a list first and does two passes",
       False, """
def online_softmax_stats(blocks):
    blocks = list(blocks)
    m = max(b.max() for b in blocks)
    l = sum(torch.exp(b - m).sum() for b in blocks)
    return m, l
"""),
    _s("online_softmax_stats",
       "finite start -1e30 for the max, returned as is when every entry is -inf",
       False, """
def online_softmax_stats(blocks):
    m = torch.tensor(-1e30)
    l = torch.tensor(0.0)
    for block in blocks:
        m_new = torch.maximum(m, block.max())
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new).sum()
        m = m_new
    return m, l
"""),

    # ---------------------------------------------------------------- flash_attention (ch. 8)
    _s("flash_attention",
       "right: keeps row max and sum as (..., L) vectors and unsqueezes at use",
       True, """
def flash_attention(q, k, v, block_size=64):
    scale = q.shape[-1] ** -0.5
    S = k.shape[-2]
    m = q.new_full(q.shape[:-1], float("-inf"))
    l = q.new_zeros(q.shape[:-1])
    acc = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        s = torch.einsum("bhle,bhse->bhls", q, k[..., start:stop, :]) * scale
        m_new = torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        corr = torch.exp(m - m_new)
        l = l * corr + p.sum(-1)
        acc = acc * corr[..., None] + p @ v[..., start:stop, :]
        m = m_new
    return acc / l[..., None]
"""),
    _s("flash_attention", "rescales the running sum but not the output accumulator", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j0:j0 + block_size, :].transpose(-2, -1) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        ell = torch.exp(m - m_new) * ell + P_j.sum(dim=-1, keepdim=True)
        O = O + P_j @ v[..., j0:j0 + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "rescales the output but not the running sum", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    O = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j0:j0 + block_size, :], v[..., j0:j0 + block_size, :]
        S_j = torch.matmul(q, kb.transpose(-2, -1)) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        O = torch.exp(m - m_new) * O + P_j @ vb
        ell = ell + P_j.sum(dim=-1, keepdim=True)
        m = m_new
    return O / ell
"""),
    _s("flash_attention",
       "normalises each block by its own sum and adds the block outputs",
       False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    n_blocks = 0
    for j0 in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j0:j0 + block_size, :].transpose(-2, -1) * scale
        P_j = torch.exp(S_j - S_j.amax(dim=-1, keepdim=True))
        P_j = P_j / P_j.sum(dim=-1, keepdim=True)
        out = out + P_j @ v[..., j0:j0 + block_size, :]
        n_blocks += 1
    return out / n_blocks
"""),
    _s("flash_attention",
       "drops the last partial block of keys (S not a multiple of block_size)",
       False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    n_blocks = max(1, k.shape[-2] // block_size)
    for b in range(n_blocks):
        j0 = b * block_size
        S_j = (q @ k[..., j0:j0 + block_size, :].transpose(-2, -1)) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        alpha = torch.exp(m - m_new)
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v[..., j0:j0 + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "running max starts at 0, so large negative scores underflow", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.zeros(rows, dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = (q @ k[..., j0:j0 + block_size, :].transpose(-2, -1)) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        alpha = torch.exp(m - m_new)
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v[..., j0:j0 + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "forgets the 1/sqrt(E) scale on the block scores", False, """
def flash_attention(q, k, v, block_size=64):
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j0:j0 + block_size, :].transpose(-2, -1)
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        alpha = torch.exp(m - m_new)
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v[..., j0:j0 + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "never divides by the running sum at the end", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = (q @ k[..., j0:j0 + block_size, :].transpose(-2, -1)) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        O = torch.exp(m - m_new) * O + torch.exp(S_j - m_new) @ v[..., j0:j0 + block_size, :]
        m = m_new
    return O
"""),
    _s("flash_attention",
       "tiles the queries but softmaxes each query block's full row of scores",
       False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs = []
    for i0 in range(0, q.shape[-2], block_size):
        q_i = q[..., i0:i0 + block_size, :]
        w = torch.softmax(q_i @ k.transpose(-2, -1) * scale, dim=-1)
        outs.append(w @ v)
    return torch.cat(outs, dim=-2)
"""),
    _s("flash_attention", "re-bases on each block's own max instead of the running max", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = (q @ k[..., j0:j0 + block_size, :].transpose(-2, -1)) * s
        m_blk = S_j.amax(dim=-1, keepdim=True)
        P_j = torch.exp(S_j - m_blk)
        alpha = torch.exp(m - m_blk)
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v[..., j0:j0 + block_size, :]
        m = m_blk
    return O / ell
"""),

    # ---------------------------------------------------------------- decode_step (ch. 10)
    _s("decode_step",
       "right: uses masks.causal_mask bottom_right and a rotate_half helper",
       True, """
def _rotate_half(t):
    a, b = t.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    c, s = cos[P:P + L], sin[P:P + L]
    q = x @ w_q
    k = x @ w_k
    v = x @ w_v
    q = q * c + _rotate_half(q) * s
    k = k * c + _rotate_half(k) * s
    k_all = torch.cat((k_cache, k), dim=1)
    v_all = torch.cat((v_cache, v), dim=1)
    S = k_all.shape[1]
    att = (q @ k_all.transpose(1, 2)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return torch.softmax(att, dim=-1) @ v_all, k_all, v_all
"""),
    _s("decode_step", "rotates with rows 0:L of the tables, ignoring the cache offset P", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[:L] + torch.cat([-t2, t1], dim=-1) * sin[:L]

    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v, k, v
"""),
    _s("decode_step", "rotates the values as well as the queries and keys", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    q, k_new, v_new = (rope(x @ w) for w in (w_q, w_k, w_v))
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v, k, v
"""),
    _s("decode_step",
       "top-left causal mask (tril on the L x S grid), hiding most of the cache",
       False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]
    half = q.shape[-1] // 2
    rot = lambda t: torch.cat([-t[..., half:], t[..., :half]], dim=-1)
    q = q * c + rot(q) * s
    k_new = k_new * c + rot(k_new) * s
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~masks.causal_mask(L, S), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v, k, v
"""),
    _s("decode_step", "no causal mask: new tokens see the later new tokens", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, k, v
"""),
    _s("decode_step",
       "appends the unrotated keys to the cache (rotates only a copy for scoring)",
       False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    k_cache = torch.cat([k_cache, k_new], dim=-2)
    v_cache = torch.cat([v_cache, v_new], dim=-2)

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    k = torch.cat([k_cache[:, :P], rope(k_new)], dim=-2)
    q = rope(q)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    out = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v_cache
    return out, k_cache, v_cache
"""),
    _s("decode_step", "scales by sqrt of the model width D (x's last axis)", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    D = x.shape[-1]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v, k, v
"""),
    _s("decode_step", "rotate_half with the sign on the wrong half, [t2, -t1]", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v

    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([t2, -t1], dim=-1) * sin[P:P + L]

    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v, k, v
"""),
    _s("decode_step",
       "rotates the keys again after appending, so cached keys are rotated twice",
       False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]

    def rope(t, rows):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[rows] + torch.cat([-t2, t1], dim=-1) * sin[rows]

    q = rope(q, slice(P, S))
    k = rope(k, slice(0, S))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v, k, v
"""),

    # ---------------------------------------------------------------- repeat_kv (ch. 10)
    _s("repeat_kv", "right: repeat_interleave along the head axis", True, """
def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)
"""),
    _s("repeat_kv", "tiles the heads with repeat: head h gets kv head h % Hkv", False, """
def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
"""),
    _s("repeat_kv", "expands a new axis before the kv heads, so the copies are tiled", False, """
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x[:, None].expand(B, n_rep, Hkv, S, E).reshape(B, Hkv * n_rep, S, E)
"""),
    _s("repeat_kv", "concatenates n_rep copies along the head axis", False, """
def repeat_kv(x, n_rep):
    return torch.cat([x] * n_rep, dim=1)
"""),
    _s("repeat_kv", "repeat_interleave along the sequence axis, then reshape", False, """
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, Hkv * n_rep, S, E)
"""),
    _s("repeat_kv", "returns the expanded 5-D view without merging the axes", False, """
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x.unsqueeze(2).expand(B, Hkv, n_rep, S, E)
"""),

    # ---------------------------------------------------------------- sliding_window_mask (ch. 10)
    _s("sliding_window_mask", "right: band from tril and triu", True, """
def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-(window - 1))
"""),
    _s("sliding_window_mask", "off by one: j >= i - window keeps window + 1 keys", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (j >= i - window)
"""),
    _s("sliding_window_mask", "symmetric band |i - j| < window, not causal", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)
    return (i[:, None] - i[None, :]).abs() < window
"""),
    _s("sliding_window_mask", "polarity inverted: True outside the window", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j > i) | (j <= i - window)
"""),
    _s("sliding_window_mask", "band built with triu(-window), one key too many", False, """
def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ones.triu(diagonal=-window)
"""),
    _s("sliding_window_mask", "window points to the future: i <= j < i + window", False, """
def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.triu() & ones.tril(diagonal=window - 1)
"""),
    _s("sliding_window_mask", "excludes one key too many: j > i - window + 1", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return (j <= i) & (j > i - window + 1)
"""),
    _s("sliding_window_mask", "returns an int64 0/1 tensor", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return ((j <= i) & (j > i - window)).long()
"""),
]

_MLA_HEAD = '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
'''

CORPUS += [
    # ---------------------------------------------------------------- mla_absorbed_step (ch. 10)
    _s("mla_absorbed_step", "right: einsum everywhere, mask from masks.causal_mask", True, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    H, N = q_nope.shape[1], q_nope.shape[-1]
    L, P, R, r = q_nope.shape[2], c_cache.shape[1], q_rope.shape[-1], c_cache.shape[-1]
    cs, sn = cos[P:P + L], sin[P:P + L]

    def rot(t):
        h = t.shape[-1] // 2
        return t * cs + torch.cat([-t[..., h:], t[..., :h]], dim=-1) * sn

    c = torch.cat([c_cache, c_new], dim=1)
    kr = torch.cat([k_rope_cache, rot(k_rope_new)], dim=1)
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N, :], w[:, N:, :]
    q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
    s = torch.einsum("bhlr,bsr->bhls", q_lat, c) + torch.einsum("bhlk,bsk->bhls", rot(q_rope), kr)
    s = s / math.sqrt(N + R)
    s = s.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    p = torch.softmax(s, dim=-1)
    out = torch.einsum("bhlr,hvr->bhlv", torch.einsum("bhls,bsr->bhlr", p, c), w_uv)
    return out, c, kr
"""),
    _s("mla_absorbed_step",
       "scales by 1/sqrt(N), forgetting the rotary width R",
       False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step",
       "scales by the latent width r, the size of the absorbed dot product",
       False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    r = c.shape[-1]
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(r)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step",
       "rotates the new queries and keys from position 0, not P",
       False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[:L] + torch.cat([-t2, t1], dim=-1) * sin[:L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "caches the new rotary keys unrotated", False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, k_rope_new], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step",
       "rotates the whole rotary key cache again after appending",
       False, _MLA_HEAD + """
    S = P + L

    def rope(t, a, b):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[a:b] + torch.cat([-t2, t1], dim=-1) * sin[a:b]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = rope(torch.cat([k_rope_cache, k_rope_new], dim=-2), 0, S)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope, P, S) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step",
       "takes W_UV from the first rows and W_UK from the last",
       False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    V = w.shape[1] - N
    w_uv, w_uk = w[:, :V], w[:, V:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "no causal mask among the new tokens", False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "top-left causal mask instead of bottom-right", False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    allowed = masks.causal_mask(L, c.shape[-2])
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step",
       "reads w_kv_b as (N+V, H, r), heads as the middle axis",
       False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(-1, H, c.shape[-1]).transpose(0, 1)
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "rotates the keys but leaves q_rope unrotated", False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + q_rope @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "puts the new latents before the cached ones", False, _MLA_HEAD + """
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]

    c = torch.cat([c_new, c_cache], dim=-2)
    k_rope = torch.cat([rope(k_rope_new), k_rope_cache], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),

    # ---------------------------------------------------------------- merge_partials (ch. 13)
    _s("merge_partials", "right: logaddexp for lse, weights guarded with torch.where", True, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    empty = torch.isneginf(lse)
    safe = torch.where(empty, torch.zeros_like(lse), lse)
    w_a = torch.where(empty, torch.zeros_like(lse), torch.exp(lse_a - safe))
    w_b = torch.where(empty, torch.zeros_like(lse), torch.exp(lse_b - safe))
    return w_a[..., None] * out_a + w_b[..., None] * out_b, lse
"""),
    _s("merge_partials", "averages the two outputs instead of weighting them", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (out_a + out_b) / 2, lse
"""),
    _s("merge_partials", "no max shift: exp of lse overflows for scores near 1000", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    za, zb = torch.exp(lse_a), torch.exp(lse_b)
    z = za + zb
    out = (za / z).unsqueeze(-1) * out_a + (zb / z).unsqueeze(-1) * out_b
    return out, torch.log(z)
"""),
    _s("merge_partials", "merged lse is the max of the two, the log-sum forgotten", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m0 = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - m0), torch.exp(lse_b - m0)
    tot = w_a + w_b
    tot = torch.where(tot == 0, torch.ones_like(tot), tot)
    out = (w_a / tot).unsqueeze(-1) * out_a + (w_b / tot).unsqueeze(-1) * out_b
    return out, m
"""),
    _s("merge_partials", "no guard for rows empty in both: NaN output", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    out = torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b
    return out, lse
"""),
    _s("merge_partials", "adds the two lse values", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = lse_a + lse_b
    m = torch.maximum(lse_a, lse_b).nan_to_num(0.0, neginf=0.0)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    s = (w_a + w_b).clamp_min(1e-30)
    return (w_a / s)[..., None] * out_a + (w_b / s)[..., None] * out_b, lse
"""),
    _s("merge_partials", "weights swapped: out_a gets B's share", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(w_a + w_b)
    share_a = torch.exp(lse_a - lse).nan_to_num(0.0).unsqueeze(-1)
    share_b = torch.exp(lse_b - lse).nan_to_num(0.0).unsqueeze(-1)
    return share_b * out_a + share_a * out_b, lse
"""),
    _s("merge_partials", "weights by the lse values themselves, lse_a / (lse_a + lse_b)", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    w_a = (lse_a / (lse_a + lse_b)).nan_to_num(0.0)
    w_b = (lse_b / (lse_a + lse_b)).nan_to_num(0.0)
    return w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b, lse
"""),
    _s("merge_partials",
       "shifts by the max but keeps the unnormalised shifted weights as the shares",
       False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(m == float("-inf"), 0.0)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(w_a + w_b)
    return w_a.unsqueeze(-1) * out_a + w_b.unsqueeze(-1) * out_b, lse
"""),
    _s("merge_partials", "empty rows guarded, but lse comes back 0 instead of -inf", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    tot = w_a + w_b
    empty = tot == 0
    tot = torch.where(empty, torch.ones_like(tot), tot)
    lse = m + torch.log(tot)
    out = (w_a / tot).unsqueeze(-1) * out_a + (w_b / tot).unsqueeze(-1) * out_b
    return out, lse
"""),

    # ---------------------------------------------------------------- ring_step (ch. 13)
    _s("ring_step",
       "right: merge.partial_attention and merge.merge_partials, diagonal mask from tril",
       True, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if src == rank else None
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "source rank computed as rank + step: blocks travel the wrong way", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank + step) % world
    if src > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if src == rank else None
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "skips the diagonal block too (src >= rank)", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source >= rank:
        return out, lse, k_held, v_held
    out_b, lse_b = merge.partial_attention(q, k_held, v_held)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "no causal mask on the diagonal block", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    scores = q @ k_held.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse_b = torch.logsumexp(scores, dim=-1)
    out_b = torch.softmax(scores, dim=-1) @ v_held
    lse_new = torch.logaddexp(lse, lse_b)
    out = (torch.exp(lse - lse_new).unsqueeze(-1) * out
           + torch.exp(lse_b - lse_new).unsqueeze(-1) * out_b)
    return out, lse_new, k_held, v_held
"""),
    _s("ring_step", "diagonal mask is the upper triangle", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    scores = q @ k_held.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if source == rank:
        c = q.shape[-2]
        keep = torch.ones(c, c, dtype=torch.bool).triu()
        scores = scores.masked_fill(~keep, float("-inf"))
    lse_b = torch.logsumexp(scores, dim=-1)
    out_b = torch.softmax(scores, dim=-1) @ v_held
    lse_new = torch.logaddexp(lse, lse_b)
    out = (torch.exp(lse - lse_new).unsqueeze(-1) * out
           + torch.exp(lse_b - lse_new).unsqueeze(-1) * out_b)
    return out, lse_new, k_held, v_held
"""),
    _s("ring_step", "adds the block's output to out with no reweighting", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    return out + out_b, torch.logaddexp(lse, lse_b), k_held, v_held
"""),
    _s("ring_step", "sends its own block on every step instead of the block it holds", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source <= rank:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
        out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
        out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_own, v_own
"""),
    _s("ring_step", "never skips: attends to future blocks too", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step",
       "applies the causal triangle to every past block, not just the diagonal one",
       False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    tri = torch.ones(c, c, dtype=torch.bool).tril()
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, tri)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "merged lse is the max of old and block lse", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    scores = q @ k_held.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if source == rank:
        c = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), float("-inf"))
    lse_b = torch.logsumexp(scores, dim=-1)
    out_b = torch.softmax(scores, dim=-1) @ v_held
    tot = torch.logaddexp(lse, lse_b)
    out = (torch.exp(lse - tot).unsqueeze(-1) * out
           + torch.exp(lse_b - tot).unsqueeze(-1) * out_b)
    return out, torch.maximum(lse, lse_b), k_held, v_held
"""),
    _s("ring_step", "forgets the 1/sqrt(E) scale in its own block attention", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    scores = torch.einsum("bie,bje->bij", q, k_held)
    if source == rank:
        c = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), float("-inf"))
    lse_b = torch.logsumexp(scores, dim=-1)
    out_b = torch.softmax(scores, dim=-1) @ v_held
    lse_new = torch.logaddexp(lse, lse_b)
    out = (torch.exp(lse - lse_new).unsqueeze(-1) * out
           + torch.exp(lse_b - lse_new).unsqueeze(-1) * out_b)
    return out, lse_new, k_held, v_held
"""),
    _s("ring_step",
       "uses its own keys and values at every step instead of the held block",
       False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
    out_b, lse_b = merge.partial_attention(q, k_own, v_own, mask)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),

    # ---------------------------------------------------------------- softcap_attention (ch. 11)
    _s("softcap_attention",
       "right: flex_attention with a score_mod written as a named closure",
       True, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def cap_scores(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap) * cap

    return flex_attention(q, k, v, score_mod=cap_scores)
"""),
    _s("softcap_attention", "cap * tanh(score), the division by cap forgotten", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score)

    return flex_attention(q, k, v, score_mod=softcap)
"""),
    _s("softcap_attention", "tanh(score / cap) without multiplying back by cap", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=softcap)
"""),
    _s("softcap_attention", "caps the raw dot products and scales after the tanh", False, """
def softcap_attention(q, k, v, cap):
    E = q.shape[-1]
    raw = q @ k.transpose(-2, -1)
    capped = cap * torch.tanh(raw / cap)
    return torch.softmax(capped / math.sqrt(E), dim=-1) @ v
"""),
    _s("softcap_attention", "hard clamp to [-cap, cap] instead of tanh", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return score.clamp(-cap, cap)

    return flex_attention(q, k, v, score_mod=softcap)
"""),
    _s("softcap_attention", "soft-caps the softmax weights instead of the scores", False, """
def softcap_attention(q, k, v, cap):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    p = torch.softmax(s, dim=-1)
    return (cap * torch.tanh(p / cap)) @ v
"""),
    _s("softcap_attention",
       "passes scale=1.0 to flex_attention, so the scores are never scaled",
       False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=softcap, scale=1.0)
"""),

    # ---------------------------------------------------------------- sink_softmax (ch. 14)
    _s("sink_softmax",
       "right: appends the sink as an extra column, softmax, drops that column",
       True, """
def sink_softmax(scores, sinks):
    B, H, L, S = scores.shape
    col = sinks.to(scores.dtype).view(1, H, 1, 1).expand(B, H, L, 1)
    full = torch.cat([scores, col], dim=-1)
    return torch.softmax(full, dim=-1)[..., :S]
"""),
    _s("sink_softmax", "appends the sink column at the end but drops the first column", False, """
def sink_softmax(scores, sinks):
    B, H, L, S = scores.shape
    col = sinks.view(1, H, 1, 1).expand(B, H, L, 1)
    full = torch.cat([scores, col], dim=-1)
    return torch.softmax(full, dim=-1)[..., 1:]
"""),
    _s("sink_softmax",
       "shifts the scores by their max but adds the sink term e^b unshifted",
       False, """
def sink_softmax(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    sink = torch.exp(sinks).view(1, -1, 1, 1)
    return e / (sink + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "no max shift at all: overflows for scores near 1000", False, """
def sink_softmax(scores, sinks):
    e = torch.exp(scores)
    denom = torch.exp(sinks)[None, :, None, None] + e.sum(-1, keepdim=True)
    return e / denom
"""),
    _s("sink_softmax",
       "broadcasts the sinks along the query axis instead of the head axis",
       False, """
def sink_softmax(scores, sinks):
    b = sinks[None, None, :, None]
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "max shift leaves out the sink, so an all -inf row gives NaN", False, """
def sink_softmax(scores, sinks):
    b = sinks.view(1, -1, 1, 1)
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "adds 1 to the denominator, ignoring the learned sink logits", False, """
def sink_softmax(scores, sinks):
    zero = torch.zeros((), dtype=scores.dtype)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), zero)
    e = torch.exp(scores - m)
    return e / (torch.exp(-m) + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax",
       "plain softmax scaled by sigmoid(lse - b): NaN on an all -inf row",
       False, """
def sink_softmax(scores, sinks):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    keep = torch.sigmoid(lse - sinks.view(1, -1, 1, 1))
    return torch.softmax(scores, dim=-1) * keep
"""),
    _s("sink_softmax", "sink logit with the wrong sign, e^(-b)", False, """
def sink_softmax(scores, sinks):
    b = -sinks.view(-1, 1, 1).expand(*scores.shape[:-1], 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))
"""),

    # ---------------------------------------------------------------- gated_attention (ch. 14)
    _s("gated_attention", "right: F.linear for both projections", True, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(F.linear(x, w_gate))
    return F.linear(attn * gate, w_out)
"""),
    _s("gated_attention", "SiLU gate instead of sigmoid", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = F.silu(x @ w_gate.T)
    return (attn * gate) @ w_out.T
"""),
    _s("gated_attention", "no sigmoid: multiplies by the raw projection", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = x @ w_gate.T
    return (attn * gate) @ w_out.T
"""),
    _s("gated_attention",
       "gate computed from the attention output instead of the layer input",
       False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(attn @ w_gate)
    return (attn @ w_out.T) * gate
"""),
    _s("gated_attention", "multiplies by the (out, in) weights without transposing them", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(x @ w_gate)
    return (attn * gate) @ w_out
"""),
    _s("gated_attention", "sigmoid applied to x before the gate projection", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(x) @ w_gate.T
    return (attn * gate) @ w_out.T
"""),
    _s("gated_attention", "adds the gate to the heads' output instead of multiplying", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(x @ w_gate.T)
    return (attn + gate) @ w_out.T
"""),
    _s("gated_attention", "1 - sigmoid: the gate's polarity reversed", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = 1 - torch.sigmoid(torch.matmul(x, w_gate.t()))
    return torch.matmul(attn * gate, w_out.t())
"""),
]

CORPUS += [
    # ---------------------------------------------------------------- second right answers
    _s("softmax", "right: moves dim to the end, works there, moves it back", True, """
def softmax(x, dim=-1):
    y = x.movedim(dim, -1)
    y = y - y.max(dim=-1, keepdim=True).values
    y = y.exp()
    y = y / y.sum(dim=-1, keepdim=True)
    return y.movedim(-1, dim)
"""),
    _s("merge_partials", "right: shift by the larger lse, shares divided by their total", True, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(torch.isneginf(m), 0.0)
    ea, eb = (lse_a - m).exp(), (lse_b - m).exp()
    total = ea + eb
    lse = m + total.log()
    denom = torch.where(total > 0, total, torch.ones_like(total))
    out = (ea / denom).unsqueeze(-1) * out_a + (eb / denom).unsqueeze(-1) * out_b
    return out, lse
"""),
    _s("ring_step",
       "right: hand-written block attention and merge, updates out and lse in place",
       True, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src <= rank:
        s = torch.einsum("bie,bje->bij", q, k_held) / math.sqrt(q.shape[-1])
        if src == rank:
            c = s.shape[-1]
            future = torch.ones(c, c, dtype=torch.bool).triu(diagonal=1)
            s = s.masked_fill(future, float("-inf"))
        lse_b = torch.logsumexp(s, dim=-1)
        out_b = torch.exp(s - lse_b[..., None]) @ v_held
        new_lse = torch.logaddexp(lse, lse_b)
        w_old = torch.exp(lse - new_lse)[..., None]
        w_new = torch.exp(lse_b - new_lse)[..., None]
        out.copy_(w_old * out + w_new * out_b)
        lse.copy_(new_lse)
    return out, lse, k_held, v_held
"""),
    _s("sink_softmax",
       "right: straight from the formula with one shift m = max(row max, b)",
       True, """
def sink_softmax(scores, sinks):
    b = sinks.to(scores.dtype)[:, None, None]  # (H, 1, 1) against (B, H, L, 1)
    m = torch.maximum(scores.max(dim=-1, keepdim=True).values, b)
    num = torch.exp(scores - m)
    den = num.sum(dim=-1, keepdim=True) + torch.exp(b - m)
    return num / den
"""),
]


def load(index: int):
    """The learner's function of ``CORPUS[index]``, defined as a notebook cell defines it."""
    return load_from(CORPUS, index)
