# Two commands, from nothing: `make bench` (the main job) and `make test` (the whole suite).
# `make sglang` builds .venv-sglang, where `radixkv bench --sglang` runs SGLang's own radix caches
# (radixkv/bench/sglang_harness.py; SGLang from PyPI with --no-deps, nothing of it copied).
#
# torch is pinned in constraints.txt. TORCH_BUILD picks its build:
#   auto (default): cpu when this machine shows no NVIDIA GPU (no nvidia-smi, no /dev/nvidia0), else cuda
#   cpu:  PyTorch's CPU-only wheel from $(TORCH_CPU_INDEX); if that index cannot be reached
#         (5 s timeout, no retries), the default index (PyPI, or whatever pip is configured to use)
#   cuda: the default index (on Linux x86_64 PyPI's torch is the CUDA build)
# e.g. `make test TORCH_BUILD=cpu` or `TORCH_BUILD=cuda make bench`; `make clean` first to switch.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := $(shell sed -n "s/^torch==//p" constraints.txt)
TORCH_BUILD ?= auto
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

ifeq ($(TORCH_BUILD),auto)
  HAVE_NVIDIA := $(shell command -v nvidia-smi >/dev/null 2>&1 || test -e /dev/nvidia0 && echo yes)
  TORCH_BUILD := $(if $(HAVE_NVIDIA),cuda,cpu)
endif
ifeq ($(filter $(TORCH_BUILD),cpu cuda),)
  $(error TORCH_BUILD=$(TORCH_BUILD): use auto, cpu or cuda)
endif

SGLANG_VENV := .venv-sglang
SGLANG_VERSION := 0.5.23
# SGLang's wheel depends on a whole GPU serving stack; importing its radix caches (and the Rust
# TreeCore) on a CPU needs only these, so sglang is installed with --no-deps and they beside it.
SGLANG_DEPS := sortedcontainers numpy orjson psutil pybase64 requests urllib3 idna certifi charset_normalizer \
  packaging pillow starlette anyio sniffio msgspec pydantic pydantic_core typing_inspection annotated_types \
  pyzmq tqdm ipython traitlets pygments aiohttp multidict attrs yarl propcache aiohappyeyeballs aiosignal \
  frozenlist "transformers==5.19.0" "tokenizers==0.23.2" huggingface_hub httpx httpcore h11 pyyaml \
  safetensors regex filelock fsspec jinja2 markupsafe sympy mpmath networkx "apache-tvm-ffi==0.1.11" dill httpx2 httpcore2 truststore \
  sentencepiece compressed_tensors loguru gguf "openai==2.8.0" distro jiter partial_json_parser \
  typing_extensions triton
SGLANG_STAMP := $(SGLANG_VENV)/.installed

.PHONY: bench test install clean sglang

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
ifeq ($(TORCH_BUILD),cpu)
	$(BIN)/pip install -q --timeout 5 --retries 0 --index-url $(TORCH_CPU_INDEX) torch==$(TORCH_VERSION) \
	  || { echo "$(TORCH_CPU_INDEX) unreachable: torch $(TORCH_VERSION) from the default index"; \
	       $(BIN)/pip install -q torch==$(TORCH_VERSION); }
else
	$(BIN)/pip install -q torch==$(TORCH_VERSION)
endif
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench,build]'
	touch $(STAMP)

# The compiled core (radixkv/build.py: mypyc, from the same .py files, with radixkv/_runs_native.c
# beside it), rebuilt when a core source changes. Without a working C compiler or the Python headers,
# or with RADIXKV_PURE_PYTHON=1, it prints one line and the same files run interpreted; it never fails
# the install. (Its stamp is written only by a successful build, so a skipped build is tried again,
# one line, next time.)
CORE_STAMP := radixkv/_core_build.txt
CORE_SRC := $(wildcard radixkv/*.py radixkv/*.c radixkv/pools/*.py radixkv/radix/*.py radixkv/eviction/*.py \
  radixkv/events/*.py)

$(CORE_STAMP): $(STAMP) $(CORE_SRC) pyproject.toml
	$(BIN)/python -m radixkv.build

install: $(STAMP) $(CORE_STAMP)

$(SGLANG_STAMP): Makefile constraints.txt
	$(PY) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/pip install -q --upgrade pip
	$(SGLANG_VENV)/bin/pip install -q --timeout 5 --retries 0 --index-url $(TORCH_CPU_INDEX) torch==$(TORCH_VERSION) \
	  || $(SGLANG_VENV)/bin/pip install -q torch==$(TORCH_VERSION)
	$(SGLANG_VENV)/bin/pip install -q --no-deps sglang==$(SGLANG_VERSION) $(SGLANG_DEPS)
	$(SGLANG_VENV)/bin/python radixkv/bench/sglang_harness.py --check
	touch $@

sglang: $(SGLANG_STAMP)

bench: install
	$(BIN)/radixkv bench

test: install
	$(BIN)/python -m pytest -n auto --dist loadfile  # one worker per core, each test file on one worker

clean:
	rm -rf $(VENV) $(SGLANG_VENV) build *.egg-info $(CORE_STAMP)
	find radixkv -name '*.so' -delete  # a compiled core (python -m radixkv.build), if one was built
