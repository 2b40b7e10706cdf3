"""Capstone building blocks: data generators, the tiny transformer, head probes."""

from __future__ import annotations

import torch

from course_lib.chapters.ch12_capstone import exercises as ch12_capstone
from course_lib.chapters.ch12_capstone import probes, tasks
from course_lib.chapters.ch12_capstone.model import TinyTransformer, sinusoidal_positions

# ------------------------------------------------------------------------------------ tasks


def test_negation_labels_follow_verb_xor_negator() -> None:
    batch = tasks.negation_batch(300, torch.Generator().manual_seed(0))
    neg_ids = {tasks.NEGATION_INDEX[w] for w in tasks.NEGATORS}
    bad_ids = {tasks.NEGATION_INDEX[w] for w in tasks.NEGATIVE_VERBS}
    seen = set()
    for i in range(300):
        ids = batch.tokens[i].tolist()
        assert ids[0] == tasks.NEGATION_INDEX[tasks.CLS]
        negated = any(t in neg_ids for t in ids)
        negative = any(t in bad_ids for t in ids)
        assert int(batch.labels[i]) == int(negated != negative)
        # the deciding words are exactly the verb and the negator
        decided = {tasks.NEGATION_VOCAB[ids[j]] for j in batch.deciding[i].nonzero().flatten()}
        assert len(decided) == 1 + negated
        seen.add((negated, negative))
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


def test_negation_from_words_matches_the_rule() -> None:
    b = tasks.negation_from_words(["i do not like this song", "they never hate that game",
                                   "we love the film"])
    assert b.labels.tolist() == [1, 0, 0]
    assert b.words(0) == ["<cls>", "i", "do", "not", "like", "this", "song"]
    assert b.deciding[0].nonzero().flatten().tolist() == [3, 4]


def test_induction_batch_repeats_the_block_and_scores_only_the_repeat() -> None:
    b = tasks.induction_batch(64, 16, 24, torch.Generator().manual_seed(0), min_period=2)
    assert b.period.min() >= 2 and b.period.max() <= 8
    for i in range(64):
        p, s, x = int(b.period[i]), int(b.start[i]), b.tokens[i]
        assert len(set(x[: s + p].tolist())) == s + p          # filler and block distinct
        assert torch.equal(x[s + p:], x[s: s + p])             # the repeat
        scored = (b.targets[i] != -100).nonzero().flatten()
        assert scored.tolist() == list(range(s + p, 15))
        assert torch.equal(b.targets[i, scored], x[scored + 1])
        # the next token equals the one after the earlier occurrence: what induction copies
        assert torch.equal(b.targets[i, scored], x[scored - p + 1])


# ------------------------------------------------------------------------------------ model


def test_sinusoidal_positions_formula() -> None:
    p = sinusoidal_positions(10, 8)
    t, i = 7, 2
    assert torch.isclose(p[t, 2 * i], torch.sin(torch.tensor(t / 10000 ** (2 * i / 8))))
    assert torch.isclose(p[t, 2 * i + 1], torch.cos(torch.tensor(t / 10000 ** (2 * i / 8))))


def test_without_positions_the_classifier_is_order_blind() -> None:
    torch.manual_seed(0)
    tokens = tasks.negation_from_words(["i do not like this song"]).tokens
    perm = torch.tensor([0, 6, 5, 4, 3, 2, 1, 7, 8, 9])      # keep <cls> first and the padding
    blind = TinyTransformer(len(tasks.NEGATION_VOCAB), head="cls", positional="none").eval()
    learned = TinyTransformer(len(tasks.NEGATION_VOCAB), head="cls").eval()
    with torch.no_grad():
        learned.pos.normal_()
        assert torch.allclose(blind(tokens), blind(tokens[:, perm]), atol=1e-6)
        assert not torch.allclose(learned(tokens), learned(tokens[:, perm]), atol=1e-3)


def test_lm_model_is_causal_and_returns_one_map_per_layer() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(24, 32, 2, 2, max_len=16, mlp=False).eval()
    x = torch.randint(24, (3, 16))
    y = x.clone()
    y[:, 10:] = (y[:, 10:] + 1) % 24                         # change only the future
    with torch.no_grad():
        lx, maps = model(x, return_attention=True)
        ly = model(y)
    assert torch.allclose(lx[:, :10], ly[:, :10], atol=1e-6)
    assert len(maps) == 2 and maps[0].shape == (3, 2, 16, 16)
    assert torch.all(maps[1].triu(1) == 0)
    assert torch.allclose(maps[0].sum(-1), torch.ones(3, 2, 16))


def test_classifier_gives_padding_no_weight() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(len(tasks.NEGATION_VOCAB), head="cls").eval()
    b = tasks.negation_from_words(["we love the film"])          # 5 real tokens, 5 pads
    with torch.no_grad():
        _, (maps,) = model(b.tokens, return_attention=True)
    assert torch.all(maps[..., 5:] == 0)


# ----------------------------------------------------------------------------------- probes


def test_scores_of_ideal_heads() -> None:
    n, p = 12, 6
    prev = torch.zeros(n, n)
    prev[0, 0] = 1
    prev[torch.arange(1, n), torch.arange(n - 1)] = 1
    induction = torch.eye(n)
    induction[torch.arange(p, n)] = 0
    induction[torch.arange(p, n), torch.arange(1, n - p + 1)] = 1
    assert probes.previous_token_score(prev) == 1
    assert probes.induction_score(induction, p) == 1
    assert probes.induction_score(prev, p) == 0
    assert probes.duplicate_token_score(induction, p) == 0


def test_induction_score_matches_the_exercise_solution_and_batches() -> None:
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(3, 2, 10, 10, generator=g).tril()
    maps = maps / maps.sum(-1, keepdim=True)
    got = probes.induction_score(maps, 4)
    assert got.shape == (3, 2)
    for b in range(3):
        for h in range(2):
            want = ch12_capstone.induction_score(maps[b, h], 4)
            assert abs(got[b, h].item() - want) < 1e-6


def test_attention_mass() -> None:
    row = torch.tensor([0.1, 0.2, 0.3, 0.4])
    keys = torch.tensor([False, True, False, True])
    assert torch.isclose(probes.attention_mass(row, keys), torch.tensor(0.6))


def test_configs_choose_the_positional_encoding() -> None:
    from course_lib.chapters.ch12_capstone import train as capstone_train
    from course_lib.chapters.ch12_capstone.model import sinusoidal_positions
    cfg = capstone_train.InductionConfig(positional="sinusoidal")
    model = capstone_train.induction_model(cfg)
    assert model.positional == "sinusoidal" and not isinstance(model.pos, torch.nn.Parameter)
    assert torch.equal(model.pos, sinusoidal_positions(cfg.seq_len, cfg.d_model))
    assert capstone_train.NegationConfig().positional == "learned"
    assert isinstance(capstone_train.induction_model().pos, torch.nn.Parameter)
