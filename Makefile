# movepred: the README's two commands are `make demo` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
BUF    := scripts/buf/node_modules/.bin/buf
# the API as published: what `buf breaking` compares proto/ with (`make api-image` rewrites it)
API_IMAGE := proto/api.binpb

TRITON_GRPC_PORT ?= 8001
TRITON_HTTP_PORT ?= 8000
SEARCH_PORT      ?= 50051
# Prometheus metrics, on 127.0.0.1 (deploy/prometheus/prometheus-local.yml scrapes these)
TRITON_METRICS_PORT ?= 8002
SEARCH_METRICS_PORT ?= 50053
TRITON_GRPC ?= 127.0.0.1:$(TRITON_GRPC_PORT)
SEARCH      ?= 127.0.0.1:$(SEARCH_PORT)

.PHONY: setup demo test test-fast lint lint-only sample ingest schedule prefect-server train triton serve predict genmove status stop \
        web up down proto api-image client bench faults clean

setup:            ## virtualenv with pinned dependencies + generated gRPC code
	@bash scripts/setup_env.sh

demo: setup       ## ingest the shipped sample, train, publish v1, serve, Predict + GenMove, stop
	$(PY) scripts/demo.py

test: setup       ## lint + the whole test suite, unit and integration (fails when no test runs)
	$(MAKE) --no-print-directory lint-only
	$(PY) -m pytest -q --durations=25

test-fast: setup  ## the unit tests only: no Triton, Prefect, subprocess services or ../shared
	$(PY) -m pytest -q -m unit --durations=25

lint: setup       ## ruff, the import layers (pyproject.toml's contracts), no game told by a tensor's rank, buf lint + breaking of proto/
	$(MAKE) --no-print-directory lint-only

lint-only:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) scripts/check_game_shapes.py
	$(BUF) lint
	$(BUF) breaking --against $(API_IMAGE)

api-image: setup  ## after an intended API change (docs/api.md): rewrite the committed image buf breaking compares with
	$(BUF) build --exclude-source-info -o $(API_IMAGE)

proto: setup      ## regenerate gRPC code from proto/
	$(PY) -m services.api.generate

client: setup     ## the thin client's wheel (movepred-client: grpcio + protobuf only) in clients/python/dist/
	rm -rf clients/python/build
	$(PY) -m pip wheel --no-deps --no-build-isolation -w clients/python/dist clients/python

sample: setup     ## regenerate the shipped self-play sample (no RenjuNet data in the repo)
	$(PY) -m services.games.gomoku.selfplay --games 300 --seed 0 --out data/sample/selfplay.rif

PREFECT_PORT ?= 4200

ingest: setup     ## run the ingest flow: make ingest SOURCES="a.rif b.rif" [DASK=local|tcp://host:8786]
	$(PY) -m flows.ingest $(SOURCES) --out artifacts/dataset \
	    $(if $(filter local,$(DASK)),--dask,$(if $(DASK),--dask-address $(DASK)))

schedule: setup   ## serve the ingest flow on CRON (default nightly 03:00 UTC), foreground
	api="$$($(PY) -c 'import flows, sys; print(flows.configured_api_url() or sys.argv[1])' \
	    http://127.0.0.1:$(PREFECT_PORT)/api)" && PREFECT_API_URL="$$api" \
	    $(PY) -m services.processes exec --name schedules -- \
	    $(PY) -m flows.schedules $(SOURCES) $(if $(CRON),--cron "$(CRON)") \
	    $(if $(DASK),--dask-address $(DASK))

prefect-server: setup  ## Prefect API + UI on http://127.0.0.1:$(PREFECT_PORT), state in Prefect's home (~/.prefect), foreground
	$(PY) -m services.processes exec --name prefect --port api=$(PREFECT_PORT) \
	    --health http://127.0.0.1:$(PREFECT_PORT)/api/health -- \
	    $(VENV)/bin/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT)

train: setup      ## train, publish the next version into model_repository/, roll it out on Triton [STEPS=N TRAIN_SECONDS=S THREADS=N]
	$(PY) -m flows.train --triton-url $(TRITON_GRPC) $(if $(STEPS),--steps $(STEPS)) \
	    $(if $(TRAIN_SECONDS),--seconds $(TRAIN_SECONDS)) $(if $(THREADS),--threads $(THREADS))

triton: setup     ## start Triton on model_repository/ (foreground): every model on its rolled-out version [TRITON_ARGS=--replace-orphan]
	$(PY) -m services.triton.server --repository model_repository --grpc-port $(TRITON_GRPC_PORT) \
	    --http-port $(TRITON_HTTP_PORT) --metrics-port $(TRITON_METRICS_PORT) $(TRITON_ARGS)

serve: setup      ## start the gRPC search service (foreground)
	$(PY) -m services.search.server --port $(SEARCH_PORT) --triton-url $(TRITON_GRPC) \
	    --metrics-port $(SEARCH_METRICS_PORT)

predict: setup    ## make predict MOVES="h8 h9 i8"
	$(PY) -m services.cli predict --target $(SEARCH) $(MOVES)

WEB_PORT ?= 8080

web: setup        ## the web board on http://127.0.0.1:$(WEB_PORT) over the search service (foreground) [WEB_ARGS=--token-file FILE]
	$(PY) -m services.processes exec --name web --port web=$(WEB_PORT) \
	    --health http://127.0.0.1:$(WEB_PORT)/api/status -- \
	    $(PY) -m services.web --port $(WEB_PORT) --target $(SEARCH) $(WEB_ARGS)

up: setup         ## Triton, the search service and the web board in the background (logs in runs/log/), each waited for until healthy [TRITON_ARGS= SEARCH_ARGS= WEB_ARGS=]
	$(PY) scripts/stack.py up --repository model_repository --triton-grpc-port $(TRITON_GRPC_PORT) \
	    --triton-http-port $(TRITON_HTTP_PORT) --triton-metrics-port $(TRITON_METRICS_PORT) \
	    --search-port $(SEARCH_PORT) --search-metrics-port $(SEARCH_METRICS_PORT) --web-port $(WEB_PORT) \
	    --triton-args "$(TRITON_ARGS)" --search-args "$(SEARCH_ARGS)" --web-args "$(WEB_ARGS)"

down: setup       ## stop what `make up` started: the web board, the search service, Triton
	$(PY) scripts/stack.py down

genmove: setup    ## make genmove MOVES="h8 h9 i8" VISITS=400
	$(PY) -m services.cli genmove --target $(SEARCH) --visits $(or $(VISITS),400) $(MOVES)

status: setup     ## what runs here (Triton, search service, Prefect, ...): pid, ports, uptime, health
	$(PY) -m services.cli status

stop: setup       ## stop what runs here: SIGTERM, then SIGKILL after 10 s [NAMES="search triton"]
	$(PY) -m services.cli stop $(NAMES)

bench: setup      ## benchmarks; figures go into docs/benchmarks.md by hand, with the machine
	$(PY) benchmarks/serving.py --triton-env OMP_WAIT_POLICY=PASSIVE
	$(PY) benchmarks/serving.py --model shao_f128_n4 --genmove-concurrency= --triton-env OMP_WAIT_POLICY=PASSIVE

faults: setup     ## fault suite (kills, corrupt versions, disk full, soak; ~20 min) -> docs/reliability.md
	$(PY) benchmarks/faults.py $(if $(QUICK),--quick)

clean:
	rm -rf runs artifacts .triton .pytest_cache
