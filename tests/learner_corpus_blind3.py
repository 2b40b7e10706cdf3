"""A third blind corpus of learner submissions for measuring the exercise checkers (issue 51).

Written on 2026-11-28 for issue 51's acceptance (the final measure, after the checkers' changes),
from chapter text only (the exercise statements, the starter cells, the chapter text), by
someone who had not read the declared mistakes, the checkers or the earlier corpora. Each entry
is one submission as a learner would type it in a notebook cell: ``source`` defines a function
named after the exercise (helpers allowed) and may use the names a chapter notebook has imported
(``torch``, ``math``, ``F``, ``masks``, ``merge``; see :data:`NAMESPACE_NAMES`).

``right`` says whether the submission is correct (each right one was compared with torch or the
course's own implementation by hand when written); ``label`` says in the corpus author's words
what a wrong one gets wrong. Only ``exercises.check(...).passed`` was looked at while writing it,
to confirm that right ones pass and wrong ones fail.
"""

from __future__ import annotations

from learner_corpus_cells import NAMESPACE_NAMES, Submission, _s, load_from, namespace

__all__ = ["CORPUS", "NAMESPACE_NAMES", "Submission", "load", "namespace"]


CORPUS: list[Submission] = [
    # ------------------------------------------------------------------ scaled_scores
    _s("scaled_scores", "einsum over the last axes, scale from the query width", True, """
def scaled_scores(q, k):
    E = q.shape[-1]
    return torch.einsum("...le,...se->...ls", q, k) / math.sqrt(E)
"""),
    _s("scaled_scores", "uses k.T, which reverses every axis instead of the last two", False, """
def scaled_scores(q, k):
    return (q @ k.T) / math.sqrt(q.shape[-1])
"""),
    _s("scaled_scores", "divides by E instead of sqrt(E)", False, """
def scaled_scores(q, k):
    d = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1))
    return scores / d
"""),
    _s("scaled_scores", "scales by the square root of the number of keys S", False, """
def scaled_scores(q, k):
    S = k.shape[-2]
    return q @ k.transpose(-1, -2) / S ** 0.5
"""),
    _s("scaled_scores", "forgets the scaling altogether", False, """
def scaled_scores(q, k):
    # (..., L, E) x (..., E, S)
    return torch.matmul(q, k.transpose(-2, -1))
"""),
    _s("scaled_scores", "multiplies by sqrt(E) instead of dividing", False, """
def scaled_scores(q, k):
    scale = math.sqrt(q.shape[-1])
    return torch.einsum("...ie,...je->...ij", q, k) * scale
"""),
    _s("scaled_scores", "computes k q^T, the transposed (..., S, L) scores", False, """
def scaled_scores(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(k.shape[-1])
"""),
    _s("scaled_scores", "takes the width from axis 1 rather than the last axis", False, """
def scaled_scores(q, k):
    E = q.shape[1]
    return q @ k.transpose(-2, -1) / math.sqrt(E)
"""),
    # ------------------------------------------------------------------ softmax
    _s("softmax", "max-shifted exp along dim, sum with keepdim", True, """
def softmax(x, dim=-1):
    shifted = x - torch.amax(x, dim=dim, keepdim=True)
    ex = shifted.exp()
    return ex / ex.sum(dim, keepdim=True)
"""),
    _s("softmax", "no max subtraction: exp overflows for large logits", False, """
def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "subtracts the global max of the whole tensor, not the max of each slice",
       False, """
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / torch.sum(e, dim=dim, keepdim=True)
"""),
    _s("softmax", "normalises over the last axis whatever dim is", False, """
def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)
"""),
    _s("softmax", "max without keepdim, so the shift broadcasts along the wrong axis", False, """
def softmax(x, dim=-1):
    m = x.max(dim=dim).values
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "centres with the mean instead of the max", False, """
def softmax(x, dim=-1):
    z = x - x.mean(dim=dim, keepdim=True)
    num = torch.exp(z)
    return num / num.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "computes in float32 and returns float32 for every input dtype", False, """
def softmax(x, dim=-1):
    x = x.float()
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "naive exp with nan_to_num to hide the overflow", False, """
def softmax(x, dim=-1):
    e = torch.exp(x)
    out = e / e.sum(dim=dim, keepdim=True)
    return torch.nan_to_num(out, nan=0.0)
"""),
    # ------------------------------------------------------------------ self_attention
    _s("self_attention", "own stable softmax helper, einsum projections", True, """
def _softmax_rows(s):
    s = s - s.amax(dim=-1, keepdim=True)
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)

def self_attention(x, w_q, w_k, w_v):
    q = torch.einsum("bld,de->ble", x, w_q)
    k = torch.einsum("bld,de->ble", x, w_k)
    v = torch.einsum("bld,de->ble", x, w_v)
    scores = q @ k.transpose(1, 2) / math.sqrt(w_q.shape[1])
    weights = _softmax_rows(scores)
    return weights @ v, weights
"""),
    _s("self_attention", "softmax over the query axis (columns sum to 1)", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-2)
    return weights @ v, weights
"""),
    _s("self_attention", "scales by sqrt of the model width D instead of E", False, """
def self_attention(x, w_q, w_k, w_v):
    D = x.shape[-1]
    Q = torch.matmul(x, w_q)
    K = torch.matmul(x, w_k)
    V = torch.matmul(x, w_v)
    A = torch.softmax(Q @ K.mT / math.sqrt(D), dim=-1)
    return A @ V, A
"""),
    _s("self_attention", "multiplies the values by the transposed weights", False, """
def self_attention(x, w_q, w_k, w_v):
    q = x @ w_q
    k = x @ w_k
    v = x @ w_v
    w = F.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    out = w.transpose(-2, -1) @ v
    return out, w
