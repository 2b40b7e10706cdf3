# Two commands do all set-up on a fresh machine:
#   make book   build the HTML book into _build/html
#   make test   lint, unit tests, nbval over every notebook, the book, and the browser test
SHELL := /bin/bash
PYTHON ?= python3
NPM ?= npm
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.package-lock.json
BOOK_STAMP := _build/.book-built
export PYTHONHASHSEED := 0

# Everything the HTML depends on: a book older than any of these is rebuilt, a fresh one reused.
BOOK_SOURCES := _config.yml _toc.yml references.bib package-lock.json tools/book_assets.py \
  $(shell find book course_lib -type f -not -path '*/__pycache__/*' \
            -not -path '*/.ipynb_checkpoints/*' 2>/dev/null)

.PHONY: help install assets lint unit nbval book book-force browser test bench clean

help:
	@echo "make book   - build the HTML book into _build/html (sets up .venv and node_modules)"
	@echo "make test   - lint, unit tests, nbval over book/*.ipynb, build the book, browser test"
	@echo "make bench  - run the CPU benchmark and write course_lib/toolkit/bench/results/"

# torch==2.13.0 resolves to the CPU wheel on the course machines; constraints.txt pins the whole
# Python stack (jupyter-book==1.0.4.post1 and everything under it) so pip cannot wander.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
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

unit: install
	$(BIN)/pytest tests -n 2 -q --ignore=tests/browser

nbval: install
	cd book && ../$(BIN)/pytest --nbval --nbval-current-env \
	  --nbval-sanitize-with ../tests/nbval_sanitize.cfg \
	  -n 2 --dist loadscope -p no:cacheprovider -q .

# Strict: any Sphinx warning (broken reference, citation, cell error, remote asset) fails.
$(BOOK_STAMP): $(STAMP) $(NODE_STAMP) $(BOOK_SOURCES)
	rm -f $(BOOK_STAMP)
	$(BIN)/python tools/book_assets.py
	COURSE_LIB_BOOK=1 $(BIN)/jupyter-book build . --builder html -W -n --keep-going
	touch $(BOOK_STAMP)

book:
	@test -f _build/html/index.html || rm -f $(BOOK_STAMP)
	@$(MAKE) --no-print-directory $(BOOK_STAMP)

book-force:
	rm -f $(BOOK_STAMP)
	$(MAKE) book

# Headless Debian Chromium against _build/html; skips (fails under CI=true) without Chromium.
browser: book
	$(BIN)/pytest tests/browser -q -rs -p no:cacheprovider

test: lint unit nbval browser

bench: install
	$(BIN)/python -m course_lib.bench --out course_lib/toolkit/bench/results

clean:
	rm -rf _build .pytest_cache
