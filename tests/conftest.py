"""Shared fixtures (offline tiny models with random weights, a trained-on-the-fly tokenizer, the tiny model loaded for
scoring, the notebook modules' real-model sweep), the `sweep` and `cuda` marks, and the suite's running order: with
pytest-xdist, each worker has a core of its own; the long tests start first; the end of the run prints the time per tier
and the slowest tests, and warns when the suite outgrows its time budget."""
from __future__ import annotations

import os
import time
from collections import defaultdict

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def _pin_worker():
    """Under pytest-xdist, pin each worker to its own share of the CPUs this process may use, before numpy and torch
    are imported.

    Every library in a worker then sees that share: BLAS and OpenMP (their thread counts are fixed when they load, so
    the pin and the thread counts come first), torch's thread count (``models.set_threads`` reads the affinity), and
    the kernels and Rscript processes the worker starts (they inherit both). Two workers on two cores then never
    fight over a core, which costs far more than they gain: threads that share one core spin while they wait (a
    numpy solve that loaded two BLAS threads and was pinned to one core afterwards runs 13 times slower).
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < count:
        return None
    share = set(cpus[int(worker.removeprefix("gw")) % count::count])
    os.sched_setaffinity(0, share)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(len(share))
    return share


_SHARE = _pin_worker()

import pytest  # noqa: E402
import torch  # noqa: E402

if _SHARE:
    torch.set_num_threads(len(_SHARE))

# The whole suite (pytest alone, both workers) should stay within this many seconds on a 2-core host, so that CI
# (setup and the R install included) stays far inside its limit. Over it, the summary says so loudly.
BUDGET_S = float(os.environ.get("NBUTILS_TEST_BUDGET_S", 1500))
_STARTED = time.time()


def pytest_configure(config):
    """The suite's own marks (each xdist worker is pinned to its CPUs when this file loads)."""
    config.addinivalue_line("markers", "sweep(file, **kwargs): the sweep file (and run_sweep arguments) whose run the "
                            "module's `swept` fixture holds")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")


def pytest_runtest_setup(item):
    """A test marked `cuda` is skipped where torch sees no CUDA GPU."""
    if item.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")



def _tier(keywords) -> str:
    return "slow" if "slow" in keywords else "notebooks" if "notebooks" in keywords else "fast"


def pytest_collection_modifyitems(config, items):
    """Long tests first (notebook runs, then slow statistics, then the fast tier), each tier in file order, so that
    with two workers the long ones overlap instead of one of them running alone at the end."""
    rank = {"notebooks": 0, "slow": 1, "fast": 2}
    items.sort(key=lambda item: rank[_tier(item.keywords)])


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Time per tier (summed over tests) and the wall time of the whole run, against the budget."""
    per_tier: dict[str, float] = defaultdict(float)
    counted = set()
    for reports in terminalreporter.stats.values():
        for r in reports:
            if getattr(r, "when", None) in ("setup", "call", "teardown") and (r.nodeid, r.when) not in counted:
                counted.add((r.nodeid, r.when))
                per_tier[_tier(r.keywords)] += r.duration
    wall = time.time() - _STARTED
    tiers = ", ".join(f"{t} {per_tier[t] / 60:.1f} min" for t in ("fast", "notebooks", "slow") if t in per_tier)
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT") or getattr(config.option, "numprocesses", None) or 1
    terminalreporter.write_sep("=", "test time")
    terminalreporter.write_line(f"wall {wall / 60:.1f} min with {workers} worker(s); test time by tier: {tiers}")
    if wall > BUDGET_S:
        terminalreporter.write_line(
            f"WARNING: the suite took {wall / 60:.1f} min, over its budget of {BUDGET_S / 60:.0f} min "
            "(NBUTILS_TEST_BUDGET_S). CI has a hard limit: find the new slow tests in the durations above and cut "
            "their repeated work before adding more.", red=True, bold=True)

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus() -> list[str]:
    from nbutils.studies.monotonicity.dataset import generate_prompts

    df = generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=6, n_examples=6)
    return df["text"].tolist() + ["Yes", "No", "Yes indeed", "No never"] * 50


def _load_benchmark(name: str):
    """A script under ``benchmarks/`` imported as a module of its own name (its dataclasses look it up there)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("calibration")``: a benchmark script as a module, for tests of its simulations."""
    return _load_benchmark


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE tokenizer (vocab ≈ 500) with BOS and a ChatML-like template; no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer):
    """A 2-layer Llama (rotary positions, grouped-query attention) with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      bos_token_id=tiny_tokenizer.bos_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_tokenizer):
    """A 2-layer GPT-2 (absolute position embeddings, so left padding must pass position ids)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=len(tiny_tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=4096,
                     bos_token_id=tiny_tokenizer.bos_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """The tiny Llama and tokenizer saved as a local Hugging Face folder (loads like any local model)."""
    d = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A run directory holding a small generated prompts file (8 concepts × conditions × 4 prompts)."""
    from nbutils import artifacts
    from nbutils.paths import prompts_path
    from nbutils.studies.monotonicity.dataset import generate_prompts

    run = tmp_path_factory.mktemp("run")
    params = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
                  prompts_per_concept=6, n_examples=6, seed=3)
    artifacts.write_dataset(generate_prompts(**params), prompts_path(run), {"parameters": params})
    return run


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    """The tiny Llama loaded as a run loads a model (float32 on the CPU), once per module."""
    from nbutils.engine.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=None)