"""),
    _s("self_attention", "returns (weights, out) in the wrong order", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    out = weights @ v
    return weights, out
"""),
    _s("self_attention", "computes K Q^T, the transposed score matrix", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = k @ q.transpose(-2, -1) / math.sqrt(k.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
"""),
    _s("self_attention", "forgets the 1/sqrt(E) scale", False, """
def self_attention(x, w_q, w_k, w_v):
    Q, K, V = (x @ w for w in (w_q, w_k, w_v))
    weights = (Q @ K.transpose(-2, -1)).softmax(dim=-1)
    return weights @ V, weights
"""),
    # ------------------------------------------------------------------ split_heads
    _s("split_heads", "view then transpose(1, 2)", True, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)
"""),
    _s("split_heads", "chunks the features and stacks them on a new head axis", True, """
def split_heads(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)
"""),
    _s("split_heads", "reshapes straight to (B, H, L, E) without moving the token axis", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)
"""),
    _s("split_heads", "cuts the features as (E, H), so each head gets every H-th feature",
       False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    return x.reshape(B, L, E, num_heads).permute(0, 3, 1, 2)
"""),
    _s("split_heads", "treats num_heads as the head width", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    E = num_heads
    H = D // E
    return x.view(B, L, H, E).transpose(1, 2)
"""),
    _s("split_heads", "stacks the chunks on axis 2: (B, L, H, E), heads not moved forward",
       False, """
def split_heads(x, num_heads):
    parts = torch.chunk(x, num_heads, dim=-1)
    return torch.stack(parts, dim=2)
"""),
    # ------------------------------------------------------------------ merge_heads
    _s("merge_heads", "transpose(1, 2) then reshape", True, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).reshape(B, L, H * E)
"""),
    _s("merge_heads", "reshapes without moving the head axis back", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.reshape(B, L, H * E)
"""),
    _s("merge_heads", "permute(0, 2, 3, 1): features come out E-major, interleaving heads",
       False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, E * H)
"""),
    _s("merge_heads", "view on the transposed, non-contiguous tensor", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).view(B, L, -1)
"""),
    _s("merge_heads", "concatenates the heads along the token axis", False, """
def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=1)
"""),
    _s("merge_heads", "swaps L and E instead of H and L before flattening", False, """
def merge_heads(x):
    B, H, L, E = x.shape
    y = x.transpose(2, 3).contiguous()
    return y.view(B, L, H * E)
"""),
    # ------------------------------------------------------------------ multi_head_attention
    _s("multi_head_attention", "einsum per head, merges with transpose + reshape", True, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.view(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v))
    s = torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(E)
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhij,bhje->bhie", p, v)
    return o.transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "forgets the output projection w_o", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = [t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3) for t in (q, k, v)]
    a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (a @ v).permute(0, 2, 1, 3).reshape(B, L, D)
"""),
    _s("multi_head_attention", "scales every head by 1/sqrt(D), the model width", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = x @ w_qkv
    q, k, v = qkv.split(D, dim=-1)
    def heads(t):
        return t.view(B, L, num_heads, E).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    out = (w @ v).transpose(1, 2).reshape(B, L, D)
    return out @ w_o
"""),
    _s("multi_head_attention", "splits heads by a plain reshape to (B, H, L, E)", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q = q.reshape(B, num_heads, L, E)
    k = k.reshape(B, num_heads, L, E)
    v = v.reshape(B, num_heads, L, E)
    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    y = att @ v
    y = y.transpose(1, 2).reshape(B, L, D)
    return y @ w_o
"""),
    _s("multi_head_attention", "applies w_o transposed, as if it were an nn.Linear weight",
       False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    H = num_heads
    E = D // H
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.unflatten(-1, (H, E)).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(E))
    out = torch.softmax(scores, dim=-1) @ v
    out = out.transpose(1, 2).flatten(2)
    return out @ w_o.T
"""),
    _s("multi_head_attention", "softmax over the query axis in every head", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (t.view(B, L, num_heads, E).transpose(1, 2)
               for t in (x @ w_qkv).split(D, dim=-1))
    w = (q @ k.transpose(-2, -1) / math.sqrt(E)).softmax(dim=2)
    return (w @ v).transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "merges the heads with a reshape and no transpose back", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1) @ v
    return heads.reshape(B, L, D) @ w_o
"""),
    # ------------------------------------------------------------------ apply_rope
    _s("apply_rope", "angles in float64, halves rotated with explicit formulas", True, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    h = E // 2
    i = torch.arange(h, dtype=torch.float64)
    theta = base ** (-2.0 * i / E)
    m = torch.arange(L, dtype=torch.float64) + offset
    ang = m[:, None] * theta[None, :]
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)
"""),
    _s("apply_rope", "rotates interleaved pairs (x_2i, x_2i+1) instead of split halves", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    ang = torch.outer(pos, theta)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * cos - xo * sin
    out[..., 1::2] = xe * sin + xo * cos
    return out
"""),
    _s("apply_rope", "ignores the offset: positions always start at 0", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / E)
    pos = torch.arange(L, dtype=torch.float64)
    angle = pos[:, None] * theta
    cos = torch.cat([angle.cos(), angle.cos()], -1).to(x.dtype)
    sin = torch.cat([angle.sin(), angle.sin()], -1).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([-x2, x1], -1) * sin
"""),
    _s("apply_rope", "frequencies base^(-i/E): the factor 2 in the exponent is missing", False, """
def apply_rope(x, offset=0, base=10000.0):
    *_, L, E = x.shape
    half = E // 2
    idx = torch.arange(half, dtype=torch.float64)
    theta = 1.0 / (base ** (idx / E))
    pos = offset + torch.arange(L, dtype=torch.float64)
    a = pos.unsqueeze(-1) * theta
    cos, sin = torch.cos(a).to(x.dtype), torch.sin(a).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
