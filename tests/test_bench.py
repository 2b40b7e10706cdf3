"""Unit tests of course_lib.bench: formulas, statistics, schema, writers, a tiny end-to-end sweep.

No assertion here depends on how fast the machine is.
"""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import pytest
import torch

from course_lib.toolkit import bench
from course_lib.toolkit.bench import report, timing
from course_lib.toolkit.bench.__main__ import _ints, build_parser, main
from course_lib.toolkit.bench.workloads import attention, implementations


def test_attention_flops_formula():
    # 4·B·H·n²·d: two matmuls QKᵀ and PV of 2·n·n·d each, per head
    assert bench.attention_flops(1, 1, 1, 1) == 4
    assert bench.attention_flops(2, 8, 1024, 64) == 4 * 2 * 8 * 1024**2 * 64
    assert bench.attention_flops(1, 8, 4096, 64, causal=True) == 2 * 8 * 4096**2 * 64
    assert bench.attention_flops(1, 1, 10, 4, backward=True) == int(3.5 * 4 * 100 * 4)
    assert bench.matmul_flops(3, 5, 7) == 2 * 3 * 5 * 7
    with pytest.raises(ValueError, match="n must be"):
        bench.attention_flops(1, 1, -3, 4)


def test_attention_flops_matches_torch_flop_counter():
    from torch.utils.flop_counter import FlopCounterMode

    from course_lib.attention.reference import scaled_dot_product_attention

    q = k = v = torch.randn(1, 2, 32, 8)
    with FlopCounterMode(display=False) as fc:  # counts the two matmuls of the textbook path
        scaled_dot_product_attention(q, k, v)
    assert fc.get_total_flops() == bench.attention_flops(1, 2, 32, 8)


def test_summarize_median_best_mean():
    s = bench.summarize([3.0, 1.0, 2.0, 10.0])
    assert s == {"median_s": 2.5, "best_s": 1.0, "mean_s": 4.0, "rounds": 4}
    assert bench.summarize([5.0, 1.0, 2.0])["median_s"] == 2.0
    with pytest.raises(ValueError):
        bench.summarize([])


def test_calls_per_sample():
    assert timing.calls_per_sample(0.001, 0.02) == 20
    assert timing.calls_per_sample(1.0, 0.02) == 1
    assert timing.calls_per_sample(0.0, 0.02) == 1


def test_interleaved_rounds_rotates_order_and_counts():
    calls: list[str] = []
    parts = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = bench.interleaved_rounds(parts, rounds=3, warmup=1, min_sample_s=0.0)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    # each time_call is one torch.utils.benchmark.Timer.timeit: 2 warm-up calls, then the timed
    # one; the first time_call of each participant picks the calls per sample
    assert calls[:9] == list("aaabbbccc")
    timed = calls[9:]
    assert timed[::3] == list("abc") + list("bca") + list("cab") and len(timed) == 27
    with pytest.raises(ValueError):
        bench.interleaved_rounds(parts, rounds=0)


def test_torch_impl_is_direct_sdpa_and_workloads_agree():
    impls = implementations()
    assert impls["torch"] is torch.nn.functional.scaled_dot_product_attention
    assert {"reference", "flash", "sdpa"} <= set(impls)
    outs = {i: attention(i, 1, 2, 40, 8, causal=True)() for i in impls}
    for name, out in outs.items():
        torch.testing.assert_close(out, outs["torch"], msg=name)
    out = attention("flash", 1, 2, 16, 8, backward=True)()
    assert out.requires_grad


def test_measure_peak_memory_grows_with_allocation():
    small = bench.measure_peak_memory("allocate", {"nbytes": 8 * 2**20})["peak_extra_bytes"]
    big = bench.measure_peak_memory("allocate", {"nbytes": 64 * 2**20})["peak_extra_bytes"]
    assert big > small + 40 * 2**20
    assert big >= 60 * 2**20  # the allocation itself is counted


def test_measure_peak_memory_many_isolates_points():
    res = bench.measure_peak_memory_many([("allocate", {"nbytes": 64 * 2**20}, None),
                                          ("allocate", {"nbytes": 4 * 2**20}, None)])
    # the second, smaller point must not inherit the first point's high-water mark
    assert res[0]["peak_extra_bytes"] >= 60 * 2**20
    assert res[1]["peak_extra_bytes"] < 16 * 2**20


