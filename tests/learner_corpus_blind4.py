"""A blind corpus of learner submissions for issue 51's final acceptance measure (the fourth).

Written on 2026-11-28 for issue 51's final acceptance measure, from chapter text only, by someone
who had not read the declared mistakes, the checkers or the earlier corpora: from the exercise
statements, the starter cells and the chapter text, and from whether ``exercises.check`` passes
or fails a submission (never its message). Each entry is one submission as a learner would type
it in a notebook cell: ``source`` defines a function named after the exercise (helpers allowed)
and may use the names a chapter notebook has imported (``torch``, ``math``, ``F``, ``masks``,
``merge``; see :data:`NAMESPACE_NAMES`).

``right`` says whether the submission is correct (each right one was compared with torch or the
course's own implementation by hand when written); ``label`` says in the corpus author's words
what a wrong one gets wrong, or what is special about a right one.
"""

from __future__ import annotations

from learner_corpus_cells import NAMESPACE_NAMES, Submission, _s, load_from, namespace

__all__ = ["CORPUS", "NAMESPACE_NAMES", "Submission", "load", "namespace"]


CORPUS: list[Submission] = [
    # ---------------------------------------------------------------- scaled_scores (ch. 2)
    _s("scaled_scores", "einsum with an ellipsis for the batch dims", True, '''
def scaled_scores(q, k):
    E = q.shape[-1]
    return torch.einsum("...le,...se->...ls", q, k) / E ** 0.5
'''),
    _s("scaled_scores", "divides by E instead of its square root", False, '''
def scaled_scores(q, k):
    E = q.size(-1)
    return torch.matmul(q, k.transpose(-2, -1)) / E
'''),
    _s("scaled_scores", "scales by the number of keys S, not the width E", False, '''
def scaled_scores(q, k):
    S = k.shape[-2]
    return q @ k.transpose(-1, -2) / math.sqrt(S)
'''),
    _s("scaled_scores", "multiplies by sqrt(E) instead of dividing", False, '''
def scaled_scores(q, k):
    scores = q @ k.transpose(-2, -1)
    return scores * math.sqrt(q.shape[-1])
'''),
    _s("scaled_scores", "forgets the scale altogether", False, '''
def scaled_scores(q, k):
    # (..., L, E) @ (..., E, S)
    return torch.matmul(q, k.transpose(-2, -1))
'''),
    _s("scaled_scores", "einsum written for exactly one batch dim", False, '''
def scaled_scores(q, k):
    return torch.einsum("ble,bse->bls", q, k) / math.sqrt(q.shape[-1])
'''),
    _s("scaled_scores", "keys against queries: returns (..., S, L)", False, '''
def scaled_scores(q, k):
    return k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
'''),
    # ---------------------------------------------------------------- softmax (ch. 3)
    _s("softmax", "max shift with nan_to_num guard for all -inf slices", True, '''
def softmax(x, dim=-1):
    m = torch.amax(x, dim=dim, keepdim=True)
    m = torch.nan_to_num(m, neginf=0.0)
    e = (x - m).exp()
    return e / e.sum(dim=dim, keepdim=True)
'''),
    _s("softmax", "no max subtraction: overflows for large logits", False, '''
def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
'''),
    _s("softmax", "subtracts the global max of the whole tensor, not per slice", False, '''
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / torch.sum(e, dim=dim, keepdim=True)
'''),
    _s("softmax", "normalises along the last axis whatever dim says", False, '''
def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)
'''),
    _s("softmax", "works in float32 and forgets to cast back to the input dtype", False, '''
def softmax(x, dim=-1):
    x32 = x.float()
    e = torch.exp(x32 - x32.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
'''),
    _s("softmax", "subtracts the min instead of the max", False, '''
def softmax(x, dim=-1):
    shift = x.amin(dim=dim, keepdim=True)
    e = torch.exp(x - shift)
    return e / e.sum(dim=dim, keepdim=True)
'''),
    # ---------------------------------------------------------------- self_attention (ch. 3)
    _s("self_attention", "own softmax written inline, einsum for the scores", True, '''
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = torch.einsum("bie,bje->bij", q, k) / math.sqrt(q.shape[-1])
    s = s - s.amax(-1, keepdim=True)
    w = s.exp()
    w = w / w.sum(-1, keepdim=True)
    return w @ v, w
'''),
    _s("self_attention", "softmax over the query axis (dim=1)", False, '''
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights
'''),
    _s("self_attention", "scales by sqrt of the model width D instead of E", False, '''
def self_attention(x, w_q, w_k, w_v):
    D = x.shape[-1]
    Q, K, V = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return weights @ V, weights
'''),
    _s("self_attention", "returns (weights, out) in the wrong order", False, '''
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
    out = weights @ v
    return weights, out
'''),
    _s("self_attention", "scores computed as K Q^T (keys and queries swapped)", False, '''
def self_attention(x, w_q, w_k, w_v):
    Q = torch.matmul(x, w_q)
    K = torch.matmul(x, w_k)
    V = torch.matmul(x, w_v)
    scores = torch.matmul(K, Q.transpose(-2, -1)) / Q.shape[-1] ** 0.5
    weights = scores.softmax(dim=-1)
    return torch.matmul(weights, V), weights
'''),
    _s("self_attention", "no 1/sqrt(E) scale", False, '''
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    weights = F.softmax(q @ k.transpose(-2, -1), dim=-1)
    return weights @ v, weights
'''),
    # ---------------------------------------------------------------- split_heads (ch. 4)
    _s("split_heads", "view then transpose(1, 2)", True, '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, D // num_heads).transpose(1, 2)
'''),
    _s("split_heads", "reshapes straight to (B, H, L, E) without moving the token axis", False, '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)
'''),
    _s("split_heads", "interleaves: head h gets every H-th feature", False, '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    return x.reshape(B, L, E, num_heads).permute(0, 3, 1, 2)
'''),
    _s("split_heads", "transposes to (B, D, L), then reshapes straight to (B, H, L, E)", False, '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    xt = x.transpose(1, 2)                       # (B, D, L)
    return xt.reshape(B, num_heads, L, D // num_heads)
'''),
    _s("split_heads", "chunks into heads but stacks them after the token axis: (B, L, H, E)",
       False, '''
def split_heads(x, num_heads):
    heads = x.chunk(num_heads, dim=-1)           # H pieces of (B, L, E)
    return torch.stack(heads, dim=2)
'''),
    _s("split_heads", "permute leaves E before L: (B, H, E, L)", False, '''
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, -1).permute(0, 2, 3, 1)
'''),
    # ---------------------------------------------------------------- merge_heads (ch. 4)
    _s("merge_heads", "transpose, contiguous, view", True, '''
def merge_heads(x):
    B, H, L, E = x.shape
    return x.transpose(1, 2).contiguous().view(B, L, H * E)
'''),
    _s("merge_heads", "reshapes without moving the head axis back", False, '''
def merge_heads(x):
    B, H, L, E = x.shape
    return x.reshape(B, L, H * E)
'''),
    _s("merge_heads", "puts E before H: features interleaved across heads", False, '''
def merge_heads(x):
    B, H, L, E = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, E * H)
'''),
    _s("merge_heads", "transposes the last two axes (2, 3) instead of heads and tokens", False, '''
def merge_heads(x):
    B, H, L, E = x.shape
    return x.transpose(2, 3).reshape(B, L, H * E)
'''),
    _s("merge_heads", "concatenates the heads along the token axis", False, '''
def merge_heads(x):
    B, H, L, E = x.shape
    flat = torch.cat([x[:, h] for h in range(H)], dim=1)   # (B, H*L, E)
    return flat.reshape(B, L, H * E)
'''),
    _s("merge_heads", "moves the batch axis: permute(2, 0, 1, 3)", False, '''
def merge_heads(x):
    B, H, L, E = x.shape
    return x.permute(2, 0, 1, 3).reshape(B, L, H * E)
'''),
    # ---------------------------------------------------------------- multi_head_attention (ch. 4)
    _s("multi_head_attention", "helper functions for split and merge, torch.softmax", True, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads

    def split(t):
        return t.view(B, L, num_heads, E).transpose(1, 2)

    q, k, v = map(split, (x @ w_qkv).split(D, dim=-1))
    a = torch.softmax(q @ k.transpose(-2, -1) * E ** -0.5, dim=-1) @ v
    return a.transpose(1, 2).reshape(B, L, D) @ w_o
'''),
    _s("multi_head_attention", "scales by 1/sqrt(D), the model width", False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)
               for t in (x @ w_qkv).split(D, dim=-1))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1)
    return (w @ v).permute(0, 2, 1, 3).reshape(B, L, D) @ w_o
'''),
    _s("multi_head_attention", "forgets the output projection w_o", False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = [t.view(B, L, num_heads, E).transpose(1, 2) for t in (q, k, v)]
    heads = torch.softmax(q @ k.mT / math.sqrt(E), dim=-1) @ v
    return heads.transpose(1, 2).reshape(B, L, D)
'''),
    _s("multi_head_attention", "multiplies by w_o transposed", False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).chunk(3, dim=-1)
    q, k, v = [t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3) for t in (q, k, v)]
    p = F.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(E), dim=-1)
    merged = torch.matmul(p, v).permute(0, 2, 1, 3).reshape(B, L, D)
    return merged @ w_o.T
'''),
    _s("multi_head_attention", "splits heads by reshaping straight to (B, H, L, E)", False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, num_heads, L, E) for t in (q, k, v))
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1) @ v
    return out.reshape(B, L, D) @ w_o
