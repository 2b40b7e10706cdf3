"""Chapter 10's attention-sink experiment: the echo task follows its rule, decoding through a
cache equals full attention under the cache's mask, the BOS mass is what it says, and the trained
behaviour holds on seeds other than the chapter's (seed 0)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.chapters.ch10_inference import helpers, sinks

CFG = sinks.EchoConfig()


def _batch(n: int = 64, seed: int = 3) -> torch.Tensor:
    return sinks.echo_batch(n, CFG, torch.Generator().manual_seed(seed))


def test_echo_batch_follows_the_rule() -> None:
    x, C = _batch(512), CFG.symbols
    assert x.shape == (512, CFG.seq_len) and (x[:, 0] == sinks.BOS).all()
    assert ((x[:, 1:] >= 1) & (x[:, 1:] <= 2 * C)).all() and (x[:, 1] <= C).all()
    echo = x[:, 2:-1] > C                                   # an echo at t = 2 .. L-2
    want = 1 + (x[:, 1:-2] - 1) % C                         # the plain symbol before it
    assert echo.any() and torch.equal(x[:, 3:][echo], want[echo])
    assert (x[:, 3:][echo] <= C).all()                      # the token after an echo is plain
    rate = (x[:, 2:] > C).float().mean().item()             # fewer than echo_rate: a token
    assert 0.6 * CFG.echo_rate < rate < CFG.echo_rate       # after an echo is never one
    assert torch.equal(sinks.after_echo(x, CFG), x[:, :-1] > C)


def test_logits_is_the_differentiable_forward() -> None:
    model = helpers.TinyGPT(vocab=CFG.vocab, dim=32, heads=2, layers=1, max_len=64, rope=True)
    x = _batch(4)
    out = model.logits(x)
    assert out.requires_grad and not model(x).requires_grad
    assert torch.equal(out.detach(), model(x))


@pytest.mark.parametrize(("window", "n_sinks"), [(None, 0), (8, 0), (8, 1), (5, 3), (1, 1)])
@pytest.mark.parametrize("rope", [True, False])
def test_decoding_through_the_cache_is_attention_under_its_mask(window, n_sinks, rope) -> None:
    model = helpers.TinyGPT(vocab=CFG.vocab, dim=32, heads=2, layers=2, max_len=64, rope=rope)
    x = _batch(3)[:, :40]
    got = sinks.decode_logits(model, x, window, n_sinks)
    i, j = torch.arange(40)[:, None], torch.arange(40)[None, :]
    mask = j <= i
    if window is not None:
        mask &= (j > i - window) | (j < n_sinks)

    def masked(q, k, v, is_causal=False, **kw):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    want = model(x, masked)
    assert got.shape == want.shape == (3, 40, CFG.vocab)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_first_token_mass_of_uniform_attention() -> None:
    """Zero query/key weights: every query spreads evenly, so query t gives 1 / (t + 1) to BOS."""
    model = helpers.TinyGPT(vocab=CFG.vocab, dim=32, heads=2, layers=1, max_len=64, rope=True)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[:64].zero_()
        if model.blocks[0].attn.qkv.bias is not None:
            model.blocks[0].attn.qkv.bias[:64].zero_()
    x = _batch(8)
    mass = sinks.first_token_mass(model, x, CFG, first=5)
    t = torch.arange(CFG.seq_len - 1)[5:].expand(8, -1)
    echo = sinks.after_echo(x, CFG)[:, 5:]
    for part, sel in (("echo", echo), ("other", ~echo)):
        want = (1.0 / (t[sel] + 1)).mean()
        assert mass[part].shape == (2,)
        torch.testing.assert_close(mass[part], want.expand(2), atol=1e-6, rtol=1e-5)


def test_metrics_score_only_the_positions_asked() -> None:
    model = helpers.TinyGPT(vocab=CFG.vocab, dim=32, heads=1, layers=1, max_len=64, rope=True)
    x = _batch(4)
    m = sinks.echo_metrics(model, x, CFG, first=10)
    logits, target = model(x[:, :-1])[:, 10:], x[:, 1:][:, 10:]
    echo = sinks.after_echo(x, CFG)[:, 10:]
    ce = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none")
    ce = ce.view(target.shape)
    assert math.isclose(m["echo_loss"], ce[echo].mean().item(), rel_tol=1e-5)
    assert math.isclose(m["other_loss"], ce[~echo].mean().item(), rel_tol=1e-5)
    acc = (logits.argmax(-1)[echo] == target[echo]).float().mean().item()
    assert math.isclose(m["echo_accuracy"], acc, rel_tol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_trained_head_parks_on_bos_and_needs_the_sink(seed: int) -> None:
    T, W = sinks.THRESHOLDS, 8
    model, hist = sinks.train_echo_model(seed, CFG)
    assert len(hist.loss) == CFG.steps
    x = sinks.echo_batch(256, CFG, torch.Generator().manual_seed(1000 + seed))
    mass = sinks.first_token_mass(model, x, CFG, first=W)
    full, evicted, kept = (sinks.echo_metrics(model, x, CFG, w, n, first=W)
                           for w, n in ((None, 0), (W, 0), (W, 1)))
    assert full["echo_accuracy"] >= T["full_echo_accuracy"], full
    assert mass["other"].item() >= T["sink_mass"], mass
    assert mass["echo"].item() <= T["echo_mass"], mass
    assert evicted["other_loss"] - full["other_loss"] >= T["evicted_extra_loss"], evicted
    assert evicted["other_loss"] > math.log(CFG.vocab), evicted
    assert abs(kept["other_loss"] - full["other_loss"]) <= T["restored_extra_loss"], kept
    for r in (evicted, kept):
        assert abs(r["echo_accuracy"] - full["echo_accuracy"]) <= T["echo_accuracy_change"], r


def test_training_progress_bar_counts_steps_and_changes_nothing(capsys) -> None:
    cfg = sinks.EchoConfig(steps=3)
    quiet, q_hist = sinks.train_echo_model(0, cfg)
    assert capsys.readouterr().err == ""
    shown, s_hist = sinks.train_echo_model(0, cfg, progress=True)
    err = capsys.readouterr().err
    assert "training" in err and "3/3" in err                  # the bar reached the last step
    assert q_hist.loss == s_hist.loss                          # same steps, same batches
    assert all(torch.equal(a, b) for a, b in zip(quiet.state_dict().values(),
                                                 shown.state_dict().values(), strict=True))
