# Three commands do all set-up on a fresh machine:
#   make lab    JupyterLab on your own copies of the chapters (workbook/, no solutions)
#   make book   build the HTML book into _build/html
#   make test   lint, unit tests, nbval over every notebook (twice: native, then with perturbed CPU
#               kernels and threads), the book, and the browser test; then a per-stage timing table
# While editing, `make check` is the quick subset (README "Testing": which one when).
SHELL := /bin/bash
PYTHON ?= python3
NPM ?= npm
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.package-lock.json
BOOK_STAMP := _build/.book-built
export PYTHONHASHSEED := 0
# Builds and tests record exercise checks in a throw-away progress record, never the learner's own.
SANDBOX_PROGRESS := $(CURDIR)/_build/.progress-sandbox/progress
# The second nbval run: stored outputs must not depend on the SIMD level, the kernel library or the
# thread count. tools/nbval_perturbation.py probes the candidates (most perturbed first: ATen's
# portable kernels with oneDNN at AVX2 on one thread, ...) and picks the first that torch runs
# correctly on this host; it prints which and why (also in _build/nbval-perturbation.txt).
NBVAL_PERTURBED = $$($(BIN)/python tools/nbval_perturbation.py --python $(BIN)/python \
	  --report _build/nbval-perturbation.txt)
# Where two kernels run at once (nbval's two workers, the book's BOOK_JOBS=2), each with torch's
# default thread per core, idle OpenMP threads sleep instead of spinning on the other's cores.
# It changes no result (same threads, same split of the work), only the waste: nbval of chapters
# 7, 8, 10 and 12 took 78-85 s spinning, 55 s sleeping, on this 2-core machine.
SHARED_CORES := OMP_WAIT_POLICY=PASSIVE

# Everything the HTML depends on: a book older than any of these is rebuilt, a fresh one reused.
BOOK_SOURCES := _config.yml _toc.yml references.bib package-lock.json tools/book_assets.py \
  tools/book_execute.py tools/book_workbook.py \
  $(shell find book course_lib -type f -not -path '*/__pycache__/*' \
            -not -path '*/.ipynb_checkpoints/*' 2>/dev/null)

.PHONY: help install assets lint unit unit-fast stats nbval nbval-native nbval-perturbed nbval-changed \
  notebooks book book-force browser test check guard-snapshot guard-verify bench clean lab

help:
	@echo "make lab    - JupyterLab on workbook/, your copies of the chapters (no solutions)"
	@echo "make book   - build the HTML book into _build/html (sets up .venv and node_modules)"
	@echo "make test   - lint, unit tests, nbval over book/*.ipynb (native + perturbed), book, browser"
	@echo "make check  - quick: lint, unit tests minus slow ones, nbval of notebooks changed since main"
	@echo "make notebooks - re-execute every notebook in place (after changing a chapter or course_lib)"
	@echo "make bench  - run the CPU benchmark and write course_lib/toolkit/bench/results/"
	@echo "make stats  - the checkers' statistical tests on every seed (make test runs a sample)"

# torch==2.13.0 resolves to the CPU wheel on the course machines; constraints.txt pins the whole
# Python stack (jupyter-book==1.0.4.post1 and everything under it) so pip cannot wander.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -r requirements.txt -c constraints.txt
	# pip byte-compiles on one core; compileall on every core writes the same .pyc files (on 2
	# cores: 94 s -> 41 s + 35 s). Like pip, files that do not compile (templates, Python 2
	# fixtures inside packages) are left as they are. Not compiled: the packages' own test suites
	# and transformers' model families (3 in 10 files; the course's tests import eight of its 558
	# models): 37 -> 28 s on 2 cores; a module of theirs that is imported compiles then.
	$(BIN)/python -c "import compileall, re, sysconfig; \
	  compileall.compile_dir(sysconfig.get_path('purelib'), quiet=2, workers=0, \
	    rx=re.compile(r'/tests?/|/transformers/models/(?!auto/)'))"
	# setuptools' "Editable installation" notice (a warning box, nothing to act on) is silenced.
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	# The course's own package too (installed editable, it stays here): where the environment
	# sets PYTHONDONTWRITEBYTECODE, each kernel and test process compiled again the modules it
	# imports (0.27 s of CPU for a chapter's). Grading's sandboxed copy is compiled as it is made.
	$(BIN)/python -c "import compileall; compileall.compile_dir('course_lib', quiet=2, workers=0)"
	touch $(STAMP)

install: $(STAMP)