def _fake_results() -> dict:
    def row(impl, n, causal, t, mem):
        return {"impl": impl, "n": n, "causal": causal, "backward": False,
                "flops": bench.attention_flops(1, 8, n, 64, causal), "median_s": t, "best_s": t,
                "mean_s": t, "rounds": 3, "times_s": [t, t, t],
                "gflops_median": bench.attention_flops(1, 8, n, 64, causal) / t / 1e9,
                "gflops_best": 1.0, "frac_matmul": 0.9, "peak_extra_bytes": mem}
    results = []
    for c in (False, True):
        results += [row("reference", 4096, c, 3.0, 2**31), row("flash", 4096, c, 1.5, 2**25),
                    row("sdpa", 4096, c, 1.02, 2**24), row("torch", 4096, c, 1.0, 2**24)]
    results.append({"impl": "reference", "n": 8192, "causal": False, "flops": 1,
                    "skipped": "naive path skipped"})
    meta = {"device": "cpu", "device_name": "x", "dtype": "float32", "torch_version": "2",
            "threads": 2, "cpu_model": "x", "batch": 1, "heads": 8, "d": 64, "rounds": 3,
            "ns": [4096, 8192], "impls": ["reference", "flash", "sdpa", "torch"],
            "flop_convention": bench.FLOP_CONVENTION, "backward": False,
            "matmul": {"size": 2048, "dtype": "float32", "gflops_median": 100.0,
                       "gflops_best": 110.0}}
    return {"schema": bench.SCHEMA, "meta": meta, "results": results}


def test_schema_validation_names_missing_piece():
    data = _fake_results()
    bench.validate(data)
    bad = copy.deepcopy(data)
    del bad["meta"]["threads"]
    with pytest.raises(ValueError, match="threads"):
        bench.validate(bad)
    bad = copy.deepcopy(data)
    del bad["results"][1]["median_s"]
    with pytest.raises(ValueError, match="median_s"):
        bench.validate(bad)
    with pytest.raises(ValueError, match="schema"):
        bench.validate({**data, "schema": "other"})


def test_json_round_trip_and_markdown(tmp_path):
    data = _fake_results()
    j, md = bench.write_report(data, tmp_path)
    assert j.name == "cpu-float32.json" and md.name == "cpu-float32.md"
    assert bench.load_results(j) == json.loads(json.dumps(data))
    text = md.read_text()
    assert "| 4096 | flash | 1500.00 | 1500.00 |" in text
    assert "| 8192 | reference | skipped |" in text
    assert "## Causal attention" in text and "## Full (non-causal) attention" in text
    assert "2048×2048 float32 matmul, 100.0 GFLOP/s median" in text


def test_check_targets_on_known_numbers():
    checks = {c["name"]: c for c in bench.check_targets(_fake_results())}
    assert checks["sdpa overhead vs torch (full)"]["measured"] == pytest.approx(1.02)
    assert checks["sdpa overhead vs torch (full)"]["passed"]
    assert checks["flash time / sdpa time (causal)"]["measured"] == pytest.approx(1.5 / 1.02)
    assert checks["flash memory / naive memory (full)"]["measured"] == pytest.approx(2**-6)
    slow = _fake_results()
    for r in slow["results"]:
        if r["impl"] == "flash":
            r["times_s"] = [3.0] * 3
    checks = {c["name"]: c for c in bench.check_targets(slow)}
    assert not checks["flash time / sdpa time (full)"]["passed"]


def test_result_stem():
    assert report.result_stem({"device": "cuda:0", "dtype": "bfloat16"}) == "cuda-bfloat16"
    assert report.result_stem({"device": "cpu", "dtype": "float32", "backward": True}) == \
        "cpu-float32-backward"


def test_cli_parsing():
    args = build_parser().parse_args(["--n", "256,512", "1024", "--causal", "yes", "--backward"])
    assert _ints(args.n) == [256, 512, 1024] and args.causal == "yes" and args.backward
    assert build_parser().parse_args([]).out == str(bench.RESULTS_DIR)
    assert build_parser().parse_args([]).memory == "fresh"
    assert build_parser().parse_args(["--memory", "batched"]).memory == "batched"


def test_progress_bar_is_tqdm_and_quiet_means_silent(capsys):
    bench.run_sweep([16], impls=["sdpa"], causal=[False], rounds=1, memory=False,
                    matmul_size=16, min_sample_s=0.0, progress=True)
    err = capsys.readouterr().err
    assert "bench: 100%" in err and "2/2" in err  # tqdm's line: sdpa and the matmul yardstick
    bench.run_sweep([16], impls=["sdpa"], causal=[False], rounds=1, memory=False,
                    matmul_size=16, min_sample_s=0.0, progress=False)
    assert capsys.readouterr().err == ""


