"""The prose tells the truth about the code it names.

* Every ``course_lib.…`` dotted name quoted in the book's text (the markdown cells of
  ``book/*.ipynb`` and the pages ``book/*.md``) imports: a module, or an attribute of one.
* Every exercise's text states its signature exactly as the registry lists it
  (``python -m course_lib list``): the markdown directly above the starter cell quotes the
  registry's ``signature`` verbatim in backticks, and the starter's ``def`` takes the registry's
  parameters (``Exercise.params``) in the same order.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from course_lib.toolkit.checking import registry

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
DOTTED = re.compile(r"(?<![\w.])course_lib(?:\.[A-Za-z_]\w*)+")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _prose(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text(encoding="utf-8")
    return "\n".join(_source(c) for c in _cells(path) if c["cell_type"] == "markdown")


def _quoted_names() -> list[tuple[str, str]]:
    found = set()
    for path in sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md")):
        for name in DOTTED.findall(_prose(path)):
            found.add((path.name, name))
    return sorted(found)


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is an importable module or an attribute reachable from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_resolves_tells_real_names_from_stale_ones():
    assert resolves("course_lib.attention.masks.causal_mask")
    assert resolves("course_lib.chapters.ch04_multi_head.helpers")
    assert not resolves("course_lib.multihead_tools.toy_heads_layer")
    assert not resolves("course_lib.attention.masks.no_such_function")
    assert DOTTED.findall("see `course_lib.reference.attention_weights`.") == [
        "course_lib.reference.attention_weights"]


QUOTED = _quoted_names()


def test_the_book_quotes_course_lib_names():
    assert len(QUOTED) > 20  # the scan found the prose (a broken glob would pass everything)


@pytest.mark.parametrize(("page", "name"), QUOTED, ids=[f"{p}:{n}" for p, n in QUOTED])
def test_quoted_course_lib_name_imports(page, name):
    assert resolves(name), f"{page} quotes `{name}`, which does not import"


EXERCISES = list(registry().values())


def _starter(cells: list[dict], function_name: str) -> int | None:
    """Index of the starter cell: the code cell defining ``function_name`` (not a solution)."""
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        if any(isinstance(node, ast.FunctionDef) and node.name == function_name
               for node in tree.body):
            return i
    return None


def _params(cell: dict, function_name: str) -> tuple[str, ...]:
    fn = next(node for node in ast.parse(_source(cell)).body
              if isinstance(node, ast.FunctionDef) and node.name == function_name)
    a = fn.args
    return tuple(p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs])


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.id for e in EXERCISES])
def test_exercise_text_states_the_registry_signature(exercise):
    path = BOOK / f"{exercise.chapter}.ipynb"
    assert path.exists(), f"{exercise.id}: no notebook {path.name}"
    cells = _cells(path)
    start = _starter(cells, exercise.function_name)
    assert start is not None, f"{path.name}: no starter cell defines {exercise.function_name}"
    assert _params(cells[start], exercise.function_name) == tuple(exercise.params), (
        f"{path.name}: the starter's parameters differ from the registry's {exercise.params}")
    above = []
    for cell in reversed(cells[:start]):
        if cell["cell_type"] != "markdown":
            break
        above.append(_source(cell))
    text = "\n".join(above)
    assert f"`{exercise.signature}`" in text, (
        f"{path.name}: the text above the {exercise.id} starter does not quote the registry's "
        f"signature `{exercise.signature}`")


# ----------------------------------------------------------------------------- attribution
#
# Each idea is credited to the paper that introduced it (issue 42). These pin the corrections so
# that a later edit cannot bring the old claims back.

BIB = (ROOT / "references.bib").read_text(encoding="utf-8")
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def _bib_years() -> dict[str, str]:
    years = {}
    for entry in re.split(r"\n(?=@)", BIB):
        key = re.match(r"@\w+\{([^,\s]+),", entry.strip())
        year = re.search(r"\byear\s*=\s*\{(\d{4})\}", entry)
        if key and year:
            years[key.group(1)] = year.group(1)
    return years


def _all_prose() -> dict[str, str]:
    return {p.name: _prose(p) for p in sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md"))}


def _bullet(text: str, start: str) -> str:
    """The markdown list item that begins with ``start`` (up to the next item or blank line)."""
    i = text.index(start)
    end = re.search(r"\n(?:\* |\s*\n)", text[i + len(start):])
    return text[i:i + len(start) + (end.start() if end else len(text))]


def test_a_year_written_after_a_citation_agrees_with_the_bibliography():
    # "{cite}`dao2023flashattention2` (2023)" rendered as "(Dao, 2024) (2023)"
    years = _bib_years()
    assert years["dao2023flashattention2"] == "2024" and len(years) > 40
    follows = re.compile(CITE.pattern + r"\s*\((\d{4})\)")
    wrong = [(page, keys, year) for page, text in _all_prose().items()
             for keys, year in follows.findall(text)
             if any(years.get(k.strip()) != year for k in keys.split(","))]
    assert not wrong, wrong


def test_flashattention_1_is_not_credited_with_tiled_exact_attention_with_recomputation():
    ch08 = _prose(BOOK / "08_flash.ipynb")
    fa1 = _bullet(ch08, "* **FlashAttention** {cite}`dao2022flashattention`")
    assert "rabe2021self" in fa1 and "IO-aware" in fa1        # Rabe & Staats first; FA-1 the kernel
    for page, text in _all_prose().items():
        for sentence in re.split(r"(?<=[.!?])\s", text):
            if "dao2022flashattention" in sentence or "FlashAttention-1" in sentence:
                assert not re.search(r"introduced[^.]*(tiled|exact|recomputation)", sentence), (
                    page, sentence)


def test_the_two_kernel_backward_is_not_credited_to_flashattention_2():
    ch09 = _prose(BOOK / "09_flash_triton.ipynb")
    for page, text in _all_prose().items():
        assert not re.search(r"FlashAttention-2 (splits|backward)", text), page
    titles = [e.title for e in EXERCISES if e.chapter == "09_flash_triton"]
    assert titles and not any("FlashAttention-2 backward" in t for t in titles)
    split = next(p for p in re.split(r"\n\s*\n", ch09) if "no atomics" in p and "dK" in p)
    fa2 = [s for s in re.split(r"(?<=[.!?])\s", split) if "dao2023flashattention2" in s]
    assert fa2 and "atomic adds" in " ".join(fa2)          # what FlashAttention-2 does instead


def test_the_h200_lead_over_flashattention_2_is_not_claimed_for_the_algorithm():
    ch09 = _prose(BOOK / "09_flash_triton.ipynb")
    lead = next(p for p in re.split(r"\n\s*\n", ch09) if "beats torch's `flash` backend" in p)
    assert "wgmma" in lead and "mma.sync" in lead and "did not profile" in lead


def test_tf32_is_said_to_truncate_on_the_gpu():
    ch09 = _prose(BOOK / "09_flash_triton.ipynb")
    assert "triton_issue4574" in ch09 and "$2^{-10}$" in ch09
    assert "as the GPU's\n`cvt.rna" not in ch09 and "as the GPU's `cvt.rna" not in ch09


def test_rope_scaling_methods_are_credited_to_their_sources():
    ch05 = _prose(BOOK / "05_positions.ipynb")
    ntk = _bullet(ch05, "* **NTK-aware scaling**")
    assert "bloc97_2023ntk" in ntk and "emozilla2023dynamic" in ntk
    # the factor sℓ/M − (s − 1) is transformers', not YaRN's (YaRN §3.3 uses max(1, ℓ/M))
    assert "Hugging Face" in ntk
    if "peng2024yarn" in ntk:
        assert r"\max(1, \ell/M)" in ntk


def test_flashattention_utilisation_figures_are_the_papers():
    ch08 = _prose(BOOK / "08_flash.ipynb")
    assert not re.search(r"50\s*[–-]\s*73\s*%", ch08)
    assert "740 TFLOP/s in FP16" in ch08 and "up to 63% in the backward" in ch08
    assert "about 75% of the H100's bf16 peak" not in ch08


@pytest.mark.parametrize(("page", "claim"), [
    ("11_flex_attention.ipynb", "no single key can take all the weight"),   # capping bounds scores
    ("11_flex_attention.ipynb", "Compiled flex wins even for the causal mask"),  # not vs is_causal
    ("08_flash.ipynb", "The naive path is memory-bound"),                  # float32 CUDA cores
    ("09_flash_triton.ipynb", "each query averages fewer keys"),           # bf16 output rounding
])
def test_retired_false_claims_stay_retired(page, claim):
    assert claim not in _prose(BOOK / page).replace("\n", " ")


def _paragraph(text: str, needle: str) -> str:
    """The blank-line-separated paragraph of ``text`` that contains ``needle``."""
    return next(p for p in re.split(r"\n\s*\n", text) if needle in p)


def test_ring_self_attention_is_credited_before_ring_attention():
    ch13 = _prose(BOOK / "13_across_devices.ipynb")
    ring = _paragraph(ch13, "Ring Self-Attention")
    assert "li2021sequence" in ring and "liu2023ring" in ring
    assert "blockwise" in ring and "overlapped" in ring and "memory" in ring   # Liu et al.
    assert "li2021sequence" in _bullet(ch13, "* Ring Self-Attention")          # and in References


def test_tile_skipping_on_the_diagonal_is_credited_to_flashattention_2():
    ch13 = _prose(BOOK / "13_across_devices.ipynb").replace("\n", " ")
    skip = next(s for s in re.split(r"(?<=[.!?])\s", ch13) if "skips the tiles above" in s)
    assert "dao2023flashattention2" in skip and "section 3.1" in ch13
    assert "$2W - 1$" in ch13 and "$W/2$" in ch13                  # both kernels' numbers
    assert "here and in most kernels" not in ch13


def test_context_parallel_is_said_to_all_gather_by_default():
    ch13 = _prose(BOOK / "13_across_devices.ipynb").replace("\n", " ")
    cp = next(s for s in re.split(r"(?<=[.!?])\s", ch13) if "ships `torch.distributed" in s)
    assert "by default all-gathers the keys and values" in cp
    assert 'set_rotate_method("alltoall")' in ch13
    assert "rotates keys and values between ranks" not in ch13


def test_ulysses_volume_is_stated_with_grouped_query_attention():
    ch13 = _prose(BOOK / "13_across_devices.ipynb").replace("\n", " ")
    assert r"\frac{1 + H/H_{kv}}{W}" in ch13 and "$(1 + H/H_{kv})/W$" in ch13
    assert not re.search(r"(?<!without GQA )Ulysses sends \$2/W\$", ch13, re.I)  # only w/o GQA


def test_deepseek_v2_and_v3_have_distinct_author_year_labels():
    # both are "DeepSeek-AI, 2024": the bibliography's years tell them apart (2024a, 2024b)
    years = {key: re.search(r"\byear\s*=\s*\{([^}]*)\}", entry).group(1)
             for entry in re.split(r"\n(?=@)", BIB)
             if (key := (re.match(r"@\w+\{([^,\s]+),", entry.strip()) or [None, None])[1])
             in ("deepseekai2024v2", "deepseekai2024v3")}
    assert years == {"deepseekai2024v2": "2024a", "deepseekai2024v3": "2024b"}


def test_the_set_up_section_tells_the_readme_story():
    intro = (BOOK / "intro.md").read_text(encoding="utf-8")
    setup = intro[intro.index("## Set-up"):]
    assert "make lab" in setup and "jupyter lab book" not in intro
    assert "well under two minutes" not in intro            # no per-chapter time nobody measured
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make lab    # JupyterLab on workbook/" in readme and "make lab    # JupyterLab on " \
        "workbook/" in setup
