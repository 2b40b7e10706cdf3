"""A blind corpus of learner submissions for measuring the exercise checkers (issue 51).

Written from the chapters alone (the exercise statements, the starter cells, the chapter text)
and from what ``exercises.check`` answers, by someone who had not read the declared mistakes,
the checkers' code or the earlier corpora. Each entry is one submission as a learner would type
it in a notebook cell: ``source`` defines a function named after the exercise (helpers allowed)
and may use the names a chapter notebook has imported (``torch``, ``math``, ``F``, ``masks``,
``merge``; see :data:`NAMESPACE_NAMES`).

``right`` says whether the submission is correct (each right one was compared with torch or the
course's own implementation by hand when written); ``label`` says in the corpus author's words
what a wrong one gets wrong. ``tests/test_exercises_blind_corpus.py`` asserts no false accept
and no false reject; ``bench/blind_corpus_report.py`` measures the share of wrong submissions
the checkers name.
"""

from __future__ import annotations

from learner_corpus_cells import NAMESPACE_NAMES, Submission, _s, load_from, namespace

__all__ = ["CORPUS", "NAMESPACE_NAMES", "Submission", "load", "namespace"]


CORPUS: list[Submission] = [
    # ------------------------------------------------------------------ ch02 scaled_scores
    _s("scaled_scores", "einsum, scale as a power", True, """
def scaled_scores(q, k):
    width = q.shape[-1]
    return torch.einsum("...le,...se->...ls", q, k) * width ** -0.5
"""),
    _s("scaled_scores", "divides by E instead of sqrt(E)", False, """
def scaled_scores(q, k):
    e = q.size(-1)
    return torch.matmul(q, k.transpose(-1, -2)) / e
"""),
    _s("scaled_scores", "scales by the number of keys S instead of the width E", False, """
def scaled_scores(q, k):
    n_keys = k.shape[-2]
    raw = q @ k.transpose(-2, -1)
    return raw / math.sqrt(n_keys)
"""),
    _s("scaled_scores", "multiplies by sqrt(E) instead of dividing", False, """
def scaled_scores(q, k):
    return (q @ k.mT) * math.sqrt(q.shape[-1])
"""),
    _s("scaled_scores", "returns softmax weights instead of scores", False, """
def scaled_scores(q, k):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1)
"""),
    _s("scaled_scores", "keys times queries: (S, L) instead of (L, S)", False, """
def scaled_scores(q, k):
    d = q.shape[-1]
    return k @ q.transpose(-2, -1) / d ** 0.5
"""),
    # ------------------------------------------------------------------ ch03 softmax
    _s("softmax", "max via torch.max(...).values, torch.div", True, """
def softmax(x, dim=-1):
    top = torch.max(x, dim=dim, keepdim=True).values
    num = (x - top).exp()
    return torch.div(num, num.sum(dim=dim, keepdim=True))
"""),
    _s("softmax", "moves dim last, works on rows, moves it back", True, """
def softmax(x, dim=-1):
    t = x.movedim(dim, -1)
    t = t - t.amax(-1, keepdim=True)
    t = torch.exp(t)
    t = t / t.sum(-1, keepdim=True)
    return t.movedim(-1, dim)
"""),
    _s("softmax", "no max subtraction, NaN from inf/inf hidden by nan_to_num", False, """
def softmax(x, dim=-1):
    ex = torch.exp(x)
    return torch.nan_to_num(ex / ex.sum(dim=dim, keepdim=True))
"""),
    _s("softmax", "ignores dim: always normalises the last axis", False, """
def softmax(x, dim=-1):
    shifted = x - x.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
"""),
    _s("softmax", "subtracts one global max: rows on a smaller scale underflow", False, """
def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim, keepdim=True)
"""),
    _s("softmax", "max without keepdim, unsqueezed at the end: wrong for dim != -1", False, """
def softmax(x, dim=-1):
    biggest = x.amax(dim=dim).unsqueeze(-1)
    e = torch.exp(x - biggest)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    _s("softmax", "shift per slice but divides by the sum of the whole tensor", False, """
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum()
"""),
    _s("softmax", "computes in float32 and returns float32 for every input", False, """
def softmax(x, dim=-1):
    x = x.float()
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)
"""),
    # ------------------------------------------------------------------ ch03 self_attention
    _s("self_attention", "einsum throughout", True, """
def self_attention(x, w_q, w_k, w_v):
    Q = torch.einsum("bld,de->ble", x, w_q)
    K = torch.einsum("bld,de->ble", x, w_k)
    V = torch.einsum("bld,de->ble", x, w_v)
    A = torch.einsum("bie,bje->bij", Q, K) / Q.shape[-1] ** 0.5
    A = A.softmax(dim=-1)
    return torch.einsum("bij,bje->bie", A, V), A
"""),
    _s("self_attention", "scales by the model width D instead of E", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    D = x.shape[-1]
    w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D), dim=-1)
    return w @ v, w
"""),
    _s("self_attention", "softmax over the queries (dim=1)", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s, dim=1)
    return w @ v, w
"""),
    _s("self_attention", "no scaling at all", False, """
