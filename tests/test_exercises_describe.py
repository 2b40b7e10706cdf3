"""A failing case's description names its arguments' real values (issue 54, item 16)."""

from __future__ import annotations

from course_lib import exercises


def test_a_dtype_argument_is_described_by_its_name():
    """kv_cache_bytes with 2 bytes hard-coded fails on float32: the case says which dtype."""
    result = exercises.check("kv_cache_bytes", lambda t, L, h, kv, d, dt: 2 * L * kv * d * 2 * t,
                             record=False, seed=0)
    assert not result.passed and result.failed_case == "MQA, float32"
    assert "dtype=torch.float32" in result.message and "dtype=dtype" not in result.message