def test_sweeps_restore_torch_threads():
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        data = bench.run_sweep([16], impls=["sdpa"], causal=[False], rounds=1, memory=False,
                               matmul_size=16, min_sample_s=0.0, threads=1, progress=False)
        assert data["meta"]["threads"] == 1 and torch.get_num_threads() == 2
        bench.quick_sweep({"sdpa": torch.nn.functional.scaled_dot_product_attention}, [16],
                          heads=1, d=4, repeats=1, min_total_s=0.0, threads=1, progress=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


def test_time_call_counts_timer_warmup_and_checks_its_arguments():
    calls: list[int] = []
    t = bench.time_call(lambda: calls.append(1), number=5)
    assert len(calls) == 2 + 5 and t > 0  # Timer.timeit: max(number // 100, 2) warm-up calls
    seconds, user, system = bench.time_call_split(lambda: None, clock="wall")
    assert seconds > 0 and user != user and system != system  # NaN: no split on the wall clock
    with pytest.raises(ValueError, match="clock"):
        bench.time_call(lambda: None, clock="gpu")
    with pytest.raises(ValueError, match="number"):
        bench.time_call(lambda: None, number=0)


def test_best_time_runs_at_least_repeats():
    calls: list[int] = []
    best, _, _ = bench.best_time(lambda: calls.append(1), repeats=4)
    assert len(calls) == 1 + 4 and best > 0  # one untimed call, then each run one timed call
    calls.clear()
    bench.best_time(lambda: calls.append(1), repeats=2, min_total_s=1e9, max_runs=7)
    assert len(calls) == 1 + 7                # quick calls: more runs, up to max_runs


def test_best_time_splits_the_best_run_as_all_runs_split(monkeypatch):
    """One run's user/system split is as coarse as the kernel's accounting tick (a 7 ms run read
    as 0 ms user, 7 ms system): the best run's seconds are split in the proportion of all runs."""
    ticks = iter([0.0, 0.010, 0.100, 0.107, 0.200, 0.212])         # runs of 10, 7 and 12 ms
    monkeypatch.setattr(timing, "_cpu_clock", lambda clock, device="cpu": lambda: next(ticks))
    usage = iter([SimpleNamespace(ru_utime=1.0, ru_stime=2.0),
                  SimpleNamespace(ru_utime=1.013, ru_stime=2.016)])   # 13 ms user, 16 ms system
    monkeypatch.setattr(timing.resource, "getrusage", lambda who: next(usage))
    best, user, system = timing.best_time(lambda: None, repeats=3, clock="cpu")
    assert best == pytest.approx(0.007)
    assert user == pytest.approx(0.007 * 13 / 29) and system == pytest.approx(0.007 * 16 / 29)
    monkeypatch.undo()
    best, user, system = timing.best_time(lambda: None, repeats=2)          # wall clock
    assert best >= 0 and math.isnan(user) and math.isnan(system)
    with pytest.raises(ValueError, match="clock"):
        timing.best_time(lambda: None, clock="gpu")


def test_tiny_sweep_end_to_end(tmp_path, capsys):
    rc = main(["--n", "32", "64", "--rounds", "2", "--out", str(tmp_path), "--min-sample-s",
               "0", "--impls", "reference", "flash", "sdpa", "torch", "--matmul-size", "64",
               "--no-memory", "--quiet"])
    assert rc == 0
    data = bench.load_results(tmp_path / "cpu-float32.json")
    assert len(data["results"]) == 2 * 2 * 4  # causal × n × impl
    for r in data["results"]:
        assert r["rounds"] == 2 and r["best_s"] <= r["median_s"]
        assert r["gflops_median"] == pytest.approx(r["flops"] / r["median_s"] / 1e9)
    m = data["meta"]
    assert m["threads"] == torch.get_num_threads() and m["torch_version"] == torch.__version__
    assert m["matmul"]["samples"] == 2 * 2 * 2  # interleaved into every round of every point
    assert (tmp_path / "cpu-float32.md").exists()
    assert "wrote" in capsys.readouterr().out


def test_sweep_with_batched_memory_and_naive_cap():
    data = bench.run_sweep([64, 128], impls=["reference", "flash"], causal=[False], rounds=1,
                           memory="batched", naive_max_n=64, matmul_size=64, min_sample_s=0.0,
                           progress=False)
    ref = bench.rows(data, "reference", timed_only=False)
    assert [("skipped" in r) for r in ref] == [False, True]
    assert all(r["peak_extra_bytes"] > 0 for r in bench.rows(data))
    assert "one fresh subprocess" in data["meta"]["memory_method"]


def test_chapter_tables_from_known_numbers():
    data = _fake_results()
    mem = bench.memory_table(data)
    assert "| 4096 | 2048.0 | 32.0 | 16.0 | 64 |" in mem  # 2 GiB vs 32 MiB: ratio 64
    timing = bench.timing_table(data)
    assert "| 4096 | no | 3000 | 1500 | 1020 | 1000 | 1.47 | 1.020 | 0.90 |" in timing
    checks = bench.checks_table(data)
    assert checks.count("\n") == 2 + 4 * 2 - 1 and "| yes |" in checks
    assert "B=1, H=8, d=64" in bench.describe_run(data)


def test_a_participant_out_of_device_memory_is_recorded_not_fatal(monkeypatch):
    """On CUDA every participant is called once before the rounds: one that runs out of memory
    (the naive path at n = 16384 on a GPU) becomes a skipped row saying so."""
    from course_lib.toolkit.bench import sweep

    real = sweep.attention

    def attention_or_oom(impl, **kw):
        run = real(impl, **kw)
        if impl != "reference":
            return run

        def oom():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
        return oom

    monkeypatch.setattr(sweep, "attention", attention_or_oom)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    common = dict(batch=1, heads=2, n=32, d=8, causal=False, dtype="float32", device="cuda:0",
                  backward=False, seed=0)
    common_cpu = {**common, "device": "cpu"}
    runs, oom = sweep._fitting_participants(["reference", "flash"], common_cpu, probe=True)
    assert list(runs) == ["flash"]
    assert oom == {"reference": "out of memory on cpu: CUDA out of memory"}
    assert common["device"] == "cuda:0"
    runs, oom = sweep._fitting_participants(["reference", "flash"], common_cpu, probe=False)
    assert list(runs) == ["reference", "flash"] and oom == {}    # CPU: no probe, no call


def test_driver_version_from_nvidia_smi_or_none(monkeypatch):
    import subprocess

    from course_lib.toolkit.bench import machine

    def fake_run(cmd, **kw):
        assert cmd[0] == "nvidia-smi"
        return subprocess.CompletedProcess(cmd, 0, stdout="580.159.04\n", stderr="")

    monkeypatch.setattr(machine.subprocess, "run", fake_run)
    assert machine.nvidia_driver_version() == "580.159.04"

    def missing(cmd, **kw):
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(machine.subprocess, "run", missing)
    assert machine.nvidia_driver_version() is None


def test_chapter_bench_command_takes_a_device(tmp_path):
    from course_lib.toolkit.bench import script

    seen = []

    def run(lengths, repeats, device="cpu"):
        seen.append((lengths, repeats, device))
        return {"device": device}

    out = script.run_and_write(run, "doc", lambda d: tmp_path / f"r-{d}.json", [8],
                               ["--device", "cuda", "--repeats", "2"], devices=("cpu", "cuda"))
    assert out == tmp_path / "r-cuda.json" and seen == [([8], 2, "cuda")]
    assert json.loads(out.read_text()) == {"device": "cuda"}
    with pytest.raises(SystemExit):     # no --device where the benchmark has no devices
        script.run_and_write(lambda lengths, repeats: {}, "doc", tmp_path / "x.json", [8],
                             ["--device", "cuda"])
    fixed = script.run_and_write(lambda lengths, repeats: {"n": lengths}, "doc",
                                 tmp_path / "x.json", [8], ["--lengths", "4", "5"])
    assert json.loads(fixed.read_text()) == {"n": [4, 5]}


def test_inputs_on_the_cpu_are_the_seeded_cpu_draws():
    """The committed CPU results were drawn with the CPU generator: still the same numbers."""
    from course_lib.toolkit.bench.workloads import make_inputs

    q, k, v = make_inputs(1, 2, 5, 3, seed=7)
    g = torch.Generator().manual_seed(7)
    for got in (q, k, v):
        assert torch.equal(got, torch.randn(1, 2, 5, 3, generator=g))