'''),
    _s("multi_head_attention", "reads the fused projection per head as [q_h k_h v_h] blocks",
       False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = (x @ w_qkv).view(B, L, num_heads, 3 * E).transpose(1, 2)
    q, k, v = qkv.split(E, dim=-1)
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1) @ v
    return out.transpose(1, 2).reshape(B, L, D) @ w_o
'''),
    _s("multi_head_attention", "softmax over the query axis", False, '''
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    H = num_heads
    E = D // H
    q, k, v = (x @ w_qkv).split(D, -1)
    q = q.view(B, L, H, E).transpose(1, 2)
    k = k.view(B, L, H, E).transpose(1, 2)
    v = v.view(B, L, H, E).transpose(1, 2)
    s = torch.einsum("bhie,bhje->bhij", q, k) / math.sqrt(E)
    a = torch.einsum("bhij,bhje->bhie", s.softmax(dim=-2), v)
    return a.transpose(1, 2).reshape(B, L, D) @ w_o
'''),
    # ---------------------------------------------------------------- apply_rope (ch. 5)
    _s("apply_rope", "float64 angles, split halves by slicing", True, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2 / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float64)
    ang = pos[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''),
    _s("apply_rope", "rotates interleaved pairs (x_2i, x_2i+1) instead of split halves", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float32) / E)
    m = torch.arange(L, dtype=torch.float32) + offset
    ang = torch.outer(m, theta)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    xe, xo = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = xe * c - xo * s
    out[..., 1::2] = xe * s + xo * c
    return out