# MathJax 3 for offline math: exact version + integrity hash in package-lock.json.
$(NODE_STAMP): package.json package-lock.json
	$(NPM) ci --no-audit --no-fund --ignore-scripts
	touch $(NODE_STAMP)

assets: $(NODE_STAMP) install
	$(BIN)/python tools/book_assets.py

lint: install
	$(BIN)/ruff check course_lib tests bench tools
	$(BIN)/python tools/notebook_setup.py --check book/*.ipynb

# Two workers, one OpenMP thread each: with torch's default (a thread per core in each worker) the
# two cores are oversubscribed and idle OpenMP threads spin (unit stage 11:41 -> 9:57 on 2 cores).
# A test that needs another thread count sets it itself.
UNIT = $(SHARED_CORES) OMP_NUM_THREADS=1 COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS) $(BIN)/pytest tests -n 2 \
	  --dist loadgroup -q \
	  --ignore=tests/browser --durations=15
unit: install
	$(UNIT)

# The statistical tests' full sweep (every solution on 500 seeds, every mistake on 200, no verdict
# flipping on seeds 0-99); `make test` runs every exercise and mistake on a sample of the seeds.
stats: install
	COURSE_LIB_STATS=full $(SHARED_CORES) OMP_NUM_THREADS=1 \
	  COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS) $(BIN)/pytest -n 2 -q \
	  tests/test_exercises_statistics.py tests/test_exercises_corpus.py \
	  tests/test_exercises_fresh_corpus.py tests/test_exercises_blind_corpus.py --durations=10

# The unit tests without those marked slow (> 5 s each on an idle machine), for `make check`.
unit-fast: install
	$(UNIT) -m "not slow"

# Stored outputs are compared twice: as this machine runs them, and with torch's portable kernels on
# one thread (another SIMD path and reduction order). Both must pass; see README "Notebook outputs".
NBVAL = env -u MPLBACKEND -u COURSE_LIB_BOOK $(SHARED_CORES) COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS)
NBVAL_OPTS = --nbval --nbval-current-env --nbval-sanitize-with ../tests/nbval_sanitize.cfg \
	  --nbval-kernel-startup-timeout 180 \
	  -n 2 --dist loadscope -p no:cacheprovider -q
NBVAL_ARGS = $(NBVAL_OPTS) .

nbval: nbval-native nbval-perturbed

# The native run is the book's run too (issue 50: the chapters run natively once, not twice): it
# runs in the book's environment (COURSE_LIB_BOOK=1: explorers as players, whose outputs nbval
# does not compare; every compared output is the same in both modes) and keeps each notebook
# whose every cell passed (tools/nbval_capture.py); `make test`'s book stage takes the chapters
# from there (tools/book_execute.py --from). The perturbed run keeps the learners' environment.
NBVAL_RUN := _build/nbval-native-run
nbval-native: install
	rm -rf $(NBVAL_RUN)
	cd book && env -u MPLBACKEND $(SHARED_CORES) COURSE_LIB_BOOK=1 \
	  COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS) COURSE_LIB_NBVAL_CAPTURE=$(CURDIR)/$(NBVAL_RUN) \
	  PYTHONPATH=$(CURDIR)/tools ../$(BIN)/pytest -p nbval_capture $(NBVAL_ARGS)

nbval-perturbed: install
	perturbed="$(NBVAL_PERTURBED)" && cd book && $(NBVAL) $$perturbed ../$(BIN)/pytest $(NBVAL_ARGS)

# nbval (native) of the notebooks changed since main: committed on this branch, edited, or new.
nbval-changed: install
	@nbs="$$($(BIN)/python tools/changed_notebooks.py)"; \
	if [ -z "$$nbs" ]; then echo "nbval-changed: no notebook changed since main: skipped"; \
	else echo "nbval-changed:" $$nbs; \
	  cd book && $(NBVAL) ../$(BIN)/pytest $(NBVAL_OPTS) $$nbs; fi

# The one way stored outputs are produced: fresh kernel per notebook, nbval's environment.
notebooks: install
	$(BIN)/python tools/execute_notebooks.py

# Chapters executed at once before Sphinx reads them (tools/book_execute.py). One for the book you
# publish: its live timings are measured with nothing else running; `make test` builds with two
# and takes the chapters nbval-native ran (BOOK_FROM; before publishing a book `make test`
# built, `make book-force`).
BOOK_JOBS ?= 1
BOOK_FROM ?=

# --all: Sphinx re-reads every page (else only changed sources, and a chapter whose notebook did
# not change would keep its old outputs though course_lib changed).
# Strict: any Sphinx warning (broken reference, citation, cell error, remote asset) fails.
$(BOOK_STAMP): $(STAMP) $(NODE_STAMP) $(BOOK_SOURCES)
	rm -f $(BOOK_STAMP)
	$(BIN)/python tools/book_assets.py
	$(if $(filter-out 1,$(BOOK_JOBS)),$(SHARED_CORES)) COURSE_LIB_BOOK=1 \
	  COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS) $(BIN)/python tools/book_execute.py --jobs $(BOOK_JOBS) \
	  $(if $(BOOK_FROM),--from $(BOOK_FROM))
	COURSE_LIB_BOOK=1 COURSE_LIB_PROGRESS=$(SANDBOX_PROGRESS) \
	  $(BIN)/jupyter-book build . --builder html --all -W -n --keep-going
	touch $(BOOK_STAMP)

book:
	@test -f _build/html/index.html || rm -f $(BOOK_STAMP)
	@$(MAKE) --no-print-directory $(BOOK_STAMP)

book-force:
	rm -f $(BOOK_STAMP)
	$(MAKE) book

# Headless Debian Chromium against _build/html; skips (fails under CI=true) without Chromium.
# Two workers, each with its own Chromium and server (a page's layout and axe run on one core).
# SCREENSHOTS=1 also saves a full-page screenshot of each chapter in _build/screenshots/.
SCREENSHOTS ?=
browser: book
	$(SHARED_CORES) COURSE_LIB_SCREENSHOTS=$(SCREENSHOTS) $(BIN)/pytest tests/browser -q -rs -p no:cacheprovider -n 2 --durations=10

# The guard fails the run if anything wrote to the learner's progress record (~/.course_lib).
guard-snapshot: install
	$(BIN)/python tools/progress_guard.py snapshot _build/.progress-guard.json

guard-verify: install
	$(BIN)/python tools/progress_guard.py verify _build/.progress-guard.json

# The full gate, one stage after another; stage_timer stops at the first failing stage and prints
# the time of every stage either way (also in _build/stage-timings.txt). Standard-library Python:
# it runs before .venv exists.
# One stage is two targets at once: the perturbed nbval and the book, which needs only the native
# run's chapters. Sphinx uses one core (the book alone kept the machine 52% busy) and the
# perturbed run's two single-threaded kernels leave gaps between notebooks; each target's output
# is printed whole when it ends (--output-sync), and either failing fails the stage.
STAGES = $(PYTHON) tools/stage_timer.py --summary-file _build/stage-timings.txt
SUBMAKE = $(MAKE) --no-print-directory
test:
	@$(STAGES) "install=$(SUBMAKE) install" "guard=$(SUBMAKE) guard-snapshot" \
	  "lint=$(SUBMAKE) lint" "unit=$(SUBMAKE) unit" \
	  "nbval native=$(SUBMAKE) nbval-native" \
	  "nbval perturbed + book=$(SUBMAKE) -j2 --output-sync=target nbval-perturbed book \
	    BOOK_JOBS=2 BOOK_FROM=$(NBVAL_RUN)" \
	  "browser=$(SUBMAKE) browser" "guard verify=$(SUBMAKE) guard-verify"

# The quick loop while editing (a few minutes): not a substitute for `make test`.
check:
	@$(PYTHON) tools/stage_timer.py --summary-file _build/check-timings.txt \
	  "install=$(SUBMAKE) install" "lint=$(SUBMAKE) lint" \
	  "unit (not slow)=$(SUBMAKE) unit-fast" "nbval changed=$(SUBMAKE) nbval-changed"

# The learner's workspace. The workbook never overwrites a notebook you edited (FORCE=--force
# does); LAB_ARGS passes options to JupyterLab (e.g. LAB_ARGS=--no-browser). JupyterLab's settings
# for the course (no news prompt) are tools/lab/jupyter_lab_config.py, never your ~/.jupyter.
WORKBOOK ?= workbook
LAB_ARGS ?=
lab: install
	$(BIN)/python -m course_lib workbook $(WORKBOOK) $(FORCE)
	$(BIN)/jupyter lab --config=tools/lab/jupyter_lab_config.py --ServerApp.root_dir=$(WORKBOOK) \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

bench: install
	$(BIN)/python -m course_lib.bench --out course_lib/toolkit/bench/results

clean:
	rm -rf _build .pytest_cache