"""),
    _s("apply_rope", "rotate_half with the sign on the wrong half: rotates by -m theta", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    angle = pos[:, None] * theta[None, :]
    cos = angle.cos().repeat(1, 2).to(x.dtype)
    sin = angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat([x2, -x1], dim=-1) * sin
"""),
    _s("apply_rope", "positions offset+1 .. offset+L, one too far", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    inv_freq = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    pos = torch.arange(1, L + 1, dtype=torch.float64) + offset
    ang = pos[:, None] * inv_freq[None, :]
    c = torch.cos(ang).to(x.dtype)
    s = torch.sin(ang).to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)
"""),
    _s("apply_rope", "divides the exponent by E/2 instead of E", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=torch.float64) / half)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    ang = pos[:, None] * theta
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)
"""),
    # ------------------------------------------------------------------ alibi_bias
    _s("alibi_bias", "slopes and distances built with broadcasting in float32", True, """
def alibi_bias(H, L, S):
    h = torch.arange(H, dtype=torch.float32)
    slopes = torch.pow(2.0, -8.0 * (h + 1) / H)
    i_pos = torch.arange(L, dtype=torch.float32) + (S - L)
    j_pos = torch.arange(S, dtype=torch.float32)
    dist = j_pos[None, :] - i_pos[:, None]
    return slopes[:, None, None] * dist[None]
"""),
    _s("alibi_bias", "slopes 2^(-8h/H) with h counted from 0: the first head gets slope 1",
       False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(H, dtype=torch.float64) / H)
    qi = torch.arange(S - L, S, dtype=torch.float64)
    kj = torch.arange(S, dtype=torch.float64)
    return (slopes.view(H, 1, 1) * (kj[None, :] - qi[:, None])).float()
"""),
    _s("alibi_bias", "puts query i at position i, forgetting the S - L shift", False, """
def alibi_bias(H, L, S):
    slopes = torch.tensor([2 ** (-8 * (h + 1) / H) for h in range(H)], dtype=torch.float32)
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    return slopes[:, None, None] * (j - i).float()
"""),
    _s("alibi_bias", "distance i' - j: the sign is flipped", False, """
def alibi_bias(H, L, S):
    m = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    qpos = torch.arange(L, dtype=torch.float64) + S - L
    kpos = torch.arange(S, dtype=torch.float64)
    d = qpos[:, None] - kpos[None, :]
    return (m[:, None, None] * d).to(torch.float32)
"""),
    _s("alibi_bias", "masks the future keys with -inf although told not to", False, """
def alibi_bias(H, L, S):
    m = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    qpos = torch.arange(S - L, S, dtype=torch.float64)[:, None]
    kpos = torch.arange(S, dtype=torch.float64)[None, :]
    bias = m[:, None, None] * (kpos - qpos)
    bias = bias.masked_fill((kpos > qpos)[None], float("-inf"))
    return bias.float()
"""),
    _s("alibi_bias", "returns float64, the dtype of the slopes it computed", False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    rel = (torch.arange(S, dtype=torch.float64)[None, :]
           - torch.arange(S - L, S, dtype=torch.float64)[:, None])
    return slopes[:, None, None] * rel
"""),
    _s("alibi_bias", "uses -m|j - i'|, a symmetric distance that also penalises future keys",
       False, """
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    i_prime = torch.arange(L, dtype=torch.float64)[:, None] + (S - L)
    j = torch.arange(S, dtype=torch.float64)[None, :]
    return (-slopes[:, None, None] * (j - i_prime).abs()).to(torch.float32)
"""),
    # ------------------------------------------------------------------ causal_mask
    _s("causal_mask", "compares aranges: j <= i", True, """
def causal_mask(n):
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return j <= i
"""),
    _s("causal_mask", "triu: the upper triangle, queries see the future", False, """
def causal_mask(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool))
"""),
    _s("causal_mask", "tril(diagonal=-1): a query may not see itself", False, """
def causal_mask(n):
    return torch.ones(n, n).tril(diagonal=-1).bool()
"""),
    _s("causal_mask", "returns the float 0/1 matrix instead of bool", False, """
def causal_mask(n):
    return torch.tril(torch.ones(n, n))
"""),
    _s("causal_mask", "True where masked out (the future), the opposite convention", False, """
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu(1)
"""),
    _s("causal_mask", "tril(diagonal=1): each query also sees the next key", False, """
def causal_mask(n):
    idx = torch.arange(n)
    return idx[None, :] <= idx[:, None] + 1
"""),
    # ------------------------------------------------------------------ padding_mask
    _s("padding_mask", "ne then view to (B, 1, 1, N)", True, """
def padding_mask(tokens, pad_id=0):
    B, N = tokens.shape
    return tokens.ne(pad_id).view(B, 1, 1, N)
"""),
    _s("padding_mask", "True on the padding tokens", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens == pad_id)[:, None, None, :]
"""),
    _s("padding_mask", "unsqueezes to (B, 1, N, 1): masks queries instead of keys", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).unsqueeze(1).unsqueeze(-1)
"""),
    _s("padding_mask", "returns (B, 1, N), missing the query axis", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).unsqueeze(1)
"""),
    _s("padding_mask", "hard-codes pad id 0 and ignores pad_id", False, """
def padding_mask(tokens, pad_id=0):
    keep = tokens != 0
    return keep[:, None, None, :]