'''),
    _s("apply_rope", "ignores offset: positions always start at 0", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    i = torch.arange(E // 2, dtype=torch.float32)
    theta = base ** (-2 * i / E)
    ang = torch.arange(L, dtype=torch.float32)[:, None] * theta
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], -1) * sin
'''),
    _s("apply_rope", "theta_i = base^(-i/E): forgets the 2 in the exponent", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = 1.0 / base ** (torch.arange(half, dtype=torch.float32) / E)
    pos = torch.arange(offset, offset + L, dtype=torch.float32)
    ang = pos.unsqueeze(-1) * theta
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
'''),
    _s("apply_rope", "computes the angles in x's dtype (half precision positions)", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = base ** (-2 * torch.arange(half, dtype=x.dtype) / E)
    pos = torch.arange(L, dtype=x.dtype) + offset
    ang = pos[:, None] * theta[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''),
    _s("apply_rope", "rotates the wrong way (rotate_half written as [x2, -x1])", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    inv = base ** (-torch.arange(0, E, 2).float() / E)
    ang = (offset + torch.arange(L).float())[:, None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    rot = torch.cat([x2, -x1], dim=-1)
    return x * ang.cos().to(x.dtype) + rot * ang.sin().to(x.dtype)
'''),
    _s("apply_rope", "positions start at offset + 1", False, '''
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    half = E // 2
    theta = torch.pow(base, -2 * torch.arange(half, dtype=torch.float32) / E)
    m = torch.arange(1, L + 1, dtype=torch.float32) + offset
    ang = torch.einsum("l,i->li", m, theta)
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
'''),
    # ---------------------------------------------------------------- alibi_bias (ch. 5)
    _s("alibi_bias", "slopes from a float32 arange, broadcast distances", True, '''
def alibi_bias(H, L, S):
    h = torch.arange(H, dtype=torch.float32)
    slopes = 2.0 ** (-8.0 * (h + 1) / H)
    i = torch.arange(L, dtype=torch.float32)[:, None] + (S - L)
    j = torch.arange(S, dtype=torch.float32)[None, :]
    return slopes[:, None, None] * (j - i)[None]
'''),
    _s("alibi_bias", "slopes 2^(-8h/H): head 0 gets slope 1", False, '''
def alibi_bias(H, L, S):
    slopes = torch.tensor([2 ** (-8 * h / H) for h in range(H)], dtype=torch.float32)
    i = torch.arange(L) + S - L
    j = torch.arange(S)
    dist = (j[None, :] - i[:, None]).float()
    return slopes.view(H, 1, 1) * dist
'''),
    _s("alibi_bias", "forgets that the queries are the last L positions (uses j - i)", False, '''
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float32) / H)
    j = torch.arange(S, dtype=torch.float32)
    i = torch.arange(L, dtype=torch.float32)
    rel = j[None, :] - i[:, None]
    return slopes[:, None, None] * rel
'''),
    _s("alibi_bias", "distance with the wrong sign (i' - j)", False, '''
def alibi_bias(H, L, S):
    m = 2.0 ** (-8.0 * (torch.arange(H, dtype=torch.float32) + 1) / H)
    qpos = torch.arange(S - L, S, dtype=torch.float32)
    kpos = torch.arange(S, dtype=torch.float32)
    return m[:, None, None] * (qpos[:, None] - kpos[None, :])
'''),
    _s("alibi_bias", "uses the absolute distance |j - i'|", False, '''
def alibi_bias(H, L, S):
    m = torch.pow(2.0, -8.0 * (torch.arange(H) + 1).float() / H)
    i = torch.arange(L).float() + (S - L)
    j = torch.arange(S).float()
    return m[:, None, None] * (j[None, :] - i[:, None]).abs()
'''),
    _s("alibi_bias", "computed in float64 and returned as float64", False, '''
def alibi_bias(H, L, S):
    slopes = 2.0 ** (-8.0 * (torch.arange(H, dtype=torch.float64) + 1) / H)
    i = torch.arange(L, dtype=torch.float64) + (S - L)
    j = torch.arange(S, dtype=torch.float64)
    return slopes[:, None, None] * (j[None, None, :] - i[None, :, None])
'''),
    # ---------------------------------------------------------------- causal_mask (ch. 6)
    _s("causal_mask", "comparison of aranges", True, '''
def causal_mask(n):
    i = torch.arange(n)
    return i[None, :] <= i[:, None]
'''),
    _s("causal_mask", "upper triangle: True where j >= i", False, '''
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu()
'''),
    _s("causal_mask", "strict lower triangle: a query cannot see itself", False, '''
def causal_mask(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
'''),
    _s("causal_mask", "returns a float tril, not bool", False, '''
def causal_mask(n):
    return torch.tril(torch.ones(n, n))
'''),
    _s("causal_mask", "returns the masked-out (future) positions instead of the allowed ones",
       False, '''
def causal_mask(n):
    idx = torch.arange(n)
    return idx.unsqueeze(0) > idx.unsqueeze(1)
'''),
    _s("causal_mask", "diagonal=1: each query also sees the next key", False, '''
def causal_mask(n):
    return torch.ones((n, n), dtype=torch.bool).tril(1)
'''),
    # ---------------------------------------------------------------- padding_mask (ch. 6)
    _s("padding_mask", "indexing with None", True, '''
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id)[:, None, None, :]
'''),
    _s("padding_mask", "True at the padding instead of the real tokens", False, '''
def padding_mask(tokens, pad_id=0):
    return (tokens == pad_id)[:, None, None, :]
'''),
    _s("padding_mask", "shape (B, 1, N, 1): broadcasts over keys instead of queries", False, '''
def padding_mask(tokens, pad_id=0):
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(-1)
'''),
    _s("padding_mask", "only one unsqueeze: (B, 1, N)", False, '''
def padding_mask(tokens, pad_id=0):
    return (tokens != pad_id).unsqueeze(1)
'''),
    _s("padding_mask", "compares against 0 whatever pad_id is", False, '''
def padding_mask(tokens, pad_id=0):
    B, N = tokens.shape
    return (tokens != 0).view(B, 1, 1, N)
'''),
    _s("padding_mask", "returns an int mask (0/1) instead of bool", False, '''
def padding_mask(tokens, pad_id=0):
    keep = (tokens != pad_id).long()
    return keep[:, None, None, :]
'''),
    # ---------------------------------------------------------------- masked_attention (ch. 6)
    _s("masked_attention", "masked_fill -inf, then zero the rows with no allowed key", True, '''
def masked_attention(q, k, v, mask):
    E = q.shape[-1]
    s = q @ k.transpose(-2, -1) / math.sqrt(E)
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)
    return w @ v
'''),
    _s("masked_attention", "fills the allowed positions with -inf (mask read the wrong way)",
       False, '''
def masked_attention(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.nan_to_num(w) @ v
'''),
    _s("masked_attention", "no guard: a query with no allowed key gives NaN", False, '''
def masked_attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    return torch.matmul(torch.softmax(scores, dim=-1), v)
'''),
    _s("masked_attention", "fills with -1e9: fully masked rows average all values instead of zeros",
       False, '''
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, -1e9)
    return scores.softmax(dim=-1) @ v
'''),
    _s("masked_attention", "multiplies the scores by the mask (masked scores become 0, not -inf)",
       False, '''
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores * mask
    w = torch.softmax(scores, dim=-1)
    w = w * mask.any(dim=-1, keepdim=True)
    return w @ v
'''),
    _s("masked_attention", "forgets the 1/sqrt(E) scale", False, '''
def masked_attention(q, k, v, mask):
    scores = torch.einsum("...le,...se->...ls", q, k)
    scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    w = scores.softmax(-1).nan_to_num(0.0)
    return w @ v
'''),
    _s("masked_attention", "masks after the softmax without renormalising", False, '''
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(scores, dim=-1) * mask
    return w @ v
'''),
    # ---------------------------------------------------------------- online_softmax_stats (ch. 8)
    _s("online_softmax_stats", "python floats, guard for an all -inf prefix", True, '''
def online_softmax_stats(blocks):
    m = float("-inf")
    l = 0.0
    for b in blocks:
        bm = b.max().item() if b.numel() else float("-inf")
        m_new = max(m, bm)
        if m_new == float("-inf"):
            continue
        l = l * math.exp(m - m_new) + torch.exp(b - m_new).sum().item()
        m = m_new
    return torch.tensor(m), torch.tensor(l)
'''),
    _s("online_softmax_stats", "0-d tensors, torch.where guard on the rescale factor", True, '''
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for x in blocks:
        m_new = torch.maximum(m, x.max())
        finite = torch.isfinite(m_new)
        shift = torch.where(finite, m_new, torch.zeros_like(m_new))
        alpha = torch.where(finite, torch.exp(m - shift), torch.zeros_like(m))
        l = l * alpha + torch.exp(x - shift).sum()
        m = m_new
    return m, l
'''),
    _s("online_softmax_stats", "starts the running max at 0 instead of -inf", False, '''
def online_softmax_stats(blocks):
    m = torch.tensor(0.0)
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max())
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, l
'''),
    _s("online_softmax_stats", "never rescales the old sum when the max grows", False, '''
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m = torch.maximum(m, b.max())
        if torch.isinf(m) and m < 0:
            continue
        l = l + torch.exp(b - m).sum()
    return m, l
'''),
    _s("online_softmax_stats", "rescale factor inverted: exp(m_new - m)", False, '''
def online_softmax_stats(blocks):
    m, l = float("-inf"), 0.0
    for block in blocks:
        m_new = max(m, float(block.max()))
        if m_new == float("-inf"):
            continue
        scale = 0.0 if m == float("-inf") else math.exp(m_new - m)
        l = l * scale + float(torch.exp(block - m_new).sum())
        m = m_new
    return torch.tensor(m), torch.tensor(l)
'''),
    _s("online_softmax_stats", "no guard: an all -inf stream gives NaN", False, '''
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.max(m, b.max())
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, l
'''),
    _s("online_softmax_stats", "updates m before computing the rescale factor (factor always 1)",
       False, '''
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m = torch.maximum(m, b.amax())
        if m == float("-inf"):
            continue
        l = l * torch.exp(m - m) + torch.exp(b - m).sum()
    return m, l
'''),
    _s("online_softmax_stats", "sums exp(x) unshifted and takes the max separately", False, '''
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    total = torch.tensor(0.0, dtype=torch.float64)
    for b in blocks:
        m = torch.maximum(m, b.max())
        total = total + torch.exp(b.double()).sum()
    if m == float("-inf"):
        return m, torch.tensor(0.0)
    return m, (total * torch.exp(-m.double())).float()
'''),
    # ---------------------------------------------------------------- flash_attention (ch. 8)
    _s("flash_attention", "loop over key blocks, -inf start, single final division", True, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[-2]
    scale = 1.0 / math.sqrt(E)
    m = torch.full((B, H, L, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((B, H, L, 1), dtype=q.dtype)
    o = torch.zeros((B, H, L, v.shape[-1]), dtype=q.dtype)
    for j in range(0, S, block_size):
        kj, vj = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
        s = (q @ kj.transpose(-2, -1)) * scale
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        o = o * alpha + p @ vj
        m = m_new
    return o / l
'''),
    _s("flash_attention", "running max starts at 0", False, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[2]
    m = torch.zeros(B, H, L, 1, dtype=q.dtype)
    l = torch.zeros(B, H, L, 1, dtype=q.dtype)
    acc = torch.zeros_like(q)
    for start in range(0, S, block_size):
        kb = k[:, :, start:start + block_size]
        vb = v[:, :, start:start + block_size]
        s = q @ kb.transpose(-1, -2) / math.sqrt(E)
        m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
        c = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = c * l + p.sum(dim=-1, keepdim=True)
        acc = c * acc + p @ vb
        m = m_new
    return acc / l
'''),
    _s("flash_attention", "rescales l but not the accumulated output", False, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[-2]
    m = torch.full((B, H, L, 1), -math.inf, dtype=q.dtype)
    l = torch.zeros(B, H, L, 1, dtype=q.dtype)
    o = torch.zeros(B, H, L, E, dtype=q.dtype)
    for j in range(0, S, block_size):
        s = q @ k[:, :, j:j + block_size].transpose(-2, -1) / math.sqrt(E)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
        o = o + p @ v[:, :, j:j + block_size]
        m = m_new
    return o / l
'''),
    _s("flash_attention", "normalises each block and averages the blocks", False, '''
def flash_attention(q, k, v, block_size=64):
    E = q.shape[-1]
    S = k.shape[-2]
    outs = torch.zeros_like(q)
    n = 0
    for j in range(0, S, block_size):
        s = torch.matmul(q, k[..., j:j + block_size, :].transpose(-2, -1)) / math.sqrt(E)
        outs = outs + torch.softmax(s, dim=-1) @ v[..., j:j + block_size, :]
        n += 1
    return outs / n
'''),
    _s("flash_attention", "forgets the 1/sqrt(E) scale", False, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    m = q.new_full((B, H, L, 1), float("-inf"))
    l = q.new_zeros((B, H, L, 1))
    o = q.new_zeros((B, H, L, E))
    for kj, vj in zip(k.split(block_size, dim=2), v.split(block_size, dim=2)):
        s = q @ kj.transpose(2, 3)
        m_new = torch.maximum(m, s.amax(dim=3, keepdim=True))
        a = (m - m_new).exp()
        p = (s - m_new).exp()
        l = a * l + p.sum(dim=3, keepdim=True)
        o = a * o + p @ vj
        m = m_new
    return o / l
'''),
    _s("flash_attention", "drops the last, partial key block (range stops at S - block_size)",
       False, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[-2]
    m = torch.full((B, H, L, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((B, H, L, 1), dtype=q.dtype)
    o = torch.zeros((B, H, L, E), dtype=q.dtype)
    for j in range(0, max(S - block_size, 1), block_size):
        kj, vj = k[..., j:j + block_size, :], v[..., j:j + block_size, :]
        s = q @ kj.transpose(-2, -1) / math.sqrt(E)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ vj
        m = m_new
    return o / l
'''),
    _s("flash_attention", "divides by l inside the loop instead of once at the end", False, '''
def flash_attention(q, k, v, block_size=64):
    B, H, L, E = q.shape
    S = k.shape[-2]
    m = torch.full((B, H, L, 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((B, H, L, 1), dtype=q.dtype)
    o = torch.zeros((B, H, L, E), dtype=q.dtype)
    for j in range(0, S, block_size):
        s = q @ k[..., j:j + block_size, :].transpose(-2, -1) / math.sqrt(E)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = (alpha * o + p @ v[..., j:j + block_size, :]) / l
        m = m_new
    return o
'''),
    # ---------------------------------------------------------------- decode_step (ch. 10)
    _s("decode_step", "rotate_half helper, masks.causal_mask bottom_right", True, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    def rotate_half(t):
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat([-t2, t1], dim=-1)

    P, L = k_cache.shape[1], x.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    k_cache = torch.cat([k_cache, k], dim=1)
    v_cache = torch.cat([v_cache, v], dim=1)
    S = P + L
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = masks.causal_mask(L, S, align="bottom_right")
    scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v_cache
    return out, k_cache, v_cache
'''),
    _s("decode_step", "rotates the new tokens as positions 0..L-1 (rows :L of the tables)",
       False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    def rot(t):
        h = t.shape[-1] // 2
        return torch.cat([-t[..., h:], t[..., :h]], dim=-1)

    L = x.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[:L], sin[:L]
    q, k = q * c + rot(q) * s, k * c + rot(k) * s
    K = torch.cat([k_cache, k], 1)
    V = torch.cat([v_cache, v], 1)
    S = K.shape[1]
    att = q @ K.transpose(1, 2) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~masks.causal_mask(L, S, align="bottom_right"), float("-inf"))
    return att.softmax(-1) @ V, K, V
'''),
    _s("decode_step", "top-left causal mask: new queries only see the first keys", False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    E = w_q.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]

    def rope(t):
        t1, t2 = t[..., :E // 2], t[..., E // 2:]
        return t * c + torch.cat([-t2, t1], -1) * s

    q, k = rope(q), rope(k)
    k_cache = torch.cat([k_cache, k], dim=1)
    v_cache = torch.cat([v_cache, v], dim=1)
    S = P + L
    mask = torch.ones(L, S, dtype=torch.bool).tril()
    scores = (q @ k_cache.mT) / math.sqrt(E)
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1) @ v_cache, k_cache, v_cache
'''),
    _s("decode_step", "rotates the values as well as the queries and keys", False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.size(1), x.size(1)
    c, s = cos[P:P + L], sin[P:P + L]

    def rope(t):
        a, b = t.chunk(2, -1)
        return t * c + torch.cat((-b, a), -1) * s

    q, k, v = rope(x @ w_q), rope(x @ w_k), rope(x @ w_v)
    k_cache = torch.cat((k_cache, k), 1)
    v_cache = torch.cat((v_cache, v), 1)
    S = P + L
    scores = torch.einsum("ble,bse->bls", q, k_cache) / math.sqrt(q.size(-1))
    allowed = masks.causal_mask(L, S, align="bottom_right")
    scores = torch.where(allowed, scores, float("-inf"))
    return scores.softmax(-1) @ v_cache, k_cache, v_cache
'''),
    _s("decode_step", "appends the keys to the cache before rotating them", False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    def rotate_half(t):
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat([-t2, t1], dim=-1)

    P, L = k_cache.shape[1], x.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]
    new_k_cache = torch.cat([k_cache, k], dim=1)
    new_v_cache = torch.cat([v_cache, v], dim=1)
    q = q * c + rotate_half(q) * s
    k_rot = k * c + rotate_half(k) * s
    keys = torch.cat([k_cache, k_rot], dim=1)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = masks.causal_mask(L, P + L, align="bottom_right")
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1) @ new_v_cache, new_k_cache, new_v_cache
'''),
    _s("decode_step", "puts the new keys and values in front of the cache", False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    def rotate_half(t):
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat([-t2, t1], dim=-1)

    P, L = k_cache.shape[1], x.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]
    q = q * c + rotate_half(q) * s
    k = k * c + rotate_half(k) * s
    k_cache = torch.cat([k, k_cache], dim=1)
    v_cache = torch.cat([v, v_cache], dim=1)
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = masks.causal_mask(L, P + L, align="bottom_right")
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v_cache, k_cache, v_cache
'''),
    _s("decode_step", "scales the scores by 1/sqrt(D), the model width", False, '''
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    B, L, D = x.shape
    P = k_cache.shape[1]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    c, s = cos[P:P + L], sin[P:P + L]
    h = q.shape[-1] // 2
    q = q * c + torch.cat([-q[..., h:], q[..., :h]], -1) * s
    k = k * c + torch.cat([-k[..., h:], k[..., :h]], -1) * s
    K = torch.cat([k_cache, k], 1)
    V = torch.cat([v_cache, v], 1)
    scores = q @ K.transpose(1, 2) / math.sqrt(D)
    mask = masks.causal_mask(L, P + L, align="bottom_right")
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ V, K, V
'''),
    # ---------------------------------------------------------------- repeat_kv (ch. 10)
    _s("repeat_kv", "expand on a new axis after Hkv, then reshape", True, '''
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x[:, :, None].expand(B, Hkv, n_rep, S, E).reshape(B, Hkv * n_rep, S, E)
'''),
    _s("repeat_kv", "tiles the heads (x.repeat): head h finds kv head h mod Hkv", False, '''
def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
'''),
    _s("repeat_kv", "new axis inserted before Hkv: groups interleaved", False, '''
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x.unsqueeze(1).expand(B, n_rep, Hkv, S, E).reshape(B, n_rep * Hkv, S, E)
'''),
    _s("repeat_kv", "repeat_interleave along the sequence axis", False, '''
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=2).reshape(x.shape[0], -1, x.shape[2], x.shape[3])
'''),
    _s("repeat_kv", "concatenates n_rep copies along the head axis", False, '''
def repeat_kv(x, n_rep):
    return torch.cat([x for _ in range(n_rep)], dim=1)
'''),
    _s("repeat_kv", "repeats the batch axis instead of the heads", False, '''
def repeat_kv(x, n_rep):
    B, Hkv, S, E = x.shape
    return x.repeat_interleave(n_rep, dim=0).view(B, Hkv * n_rep, S, E)
'''),
    # ---------------------------------------------------------------- sliding_window_mask (ch. 10)
    _s("sliding_window_mask", "difference of aranges", True, '''
def sliding_window_mask(n, window):
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    d = i - j
    return (d >= 0) & (d < window)
'''),
    _s("sliding_window_mask", "off by one: window + 1 keys (i - window <= j)", False, '''
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (j >= i - window)
'''),
    _s("sliding_window_mask", "symmetric band |i - j| < window (sees the future)", False, '''
def sliding_window_mask(n, window):
    idx = torch.arange(n)
    return (idx[:, None] - idx[None, :]).abs() < window
'''),
    _s("sliding_window_mask", "tril/triu with the band diagonal one too low", False, '''
def sliding_window_mask(n, window):
    ones = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(ones) & torch.triu(ones, diagonal=-window)
'''),
    _s("sliding_window_mask", "band in the upper triangle: j >= i", False, '''
def sliding_window_mask(n, window):
    i = torch.arange(n).view(n, 1)
    j = torch.arange(n).view(1, n)
    return (j >= i) & (j < i + window)
'''),
    _s("sliding_window_mask", "window - 1 keys in all: the query itself not counted", False, '''
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & (i - j < window - 1)
'''),
    # ---------------------------------------------------------------- kv_cache_bytes (ch. 10)
    _s("kv_cache_bytes", "element size from an empty tensor", True, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    itemsize = torch.empty((), dtype=dtype).element_size()
    return int(2 * tokens * layers * kv_heads * head_dim * itemsize)
'''),
    _s("kv_cache_bytes", "counts the query heads instead of the key/value heads", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * tokens * layers * heads * head_dim * dtype.itemsize
'''),
    _s("kv_cache_bytes", "forgets the factor 2 for keys and values", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    per_token = layers * kv_heads * head_dim * dtype.itemsize
    return tokens * per_token
'''),
    _s("kv_cache_bytes", "bits instead of bytes (finfo.bits)", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    return 2 * tokens * layers * kv_heads * head_dim * torch.finfo(dtype).bits
'''),
    _s("kv_cache_bytes", "leaves out the number of layers", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    size = torch.tensor([], dtype=dtype).element_size()
    return 2 * tokens * kv_heads * head_dim * size
'''),
    _s("kv_cache_bytes", "assumes 2 bytes per element whatever the dtype", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    bytes_per_value = 2  # fp16
    return 2 * tokens * layers * kv_heads * head_dim * bytes_per_value
'''),
    _s("kv_cache_bytes", "returns a float (divides bits by 8.0)", False, '''
def kv_cache_bytes(tokens, layers, heads, kv_heads, head_dim, dtype):
    bits = torch.finfo(dtype).bits
    return 2 * tokens * layers * kv_heads * head_dim * bits / 8.0
'''),
    # ---------------------------------------------------------------- attention_flops (ch. 7)
    _s("attention_flops", "two matmuls of 2·n·n·d each", True, '''
def attention_flops(n, d):
    qk = 2 * n * n * d
    pv = 2 * n * n * d
    return int(qk + pv)
'''),
    _s("attention_flops", "counts a multiply-add as one FLOP", False, '''
def attention_flops(n, d):
    return 2 * n * n * d
'''),
    _s("attention_flops", "counts only the causal half of the pairs, n(n+1)/2", False, '''
def attention_flops(n, d):
    pairs = n * (n + 1) // 2
    return 2 * 2 * pairs * d
'''),
    _s("attention_flops", "d squared instead of n squared", False, '''
def attention_flops(n, d):
    return 4 * n * d * d
'''),
    _s("attention_flops", "adds the softmax's n^2 exponentials", False, '''
def attention_flops(n, d):
    matmuls = 2 * (2 * n * n * d)
    softmax = n * n
    return matmuls + softmax
'''),
    _s("attention_flops", "returns a float", False, '''
def attention_flops(n, d):
    return 4.0 * n * n * d
'''),
    # ---------------------------------------------------------------- mla_absorbed_step (ch. 10)
    _s("mla_absorbed_step", "einsum throughout, rotate_half helper", True, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    r = c_new.shape[-1]
    P = c_cache.shape[1]
    Vd = w_kv_b.shape[0] // H - N
    w = w_kv_b.view(H, N + Vd, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[P:P + L], sin[P:P + L]
    q_r = q_rope * c + rotate_half(q_rope) * s
    k_r = k_rope_new * c + rotate_half(k_rope_new) * s
    c_all = torch.cat([c_cache, c_new], dim=1)
    k_all = torch.cat([k_rope_cache, k_r], dim=1)
    q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
    scores = (torch.einsum("bhlr,bsr->bhls", q_lat, c_all)
              + torch.einsum("bhlk,bsk->bhls", q_r, k_all)) / math.sqrt(N + R)
    mask = masks.causal_mask(L, P + L, align="bottom_right")
    scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhls,bsr->bhlr", p, c_all)
    out = torch.einsum("bhlr,hvr->bhlv", ctx, w_uv)
    return out, c_all, k_all
'''),
    _s("mla_absorbed_step", "scales by 1/sqrt(N), forgetting the rotary width", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[P:P + L], sin[P:P + L]

    def rope(t):
        h = t.shape[-1] // 2
        return t * c + torch.cat([-t[..., h:], t[..., :h]], -1) * s

    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, rope(k_rope_new)], 1)
    q_lat = q_nope @ w_uk                              # (B, H, L, r)
    scores = q_lat @ c_all.unsqueeze(1).transpose(-2, -1)
    scores = scores + rope(q_rope) @ k_all.unsqueeze(1).transpose(-2, -1)
    scores = scores / math.sqrt(N)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    out = (scores.softmax(-1) @ c_all.unsqueeze(1)) @ w_uv.transpose(-2, -1)
    return out, c_all, k_all
'''),
    _s("mla_absorbed_step", "leaves q_rope unrotated (rotates only the new keys)", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[P:P + L], sin[P:P + L]
    k1, k2 = k_rope_new.chunk(2, -1)
    k_r = k_rope_new * c + torch.cat([-k2, k1], -1) * s
    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_r], 1)
    scores = torch.einsum("bhln,hnr,bsr->bhls", q_nope, w_uk, c_all)
    scores = scores + torch.einsum("bhlk,bsk->bhls", q_rope, k_all)
    scores = scores / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    p = scores.softmax(-1)
    return torch.einsum("bhls,bsr,hvr->bhlv", p, c_all, w_uv), c_all, k_all
'''),
    _s("mla_absorbed_step", "caches the new rotary keys before rotating them", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[P:P + L], sin[P:P + L]

    def rope(t):
        a, b = t.chunk(2, -1)
        return t * c + torch.cat([-b, a], -1) * s

    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_rope_new], 1)
    k_used = torch.cat([k_rope_cache, rope(k_rope_new)], 1)
    scores = torch.einsum("bhlr,bsr->bhls", torch.einsum("bhln,hnr->bhlr", q_nope, w_uk), c_all)
    scores = scores + torch.einsum("bhlk,bsk->bhls", rope(q_rope), k_used)
    scores = scores / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, -1)
    out = torch.einsum("bhlr,hvr->bhlv", torch.einsum("bhls,bsr->bhlr", p, c_all), w_uv)
    return out, c_all, k_all