def self_attention(x, w_q, w_k, w_v):
    queries = torch.matmul(x, w_q)
    keys = torch.matmul(x, w_k)
    vals = torch.matmul(x, w_v)
    weights = torch.softmax(torch.matmul(queries, keys.transpose(-2, -1)), dim=-1)
    return torch.matmul(weights, vals), weights
"""),
    _s("self_attention", "K Q^T: the weights come out transposed", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s, dim=-1)
    return w @ v, w
"""),
    _s("self_attention", "output from the raw scores; weights softmaxed for the return", False, """
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores @ v, torch.softmax(scores, dim=-1)
"""),
    # ------------------------------------------------------------------ ch04 split_heads
    _s("split_heads", "view then transpose(1, 2)", True, """
def split_heads(x, num_heads):
    b, n, d = x.shape
    return x.view(b, n, num_heads, d // num_heads).transpose(1, 2)
"""),
    _s("split_heads", "reshape straight to (B, H, L, E) without a permute", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, num_heads, L, D // num_heads)
"""),
    _s("split_heads", "features dealt out interleaved: head h gets h, h+H, ...", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, D // num_heads, num_heads).permute(0, 3, 1, 2)
"""),
    _s("split_heads", "heads put first: (H, B, L, E)", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.view(B, L, num_heads, -1).permute(2, 0, 1, 3)
"""),
    _s("split_heads", "transposes the wrong pair of axes", False, """
def split_heads(x, num_heads):
    B, L, D = x.shape
    return x.reshape(B, L, num_heads, D // num_heads).transpose(-1, -2)
"""),
    # ------------------------------------------------------------------ ch04 multi_head_attention
    _s("multi_head_attention", "view into (B, L, 3, H, E), unbind, einsum", True, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    hd = D // num_heads
    qkv = torch.matmul(x, w_qkv).view(B, L, 3, num_heads, hd)
    q, k, v = qkv.unbind(dim=2)                        # each (B, L, H, hd)
    att = torch.einsum("blhe,bmhe->bhlm", q, k) / math.sqrt(hd)
    att = att.softmax(dim=-1)
    y = torch.einsum("bhlm,bmhe->blhe", att, v).reshape(B, L, D)
    return y @ w_o
"""),
    _s("multi_head_attention", "heads cut with reshape(B, H, L, E), no permute", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = (x @ w_qkv).split(D, dim=-1)
    q, k, v = (t.reshape(B, num_heads, L, E) for t in (q, k, v))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    o = (w @ v).permute(0, 2, 1, 3).reshape(B, L, D)
    return o @ w_o
"""),
    _s("multi_head_attention", "scales every head by 1/sqrt(D)", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    heads = lambda t: t.view(B, L, num_heads, -1).transpose(1, 2)
    q, k, v = map(heads, (x @ w_qkv).chunk(3, dim=-1))
    p = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1)
    return (p @ v).transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "merges heads by reshape without moving H back", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = [t.reshape(B, L, num_heads, E).permute(0, 2, 1, 3)
               for t in torch.split(x @ w_qkv, D, dim=-1)]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (w @ v).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "softmax over the query axis", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = [t.reshape(B, L, num_heads, E).transpose(1, 2) for t in (x @ w_qkv).split(D, -1)]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-2)
    return (w @ v).transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "reads the fused projection head-major (B, L, H, 3, E)", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    qkv = (x @ w_qkv).view(B, L, num_heads, 3, E).permute(3, 0, 2, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (w @ v).transpose(1, 2).reshape(B, L, D) @ w_o
"""),
    _s("multi_head_attention", "forgets the output projection w_o", False, """
def multi_head_attention(x, w_qkv, w_o, num_heads):
    B, L, D = x.shape
    E = D // num_heads
    q, k, v = [t.unflatten(-1, (num_heads, E)).transpose(1, 2) for t in (x @ w_qkv).split(D, -1)]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(E), dim=-1)
    return (w @ v).transpose(1, 2).flatten(-2)
"""),
    # ------------------------------------------------------------------ ch05 apply_rope
    _s("apply_rope", "complex numbers via torch.polar, float64 angles", True, """
def apply_rope(x, offset=0, base=10000.0):
    n, d = x.shape[-2], x.shape[-1]
    h = d // 2
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(n, dtype=torch.float64) + offset, inv)       # (L, E/2)
    z = torch.complex(x[..., :h].double(), x[..., h:].double())
    z = z * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
"""),
    _s("apply_rope", "ignores the offset: positions start at 0", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    freqs = base ** (-2 * torch.arange(E // 2, dtype=torch.float64) / E)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * freqs
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., : E // 2], x[..., E // 2:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)
"""),
    _s("apply_rope", "rotates interleaved pairs (x_2i, x_2i+1) instead of split halves", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2:]
    freqs = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    ang = (torch.arange(L, dtype=torch.float64) + offset)[:, None] * freqs
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    ev, od = x[..., 0::2], x[..., 1::2]
    out = torch.stack([ev * c - od * s, ev * s + od * c], dim=-1)
    return out.flatten(-2)
"""),
    _s("apply_rope", "rotates the wrong way (sign of sin flipped)", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(E // 2, dtype=torch.float64) * 2 / E)
    angle = torch.arange(offset, offset + L, dtype=torch.float64)[:, None] * theta
    cos = angle.cos().repeat(1, 2).to(x.dtype)
    sin = angle.sin().repeat(1, 2).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([x2, -x1], dim=-1) * sin
"""),
    _s("apply_rope", "frequencies base^(-i/E): the factor 2 forgotten", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(E // 2, dtype=torch.float64) / E)
    angle = torch.arange(offset, offset + L, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
"""),
    _s("apply_rope", "positions offset+1 .. offset+L (one too far)", False, """
def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(E // 2, dtype=torch.float64) * 2 / E)
    pos = torch.arange(1, L + 1, dtype=torch.float64) + offset
    angle = torch.outer(pos, theta)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
"""),
    _s("apply_rope", "applies its rotation helper twice", False, """
def _rotate(t, cos, sin):
    t1, t2 = t.chunk(2, dim=-1)
    return t * cos + torch.cat([-t2, t1], dim=-1) * sin


def apply_rope(x, offset=0, base=10000.0):
    L, E = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(E // 2, dtype=torch.float64) * 2 / E)
    angle = torch.arange(offset, offset + L, dtype=torch.float64)[:, None] * theta
    cos = torch.cat([angle.cos()] * 2, dim=-1).to(x.dtype)
    sin = torch.cat([angle.sin()] * 2, dim=-1).to(x.dtype)
    q = _rotate(x, cos, sin)
    return _rotate(q, cos, sin)
"""),
    # ------------------------------------------------------------------ ch06 causal_mask
    _s("causal_mask", "compares index grids", True, """
def causal_mask(n):
    rows = torch.arange(n).unsqueeze(1)
    cols = torch.arange(n).unsqueeze(0)
    return cols <= rows
"""),
    _s("causal_mask", "negated strict upper triangle", True, """
def causal_mask(n):
    return ~torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
"""),
    _s("causal_mask", "upper triangle instead of lower", False, """
def causal_mask(n):
    return torch.ones(n, n, dtype=torch.bool).triu()
"""),
    _s("causal_mask", "diagonal excluded: tril(-1)", False, """
def causal_mask(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
"""),
    _s("causal_mask", "True marks what is hidden (inverted polarity)", False, """
def causal_mask(n):
    future = torch.ones(n, n).triu(1)
    return future.bool()
"""),
    _s("causal_mask", "returns float 0/1 instead of bool", False, """
def causal_mask(n):
    return torch.tril(torch.ones(n, n))
"""),
    _s("causal_mask", "strict comparison j < i on index grids", False, """
def causal_mask(n):
    idx = torch.arange(n)
    return idx[None, :] < idx[:, None]
"""),
    _s("causal_mask", "i <= j: the mask transposed", False, """
def causal_mask(n):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return i <= j
"""),
    # ------------------------------------------------------------------ ch06 masked_attention
    _s("masked_attention", "torch.where, softmax, dead rows zeroed by mask.any", True, """
def masked_attention(q, k, v, mask):
    d = q.size(-1)
    s = torch.matmul(q, k.transpose(-1, -2)) * d ** -0.5
    s = torch.where(mask, s, torch.full_like(s, -float("inf")))
    w = torch.softmax(s, dim=-1)
    w = torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
    return w @ v
"""),
    _s("masked_attention", "softmax NaN of dead rows turned to 0 by nan_to_num", True, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(mask.logical_not(), float("-inf")), dim=-1)
    return torch.nan_to_num(weights, nan=0.0) @ v
"""),
    _s("masked_attention", "masks the allowed keys (polarity inverted)", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(mask, float("-inf"))
    w = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return w @ v
"""),
    _s("masked_attention", "fills -1e9: a dead row averages all values instead of zeros", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, -1e9)
    return torch.softmax(scores, dim=-1) @ v
"""),
    _s("masked_attention", "no 1/sqrt(E) scaling", False, """
def masked_attention(q, k, v, mask):
    scores = torch.where(mask, q @ k.transpose(-2, -1), float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v
"""),
    _s("masked_attention", "zeroes masked weights after the softmax, no renormalising", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(scores, dim=-1) * mask
    return w @ v
"""),
    _s("masked_attention", "softmax over the query axis", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-2).nan_to_num(0.0)
    return w @ v
"""),
    _s("masked_attention", "scales by the value width Ev instead of E", False, """
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v
"""),
    # ------------------------------------------------------------------ ch08 online_softmax_stats
    _s("online_softmax_stats", "state taken from the first block, -inf blocks skipped", True, """
def online_softmax_stats(blocks):
    best = torch.tensor(float("-inf"))
    total = torch.tensor(0.0)
    for chunk in blocks:
        chunk_max = chunk.max().to(best.dtype)
        new_best = chunk_max if chunk_max > best else best
        if torch.isneginf(new_best):
            continue
        total = total * (best - new_best).exp() + (chunk - new_best).exp().sum()
        best = new_best
    return best, total
"""),
    _s("online_softmax_stats", "does not rescale the running sum when the max grows", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m = torch.maximum(m, b.max().to(m.dtype))
        if torch.isinf(m) and m < 0:
            continue
        l = l + torch.exp(b - m).sum()
    return m, l
"""),
    _s("online_softmax_stats", "rescales by exp(m_new - m_old): the sign flipped", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max().to(m.dtype))
        if m_new == float("-inf"):
            continue
        factor = torch.exp(m_new - m) if m > float("-inf") else torch.tensor(0.0)
        l = l * factor + torch.exp(b - m_new).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "new block shifted by its own max, not the running max", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        bm = b.max().to(m.dtype)
        m_new = torch.maximum(m, bm)
        if m_new == float("-inf"):
            continue
        l = l * torch.exp(m - m_new) + torch.exp(b - bm).sum()
        m = m_new
    return m, l
"""),
    _s("online_softmax_stats", "returns log l (the log-sum-exp) instead of l", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max().to(m.dtype))
        if m_new == float("-inf"):
            continue
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, m + torch.log(l)
"""),
    _s("online_softmax_stats", "sums exp(x) before shifting: overflows", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(float("-inf"))
    raw = torch.tensor(0.0)
    for b in blocks:
        m = torch.maximum(m, b.max().to(m.dtype))
        raw = raw + torch.exp(b.to(raw.dtype)).sum()
    return m, raw * torch.exp(-m)
"""),
    _s("online_softmax_stats", "running max starts at 0 instead of -inf", False, """
def online_softmax_stats(blocks):
    m = torch.tensor(0.0)
    l = torch.tensor(0.0)
    for b in blocks:
        m_new = torch.maximum(m, b.max().to(m.dtype))
        l = l * torch.exp(m - m_new) + torch.exp(b - m_new).sum()
        m = m_new
    return m, l
"""),
    # ------------------------------------------------------------------ ch08 flash_attention
    _s("flash_attention", "FlashAttention-1 style: O kept normalised after every block", True, """
def flash_attention(q, k, v, block_size=64):
    sc = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    l = torch.zeros((*q.shape[:-1], 1), dtype=q.dtype)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    S = k.shape[-2]
    start = 0
    while start < S:
        stop = min(start + block_size, S)
        s = torch.matmul(q, k[..., start:stop, :].transpose(-1, -2)) * sc
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        old = l * torch.exp(m - m_new)
        l_new = old + p.sum(dim=-1, keepdim=True)
        o = (old * o + p @ v[..., start:stop, :]) / l_new
        m, l = m_new, l_new
        start = stop
    return o
"""),
    _s("flash_attention", "rescales the running sum but not the running output", False, """
def flash_attention(q, k, v, block_size=64):
    s = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j:j + block_size, :].transpose(-2, -1) * s
        m_new = torch.maximum(m, S_j.amax(-1, keepdim=True))
        P = torch.exp(S_j - m_new)
        ell = torch.exp(m - m_new) * ell + P.sum(-1, keepdim=True)
        O = O + P @ v[..., j:j + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "forgets the 1/sqrt(E) scale", False, """
def flash_attention(q, k, v, block_size=64):
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        S_j = torch.einsum("bhie,bhje->bhij", q, k[..., j:j + block_size, :])
        m_new = torch.maximum(m, S_j.amax(-1, keepdim=True))
        P = torch.exp(S_j - m_new)
        a = torch.exp(m - m_new)
        ell = a * ell + P.sum(-1, keepdim=True)
        O = a * O + torch.einsum("bhij,bhje->bhie", P, v[..., j:j + block_size, :])
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "never divides by the running sum at the end", False, """
def flash_attention(q, k, v, block_size=64):
    scale = q.shape[-1] ** -0.5
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    acc = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j:j + block_size, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, S_j.amax(-1, keepdim=True))
        P = torch.exp(S_j - m_new)
        a = torch.exp(m - m_new)
        ell = a * ell + P.sum(-1, keepdim=True)
        acc = a * acc + P @ v[..., j:j + block_size, :]
        m = m_new
    return acc
"""),
    _s("flash_attention", "each block's exponentials shifted by the block's own max", False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j:j + block_size, :].transpose(-2, -1) * scale
        bmax = S_j.amax(-1, keepdim=True)
        m_new = torch.maximum(m, bmax)
        P = torch.exp(S_j - bmax)
        a = torch.exp(m - m_new)
        ell = a * ell + P.sum(-1, keepdim=True)
        O = a * O + P @ v[..., j:j + block_size, :]
        m = m_new
    return O / ell
"""),
    _s("flash_attention", "softmax per block, blocks merged by their mean", False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1 / math.sqrt(q.shape[-1])
    parts = []
    for j in range(0, k.shape[-2], block_size):
        S_j = q @ k[..., j:j + block_size, :].transpose(-2, -1) * scale
        P = torch.exp(S_j - S_j.amax(-1, keepdim=True))
        P = P / P.sum(-1, keepdim=True)
        parts.append(P @ v[..., j:j + block_size, :])
    return sum(parts) / len(parts)
"""),
    _s("flash_attention", "drops the last partial block of keys", False, """
def flash_attention(q, k, v, block_size=64):
    scale = 1 / math.sqrt(q.shape[-1])
    S = k.shape[-2]
    bs = min(block_size, S)
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    O = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for j in range(0, S - bs + 1, bs):
        S_j = q @ k[..., j:j + bs, :].transpose(-2, -1) * scale
        m_new = torch.maximum(m, S_j.amax(-1, keepdim=True))
        P = torch.exp(S_j - m_new)
        a = torch.exp(m - m_new)
        ell = a * ell + P.sum(-1, keepdim=True)
        O = a * O + P @ v[..., j:j + bs, :]
        m = m_new
    return O / ell
"""),
    # ------------------------------------------------------------------ ch10 decode_step
    _s("decode_step", "mask from masks.causal_mask(align='bottom_right'), einsum", True, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    past, n = k_cache.size(1), x.size(1)
    c, s = cos[past:past + n], sin[past:past + n]
    half = w_q.shape[1] // 2

    def turn(t):
        a, b = t[..., :half], t[..., half:]
        return torch.cat([a * c[:, :half] - b * s[:, :half], b * c[:, half:] + a * s[:, half:]], -1)

    q = turn(x @ w_q)
    keys = torch.cat([k_cache, turn(x @ w_k)], dim=1)
    vals = torch.cat([v_cache, x @ w_v], dim=1)
    total = keys.size(1)
    att = torch.einsum("bie,bje->bij", q, keys) / math.sqrt(q.size(-1))
    ok = masks.causal_mask(n, total, align="bottom_right")
    att = att.masked_fill(~ok, float("-inf")).softmax(dim=-1)
    return torch.einsum("bij,bje->bie", att, vals), keys, vals
"""),
    _s("decode_step", "rotates with table rows 0:L (positions not offset by P)", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[:L] + torch.cat([-t2, t1], dim=-1) * sin[:L]
    q, k_new, v_new = rope(x @ w_q), rope(x @ w_k), x @ w_v
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    keep = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v, k, v
"""),
    _s("decode_step", "top-left causal mask (tril without the S - L shift)", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    cs, sn = cos[P:P + L], sin[P:P + L]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cs + torch.cat([-t2, t1], dim=-1) * sn
    q = rope(x @ w_q)
    k = torch.cat([k_cache, rope(x @ w_k)], dim=1)
    v = torch.cat([v_cache, x @ w_v], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.tril(torch.ones(L, S, dtype=torch.bool))
    w = torch.softmax(torch.where(allowed, scores, float("-inf")), dim=-1)
    return w @ v, k, v
"""),
    _s("decode_step", "rotates the values as well", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q, k_new, v_new = (rope(x @ w) for w in (w_q, w_k, w_v))
    k = torch.cat([k_cache, k_new], dim=1)
    v = torch.cat([v_cache, v_new], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v, k, v
"""),
    _s("decode_step", "rotates all keys after appending (cached ones twice)", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t, lo):
        n = t.shape[1]
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[lo:lo + n] + torch.cat([-t2, t1], dim=-1) * sin[lo:lo + n]
    q = rope(x @ w_q, P)
    k = rope(torch.cat([k_cache, x @ w_k], dim=1), 0)
    v = torch.cat([v_cache, x @ w_v], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v, k, v
"""),
    _s("decode_step", "scales by the model width D instead of the head width E", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q = rope(x @ w_q)
    k = torch.cat([k_cache, rope(x @ w_k)], dim=1)
    v = torch.cat([v_cache, x @ w_v], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
    allowed = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v, k, v
"""),
    _s("decode_step", "new tokens do not see themselves: strict bottom-right mask", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q = rope(x @ w_q)
    k = torch.cat([k_cache, rope(x @ w_k)], dim=1)
    v = torch.cat([v_cache, x @ w_v], dim=1)
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    i = torch.arange(L)[:, None] + (S - L)
    j = torch.arange(S)[None, :]
    w = torch.softmax(scores.masked_fill(j >= i, float("-inf")), dim=-1)
    return torch.nan_to_num(w) @ v, k, v
"""),
    # ------------------------------------------------------------------ ch10 repeat_kv
    _s("repeat_kv", "repeat_interleave along the head axis", True, """
def repeat_kv(x, n_rep):
    return torch.repeat_interleave(x, n_rep, dim=1)
"""),
    _s("repeat_kv", "x.repeat tiles the heads (0,1,0,1 instead of 0,0,1,1)", False, """
def repeat_kv(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)
"""),
    _s("repeat_kv", "torch.cat of n_rep copies: tiled grouping", False, """
def repeat_kv(x, n_rep):
    return torch.cat([x for _ in range(n_rep)], dim=1)
"""),
    _s("repeat_kv", "expand with the copy axis before the heads", False, """
def repeat_kv(x, n_rep):
    B, H, S, E = x.shape
    return x.unsqueeze(1).expand(B, n_rep, H, S, E).reshape(B, n_rep * H, S, E)
"""),
    _s("repeat_kv", "repeats along the sequence axis", False, """
def repeat_kv(x, n_rep):
    B, H, S, E = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, H * n_rep, S, E)
"""),
    # ------------------------------------------------------------------ ch10 sliding_window_mask
    _s("sliding_window_mask", "lower triangle minus a shifted lower triangle", True, """
def sliding_window_mask(n, window):
    full = torch.ones(n, n, dtype=torch.bool)
    return full.tril() & ~full.tril(-window)
"""),
    _s("sliding_window_mask", "window one too wide: j >= i - window", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n).view(-1, 1)
    j = torch.arange(n).view(1, -1)
    return (j <= i) & (j >= i - window)
"""),
    _s("sliding_window_mask", "window one too narrow: window - 2 keys before the query", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n).view(-1, 1)
    j = torch.arange(n).view(1, -1)
    return (j <= i) & (i - j < window - 1)
"""),
    _s("sliding_window_mask", "symmetric band |i - j| < window, not causal", False, """
def sliding_window_mask(n, window):
    idx = torch.arange(n)
    return (idx[:, None] - idx[None, :]).abs() < window
"""),
    _s("sliding_window_mask", "band above the diagonal (future keys)", False, """
def sliding_window_mask(n, window):
    full = torch.ones(n, n, dtype=torch.bool)
    return full.triu() & ~full.triu(window)
"""),
    _s("sliding_window_mask", "excludes the query itself: i - window <= j < i", False, """
def sliding_window_mask(n, window):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j < i) & (j >= i - window)
"""),
    # ------------------------------------------------------------------ ch10 mla_absorbed_step
    _s("mla_absorbed_step", "einsum throughout, mask from index comparison", True, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    R, r, P = q_rope.shape[-1], c_new.shape[-1], c_cache.shape[1]
    V = w_kv_b.shape[0] // H - N
    cs, sn = cos[P:P + L], sin[P:P + L]

    def rotate(t):
        h = t.shape[-1] // 2
        return t * cs + torch.cat((-t[..., h:], t[..., :h]), -1) * sn

    lat = torch.cat((c_cache, c_new), 1)                         # (B, S, r)
    kr = torch.cat((k_rope_cache, rotate(k_rope_new)), 1)        # (B, S, R)
    W = w_kv_b.reshape(H, N + V, r)
    w_uk, w_uv = W[:, :N, :], W[:, N:, :]
    q_abs = torch.einsum("bhln,hnr->bhlr", q_nope, w_uk)
    s = (torch.einsum("bhlr,bsr->bhls", q_abs, lat)
         + torch.einsum("bhlk,bsk->bhls", rotate(q_rope), kr)) / math.sqrt(N + R)
    S = lat.shape[1]
    allowed = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + (S - L)
    p = torch.where(allowed, s, float("-inf")).softmax(-1)
    o_lat = torch.einsum("bhls,bsr->bhlr", p, lat)
    return torch.einsum("bhlr,hvr->bhlv", o_lat, w_uv), lat, kr
"""),
]

_MLA_BODY = """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R, r = c_cache.shape[1], q_rope.shape[-1], c_cache.shape[-1]
    def rot(t, lo=P):
        a, b = t.chunk(2, dim=-1)
        n = t.shape[-2]
        return t * cos[lo:lo + n] + torch.cat([-b, a], dim=-1) * sin[lo:lo + n]
    c = torch.cat([c_cache, c_new], dim=1)
    {KROPE}
    w = w_kv_b.view(H, -1, r)
    w_uk, w_uv = w[:, :N], w[:, N:]
    qr = {QROT}
    scores = ((q_nope @ w_uk) @ c[:, None].transpose(-2, -1)
              + qr @ k_rope[:, None].transpose(-2, -1)) {SCALE}
    S = c.shape[1]
    {MASK}
    out = (p @ c[:, None]) @ w_uv.transpose(-2, -1)
    return out, c, k_rope
"""
_MLA_OK = dict(
    KROPE="k_rope = torch.cat([k_rope_cache, rot(k_rope_new)], dim=1)",
    QROT="rot(q_rope)",
    SCALE="/ math.sqrt(N + R)",
    MASK=("keep = torch.ones(L, S, dtype=torch.bool).tril(S - L)\n"
          "    p = torch.softmax(scores.masked_fill(~keep, float('-inf')), dim=-1)"),
)


def _mla(label: str, **changes: str) -> Submission:
    """A wrong ``mla_absorbed_step`` that differs from a right one in the given parts."""
    src = _MLA_BODY
    for key, text in {**_MLA_OK, **changes}.items():
        src = src.replace("{" + key + "}", text)
    return _s("mla_absorbed_step", label, False, src)


CORPUS += [
    _mla("scales by 1/sqrt(r), the latent width", SCALE="/ math.sqrt(r)"),
    _mla("scales by 1/sqrt(N): the rotary width left out", SCALE="/ N ** 0.5"),
    _mla("scales by 1/sqrt(r + R)", SCALE="* (r + R) ** -0.5"),
    _mla("forgets to rotate q_rope", QROT="q_rope"),
    _mla("rotates the new keys and queries from position 0",
         KROPE="k_rope = torch.cat([k_rope_cache, rot(k_rope_new, 0)], dim=1)",
         QROT="rot(q_rope, 0)"),
    _mla("rotates the cached rotary keys again (all S keys from position 0)",
         KROPE="k_rope = rot(torch.cat([k_rope_cache, k_rope_new], dim=1), 0)"),
    _mla("top-left causal mask",
         MASK=("keep = torch.tril(torch.ones(L, S)).bool()\n"
               "    p = torch.softmax(torch.where(keep, scores, -torch.inf), dim=-1)")),
    _mla("no mask at all (chunks see the future)", MASK="p = scores.softmax(dim=-1)"),
]

CORPUS += [
    # ------------------------------------------------------------------ ch13 merge_partials
    _s("merge_partials", "logaddexp, isneginf guard", True, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    safe = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    wa = torch.exp(lse_a - safe).unsqueeze(-1)
    wb = torch.exp(lse_b - safe).unsqueeze(-1)
    return wa * out_a + wb * out_b, lse
"""),
    _s("merge_partials", "adds the two outputs", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    return out_a + out_b, torch.logaddexp(lse_a, lse_b)
"""),
    _s("merge_partials", "averages the two outputs", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (out_a + out_b) / 2, lse
"""),
    _s("merge_partials", "weights exp(lse) without a shift: overflow for big scores", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)
    tot = ea + eb
    wa = torch.where(tot > 0, ea / tot, torch.zeros_like(tot))
    wb = torch.where(tot > 0, eb / tot, torch.zeros_like(tot))
    return wa[..., None] * out_a + wb[..., None] * out_b, torch.log(tot)
"""),
    _s("merge_partials", "right output, but lse returned as lse_a + lse_b", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    both = torch.logaddexp(lse_a, lse_b)
    ok = torch.where(both == float("-inf"), 0.0, both)
    out = (torch.exp(lse_a - ok)[..., None] * out_a + torch.exp(lse_b - ok)[..., None] * out_b)
    return out, lse_a + lse_b
"""),
    _s("merge_partials", "no empty-row guard; nan_to_num makes lse 0", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    out = (torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b)
    return torch.nan_to_num(out), torch.nan_to_num(lse, nan=0.0)
"""),
    _s("merge_partials", "weights each output by its lse share, lse_a / (lse_a + lse_b)", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    total = lse_a + lse_b
    share_a = (lse_a / total).unsqueeze(-1)
    share_b = (lse_b / total).unsqueeze(-1)
    out = torch.nan_to_num(share_a * out_a + share_b * out_b)
    return out, torch.logaddexp(lse_a, lse_b)
"""),
    # ------------------------------------------------------------------ ch13 ring_step
    _s("ring_step", "merge.partial_attention + merge.merge_partials", True, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    owner = (rank - step) % world
    if owner > rank:
        return out, lse, k_held, v_held
    mask = None
    if owner == rank:
        c = q.shape[-2]
        mask = torch.ones(c, c, dtype=torch.bool).tril()
    o_b, l_b = merge.partial_attention(q, k_held, v_held, mask=mask)
    new_out, new_lse = merge.merge_partials(out, lse, o_b, l_b)
    return new_out, new_lse, k_held, v_held
"""),
    _s("ring_step", "by hand, running out/lse updated in place", True, """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = (rank - step) % world
    if src <= rank:
        sc = torch.einsum("bie,bje->bij", q, k_held) / math.sqrt(q.shape[-1])
        if src == rank:
            n = q.shape[1]
            fut = torch.arange(n)[None, :] > torch.arange(n)[:, None]
            sc = sc.masked_fill(fut, float("-inf"))
        mx = sc.amax(-1, keepdim=True)
        e = torch.exp(sc - mx)
        tot = e.sum(-1, keepdim=True)
        blk_lse = (mx + tot.log()).squeeze(-1)
        blk_out = (e / tot) @ v_held
        both = torch.logaddexp(lse, blk_lse)
        out.mul_(torch.exp(lse - both).unsqueeze(-1)).add_(
            torch.exp(blk_lse - both).unsqueeze(-1) * blk_out)
        lse.copy_(both)
    return out, lse, k_held, v_held
"""),
]

_RING_BODY = """
def ring_step(q, k_own, v_own, k_held, v_held, out, lse, rank, step, world):
    src = {SRC}
    {SKIP}
    s = q @ k_held.transpose(-2, -1) {SCALE}
    if src == rank:
        c = q.shape[-2]
        {DIAG}
    p = torch.softmax(s, dim=-1)
    {GUARD}
    lse_b = torch.logsumexp(s, dim=-1)
    out_b = p @ v_held
    {MERGE}
    return new_out, new_lse, {SEND}
"""
_RING_OK = dict(
    SRC="(rank - step) % world",
    SKIP="if src > rank:\n        return out, lse, k_held, v_held",
    SCALE="/ math.sqrt(q.shape[-1])",
    DIAG="s = s.masked_fill(~torch.ones(c, c, dtype=torch.bool).tril(), float('-inf'))",
    GUARD="pass",
    MERGE=("new_out, new_lse = merge.merge_partials(out, lse, out_b, lse_b)"),
    SEND="k_held, v_held",
)


def _ring(label: str, **changes: str) -> Submission:
    """A wrong ``ring_step`` that differs from a right one in the given parts."""
    src = _RING_BODY
    for key, text in {**_RING_OK, **changes}.items():
        src = src.replace("{" + key + "}", text)
    return _s("ring_step", label, False, src)


CORPUS += [
    _ring("diagonal block masked with tril(-1), NaN rows hidden by nan_to_num",
          DIAG="s = s.masked_fill(torch.ones(c, c, dtype=torch.bool).tril(-1) == 0, -math.inf)",
          GUARD="p = torch.nan_to_num(p)"),
    _ring("source rank computed as rank + step (ring turned the wrong way)",
          SRC="(rank + step) % world"),
    _ring("future blocks not skipped", SKIP="pass"),
    _ring("diagonal block not masked", DIAG="pass"),
    _ring("diagonal block masked with the upper triangle",
          DIAG="s = s.masked_fill(~torch.ones(c, c, dtype=torch.bool).triu(), float('-inf'))"),
    _ring("merges by adding outputs",
          MERGE="new_out, new_lse = out + out_b, torch.logaddexp(lse, lse_b)"),
    _ring("merges by replacing the running result with the newer block",
          MERGE="new_out, new_lse = out_b, lse_b"),
    _ring("sends its own block instead of the one it holds", SEND="k_own, v_own"),
    _ring("no 1/sqrt(E) scale", SCALE=""),
]


# ---------------------------------------------------------------------- second round: variants
CORPUS += [
    _s("masked_attention", "no guard: a fully masked row comes out NaN", False, """
def masked_attention(q, k, v, mask):
    logits = torch.einsum("...le,...se->...ls", q, k) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~mask, -math.inf)
    return torch.softmax(logits, dim=-1) @ v
