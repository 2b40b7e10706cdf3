"""Chapter 9's committed GPU run and the functions that render it (no GPU, no Triton needed)."""

from __future__ import annotations

import pytest

from course_lib.chapters.ch09_flash_triton import gpu


def _data():
    rows = []
    for impl, ms in (("triton", 2.0), ("flash", 3.0), ("cudnn", 1.5), ("efficient", 6.0)):
        rows.append({"impl": impl, "L": 1024, "E": 64, "causal": False, "backward": False,
                     "flops": 3e12, "ms": ms, "tflops": 3e12 / (ms * 1e-3) / 1e12})
    rows.append({"impl": "efficient", "L": 2048, "E": 64, "causal": False, "backward": False,
                 "flops": 1.2e13, "error": "RuntimeError: no kernel"})
    return {"rows": rows, "matmul_bf16": {"gflops_median": 700e3}}


def test_shares_tables_and_series_from_known_numbers():
    data = _data()
    assert gpu.ms(data, "cudnn", 1024, 64) == 1.5 and gpu.ms(data, "efficient", 2048, 64) is None
    assert gpu.share_of_best_torch(data, 1024, 64) == pytest.approx(0.75)     # 1.5 / 2.0
    assert gpu.matmul_tflops(data) == 700.0
    series = gpu.rate_series(data, 64)
    assert series["triton"] == [(1024, pytest.approx(1500.0))] and series["efficient"] == [
        (1024, pytest.approx(500.0))]                                          # 2048 failed
    table = gpu.timing_table(data, 1024)
    assert "| 64 | full | forward | 1500 | 1000 | 2000 | 500 | 0.75 |" in table


def test_committed_run_covers_every_point_and_records_the_machine():
    data = gpu.load_gpu_results()
    m = data["machine"]
    assert m["device_name"] and m["driver_version"] and m["triton_version"]
    assert m["torch_version"] and m["cudnn_version"] and m["multiprocessors"] > 0
    assert len(gpu.points(data)) == 5 * 2 * 2 * 2        # L × E × mask × pass
    for point in gpu.points(data):
        for impl in gpu.IMPLS:
            assert gpu.ms(data, impl, *point) > 0, (impl, point)
    assert {c["E"] for c in data["checks"]} == {64, 128}
    for check in data["checks"]:
        assert set(check["errors"]) == {"triton", *gpu.TORCH_BACKENDS}
    assert set(data["best_config"]) == set(data["best_bwd_config"]) == {"64", "128"}
    assert gpu.matmul_tflops(data) > 0
    rows = gpu.check_rows(data)
    assert len(rows) == 4 * 4 and rows[0]["path"] == gpu.LABELS["triton"]
    assert {r["kernel"] for r in gpu.tuning_rows(data)} == {
        "forward", "backward (timed with the forward)"}