'''),
    _s("mla_absorbed_step", "rotates the new tokens as positions 0..L-1", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[:L], sin[:L]

    def rope(t):
        a, b = t.chunk(2, -1)
        return t * c + torch.cat([-b, a], -1) * s

    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, rope(k_rope_new)], 1)
    scores = torch.einsum("bhlr,bsr->bhls", torch.einsum("bhln,hnr->bhlr", q_nope, w_uk), c_all)
    scores = scores + torch.einsum("bhlk,bsk->bhls", rope(q_rope), k_all)
    scores = scores / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    p = torch.softmax(scores, -1)
    out = torch.einsum("bhlr,hvr->bhlv", torch.einsum("bhls,bsr->bhlr", p, c_all), w_uv)
    return out, c_all, k_all
'''),
    _s("mla_absorbed_step", "top-left causal mask instead of bottom-right", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    c, s = cos[P:P + L], sin[P:P + L]
    q_r = q_rope * c + rotate_half(q_rope) * s
    k_r = k_rope_new * c + rotate_half(k_rope_new) * s
    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_r], 1)
    q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w[:, :N])
    scores = (torch.einsum("bhlr,bsr->bhls", q_lat, c_all)
              + torch.einsum("bhlk,bsk->bhls", q_r, k_all)) / math.sqrt(N + R)
    mask = masks.causal_mask(L, P + L)
    scores = scores.masked_fill(~mask, float("-inf"))
    ctx = torch.einsum("bhls,bsr->bhlr", torch.softmax(scores, -1), c_all)
    return torch.einsum("bhlr,hvr->bhlv", ctx, w[:, N:]), c_all, k_all