"""),
    _s("padding_mask", "returns a float mask of ones and zeros", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).float().reshape(tokens.shape[0], 1, 1, -1)
"""),
    _s("padding_mask", "tokens > pad_id: assumes the pad id is the smallest id", False, """
def padding_mask(tokens, pad_id=0):
    return (tokens > pad_id)[:, None, None, :]
"""),
    # ------------------------------------------------------------------ masked_attention
    _s("masked_attention", "where on the mask, guard on the max and on the sum", True, """
def masked_attention(q, k, v, mask):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = torch.where(mask, s, torch.full_like(s, float("-inf")))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    p = p / denom.clamp_min(1e-30)
    return p @ v
"""),
    _s("masked_attention", "torch.softmax then nan_to_num to zero the dead rows", True, """
def masked_attention(q, k, v, mask):
    E = q.size(-1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(E)
    scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, v)
"""),
    _s("masked_attention", "no guard: a query with no allowed key gets NaN", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
"""),
    _s("masked_attention", "fills -inf where the mask is True (inverted polarity)", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w = torch.nan_to_num(w)
    return w @ v
"""),
    _s("masked_attention", "zeroes the weights after the softmax without renormalising", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1) * mask
    return weights @ v
"""),
    _s("masked_attention", "fills -1e9 instead of -inf: a dead row averages every value", False, """
def masked_attention(q, k, v, mask):
    scores = torch.einsum("...le,...se->...ls", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, -1e9)
    return torch.einsum("...ls,...se->...le", scores.softmax(-1), v)
"""),
    _s("masked_attention", "forgets the 1/sqrt(E) scale", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
    return w @ v
"""),
    _s("masked_attention", "adds the bool mask as 0/1 to the scores instead of -inf", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores + mask.to(scores.dtype)
    return torch.softmax(scores, dim=-1) @ v
"""),
    # ------------------------------------------------------------------ online_softmax_stats
    _s("online_softmax_stats", "python floats, skips blocks that are all -inf", True, """
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
    _s("online_softmax_stats", "rescales with e^(m_new - m), the inverse factor", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    ell = torch.tensor(0.0)
    for x in blocks:
        m_new = torch.maximum(m, x.max())
        if m_new == float("-inf"):
            continue
        scale = torch.exp(m_new - m) if ell > 0 else torch.tensor(1.0)
        ell = ell * scale + torch.exp(x - m_new).sum()
        m = m_new
    return m, ell
"""),
    _s("online_softmax_stats", "starts the running max at 0 instead of -inf", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(0.0)
    l = torch.tensor(0.0)
    for blk in blocks:
        m_new = torch.maximum(m, blk.max())
        l = torch.exp(m - m_new) * l + torch.exp(blk - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "no -inf guard: e^(-inf - (-inf)) turns the sum into NaN", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "sums each block around its own max, not the new running max",
       False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        bmax = b.max()
        if bmax == float("-inf"):
            continue
        m_new = torch.maximum(m, bmax)
        l = l * torch.exp(m - m_new) + torch.exp(b - bmax).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "reads all blocks into a list and computes the max first", False, """
def online_softmax_stats(blocks):
    blocks = list(blocks)
    m = torch.tensor(float("-inf"))
    for b in blocks:
        m = torch.maximum(m, b.max())
    if m == float("-inf"):
        return m, torch.tensor(0.0)
    l = sum(torch.exp(b - m).sum() for b in blocks)
    return m, l
"""),
    # ------------------------------------------------------------------ flash_attention
    _s("flash_attention", "key-block loop with a running max, sum and output, divided at the end",
       True, """
def flash_attention(q, k, v, block_size=64):
    scale = q.shape[-1] ** -0.5
    S = k.shape[-2]
    m = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    l = q.new_zeros(q.shape[:-1] + (1,))
    acc = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, S, block_size):
        kb = k[..., start:start + block_size, :]
        vb = v[..., start:start + block_size, :]
        s = torch.matmul(q, kb.transpose(-1, -2)) * scale
        m_next = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_next)
        corr = torch.exp(m - m_next)
        l = l * corr + p.sum(-1, keepdim=True)
        acc = acc * corr + p @ vb
        m = m_next
    return acc / l
"""),
    _s("flash_attention", "rescales the running sum but not the accumulated output", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j:j + block_size, :].transpose(-2, -1) * s
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P = torch.exp(S_j - m_new)
        ell = torch.exp(m - m_new) * ell + P.sum(dim=-1, keepdim=True)
        O = O + P @ v[..., j:j + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "forgets the final division by the running sum", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, float("-inf"), dtype=q.dtype)
    ell = torch.zeros(rows, dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        kj, vj = k[..., j0:j0 + block_size, :], v[..., j0:j0 + block_size, :]
        Sj = (q @ kj.transpose(-2, -1)) * s
        m_new = torch.maximum(m, Sj.amax(dim=-1, keepdim=True))
        Pj = torch.exp(Sj - m_new)
        alpha = torch.exp(m - m_new)
        ell = alpha * ell + Pj.sum(dim=-1, keepdim=True)
        O = alpha * O + Pj @ vj
        m = m_new
    return O
"""),
    _s("flash_attention", "forgets the 1/sqrt(E) scale of the scores", False, """
def flash_attention(q, k, v, block_size=64):
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        sc = torch.einsum("bhle,bhse->bhls", q, k[:, :, j:j + block_size])
        mn = torch.maximum(m, sc.max(dim=-1, keepdim=True).values)
        p = (sc - mn).exp()
        a = (m - mn).exp()
        l = a * l + p.sum(-1, keepdim=True)
        o = a * o + torch.einsum("bhls,bhse->bhle", p, v[:, :, j:j + block_size])
        m = mn
    return o / l
"""),
    _s("flash_attention", "correction factor e^(m_new - m), upside down", False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), -float("inf"), dtype=q.dtype)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    out = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        alpha = torch.exp(m_new - m).nan_to_num(0.0, posinf=0.0)
        l = alpha * l + p.sum(-1, keepdim=True)
        out = alpha * out + p @ v[..., j:j + block_size, :]
        m = m_new
    return out / l
"""),
    _s("flash_attention", "computes the full score matrix and a plain softmax", False, """
def flash_attention(q, k, v, block_size=64):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v
"""),
    _s("flash_attention", "tiles the queries and takes a whole row of scores per tile", False, """
