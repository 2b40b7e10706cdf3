"""The capstone explorer draws exactly the model's attention map, headlessly."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_lib.chapters.ch12_capstone import explorer as cap_widgets
from course_lib.chapters.ch12_capstone import probes, train


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return train.induction_model().eval()  # untrained is enough: we test the drawing


def test_examples_are_filler_block_repeat(model) -> None:
    examples = cap_widgets.make_examples(model, periods=(8, 5))
    for e in examples:
        n, p = len(e.tokens), e.period
        assert torch.equal(e.tokens[n - p:], e.tokens[n - 2 * p: n - p])
        assert len(set(e.tokens[: n - p].tolist())) == n - p
        assert e.maps.shape == (2, 2, n, n)


def test_draw_shows_the_selected_map_and_its_scores(model) -> None:
    e = cap_widgets.make_examples(model, periods=(5,))[0]
    with torch.no_grad():
        _, maps = model(e.tokens[None], return_attention=True)
    fig = plt.figure()
    cap_widgets.draw(fig, e, layer=1, head=0)
    ax = fig.axes[0]
    shown = np.asarray(ax.images[0].get_array())
    np.testing.assert_allclose(shown, maps[1][0, 0].double().numpy(), atol=1e-6)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0] == chr(65 + int(e.tokens[0]))
    n, p = 16, 5
    ind = probes.induction_score(maps[1][0, 0][n - 2 * p:, n - 2 * p:], p).item()
    assert f"induction score {ind:.2f}" in ax.get_title()
    # the induction markers sit at (i - p + 1, i) for the queries of the repeat
    offsets = ax.collections[0].get_offsets()
    np.testing.assert_array_equal(offsets[:, 1] - offsets[:, 0], np.full(p, p - 1))
    plt.close(fig)


def test_explorer_controls_and_book_frames(model) -> None:
    ex = cap_widgets.head_explorer(model)
    frames = ex.player_frames()
    assert 1 < len(frames) <= 15
    assert len({(f["example"], f["head"]) for f in frames}) == len(frames)
    assert ex.defaults()["head"] == "layer 2, head 2"
    fig = ex.render(example=frames[0]["example"], head="layer 1, head 1")
    assert "layer 1, head 1" in fig.axes[0].get_title()
    plt.close(fig)