"""),
    _s("flash_attention", "rescales the running output but not the running sum", False, """
def flash_attention(q, k, v, block_size=64):
    s = q.shape[-1] ** -0.5
    rows = q.shape[:-1] + (1,)
    m = torch.full(rows, -math.inf, dtype=q.dtype)
    l = torch.zeros(rows, dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for lo in range(0, k.shape[-2], block_size):
        kk, vv = k[..., lo:lo + block_size, :], v[..., lo:lo + block_size, :]
        sc = (q @ kk.transpose(-1, -2)) * s
        m2 = torch.maximum(m, sc.amax(-1, keepdim=True))
        p = (sc - m2).exp()
        o = o * (m - m2).exp() + p @ vv
        l = l + p.sum(-1, keepdim=True)
        m = m2
    return o / l
"""),
    _s("decode_step", "attends to the cache only, before appending", False, """
def decode_step(x, w_q, w_k, w_v, k_cache, v_cache, cos, sin):
    P, L = k_cache.shape[1], x.shape[1]
    def rope(t):
        t1, t2 = t.chunk(2, dim=-1)
        return t * cos[P:P + L] + torch.cat([-t2, t1], dim=-1) * sin[P:P + L]
    q, k_new, v_new = rope(x @ w_q), rope(x @ w_k), x @ w_v
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])
    out = torch.nan_to_num(torch.softmax(scores, dim=-1) @ v_cache)
    if P == 0:
        out = torch.zeros_like(v_new)
    return out, torch.cat([k_cache, k_new], dim=1), torch.cat([v_cache, v_new], dim=1)