def flash_attention(q, k, v, block_size=64):
    outs = []
    scale = 1.0 / math.sqrt(q.shape[-1])
    for i in range(0, q.shape[-2], block_size):
        qi = q[..., i:i + block_size, :]
        s = qi @ k.transpose(-2, -1) * scale
        s = s - s.amax(dim=-1, keepdim=True)
        p = s.exp()
        outs.append((p @ v) / p.sum(dim=-1, keepdim=True))
    return torch.cat(outs, dim=-2)
"""),
    _s("flash_attention", "moves m to m_new before taking the correction, so it is always 1",
       False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1.0 / math.sqrt(q.shape[-1])
    B, H, N, E = q.shape
    m = torch.full((B, H, N, 1), float("-inf"), dtype=q.dtype)
    ell = torch.zeros((B, H, N, 1), dtype=q.dtype)
    O = torch.zeros((B, H, N, v.shape[-1]), dtype=q.dtype)
    for j0 in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j0:j0 + block_size, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, S_j.amax(dim=-1, keepdim=True))
        P_j = torch.exp(S_j - m_new)
        m = m_new
        alpha = torch.exp(m - m_new)
        ell = alpha * ell + P_j.sum(dim=-1, keepdim=True)
        O = alpha * O + P_j @ v[..., j0:j0 + block_size, :]
    return O / ell
"""),
    # ------------------------------------------------------------------ decode_step
    _s("decode_step", "masks.causal_mask bottom_right, rotate_half helper", True, """
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
    k_all = torch.cat([k_cache, k], dim=1)
    v_all = torch.cat([v_cache, v], dim=1)
    S = k_all.shape[1]
    scores = q @ k_all.transpose(1, 2) / math.sqrt(q.shape[-1])
    allowed = masks.causal_mask(L, S, align="bottom_right")
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v_all, k_all, v_all
"""),
    _s("decode_step", "rotates the new tokens at positions 0..L-1 (rows :L of the tables)",
       False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    L = x.shape[-2]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[:L] + torch.cat([-t2, t1], dim=-1) * sin[:L]
    q, k = rope(q), rope(k)
    K = torch.cat([k_cache, k], dim=-2)
    V = torch.cat([v_cache, v], dim=-2)
    S = K.shape[-2]
    scores = q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ V, K, V
"""),
    _s("decode_step", "top-left causal mask: new queries see only the first keys", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    cs, sn = cos[P:P + L], sin[P:P + L]
    def rope(t):
        h = t.shape[-1] // 2
        return t * cs + torch.cat([-t[..., h:], t[..., :h]], dim=-1) * sn
    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = masks.causal_mask(L, k.shape[-2])
    scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, k, v
"""),
    _s("decode_step", "rotates the values as well as the queries and keys", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q, k, v = (rope(x @ w) for w in (w_q, w_k, w_v))
    k = torch.cat([k_cache, k], dim=-2)
    v = torch.cat([v_cache, v], dim=-2)
    S = k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return torch.softmax(s, dim=-1) @ v, k, v
"""),
    _s("decode_step", "appends the keys to the cache before rotating them", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    k_cache = torch.cat([k_cache, k_new], dim=-2)
    v_cache = torch.cat([v_cache, v_new], dim=-2)
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q = rope(q)
    k_all = torch.cat([k_cache[:, :P], rope(k_new)], dim=-2)
    S = P + L
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v_cache, k_cache, v_cache
"""),
    _s("decode_step", "rotate_half as [t2, -t1]: the rotation goes the other way", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    c, s = cos[P:P + L], sin[P:P + L]
    def rot(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * c + torch.cat([t2, -t1], dim=-1) * s
    q, k_new, v_new = rot(x @ w_q), rot(x @ w_k), x @ w_v
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    sc = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    sc = sc.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return torch.softmax(sc, dim=-1) @ v, k, v
"""),
    _s("decode_step", "attends only to the new keys, not to the cached ones", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q, k_new = rope(q), rope(k_new)
    scores = q @ k_new.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~masks.causal_mask(L), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v_new
    return out, torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
"""),
    _s("decode_step", "forgets the 1/sqrt(E) scale", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[-2], x.shape[-2]
    q, k_new, v_new = x @ w_q, x @ w_k, x @ w_v
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q, k_new = rope(q), rope(k_new)
    k = torch.cat([k_cache, k_new], dim=-2)
    v = torch.cat([v_cache, v_new], dim=-2)
    S = k.shape[-2]
    scores = torch.einsum("ble,bse->bls", q, k)
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v, k, v
"""),
    # ------------------------------------------------------------------ repeat_kv
    _s("repeat_kv", "repeat_interleave along the head axis", True, """
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)
"""),
    _s("repeat_kv", "x.repeat tiles the heads: head h gets kv head h mod Hkv", False, """
def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
"""),
    _s("repeat_kv", "inserts the copy axis before the kv-head axis, so the reshape tiles",
       False, """
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x[:, None].expand(B, n_rep, Hkv, S, E).reshape(B, n_rep * Hkv, S, E)
"""),
    _s("repeat_kv", "torch.cat of n_rep copies along the head axis", False, """
def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    return torch.cat([x] * n_rep, dim=1)
"""),
    _s("repeat_kv", "repeat_interleave along the sequence axis", False, """
def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=2)
"""),
    _s("repeat_kv", "repeat_interleave without dim: flattens the tensor", False, """
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x.repeat_interleave(n_rep).reshape(B, Hkv * n_rep, S, E)
"""),
    # ------------------------------------------------------------------ sliding_window_mask
    _s("sliding_window_mask", "band from tril and triu", True, """
