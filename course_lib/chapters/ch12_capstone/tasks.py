"""Synthetic data for the capstone, generated on the fly from a ``torch.Generator`` (no downloads).

Two tasks:

- **negation**: templated sentences such as ``<cls> i really do not like this song`` whose label
  (``like`` / ``dislike``) depends on the feeling verb *and* on whether a negator precedes it;
- **induction**: random tokens followed by a block of tokens and an exact repeat of that block;
  inside the repeat every next token can be read off the first copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# ----------------------------------------------------------------------------- negation task

PAD, CLS = "<pad>", "<cls>"
SUBJECTS = ["i", "we", "they", "you"]
AUXILIARY = "do"  # "i do not like ..."
ADVERBS = ["really", "truly", "honestly", "still"]
NEGATORS = ["not", "never"]
POSITIVE_VERBS = ["like", "love", "enjoy", "adore"]
NEGATIVE_VERBS = ["hate", "dislike", "loathe", "resent"]
DETERMINERS = ["this", "that", "the", "every"]
OBJECTS = ["film", "song", "book", "game", "city", "meal"]
TAILS = ["today", "now", "again", "here"]
LABELS = ["like", "dislike"]  # class 0 = the speaker likes it, class 1 = dislikes it

NEGATION_VOCAB: list[str] = [PAD, CLS] + sorted(
    set(SUBJECTS) | {AUXILIARY} | set(ADVERBS) | set(NEGATORS)
    | set(POSITIVE_VERBS) | set(NEGATIVE_VERBS) | set(DETERMINERS) | set(OBJECTS) | set(TAILS)
)
NEGATION_INDEX = {w: i for i, w in enumerate(NEGATION_VOCAB)}
NEGATION_MAX_LEN = 10  # <cls> subj adv aux neg verb det obj tail -> 9, one spare


@dataclass
class NegationBatch:
    """``tokens (B, N)`` ids (0 = pad), ``labels (B,)`` in {0: like, 1: dislike},
    ``deciding (B, N)`` bool marking the words that decide the label (verb and negator)."""

    tokens: torch.Tensor
    labels: torch.Tensor
    deciding: torch.Tensor

    def words(self, i: int) -> list[str]:
        """The words of sentence ``i`` without padding."""
        return [NEGATION_VOCAB[t] for t in self.tokens[i].tolist() if t != 0]


N_UNIFORMS = 11  # random numbers per sentence


def _sentence_from_uniforms(u: list[float]) -> tuple[list[str], int, list[int]]:
    """Build one sentence from 11 uniforms in [0, 1) (all randomness drawn up front, one call)."""

    def pick(options: list[str], x: float) -> str:
        return options[min(int(x * len(options)), len(options) - 1)]

    subj = pick(SUBJECTS, u[0])
    words, deciding = [CLS, subj], []
    if u[1] < 0.5:
        words.append(pick(ADVERBS, u[2]))
    negated = u[3] < 0.5
    if negated:
        neg = pick(NEGATORS, u[4])
        if neg == "not":
            words.append(AUXILIARY)
        deciding.append(len(words))
        words.append(neg)
    negative = u[5] < 0.5
    deciding.append(len(words))
    words.append(pick(NEGATIVE_VERBS if negative else POSITIVE_VERBS, u[6]))
    words += [pick(DETERMINERS, u[7]), pick(OBJECTS, u[8])]
    if u[9] < 0.5:
        words.append(pick(TAILS, u[10]))
    return words, int(negative != negated), deciding


def negation_sentence(g: torch.Generator) -> tuple[list[str], int, list[int]]:
    """One sentence: ``(words, label, positions of the deciding words)``.

    ``<cls> subject [adverb] [do/does not | never] verb determiner object [tail]``;
    label = 1 (dislike) iff (the verb is negative) XOR (a negator is present).
    """
    return _sentence_from_uniforms(torch.rand(N_UNIFORMS, generator=g).tolist())


def encode(words: list[str], length: int = NEGATION_MAX_LEN) -> torch.Tensor:
    """Word list → ``(length,)`` ids, right-padded with 0."""
    ids = [NEGATION_INDEX[w] for w in words]
    return torch.tensor(ids + [0] * (length - len(ids)), dtype=torch.long)


def negation_batch(batch_size: int, g: torch.Generator) -> NegationBatch:
    """``batch_size`` fresh sentences (see :func:`negation_sentence`)."""
    tokens = torch.zeros(batch_size, NEGATION_MAX_LEN, dtype=torch.long)
    deciding = torch.zeros(batch_size, NEGATION_MAX_LEN, dtype=torch.bool)
    labels = torch.zeros(batch_size, dtype=torch.long)
    uniforms = torch.rand(batch_size, N_UNIFORMS, generator=g).tolist()
    for b in range(batch_size):
        words, label, pos = _sentence_from_uniforms(uniforms[b])
        tokens[b] = encode(words)
        deciding[b, pos] = True
        labels[b] = label
    return NegationBatch(tokens, labels, deciding)


def negation_from_words(sentences: list[str]) -> NegationBatch:
    """Encode hand-written sentences (``"i do not like this song"``; ``<cls>`` is prepended)."""
    rows, labels, deciding = [], [], []
    for s in sentences:
        words = [CLS] + s.split()
        neg = [i for i, w in enumerate(words) if w in NEGATORS]
        verb = [i for i, w in enumerate(words) if w in POSITIVE_VERBS + NEGATIVE_VERBS]
        if len(verb) != 1:
            raise ValueError(f"sentence {s!r} needs exactly one feeling verb")
        label = int((words[verb[0]] in NEGATIVE_VERBS) != bool(neg))
        rows.append(encode(words))
        labels.append(label)
        mask = torch.zeros(NEGATION_MAX_LEN, dtype=torch.bool)
        mask[neg + verb] = True
        deciding.append(mask)
    return NegationBatch(torch.stack(rows), torch.tensor(labels), torch.stack(deciding))


# ---------------------------------------------------------------------------- induction task


@dataclass
class InductionBatch:
    """``tokens (B, N)``; ``targets (B, N)`` = next token (``-100`` where unpredictable, ignored
    by the loss); ``period (B,)`` and ``start (B,)``: the repeated block is
    ``tokens[start : start + period]`` and it appears again right after itself."""

    tokens: torch.Tensor
    targets: torch.Tensor
    period: torch.Tensor
    start: torch.Tensor


def induction_batch(batch_size: int, seq_len: int, vocab_size: int, g: torch.Generator,
                    min_period: int | None = None) -> InductionBatch:
    """Random filler, then a block of ``p`` distinct random tokens, then the same block again.

    ``p`` is drawn per sequence from ``[min_period, seq_len // 2]`` (default min ``seq_len // 4``)
    so the distance to the earlier copy varies: a head cannot solve the task by position alone.
    All tokens of one sequence are distinct outside the repeat, so the next token of position
    ``i`` in the repeat is exactly ``tokens[i - p + 1]``. Needs ``vocab_size >= seq_len``.
    """
    if vocab_size < seq_len:
        raise ValueError(f"vocab_size={vocab_size} must be >= seq_len={seq_len}")
    lo, hi = (min_period or seq_len // 4), seq_len // 2
    period = torch.randint(lo, hi + 1, (batch_size,), generator=g)              # (B,)
    start = seq_len - 2 * period                                                # (B,)
    fresh = torch.rand(batch_size, vocab_size, generator=g).argsort(-1)[:, :seq_len]  # distinct
    i = torch.arange(seq_len)[None, :]                                          # (1, N)
    in_repeat = i >= (start + period)[:, None]                                  # (B, N)
    tokens = fresh.gather(1, torch.where(in_repeat, i - period[:, None], i))    # copy the block
    # predictable: the next token of every position in the second copy except the last one
    targets = torch.full_like(tokens, -100)
    keep = in_repeat[:, :-1]
    targets[:, :-1] = torch.where(keep, tokens[:, 1:], targets[:, :-1])
    return InductionBatch(tokens, targets, period, start)


def repeated_tokens(period: int, vocab_size: int, g: torch.Generator,
                    repeats: int = 2) -> torch.Tensor:
    """``(repeats · period,)``: ``period`` distinct random tokens, repeated (period ``period``)."""
    block = torch.randperm(vocab_size, generator=g)[:period]
    return block.repeat(repeats)


def as_letters(tokens: torch.Tensor) -> list[str]:
    """Token ids ``(N,)`` of the induction task as letters (0 → A, 1 → B, ...), for plot labels."""
    return [chr(65 + t) if t < 26 else f"#{t}" for t in tokens.tolist()]
