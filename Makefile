# The two commands of the README: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.dslog-installed

.PHONY: demo ui test test-all lint typecheck fmt cpp-test sanitize bench dev prereqs clean browser-prereqs docs

prereqs:
	@tools/check-prereqs.sh $(PYTHON)

# Non-isolated editable install with C++ rebuild on import (see CONTRIBUTING.md).
$(STAMP): pyproject.toml CMakeLists.txt native/CMakeLists.txt | prereqs
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet scikit-build-core pybind11 cmake ninja "numpy>=2.0" setuptools wheel
	$(PIP) install --quiet --no-build-isolation -Cbuild-dir=build/dev -Ceditable.rebuild=true -e ".[test]"
	@touch $(STAMP)

dev: $(STAMP)

demo: $(STAMP)
	$(PY) example_project/numpy_lineage_demo.py
	$(PY) example_project/hotspots_demo.py
	$(PY) example_project/titles_demo.py

# The Dagster UI on the example project (http://127.0.0.1:3000), with a repo-local DAGSTER_HOME:
# `dg dev` in example_project/ (a dg project: see its pyproject.toml).
DAGSTER_HOME_DIR ?= $(CURDIR)/.dagster-home
UI_PORT ?= 3000
ui: $(STAMP)
	@mkdir -p $(DAGSTER_HOME_DIR)
	@test -f $(DAGSTER_HOME_DIR)/dagster.yaml || printf 'telemetry:\n  enabled: false\n' > $(DAGSTER_HOME_DIR)/dagster.yaml
	cd example_project && DAGSTER_HOME=$(DAGSTER_HOME_DIR) ../$(VENV)/bin/dg dev -h 127.0.0.1 -p $(UI_PORT)

# The browser test drives Debian's chromium through Playwright; install it when missing.
browser-prereqs:
	@tools/ensure-chromium.sh

# The suite runs on every core (pytest-xdist; `make test TEST_WORKERS=0` runs it in one
# process): on CI's 2 cores that halves the wall time of a suite whose tests are mostly
# single-threaded. Each worker starts its own Spark session when it first needs one.
TEST_WORKERS ?= auto
test: $(STAMP) browser-prereqs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory typecheck
	$(MAKE) --no-print-directory docs
	$(VENV)/bin/pytest -n $(TEST_WORKERS)

test-all: $(STAMP) browser-prereqs
	$(VENV)/bin/pytest -m ""

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory typecheck

# mypy --strict over the package as installed (core/, io_managers/, assets/ under dslog_dagster),
# laid out by tools/package_tree.py so every dslog_dagster.* name resolves.
typecheck: $(STAMP)
	@$(PY) tools/package_tree.py build/pkgtree >/dev/null
	cd build/pkgtree && MYPYPATH=. $(CURDIR)/$(VENV)/bin/mypy --config-file $(CURDIR)/pyproject.toml -p dslog_dagster

# The docs site (mkdocs-material + mkdocstrings) into build/docs; --strict fails on any warning
# (broken links, pages missing from the nav, docstrings mkdocstrings cannot read). The API
# reference reads the installed layout from build/pkgtree (tools/package_tree.py).
docs: $(STAMP)
	@$(PY) tools/package_tree.py build/pkgtree >/dev/null
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

cpp-test:
	cmake -S . -B build-cpp -G Ninja -DDSLOG_BUILD_CPP_TESTS=ON -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
	cmake --build build-cpp
	ctest --test-dir build-cpp --output-on-failure

# The Python extensions built with ASan/UBSan in their own build dir, loaded in place of the
# normal build (tools/sanitize_run.py) by an interpreter with the ASan runtime preloaded (and
# libstdc++, or ASan cannot intercept C++ throws of a module loaded later): the
# 8-thread capture stress test at 200 rounds, and the annotator's epoch, control-flow, option
# and forged-handle tests. Any sanitizer report aborts the run.
SAN_DIR   ?= build/sanitize
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_TESTS ?= tests/unit/test_capture_threads.py tests/unit/test_capture_epochs.py \
  tests/unit/test_capture_control_flow.py tests/unit/test_capture_options.py \
  tests/unit/test_capture.py tests/annotator/test_forged_handles.py
# ASan keeps freed memory in quarantine, so the resident-size check of this test means nothing.
SAN_RSS_TEST := tests/unit/test_capture.py::test_arena_is_freed_and_repeated_captures_do_not_grow_memory
sanitize: $(STAMP)
	cmake -S . -B $(SAN_DIR) -G Ninja -DDSLOG_BUILD_PYTHON=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS="$(SAN_FLAGS)" -DCMAKE_MODULE_LINKER_FLAGS="$(SAN_FLAGS)" \
	  -DPython_EXECUTABLE=$(CURDIR)/$(PY) -Dpybind11_DIR="$$($(PY) -m pybind11 --cmakedir)"
	cmake --build $(SAN_DIR) --target _annotator _native
	LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libstdc++.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  DSLOG_STRESS_ROUNDS=200 $(PY) tools/sanitize_run.py $(SAN_DIR) -- -q -p no:cacheprovider \
	  --durations=5 $(SAN_TESTS) --deselect $(SAN_RSS_TEST)

bench: $(STAMP)
	$(PY) bench/compression.py

clean:
	rm -rf build build-cpp .dslog-demo .dagster-home .pytest_cache .ruff_cache .mypy_cache test-artifacts
