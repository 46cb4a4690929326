PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-all lint bench clean pipeline default-model cost-model \
	corpus-grow corpus-datasets

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0  # first: a CPU build on local disk, not the CUDA one
	$(BIN)/pip install -q -e '.[dev,models,training,data]'
# xgrammar loads `dragon grammar --format gbnf` in tests; its other needs are installed by now,
# and --no-deps keeps out triton, a GPU compiler it lists but does not need to parse grammars.
	$(BIN)/pip install -q --no-deps xgrammar==0.2.8
	touch $(STAMP)

demo: $(STAMP)  # the main job on the built-in model, against MetaSchedule (a few minutes)
	$(BIN)/dragon demo

# Tests run in PYTEST_WORKERS processes (pytest-xdist), a file to a worker so that a file's
# fixtures are built once; 0 runs them in this process.  Three on 2 cores: a worker spends much
# of its time waiting on the processes that build, time and sample for it (its Evaluator's,
# a `dragon` command's), and two kept the cores 150-175% busy (measured on a clean clone with
# a cold page cache: 7.4 min with 3 workers; 9.3 with 2 before the cuts).
PYTEST_WORKERS ?= 3
XDIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) --durations=25 tests $(PYTEST_ARGS)

# The slow tests alone, without a GPU (about 11 minutes on 2 cores): a real MetaSchedule tuning,
# BERT, GPT-2 and Llama against torch, every model's tasks, the demo, Outlines, every pair of
# the round-trip strategy.  pytest's exit code 5 (nothing selected) means no test is marked
# slow any more, so `make test` ran them all: that is a pass; any other failure is not.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m 'slow and not gpu' tests $(PYTEST_ARGS); \
	status=$$?; if [ $$status -eq 5 ]; then echo "no slow tests to run"; exit 0; fi; exit $$status

test-all: $(STAMP)  # also the slow tests
	$(BIN)/python -m pytest -q $(XDIST) -m 'not gpu' tests
	DRAGON_HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -q tests/test_roundtrip.py

lint: $(STAMP)
	$(BIN)/ruff check dragon_dsl codegen training tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_codec.py
	$(BIN)/python benchmarks/bench_measure.py
	$(BIN)/python benchmarks/bench_prompts.py
	$(BIN)/python benchmarks/bench_sampling.py
	$(BIN)/python benchmarks/bench_constraints.py
	$(BIN)/python benchmarks/bench_live_apply.py

# The whole method on the tiny presets, each stage reusing what an earlier run built (delete a
# stage's folder to run it again): search data, SFT, RL, the held-out evaluation of both, and
# one optimize call with the RL model.  About an hour on 2 cores.
PIPELINE ?= pipeline
DATA ?= $(PIPELINE)/data
pipeline: $(PIPELINE)/eval/summary.json
	$(BIN)/dragon optimize 'rms_norm()' --model $(PIPELINE)/rl-tiny -k 4 --rounds 1 \
	    --out $(PIPELINE)/rms_norm.dragon
	@echo "report: $(PIPELINE)/eval/report.md"

$(DATA)/refinement/dataset_dict.json: | $(STAMP)
	$(BIN)/dragon datagen --preset tiny --out $(DATA)

$(PIPELINE)/sft-tiny/result.json: $(DATA)/refinement/dataset_dict.json
	$(BIN)/dragon sft --preset tiny $(SFT_FLAGS) --data $(DATA) \
	    --out $(PIPELINE)/sft-tiny $(if $(wildcard $(PIPELINE)/sft-tiny/config.yaml),--resume)

$(PIPELINE)/rl-tiny/result.json: $(PIPELINE)/sft-tiny/result.json
	$(BIN)/dragon rl --preset tiny $(RL_FLAGS) --model $(PIPELINE)/sft-tiny --data $(DATA) \
	    --out $(PIPELINE)/rl-tiny $(if $(wildcard $(PIPELINE)/rl-tiny/config.yaml),--resume)

$(PIPELINE)/eval/summary.json: $(PIPELINE)/rl-tiny/result.json
	$(BIN)/dragon eval --model sft=$(PIPELINE)/sft-tiny --model rl=$(PIPELINE)/rl-tiny \
	    --data $(DATA) --out $(PIPELINE)/eval -k 4