'''),
    _s("mla_absorbed_step", "takes W_UV from the first rows and W_UK from the last", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    Vd = w_kv_b.shape[0] // H - N
    w = w_kv_b.view(H, N + Vd, r)
    w_uv, w_uk = w[:, :Vd], w[:, Vd:]
    c, s = cos[P:P + L], sin[P:P + L]
    q_r = q_rope * c + rotate_half(q_rope) * s
    k_r = k_rope_new * c + rotate_half(k_rope_new) * s
    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_r], 1)
    q_lat = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
    scores = (torch.einsum("bhlr,bsr->bhls", q_lat, c_all)
              + torch.einsum("bhlk,bsk->bhls", q_r, k_all)) / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    ctx = torch.einsum("bhls,bsr->bhlr", torch.softmax(scores, -1), c_all)
    return torch.einsum("bhlr,hvr->bhlv", ctx, w_uv), c_all, k_all
'''),
    _s("mla_absorbed_step", "views w_kv_b as (N+V, H, r): heads and rows mixed up", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(-1, H, r).transpose(0, 1)          # (H, N+V, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    c, s = cos[P:P + L], sin[P:P + L]
    q_r = q_rope * c + rotate_half(q_rope) * s
    k_r = k_rope_new * c + rotate_half(k_rope_new) * s
    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_r], 1)
    scores = (torch.einsum("bhln,hnr,bsr->bhls", q_nope, w_uk, c_all)
              + torch.einsum("bhlk,bsk->bhls", q_r, k_all)) / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    ctx = torch.softmax(scores, -1) @ c_all.unsqueeze(1)
    return ctx @ w_uv.transpose(1, 2), c_all, k_all
