"""Chapter notebooks store check outputs and nbval compares them: these texts are frozen.

Changing a case name, adding a case or rewording a headline breaks every stored notebook output
that shows it; if you must, re-execute the chapter notebooks in the same commit.
"""

from __future__ import annotations

import pytest

from course_lib import exercises
from course_lib.toolkit.checking._registry import registry

PASS_MESSAGES = {
    "retrieve": "All 4 cases passed: basic; float64, odd sizes; one matching key; many keys.",
    "scaled_scores": "All 6 cases passed: unbatched, L != S; batched heads; float64, odd sizes; "
                     "keys as wide as they are many; float16; large magnitudes.",
    "softmax": "All 8 cases passed: rows; dim=0, float64; 3-D, dim=1; a vector; -inf entries; "
               "large magnitudes; rows on different scales; float16.",
    "self_attention": "All 4 cases passed: batched; one sequence, float64; wider values; "
                      "large scores.",
    "split_heads": "All 4 cases passed: 3 heads of width 4; float64, 2 heads of width 3; "
                   "4 heads of width 2; one head.",
    "merge_heads": "All 4 cases passed: 3 heads of width 4; float64, 2 heads of width 3; "
                   "4 heads of width 2; one head.",
    "multi_head_attention": "All 4 cases passed: 3 heads; float64, 2 heads; 4 heads of width 4; "
                            "one head.",
    "causal_mask": "All 4 cases passed: n=5; n=1; n=2; n=8.",
    "padding_mask": "All 4 cases passed: right padding; left padding; pad id 5; no padding.",
    "masked_attention": "All 4 cases passed: causal; padding, L != S; fully masked rows; "
                        "nothing masked.",
    "attention_flops": "All 4 cases passed: n=8, d=64; n=1024, d=64; n=7, d=3; n=1, d=1.",
    "attention_memory": "All 4 cases passed: n=1024, defaults; n=512, 8 heads; "
                        "n=100, 12 heads, 2 bytes; n=7, 3 heads, 8 bytes.",
    "layer_flops": "All 4 cases passed: n=1000, d_model=512; n=8, d_model=64; n=3, d_model=5; "
                   "n=4096, d_model=768.",
    "online_softmax_stats": "All 8 cases passed: rising maxima; max in the first block; "
                            "one block; float64, many blocks; large magnitudes; -inf entries; "
                            "all entries negative; only -inf.",
    "flash_attention": "All 8 cases passed: L not a multiple of the block; batched heads; "
                       "float64, block 7; large scores; block larger than L; "
                       "L=256, default block; few queries, many keys; every score far below 0.",
    "flash_backward": "All 6 cases passed: L != S, block 4; causal, batched heads; "
                      "float64, block 7; float64, causal, block 5; large scores; "
                      "L=256, causal, default block.",
    "decode_step": "All 5 cases passed: one new token; a chunk of 3; float64, long cache; "
                   "empty cache; x wider than a head.",
    "repeat_kv": "All 4 cases passed: 2 kv heads, 4 query heads each; float64, batched; "
                 "MQA: 1 kv head; n_rep=1.",
    "sliding_window_mask": "All 4 cases passed: n=6, window=3; n=5, window=1; n=8, window=4; "
                           "n=4, window=10.",
    "kv_cache_bytes": "All 4 cases passed: GQA, 8 kv heads, float16; MQA, float32; "
                      "GQA, bfloat16; MHA, float64.",
    "mla_absorbed_step": "All 4 cases passed: one new token; a chunk of 3; float64, long cache; "
                         "value width != key width.",
    "causal_block": "All 4 cases passed: B=2, L=5, D=8, H=2; B=1, L=7, D=12, H=3; "
                    "B=2, L=6, D=8, H=4, float64; B=3, L=1, D=4, H=1.",
    "merge_partials": "All 4 cases passed: two blocks of keys; float32, one block dominates; "
                      "huge scores; empty rows.",
    "ring_step": "All 6 cases passed: step 0: the diagonal block; an earlier block; a future "
                 "block; wrapped round; last step; diagonal again.",
}


@pytest.fixture(autouse=True)
def _progress_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_LIB_PROGRESS", str(tmp_path / "progress.json"))
    for ex in registry().values():   # the course's own solutions live in course_lib
        monkeypatch.setattr(ex, "allowed_course_calls", ("course_lib",))


@pytest.mark.parametrize("exercise_id", sorted(PASS_MESSAGES))
def test_pass_and_not_attempted_texts_are_frozen(exercise_id):
    ex = exercises.get_exercise(exercise_id)
    passed = exercises.check(exercise_id, ex.solution)
    assert repr(passed) == f"✓ {exercise_id}: Correct!\n{PASS_MESSAGES[exercise_id]}"

    namespace: dict = {}
    params = ", ".join(ex.params)
    exec(f"def {ex.function_name}({params}):\n    ...\n", namespace)
    todo = exercises.check(exercise_id, namespace[ex.function_name])
    assert repr(todo) == (
        f"○ {exercise_id}: Not attempted yet.\nReplace the `...` in `{ex.function_name}` with "
        f"your code, then run the check again. Stuck? exercises.hint(\"{exercise_id}\") gives "
        "a first hint.")
    assert todo._repr_html_() == (
        '<div class="course-lib-check course-lib-check-not_attempted" style="border-left:6px '
        'solid #6b7280;background:#f1f3f4;color:#26292e;padding:0.5em 0.8em;margin:0.3em 0;'
        'border-radius:4px;font-family:system-ui,sans-serif;font-size:0.92em;"><strong>○ '
        f'{exercise_id}: Not attempted yet.</strong><div style="white-space:pre-wrap;'
        f'margin-top:0.25em;">Replace the `...` in `{ex.function_name}` with your code, then run '
        f'the check again. Stuck? exercises.hint(&quot;{exercise_id}&quot;) gives a first hint.'
        '</div></div>')