def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return ones.tril() & ones.triu(diagonal=-(window - 1))
"""),
    _s("sliding_window_mask", "j >= i - window: one key too many", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (j >= i - window)
"""),
    _s("sliding_window_mask", "symmetric band |i - j| < window: not causal", False, """
def sliding_window_mask(n, window):
    idx = torch.arange(n)
    return (idx[:, None] - idx[None, :]).abs() < window
"""),
    _s("sliding_window_mask", "excludes the query itself (j < i)", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return (j < i) & (j >= i - window)
"""),
    _s("sliding_window_mask", "returns an int 0/1 tensor", False, """
def sliding_window_mask(n, window):
    m = torch.ones(n, n, dtype=torch.int64)
    return torch.tril(m) - torch.tril(m, diagonal=-window)
"""),
    _s("sliding_window_mask", "triu with +(window - 1): the sign of the diagonal is flipped",
       False, """
def sliding_window_mask(n, window):
    full = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(full) & torch.triu(full, diagonal=window - 1)
"""),
    # ------------------------------------------------------------------ mla_absorbed_step
    _s("mla_absorbed_step", "einsum throughout, W_UK absorbed into the query, W_UV after the sum",
       True, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    cs, sn = cos[P:P + L], sin[P:P + L]

    def rot(t):
        a, b = t[..., :R // 2], t[..., R // 2:]
        return t * cs + torch.cat([-b, a], dim=-1) * sn

    c = torch.cat([c_cache, c_new], dim=1)
    kr = torch.cat([k_rope_cache, rot(k_rope_new)], dim=1)
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N, :], w[:, N:, :]
    q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
    s = (torch.einsum("bhlr,bsr->bhls", q_lat, c)
         + torch.einsum("bhld,bsd->bhls", rot(q_rope), kr))
    s = s / math.sqrt(N + R)
    S = c.shape[1]
    s = s.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(s, dim=-1)
    o_lat = torch.einsum("bhls,bsr->bhlr", p, c)
    return torch.einsum("bhlr,hvr->bhlv", o_lat, w_uv), c, kr
"""),
    _s("mla_absorbed_step", "scales by 1/sqrt(N), forgetting the rotary width", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P = c_cache.shape[-2]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "takes W_UV from the first rows and W_UK from the last", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    r = c_cache.shape[-1]
    V = w_kv_b.shape[0] // H - N
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    kr = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, N + V, r)
    w_uv, w_uk = w[:, :V], w[:, V:]
    q_lat = q_nope @ w_uk
    scores = (q_lat @ c[:, None].mT + rope(q_rope) @ kr[:, None].mT) / math.sqrt(N + R)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.mT, c, kr
"""),
    _s("mla_absorbed_step", "rotates the new rotary keys but leaves q_rope unrotated", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + q_rope @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "rotates at positions 0..L-1 instead of P..P+L-1", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[:L] + torch.cat([-t2, t1], dim=-1) * sin[:L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "top-left causal mask instead of bottom-right", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    allowed = masks.causal_mask(L, c.shape[-2])
    p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "caches the rotary keys before rotating them", False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    new_cache = torch.cat([k_rope_cache, k_rope_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, new_cache
"""),
    _s("mla_absorbed_step", "divides only the latent term by sqrt(N + R), not the rotary term",
       False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w = w_kv_b.view(H, -1, c.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    scores = (q_nope @ w_uk) @ c[:, None].transpose(-2, -1) / math.sqrt(N + R) \\
        + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    _s("mla_absorbed_step", "reads w_kv_b as all heads' W_UK rows first, then all W_UV rows",
       False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[-2], q_rope.shape[-1]
    r = c_cache.shape[-1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    c = torch.cat([c_cache, c_new], dim=-2)
    k_rope = torch.cat([k_rope_cache, rope(k_rope_new)], dim=-2)
    w_uk = w_kv_b[:H * N].reshape(H, N, r)
    w_uv = w_kv_b[H * N:].reshape(H, -1, r)
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + rope(q_rope) @ k_rope[:, None].transpose(-2, -1)) / math.sqrt(N + R)
    S = c.shape[-2]
    scores = scores.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ c[:, None]) @ w_uv.transpose(-2, -1), c, k_rope
"""),
    # ------------------------------------------------------------------ merge_partials
    _s("merge_partials", "shift by the larger lse, zero shift on empty rows, where on the weights",
       True, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(torch.isneginf(m), 0.0)
    ea, eb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    tot = ea + eb
    lse = m + torch.log(tot)
    safe = torch.where(tot > 0, tot, torch.ones_like(tot))
    out = (ea / safe)[..., None] * out_a + (eb / safe)[..., None] * out_b
    return out, lse
"""),
    _s("merge_partials", "lse = log(e^lse_a + e^lse_b) with no shift: overflows near 1000",
       False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
    wa = torch.exp(lse_a - lse).nan_to_num(0.0).unsqueeze(-1)
    wb = torch.exp(lse_b - lse).nan_to_num(0.0).unsqueeze(-1)
    return wa * out_a + wb * out_b, lse
"""),
    _s("merge_partials", "averages the two outputs with equal weights", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (out_a + out_b) / 2, lse
"""),
    _s("merge_partials", "weights e^lse / (e^lse_a + e^lse_b) computed unshifted", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    ea, eb = lse_a.exp(), lse_b.exp()
    total = ea + eb
    lse = total.log()
    out = (ea / total).unsqueeze(-1) * out_a + (eb / total).unsqueeze(-1) * out_b
    return torch.nan_to_num(out), lse
"""),
    _s("merge_partials", "no guard for rows where both lse are -inf: NaN", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    out = (torch.exp(lse_a - lse)[..., None] * out_a
           + torch.exp(lse_b - lse)[..., None] * out_b)
    return out, lse
"""),
    _s("merge_partials", "returns max(lse_a, lse_b) as the merged lse", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m0 = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(lse_a - m0), torch.exp(lse_b - m0)
    denom = (wa + wb).clamp_min(1e-38)
    out = (wa / denom).unsqueeze(-1) * out_a + (wb / denom).unsqueeze(-1) * out_b
    return out, m
"""),
    _s("merge_partials", "weights swapped: out_a gets b's share", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(w_a + w_b)
    sa = torch.exp(lse_a - lse).nan_to_num(0.0).unsqueeze(-1)
    sb = torch.exp(lse_b - lse).nan_to_num(0.0).unsqueeze(-1)
    return sb * out_a + sa * out_b, lse
"""),
    _s("merge_partials", "forgets to unsqueeze the weights over the value axis", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    wa = torch.exp(lse_a - lse).nan_to_num(0.0)
    wb = torch.exp(lse_b - lse).nan_to_num(0.0)
    return wa * out_a + wb * out_b, lse
"""),
    _s("merge_partials", "adds the two lse (a product of sums) instead of log-adding", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = lse_a + lse_b
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    z = (wa + wb).clamp_min(1e-38)
    return (wa / z)[..., None] * out_a + (wb / z)[..., None] * out_b, lse
"""),
    # ------------------------------------------------------------------ ring_step
    _s("ring_step", "course helpers: partial_attention on the held block, merge_partials", True, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src > rank:
        return out, lse, k_held, v_held
    mask = None
    if src == rank:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril()
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "source rank (rank + step) mod world: the ring turned the wrong way", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank + step) % world
    if source > rank:
        return out, lse, k_held, v_held
    mask = None
    if source == rank:
        mask = torch.ones(q.shape[-2], k_held.shape[-2], dtype=torch.bool).tril()
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "never skips a future block: attends to every block", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    mask = None
    if step == 0:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril()
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    new_out, new_lse = merge.merge_partials(out, lse, o_b, l_b)
    return new_out, new_lse, k_held, v_held
"""),
    _s("ring_step", "does not mask the diagonal block", False, """
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
    _s("ring_step", "masks the diagonal block strictly (j < i): a query misses its own key",
       False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril(-1) if source == rank else None
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    return (*merge.merge_partials(out, lse, o_b, l_b), k_held, v_held)
"""),
    _s("ring_step", "sends its own keys and values on instead of the block it holds", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source <= rank:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
        o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_own, v_own
"""),
    _s("ring_step", "skips when source >= rank, so the diagonal block is never computed", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source >= rank:
        return out, lse, k_held, v_held
    o_b, l_b = merge.partial_attention(q, k_held, v_held)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "applies the causal triangle to every earlier block too", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    tri = torch.ones(c, c, dtype=torch.bool).tril()
    o_b, l_b = merge.partial_attention(q, k_held, v_held, tri)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
"""),
    _s("ring_step", "replaces the running result with this block's instead of merging", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril() if source == rank else None
    out_b, lse_b = merge.partial_attention(q, k_held, v_held, mask)
    return out_b, lse_b, k_held, v_held
"""),
    _s("ring_step", "scores against its own keys but weights the held values", False, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    source = (rank - step) % world
    if source > rank:
        return out, lse, k_held, v_held
    scores = q @ k_own.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if source == rank:
        c = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), float("-inf"))
    lse_b = torch.logsumexp(scores, dim=-1)
    out_b = torch.softmax(scores, dim=-1) @ v_held
    out, lse = merge.merge_partials(out, lse, out_b, lse_b)
    return out, lse, k_held, v_held