'''),
    _s("mla_absorbed_step", "drops the rotary term from the score", False, '''
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    def rotate_half(t):
        a, b = t.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    B, H, L, N = q_nope.shape
    R = q_rope.shape[-1]
    P, r = c_cache.shape[1], c_cache.shape[2]
    w = w_kv_b.view(H, -1, r)
    c, s = cos[P:P + L], sin[P:P + L]
    k_r = k_rope_new * c + rotate_half(k_rope_new) * s
    c_all = torch.cat([c_cache, c_new], 1)
    k_all = torch.cat([k_rope_cache, k_r], 1)
    q_lat = q_nope @ w[:, :N]
    scores = q_lat @ c_all[:, None].transpose(-2, -1) / math.sqrt(N + R)
    scores = scores.masked_fill(~masks.causal_mask(L, P + L, align="bottom_right"), float("-inf"))
    ctx = scores.softmax(-1) @ c_all[:, None]
    return ctx @ w[:, N:].transpose(-2, -1), c_all, k_all
'''),
    # ---------------------------------------------------------------- merge_partials (ch. 13)
    _s("merge_partials", "logaddexp for the lse, exp(lse_x - lse) weights, empty rows guarded",
       True, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isinf(lse) & (lse < 0), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - safe).unsqueeze(-1)
    w_b = torch.exp(lse_b - safe).unsqueeze(-1)
    return w_a * out_a + w_b * out_b, lse
'''),
    _s("merge_partials", "unshifted log(e^a + e^b): overflows near 1000", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)
    total = ea + eb
    out = (ea / total).unsqueeze(-1) * out_a + (eb / total).unsqueeze(-1) * out_b
    out = torch.nan_to_num(out)
    return out, torch.log(total)
