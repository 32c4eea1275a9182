VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8501
export HF_HUB_OFFLINE ?= 1

.PHONY: run test bench e2e system-deps warmup nginx-conf nginx-gzip plotly-bundle onnxruntime-web clean

# The stamp holds the requirements' digest: pip runs again only when they changed, not when
# the file is merely newer (a clone whose .venv links another checkout's venv).
$(VENV)/.installed: requirements.txt
	@if [ -x $(PY) ] && [ -f $@ ] && [ "$$(sha256sum < requirements.txt)" = "$$(cat $@)" ]; then \
		touch $@; \
	else \
		set -e; \
		test -x $(PY) || python3 -m venv $(VENV); \
		$(PY) -m pip install --quiet --upgrade pip; \
		$(PY) -m pip install --quiet -r requirements.txt; \
		sha256sum < requirements.txt > $@; \
	fi

# Prepares the bundled models (converts DINOv2 and builds its k-NN bank on a fresh machine)
# before the server listens, then serves the app from the same process.
run: $(VENV)/.installed
	$(PY) -m dashboard.serve --server.port $(PORT)

test: $(VENV)/.installed system-deps
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) -m bench.run

# Debian packages for PNG export (kaleido), the browser, the proxy tests and class mode's
# PostgreSQL tests (skipped when all are there).
system-deps:
	@if command -v chromium >/dev/null && command -v nginx >/dev/null \
			&& ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "chromium, nginx and postgresql already installed"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y \
			--no-install-recommends chromium nginx postgresql; \
	fi

# Real browser (Playwright + system chromium) and nginx-in-front-of-two-replicas tests.
e2e: $(VENV)/.installed system-deps
	$(PY) -m pytest tests/e2e -q

# Load the bundled models and build the k-NN bank (run before the first user).
warmup: $(VENV)/.installed
	$(PY) -m xai_core warmup

# deploy/nginx/vit-lens.conf with the static-file paths of this checkout and its venv:
#   make -s nginx-conf | sudo tee /etc/nginx/conf.d/vit-lens.conf
# and for other ports: make -s nginx-conf PORTS=8601,8602,8603 LISTEN=8080
nginx-conf: $(VENV)/.installed
	@$(PY) -m dashboard.nginx_conf $(if $(PORTS),--ports $(PORTS)) $(if $(LISTEN),--listen $(LISTEN))

# <file>.gz beside each JS/CSS/font file of the venv's Streamlit bundle, for nginx's
# gzip_static (run again after upgrading streamlit)
nginx-gzip: $(VENV)/.installed
	$(PY) -m dashboard.nginx_conf --gzip-bundle

# Rebuild the vendored plotly.js (dashboard/static/plotly-vitlens-<version>.min.js, committed)
# from the pinned npm packages; needs node and npm, which running the app does not.
plotly-bundle:
	cd dashboard/chart/plotly_bundle && npm ci --no-audit --no-fund && npm run build

# onnxruntime-web, pinned, from npm (the committed files are checked against SHA256SUMS)
onnxruntime-web:
	sh dashboard/static/vendor/onnxruntime-web.sh

clean:
	rm -rf $(VENV) .pytest_cache artifacts