"""),
    # ------------------------------------------------------------------ softcap_attention
    _s("softcap_attention", "flex_attention with a tanh score_mod", True, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap) * cap

    return flex_attention(q, k, v, score_mod=score_mod)
"""),
    _s("softcap_attention", "caps the raw scores first and scales by 1/sqrt(E) afterwards",
       False, """
def softcap_attention(q, k, v, cap):
    s = q @ k.transpose(-2, -1)
    s = cap * torch.tanh(s / cap)
    s = s / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v
"""),
    _s("softcap_attention", "cap * tanh(score): forgets to divide by cap inside", False, """
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
    _s("softcap_attention", "divides by sqrt(E) again inside the score_mod", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention
    E = q.shape[-1]
    def softcap(score, b, h, q_idx, kv_idx):
        s = score / math.sqrt(E)
        return cap * torch.tanh(s / cap)
    return flex_attention(q, k, v, score_mod=softcap)
"""),
    _s("softcap_attention", "hard clamp to [-cap, cap] instead of tanh", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention
    def softcap(score, b, h, q_idx, kv_idx):
        return torch.clamp(score, -cap, cap)
    return flex_attention(q, k, v, score_mod=softcap)
"""),
    _s("softcap_attention", "passes scale=1.0, so the unscaled scores are capped", False, """
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention
    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return flex_attention(q, k, v, score_mod=softcap, scale=1.0)
"""),
    # ------------------------------------------------------------------ sink_softmax
    _s("sink_softmax", "max over scores and sink, sink only in the denominator", True, """
def sink_softmax(scores, sinks):
    b = sinks[None, :, None, None].to(scores.dtype)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = (scores - m).exp()
    return e / (e.sum(dim=-1, keepdim=True) + (b - m).exp())
"""),
    _s("sink_softmax", "appends the sink as an extra column, softmax, drops it", True, """
def sink_softmax(scores, sinks):
    B, H, L, S = scores.shape
    col = sinks.view(1, H, 1, 1).expand(B, H, L, 1).to(scores.dtype)
    full = torch.softmax(torch.cat([scores, col], dim=-1), dim=-1)
    return full[..., :S]
"""),
    _s("sink_softmax", "adds 1 to the denominator (a sink of logit 0) and ignores sinks", False, """
def sink_softmax(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True).clamp(min=0.0)
    e = torch.exp(scores - m)
    return e / (torch.exp(-m) + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "no max shift: e^1000 overflows", False, """
def sink_softmax(scores, sinks):
    e = torch.exp(scores)
    denom = torch.exp(sinks).view(1, -1, 1, 1) + e.sum(dim=-1, keepdim=True)
    return e / denom
"""),
    _s("sink_softmax", "shifts by the max of the scores only: an all -inf row gives NaN", False, """
def sink_softmax(scores, sinks):
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - m)
    sink = torch.exp(sinks.view(1, -1, 1, 1) - m)
    return e / (sink + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "sinks viewed as (H, 1): lines up with the query axis, not the heads",
       False, """
def sink_softmax(scores, sinks):
    b = sinks.view(-1, 1)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = torch.exp(scores - m)
    return e / (torch.exp(b - m) + e.sum(dim=-1, keepdim=True))
"""),
    _s("sink_softmax", "adds the sink logit to every score, then a plain softmax", False, """
def sink_softmax(scores, sinks):
    z = scores + sinks.view(1, -1, 1, 1)
    z = z - z.amax(dim=-1, keepdim=True)
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)
"""),
    _s("sink_softmax", "returns the S + 1 weights including the sink's column", False, """
def sink_softmax(scores, sinks):
    B, H, L, S = scores.shape
    sink_col = sinks.view(1, H, 1, 1).expand(B, H, L, 1)
    return torch.softmax(torch.cat([scores, sink_col], dim=-1), dim=-1)
"""),
    _s("sink_softmax", "scales the softmax by sigmoid(b - LSE): kept mass with the sign flipped",
       False, """
def sink_softmax(scores, sinks):
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    keep = torch.sigmoid(sinks.view(1, -1, 1, 1) - lse)
    return torch.softmax(scores, dim=-1).nan_to_num(0.0) * keep
"""),
    # ------------------------------------------------------------------ gated_attention
    _s("gated_attention", "sigmoid gate from x through F.linear, then F.linear with w_out",
       True, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(F.linear(x, w_gate))
    return F.linear(attn * gate, w_out)
"""),
    _s("gated_attention", "gates after the output projection", False, """
def gated_attention(attn, x, w_gate, w_out):
    out = attn @ w_out.T
    g = torch.sigmoid(x @ w_gate.T)
    return out * g
"""),
    _s("gated_attention", "multiplies by the stored weights without transposing them", False, """
def gated_attention(attn, x, w_gate, w_out):
    g = torch.sigmoid(x @ w_gate)
    return (attn * g) @ w_out
"""),
    _s("gated_attention", "SiLU gate instead of the sigmoid", False, """
def gated_attention(attn, x, w_gate, w_out):
    g = F.silu(x @ w_gate.T)
    return (attn * g) @ w_out.T
"""),
    _s("gated_attention", "computes the gate from the attention output instead of the input",
       False, """
def gated_attention(attn, x, w_gate, w_out):
    g = torch.sigmoid(attn @ w_gate)
    return (attn * g) @ w_out.T
"""),
    _s("gated_attention", "adds the gate to the heads' output instead of multiplying", False, """
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(torch.einsum("bld,fd->blf", x, w_gate))
    return torch.einsum("blf,df->bld", attn + gate, w_out)
"""),
    # ------------------------------------------------------------------ kv_cache_bytes
    _s("kv_cache_bytes", "element size from an empty tensor of the dtype", True, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_token = 2 * layers * kv_heads * head_dim * itemsize
    return int(per_token * tokens)
"""),
    _s("kv_cache_bytes", "counts the keys only: the factor 2 for K and V is missing", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    nbytes = torch.finfo(dtype).bits // 8
    return tokens * layers * kv_heads * head_dim * nbytes
"""),
    _s("kv_cache_bytes", "uses the number of query heads instead of kv heads", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    return 2 * tokens * layers * heads * head_dim * size
"""),
    _s("kv_cache_bytes", "multiplies by bits per element, not bytes", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * tokens * layers * kv_heads * head_dim * torch.finfo(dtype).bits
"""),
    _s("kv_cache_bytes", "forgets the number of layers", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    elem = torch.empty(0, dtype=dtype).element_size()
    return 2 * tokens * kv_heads * head_dim * elem
"""),
    _s("kv_cache_bytes", "assumes 2 bytes per element whatever the dtype", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    bytes_per_value = 2  # bf16 / fp16
    return 2 * tokens * layers * kv_heads * head_dim * bytes_per_value
"""),
    _s("kv_cache_bytes", "true division bits / 8 returns a float", False, """
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    b = torch.finfo(dtype).bits / 8
    return 2 * layers * tokens * kv_heads * head_dim * b
"""),
    # ------------------------------------------------------------------ attention_flops
    _s("attention_flops", "two matmuls of 2 n^2 d each, written as one product", True, """
def attention_flops(n, d):
    return 2 * (2 * n * n * d)
"""),
    _s("attention_flops", "counts a multiply-add as one FLOP", False, """
def attention_flops(n, d):
    qk = n * n * d
    pv = n * n * d
    return qk + pv
"""),
    _s("attention_flops", "adds the softmax's exp, sum and division on top of the matmuls",
       False, """
def attention_flops(n, d):
    matmuls = 4 * n * n * d
    softmax = 3 * n * n
    return matmuls + softmax
"""),
    _s("attention_flops", "mixes up the shapes: n d^2 instead of n^2 d", False, """
def attention_flops(n, d):
    return 2 * n * d * d + 2 * n * d * d
"""),
    _s("attention_flops", "returns a float from math.pow", False, """
def attention_flops(n, d):
    return 4 * math.pow(n, 2) * d
"""),
    _s("attention_flops", "includes the Q, K, V and output projections of the layer", False, """
def attention_flops(n, d):
    projections = 4 * (2 * n * d * d)
    return projections + 4 * n * n * d
"""),
]


def load(index: int):
    """The learner's function of ``CORPUS[index]``, defined as a notebook cell defines it."""
    return load_from(CORPUS, index)