'''),
    _s("merge_partials", "averages the two outputs, lse from logaddexp", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    return (out_a + out_b) / 2, torch.logaddexp(lse_a, lse_b)
'''),
    _s("merge_partials", "no guard: two empty partials give NaN", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    out = torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b
    return out, lse
'''),
    _s("merge_partials", "takes the larger lse as the merged lse", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m0 = m.masked_fill(m == float("-inf"), 0.0)
    wa, wb = torch.exp(lse_a - m0), torch.exp(lse_b - m0)
    tot = (wa + wb).clamp_min(1e-30)
    out = (wa / tot).unsqueeze(-1) * out_a + (wb / tot).unsqueeze(-1) * out_b
    return out, m
'''),
    _s("merge_partials", "adds the lse values instead of log-sum-exp-ing them", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa, wb = (lse_a - m).exp(), (lse_b - m).exp()
    s = wa + wb
    s = torch.where(s > 0, s, torch.ones_like(s))
    out = (wa / s).unsqueeze(-1) * out_a + (wb / s).unsqueeze(-1) * out_b
    return out, lse_a + lse_b
'''),
    _s("merge_partials", "weights swapped: out_a gets b's share", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    base = lse.masked_fill(lse == float("-inf"), 0.0)
    wa = torch.exp(lse_a - base).unsqueeze(-1)
    wb = torch.exp(lse_b - base).unsqueeze(-1)
    return wb * out_a + wa * out_b, lse
'''),
    _s("merge_partials", "weights exp(lse_x) without dividing by the total", False, '''
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(torch.isneginf(m), 0.0)
    wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(wa + wb)
    return wa.unsqueeze(-1) * out_a + wb.unsqueeze(-1) * out_b, lse
'''),
    # ---------------------------------------------------------------- ring_step (ch. 13)
    _s("ring_step", "source rank (rank - step) mod world, tril on the diagonal, skip future",
       True, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src == rank:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril()
        o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    elif src < rank:
        o_b, l_b = merge.partial_attention(q, k_held, v_held)
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "updates out and lse in place with copy_, returns them", True, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    holder = (rank - step) % world
    if holder <= rank:
        mask = torch.tril(torch.ones(q.shape[-2], q.shape[-2])).bool() if holder == rank else None
        o_blk, lse_blk = merge.partial_attention(q, k_held, v_held, mask)
        new_out, new_lse = merge.merge_partials(out, lse, o_blk, lse_blk)
        out.copy_(new_out)
        lse.copy_(new_lse)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "source rank computed as (rank + step) mod world", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank + step) % world
    if src > rank:
        return out, lse, k_held, v_held
    mask = None
    if src == rank:
        mask = torch.arange(q.shape[-2])[None, :] <= torch.arange(q.shape[-2])[:, None]
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "attends to every block, also the ones after its queries", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    mask = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril() if step == 0 else None
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "no causal mask on its own (diagonal) block", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src <= rank:
        o_b, l_b = merge.partial_attention(q, k_held, v_held)
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "sends its own keys and values on instead of the held block", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src < rank:
        o_b, l_b = merge.partial_attention(q, k_held, v_held)
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    elif src == rank:
        c = q.shape[1]
        o_b, l_b = merge.partial_attention(q, k_held, v_held, torch.tril(torch.ones(c, c)).bool())
        out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_own, v_own