"""),
    _s("mla_absorbed_step", "scales the nope part by 1/sqrt(N) and the rope part by 1/sqrt(R)",
       False, """
def mla_absorbed_step(q_nope, q_rope, c_new, k_rope_new, c_cache, k_rope_cache, w_kv_b, cos,
                      sin):
    B, H, L, N = q_nope.shape
    P, R = c_cache.shape[1], q_rope.shape[-1]
    pos_cos, pos_sin = cos[P:P + L], sin[P:P + L]
    def rope(t):
        a, b = t.chunk(2, dim=-1)
        return t * pos_cos + torch.cat([-b, a], dim=-1) * pos_sin
    lat = torch.cat([c_cache, c_new], dim=1)
    kr = torch.cat([k_rope_cache, rope(k_rope_new)], dim=1)
    w = w_kv_b.view(H, -1, lat.shape[-1])
    w_uk, w_uv = w[:, :N], w[:, N:]
    nope = torch.einsum("bhln,hnr,bsr->bhls", q_nope, w_uk, lat) / math.sqrt(N)
    pe = torch.einsum("bhlk,bsk->bhls", rope(q_rope), kr) / math.sqrt(R)
    S = lat.shape[1]
    keep = torch.ones(L, S, dtype=torch.bool).tril(S - L)
    p = torch.softmax((nope + pe).masked_fill(~keep, -math.inf), dim=-1)
    return torch.einsum("bhls,bsr,hvr->bhlv", p, lat, w_uv), lat, kr
"""),
    _s("merge_partials", "right output, lse taken as the larger of the two", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    top = torch.maximum(lse_a, lse_b)
    shift = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    ea, eb = torch.exp(lse_a - shift), torch.exp(lse_b - shift)
    den = torch.where(ea + eb == 0, torch.ones_like(ea), ea + eb)
    out = (ea / den).unsqueeze(-1) * out_a + (eb / den).unsqueeze(-1) * out_b
    return out, top
"""),
    _s("merge_partials", "weights exp(lse - max) not divided by their sum", False, """
def merge_partials(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = m.masked_fill(m == -math.inf, 0.0)
    wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
    lse = m + torch.log(wa + wb)
    return wa[..., None] * out_a + wb[..., None] * out_b, lse
"""),
]
CORPUS += [
    _ring("merges by averaging outputs",
          MERGE="new_out, new_lse = (out + out_b) / 2, torch.logaddexp(lse, lse_b)"),
]


def load(index: int):
    """The learner's function of ``CORPUS[index]``, defined as a notebook cell defines it."""
    return load_from(CORPUS, index)
