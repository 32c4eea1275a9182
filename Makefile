VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501
export HF_HUB_OFFLINE ?= 1

.PHONY: run test bench e2e clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/streamlit run dashboard/app.py --server.port $(PORT)

test: $(VENV)/.installed
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache artifacts
