# Two commands do all set-up on a fresh machine:
#   make book   build the HTML book into _build/html
#   make test   lint, unit tests, nbval over every notebook, the book, and the browser test
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYTHONHASHSEED := 0

.PHONY: help install lint unit nbval book browser test bench clean

help:
	@echo "make book   - build the HTML book into _build/html"
	@echo "make test   - lint, unit tests, nbval over book/*.ipynb, build the book, browser test"
	@echo "make bench  - run the CPU benchmark and write bench/results/"

# torch==2.13.0 resolves to the CPU wheel here; constraints.txt pins the whole stack.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check course_lib tests bench

unit: install
	$(BIN)/pytest tests -n 2 -q --ignore=tests/browser

nbval: install
	cd book && ../$(BIN)/pytest --nbval --nbval-current-env \
	  --nbval-sanitize-with ../tests/nbval_sanitize.cfg \
	  -n 2 --dist loadscope -p no:cacheprovider -q .

book: install
	COURSE_LIB_BOOK=1 $(BIN)/jupyter-book build . --builder html -W -n --keep-going

browser: book
	$(BIN)/pytest tests/browser -q

test: lint unit nbval browser

bench: install
	$(BIN)/python -m course_lib.bench --out bench/results

clean:
	rm -rf _build .pytest_cache
