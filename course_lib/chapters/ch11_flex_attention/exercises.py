"""Chapter 11 (FlexAttention): ``document_attention`` and ``softcap_attention``.

The learner writes a ``mask_mod`` / ``score_mod`` and runs torch's eager ``flex_attention`` with
it; the check compares the output with the course's dense truth (``reference`` SDPA with the
dense document mask, or dense soft-capped attention), computed in float64. The declared mistakes
are dense re-implementations of what a wrong mod computes (fast to evaluate).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from course_lib.attention import masks, reference
from course_lib.attention.softmax import safe_softmax
from course_lib.toolkit.checking import Case, Exercise, Mistake
from course_lib.toolkit.checking._spec import CallExtension

# Not ``.helpers``: importing it switches eager flex to its debugging path and adds a warnings
# filter, for the chapter's notebook. The first check imports every chapter's exercises, which
# must leave the learner's session as it was (issue 51); the two helpers needed are one line each.


def document_ids(lengths: torch.Tensor) -> torch.Tensor:
    """``(S,)`` document of every token (as ``helpers.document_ids``)."""
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)


def document_mask(document_id: torch.Tensor) -> torch.Tensor:
    """``(S, S)`` same document and causal (as ``helpers.document_mask``)."""
    same = document_id[:, None] == document_id[None, :]
    return same & masks.causal_mask(document_id.shape[0])


_FLEX_WARNING = "flex_attention called without torch.compile"


@contextlib.contextmanager
def _eager_flex() -> Iterator[None]:
    """Eager flex on its dynamo-free path (torch's switch for debugging mods, exact in the
    forward pass; ``helpers.eager_flex_without_dynamo``) and its warning about materialised
    scores silenced, for the duration only: the flag, the warnings filters and the environment
    (flex's first call sets ``TORCHINDUCTOR_CACHE_DIR``) are put back as they were."""
    import torch.nn.attention.flex_attention as fa

    flag = fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG
    filters = list(warnings.filters)
    environ = dict(os.environ)
    fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    warnings.filterwarnings("ignore", message=_FLEX_WARNING, category=UserWarning)
    try:
        yield
    finally:
        fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = flag
        warnings.filters[:] = filters
        if hasattr(warnings, "_filters_mutated"):
            warnings._filters_mutated()
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        for key, value in environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


class _EagerFlexCalls(CallExtension):
    """Each call of the learner's function runs with eager flex on its fast path: entered in
    the check's worker, a process of its own that ends with the check (or in the course's own
    tests, which watch in-process), so it is not put back."""

    @contextlib.contextmanager
    def around_call(self) -> Iterator[Callable[[Any], tuple[str, str] | None]]:
        import torch.nn.attention.flex_attention as fa

        fa._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
        warnings.filterwarnings("ignore", message=_FLEX_WARNING, category=UserWarning)
        yield _no_verdict

    def warm(self) -> None:
        """Flex's first import and call, before the fork: in a fresh session the worker would
        otherwise import flex in :meth:`around_call` under its reporting trace (the import's
        ``namedtuple`` code is compiled from a string: refused as the learner's) and pay flex's
        first call (seconds) inside the learner's time limit."""
        _warm_flex()


def _no_verdict(value: Any) -> None:
    return None

CHAPTER = "11_flex_attention"
#: float32 attention through two kernels: exp amplifies rounding (as chapter 6's exercise)
TOLERANCES = {torch.float32: (1e-4, 1e-3)}


@functools.lru_cache(maxsize=1)
def _warm_flex() -> None:
    """Run eager flex once in this process (imports, first call: seconds), before a check forks
    its worker: the worker's time limit then measures the learner's code, not torch's warm-up,
    and the worker imports nothing of flex under its reporting trace (``_EagerFlexCalls.warm``).
    Called by that warm and by the case generators, in the learner's process: on the
    dynamo-free path (:func:`_eager_flex`, as each call in the worker), with the session's flag,
    warnings filters and environment put back afterwards. The warm-up's caches (imports, first
    kernels) stay, which is the point."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    with _eager_flex():
        x = torch.zeros(1, 1, 8, 4)
        mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= q_idx, None, None, 8, 8,
                                 device="cpu")
        flex_attention(x, x, x, score_mod=lambda s, b, h, q_idx, kv_idx: s, block_mask=mask)


# --------------------------------------------------------------------------- document_attention


def _qkv(gen: torch.Generator, B: int, H: int, L: int, E: int, scale: float = 1.0):
    return tuple(scale * torch.randn(B, H, L, E, generator=gen) for _ in range(3))


def _lengths(gen: torch.Generator, n_docs: int, low: int = 2, high: int = 9) -> torch.Tensor:
    return torch.randint(low, high, (n_docs,), generator=gen)


def _document_cases(gen: torch.Generator) -> list[Case]:
    _warm_flex()
    three = _lengths(gen, 3)
    five = _lengths(gen, 5)
    two = _lengths(gen, 2, low=6, high=12)
    ones = torch.tensor([1, 3, 1, 2])
    return [
        Case("three documents", (*_qkv(gen, 1, 2, int(three.sum()), 8), three),
             note=f"lengths {three.tolist()}"),
        Case("five documents, batch 2", (*_qkv(gen, 2, 2, int(five.sum()), 8), five),
             note=f"lengths {five.tolist()}"),
        Case("two long documents", (*_qkv(gen, 1, 3, int(two.sum()), 16), two),
             note=f"lengths {two.tolist()}"),
        Case("one-token documents", (*_qkv(gen, 1, 1, int(ones.sum()), 4), ones),
             note="lengths [1, 3, 1, 2]: a one-token document sees only itself"),
    ]


def _dense_documents(q, k, v, mask):
    out = reference.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                 attn_mask=mask)
    return out.to(q.dtype)


def _document_oracle(q, k, v, lengths):
    return _dense_documents(q, k, v, document_mask(document_ids(lengths)))


def document_attention(q, k, v, lengths):
    """Causal attention inside each packed document; ``lengths (D,)`` sum to ``L``."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    document_id = torch.repeat_interleave(torch.arange(len(lengths)), lengths)

    def document_causal(b, h, q_idx, kv_idx):
        same_doc = document_id[q_idx] == document_id[kv_idx]
        return same_doc & (kv_idx <= q_idx)

    L = q.shape[-2]
    block_mask = create_block_mask(document_causal, None, None, L, L, device="cpu")
    return flex_attention(q, k, v, block_mask=block_mask)


def _boundary_ids(lengths, right: bool) -> torch.Tensor:
    """Documents from the starts ``cumsum(lengths)``: ``right=False`` puts each document's first
    token in the previous document (the off-by-one of ``searchsorted`` without ``right=True``)."""
    ends = torch.cumsum(lengths, 0)
    idx = torch.arange(int(ends[-1]))
    return torch.searchsorted(ends, idx, right=right)


def _doc_off_by_one(q, k, v, lengths):
    ids = _boundary_ids(lengths, right=False)
    causal = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
    return _dense_documents(q, k, v, (ids[:, None] == ids[None, :]) & causal)


def _doc_not_causal(q, k, v, lengths):
    ids = document_ids(lengths)
    return _dense_documents(q, k, v, ids[:, None] == ids[None, :])


def _doc_causal_only(q, k, v, lengths):
    return _dense_documents(q, k, v, torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril())


def _doc_strict(q, k, v, lengths, *, nan_rows=False):
    ids = document_ids(lengths)
    earlier = torch.ones(len(ids), len(ids), dtype=torch.bool).tril(-1)
    mask = (ids[:, None] == ids[None, :]) & earlier
    if not nan_rows:    # flex_attention, or a guarded softmax: zeros for a query with no key
        return _dense_documents(q, k, v, mask)
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return (weights @ v.double()).to(q.dtype)


def _doc_future(q, k, v, lengths):
    ids = document_ids(lengths)
    later = torch.ones(len(ids), len(ids), dtype=torch.bool).triu()
    return _dense_documents(q, k, v, (ids[:, None] == ids[None, :]) & later)


def _doc_inverted(q, k, v, lengths):
    ids = document_ids(lengths)
    causal = torch.ones(len(ids), len(ids), dtype=torch.bool).tril()
    return _dense_documents(q, k, v, (ids[:, None] != ids[None, :]) & causal)


_DOC_EXCLUDES_SELF = (
    "Your tokens do not see themselves (kv_idx < q_idx): the first token of each document, and "
    "every one-token document, has no key at all. A token attends to itself and the earlier "
    "tokens of its document: kv_idx <= q_idx.")

DOCUMENT_ATTENTION = Exercise(
    id="document_attention",
    chapter=CHAPTER,
    extension=_EagerFlexCalls(),
    title="Packed documents: a document mask_mod",
    signature="document_attention(q, k, v (B, H, L, E), lengths (D,) int summing to L) "
              "-> (B, H, L, E)",
    params=("q", "k", "v", "lengths"),
    cases=_document_cases,
    oracle=_document_oracle,
    solution=document_attention,
    tolerances=TOLERANCES,
    hints=(
        "Give every token the number of its document: lengths [3, 2] become document ids "
        "[0, 0, 0, 1, 1]. Query q_idx may see key kv_idx if both are in the same document and "
        "kv_idx <= q_idx: itself and the earlier tokens of its document.",
        "torch.repeat_interleave(torch.arange(len(lengths)), lengths) gives the ids. The mask_mod "
        "indexes them with the index tensors: document_id[q_idx] == document_id[kv_idx]. Build "
        "create_block_mask(mask_mod, None, None, L, L, device='cpu') and pass it to "
        "flex_attention as block_mask=.",
        "mask_mod: (document_id[q_idx] == document_id[kv_idx]) & (kv_idx <= q_idx); then "
        "return flex_attention(q, k, v, block_mask=create_block_mask(mask_mod, None, None, L, "
        "L, device='cpu'))",
    ),
    mistakes=(
        Mistake("boundary_off_by_one", "Your document boundaries are off by one: the first token "
                "of each document is counted in the previous one. With ends = cumsum(lengths), "
                "token t belongs to document searchsorted(ends, t, right=True) (t == ends[d] is "
                "already the next document); repeat_interleave avoids the question.",
                _doc_off_by_one),
        Mistake("not_causal", "Your tokens see their whole document, the future included. A "
                "packed language-model batch is causal inside each document: add "
                "& (kv_idx <= q_idx).", _doc_not_causal),
        Mistake("causal_only", "Your mask is plain causal: tokens see the end of the previous "
                "documents. Also require document_id[q_idx] == document_id[kv_idx].",
                _doc_causal_only),
        Mistake("inverted_documents", "Your tokens see the *other* documents and not their own: "
                "compare the document ids with ==, not !=.", _doc_inverted),
        Mistake("excludes_self", _DOC_EXCLUDES_SELF, _doc_strict),
        Mistake("excludes_self_nan", _DOC_EXCLUDES_SELF,
                functools.partial(_doc_strict, nan_rows=True), family="excludes_self"),
        Mistake("future_not_past", "Your tokens see the *later* tokens of their document "
                "(kv_idx >= q_idx), not the earlier ones. Causal means looking back: "
                "kv_idx <= q_idx.", _doc_future),
    ),
)

# --------------------------------------------------------------------------- softcap_attention


def _softcap_cases(gen: torch.Generator) -> list[Case]:
    # scores of a few units around the cap, so that capping changes the weights clearly
    _warm_flex()
    return [
        Case("cap 2, large scores", (*_qkv(gen, 1, 2, 9, 8, scale=2.0), 2.0),
             note="scores up to about ±10 against a cap of 2"),
        Case("cap 1, batch 2", (*_qkv(gen, 2, 2, 7, 4, scale=1.5), 1.0)),
        Case("cap 5", (*_qkv(gen, 1, 3, 12, 16, scale=2.5), 5.0),
             note="Gemma 2 caps at 50; a small cap shows the effect on small tensors"),
        Case("cap 3, one query", (*_qkv(gen, 2, 1, 1, 8, scale=2.0)[:1],
                                  *_qkv(gen, 2, 1, 10, 8, scale=2.0)[1:], 3.0),
             note="L = 1 query against S = 10 keys"),
    ]


def _dense_softcap(q, k, v, cap, capped_scores):
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return capped_scores(scores, cap)


def _softcap_oracle(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap,
                         lambda s, c: safe_softmax(c * torch.tanh(s / c)) @ v.double())
    return out.to(q.dtype)


def softcap_attention(q, k, v, cap):
    """Attention with Gemma 2's tanh soft-capping of the (scaled) scores: cap·tanh(score/cap)."""
    from torch.nn.attention.flex_attention import flex_attention

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return flex_attention(q, k, v, score_mod=softcap)


def _cap_after_softmax(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap,
                         lambda s, c: (c * torch.tanh(torch.softmax(s, -1) / c)) @ v.double())
    return out.to(q.dtype)


def _no_rescale(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap, lambda s, c: torch.softmax(torch.tanh(s / c), -1)
                         @ v.double())
    return out.to(q.dtype)


def _no_divide(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap, lambda s, c: torch.softmax(c * torch.tanh(s), -1)
                         @ v.double())
    return out.to(q.dtype)


def _hard_clip(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap, lambda s, c: torch.softmax(s.clamp(-c, c), -1)
                         @ v.double())
    return out.to(q.dtype)


def _capped_before_scaling(q, k, v, cap):
    q, k, v = q.double(), k.double(), v.double()
    raw = q @ k.transpose(-2, -1)
    capped = cap * torch.tanh(raw / cap) / math.sqrt(q.shape[-1])
    return (torch.softmax(capped, -1) @ v).to(torch.float32)


def _unscaled(q, k, v, cap):
    q, k, v = q.double(), k.double(), v.double()
    capped = cap * torch.tanh((q @ k.transpose(-2, -1)) / cap)
    return (torch.softmax(capped, -1) @ v).to(torch.float32)


def _no_cap(q, k, v, cap):
    out = _dense_softcap(q, k, v, cap, lambda s, c: torch.softmax(s, -1) @ v.double())
    return out.to(q.dtype)


SOFTCAP_ATTENTION = Exercise(
    id="softcap_attention",
    chapter=CHAPTER,
    extension=_EagerFlexCalls(),
    title="Gemma 2 soft-capping: a score_mod",
    signature="softcap_attention(q, k, v (B, H, L, E), cap float) -> (B, H, L, E)",
    params=("q", "k", "v", "cap"),
    cases=_softcap_cases,
    oracle=_softcap_oracle,
    solution=softcap_attention,
    tolerances=TOLERANCES,
    hints=(
        "A score_mod receives each scaled score (QKᵀ/√E, one entry) and returns the new score, "
        "before the softmax. Soft-capping squashes it smoothly into (-cap, cap).",
        "The squashing function is tanh, which maps into (-1, 1): divide by cap first, then "
        "multiply back by cap, so that small scores stay almost unchanged.",
        "def softcap(score, b, h, q_idx, kv_idx): return cap * torch.tanh(score / cap); "
        "return flex_attention(q, k, v, score_mod=softcap)",
    ),
    mistakes=(
        Mistake("cap_after_softmax", "You capped the attention weights after the softmax: the "
                "rows no longer sum to 1, and the large scores were never capped. Soft-capping "
                "acts on the scores, before the softmax: that is what a score_mod is for.",
                _cap_after_softmax),
        Mistake("no_rescale", "You returned tanh(score / cap) without multiplying back by cap: "
                "every score is squeezed into (-1, 1), so the weights are nearly uniform. "
                "Return cap * tanh(score / cap).", _no_rescale),
        Mistake("tanh_of_raw_score", "You computed cap * tanh(score): the score must be divided "
                "by cap inside the tanh, cap * tanh(score / cap), so that small scores pass "
                "unchanged.", _no_divide),
        Mistake("hard_clip", "You clipped the scores to [-cap, cap] (clamp): soft-capping is "
                "smooth, cap * tanh(score / cap), and changes large scores gradually.",
                _hard_clip),
        Mistake("no_cap", "Your output is plain attention: the scores were not capped. Pass "
                "score_mod= to flex_attention with a function returning cap * tanh(score / cap).",
                _no_cap),
        Mistake("capped_before_scaling", "You capped the raw scores q · k and divided by √E "
                "afterwards. The cap applies to the scaled score QKᵀ/√E (what a score_mod "
                "receives): scale first, then cap * tanh(score / cap).", _capped_before_scaling),
        Mistake("no_scaling", "Your scores are not divided by √E (E = q.shape[-1]) before the "
                "cap. Soft-capping acts on the scaled scores QKᵀ/√E: flex_attention scales them "
                "for you (leave scale= at its default).", _unscaled),
    ),
)