@pytest.fixture(scope="module")
def swept(request, tmp_path_factory):
    """``(run, report)`` of the sweep named by the module's ``pytest.mark.sweep(file, **kwargs)`` (a path under the
    repository, kwargs for ``run_sweep``), run once per module: the notebook tests' real-model run."""
    from nbutils.paths import repo_root
    from nbutils.sweep import run_sweep

    marker = request.node.get_closest_marker("sweep")
    if marker is None:
        raise LookupError(f"{request.node.nodeid}: `swept` needs a module mark pytest.mark.sweep(<sweep file>)")
    sweep_file = repo_root() / marker.args[0]
    run = tmp_path_factory.mktemp(sweep_file.stem.replace("_", "-"))
    return run, run_sweep(sweep_file, run_dir=str(run), **marker.kwargs)


def base_requirements(root) -> list[str]:
    """The base install's requirements (pyproject's ``dependencies``, no extras)."""
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]


def requirement_closure(requirements: list[str]) -> list:
    """The installed distributions that ``requirements`` need, recursively (extras and markers honoured)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen, todo, dists = set(), [(Requirement(r), "") for r in requirements], []
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = req.name.lower().replace("_", "-")
        key = (name, tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(req.name)
        if name not in {d.metadata["Name"].lower().replace("_", "-") for d in dists}:
            dists.append(dist)
        for sub in dist.requires or []:
            sub_req = Requirement(sub)
            for e in ("", *req.extras):
                todo.append((sub_req, e))
    return dists


@pytest.fixture(scope="session")
def package_source(tmp_path_factory):
    """A clean copy of what the package is built from, as ``pip install git+…`` would clone it: a build writes
    nothing in the repository."""
    import shutil

    from nbutils import paths

    root, src = paths.repo_root(), tmp_path_factory.mktemp("package") / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info", "build")
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, src / name)
    for name in ("nbutils", *paths.SHIPPED):
        shutil.copytree(root / name, src / name, ignore=ignore)
    return src


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory, package_source):
    """A real base install: a fresh venv holding this package (built as a wheel, not editable) and only the
    distributions its base requirements need, linked from this environment, so ``import torch`` fails in it.

    Returns (python, env): the venv's interpreter and an environment for subprocesses (offline, the venv's own
    ``python3`` kernel, no PYTHONPATH).
    """
    import subprocess
    import sys
    from pathlib import Path

    from nbutils import paths

    root, tmp = paths.repo_root(), tmp_path_factory.mktemp("base_venv")

    def run(cmd, **kw):
        done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "wheel",
         package_source])
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    deps = tmp / "deps"  # the base requirements' distributions, linked file by top-level entry
    deps.mkdir()
    for dist in requirement_closure(base_requirements(root)):
        base = Path(dist.locate_file(""))
        for top in {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if (base / top).exists() and not (deps / top).exists():
                (deps / top).symlink_to(base / top)
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    (purelib / "_base_deps.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NBUTILS_ROOT", "JUPYTER_PATH")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               JUPYTER_DATA_DIR=str(tmp / "jupyter"))  # no user kernelspec: python3 is the venv's own interpreter
    wheel = next((tmp / "wheel").glob("*.whl"))
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel], env=env)
    return python, env


