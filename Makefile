# Two commands, from nothing: `make bench` (the main job) and `make test` (the whole suite).
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

.PHONY: bench test install clean

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
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench]'
	touch $(STAMP)

install: $(STAMP)

bench: $(STAMP)
	$(BIN)/radixkv bench

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