# The built-in model (training/models/dragon-tiny, used without --model), as the model sweep
# chose it (docs/model-sweep): the smallest Llama (hidden 128, 2 layers, 4 heads: 0.6M
# parameters, 2.5 MB) trained by the pipeline's tiny SFT stage on the kept corpus' datasets
# (prompt format 2), 600 steps, the last checkpoint (validation loss does not choose: what the
# scripts do does).  About 10 minutes on 2 quiet cores.  DEFAULT_STAGE=rl ships the RL stage
# trained from it instead; the cost model beside the old model is kept.  It trains on the
# datasets the shipped model was trained on: the kept corpus' as they stood at commit
# DEFAULT_DATA_COMMIT (its first 489 workloads), read out of git, so that the corpus' datasets
# can be rebuilt from more workloads without changing what this target makes;
# DEFAULT_DATA=corpus/llvm trains on the datasets as they are now.
DEFAULT_RUNS ?= $(PIPELINE)/default-model
DEFAULT_DATA_COMMIT ?= cd7632a
DEFAULT_DATA ?= $(DEFAULT_RUNS)/data-$(DEFAULT_DATA_COMMIT)
DEFAULT_SFT_FLAGS ?= --hidden-size 128 --layers 2 --heads 4 --max-steps 600 --save-steps 200 \
	--no-keep-best
DEFAULT_RL_FLAGS ?= --max-steps 90 --save-steps 10
DEFAULT_STAGE ?= sft
MODEL_FILES := config.json generation_config.json model.safetensors tokenizer.json \
	tokenizer_config.json
default-model: | $(STAMP)
	$(if $(filter $(DEFAULT_RUNS)/data-%,$(DEFAULT_DATA)),test -f $(DEFAULT_DATA)/refinement/dataset_dict.json || \
	    { rm -rf $(DEFAULT_DATA) && mkdir -p $(DEFAULT_DATA) && \
	      git archive $(DEFAULT_DATA_COMMIT) corpus/llvm/construction corpus/llvm/refinement | \
	      tar -x -C $(DEFAULT_DATA) --strip-components=2; })
	$(MAKE) $(DEFAULT_RUNS)/$(DEFAULT_STAGE)-tiny/result.json PIPELINE=$(DEFAULT_RUNS) \
	    DATA=$(DEFAULT_DATA) SFT_FLAGS="$(DEFAULT_SFT_FLAGS)" RL_FLAGS="$(DEFAULT_RL_FLAGS)"
	rm -rf training/models/dragon-tiny.new && mkdir -p training/models/dragon-tiny.new
	cd $(DEFAULT_RUNS)/$(DEFAULT_STAGE)-tiny/final && \
	    cp $(MODEL_FILES) $(CURDIR)/training/models/dragon-tiny.new/
	for f in $(COST_MODEL_FILES); do if [ -f training/models/dragon-tiny/$$f ]; then \
	    cp training/models/dragon-tiny/$$f training/models/dragon-tiny.new/; fi; done
	rm -rf training/models/dragon-tiny && mv training/models/dragon-tiny.new training/models/dragon-tiny

# The cost model that has already seen search (codegen.search.cost_model): MetaSchedule's
# XGBModel trained on every record of the kept corpus, shipped beside the built-in model with
# its report (how it ranks the candidates of workloads it was not trained on, K-fold, against
# the untrained model).  A few minutes on 2 cores for the corpus's first hundreds of records.
COST_MODEL_RECORDS ?= corpus/llvm
COST_MODEL_FLAGS ?= --folds 5
COST_MODEL_FILES := cost_model.tar cost_model.json
cost-model: $(STAMP)
	$(BIN)/dragon cost-model --records $(COST_MODEL_RECORDS) \
	    --out training/models/dragon-tiny/cost_model.tar $(COST_MODEL_FLAGS)

# The kept corpus (corpus/llvm, see corpus/README.md).  corpus-grow searches N more of its
# listed workloads, the cheapest first (15 to 50 seconds each on 2 cores, the heavier ones
# last; kill -9 loses nothing and the same command continues; FAMILIES="matmul dense" grows
# only those); corpus-datasets rebuilds its Hugging Face datasets and card from the kept
# records, searching nothing.
CORPUS ?= corpus/llvm
N ?= 10
CORPUS_RUN = $(BIN)/dragon datagen --preset tiny --sample 1000 --out $(CORPUS)
corpus-grow: $(STAMP)
	$(CORPUS_RUN) --records-only --grow $(N) --cheapest-first --pack \
	    $(if $(FAMILIES),--grow-families $(FAMILIES))

corpus-datasets: $(STAMP)
	$(CORPUS_RUN) --grow 0
