"""The book's players (``Explorer.player_html``) for every reader (issue 45): a named slider that
speaks the frame's value, a frame image whose text alternative follows the frame shown, no
autoplay, and no animation under ``prefers-reduced-motion``. The browser test moves the sliders
of the built book and checks the alt follows there too."""

from __future__ import annotations

import json
import re

import matplotlib

matplotlib.use("Agg")

from course_lib.toolkit.explorer import Control, Explorer, figure_summary


def _draw(fig, scale=1.0, mode="a"):
    ax = fig.subplots()
    ax.bar(["low", "mid", "high"], [1.0, 2.0 * scale, 3.0 / scale])
    ax.set_title(f"weights at $s = {scale:g}$")
    ax.set_xlabel("token")
    ax.set_ylabel("weight")


def _explorer(**kw) -> Explorer:
    return Explorer(draw=_draw, controls={"scale": Control("scale s", (0.5, 1.0, 2.0)),
                                          "mode": Control("mode", ("a", "b"))},
                    animate="scale", figsize=(3, 2), **kw)


def _alts(html: str) -> list[str]:
    return json.loads(re.search(r"var alts = (\[.*?\]), values", html, re.S).group(1))


def test_the_frame_alt_follows_the_frame_and_says_what_it_shows():
    html = _explorer().player_html()
    alts = _alts(html)
    assert len(alts) == 3 and len(set(alts)) == 3
    assert alts[0].startswith("scale s = 0.5. weights at s = 0.5: x token, y weight")
    assert "tallest bar high (6)" in alts[0] and "tallest bar mid (4)" in alts[2]
    # the image carries the first frame's alt in the HTML itself (before any script runs)
    img = re.search(r'<img id="_anim_img\w+" alt="([^"]+)">', html)
    assert img and img.group(1) == alts[0]
    assert not any(re.search(r"\.(png|jpe?g|svg)\b|_images/", a) for a in alts)


def test_describe_gives_the_alt_and_the_slider_is_named():
    html = _explorer(describe=lambda p: f"the middle bar is {2 * p['scale']:g} high").player_html()
    assert _alts(html) == [f"scale s = {s:g}. the middle bar is {2 * s:g} high"
                           for s in (0.5, 1.0, 2.0)]
    slider = re.search(r'<input id="_anim_slider\w+" type="range" aria-label="([^"]+)"', html)
    assert slider and slider.group(1) == "frame: scale s"
    values = json.loads(re.search(r"values = (\[.*?\]);", html).group(1))
    assert values == ["scale s = 0.5", "scale s = 1", "scale s = 2"]
    assert 'setAttribute("aria-valuetext"' in html and 'setAttribute("alt"' in html


def test_no_autoplay_and_reduced_motion_hides_the_animating_buttons():
    html = _explorer().player_html()
    # matplotlib's player only starts on a click (the instantiation never calls play)
    setup = html[html.index("new Animation("):]
    assert "play_animation()" not in setup.split("</script>")[0]
    css = re.search(r"@media \(prefers-reduced-motion: reduce\) \{(.*?)\n\}", html, re.S).group(1)
    for name in ("Play", "Play backwards", "Pause", "Decrease speed", "Increase speed"):
        assert f'button[aria-label="{name}"]' in css
    assert ".anim-state" in css and "display: none" in css
    for name in ("First frame", "Previous frame", "Next frame", "Last frame"):
        assert f'aria-label="{name}"' in html and f'button[aria-label="{name}"]' not in css


def test_figure_summary_reads_the_figures_own_text():
    import matplotlib.pyplot as plt

    fig = plt.figure()
    _draw(fig, 2.0)
    fig.suptitle("toy")
    assert figure_summary(fig) == ("toy; weights at s = 2: x token, y weight, "
                                   "tallest bar mid (4)")
    plt.close(fig)