'''),
    _s("ring_step", "skips the earlier blocks and computes the later ones (comparison reversed)",
       False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src == rank:
        c = q.size(1)
        causal = torch.ones(c, c).tril().to(torch.bool)
        o_b, l_b = merge.partial_attention(q, k_held, v_held, causal)
    elif src > rank:
        o_b, l_b = merge.partial_attention(q, k_held, v_held)
    else:
        return out, lse, k_held, v_held
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "strict lower triangle on the diagonal: a query misses its own key", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.ones(c, c, dtype=torch.bool).tril(-1) if src == rank else None
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    _s("ring_step", "adds the block's output to the running output instead of merging", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src > rank:
        return out, lse, k_held, v_held
    c = q.shape[-2]
    mask = torch.tril(torch.ones(c, c, dtype=torch.bool)) if src == rank else None
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask)
    return out + o_b, torch.logaddexp(lse, l_b), k_held, v_held
'''),
    _s("ring_step", "pairs the held keys with its own values v_own", False, '''
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src > rank:
        return out, lse, k_held, v_held
    mask = torch.ones(q.shape[-2], q.shape[-2]).tril() > 0 if src == rank else None
    o_b, l_b = merge.partial_attention(q, k_held, v_own, mask)
    out, lse = merge.merge_partials(out, lse, o_b, l_b)
    return out, lse, k_held, v_held
'''),
    # ---------------------------------------------------------------- softcap_attention (ch. 11)
    _s("softcap_attention", "score_mod with flex_attention", True, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=softcap)
'''),
    _s("softcap_attention", "cap * tanh(score): forgets to divide by cap inside", False, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score)

    return flex_attention(q, k, v, score_mod=score_mod)
'''),
    _s("softcap_attention", "tanh(score / cap) without multiplying back by cap", False, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=mod)
'''),
    _s("softcap_attention", "hard clamp to [-cap, cap] instead of tanh", False, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def mod(score, b, h, q_idx, kv_idx):
        return torch.clamp(score, -cap, cap)

    return flex_attention(q, k, v, score_mod=mod)
'''),
    _s("softcap_attention", "caps the unscaled scores, then scales", False, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    E = q.shape[-1]

    def mod(score, b, h, q_idx, kv_idx):
        raw = score * math.sqrt(E)
        return cap * torch.tanh(raw / cap) / math.sqrt(E)

    return flex_attention(q, k, v, score_mod=mod)
'''),
    _s("softcap_attention", "passes scale=1.0, so the cap sees unscaled scores and no 1/sqrt(E)",
       False, '''
def softcap_attention(q, k, v, cap):
    from torch.nn.attention.flex_attention import flex_attention

    def soft(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=soft, scale=1.0)
'''),
    # ---------------------------------------------------------------- sink_softmax (ch. 14)
    _s("sink_softmax", "shift by the max over scores and sink together", True, '''
def sink_softmax(scores, sinks):
    b = sinks.view(1, -1, 1, 1).to(scores.dtype)
    m = torch.maximum(scores.amax(dim=-1, keepdim=True), b)
    e = torch.exp(scores - m)
    denom = e.sum(dim=-1, keepdim=True) + torch.exp(b - m)
    return e / denom
'''),
    _s("sink_softmax", "unshifted exponentials: overflow for scores near 1000", False, '''
def sink_softmax(scores, sinks):
    e = torch.exp(scores)
    return e / (e.sum(-1, keepdim=True) + torch.exp(sinks)[None, :, None, None])
'''),
    _s("sink_softmax", "adds 1 to the denominator (sink logit 0) and ignores sinks", False, '''
def sink_softmax(scores, sinks):
    m = scores.amax(-1, keepdim=True).clamp_min(0.0)
    e = torch.exp(scores - m)
    return e / (e.sum(-1, keepdim=True) + torch.exp(-m))
'''),
    _s("sink_softmax", "sink with the wrong sign: e^(-b)", False, '''
def sink_softmax(scores, sinks):
    b = -sinks[None, :, None, None]
    m = torch.maximum(scores.amax(-1, keepdim=True), b)
    e = (scores - m).exp()
    return e / (e.sum(-1, keepdim=True) + (b - m).exp())
'''),
    _s("sink_softmax", "shifts by the scores' max only: an all -inf row gives NaN", False, '''
def sink_softmax(scores, sinks):
    m = scores.max(dim=-1, keepdim=True).values
    e = torch.exp(scores - m)
    sink = torch.exp(sinks.view(1, -1, 1, 1) - m)
    return e / (e.sum(dim=-1, keepdim=True) + sink)
'''),
    _s("sink_softmax", "sink logit broadcast over the key axis instead of the heads", False, '''
def sink_softmax(scores, sinks):
    s = sinks.view(1, 1, 1, -1)
    m = torch.maximum(scores.amax(-1, keepdim=True), s.amax())
    e = torch.exp(scores - m)
    return e / (e.sum(-1, keepdim=True) + torch.exp(s - m))
'''),
    _s("sink_softmax", "plain softmax: the sink forgotten", False, '''
def sink_softmax(scores, sinks):
    m = scores.amax(-1, keepdim=True)
    m = torch.nan_to_num(m, neginf=0.0)
    e = torch.exp(scores - m)
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)
'''),
    # ---------------------------------------------------------------- gated_attention (ch. 14)
    _s("gated_attention", "F.linear for both projections", True, '''
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(F.linear(x, w_gate))
    return F.linear(attn * gate, w_out)
'''),
    _s("gated_attention", "gates after the output projection", False, '''
def gated_attention(attn, x, w_gate, w_out):
    out = attn @ w_out.T
    return out * torch.sigmoid(x @ w_gate.T)
'''),
    _s("gated_attention", "SiLU gate instead of a sigmoid", False, '''
def gated_attention(attn, x, w_gate, w_out):
    g = F.silu(x @ w_gate.T)
    return (attn * g) @ w_out.T
'''),
    _s("gated_attention", "adds the gate instead of multiplying", False, '''
def gated_attention(attn, x, w_gate, w_out):
    gate = torch.sigmoid(torch.matmul(x, w_gate.t()))
    return torch.matmul(attn + gate, w_out.t())
'''),
    _s("gated_attention", "sigmoid around the product attn·XW_g instead of around XW_g", False, '''
def gated_attention(attn, x, w_gate, w_out):
    return torch.sigmoid(attn * (x @ w_gate.T)) @ w_out.T
'''),
    _s("gated_attention", "closes the gate the wrong way: 1 - sigmoid", False, '''
def gated_attention(attn, x, w_gate, w_out):
    gate = 1 - torch.sigmoid(F.linear(x, w_gate))
    return F.linear(attn * gate, w_out)
'''),
    _s("gated_attention", "forgets the output projection", False, '''
def gated_attention(attn, x, w_gate, w_out):
    return attn * torch.sigmoid(x @ w_gate.T)
'''),
]


def load(index: int):
    """The learner's function of ``CORPUS[index]``, defined as a notebook cell defines it."""
    return load_from(CORPUS, index)
